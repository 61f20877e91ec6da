"""A request's run: its worker thread, its progress and its errors as one line (``running``), the
events a tab listens to (``listen``), the runs in progress and their stop signals (``runs``), and an
API cancel or a closed page stopping its run at once (``cancels``).

Import the modules themselves (``from nstcam.app.run.running import endpoint``): this package
re-exports nothing, so that :mod:`nstcam.app.config` can hold the runs registry without a cycle.
"""

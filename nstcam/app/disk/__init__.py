"""What the app keeps on disk and whose it is: each client reads only its own uploads and results
(``access``), the results written once (``files``), this process's files told from other servers'
in a shared upload folder (``owned``), every file Gradio caches recorded (``cache``), and all of
them removed when the process stops, whatever stops it (``shutdown``).

Import the modules themselves (``from nstcam.app.disk.access import ACCESS``); the guard
(:func:`nstcam.app.guard.install`) installs what here patches Gradio.
"""

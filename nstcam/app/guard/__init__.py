"""The guard: a stranger's request admitted at a bounded cost, reading only what is its own.

One function installs all of it on an app, :func:`install`; :func:`launch_kwargs` is what
``demo.launch`` needs from it, and :func:`start_process` what a serving process needs before its
first request. "Why was my request refused?" is answered in this folder:

========================================  ==============================================
a refusal                                 where
========================================  ==============================================
body too large, too many uploads, an      ``limits`` (:class:`~nstcam.app.guard.limits.RequestLimits`,
unknown or malformed event                every limit a named constant there)
a client's upload quota                   ``quota``
a value too long, deep, large or odd; a   ``gate`` (every endpoint's inputs, where Gradio
path that is not an upload                first sees them; the paths in ``inputs``)
a picture too large, thin or many-parted  ``inputs`` and ``checks`` (from its header)
a number outside this server's range      ``checks``
a run that would cost too much            ``cost`` (every endpoint's estimate), ``shapes``
                                          (what a shape costs), ``cam_limits``
too many live streams, a frame too large  ``streams``
an upload's files when it is cut short    ``uploads``
========================================  ==============================================

What it installs on Gradio goes through :mod:`nstcam.app.gradio_internals`, which lists every
patch and the versions it was tested on.
"""

from nstcam.app.guard._install import install, launch_kwargs, start_process

__all__ = ["install", "launch_kwargs", "start_process"]

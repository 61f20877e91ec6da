"""Stopping the server at any moment: a signal (a Space restarting, ``kill``, Ctrl+C) ends the process
with exit status 0, after every run in progress was told to stop and this process's uploads, cached
results and results folder were removed.

Python's own exit would run the interpreter's finalisers while a run's worker thread is still
inside PyTorch's C++ code, and the process aborts there ("terminate called without an active
exception", status -6) with its files left behind. So the handler cleans up first, then leaves
with ``os._exit(0)``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nstcam.app.disk.owned import OWNED, others_files, prune_empty

__all__ = ["end_children", "remove_own_files", "stop_on_signals"]

logger = logging.getLogger("nstcam.app")


def remove_own_files(demo: Any, upload_folder: str | os.PathLike, since: float) -> int:
    """Deletes the files this process made in ``demo``'s upload folder (uploads, cached results:
    :data:`nstcam.app.disk.owned.OWNED`, each still the inode it made), any other file Gradio lists for
    ``demo`` made since ``since`` (a time) that no other live server's ledger claims, the folders
    they leave empty there and empty folders made since ``since``; returns how many files. Other
    processes' files stay, even where they have the same name."""
    root = Path(os.path.realpath(upload_folder))
    files = {f for temp_set in getattr(demo, "temp_file_sets", ()) for f in list(temp_set)}
    files -= others_files(files)  # older than this process, or another live server's
    removed = OWNED.remove_all()
    for name in files:
        path = Path(name)
        try:
            if path.is_symlink() or path.stat().st_ctime < since:
                continue
            path.unlink()
            removed += 1
        except OSError:
            continue
        prune_empty(path.parent, root)
    for folder in root.iterdir() if root.is_dir() else ():
        try:
            if folder.is_dir() and not folder.is_symlink() and folder.stat().st_ctime >= since:
                folder.rmdir()  # only if empty
        except OSError:
            continue
    return removed


def end_children(grace: float = 2.0) -> int:
    """Ends this process's worker processes (ZeroGPU's, forked per GPU and kept for reuse): they
    would outlive the ``os._exit`` below, each holding a copy of the server's networks (2.7 GB each
    with random weights on a CPU). SIGTERM first (a worker then leaves its loop), SIGKILL after
    ``grace`` seconds; returns how many."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
    return len(children)


def stop_on_signals(
    models: Any, holder: dict[str, Any], signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)
) -> None:
    """Installs the handler: runs stopped, server closed, files removed, exit 0.

    Args:
        models: the app's :class:`nstcam.app.Models` (its runs and its results folder).
        holder: ``holder["demo"]`` is the Blocks once built (a signal before that only removes the
            results folder).
        signals: the signals handled.
    """

    started = time.time() - 1.0

    def handle(signum: int, _frame: Any) -> None:
        from nstcam.app.gradio_internals import upload_folder

        logger.info("%s: stopping the server", signal.Signals(signum).name)
        try:
            stopped = models.runs.cancel_all()
            demo = holder.get("demo")
            removed = 0
            if demo is not None:
                demo.close(verbose=False)
                removed = remove_own_files(demo, upload_folder(), started)
            models.outbox.close()
            ended = end_children()
            logger.info(
                "stopped %d run(s); removed %d upload(s) and cached file(s); ended %d worker process(es)",
                stopped,
                removed,
                ended,
            )
        except Exception:  # the process exits 0 whatever went wrong here
            logger.exception("cleaning up on %s failed", signal.Signals(signum).name)
        finally:
            logging.shutdown()
            os._exit(0)

    for sig in signals:
        signal.signal(sig, handle)

"""The thread that owns a compiling engine's work.

``torch.compile(mode="reduce-overhead")`` records CUDA graphs in trees that belong to the thread that
first ran them: on torch 2.4-2.13 calling the function from another thread fails in
``cudagraph_trees`` (pytorch#123177), and on 2.14 each new thread records graphs of its own into its
own memory pool. The web app starts a thread per request, so a compiling engine instead runs every
call (``stylize``, ``stylize_batch``, ``warmup``) on one long-lived thread of its own: the request
threads hand it the call and wait. Calls on one engine are therefore serialised, which a single GPU
does anyway; progress callbacks and cancellation work as before (they run on the owner thread).
Engines that do not compile run calls on the caller's thread, concurrently.

The owner thread keeps one engine's graphs on one thread; it does not keep two engines apart. A
compiled function's graphs are torch.compile's cache entries, kept per code object, so each engine's
step is given a code object of its own (``_compiled._own_code``): otherwise a second engine's first
call would be served the first engine's compiled graph and static buffers, from another thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Owner"]

T = TypeVar("T")


class Owner:
    """A daemon thread, started on first use, that runs the calls handed to :meth:`call` in order.

    Args:
        name: the thread's name (shown in tracebacks and profilers).
    """

    def __init__(self, name: str = "nstcam-compiled") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.calls = 0

    @property
    def ident(self) -> int | None:
        """The owner thread's id, once started."""
        return self._thread.ident if self._thread is not None else None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs ``fn(*args, **kwargs)`` on the owner thread and returns its result (or raises its
        exception, traceback included). A call made from the owner thread itself runs in place."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        done = threading.Event()
        box: dict[str, Any] = {}
        self._jobs.put((fn, args, kwargs, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _loop(self) -> None:
        while True:
            fn, args, kwargs, box, done = self._jobs.get()
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = e
            finally:
                self.calls += 1
                done.set()
                del fn, args, kwargs, box  # nothing of a finished call is kept alive here

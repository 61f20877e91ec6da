"""The runs in progress, one stop signal each, by browser session: what a Cancel button, a closed
page, the server stopping or a run's time budget sets."""

from __future__ import annotations

import threading

import gradio as gr

__all__ = ["RunStop", "Runs"]


class RunStop(threading.Event):
    """One run's stop signal: set by its Cancel button, a closed connection, the server stopping, or
    its time budget running out (then :attr:`reason` says so); the engine stops at its next step.

    Args:
        budget: seconds the run may take (the server's ``max_request_seconds``); None: no budget.
    """

    def __init__(self, budget: float | None = None) -> None:
        super().__init__()
        self.budget = budget
        self.reason: str | None = None
        self._timer: threading.Timer | None = None
        if budget is not None:
            self._timer = threading.Timer(budget, self.expire)
            self._timer.daemon = True
            self._timer.start()

    def expire(self) -> None:
        """The run's time is up: it stops at its next step, saying why."""
        self.reason = (
            f"stopped at this server's limit of {self.budget:g} s per request (NSTCAM_MAX_REQUEST_SECONDS)"
        )
        self.set()

    def close(self) -> None:
        """The run is over: its budget's timer goes (idempotent)."""
        if self._timer is not None:
            self._timer.cancel()


class Runs:
    """The runs in progress, by browser session, so that the Cancel button can stop its own run.

    Args:
        budget: seconds each run may take before it is stopped (None: no limit).
    """

    def __init__(self, budget: float | None = None) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._stops: dict[tuple[str, str], RunStop] = {}

    def start(self, kind: str, request: gr.Request | None) -> RunStop:
        stop = RunStop(self.budget)
        with self._lock:
            self._stops[(kind, _session(request))] = stop
        return stop

    def cancel(self, kind: str, request: gr.Request | None) -> bool:
        """Stops the run of ``kind`` of the request's session, if any (the page's Cancel button)."""
        return self.cancel_session(kind, _session(request))

    def cancel_session(self, kind: str, session: str) -> bool:
        """Stops the run of ``kind`` of the session ``session``, if any; whether there was one."""
        with self._lock:
            stop = self._stops.get((kind, session))
        if stop is not None:
            stop.set()
        return stop is not None

    def cancel_all(self) -> int:
        """Stops every run in progress at its next step (the server is stopping); how many."""
        with self._lock:
            stops = list(self._stops.values())
        for stop in stops:
            stop.set()
        return len(stops)

    def finish(self, kind: str, request: gr.Request | None, stop: threading.Event) -> None:
        if isinstance(stop, RunStop):
            stop.close()
        with self._lock:
            if self._stops.get((kind, _session(request))) is stop:
                del self._stops[(kind, _session(request))]


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "-"

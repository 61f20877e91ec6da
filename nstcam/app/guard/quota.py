"""How many upload bytes one client may have accepted in a window of time.

Gradio caps each file and :class:`nstcam.app.guard.limits.RequestLimits` each upload request, but not a
client: 5 requests of 3 x 19 MB put +272 MB on disk in 5 s (about 3 GB a minute from one client),
kept until the 30-minute sweep. :class:`UploadQuota` counts the bytes of each client's accepted
uploads over the last ``window_s`` seconds and refuses a request (HTTP 429, one line) that would go
over, from its declared length before a byte is read, or as it streams past the rest of its share.

A client is its address as the nearest proxy saw it: the last ``X-Forwarded-For`` entry where the
connection comes from a proxy on this machine or its private network (a Space's), else the
connection's own address (a stranger's own ``X-Forwarded-For`` is not read: it could name anyone).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import deque
from typing import Any

__all__ = ["UploadQuota", "WindowBudget", "client_of", "client_of_request", "upload_quota"]


def client_of(scope: dict[str, Any]) -> str:
    """The client an ASGI request comes from (see the module)."""
    client = scope.get("client")
    peer = str(client[0]) if client else "-"
    if _private(peer):
        for key, value in scope.get("headers", ()):
            if key == b"x-forwarded-for":
                last = value.decode("latin-1").split(",")[-1].strip()
                if last:
                    return last[:64]
    return peer


def client_of_request(request: Any) -> str:
    """:func:`client_of` for a handler's ``gr.Request`` (its headers and peer address)."""
    host = getattr(getattr(request, "client", None), "host", None) or "-"
    headers = getattr(request, "headers", None) or {}
    forwarded = headers.get("x-forwarded-for") if hasattr(headers, "get") else None
    raw = [(b"x-forwarded-for", forwarded.encode("latin-1"))] if forwarded else []
    return client_of({"client": (host, 0), "headers": raw})


def _private(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_private or ip.is_loopback


class WindowBudget:
    """How much of something (bytes, seconds of work) each client may use over a sliding window: a
    budget that starting again (a new request, a new stream) cannot reset.

    Args:
        limit: most one client may use in a window.
        window_s: the window, seconds.
        clock: the time (tests pass their own).
    """

    def __init__(self, limit: float, window_s: float = 600.0, clock: Any = time.monotonic) -> None:
        self.limit, self.window_s, self._clock = limit, float(window_s), clock
        self._lock = threading.Lock()
        self._used: dict[str, deque[tuple[float, float]]] = {}

    def left(self, client: str) -> float:
        """What ``client`` may still use in this window."""
        now = self._clock()
        with self._lock:
            q = self._used.get(client)
            while q and q[0][0] <= now - self.window_s:
                q.popleft()
            if q is not None and not q:
                del self._used[client]
            return self.limit - sum(n for _, n in q or ())

    def spend(self, client: str, n: float) -> None:
        """Counts ``n`` against ``client``."""
        if n <= 0:
            return
        with self._lock:
            self._used.setdefault(client, deque()).append((self._clock(), n))


class UploadQuota(WindowBudget):
    """Upload bytes per client per window (:class:`WindowBudget` of ``max_bytes``)."""

    def __init__(self, max_bytes: int, window_s: float = 600.0, clock: Any = time.monotonic) -> None:
        super().__init__(int(max_bytes), window_s, clock)
        self.max_bytes = int(max_bytes)

    def refusal(self, left: float, more: float) -> str:
        """The one-line refusal of ``more`` bytes from a client with ``left`` of its share (its words
        name the limit and when it frees up)."""
        used_mb = (self.max_bytes - left + more) / 2**20
        return (
            f"uploads from one client may hold at most {self.max_bytes / 2**20:.0f} MB in "
            f"{self.window_s / 60:g} minutes on this server ({used_mb:.0f} MB would go over it); "
            "wait a few minutes and try again"
        )


def upload_quota(config: Any) -> UploadQuota:
    """Upload bytes per client in 10 minutes (the server's ``max_client_upload_mb``)."""
    return UploadQuota(int(config.max_client_upload_mb * 2**20), window_s=600.0)

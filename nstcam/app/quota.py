"""How many upload bytes one client may have accepted in a window of time.

Gradio caps each file and :class:`nstcam.app.limits.RequestLimits` each upload request, but not a
client: 5 requests of 3 x 19 MB put +272 MB on disk in 5 s (about 3 GB a minute from one client),
kept until the 30-minute sweep. :class:`UploadQuota` counts the bytes of each client's accepted
uploads over the last ``window_s`` seconds and refuses a request (HTTP 429, one line) that would go
over, from its declared length before a byte is read, or as it streams past the rest of its share.

A client is its address as the nearest proxy saw it: the last ``X-Forwarded-For`` entry where the
server sits behind one (a Space), else the connection's own address.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

__all__ = ["UploadQuota", "client_of"]


def client_of(scope: dict[str, Any]) -> str:
    """The client an ASGI request comes from (see the module)."""
    for key, value in scope.get("headers", ()):
        if key == b"x-forwarded-for":
            last = value.decode("latin-1").split(",")[-1].strip()
            if last:
                return last[:64]
    client = scope.get("client")
    return str(client[0]) if client else "-"


class UploadQuota:
    """Upload bytes per client per window.

    Args:
        max_bytes: most bytes one client's accepted uploads may hold in a window.
        window_s: the window, seconds.
        clock: the time (tests pass their own).
    """

    def __init__(self, max_bytes: int, window_s: float = 600.0, clock: Any = time.monotonic) -> None:
        self.max_bytes, self.window_s, self._clock = int(max_bytes), float(window_s), clock
        self._lock = threading.Lock()
        self._used: dict[str, deque[tuple[float, int]]] = {}

    def left(self, client: str) -> int:
        """Bytes ``client`` may still upload in this window."""
        now = self._clock()
        with self._lock:
            q = self._used.get(client)
            while q and q[0][0] <= now - self.window_s:
                q.popleft()
            if q is not None and not q:
                del self._used[client]
            return self.max_bytes - sum(n for _, n in q or ())

    def spend(self, client: str, n: int) -> None:
        """Counts ``n`` bytes of an accepted upload against ``client``."""
        if n <= 0:
            return
        with self._lock:
            self._used.setdefault(client, deque()).append((self._clock(), int(n)))

    def refusal(self, used_mb: float) -> str:
        """The one-line refusal (its words name the limit and when it frees up)."""
        return (
            f"uploads from one client may hold at most {self.max_bytes / 2**20:.0f} MB in "
            f"{self.window_s / 60:g} minutes on this server ({used_mb:.0f} MB would go over it); "
            "wait a few minutes and try again"
        )

"""A local stand-in of ZeroGPU's device API, and the app launched under the real ``spaces`` package in
ZeroGPU mode against it (tests/test_zerogpu.py).

The ``spaces`` package on a ZeroGPU Space talks to a device API (``SPACES_ZERO_DEVICE_API_URL``):
``POST /startup-report`` once the app is up (only where a ``@spaces.GPU`` function was decorated),
then per call ``POST /schedule`` (the duration asked and the visitor's ``X-IP-Token``; answered with
an allow token, the GPU's index and whether its last worker is idle), ``POST /allow`` from the
forked worker, ``POST /release`` when the call ends. :class:`DeviceAPI` answers those on loopback
and records every request. :func:`main` (``python tests/_zerogpu.py ARGS``) runs ``app.py`` with the
one thing a CPU cannot do replaced: the forked worker's CUDA start (``spaces.zero.torch``'s
``init`` and ``move``), which becomes a no-op; everything else is the real package.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


class DeviceAPI:
    """ZeroGPU's device API on ``127.0.0.1:<port>``: every request recorded in :attr:`calls` as
    ``(route, params)``; a GPU is always free (``/schedule`` answers at once)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._allowed: set[str] = set()
        self._n = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                url = urlsplit(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                body = api.answer(url.path, params)
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, route: str, params: dict[str, str]) -> dict | None:
        with self._lock:
            self.calls.append((route, params))
            if route == "/schedule":
                self._n += 1
                token = f"allow-{self._n}"
                idle = not self._allowed  # the GPU's last task was released: its worker may be reused
                self._allowed.add(token)
                return {"idle": idle, "nvidiaIndex": 0, "nvidiaUUID": "GPU-stand-in", "allowToken": token}
            if route == "/release":
                self._allowed.discard(params.get("allowToken", ""))
            return None

    def routes(self, route: str) -> list[dict[str, str]]:
        with self._lock:
            return [p for r, p in self.calls if r == route]

    def close(self) -> None:
        self.server.shutdown()


def main(argv: list[str]) -> None:
    """``app.main(argv)`` under ZeroGPU, the forked worker's CUDA start a no-op (on a CPU)."""
    import spaces  # noqa: F401 - first, as on a Space: before torch touches CUDA
    import spaces.zero.torch as zero_torch

    zero_torch.init = lambda *args, **kwargs: None
    zero_torch.move = lambda *args, **kwargs: None
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import app

    app.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

"""How soon a cancelled style run frees the server's CPU, by each way a user cancels it.

    python tests/benchmarks/bench_cancel.py [--size 384] [--repeat 3]

Starts ``python app.py --random-weights --device cpu`` on a free port, runs ``/stylize`` at
``--size`` px (60 steps), and after the run's 4th update cancels it: with the page's Cancel button
(its event, the session's own), with an API cancel (``POST /gradio_api/cancel``, what
``gradio_client``'s ``job.cancel()`` sends), or by closing the connection. It reports the time from
the cancel to the server's process falling idle (CPU under 5 % over 0.25 s windows; the window that
first shows it counts, so each figure is late by up to 0.25 s) and the run's time per step. The goal
(issue 49): the worker is free within one step of the cancel.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "nstcam" / "assets" / "samples"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_after(pid: int, start: float, window: float = 0.25, limit: float = 60.0) -> float:
    while time.time() - start < limit:
        a = _cpu_seconds(pid)
        time.sleep(window)
        if (_cpu_seconds(pid) - a) / window < 0.05:
            return time.time() - start
    return float("inf")


def _upload(url: str, path: Path) -> dict:
    with open(path, "rb") as fh:
        r = httpx.post(url + "gradio_api/upload", files={"files": (path.name, fh)}, timeout=30)
    return {"path": r.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


def _events(url: str) -> tuple[int, list, int]:
    """/stylize's index and default values, and the index of the Style tab's Cancel button's event."""
    cfg = httpx.get(url + "config", timeout=10).json()
    comps = {c["id"]: c for c in cfg["components"]}
    deps = cfg["dependencies"]
    fn = next(i for i, d in enumerate(deps) if d.get("api_name") == "stylize")
    button = next(c["id"] for c in cfg["components"] if c["props"].get("elem_id") == "st-cancel")
    cancel = next(i for i, d in enumerate(deps) if [button, "click"] in [list(t) for t in d["targets"]])
    return fn, [comps[x]["props"].get("value") for x in deps[fn]["inputs"]], cancel


def one(url: str, pid: int, how: str, fn: int, data: list, cancel_fn: int) -> tuple[float, float]:
    session = uuid.uuid4().hex[:12]
    body = {"data": data, "fn_index": fn, "session_hash": session, "event_data": None}
    event = httpx.post(url + "gradio_api/queue/join", json=body, timeout=30).json()["event_id"]
    stream = httpx.stream("GET", url + f"gradio_api/queue/data?session_hash={session}", timeout=120)
    response = stream.__enter__()
    times = []
    for line in response.iter_lines():
        if "process_generating" in line:
            times.append(time.time())
            if len(times) == 4:
                break
    start = time.time()
    if how == "page button":
        join = {"data": [], "fn_index": cancel_fn, "session_hash": session, "event_data": None}
        httpx.post(url + "gradio_api/queue/join", json=join, timeout=30)
    elif how == "API cancel":
        httpx.post(
            url + "gradio_api/cancel", json={"session_hash": session, "fn_index": fn, "event_id": event}
        )
    else:
        stream.__exit__(None, None, None)
    idle = _idle_after(pid, start)
    if how != "closed connection":
        stream.__exit__(None, None, None)
    time.sleep(1.0)
    return idle, (times[-1] - times[1]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    port = _port()
    url = f"http://127.0.0.1:{port}/"
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_TEMP_DIR=tempfile.mkdtemp(prefix="bench-cancel-"),
    )
    log = open(Path(env["GRADIO_TEMP_DIR"]) / "app.log", "w")  # open for the server's lifetime
    cmd = [sys.executable, "app.py", "--random-weights", "--device", "cpu"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise SystemExit("the app did not start") from None
                time.sleep(0.5)
        fn, data, cancel_fn = _events(url)
        data[0], data[1] = _upload(url, SAMPLES / "chelsea.png"), _upload(url, SAMPLES / "brick.png")
        data[4], data[5] = args.size, 60
        sys.stdout.write(
            f"| cancelled by | freed after (s), median of {args.repeat} | runs | one step (s) |\n"
            "| --- | --- | --- | --- |\n"
        )
        for how in ("page button", "API cancel", "closed connection"):
            runs = [one(url, proc.pid, how, fn, data, cancel_fn) for _ in range(args.repeat)]
            idle = [r[0] for r in runs]
            step = statistics.median(r[1] for r in runs)
            shown = ", ".join(f"{s:.2f}" for s in idle)
            sys.stdout.write(f"| {how} | {statistics.median(idle):.2f} | {shown} | {step:.2f} |\n")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()

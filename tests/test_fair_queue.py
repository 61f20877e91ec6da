"""One visitor cannot fill the queue for everyone (issue 88.3): a few jobs per client and per address,
429 in one line past them, and each endpoint's waiting line taken in turns between addresses."""

from __future__ import annotations

import time
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from PIL import Image

import nstcam.app.gradio_internals as gi
from nstcam.app import AppConfig
from nstcam.app.disk.access import COOKIE
from nstcam.app.guard.fair import MAX_JOBS_PER_CLIENT, job_refusal, take_turns

PER_ADDRESS = 8  # the server's default (AppConfig.max_jobs_per_address)

# -- in process: the caps and the turns on a queue of stand-in events -------------------------------


def _scope(address: str, cookie: str | None) -> dict:
    headers = [(b"x-forwarded-for", address.encode())]
    if cookie:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    return {"type": "http", "client": ("127.0.0.1", 1), "headers": headers}


def _fn(line: str, api_name: str | bool = False):
    return SimpleNamespace(concurrency_id=line, api_name=api_name, fn=lambda: None)


class _Queue:
    def __init__(self, fns):
        self.event_queue_per_concurrency_id = {}
        self.active_jobs = [None, None]
        for f in fns:
            self.event_queue_per_concurrency_id.setdefault(f.concurrency_id, SimpleNamespace(queue=[]))


def _blocks(*lines: str):
    fns = {i: _fn(line, line) for i, line in enumerate(lines)}
    fns[len(fns)] = _fn("7")  # a quick page event of its own line: no job
    blocks = SimpleNamespace(fns=fns)
    blocks._queue = _Queue(fns.values())
    return blocks


def _event(blocks, line: str, scope: dict):
    fn = next(f for f in blocks.fns.values() if f.concurrency_id == line)
    return SimpleNamespace(fn=fn, concurrency_id=line, request=SimpleNamespace(scope=scope), closed=False)


def _join(blocks, line: str, scope: dict) -> str | None:
    app = SimpleNamespace(get_blocks=lambda: blocks)
    fn = next(f for f in blocks.fns.values() if f.concurrency_id == line)
    why = job_refusal({**scope, "app": app}, fn, PER_ADDRESS)
    if why is None:
        blocks._queue.event_queue_per_concurrency_id[line].queue.append(_event(blocks, line, scope))
    return why


def test_a_client_and_an_address_hold_a_few_jobs_each_and_others_still_join():
    blocks = _blocks("stylize", "gradcam")
    flood = _scope("203.0.113.5", "a" * 32)
    said = [_join(blocks, "stylize", flood) for _ in range(40)]
    assert said.count(None) == MAX_JOBS_PER_CLIENT
    assert set(said) - {None} == {
        f"one client may have at most {MAX_JOBS_PER_CLIENT} jobs queued or running on this server; "
        "wait for one to finish (or cancel it) first"
    }
    # a cookie per request (a client that drops them) is held by its address
    said = [_join(blocks, "gradcam", _scope("203.0.113.5", f"{i:032d}")) for i in range(40)]
    assert said.count(None) == PER_ADDRESS - MAX_JOBS_PER_CLIENT
    assert "one address may have at most" in said[-1] and "\n" not in said[-1]
    # another client joins both lines; a quick page event (no endpoint's line) is never counted
    other = _scope("198.51.100.7", "b" * 32)
    assert _join(blocks, "stylize", other) is None and _join(blocks, "gradcam", other) is None
    app = SimpleNamespace(get_blocks=lambda: blocks)
    assert job_refusal({**flood, "app": app}, blocks.fns[2], PER_ADDRESS) is None
    assert AppConfig(random_weights=True, device="cpu").max_jobs_per_address == PER_ADDRESS
    # a running job already answered (Gradio frees its worker a moment after the client has read
    # it and may ask again) is not counted
    third = _scope("192.0.2.9", "c" * 32)
    assert [_join(blocks, "gradcam", third) for _ in range(3)] == [None] * 3
    done = _event(blocks, "gradcam", third)
    done.nstcam_answered = True  # its completion was sent (nstcam.app.guard.fair.mark_answers)
    blocks._queue.active_jobs[0] = [done]
    assert _join(blocks, "gradcam", third) is None and _join(blocks, "gradcam", third) is not None


def test_each_line_is_taken_in_turns_between_addresses():
    blocks = _blocks("stylize")
    line = blocks._queue.event_queue_per_concurrency_id["stylize"].queue
    a, b, c = (_scope(ip, None) for ip in ("203.0.113.5", "198.51.100.7", "192.0.2.1"))
    blocks._queue.active_jobs[0] = [_event(blocks, "stylize", a)]  # A has one running
    for scope in (a, a, a, b, a, c, b):
        line.append(_event(blocks, "stylize", scope))
    order = [e.request.scope for e in line]
    take_turns(blocks)
    who = {id(a): "A", id(b): "B", id(c): "C"}
    assert [who[id(e.request.scope)] for e in line] == ["B", "C", "A", "B", "A", "A", "A"]
    assert [e.request.scope for e in line if e.request.scope is a] == [s for s in order if s is a]
    take_turns(blocks)  # already in turns: unchanged
    assert [who[id(e.request.scope)] for e in line] == ["B", "C", "A", "B", "A", "A", "A"]
    assert gi.waiting_lines(blocks)["stylize"] is line


# -- the live server: a flooding client, then another client's quick requests ---------------------


def _png(path, seed=0):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((48, 64, 3)) * 255).astype(np.uint8)).save(path)
    return path


def _file(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


def _client(server: str, address: str) -> httpx.Client:
    c = httpx.Client(base_url=server, timeout=120, headers={"x-forwarded-for": address})
    c.get("config").raise_for_status()
    return c


def _upload(c: httpx.Client, path) -> str:
    r = c.post("gradio_api/upload", files={"files": (path.name, path.read_bytes(), "image/png")})
    r.raise_for_status()
    return r.json()[0]


def _result(c: httpx.Client, api: str, event_id: str) -> tuple[str, float]:
    start = time.perf_counter()
    text = c.get(f"gradio_api/call/{api}/{event_id}").text
    events = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    return events[-1], time.perf_counter() - start


@pytest.mark.timeout(300)
def test_a_flooding_client_leaves_the_queue_to_others(server, tmp_path):
    flooder = _client(server, "203.0.113.5")
    photo = _upload(flooder, _png(tmp_path / "flood.png"))
    slow = {"content": _file(photo), "style": _file(photo), "size": 128, "steps": 20, "mode": "optimise"}
    answers = [flooder.post("gradio_api/call/v2/stylize", json=slow) for _ in range(40)]
    accepted = [r.json()["event_id"] for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(accepted) == MAX_JOBS_PER_CLIENT, [r.status_code for r in answers]
    assert {r.status_code for r in refused} == {429}
    assert all(len(r.json()["detail"].splitlines()) == 1 for r in refused)
    # another visitor: a Grad-CAM and a Fast stylisation, each answered within seconds (before:
    # 503 "Queue is full" on every endpoint, or 81 s behind the flooder's jobs)
    visitor = _client(server, "198.51.100.7")
    mine = _upload(visitor, _png(tmp_path / "mine.png", seed=1))
    r = visitor.post(
        "gradio_api/call/v2/gradcam", json={"image": _file(mine), "model": "resnet18", "top_k": 1}
    )
    assert r.status_code == 200, r.text
    said, cam_s = _result(visitor, "gradcam", r.json()["event_id"])
    assert said == "complete", said
    fast = {"content": _file(mine), "mode": "fast", "size": 128, "builtin_a": 0}
    r = visitor.post("gradio_api/call/v2/stylize", json=fast)
    assert r.status_code == 200, r.text
    said, fast_s = _result(visitor, "stylize", r.json()["event_id"])
    assert said == "complete", said
    flood_s = [_result(flooder, "stylize", e)[1] for e in accepted]
    assert cam_s < 20 and fast_s < 20, (cam_s, fast_s, flood_s)

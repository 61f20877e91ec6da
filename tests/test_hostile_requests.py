"""A public Space meets hostile requests: over raw HTTP, as an attacker sends them, against the live
app (random weights). Playlists never reach FFmpeg; no request can make the server do unbounded
work; a bad value gets one line naming the input, never a traceback, a server path or the value
whole; an API cancel frees the worker without stalling other users; SIGTERM mid-run exits 0 and
leaves none of the process's files behind."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from _media import write_clip
from conftest import HTTP, _free_port, app_env, launch_app, pattern
from test_media_safety import RED, _frames, playlists
from test_security import call, upload

from nstcam.app.disk.owned import ledger_path
from nstcam.app.guard.limits import MAX_CLASSES, MAX_ECHO, MAX_INT, MAX_ITEMS, MAX_TEXT


@pytest.fixture(scope="module")
def live(server, server_log, tmp_path_factory):
    """The live app's endpoints by name, and two uploaded images."""
    config = HTTP.get(server + "config", timeout=10).json()
    comps = {c["id"]: c for c in config["components"]}
    d = tmp_path_factory.mktemp("hostile")
    pattern(1, 64, 48).save(d / "content.png")
    pattern(2, 48, 48).save(d / "style.png")
    endpoints = {}
    for i, dep in enumerate(config["dependencies"]):
        inputs = [comps[x] for x in dep["inputs"]]
        endpoints.setdefault(str(dep.get("api_name")), []).append((i, inputs))
    return {
        "endpoints": endpoints,
        "dir": d,
        "content": upload(server, d / "content.png"),
        "style": upload(server, d / "style.png"),
    }


def _event(live, api_name: str, **values):
    """fn_index and the data of ``api_name`` with its defaults, the images uploaded and ``values``
    (by input label's position: the handler's parameter names)."""
    fn_index, inputs = live["endpoints"][api_name][0]
    data = [c["props"].get("value") for c in inputs]
    images = [j for j, c in enumerate(inputs) if c["type"] == "image"]
    for j, name in zip(images[:2], ("content", "style"), strict=False):
        data[j] = live[name]
    for j, v in values.items():
        data[int(j.removeprefix("i"))] = v
    return fn_index, data


def _log_since(log: Path, start: int) -> str:
    return log.read_text()[start:]


def test_video_inputs_refuse_playlists_under_any_name_and_real_clips_still_work(server, live, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    write_clip(private / "private.mp4", _frames(RED))
    write_clip(private / "private.ts", _frames(RED))
    video_events = [
        (name, i, inputs)
        for name, deps in live["endpoints"].items()
        for i, inputs in deps
        if any(c["type"] == "video" for c in inputs)
    ]
    assert len(video_events) == 4  # /stylize_video, /gradcam_video and the pages' buttons
    texts = playlists(private, tmp_path)
    refused = 0
    for name in ("hls_absolute.m3u8", "hls_relative.m3u8", "hls_file_url.m3u8", "dash.mpd", "list.ffconcat"):
        for as_name in (name, Path(name).stem + ".mp4"):
            f = tmp_path / as_name
            f.write_text(texts[name])
            sent = upload(server, f)
            for _, fn_index, inputs in video_events:
                data = [c["props"].get("value") for c in inputs]
                data[0] = sent  # the clip
                if inputs[1]["type"] == "image":  # stylising: a style, one step
                    data[1], data[3] = live["style"], 1
                msg = call(server, fn_index, data)
                out = msg["output"]
                # the API raises it; the page's button says it in the tab's Status and writes no clip
                said = out.get("error") or next((o for o in out.get("data", ()) if isinstance(o, str)), "")
                assert msg["success"] is False or not any(
                    isinstance(o, dict) and str(o.get("path", "")).endswith(".mp4") for o in out["data"]
                ), f"{as_name}: the server read it: {str(msg)[:300]}"
                error = said
                assert f"{as_name} is not a video file nstcam opens" in error, error
                assert str(tmp_path) not in error and "upload" not in error.split(":")[0]
                refused += 1
    assert refused == 5 * 2 * 4
    clip = write_clip(tmp_path / "real.mp4", _frames((30, 200, 30), n=3, w=64, h=48))
    fn_index, data = _event(live, "stylize_video", i0=upload(server, clip), i2=64, i3=1)
    msg = call(server, fn_index, data)
    assert msg["success"] is True, str(msg)[:500]


def test_one_request_cannot_exhaust_the_server(server, server_log, live):
    start = len(server_log.read_text())
    seg = {"i1": "lraspp_mobilenet_v3_large"}
    for classes in (["cat"] * 300, ["cat"] * 100_000):  # 300: 10.5 s, +456 MB; 100k: killed the server
        t = time.time()
        msg = call(server, *_event(live, "gradcam", **seg, i7=classes))
        assert msg["success"] is False and time.time() - t < 10
        said = f"classes may hold at most {MAX_ITEMS} items on this server, got {len(classes)}"
        assert msg["output"]["error"] == said
    many = ["cat", "dog", "horse", "sheep", "cow", "bird", "boat", "bus", "car", "train", "person"] * 2
    msg = call(server, *_event(live, "gradcam", **seg, i7=many))
    assert msg["success"] is True  # duplicates dropped: 11 classes, within MAX_CLASSES
    assert len({item["caption"] for item in msg["output"]["data"][0]}) == len(set(many)) <= MAX_CLASSES

    fn_index, data = _event(live, "gradcam", i2="x" * 10_000)
    msg = call(server, fn_index, data)
    error = msg["output"]["error"]
    assert error.startswith(f"layer may be at most {MAX_TEXT} characters on this server, got 'xxx")
    assert "(10,000 characters)" in error and len(error) < MAX_TEXT

    fn_index, data = _event(live, "gradcam", i2="x" * (5 * 2**20))
    t = time.time()
    join = server + "gradio_api/queue/join"
    r = HTTP.post(join, json={"data": data, "fn_index": fn_index, "session_hash": "big"})
    assert r.status_code == 413 and time.time() - t < 5 and len(r.text) < 200
    assert r.json()["detail"].startswith("a request may hold at most 1 MB on this server")

    big = [("files", (f"f{i}.bin", b"\0" * (900 * 1024))) for i in range(4)]  # 4 x 0.9 MB: each under 1 MB
    r = HTTP.post(server + "gradio_api/upload", files=big, timeout=30)
    assert r.status_code == 413 and "upload request" in r.json()["detail"]
    r = HTTP.post(server + "gradio_api/upload", files=big[:2], timeout=30)
    assert r.status_code == 200 and len(r.json()) == 2

    r = HTTP.post(join, json={"data": [], "fn_index": 99_999, "session_hash": "x"})
    assert r.status_code == 422 and "fn_index must be the number of one of this app's" in r.text
    r = HTTP.post(join, json={"data": "y" * 50_000, "fn_index": 0, "session_hash": "x"})
    assert r.status_code == 422 and "yyyy" not in r.text and len(r.text) < 200

    deep = "[" * 100_000 + "]" * 100_000  # past the JSON parser's recursion limit: was HTTP 500
    r = HTTP.post(
        join,
        content=f'{{"data": {deep}, "fn_index": 0, "session_hash": "x"}}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["detail"] == "the request is nested too deeply"
    fn_index, data = _event(live, "stylize", i10=10**400)  # JSON's integers have no size
    msg = call(server, fn_index, data)
    # the input's own range (issue 88.6: JSON's integer range said nothing of the seed's)
    assert (
        msg["output"]["error"]
        == f"seed must be between 0 and {MAX_INT} on this server, got a number of 401 digits"
    )
    fn_index, data = _event(live, "gradcam", i7=[[[[[[[["cat"]]]]]]]])
    assert call(server, fn_index, data)["output"]["error"].startswith("classes may be nested at most")

    log = _log_since(server_log, start)
    assert "Traceback" not in log and "x" * (2 * MAX_ECHO + 1) not in log and "y" * 200 not in log


def test_bad_values_get_one_line_naming_the_input_and_no_traceback(
    server, server_log, server_uploads, live, tmp_path
):
    start = len(server_log.read_text())
    png = (live["dir"] / "content.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
    cut = upload(server, tmp_path / "cut.png")
    real = live["content"]
    nul = {**real, "path": real["path"] + "\x00"}
    cases = [  # (endpoint, input, value, what the one line must say)
        ("gradcam", "i0", "hello", "image must be an uploaded file, got 'hello'"),
        ("gradcam", "i0", nul, "image must not hold a NUL character"),
        ("gradcam", "i1", "resnet9000", "model must be one of resnet18, "),
        ("gradcam", "i3", "magiccam", "method must be one of "),
        ("gradcam", "i4", float("nan"), "top_k must be a finite number, got nan"),
        ("gradcam", "i4", float("inf"), "top_k must be a finite number, got inf"),  # JSON's 1e999
        ("stylize", "i10", float("nan"), "seed must be a finite number, got nan"),
        ("stylize", "i12", float("nan"), "tile must be a finite number, got nan"),
        ("stylize", "i11", "sgd", "optimizer must be one of lbfgs, adam, got 'sgd'"),
        ("stylize", "i5", 2.5, "steps must be a whole number, got 2.5"),
        (
            "stylize",
            "i16",
            {"background": {"path": real["path"]}, "layers": [], "composite": None},
            "mask_a is not a file value Gradio reads (background: ",
        ),
        (
            "stylize",
            "i16",
            {"background": cut, "layers": [], "composite": cut},
            "Bad image (mask): it cannot be decoded (truncated or corrupt)",
        ),
        ("stylize_video", "i0", {"path": real["path"]}, "video is not a file value Gradio reads ("),
        ("stylize_video", "i0", 7, "video must be an uploaded file, got 7"),
        ("stylize_video", "i6", "yes", "trim must be true or false, got 'yes'"),  # not read as true
        ("gradcam_video", "i7", "false", "trim must be true or false, got 'false'"),
        *[  # the server itself, loopback, private and cloud-metadata addresses: one line, no fetch
            (
                "gradcam",
                "i0",
                {"path": u, "url": u, "meta": {"_type": "gradio.FileData"}},
                "image names a URL of a local or private address",
            )
            for u in (
                server + "config",
                "http://localhost/a.png",
                "http://[::1]/a.png",
                "http://169.254.169.254/x",
                "http://0x7f000001/a.png",  # issue 61: hex, decimal, short and octal spellings
                "http://2130706433/a.png",
                "http://127.1/a.png",
                "http://0177.0.0.1/a.png",
            )
        ],
        (
            "gradcam",
            "i0",
            {"path": "http://no-such-host.invalid/a.png", "meta": {"_type": "gradio.FileData"}},
            "image names a URL whose host cannot be resolved",
        ),
    ]
    for endpoint, where, value, said in cases:
        msg = call(server, *_event(live, endpoint, **{where: value}))
        assert msg["success"] is False, (endpoint, where)
        error = msg["output"]["error"]
        assert error.startswith(said) or said in error, (endpoint, where, error)
        assert "\n" not in error and "pydantic" not in error.lower() and "validation error" not in error
        assert str(server_uploads) not in error
    fn_index, _ = _event(live, "gradcam")
    few = call(server, fn_index, [None])["output"]["error"]  # Gradio's own words quote every component
    assert few.startswith(
        "this endpoint takes 10 values (image, model, layer, method, top_k, "
    ) and few.endswith("got 1; send one per input, in that order")
    log = _log_since(server_log, start)
    assert "Traceback" not in log and "Could not preprocess" not in log
    assert len(re.findall(r"request refused: ", log)) >= len(cases) + 1


def test_an_api_cancel_frees_the_worker_within_a_step_and_never_stalls_the_server(server, live):
    fn_index, data = _event(live, "stylize", i4=128, i5=20, i18="optimise")  # a CPU server opens in Fast
    session = uuid.uuid4().hex[:12]
    join = HTTP.post(
        server + "gradio_api/queue/join",
        json={"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None},
    )
    event_id = join.json()["event_id"]
    waits: list[float] = []
    done = threading.Event()

    def ping() -> None:  # another user loading the page meanwhile
        while not done.is_set():
            t = time.time()
            HTTP.get(server + "config", timeout=30)
            waits.append(time.time() - t)
            time.sleep(0.05)

    pinger = threading.Thread(target=ping)
    with HTTP.stream("GET", server + f"gradio_api/queue/data?session_hash={session}", timeout=120) as s:
        steps = 0
        for line in s.iter_lines():
            steps += "process_generating" in line
            if steps == 2:
                break
    pinger.start()
    t = time.time()
    r = HTTP.post(
        server + "gradio_api/cancel",
        json={"session_hash": session, "fn_index": fn_index, "event_id": event_id},
        timeout=60,
    )
    cancel_s = time.time() - t
    t = time.time()
    after = call(server, *_event(live, "stylize", i4=64, i5=1))  # the worker is free for the next job
    next_s = time.time() - t
    done.set()
    pinger.join()
    assert r.status_code == 200 and after["success"] is True
    assert cancel_s < 5 and next_s < 30, (cancel_s, next_s)  # was 9.1 s to free the worker at 384 px
    assert max(waits) < 2.0, waits  # was 4.3-5.4 s for every user while a join blocked the event loop


def test_closing_a_run_never_waits_for_its_worker():
    """Gradio closes a cancelled generator on its event loop: closing must not join the worker."""
    from nstcam.app.run.running import in_thread as _in_thread

    stop, release = threading.Event(), threading.Event()

    def work(put):
        put("first")
        release.wait(10)  # one long step
        return "never read"

    gen = _in_thread(work, stop)
    assert next(gen) == "first"
    t = time.time()
    gen.close()
    assert time.time() - t < 0.5 and stop.is_set()
    release.set()


def test_sigterm_in_the_middle_of_a_run_exits_0_and_removes_this_process_files(tmp_path):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "someone_else.txt").write_text("another process's file stays")
    port = _free_port()
    env = app_env(port, uploads, NSTCAM_MAX_STEPS="300")
    log = tmp_path / "app.log"
    proc = launch_app(log, env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 120
        while "Running on" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.3)
        outbox = Path(re.search(r"results folder (\S+)", log.read_text()).group(1))
        pattern(1, 128, 96).save(tmp_path / "c.png")
        content = upload(url, tmp_path / "c.png")
        config = HTTP.get(url + "config", timeout=10).json()
        fn_index = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "stylize")
        comps = {c["id"]: c for c in config["components"]}
        data = [comps[x]["props"].get("value") for x in config["dependencies"][fn_index]["inputs"]]
        cam = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "gradcam")
        finished = [comps[x]["props"].get("value") for x in config["dependencies"][cam]["inputs"]]
        finished[0], finished[1] = content, "resnet18"
        assert call(url, cam, finished)["success"]  # a finished request (row 9 of issue 49): its results
        assert [f for f in uploads.rglob("*.png") if f.name.startswith(("overlay", "heatmap"))]  # cached
        data[0], data[1], data[4], data[5] = content, content, 128, 300
        data[18] = "optimise"  # the mode: a CPU server's page (and so the API) opens in Fast
        frames = [np.asarray(pattern(k, 64, 48)) for k in range(6)]
        clip = upload(url, write_clip(tmp_path / "clip.mp4", frames))
        v_index, video = _defaults(config, "stylize_video")
        video[0], video[1], video[2], video[3] = clip, content, 64, 20
        l_index, learn = _defaults(config, "learn_style")
        learn[0], learn[2], learn[3], learn[4] = content, 64, 1000, 1
        for index, values in [(fn_index, data), (v_index, video), (l_index, learn)]:  # style, video, learn
            _started(url, index, values)
        assert any(f.is_file() and f.name != "someone_else.txt" for f in uploads.rglob("*"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "terminate called" not in text and "Traceback" not in text, text[-2000:]
    assert list(uploads.rglob("*")) == [uploads / "someone_else.txt"]  # no file, no folder of its own
    assert not ledger_path(uploads).exists()  # its ledgers' folder too (issue 88.6), once it was the last
    assert not outbox.exists()
    assert re.search(r"stopped 3 run\(s\); removed \d+ upload\(s\)", text), text[-1500:]


def _defaults(config: dict, api_name: str) -> tuple[int, list]:
    """``api_name``'s fn_index and the default values of its inputs."""
    index = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == api_name)
    comps = {c["id"]: c for c in config["components"]}
    return index, [comps[x]["props"].get("value") for x in config["dependencies"][index]["inputs"]]


def _started(url: str, fn_index: int, data: list) -> None:
    """Joins the queue with ``data`` and returns once the run is under way (its first update)."""
    session = uuid.uuid4().hex[:12]
    HTTP.post(
        url + "gradio_api/queue/join", json={"data": data, "fn_index": fn_index, "session_hash": session}
    ).raise_for_status()
    with HTTP.stream("GET", url + f"gradio_api/queue/data?session_hash={session}", timeout=120) as s:
        for line in s.iter_lines():
            assert "process_completed" not in line, line[:300]  # refused or finished: not a run to stop
            if "process_generating" in line:
                return  # under way: a step done, a preview written


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _parts(n: int, size: int, boundary: str):
    """A multipart body of ``n`` files of ``size`` bytes, sent chunk by chunk (no Content-Length)."""
    for i in range(n):
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="f{i}.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        for _ in range(size // 100_000):
            yield b"\0" * 100_000
        yield b"\r\n"
    yield f"--{boundary}--\r\n".encode()


def test_an_upload_cut_at_the_cap_or_dropped_by_its_client_leaves_no_file(server, server_uploads, server_log):
    """Row 3 of issue 49: a chunked upload with no Content-Length (six files of 0.9 MB, each under
    the 1 MB file cap, 5.4 MB in all) is cut at the 3-file cap with HTTP 413, and an upload whose
    client goes away halfway leaves nothing either; a whole upload still lands."""
    before = _files(server_uploads)
    boundary = "nstcam" + uuid.uuid4().hex
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    try:
        r = HTTP.post(
            server + "gradio_api/upload", content=_parts(6, 900_000, boundary), headers=headers, timeout=30
        )
        assert r.status_code == 413 and "at most 3 files" in r.json()["detail"]
    except httpx.TransportError:  # the server may close while the client still sends: also a refusal
        pass
    host, port = server.removeprefix("http://").rstrip("/").split(":")
    body = b"".join(_parts(2, 900_000, boundary))
    with socket.create_connection((host, int(port)), timeout=10) as s:  # declares it all, sends half
        s.sendall(
            f"POST /gradio_api/upload HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; "
            f"boundary={boundary}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        s.sendall(body[: len(body) // 2])
        time.sleep(0.5)
    deadline = time.time() + 10
    while _files(server_uploads) - before and time.time() < deadline:
        time.sleep(0.2)
    assert _files(server_uploads) - before == set()
    log = server_log.read_text()
    assert "upload cut at the size cap: removed its" in log and "upload dropped by its client: removed" in log
    r = HTTP.post(server + "gradio_api/upload", content=_parts(1, 100_000, boundary), headers=headers)
    assert r.status_code == 200 and Path(r.json()[0]).is_file()  # a whole upload lands


def test_a_clip_run_says_each_window_to_the_api(server, live, tmp_path):
    """Row 7 of issue 49: the progress of a clip run reaches the client window by window (said from
    the request's own thread; from the worker's it was lost after the first message)."""
    clip = upload(server, write_clip(tmp_path / "walk.mp4", _frames((30, 200, 30), n=24, w=64, h=48)))
    seen: list = []
    msg = call(server, *_event(live, "gradcam_video", i0=clip, i1="mc3_18", i3=1), seen=seen)
    assert msg["success"], msg
    said = [
        unit.get("desc") or ""
        for m in seen
        if m.get("msg") == "progress"
        for unit in m.get("progress_data") or []
    ]
    windows = [d for d in said if re.fullmatch(r"window \d+/\d+", d)]
    assert len(set(windows)) >= 3, said  # 24 frames, windows of 16 at stride 8: 2 windows x 3 passes


def test_huge_literals_and_unknown_endpoint_names_get_one_line_on_every_route(server, server_log, live):
    """Rows 11 and 12 of issue 49, on the named routes as well as the queue: JSON's integers of any
    length and ``1e999`` get the gate's one line; an endpoint name the app does not have gets
    HTTP 404 naming the app's endpoints (Gradio answered 500 with a traceback in the log)."""
    start = len(server_log.read_text())
    fn_index, data = _event(live, "gradcam")
    body = json.dumps({"data": [None, *data[1:4], 0, *data[5:]]})
    for literal, said in [
        (
            "1" + "0" * 400,
            "top_k must be between 1 and 10 on this server, got a number of 401 digits",
        ),
        ("1e999", "top_k must be a finite number, got inf"),
        ("-1e999", "top_k must be a finite number, got -inf"),
    ]:
        sent = body.replace('"gradcam", 0,', f'"gradcam", {literal},')
        r = HTTP.post(
            server + "gradio_api/run/gradcam", content=sent, headers={"content-type": "application/json"}
        )
        assert r.json()["error"] == said, r.text
    for route in ("gradio_api/run/predict", "gradio_api/call/nope", "gradio_api/api/x"):
        r = HTTP.post(server + route, json={"data": []})
        assert r.status_code == 404 and r.json()["detail"].startswith("this app has no endpoint named "), (
            r.text
        )
        assert "gradcam, gradcam_video, learn_style, stylize, stylize_video" in r.json()["detail"]
    # the page's own calls: /run/predict with an fn_index
    r = HTTP.post(server + "gradio_api/run/predict", json={"data": [None], "fn_index": fn_index})
    assert r.json()["error"].startswith("this endpoint takes 10 values"), r.text  # the event's own gate
    log = _log_since(server_log, start)
    assert "Traceback" not in log and "FnIndexInferError" not in log

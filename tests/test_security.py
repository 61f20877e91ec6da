"""The app reads only files uploaded to it: every file input of every endpoint (public or hidden)
refuses a request that names any other server path, over raw HTTP as an attacker would send it."""

from __future__ import annotations

import io
import json
import os
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import ENDPOINTS, HTTP, in_threads, marked
from PIL import Image

from nstcam.app.guard.inputs import NOT_AN_UPLOAD

FILE_TYPES = {"image", "video", "file", "imageeditor", "gallery", "audio", "model3d"}


def call(url: str, fn_index: int, data: list, timeout: float = 120, seen: list | None = None) -> dict:
    """One event by index through the queue, as the browser sends it; the completion message (every
    message before it appended to ``seen``). The body is written as JSON carries any number (NaN;
    infinity as ``1e999``), as an attacker may."""
    session = uuid.uuid4().hex[:12]
    body = json.dumps({"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None})
    r = HTTP.post(
        url + "gradio_api/queue/join",
        content=body.replace("Infinity", "1e999"),
        headers={"content-type": "application/json"},
        timeout=timeout,
    )
    r.raise_for_status()
    with HTTP.stream("GET", url + f"gradio_api/queue/data?session_hash={session}", timeout=timeout) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if seen is not None:
                    seen.append(msg)
                if msg.get("msg") == "process_completed":
                    return msg
    raise AssertionError("no completion message")


def upload(url: str, path: Path) -> dict:
    """A real upload (the positive control): the server's FileData for ``path``."""
    with open(path, "rb") as fh:
        r = HTTP.post(url + "gradio_api/upload", files={"files": (path.name, fh)}, timeout=30)
    r.raise_for_status()
    return {"path": r.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


@pytest.fixture(scope="module")
def app(server, server_uploads, tmp_path_factory):
    """The live app's config, a secret file outside its uploads, a symlink to it among them, and a
    real upload."""
    d = tmp_path_factory.mktemp("private")
    secret = d / "secret.png"
    Image.fromarray((np.random.default_rng(3).random((40, 60, 3)) * 255).astype(np.uint8)).save(secret)
    (d / "folder").mkdir()
    (d / "empty.png").write_bytes(b"")
    link = server_uploads / "innocent" / "photo.png"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(secret)
    config = json.loads(urllib.request.urlopen(server + "config", timeout=10).read())
    return {"config": config, "dir": d, "secret": secret, "link": link, "real": upload(server, secret)}


def _file_inputs(config: dict) -> list[tuple[int, str, list[dict], list[int]]]:
    """(fn_index, endpoint, input components, positions of file inputs) of every dependency."""
    comps = {c["id"]: c for c in config["components"]}
    out = []
    for i, dep in enumerate(config["dependencies"]):
        inputs = [comps[x] for x in dep["inputs"]]
        files = [j for j, c in enumerate(inputs) if c["type"] in FILE_TYPES]
        if files:
            out.append((i, str(dep.get("api_name")), inputs, files))
    return out


def _attacks(app: dict, uploads: Path) -> dict[str, str]:
    s = app["secret"]
    return {
        "absolute": str(s),
        "dotdot": f"{uploads}/../{os.path.relpath(s, uploads.parent)}",
        "symlink": str(app["link"]),
        "proc": "/proc/self/environ",
    }


def test_every_file_input_of_every_endpoint_refuses_paths_outside_the_uploads(
    server, server_uploads, server_log, app
):
    start = len(server_log.read_text())
    endpoints = _file_inputs(app["config"])
    names = {e[1] for e in endpoints}
    assert set(ENDPOINTS) <= names
    # before/after steps, 9 buttons, 10 image boxes that take a non-image out at once (issue 37.13),
    # the volume tab's button (the page's only: no endpoint); the webcam's stream is "paint_frame"
    assert sum(e[1].startswith("false") for e in endpoints) == 2 + 9 + 10 + 1
    assert "paint_frame" in names
    sent = []  # every file input of every endpoint, each attack, with and without Gradio's meta
    for fn_index, endpoint, inputs, files in endpoints:
        base = [c["props"].get("value") for c in inputs]
        for j in files:
            base[j] = app["real"]
        for j in files:
            for kind, path in _attacks(app, server_uploads).items():
                for meta in (False, True):
                    bad = {"path": path, **({"meta": {"_type": "gradio.FileData"}} if meta else {})}
                    where = f"{endpoint} input {j} {kind} meta={meta}"
                    sent.append((where, inputs[j]["type"], fn_index, [*base[:j], bad, *base[j + 1 :]]))
    # each endpoint's requests in turn, 4 endpoints at a time (each has a worker of its own; a client
    # may hold one stream and 4 jobs at a time: nstcam.app.guard.fair): the same requests, a fraction
    # of the time
    by_event: dict[int, list] = {}
    for item in sent:
        by_event.setdefault(item[2], []).append(item)
    groups = list(by_event.values())
    answered = in_threads(lambda g: [(i, call(server, *i[2:])) for i in groups[g]], len(groups), at_once=4)
    refused = 0
    for (where, kind, _, _), msg in [pair for group in answered for pair in group]:
        assert msg["success"] is False, f"{where}: the server read it: {str(msg)[:300]}"
        error = msg["output"]["error"]
        assert error.startswith(f"Bad {kind} (") and error.endswith(NOT_AN_UPLOAD + "."), (where, error)
        refused += 1
    assert refused == 4 * 2 * sum(len(e[3]) for e in endpoints) >= 100
    log = server_log.read_text()[start:]  # each refusal one line, never a traceback (was 178 of 1,440)
    assert "Traceback" not in log and log.count("request refused: Bad ") >= refused


def test_refusals_reveal_nothing_about_the_path(server, app):
    """Missing, a folder, an empty file, a secret, relative: one text (no "not found", no path)."""
    gradcam = next(e for e in _file_inputs(app["config"]) if e[1] == "gradcam")
    fn_index, _, inputs, (j,) = gradcam
    base = [c["props"].get("value") for c in inputs]
    d = app["dir"]
    texts = set()
    for path in [
        app["secret"],
        d / "missing.png",
        d / "folder",
        d / "empty.png",
        "secret.png",
        "/etc/passwd",
    ]:
        for meta in ({}, {"meta": {"_type": "gradio.FileData"}}):
            msg = call(server, fn_index, [*base[:j], {"path": str(path), **meta}, *base[j + 1 :]])
            texts.add(msg["output"]["error"])
    assert texts == {f"Bad image (image): {NOT_AN_UPLOAD}."}
    assert str(d) not in next(iter(texts)) and "/" not in next(iter(texts)).split(":")[0]


def test_a_real_upload_still_works_and_the_secret_never_came_back(server, app):
    gradcam = next(e for e in _file_inputs(app["config"]) if e[1] == "gradcam")
    fn_index, _, inputs, (j,) = gradcam
    data = [c["props"].get("value") for c in inputs]
    data[j] = app["real"]
    msg = call(server, fn_index, data)
    assert msg["success"] is True, msg
    gallery = msg["output"]["data"][0]
    overlay = HTTP.get(gallery[0]["image"]["url"], timeout=30).raise_for_status().content
    assert Image.open(io.BytesIO(overlay)).size == marked((60, 40))  # the upload, explained (and marked)
    for path in ["gradio_api/file=" + str(app["secret"]), "gradio_api/file=/etc/passwd"]:
        r = HTTP.get(server + path)  # Gradio's file route refuses them (403 naming the path): said as
        assert r.status_code == 404 and "/" not in r.json()["detail"]  # 404 in one line, no path


def test_upload_path_accepts_only_regular_files_inside_the_upload_folder(tmp_path, monkeypatch):
    import gradio as gr

    from nstcam.app.guard.inputs import upload_path

    uploads = tmp_path / "uploads"
    (uploads / "abc").mkdir(parents=True)
    ok = uploads / "abc" / "clip[1].png"
    ok.write_bytes(b"x")
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"x")
    (uploads / "abc" / "link.png").symlink_to(outside)
    (uploads / "abc" / "inner.png").symlink_to(ok)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    assert upload_path(str(ok), "image") == str(ok.resolve())
    assert upload_path(str(uploads / "abc" / "inner.png"), "image") == str(ok.resolve())  # stays inside
    for bad in [outside, uploads / "abc" / "link.png", uploads / "abc" / ".." / ".." / "secret.png",
                uploads / "abc", uploads, uploads / "abc" / "missing.png", "/proc/self/environ"]:  # fmt: skip
        with pytest.raises(gr.Error) as e:
            upload_path(str(bad), "image")
        assert e.value.message == f"Bad image: {NOT_AN_UPLOAD}."

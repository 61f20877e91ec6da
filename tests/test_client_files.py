"""One client never reads another's files (issue 73): the live server with two clients that keep their
cookies (as a browser and gradio_client do) and one that sends none; the server's own bookkeeping
is never served. And the requests the issue's probes sent, refused in one line before any decode:
a list of training photos, thin paintings and photos, a thin strip for the style network's
feature maps, and the MCP tools' every parameter typed as it is read."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
from PIL import Image

from nstcam.app.disk.access import COOKIE, Access, ClientCookie, as_client, token_of_cookie_header


def _png(path, w, h, seed=0):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return path


def _client(server: str) -> httpx.Client:
    c = httpx.Client(base_url=server, timeout=120)
    c.get("config").raise_for_status()  # as gradio_client: its first response's cookie, kept
    return c


def _upload(c: httpx.Client, path) -> str:
    r = c.post("gradio_api/upload", files={"files": (path.name, path.read_bytes(), "image/png")})
    r.raise_for_status()
    return r.json()[0]


def _file(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


def _call(c: httpx.Client, api: str, data: list) -> tuple[str, object]:
    """(event, data) of a call of ``api`` over Gradio's REST route, as this client."""
    r = c.post(f"gradio_api/call/{api}", json={"data": data})
    r.raise_for_status()
    text = c.get(f"gradio_api/call/{api}/{r.json()['event_id']}").text
    events = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    datas = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return events[-1], json.loads(datas[-1])


def test_a_client_reads_only_its_own_uploads_and_results(server, server_uploads, tmp_path):
    a, b, fresh = _client(server), _client(server), httpx.Client(base_url=server, timeout=60)
    assert a.cookies.get(COOKIE) != b.cookies.get(COOKIE)
    mine = _upload(a, _png(tmp_path / "a.png", 72, 48, seed=7))
    event, out = _call(a, "features", [_file(mine), "resnet18", "layer2", 4])
    assert event == "complete", out
    result = out[0]["path"]
    assert result.startswith(str(server_uploads)) and mine.startswith(str(server_uploads))
    for path in (mine, result):
        assert a.get(f"gradio_api/file={path}").status_code == 200  # its own
        for other in (b, fresh):  # another client, or none: as if the file did not exist
            r = other.get(f"gradio_api/file={path}")
            assert r.status_code == 404 and str(server_uploads) not in r.text, r.text
        assert b.head(f"gradio_api/file={path}").status_code == 404
        event, said = _call(b, "features", [_file(path), "resnet18", "layer2", 4])  # named in a request
        assert event == "error" and "only files uploaded to this server" in said["error"], said
        assert str(server_uploads) not in json.dumps(said)
    event, _ = _call(a, "features", [_file(result), "resnet18", "layer2", 4])
    assert event == "complete"  # its own result is its input again
    # the same photo uploaded by B is B's too (it holds the content); A's result stays A's
    assert _upload(b, tmp_path / "a.png") == mine and b.get(f"gradio_api/file={mine}").status_code == 200
    assert b.get(f"gradio_api/file={result}").status_code == 404


def test_the_servers_bookkeeping_is_never_served_and_examples_are_everyones(server, server_uploads):
    from nstcam.app.disk.owned import ledger_folder

    stranger = _client(server)
    assert list(server_uploads.rglob("*.owned")) == []  # no ledger where Gradio serves
    ledgers = list(ledger_folder(server_uploads).glob("*.owned"))
    assert ledgers, "the server keeps its ledger in the private folder"
    for ledger in ledgers:
        assert stranger.get(f"gradio_api/file={ledger}").status_code in (403, 404)
    examples = [
        p for p in set(_example_paths(stranger.get("config").json())) if p.startswith(str(server_uploads))
    ]
    assert len(examples) >= 3  # the examples Gradio copied into its upload folder when the app was built
    assert all(stranger.get(f"gradio_api/file={p}").status_code == 200 for p in examples)


def _example_paths(node) -> list[str]:
    if isinstance(node, dict):
        own = [node["path"]] if isinstance(node.get("path"), str) and node.get("meta") else []
        return own + [p for v in node.values() for p in _example_paths(v)]
    if isinstance(node, list):
        return [p for v in node for p in _example_paths(v)]
    return []


def test_the_cookie_is_made_once_written_into_the_request_and_malformed_ones_are_replaced():
    seen: list[tuple[str | None, str | None]] = []

    async def app(scope, receive, send):
        from nstcam.app.disk.access import current_client

        cookie = dict(scope["headers"]).get(b"cookie", b"").decode()
        seen.append((token_of_cookie_header(cookie), current_client()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(headers, scheme="http"):
        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/", "headers": headers, "scheme": scheme}
        await ClientCookie(app)(scope, None, send)
        return dict(sent[0]["headers"]).get(b"set-cookie", b"").decode()

    made = asyncio.run(call([]))
    token = made.split(";")[0].split("=", 1)[1]
    assert "HttpOnly" in made and "SameSite=Lax" in made and seen[-1] == (token, token)
    assert asyncio.run(call([(b"cookie", f"{COOKIE}={token}".encode())])) == ""  # kept, none made
    assert seen[-1] == (token, token)
    again = asyncio.run(call([(b"cookie", f"{COOKIE}=../../etc; other=1".encode())], scheme="https"))
    assert "Secure" in again and "Partitioned" in again and "SameSite=None" in again
    assert seen[-1][0] not in (None, token)


def test_grants_are_per_client_and_everyones_for_public_files(tmp_path):
    access = Access(prune_every=2)
    f, g = tmp_path / "f.png", tmp_path / "g.png"
    f.write_bytes(b"1")
    g.write_bytes(b"2")
    access.grant(f, "a" * 32)
    with as_client("b" * 32):
        access.grant(g)
    access.grant(g)  # outside any request: nobody's
    assert access.may_read(f, "a" * 32) and not access.may_read(f, "b" * 32) and not access.may_read(f, None)
    assert access.may_read(g, "b" * 32) and not access.may_read(g, "a" * 32)
    access.grant(f, "*")
    assert access.may_read(f, "c" * 32)
    f.unlink()
    access.grant(g, "d" * 32)  # the second grant sweeps the records of files gone
    assert len(access) == 1


def test_learn_style_takes_a_list_of_photos_and_one_photo_and_refuses_thin_ones(server, tmp_path):
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    p1, p2 = _png(tmp_path / "p1.png", 80, 64, 1), _png(tmp_path / "p2.png", 64, 96, 2)
    thin = _png(tmp_path / "thin.png", 16, 20000, 3)
    c = Client(server, verbose=False)
    photos = [handle_file(str(p1)), handle_file(str(p2))]
    _, status, _ = c.predict(
        painting=handle_file(str(p1)), photos=photos, size=64, steps=2, batch=1, api_name="/learn_style"
    )
    assert status.startswith("done: 2 steps"), status
    _, status, _ = c.predict(
        painting=handle_file(str(p1)),
        photos=handle_file(str(p2)),
        size=64,
        steps=2,
        batch=1,
        api_name="/learn_style",
    )
    assert status.startswith("done: 2 steps"), status  # one file sent where a list goes: a list of one
    for kw, who in [
        ({"painting": handle_file(str(thin))}, "painting (thin.png) is 16 x 20000 px"),
        (
            {"painting": handle_file(str(p1)), "photos": [handle_file(str(p1)), handle_file(str(thin))]},
            "photo 2 (thin.png)",
        ),
    ]:
        with pytest.raises(AppError, match="at most 4:1") as e:
            c.predict(**kw, size=64, steps=2, batch=1, api_name="/learn_style")
        assert who in str(e.value) and "/tmp" not in str(e.value)
    raw = _client(server)
    event, said = _call(raw, "learn_style", [_file(_upload(raw, p1)), "not a file", 64, 2, 1, 0, 1.0])
    assert event == "error" and "photos (file 1) must be an uploaded file, got 'not a file'" in said["error"]


def test_learn_reads_every_header_before_decoding_anything(tmp_path, monkeypatch):
    import gradio as gr

    from nstcam.app import AppConfig, Models
    from nstcam.app.tabs import learn

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    painting = _png(tmp_path / "painting.png", 64, 64)
    big = tmp_path / "big.png"
    Image.new("RGB", (4000, 2500)).save(big)  # 10 MP: over the 8.3 MP of a frame
    decoded = []
    monkeypatch.setattr(learn, "load_upload", lambda *a: decoded.append(a))
    for photos, said in [
        ([str(painting), str(_png(tmp_path / "thin.png", 16, 20000))], "photo 2 (thin.png) is 16 x 20000 px"),
        ([str(big)], "(photo 1): big.png is 4000x2500"),
    ]:
        with pytest.raises(gr.Error, match="at most 4:1|over the limit of 8.3 MP") as e:
            list(learn.learn_handler(models, str(painting), photos, 64, 2, 1))
        assert said in str(e.value.message) and str(tmp_path) not in str(e.value.message)
    assert decoded == [] and models._style is None  # refused from the headers: nothing decoded or built


def test_the_style_networks_feature_maps_refuse_a_thin_strip(tmp_path):
    import gradio as gr

    from nstcam.app import AppConfig, Models
    from nstcam.app.tabs.features import features_handler

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    for w, h in [(60000, 20), (20, 600)]:
        with pytest.raises(gr.Error, match=r"at most 4:1") as e:
            features_handler(models, str(_png(tmp_path / f"strip{w}.png", w, h)), "vgg16_bn", "relu3_1", 4)
        assert f"strip{w}.png is {w} x {h} px" in str(e.value.message)
    rotated = tmp_path / "rotated.jpg"  # 24 x 5000 stored, shown 5000 x 24 (EXIF orientation 6)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (24, 5000)).save(rotated, exif=exif)
    with pytest.raises(gr.Error, match=r"at most 4:1"):
        features_handler(models, str(rotated), "vgg16_bn", "relu3_1", 4)
    _, rows, note = features_handler(models, str(_png(tmp_path / "ok.png", 96, 32)), "vgg16_bn", "relu3_1", 4)
    assert len(rows) == 4 and note.startswith("vgg16_bn relu3_1")  # 3:1 still works


def test_every_mcp_parameter_is_read_as_its_schema_types_it(server, tmp_path):
    import jsonschema
    import mcp.client.streamable_http as transport
    from mcp import ClientSession

    connect = getattr(transport, "streamable_http_client", None) or transport.streamablehttp_client
    data = "data:image/png;base64," + base64.b64encode(_png(tmp_path / "c.png", 64, 48).read_bytes()).decode()

    async def session():
        async with connect(server + "gradio_api/mcp/") as (read, write, _), ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            calls = [
                await s.call_tool("stylize", {"content": data, "size": 64, "mode": "fast", "builtin_a": 3}),
                await s.call_tool(
                    "stylize",
                    {
                        "content": data,
                        "size": 64,
                        "mode": "fast",
                        "builtin_a": 1,
                        "builtin_b": 2,
                        "blend": 0.5,
                    },
                ),
                await s.call_tool(
                    "stylize", {"content": data, "style": data, "size": 64, "mode": "fast", "builtin_a": -1}
                ),
            ]
            return tools, calls

    tools, calls = asyncio.run(asyncio.wait_for(session(), 180))
    checked = 0
    for tool in tools:
        for prop in tool.inputSchema["properties"].values():
            typed = {k: v for k, v in prop.items() if k in ("type", "items", "anyOf")}
            for value in [
                *prop.get("enum", []),
                *([prop["default"]] if prop.get("default") is not None else []),
            ]:
                jsonschema.validate(value, typed)  # each choice and default is of the declared type
                checked += 1
    assert checked > 50
    builtin = {t.name: t for t in tools}["stylize"].inputSchema["properties"]["builtin_a"]
    assert builtin["type"] == "integer" and (builtin["minimum"], builtin["maximum"]) == (-1, 25)
    for result in calls:
        said = " ".join(x.text for x in result.content if x.type == "text")
        assert not result.isError and said.startswith("done: 64x"), said
    assert "the 26-style network" in " ".join(x.text for x in calls[0].content if x.type == "text")


def test_a_learn_run_holds_only_its_own_worker_and_stops_on_cancel_or_a_closed_connection(server, tmp_path):
    """Issue 73's probes: while one client learns, another's /gradcam is answered (each endpoint has
    its own worker); a cancelled learn run and one whose connection closed end with no style file,
    and the next learn run is served."""
    from gradio_client import Client, handle_file

    painting, photo = _png(tmp_path / "painting.png", 64, 64, 4), _png(tmp_path / "photo.png", 72, 48, 5)
    learner, other = Client(server, verbose=False), Client(server, verbose=False)
    before = {p.name for p in tmp_path.iterdir()}
    long = dict(painting=handle_file(str(painting)), size=64, steps=1000, batch=1, api_name="/learn_style")
    job = learner.submit(**long)
    _wait_for(lambda: any(s.startswith("step ") for s in _statuses(job)), "the learn run's first step")
    gallery, _, _ = other.predict(
        image=handle_file(str(photo)), model="resnet18", top_k=1, api_name="/gradcam"
    )
    assert len(gallery) == 1 and not job.done()  # answered while the learn run still holds its worker
    job.cancel()
    _wait_for(job.done, "the cancelled run's end")
    assert not any(s.startswith("done") for s in _statuses(job))  # stopped: no style file
    # a closed connection: the client goes away mid-run; the worker is free for the next run
    raw = _client(server)
    sent = _file(_upload(raw, painting))
    r = raw.post("gradio_api/call/learn_style", json={"data": [sent, None, 64, 1000, 1, 0, 1.0]})
    with raw.stream("GET", f"gradio_api/call/learn_style/{r.json()['event_id']}") as events:
        for line in events.iter_lines():
            if "step " in line:
                break  # the stream is closed here, mid-run
    _, status, style_file = learner.predict(
        painting=handle_file(str(painting)), size=64, steps=2, batch=1, api_name="/learn_style"
    )
    assert status.startswith("done: 2 steps") and style_file.endswith(".safetensors")
    assert {p.name for p in tmp_path.iterdir()} == before  # nothing written beside the test's files


def _statuses(job) -> list[str]:
    return [out[1] for out in job.outputs() if isinstance(out, (list, tuple)) and len(out) > 1 and out[1]]


def _wait_for(done, what: str, timeout_s: float = 240.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"no {what} in {timeout_s:g} s"
        time.sleep(0.2)

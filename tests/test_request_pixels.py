"""Cost by pixels, not passes (issue 61): long thin images and clips, image-editor layers, KPCA-CAM's
eigensolve, a trust report that stops when told, URLs in every spelling, messages without internal
objects. Each hostile variant is refused in one line, in under 2 s and under +300 MB, before any
model is built; the estimates are checked against counted runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch
from _media import write_clip
from conftest import rss_mb
from PIL import Image
from test_request_costs import _refused  # the one-line refusal, its seconds and +MB

from nstcam import GradCAM
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.cost import cam_cost, clip_cost, features_cost, request_cost, trust_cost
from nstcam.app.guard.gate import _check_url
from nstcam.app.guard.inputs import EDITOR_PARTS, SafeEditor, check_editor_parts
from nstcam.app.guard.shapes import (
    KPCA_POSITIONS_PER_PASS,
    MAX_ASPECT,
    REFERENCE_ASPECT,
    kpca_passes,
    layer_positions,
    pass_factor,
)
from nstcam.app.run.runs import RunStop
from nstcam.app.tabs.cam import cam_handler
from nstcam.app.tabs.cam_video import cam_video_handler
from nstcam.app.tabs.features import features_handler
from nstcam.app.tabs.panels.faithfulness import faithfulness_handler
from nstcam.app.tabs.panels.trust import trust_handler
from nstcam.cam import StoppedEarly
from nstcam.cam.trust import trust_passes
from nstcam.image import SAMPLES

CAT = str(SAMPLES / "chelsea.png")


@pytest.fixture
def models() -> Models:
    return Models(AppConfig(random_weights=True, device="cpu"))


def _png(path: Path, w: int, h: int) -> str:
    Image.new("RGB", (w, h), (30, 90, 200)).save(path)
    return str(path)


def _rotated_jpeg(path: Path, w: int, h: int) -> str:
    """A JPEG of ``w`` x ``h`` px whose EXIF orientation (6) turns it a quarter."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (w, h), (200, 40, 40)).save(path, exif=exif)
    return str(path)


THIN = [(100000, 16), (60000, 20), (3000, 16), (1000, 16), (300, 32)]
"""The stranger's thin images (issue 61): each took seconds to minutes and gigabytes, or killed the
server, or answered an internal error."""


@pytest.mark.parametrize("w,h", THIN)
def test_thin_images_are_refused_from_their_header_on_every_image_endpoint(models, tmp_path, w, h):
    path = _png(tmp_path / f"strip_{w}x{h}.png", w, h)
    calls = [
        (features_handler, (path, "resnet18", "layer4", 16)),
        (cam_handler, (path, "resnet18", "layer4", "gradcam", 1)),
        (faithfulness_handler, (path, "resnet18", "layer4")),
        (trust_handler, (path, "resnet18", "layer4", ["gradcam"])),
    ]
    for fn, args in calls:
        said, seconds, grown = _refused(fn, models, *args)
        assert said.startswith(f"strip_{w}x{h}.png is {w} x {h} px ("), said
        assert f"at most {MAX_ASPECT:g}:1" in said and "\n" not in said and "Internal" not in said
        assert seconds < 2 and grown < 300, (fn.__name__, seconds, grown)
    assert models._cams == {} and models._nets == {}  # refused before any model was built


def test_an_exif_rotated_thin_jpeg_is_refused_too(models, tmp_path):
    path = _rotated_jpeg(tmp_path / "tall.jpg", 16, 3000)
    said, seconds, grown = _refused(features_handler, models, path, "resnet18", "layer4", 16)
    assert "tall.jpg is 16 x 3000 px" in said and seconds < 2 and grown < 300


def test_a_thin_clip_is_refused_before_any_model_loads(models, tmp_path):
    frames = [np.full((16, 600, 3), 40 * i, np.uint8) for i in range(6)]
    clip = write_clip(tmp_path / "strip.mp4", frames)
    said, seconds, grown = _refused(cam_video_handler, models, str(clip), "r3d_18")
    assert said.startswith("strip.mp4 is 600 x 16 px (37.5:1); a clip whose frames the network scales")
    assert seconds < 2 and grown < 300 and models._cams == {}


def test_every_pass_counts_the_pixels_the_network_sees():
    cfg = AppConfig(random_weights=True, device="cpu")
    photo, wide = (320, 240), (896, 224)  # a 4:3 photo; a 4:1 panorama, the widest let through
    assert pass_factor("resnet18", photo) == 1.0  # any camera shape is one pass
    assert pass_factor("resnet18", (398, 224)) == pytest.approx(1.0, abs=0.01)
    assert pass_factor("resnet18", wide) == pytest.approx(MAX_ASPECT / REFERENCE_ASPECT, rel=0.01)
    assert pass_factor("vit_b_16", wide) == 1.0  # a fixed square: the same pixels whatever the shape
    # each estimator multiplies its passes (masked images, windows) by the factor
    f = pass_factor("resnet18", wide)
    assert trust_cost(cfg, "resnet18", "layer4", ["gradcam"], wide).units == pytest.approx(
        trust_passes([2], 1, steps=10, samples=30, noise_samples=3) * f, abs=1
    )
    sc = cam_cost(cfg, "resnet18", "layer3", 1, "scorecam", image_size=wide)
    assert sc.units == pytest.approx(256 * f, abs=1) and "each counts 2.3 photos" in sc.unit
    assert features_cost(cfg, 16, "resnet18", wide).check().units == pytest.approx(f)
    assert clip_cost(cfg, "c.mp4", 20, 16, 8, "r3d_18", (448, 112)).units == 5  # 2 windows of 2.25
    # a Score-CAM request that fits as a photo does not as a panorama
    assert cam_cost(cfg, "resnet18", "layer4", 2, "scorecam", image_size=photo).check().units == 1024
    with pytest.raises(gr.Error, match=r"at 896x224 px with top-k 2 would cost 2,30\d masked images"):
        cam_cost(cfg, "resnet18", "layer4", 2, "scorecam", image_size=wide).check()


def test_kpca_cost_counts_its_eigensolve_by_the_layers_positions(monkeypatch):
    """The estimate's positions are the ones the eigensolve gets (counted), and the budget refuses the
    stranger's layer1 request (40 s, charged 0 before)."""
    import nstcam.cam.methods.activation as activation

    sizes = []
    real = activation.eigh

    def counted(m):
        sizes.append(tuple(m.shape[-2:]))
        return real(m)

    monkeypatch.setattr(activation, "eigh", counted)
    torch.manual_seed(0)
    cam = GradCAM("resnet18", weights="random", target_layer="layer2", method="kpcacam")
    cam.explain(Image.new("RGB", (320, 240), (90, 120, 60)), top_k=1)
    n = layer_positions("resnet18", "layer2", (320, 240))
    assert sizes == [(n, n)] and n == 28 * 38
    cfg = AppConfig(random_weights=True, device="cpu")
    assert kpca_passes("resnet18", "layer2", (320, 240)) == int(np.ceil((n / KPCA_POSITIONS_PER_PASS) ** 3))
    layer1 = cam_cost(cfg, "resnet18", "layer1", 1, "kpcacam", image_size=(320, 240))
    assert layer1.check().units == 692  # 4,200 positions: the stranger's 40 s, as much as 692 masked images
    wide = cam_cost(cfg, "resnet18", "layer1", 1, "kpcacam", image_size=(448, 224))
    with pytest.raises(
        gr.Error,
        match=r"layer1 would cost 2,303 masked images' worth of work \(its eigensolve of 6,272",
    ):
        wide.check()  # 6,272 positions
    with pytest.raises(gr.Error, match="Leave out kpcacam"):
        trust_cost(cfg, "resnet18", "layer1", ["kpcacam"], (320, 240)).check()  # 8 maps: 348 s before
    ok = request_cost("gradcam", cfg, "resnet18", "layer3", 1, "kpcacam", image_size=(320, 240)).check()
    assert ok.units == 1  # 266 positions


def test_kpca_at_an_early_layer_is_refused_before_any_model_is_built(models, tmp_path):
    wide = _png(tmp_path / "wide.png", 448, 224)
    said, seconds, _ = _refused(cam_handler, models, wide, "resnet18", "layer1", "kpcacam", 1)
    assert said.startswith("KPCA-CAM on resnet18 layer1 would cost") and "Use a later layer" in said
    said, seconds, _ = _refused(trust_handler, models, CAT, "resnet18", "layer1", ["kpcacam"])
    assert "Leave out kpcacam" in said and seconds < 2 and models._cams == {}


def _editor(tmp_path: Path, sides: list[int]) -> SimpleNamespace:
    """An image editor's value naming uploaded PNGs (all black) as background, composite, layers."""
    from gradio.utils import get_upload_folder

    folder = Path(get_upload_folder()) / "test-editor"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i, s in enumerate(sides):
        p = folder / f"part{i}_{s}.png"
        if not p.exists():
            Image.new("L", (s, s), 0).save(p)
        files.append(SimpleNamespace(path=str(p)))
    return SimpleNamespace(
        background=files[0], composite=files[1] if len(files) > 1 else None, layers=files[2:]
    )


@pytest.mark.slow
def test_image_editor_layers_are_held_to_the_pixel_cap_before_decoding(tmp_path):
    cap = 3840 * 2160
    cases = [
        (
            [6300, 6300, 6300],
            "part0_6300.png is 6300x6300 = 39.7 MP, over the limit of 8.3 MP",
        ),  # the stranger's 116 KB black PNG: 39.7 MP each
        ([2000] * 8, f"at most {EDITOR_PARTS} images of 8.3 MP"),  # 4 MP each, 32 MP in all
    ]
    for sides, said in cases:
        before, start = rss_mb(), time.perf_counter()
        with pytest.raises(gr.Error) as e:
            check_editor_parts(_editor(tmp_path, sides), cap)
        assert said in e.value.message and "\n" not in e.value.message, e.value.message
        assert time.perf_counter() - start < 2 and rss_mb() - before < 300
    assert check_editor_parts(_editor(tmp_path, [2000, 2000, 2000]), cap) == 12_000_000  # fits
    editor = SafeEditor(cap)  # what Gradio calls with the request's value, before it decodes any file
    with pytest.raises(gr.Error, match="over the limit of 8.3 MP"):
        editor.preprocess(_editor(tmp_path, [6300] * 22))  # background, composite and 20 layers


def test_a_trust_report_stops_within_one_pass_when_told(monkeypatch):
    torch.manual_seed(0)
    cam = GradCAM("resnet18", weights="random", target_layer="layer4")
    calls = []
    cam.model.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[0]))  # this test's model
    asked: dict[str, float] = {}

    def progress(done: int) -> None:
        if done >= 20 and "at" not in asked:
            asked["at"], asked["calls"] = time.perf_counter(), len(calls)

    with pytest.raises(StoppedEarly, match=r"the trust report stopped after \d+ passes"):
        cam.trust(
            [Image.open(CAT)], methods=["gradcam"], should_stop=lambda: "at" in asked, progress=progress
        )
    assert asked["calls"] >= 10 and len(calls) - asked["calls"] <= 1  # at most the pass under way
    assert time.perf_counter() - asked["at"] < 2


def test_the_trust_endpoint_stops_at_the_request_deadline(models):
    stop = RunStop(budget=0.5)
    start = time.perf_counter()
    said, _, _ = _refused(
        trust_handler, models, CAT, "resnet18", "layer4", ["gradcam", "gradcam++"], stop=stop
    )
    freed = time.perf_counter() - start - 0.5
    assert said.startswith("the trust report stopped after"), said
    assert freed < 2, freed  # within a pass of the deadline (model building included)


@pytest.mark.parametrize(
    "url,said",
    [
        ("http://0x7f000001/a.png", "local or private address"),
        ("http://2130706433/a.png", "local or private address"),
        ("http://127.1/a.png", "local or private address"),
        ("http://0177.0.0.1/a.png", "local or private address"),
        ("http://10.1/a.png", "local or private address"),
        ("http://[::ffff:127.0.0.1]/a.png", "local or private address"),
        ("http://no-such-host.invalid/a.png", "whose host cannot be resolved"),
        ("http://localhost./a.png", "local or private address"),
    ],
)
def test_every_spelling_of_a_local_url_is_refused_in_one_line(url, said):
    with pytest.raises(gr.Error) as e:
        _check_url(url, "image")
    assert e.value.message.startswith(f"image names a URL {'of a' if 'local' in said else 'whose'}")
    assert said in e.value.message and url not in e.value.message


def test_a_public_address_passes_the_gate():
    _check_url("http://8.8.8.8/a.png", "image")  # a public literal: Gradio's fetcher takes it from here


def test_no_message_quotes_an_internal_object(tmp_path):
    """A ``.npy`` header holding a call is refused, not run, and the message names no object."""
    from nstcam.cam.volumes import volume_header

    head = b"{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os').system('id'), }"
    head += b" " * (64 - (10 + len(head) + 1) % 64) + b"\n"
    path = tmp_path / "evil.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head)
    with pytest.raises(ValueError) as e:
        volume_header(path, "volume")
    assert "object at 0x" not in str(e.value) and "evil.npy is not a readable .npy file" in str(e.value)
    assert "object at" not in refuse("bad: <ast.Call object at 0x7f00aa> here").message


def test_a_cancelled_trust_request_frees_its_worker_within_one_pass(models):
    """The page's Cancel, an API cancel and a closed stream all set the run's stop
    (:class:`nstcam.app.run.cancels.CancelAtOnce` reaches the endpoint: it is a run of kind "trust");
    measured here from the stop to the handler's return."""
    from nstcam.app.ui import build_demo

    demo = build_demo(models.config, models)
    trust_fn = next(f for f in demo.fns.values() if f.api_name == "trust")
    assert trust_fn.fn.nstcam_runs[1] == "trust"
    stop, seen, out = RunStop(), [], {}

    def progress(done: int, total: int) -> None:
        seen.append((time.perf_counter(), done, total))
        if done >= 30 and not stop.is_set():
            out["set"] = time.perf_counter()
            stop.set()

    def work() -> None:
        try:
            trust_handler(
                models, CAT, "resnet18", "layer4", ["gradcam", "gradcam++"], stop=stop, progress=progress
            )
        except gr.Error as e:
            out["said"], out["end"] = e.message, time.perf_counter()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(120)
    before = [e for e in seen if e[0] <= out["set"]]
    pass_s = (before[-1][0] - before[2][0]) / (before[-1][1] - before[2][1])  # seconds per pass, measured
    freed = out["end"] - out["set"]
    assert (
        out["said"].startswith("the trust report stopped after 3") and seen[-1][2] == 143
    )  # the estimate, 71 per gradient method + 1
    assert freed < max(1.0, 3 * pass_s), (freed, pass_s)
    print(f"trust cancel: freed {freed * 1000:.0f} ms after the stop; one pass {pass_s * 1000:.0f} ms")


def test_the_faithfulness_measure_stops_at_the_request_deadline(models):
    """Its curves' 126 passes each ask the run's stop first (it was not stoppable before)."""
    models.cam("resnet18", "layer4", "gradcam")  # built first: the budget is the measure's
    stop = RunStop(budget=0.3)
    start = time.perf_counter()
    said, _, _ = _refused(faithfulness_handler, models, CAT, "resnet18", "layer4", stop=stop)
    assert said.startswith("the explanation stopped after") and stop.reason, said
    assert time.perf_counter() - start - 0.3 < 2

"""Style masks and subject-aware style transfer (random weights, 64 px)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _numeric import bound
from conftest import pattern
from PIL import Image

from nstcam import count_hooks
from nstcam.cam import GradCAM
from nstcam.image import image_to_tensor, resize_long_side
from nstcam.mask import heatmap_to_mask, load_mask
from nstcam.subject import map_iou, recognition_report, subject_aware_stylize


@pytest.fixture(scope="module")
def cam():
    return GradCAM("resnet18", weights="random", device="cpu")


def region_change(out: Image.Image, content: Image.Image, mask: np.ndarray) -> tuple[float, float]:
    """Mean absolute change where the (output-sized) mask is 0 and where it is 1."""
    a = image_to_tensor(out)[0]
    c = image_to_tensor(resize_long_side(content, max(out.size)))[0]
    d = (a - c).abs().mean(0).numpy()
    m = np.asarray(Image.fromarray((mask * 255).astype(np.uint8)).resize(out.size, Image.NEAREST)) > 127
    return float(d[~m].mean()), float(d[m].mean())


def half_mask(w=64, h=48) -> np.ndarray:
    m = np.zeros((h, w), np.float32)
    m[:, w // 2 :] = 1.0  # style on the right half only
    return m


def test_masked_losses_keep_the_unmasked_region(st):
    content, style = pattern(1), pattern(2, 64, 64)
    mask = half_mask(200, 150)  # any size: resized per scale and per layer
    out = st.stylize(content, style, size=64, steps=30, style_mask=mask, seed=0)
    kept, styled = region_change(out, content, half_mask())
    bound("styled / kept region change", styled / kept, ">", 4)
    plain = st.stylize(content, style, size=64, steps=30, seed=0)
    kept_plain, _ = region_change(plain, content, half_mask())
    assert kept < kept_plain / 2, (kept, kept_plain)
    assert out.info["nstcam"]["params"]["style_mask"] == "200x150"
    assert count_hooks(st.net) == 0


def test_blend_mode_and_multiscale(st):
    content, style = pattern(1), pattern(2, 64, 64)
    out = st.stylize(content, style, size=64, steps=10, style_mask=half_mask(), mask_mode="blend")
    kept, styled = region_change(out, content, half_mask())
    bound("blend: kept region change", kept, "<", 0.01)
    bound("blend: styled region change", styled, ">", 0.01)
    multi = st.stylize(content, style, scales=[32, 64], steps=[5, 5], size=64, style_mask=half_mask())
    kept, styled = region_change(multi, content, half_mask())
    assert multi.size == (64, 48)
    bound("multiscale: styled / kept region change", styled / kept, ">", 2)
    with pytest.raises(ValueError, match="mask_mode must be"):
        st.stylize(content, style, size=32, steps=1, style_mask=half_mask(), mask_mode="paint")


def test_batch_with_mask_callable(st, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    pattern(1).save(src / "a.png")
    pattern(3, 48, 64).save(src / "b.png")
    seen = []

    def mask_for(img):
        seen.append(img.size)
        m = np.zeros((img.height, img.width), np.float32)
        m[:, img.width // 2 :] = 1
        return m

    res = st.stylize_batch(
        src, pattern(2), tmp_path / "out", size=48, steps=3, style_mask=mask_for, progress_bar=False
    )
    assert len(res.written) == 2 and sorted(seen) == [(48, 64), (64, 48)]


def test_mask_loading_and_cam_mask(cam):
    assert load_mask(np.full((5, 6), 255, np.uint8)).max() == 1.0
    assert load_mask(Image.new("L", (6, 5), 0)).shape == (5, 6)
    assert load_mask(torch.ones(4, 4, 1)).shape == (4, 4)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        load_mask(np.full((4, 4), 2.0))
    with pytest.raises(ValueError, match="H x W"):
        load_mask(np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="NaN"):
        load_mask(np.full((4, 4), np.nan))
    content = pattern(5, 88, 64)
    heat = cam.explain(content)[0].heatmap
    m = heatmap_to_mask(heat, threshold=0.5, dilate=2, feather=3)
    assert m.shape == (64, 88) and m.dtype == np.float32 and 0 <= m.min() and m.max() <= 1
    hard = heatmap_to_mask(heat, threshold=0.5, dilate=0, feather=0)
    np.testing.assert_array_equal(hard, (heat >= 0.5).astype(np.float32))
    assert heatmap_to_mask(heat, threshold=0.5, dilate=3, feather=0).sum() >= hard.sum()


def test_subject_aware_modes_report_and_no_hooks(st, cam):
    content, style = pattern(6, 80, 64), pattern(2)
    kw = dict(engine=st, cam=cam, size=64, steps=4, threshold=0.5, feather=2.0, top_k=3, seed=0)
    bg = subject_aware_stylize(content, style, mode="background", **kw)
    subj = subject_aware_stylize(content, style, mode="subject", report=False, **kw)
    assert bg.mask.shape == (64, 80) and 0 <= bg.mask.min() and bg.mask.max() <= 1
    np.testing.assert_allclose(bg.mask + subj.mask, 1.0, atol=1e-6)
    assert subj.report is None
    rep = bg.report
    d = rep.to_dict()
    assert len(rep.before) == 3 and len(rep.after) == 3 and 0 <= d["iou"] <= 1
    assert d["class_index"] == bg.saliency.class_index == rep.before[0].class_index
    assert rep.after_same_class.class_index == rep.before[0].class_index
    assert d["kept_in_top_k"] == (d["class_index"] in [a["class_index"] for a in d["after"]])
    assert "RANDOM" in rep.summary()
    assert bg.image.info["nstcam"]["subject_aware"]["mode"] == "background"
    assert count_hooks(st.net) == 0 and count_hooks(cam.model) == 0
    with pytest.raises(ValueError, match="mode must be"):
        subject_aware_stylize(content, style, mode="both", engine=st, cam=cam)


def test_report_on_identical_images_is_consistent(cam):
    img = pattern(7, 72, 56)
    rep = recognition_report(img, img, cam, top_k=2)
    assert rep.iou == 1.0 and rep.same_top1 and rep.kept_in_top_k
    assert rep.before[0].score == pytest.approx(rep.after[0].score)
    h = rep.before[0].heatmap
    assert map_iou(h, h) == 1.0
    assert map_iou(np.zeros((4, 4)), np.zeros((4, 4))) == 1.0
    assert map_iou(np.eye(4), 1 - np.eye(4)) == 0.0


def test_subject_from_a_segmenter_and_its_refusals(st, cam, tmp_path, caplog):
    from nstcam.cli import main
    from nstcam.subject import segment_mask

    seg = GradCAM("lraspp_mobilenet_v3_large", weights="random", device="cpu", input_size=64)
    img = pattern(3, 96, 64)
    found = seg.explain(img, top_k=1)[0]  # the class random weights predict most
    mask, saliency = segment_mask(img, seg, [found.label], mode="subject", feather=0, dilate=0)
    assert saliency.label == found.label and np.array_equal(mask > 0.5, found.mask)  # its pixels, as found
    res = subject_aware_stylize(img, pattern(4), engine=st, cam=cam, masker=seg, classes=[found.label],
                                mode="background", size=64, steps=2, report=True)  # fmt: skip
    meta = res.image.info["nstcam"]["subject_aware"]
    assert meta["masker"] == "lraspp_mobilenet_v3_large" and meta["classes"] == [found.label]
    assert res.report is not None and res.mask.shape == (64, 96)
    absent = next(
        c for c in seg.categories[1:] if c != found.label and c not in {r.label for r in seg.explain(img)}
    )
    with pytest.raises(ValueError, match=f"classes: the segmenter found no pixel of {absent}"):
        segment_mask(img, seg, [absent])
    with pytest.raises(ValueError, match="masker must be a segmenter"):
        segment_mask(img, cam, ["cat"])
    assert count_hooks(seg.model) == 0
    photo = tmp_path / "p.png"
    img.save(photo)
    args = ["stylize", str(photo), "--style", str(photo), "--segment", "person", "-o", str(tmp_path / "o")]
    assert main([*args, "--weights", "random"]) == 2
    assert "--segment names the subject of --subject-aware" in caplog.text

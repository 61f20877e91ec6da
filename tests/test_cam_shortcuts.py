"""Shortcuts (nstcam/cam/targets/shortcuts.py): a detector's detections recomputed from their own proposals,
a segmenter's region read on its head's grid; same values and same gradients as the full graph, at
a fraction of its backward (tests/benchmarks/bench_cam_found.py has the times)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchvision.ops.poolers as poolers
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn
from torchvision.models.segmentation import lraspp_mobilenet_v3_large

import nstcam.cam.targets.one_pass as tp
from nstcam.cam.targets import RegionTarget, adjoint_upsample, predicted
from nstcam.cam.targets.shortcuts import RcnnShortcut, SegmenterShortcut, shortcut
from nstcam.hooks import count_hooks


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(0)
    det = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=320, max_size=320
    ).eval()
    x = torch.rand(2, 3, 256, 320, generator=torch.Generator().manual_seed(1))
    return det, x


@pytest.fixture(scope="module")
def segmenter():
    torch.manual_seed(0)
    seg = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5).eval()
    x = torch.rand(1, 3, 96, 128, generator=torch.Generator().manual_seed(2))
    return seg, x


def _both(monkeypatch, *args, **kwargs):
    """target_pass with its shortcut, then without (the full graph)."""
    fast = tp.target_pass(*args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(tp, "shortcut", lambda *_: None)
        full = tp.target_pass(*args, **kwargs)
    return fast, full


def test_adjoint_upsample_is_the_adjoint_of_bilinear_upsampling_in_float64():
    g = torch.Generator().manual_seed(0)
    for (h, w), (big_h, big_w) in [((9, 11), (37, 53)), ((5, 5), (40, 17)), ((7, 3), (7, 3))]:
        low = torch.rand(h, w, dtype=torch.float64, generator=g)
        weights = torch.rand(big_h, big_w, dtype=torch.float64, generator=g)
        up = F.interpolate(low[None, None], size=(big_h, big_w), mode="bilinear", align_corners=False)[0, 0]
        got = (adjoint_upsample(weights, (h, w)) * low).sum()
        assert abs(float(got - (weights * up).sum())) < 1e-10 * float((weights * up).sum())


def test_rcnn_shortcut_gives_the_full_graphs_maps_and_scores_and_pools_only_the_detections(
    detector, monkeypatch
):
    det, x = detector
    pooled: list[tuple[int, bool]] = []  # (rois, whether recorded for backward) per roi_align call
    real = poolers.roi_align

    def counting(inp, rois, *a, **k):
        pooled.append((int(rois.shape[0]), torch.is_grad_enabled() and inp.requires_grad))
        return real(inp, rois, *a, **k)

    with torch.no_grad():
        out = det(x)

    def detection(j):  # detection j's score and box, read by index (BoxTarget's best match would
        # tie between random weights' near-identical boxes of different labels)
        return lambda o, i: o[i]["scores"][j] + 0.01 * o[i]["boxes"][j].sum()

    def rows(_out):
        return [[detection(j)] * 2 for j in (0, 1, 4)]

    monkeypatch.setattr(poolers, "roi_align", counting)
    (fast, fast_scores, _), (full, full_scores, _) = _both(monkeypatch, det, "backbone", "gradcam", x, rows)
    assert fast.shape == full.shape == (3, 2, *fast.shape[-2:])
    assert fast.amax() > 0
    torch.testing.assert_close(fast, full, rtol=1e-4, atol=1e-5 * float(full.amax()))
    torch.testing.assert_close(fast_scores, full_scores, rtol=1e-5, atol=1e-6)
    # the shortcut's own pooling: at most the 100 detections of an image, never the RPN's proposals
    n_dets = [len(o["boxes"]) for o in out]
    props = max(n for n, _ in pooled)
    assert props > max(n_dets)  # the forward pass pools every proposal...
    rebuilt = [n for n, _ in pooled[: len(pooled) // 2] if n <= max(n_dets)]
    assert rebuilt and max(rebuilt) <= max(n_dets)  # ...the rebuilt graph only the detections
    assert count_hooks(det) == 0


def test_rcnn_shortcut_falls_back_to_the_full_graph_when_a_detection_has_no_proposal(detector):
    det, x = detector
    with torch.no_grad(), RcnnShortcut(det) as short:
        out = det(x[:1])
        out[0]["scores"] = out[0]["scores"] + 0.01  # no proposal scores this
        assert short.rebuild(out, x[:1]) is out
    assert count_hooks(det) == 0


def test_segmenter_region_read_on_the_heads_grid_equals_the_full_output(segmenter, monkeypatch):
    seg, x = segmenter
    assert isinstance(shortcut(seg, "backbone.16"), SegmenterShortcut)
    assert shortcut(seg, "classifier.cbr") is None  # after the stage: the full graph
    with torch.no_grad():
        logits = seg(x)["out"]
    c = int(predicted(logits[0]).flatten().mode().values)
    mask = torch.rand(96, 128, generator=torch.Generator().manual_seed(5))  # soft weights

    def region(_out):
        return [[RegionTarget(c, None)], [RegionTarget((c + 1) % 5, mask)]]

    def two_classes(out, i):  # any callable: the backward upsamples only the classes it reads
        return out[i, 1].mean() - out[i, 3, :40].mean()

    (fast, fs, _), (full, fl, _) = _both(monkeypatch, seg, "backbone.16", "gradcam", x, region)
    torch.testing.assert_close(fast, full, rtol=1e-4, atol=1e-5 * float(full.amax()))
    torch.testing.assert_close(fs, fl, rtol=1e-4, atol=1e-4)
    (fast, fs, _), (full, fl, _) = _both(monkeypatch, seg, "backbone.16", "gradcam", x,
                                         lambda _o: [[two_classes]])  # fmt: skip
    torch.testing.assert_close(fast, full, rtol=1e-4, atol=1e-5 * float(full.amax()))
    torch.testing.assert_close(fs, fl)
    assert count_hooks(seg) == 0

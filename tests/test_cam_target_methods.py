"""Target objects with the perturbation methods (nstcam/cam/targets/perturbation.py) and RandomCAM: the same
maps as the class path where the score is a class's logit, pytorch-grad-cam 1.5.7's ScoreCAM for
any target, and detectors and segmenters scored on each masked or ablated copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import in_threads
from PIL import Image
from torch import nn
from torchvision.models import resnet18

from nstcam.cam import GradCAM
from nstcam.cam.targets import ClassTarget, RegionTarget, SimilarityTarget
from nstcam.hooks import count_hooks


def pearson(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())[0, 1])


@pytest.fixture(scope="module")
def res():
    torch.manual_seed(0)
    return resnet18().eval()


def _x(side: int = 64, n: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, side, side, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("method", ["ablationcam", "sscam", "iscam"])
def test_a_logit_target_gives_the_class_paths_map(res, method):
    """AblationCAM, SS-CAM and IS-CAM score a class by its logit: ClassTarget(c) is the same score."""
    x = _x()
    opts = dict(n_samples=2) if method != "ablationcam" else {}
    cam = GradCAM(model=res, target_layer="layer3", method=method, device="cpu", scorecam_batch=64, **opts)
    by_class = cam.compute(x, targets=[7, 300], raw=True)
    by_target = cam.compute(x, targets=[ClassTarget(7), ClassTarget(300)], raw=True)
    assert by_class.shape == by_target.shape == (2, 4, 4) and by_class.amax() > 0
    torch.testing.assert_close(by_target, by_class, rtol=1e-4, atol=1e-5 * float(by_class.amax()))
    assert count_hooks(res) == 0


def test_scorecam_of_any_target_matches_the_reference(res):
    pgc = pytest.importorskip("pytorch_grad_cam")
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    x = _x(n=1)
    ours = GradCAM(model=res, target_layer="layer3", method="scorecam", device="cpu").compute(
        x, targets=ClassTarget(5), raw=True
    )
    ref = pgc.ScoreCAM(model=res, target_layers=[res.layer3])
    ref.batch_size = 64
    try:
        theirs = ref(
            input_tensor=x, targets=[ClassifierOutputTarget(5)]
        )  # softmax over channels of the logit
    finally:
        ref.activations_and_grads.release()
    up = F.interpolate(ours[None], size=(64, 64), mode="bilinear", align_corners=False)[0]
    assert pearson(up, theirs) >= 0.999


def test_randomcam_takes_targets_and_is_reproducible(res):
    x = _x()
    cam = GradCAM(model=res, method="randomcam", device="cpu", seed=3)
    a = cam.compute(x, targets=ClassTarget(1), raw=True)
    assert torch.equal(a, cam.compute(x, targets=ClassTarget(1), raw=True))
    other = GradCAM(model=res, method="randomcam", device="cpu", seed=4)
    assert not torch.equal(a, other.compute(x, targets=ClassTarget(1), raw=True))


class _Levels(nn.Module):
    """A layer returning a dict of levels (as an FPN does) and a head reading both."""

    def __init__(self) -> None:
        super().__init__()
        self.fine, self.coarse = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 2, 3, stride=2, padding=1)

    def forward(self, x):
        return {"fine": torch.relu(self.fine(x)), "coarse": torch.relu(self.coarse(x))}


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.levels = _Levels()
        self.head = nn.Linear(5, 4)

    def forward(self, x):
        lv = self.levels(x)
        return self.head(torch.cat([lv["fine"].mean((2, 3)), lv["coarse"].mean((2, 3))], 1))


def test_ablationcam_of_a_dict_of_levels_zeroes_each_levels_channel():
    torch.manual_seed(0)
    net = _Net().eval()
    x = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    raw = GradCAM(model=net, target_layer="levels", method="ablationcam", device="cpu").compute(
        x, targets=ClassTarget(2), raw=True
    )
    with torch.no_grad():  # the formula: each of the 5 channels zeroed in its own level
        lv = net.levels(x)
        feats = torch.cat([lv["fine"].mean((2, 3)), lv["coarse"].mean((2, 3))], 1)[0]
        y = net.head(feats[None])[0, 2]
        drops = []
        for k in range(5):
            f = feats.clone()
            f[k] = 0
            drops.append((y - net.head(f[None])[0, 2]) / y)
        up = torch.nn.functional.interpolate(
            lv["coarse"], size=(16, 16), mode="bilinear", align_corners=False
        )
        a = torch.cat([lv["fine"], up], 1)[0]
        want = torch.relu((torch.stack(drops)[:, None, None] * a).sum(0))
    torch.testing.assert_close(raw[0], want, rtol=1e-4, atol=1e-6)


def test_perturbation_methods_explain_detections_and_classes(monkeypatch):
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    torch.manual_seed(0)
    det = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=160, max_size=160
    ).eval()
    img = Image.fromarray((np.random.default_rng(0).random((96, 128, 3)) * 255).astype(np.uint8))
    steps: list[tuple[int, int]] = []
    cam = GradCAM(
        model=det, target_layer="backbone.body.0", method="scorecam", device="cpu", scorecam_batch=8
    )
    results = cam.explain(
        img, score_threshold=0.0, max_detections=2, progress=lambda d, t: steps.append((d, t))
    )
    assert len(results) == 2 and all(r.box is not None and r.heatmap.shape == (96, 128) for r in results)
    assert (
        steps[-1] == (16, 16) and len(steps) == 2
    )  # 16 channels, 8 masked images a pass, both boxes at once
    seg = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3).eval()
    cam = GradCAM(model=seg, target_layer="backbone.0", method="ablationcam", device="cpu", input_size=64)
    (r,) = cam.explain(img, classes=[1])
    assert r.mask is not None and r.heatmap.shape == (96, 128)
    x = cam.preprocess(img)
    raw = cam.compute(x, targets=RegionTarget(1, None), raw=True)
    assert raw.shape[0] == 1 and torch.isfinite(raw).all()
    assert count_hooks(det) == 0 and count_hooks(seg) == 0


@pytest.mark.parametrize("method", ["cam", "finercam", "shapleycam", "fullgrad", "guided-gradcam"])
def test_a_class_logit_target_takes_the_class_path_of_methods_without_a_target_pass(res, method):
    x = _x()
    cam = GradCAM(model=res, method=method, device="cpu")
    torch.testing.assert_close(
        cam.compute(x, targets=[ClassTarget(3), ClassTarget(9)]), cam.compute(x, targets=[3, 9])
    )


@pytest.mark.parametrize(
    "method", ["smoothgradcam++", "shapleycam", "fullgrad", "guided-backprop", "guided-gradcam"]
)
def test_any_target_through_a_methods_own_class_pass(res, method):
    """A callable reading a class's logit gives the class's map (through the one-column model), and a
    similarity target a finite map with its own score (a cosine)."""
    x = _x()
    cam = GradCAM(
        model=res, method=method, device="cpu", n_samples=2 if method == "smoothgradcam++" else None
    )

    def logit(c):
        return lambda out, i: out[i, c]

    by_callable = cam.compute(x, targets=[logit(3), logit(9)], raw=True)
    torch.testing.assert_close(by_callable, cam.compute(x, targets=[3, 9], raw=True), rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        embedding = res(x[1:])[0]
    (r,) = cam.explain(
        Image.fromarray(np.full((64, 64, 3), 128, np.uint8)), target=SimilarityTarget(embedding)
    )
    assert np.isfinite(r.heatmap).all() and r.label == "SimilarityTarget" and -1 <= r.score <= 1
    assert count_hooks(res) == 0


def test_a_detector_with_its_own_class_pass_methods():
    """A detector given as a model has COCO's names; methods with their own class pass explain each
    box at a tensor layer, and say which methods read the FPN's dict of levels."""
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

    torch.manual_seed(0)
    det = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=160, max_size=160
    ).eval()
    img = Image.fromarray((np.random.default_rng(0).random((96, 128, 3)) * 255).astype(np.uint8))
    cam = GradCAM(model=det, method="guided-gradcam", target_layer="backbone.body.12", device="cpu")
    assert cam.categories[0] == "__background__" and cam.categories[17] == "cat"
    results = cam.explain(img, score_threshold=0.0, max_detections=2)
    assert len(results) == 2 and all(
        r.label in cam.categories and r.heatmap.shape == (96, 128) for r in results
    )
    assert all(np.isfinite(r.heatmap).all() and r.heatmap.max() == 1.0 for r in results)
    with pytest.raises(
        ValueError, match="'guided-gradcam' reads one tensor at the layer; 'backbone' gives a dict"
    ):
        GradCAM(model=det, method="guided-gradcam", device="cpu").explain(img, score_threshold=0.0)
    whole = GradCAM(model=det, method="fullgrad", device="cpu")  # the input's gradient: any layer
    assert [r.heatmap.shape for r in whole.explain(img, score_threshold=0.0, max_detections=1)] == [(96, 128)]
    assert count_hooks(det) == 0


def test_aug_smooth_flips_regions_and_boxes_with_their_image(res):
    """aug_smooth with targets: a class, a box or a region follows the flipped copies; a callable is
    refused. A target whose map is left-right symmetric by construction stays so."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    from nstcam.cam.targets import BoxTarget, flip_target

    assert flip_target(BoxTarget(1, (10, 5, 30, 20)), 100).box == (70, 5, 90, 20)
    m = torch.zeros(4, 6)
    m[:, :2] = 1
    assert torch.equal(flip_target(RegionTarget(2, m), 6).mask, m.flip(-1))
    assert flip_target(RegionTarget(2, (1, 0, 3, 4)), 6).mask == (3, 0, 5, 4)
    x = _x(n=1)
    cam = GradCAM(model=res, target_layer="layer3", device="cpu")
    smooth = cam.compute(x, targets=ClassTarget(4, softmax=True), aug_smooth=True, raw=True)
    assert smooth.shape == (1, 64, 64) and smooth.amax() > 0
    by_class = cam.compute(x, targets=4, aug_smooth=True, raw=True)  # the class path's augmentation
    smooth = cam.compute(x, targets=ClassTarget(4), aug_smooth=True, raw=True)  # the logit: the same
    torch.testing.assert_close(smooth, by_class, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="a callable target cannot say how it follows"):
        cam.compute(x, targets=lambda out, i: out[i, 4], aug_smooth=True)
    torch.manual_seed(0)
    seg = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3).eval()
    img = Image.fromarray((np.random.default_rng(0).random((64, 96, 3)) * 255).astype(np.uint8))
    cam = GradCAM(model=seg, device="cpu", input_size=64)
    (r,) = cam.explain(img, classes=[1], aug_smooth=True)
    assert r.heatmap.shape == (64, 96) and np.isfinite(r.heatmap).all()


def test_a_box_outside_the_input_is_refused_before_any_work():
    from nstcam.cam.targets import BoxTarget, check_boxes

    with pytest.raises(ValueError, match=r"BoxTarget box \(10, 10, 200, 50\) is outside the 128x96 px input"):
        check_boxes([BoxTarget(1, (10, 10, 200, 50))], 128, 96)
    with pytest.raises(ValueError, match="RegionTarget box .* is outside the 128x96 px input"):
        check_boxes([RegionTarget(1, (-5, 0, 20, 20))], 128, 96)
    check_boxes([BoxTarget(1, (0, 0, 128, 96)), RegionTarget(1, None), ClassTarget(2)], 128, 96)


@pytest.mark.parametrize("method", ["scorecam", "ablationcam", "guided-gradcam", "smoothgradcam++"])
def test_target_methods_from_threads_equal_sequential_calls(res, method):
    """The perturbation passes (a private twin for ablation) and the one-column model (a private
    twin per call): threads sharing one engine get what they get alone."""

    x = _x()
    # the perturbation methods on layer2: a pass per channel, 128 of them (layer4's 512 took 16-19 s,
    # layer3's 256 10-14 s in the suite; issue 74)
    layer = "layer2" if method in ("scorecam", "ablationcam") else "layer4"
    cam = GradCAM(model=res, target_layer=layer, method=method, device="cpu", n_samples=2, scorecam_batch=64)
    targets = [
        [ClassTarget(3, softmax=True), ClassTarget(9, softmax=True)],
        [ClassTarget(7, softmax=True)] * 2,
    ]
    alone = [cam.compute(x, targets=t, raw=True) for t in targets]
    got = in_threads(lambda i: cam.compute(x, targets=targets[i % 2], raw=True), 4)
    for i in range(4):
        torch.testing.assert_close(got[i], alone[i % 2], rtol=1e-5, atol=1e-7)
    assert count_hooks(res) == 0

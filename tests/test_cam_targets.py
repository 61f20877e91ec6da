"""Target objects (nstcam.cam.targets): classes, probabilities, regions of a segmenter, similarity to
an embedding, any callable; against pytorch-grad-cam 1.5.7's targets on seeded random models (its
SemanticSegmentationTarget and the embeddings tutorial's similarity target), r >= 0.999 per map."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import in_threads
from torch import nn
from torchvision.models import resnet18
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large

from nstcam.cam import GradCAM
from nstcam.cam.targets import BinaryTarget, BoxTarget, ClassTarget, RegionTarget, SimilarityTarget
from nstcam.hooks import count_hooks

pgc = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import (  # noqa: E402
    ClassifierOutputSoftmaxTarget,
    SemanticSegmentationTarget,
)


def pearson(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())[0, 1])


def batch(side: int = 96, n: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, side, side, generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def res():
    torch.manual_seed(0)
    return resnet18().eval()


class _Out(nn.Module):
    """The reference library's wrapper for a segmenter (its tutorial's): the ``"out"`` tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def _theirs(model, layer_module, x, targets):
    cam = pgc.GradCAM(model=model, target_layers=[layer_module])
    try:
        return cam(input_tensor=x, targets=targets)
    finally:
        cam.activations_and_grads.release()


def test_class_targets_equal_class_indices_and_softmax_matches_the_reference(res):
    x = batch()
    cam = GradCAM(model=res, device="cpu")
    by_index = cam.compute(x, targets=[3, 7])
    assert torch.equal(cam.compute(x, targets=[ClassTarget(3), ClassTarget(7)]), by_index)
    mine = cam.compute(x, targets=[ClassTarget(3, softmax=True), ClassTarget(7, softmax=True)]).numpy()
    ref = _theirs(res, res.layer4, x, [ClassifierOutputSoftmaxTarget(3), ClassifierOutputSoftmaxTarget(7)])
    assert min(pearson(mine[i], ref[i]) for i in range(2)) >= 0.999


@pytest.mark.parametrize("builder", [deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large])
def test_a_class_region_of_a_segmenter_matches_semantic_segmentation_target(builder):
    torch.manual_seed(0)
    seg = builder(weights=None, weights_backbone=None, num_classes=21).eval()
    x = batch(96)
    with torch.no_grad():
        pred = seg(x)["out"].argmax(1)
    c = int(pred[0].flatten().mode().values)  # the class random weights predict most: a real region
    masks = [(pred[i] == c).float() for i in range(2)]
    assert all(m.sum() > 0 for m in masks)
    mine = GradCAM(model=seg, target_layer="backbone.16", device="cpu").compute(
        x, targets=[RegionTarget(c, m.numpy()) for m in masks]
    )
    ref = _theirs(_Out(seg), seg.backbone["16"], x, [SemanticSegmentationTarget(c, m.numpy()) for m in masks])
    r = [pearson(mine[i], ref[i]) for i in range(2)]
    assert min(r) >= 0.999, r
    # no mask: the pixels the model predicts as the class, the same region
    auto = GradCAM(model=seg, target_layer="backbone.16", device="cpu").compute(x, targets=RegionTarget(c))
    assert torch.allclose(auto, mine, atol=1e-5)
    assert count_hooks(seg) == 0


def test_similarity_to_an_embedding_matches_the_embeddings_tutorial(res):
    embedder = nn.Sequential(*list(res.children())[:-1], nn.Flatten()).eval()  # resnet18's pooled features
    x = batch()
    with torch.no_grad():
        concept = embedder(batch(96, 1) * 0.5 + 0.2)[0]

    class SimilarityToConceptTarget:  # pytorch-grad-cam's tutorial, Pixel Attribution for embeddings
        def __init__(self, features):
            self.features = features

        def __call__(self, model_output):
            return torch.nn.CosineSimilarity(dim=0)(model_output, self.features)

    mine = GradCAM(model=embedder, target_layer="7", device="cpu").compute(
        x, targets=SimilarityTarget(concept)
    )
    ref = _theirs(embedder, embedder[7], x, [SimilarityToConceptTarget(concept)] * 2)
    r = [pearson(mine[i], ref[i]) for i in range(2)]
    assert min(r) >= 0.999, r


def test_any_callable_and_gradient_free_methods_take_targets(res):
    x = batch()
    cam = GradCAM(model=res, device="cpu")
    assert torch.equal(cam.compute(x, targets=lambda out, i: out[i, 5]), cam.compute(x, targets=5))
    single = nn.Sequential(res, nn.Linear(1000, 1)).eval()
    pos = GradCAM(model=single, target_layer="0.layer4", device="cpu").compute(x, targets=BinaryTarget())
    neg = GradCAM(model=single, target_layer="0.layer4", device="cpu").compute(x, targets=BinaryTarget(False))
    assert pos.shape == neg.shape == (2, 96, 96) and not torch.equal(pos, neg)
    eigen = GradCAM(model=res, method="eigencam", device="cpu")
    assert torch.equal(eigen.compute(x, targets=ClassTarget(1)), eigen.compute(x, targets=ClassTarget(2)))


def test_targets_that_do_not_fit_are_refused_before_any_work(res):
    x = batch()
    cam = GradCAM(model=res, device="cpu")
    with pytest.raises(ValueError, match="BoxTarget reads a detector's output; this model is a classifier"):
        cam.compute(x, targets=BoxTarget(1, (0, 0, 10, 10)))
    with pytest.raises(ValueError, match="RegionTarget reads a segmenter's output"):
        cam.compute(x, targets=RegionTarget(1))
    with pytest.raises(ValueError, match="targets has 3 entries for a batch of 2"):
        cam.compute(x, targets=[ClassTarget(1)] * 3)
    with pytest.raises(ValueError, match="mixes class indices and target objects"):
        cam.compute(x, targets=[1, ClassTarget(1)])
    with pytest.raises(
        ValueError, match="method 'cam' explains class indices \\(or a ClassTarget's logit\\)"
    ):
        GradCAM(model=res, method="cam", device="cpu").compute(x, targets=ClassTarget(1, softmax=True))
    with pytest.raises(ValueError, match="aug_smooth flips the image, and a callable target"):
        cam.compute(x, targets=lambda out, i: out[i, 1], aug_smooth=True)
    with pytest.raises(ValueError, match="box is \\(x0, y0, x1, y1\\)"):
        BoxTarget(1, (5, 5, 1, 1))
    with pytest.raises(ValueError, match="SimilarityTarget embedding has 3 values; the model gives 1000"):
        cam.compute(x, targets=SimilarityTarget([1.0, 2.0, 3.0]))
    assert count_hooks(res) == 0  # none left after the refusals either


def test_targets_from_threads_equal_sequential_runs(res):
    x = batch()
    cam = GradCAM(model=res, device="cpu")
    jobs = [ClassTarget(k, softmax=bool(k % 2)) for k in range(6)]
    alone = [cam.compute(x, targets=t) for t in jobs]
    out = in_threads(lambda k: cam.compute(x, targets=jobs[k]), 6)
    assert all(torch.equal(out[k], alone[k]) for k in range(6))
    assert count_hooks(res) == 0 and not res.training


def test_explain_takes_a_target_object_and_reports_its_score(res):
    from PIL import Image

    img = Image.fromarray((np.random.default_rng(1).random((64, 80, 3)) * 255).astype(np.uint8))
    cam = GradCAM(model=res, device="cpu")
    (r,) = cam.explain(img, target=ClassTarget(3, softmax=True))
    (plain,) = cam.explain(img, target=3)
    assert r.class_index == 3 and r.label.startswith("ClassTarget: ") and r.heatmap.shape == (64, 80)
    assert abs(r.score - plain.score) < 1e-6  # the target's score: here the probability
    with pytest.raises(ValueError, match="evaluate measures a class's probability"):
        cam.explain(img, target=ClassTarget(3), evaluate=True)


# -- detectors: an FPN's dict of levels read without user code ------------------------------------
@pytest.fixture(scope="module")
def detector():
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

    torch.manual_seed(0)  # random weights keep boxes only at a low score threshold
    det = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.001, min_size=320, max_size=320
    ).eval()
    x = torch.rand(1, 3, 320, 320, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = det(x)
    assert len(out[0]["boxes"]) > 0
    return det, x, out[0]["boxes"][0].tolist(), int(out[0]["labels"][0])


def _projection_f64(a: torch.Tensor) -> np.ndarray:
    flat = a[0].double().reshape(a.shape[1], -1).T.numpy()
    flat = flat - flat.mean(0)
    _, _, vt = np.linalg.svd(flat, full_matrices=False)
    return (flat @ vt[0]).reshape(a.shape[2:])


def test_eigencam_of_a_box_on_a_detector_against_pytorch_grad_cam(detector):
    """pytorch-grad-cam needs its tutorial's reshape of the FPN's dict (abs of each level, resized to
    the coarsest, concatenated); nstcam reads the dict itself, each level resized to the finest grid.
    Given nstcam's combination as its reshape, pytorch-grad-cam's EigenCAM is the same map up to
    numpy's arbitrary SVD sign (both checked against the projection in float64)."""
    from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget
    from pytorch_grad_cam.utils.reshape_transforms import fasterrcnn_reshape_transform

    from nstcam.cam._maps import upsample_maps
    from nstcam.cam.targets.one_pass import levels_as_one

    det, x, box, label = detector
    mine = GradCAM(model=det, target_layer="backbone", method="eigencam", device="cpu").compute(
        x, targets=BoxTarget(label, box)
    )
    theirs = {}
    for name, reshape in (("tutorial", fasterrcnn_reshape_transform), ("nstcam", levels_as_one)):
        cam = pgc.EigenCAM(det, target_layers=[det.backbone], reshape_transform=reshape)
        try:
            theirs[name] = cam(x, targets=[FasterRCNNBoxScoreTarget([label], torch.tensor([box]))])
            acts = cam.activations_and_grads.activations[0]
        finally:
            cam.activations_and_grads.release()
        if name == "nstcam":
            p = _projection_f64(acts)
            scaled = {s: upsample_maps(torch.from_numpy(np.maximum(s * p, 0))[None].float(), (320, 320))[0]
                      for s in (1, -1)}  # fmt: skip
            assert max(pearson(mine[0], scaled[s]) for s in (1, -1)) >= 0.999  # nstcam: the formula
            assert max(pearson(theirs[name][0], scaled[s]) for s in (1, -1)) >= 0.999  # theirs: too
    print(f"r against the tutorial's combination of levels: {pearson(mine[0], theirs['tutorial'][0]):.3f}")


def test_gradcam_of_a_box_on_a_detector_against_the_formula(detector):
    """pytorch-grad-cam 1.5.7 cannot take Grad-CAM of an FPN: it hooks gradients only on a tensor
    output, so it records none for the dict and fails. nstcam's map is checked against Grad-CAM
    computed here in float64 from the levels' own gradients of the box's score."""
    from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget
    from pytorch_grad_cam.utils.reshape_transforms import fasterrcnn_reshape_transform

    from nstcam.cam.targets.one_pass import levels_as_one

    det, x, box, label = detector
    cam = pgc.GradCAM(det, target_layers=[det.backbone], reshape_transform=fasterrcnn_reshape_transform)
    try:
        with pytest.raises(AttributeError):
            cam(x, targets=[FasterRCNNBoxScoreTarget([label], torch.tensor([box]))])
    finally:
        cam.activations_and_grads.release()
    mine = GradCAM(model=det, target_layer="backbone", device="cpu").compute(
        x, targets=BoxTarget(label, box), raw=True
    )
    kept: dict = {}

    def keep(_m, _i, out):
        kept.update({k: v.detach().requires_grad_(True) for k, v in out.items()})
        return type(out)((k, v.clone()) for k, v in kept.items())

    handle = det.backbone.register_forward_hook(keep)
    try:
        out = det(x)
        score = BoxTarget(label, box)(out, 0)
        grads = torch.autograd.grad(score, list(kept.values()), allow_unused=True)
    finally:
        handle.remove()
    a = levels_as_one(kept).double()
    g = levels_as_one({k: (gr if gr is not None else torch.zeros_like(v)) for (k, v), gr in
                       zip(kept.items(), grads, strict=True)}).double()  # fmt: skip
    formula = torch.relu((g.mean(dim=(2, 3), keepdim=True) * a).sum(1))
    assert float(formula.abs().max()) > 0 and pearson(mine, formula) >= 0.999
    assert count_hooks(det) == 0


# -- detectors and segmenters by name: explain() gives one result per detection or class ---------------
@pytest.fixture(scope="module")
def named_detector():
    from nstcam.weights import build_model

    det = build_model("fasterrcnn_mobilenet_v3_large_fpn", "random")
    det.transform.min_size, det.transform.max_size = (320,), 320  # small and quick on a CPU
    det.roi_heads.score_thresh = 0.001  # random weights score ~1/91: keep their boxes
    return det


def _photo(w: int = 200, h: int = 150):
    from PIL import Image

    rng = np.random.default_rng(5)
    return Image.fromarray((rng.random((h // 10, w // 10, 3)) * 255).astype(np.uint8)).resize((w, h))


def test_a_detector_explains_each_detection_kept_with_its_box(named_detector, caplog):
    cam = GradCAM(model=named_detector, device="cpu")
    assert (cam.kind, cam.target_layer) == ("detector", "backbone")
    img = _photo()
    results = cam.explain(img, score_threshold=0.0, max_detections=3)
    assert len(results) == 3 and all(r.heatmap.shape == (150, 200) and r.box is not None for r in results)
    assert all(0 <= r.box[0] < r.box[2] <= 200 and 0 <= r.box[1] < r.box[3] <= 150 for r in results)
    assert results[0].score >= results[1].score >= results[2].score and results[0].label in cam.categories
    x = cam.preprocess(img)  # the image as it is: a detector resizes and normalises inside itself
    for r in results:  # each map is the Grad-CAM of its box's score, computed in the same pass
        alone = cam.compute(x, targets=BoxTarget(r.class_index, r.box), raw=True)[0].numpy()
        assert pearson(r.raw, alone) >= 0.999
    one = cam.explain(img, score_threshold=0.0, max_detections=1)  # each box's map is its own
    assert one[0].box == results[0].box and np.array_equal(one[0].raw, results[0].raw)
    drawn = np.asarray(results[0].overlay)[int(results[0].box[1]), int(results[0].box[0]) + 2]
    assert tuple(drawn) == (255, 255, 255)  # the box is drawn on its overlay
    with caplog.at_level("WARNING"):
        assert cam.explain(img, score_threshold=0.99) == []
    assert "found no detection scoring 0.99 or more (random weights find nothing" in caplog.text
    assert "--score-threshold in the CLI" in caplog.text
    with pytest.raises(ValueError, match="top_k: a detector explains boxes"):
        cam.explain(img, top_k=3)
    with pytest.raises(ValueError, match="classes: unknown class name 'unicorn'"):
        cam.explain(img, classes=["unicorn"])
    assert count_hooks(named_detector) == 0


def test_a_detector_in_train_mode_is_explained_in_eval_mode_and_left_as_it_was(named_detector):
    img = _photo()
    cam = GradCAM(model=named_detector, device="cpu")
    want = cam.explain(img, score_threshold=0.0, max_detections=2)
    named_detector.train()
    try:
        got = cam.explain(img, score_threshold=0.0, max_detections=2)
        assert named_detector.training and all(m.training for m in named_detector.modules())
    finally:
        named_detector.eval()
    assert [r.box for r in got] == [r.box for r in want]
    assert all(np.array_equal(a.raw, b.raw) for a, b in zip(got, want, strict=True))


def test_a_segmenter_explains_each_class_present_with_its_mask():
    from PIL import Image

    cam = GradCAM("lraspp_mobilenet_v3_large", weights="random", device="cpu", input_size=96)
    assert (cam.kind, cam.target_layer) == ("segmenter", "backbone.16")
    img = _photo(120, 90)
    results = cam.explain(img, top_k=2)
    assert 1 <= len(results) <= 2 and all(r.mask.shape == (90, 120) and r.mask.dtype == bool for r in results)
    assert all(r.class_index != 0 for r in results)  # the background is left out
    shares = [r.mask.mean() for r in results]
    assert shares == sorted(shares, reverse=True)
    asked = cam.explain(img, classes=["person", results[0].label])
    assert [r.label for r in asked] == ["person", results[0].label]
    x = cam.preprocess(img)
    alone = cam.compute(x, targets=RegionTarget(results[0].class_index), raw=True)[0].numpy()
    assert pearson(results[0].raw, alone) >= 0.999 or not results[0].raw.any()
    partial = next((r for r in results if 0 < r.mask.mean() < 1), None)
    if partial is not None:  # its outline is drawn: white pixels on the mask's edge
        a = np.asarray(partial.overlay)
        assert (a[partial.mask] == 255).all(axis=-1).any()
    assert isinstance(results[0].overlay, Image.Image)


def test_detections_from_threads_equal_sequential_runs(named_detector):
    img = _photo()
    cam = GradCAM(model=named_detector, device="cpu")
    alone = cam.explain(img, score_threshold=0.0, max_detections=2)
    out = in_threads(lambda k: cam.explain(img, score_threshold=0.0, max_detections=2), 3)
    for k in range(3):
        assert [r.box for r in out[k]] == [r.box for r in alone]
        assert all(np.array_equal(a.raw, b.raw) for a, b in zip(out[k], alone, strict=True))
    assert count_hooks(named_detector) == 0

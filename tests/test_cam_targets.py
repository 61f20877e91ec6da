"""Target objects (nstcam.cam.targets): classes, probabilities, regions of a segmenter, similarity to
an embedding, any callable; against pytorch-grad-cam 1.5.7's targets on seeded random models (its
SemanticSegmentationTarget and the embeddings tutorial's similarity target), r >= 0.999 per map."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
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
    with pytest.raises(ValueError, match="method 'scorecam' explains class indices"):
        GradCAM(model=res, method="scorecam", device="cpu").compute(x, targets=ClassTarget(1))
    with pytest.raises(ValueError, match="aug_smooth flips the image"):
        cam.compute(x, targets=ClassTarget(1), aug_smooth=True)
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
    out: dict[int, torch.Tensor] = {}

    def run(k: int) -> None:
        out[k] = cam.compute(x, targets=jobs[k])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
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

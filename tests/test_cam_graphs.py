"""Grad-CAM's captured-graph path (issue 11, item 3).

On CPU the CUDA capture is replaced by an emulation that captures nothing but keeps the contract
(static input, static outputs rewritten by each replay), so the cache, the static buffers, the
lock and the fall-back are exercised here; with CUDA the real graphs are compared too.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from nstcam import count_hooks
from nstcam.cam import GradCAM
from nstcam.cam._graphed import CamGraphs


def emulated_capture(fn):
    """Runs ``fn`` into fixed output tensors on every replay, as a CUDA graph does."""
    outputs = fn()

    def replay():
        for static, new in zip(outputs, fn(), strict=True):
            static.copy_(new)

    return replay, outputs


def batch(seed: int, n: int = 1, h: int = 64, w: int = 80) -> torch.Tensor:
    return torch.randn(n, 3, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def engines():
    eager = GradCAM("resnet18", weights="random", device="cpu")
    graphed = GradCAM(model=eager.model, target_layer="layer4", device="cpu")
    graphed._graphs = CamGraphs(capture=emulated_capture)
    return eager, graphed


def test_cpu_never_takes_the_graph_path(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a CUDA graph was created without CUDA")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", refuse)
    cam = GradCAM("resnet18", weights="random", device="cpu")
    assert cam._graphs is None
    cam.compute(batch(0))
    cam.explain(batch(1)[0].sigmoid().permute(1, 2, 0).mul(255).byte().numpy(), top_k=2)
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA device"):
        GradCAM(model=cam.model, device="cpu", cuda_graphs=True)


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "layercam"])
def test_replayed_maps_equal_eager_maps_for_new_inputs(engines, method):
    eager, graphed = engines
    eager.method = graphed.method = method
    graphs = graphed._graphs
    before = graphs.captures
    graphed.compute(batch(0))  # learns the number of classes, eagerly
    for seed in range(1, 4):  # one capture for the shape, then replays of new inputs
        x = batch(seed)
        torch.testing.assert_close(graphed.compute(x), eager.compute(x), atol=1e-5, rtol=0)
    assert graphs.captures == before + 1
    assert count_hooks(graphed.model) == 0


def test_targets_top_k_and_sizes_are_separate_graphs(engines):
    eager, graphed = engines
    eager.method = graphed.method = "gradcam"
    graphed.compute(batch(0))
    x2 = batch(5, n=2)
    for targets in ([3, 7], [1, 2], 9):  # one graph for given targets, values copied per call
        torch.testing.assert_close(
            graphed.compute(x2, targets), eager.compute(x2, targets), atol=1e-5, rtol=0
        )
    big = batch(6, h=96, w=96)
    torch.testing.assert_close(graphed.compute(big), eager.compute(big), atol=1e-5, rtol=0)
    img = (batch(7)[0].sigmoid().permute(1, 2, 0) * 255).byte().numpy()
    got, want = graphed.explain(img, top_k=3), eager.explain(img, top_k=3)
    assert [r.class_index for r in got] == [r.class_index for r in want]
    for a, b in zip(got, want, strict=True):
        assert abs(a.score - b.score) < 1e-6
        assert float(abs(a.heatmap - b.heatmap).max()) < 1e-5
    with pytest.raises(ValueError, match="out of range"):
        graphed.compute(x2, [3, 5000])
    with pytest.raises(ValueError, match="top_k"):
        graphed.explain(img, top_k=5000)


def test_threads_replaying_one_graph_get_their_own_maps(engines):
    eager, graphed = engines
    eager.method = graphed.method = "gradcam"
    graphed.compute(batch(0))
    xs = [batch(s) for s in range(10, 22)]
    want = [eager.compute(x) for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(graphed.compute, xs))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=0)


def test_failed_capture_falls_back_to_eager_once(engines, caplog):
    eager, _ = engines
    eager.method = "gradcam"
    calls = []

    def broken(fn):
        calls.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    cam = GradCAM(model=eager.model, device="cpu")
    cam._graphs = CamGraphs(capture=broken)
    x = batch(3)
    cam.compute(batch(0))
    for _ in range(3):
        torch.testing.assert_close(cam.compute(x), eager.compute(x), atol=1e-6, rtol=0)
    assert len(calls) == 1 and len(cam._graphs) == 0
    assert sum("graph capture failed" in r.message for r in caplog.records) == 1


def test_cache_is_bounded():
    graphs = CamGraphs(capture=emulated_capture, max_graphs=2)
    cam = GradCAM("resnet18", weights="random", device="cpu")
    cam._graphs = graphs
    cam.compute(batch(0))
    for h in (64, 72, 80, 64):
        cam.compute(batch(1, h=h))
    assert len(graphs) == 2 and graphs.captures == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_equal_eager_on_cuda():
    eager = GradCAM("resnet18", weights="random", device="cuda", cuda_graphs=False)
    graphed = GradCAM(model=eager.model, device="cuda")
    assert graphed._graphs is not None
    graphed.compute(batch(0).cuda())
    for seed in range(1, 4):
        x = batch(seed).cuda()
        torch.testing.assert_close(graphed.compute(x), eager.compute(x), atol=1e-5, rtol=0)
    assert graphed._graphs.captures == 1 and graphed._graphs.replays >= 3

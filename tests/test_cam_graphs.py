"""Grad-CAM's captured-graph path (issue 11 item 3, made right for threads in issue 19).

On CPU the CUDA capture is replaced by one that keeps a CUDA graph's contract: the pass is traced
once (``make_fx``: the aten ops only, no Python, no hooks) and each replay runs that trace into the
static outputs, under a mode that raises on any host synchronisation (``.item()``, ``nonzero``...),
which a CUDA graph could not contain. So a foreign hook that ran inside the capture, a host sync in
the pass, a cache key that misses, or outputs shared between threads all show here, without CUDA.
"""

from __future__ import annotations

import logging
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from _tf32 import TF32Convs
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from nstcam import count_hooks
from nstcam.cam import GradCAM
from nstcam.cam._graphed import CamGraphs

_HOST_SYNCS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.equal.default,
}


class NoHostSync(TorchDispatchMode):
    """Raises on an op that waits for the device (as a CUDA graph replay could not)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _HOST_SYNCS:
            raise AssertionError(f"host synchronisation in a replayed pass: {func}")
        return func(*args, **(kwargs or {}))


def traced_capture(fn, inputs, pool):
    """A CUDA graph's contract on CPU: trace ``fn(*inputs)`` once, replay the trace into fixed outputs."""
    assert pool is None  # CPU: no memory pool
    gm = make_fx(fn)(*inputs)
    with torch.no_grad():  # a graph's outputs are plain tensors
        outputs = tuple(t.clone() for t in gm(*inputs))

    def replay():
        with torch.no_grad(), NoHostSync():
            for static, new in zip(outputs, gm(*inputs), strict=True):
                static.copy_(new)

    return replay, outputs


def batch(seed: int, n: int = 1, h: int = 64, w: int = 80) -> torch.Tensor:
    return torch.randn(n, 3, h, w, generator=torch.Generator().manual_seed(seed))


def equal_to_eager(cam: GradCAM, eager: GradCAM, seeds: range, atol: float) -> None:
    """``cam``'s maps of ``batch(seed)`` equal the eager engine's, for every seed."""
    for seed in seeds:
        x = batch(seed)
        torch.testing.assert_close(cam.compute(x), eager.compute(x), atol=atol, rtol=0)


def photo(seed: int, w: int, h: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((h, w, 3)) * 255).astype(np.uint8)


@pytest.fixture(scope="module")
def engines():
    eager = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    graphed = GradCAM(model=eager.model, target_layer="layer4", device="cpu", input_size=64)
    graphed._graphs = CamGraphs(capture=traced_capture)
    return eager, graphed


def test_cpu_never_takes_the_graph_path(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a CUDA graph was created without CUDA")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", refuse)
    cam = GradCAM("resnet18", weights="random", device="cpu")
    assert cam._graphs is None and cam.graph_stats == {
        "captures": 0,
        "replays": 0,
        "cached": 0,
        "failures": 0,
        "checked": 0,
        "mismatches": 0,
        "max_rel_err": 0.0,
    }
    cam.compute(batch(0))
    cam.explain(photo(1, 80, 64), top_k=2)
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA device"):
        GradCAM(model=cam.model, device="cpu", cuda_graphs=True)


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "layercam"])
def test_replayed_maps_equal_eager_maps_for_new_inputs(engines, method):
    eager, graphed = engines
    eager.method = graphed.method = method
    graphs = graphed._graphs
    before = graphs.captures
    x = batch(0, h=64, w=64 + len(method))  # a shape of this test's own
    graphed.compute(x)  # learns the number of classes (first call) or is the first sighting
    for seed in range(1, 5):  # seen twice: captured once, then replays of new inputs
        x = batch(seed, h=64, w=64 + len(method))
        torch.testing.assert_close(graphed.compute(x), eager.compute(x), atol=1e-5, rtol=0)
    assert graphs.captures == before + 1
    assert count_hooks(graphed.model) == 0


def test_photos_of_any_size_at_one_input_size_share_one_capture(engines):
    """The graph ends at the network's input size: three photos of different sizes (same aspect)
    resize to one input shape and replay one capture; their heatmaps come out at their own sizes."""
    eager, graphed = engines
    eager.method = graphed.method = "gradcam"
    graphs = graphed._graphs
    graphed.explain(photo(0, 100, 50), top_k=2)  # another input shape: the engine is warm
    before = dict(graphed.graph_stats)
    for seed, (w, h) in enumerate([(128, 96), (400, 300), (1024, 768)]):
        img = photo(seed, w, h)
        got, want = graphed.explain(img, top_k=2), eager.explain(img, top_k=2)
        assert [r.class_index for r in got] == [r.class_index for r in want]
        for a, b in zip(got, want, strict=True):
            assert a.heatmap.shape == (h, w) and abs(a.score - b.score) < 1e-6
            assert float(abs(a.heatmap - b.heatmap).max()) < 1e-5
    assert graphs.captures == before["captures"] + 1  # the second photo captured, the third replayed
    assert graphs.replays == before["replays"] + 2


def test_a_foreign_hook_on_the_layer_stays_out_of_the_graph(engines):
    """Another library's hook on the shared model (pytorch-grad-cam's calls ``.cpu()``; this one
    ``.item()``, a host sync a graph cannot hold) must neither break the capture nor run in replays:
    the capture runs on a hook-free twin of the network."""
    eager, _ = engines
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=traced_capture)
    calls = []
    handle = eager.model.layer4.register_forward_hook(lambda m, i, o: calls.append(float(o.sum().item())))
    try:
        cam.compute(batch(0, h=64, w=96))
        n_eager = len(calls)
        for seed in range(1, 4):
            x = batch(seed, h=64, w=96)
            torch.testing.assert_close(cam.compute(x), eager.compute(x), atol=1e-5, rtol=0)
    finally:
        handle.remove()
    assert cam._graphs.captures == 1 and cam._graphs.failures == 0 and cam._graphs.replays == 2
    # the hook ran for the eager passes (both engines') only, never in the capture or a replay
    assert n_eager == 1 and len(calls) == 1 + 1 + 3  # first call + the second (eager) + eager.compute x3


def test_targets_top_k_and_sizes_are_separate_graphs(engines):
    eager, graphed = engines
    eager.method = graphed.method = "gradcam"
    graphed.compute(batch(0))
    x2 = batch(5, n=2)
    for targets in ([3, 7], [1, 2], [4, 4], 9):  # one graph for given targets, values copied per call
        torch.testing.assert_close(
            graphed.compute(x2, targets), eager.compute(x2, targets), atol=1e-5, rtol=0
        )
    with pytest.raises(ValueError, match="out of range"):
        graphed.compute(x2, [3, 5000])
    with pytest.raises(ValueError, match="top_k"):
        graphed.explain(photo(7, 80, 64), top_k=5000)


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


def test_a_transient_capture_failure_is_retried_and_a_lasting_one_gives_up(engines, caplog):
    eager, _ = engines
    eager.method = "gradcam"
    attempts = []

    def flaky(fn, inputs, pool):  # fails once (another thread synchronised), then captures
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("operation not permitted when stream is capturing")
        return traced_capture(fn, inputs, pool)

    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=flaky)
    cam.compute(batch(0))
    equal_to_eager(cam, eager, range(1, 5), atol=1e-5)
    assert len(attempts) == 2 and cam._graphs.captures == 1 and cam._graphs.failures == 1

    def broken(fn, inputs, pool):
        attempts.append(1)
        raise RuntimeError("no graphs here")

    attempts.clear()
    cam._graphs = CamGraphs(capture=broken, max_failures=3)
    caplog.set_level(logging.WARNING)
    cam.compute(batch(0))
    equal_to_eager(cam, eager, range(1, 8), atol=1e-6)
    assert len(attempts) == 3 and len(cam._graphs) == 0  # three tries, then eager for good
    assert sum("runs eagerly from now on" in r.message for r in caplog.records) == 1


def test_a_key_first_met_in_inference_mode_replays_in_any_mode(engines):
    """Issue 39.4: a graph captured inside torch.inference_mode() held inference tensors, and every
    later call outside inference mode failed for that key, for good."""
    eager, _ = engines
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=traced_capture)
    cam.compute(batch(0))
    with torch.inference_mode():
        for seed in (1, 2):  # seen twice: captured here
            cam.compute(batch(seed))
    for seed, inference in ((3, False), (4, True), (5, False)):
        x = batch(seed)
        with torch.inference_mode(inference):
            got = cam.compute(x)
        torch.testing.assert_close(got, eager.compute(x), atol=1e-5, rtol=0)
    stats = cam.graph_stats
    assert {k: stats[k] for k in ("captures", "replays", "cached", "failures", "checked", "mismatches")} == {
        "captures": 1,
        "replays": 4,
        "cached": 1,
        "failures": 0,
        "checked": 1,
        "mismatches": 0,
    }


def test_a_failing_replay_runs_eagerly_and_is_counted(engines, caplog):
    """Issue 39.4: a replay that raises (a device fault, a graph invalidated by another capture)
    falls back to the eager pass for that call; the key is recaptured, given up after max_failures.
    (Its first two replays, the self-check's, succeed: a graph failing there is never served.)"""
    eager, _ = engines
    calls = []

    def faulty(fn, inputs, pool):
        replay, outputs = traced_capture(fn, inputs, pool)
        checked = []

        def broken_replay():
            if len(checked) < 2:  # the self-check's replay and its canary
                checked.append(1)
                return replay()
            calls.append(1)
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        return broken_replay, outputs

    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=faulty, max_failures=2)
    caplog.set_level(logging.WARNING)
    cam.compute(batch(0))
    equal_to_eager(cam, eager, range(1, 9), atol=1e-6)
    stats = cam.graph_stats
    assert stats["failures"] == 2 and stats["cached"] == 0 and stats["replays"] == 0 and len(calls) == 2
    assert stats["checked"] == 2 and stats["mismatches"] == 0
    assert sum("replay failed" in r.message for r in caplog.records) == 2
    assert sum("runs eagerly from now on" in r.message for r in caplog.records) == 1


def _faulty_capture(fault: str, scale: float = 1.001):
    """A capture whose replays go wrong as a CUDA graph could: ``scaled`` maps (``scale`` x), ``stale``
    (the outputs of the capture, never updated), ``nan``, ``raises`` at replay."""

    def capture(fn, inputs, pool):
        replay, outputs = traced_capture(fn, inputs, pool)

        def wrong():
            if fault == "raises":
                raise RuntimeError("CUDA error: unspecified launch failure")
            if fault == "stale":
                return None
            replay()
            outputs[0].mul_(scale if fault == "scaled" else float("nan"))

        return wrong, outputs

    return capture


@pytest.mark.parametrize("fault", ["scaled", "stale", "nan", "raises"])
def test_a_graph_that_disagrees_with_eager_is_never_served(engines, caplog, fault):
    """Issue 39: a new graph's first replay is compared with the eager pass before it is cached; one
    that differs (or raises) is dropped, counted, said once, and its key runs eagerly for good."""
    eager, _ = engines
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=_faulty_capture(fault))
    caplog.set_level(logging.WARNING)
    equal_to_eager(cam, eager, range(6), atol=1e-6)
    stats = cam.graph_stats
    assert stats["mismatches"] == 1 and stats["checked"] == 1 and stats["max_rel_err"] > 1e-5
    assert stats["captures"] == 0 and stats["cached"] == 0 and stats["replays"] == 0
    assert sum("disagrees with the eager pass" in r.message for r in caplog.records) == 1


def tf32_capture(fn, inputs, pool):
    """:func:`traced_capture` whose replays run their convolutions in TF32 (``tests/_tf32.py``): a
    graph on a GPU whose cuDNN picked other algorithms than the eager pass's."""
    replay, outputs = traced_capture(fn, inputs, pool)

    def tf32_replay():
        with TF32Convs():
            replay()

    return tf32_replay, outputs


def test_a_tf32_graph_fails_the_float32_check_and_passes_the_tf32_one(engines, monkeypatch):
    """On an H200 (torch 2.11) a graph captured under load differed from eager by 1.1e-3, TF32's
    noise: where the convolutions run in TF32 the check allows TF32_CHECK_TOLERANCE, and only there."""
    import nstcam.cam._graphed as G

    eager, _ = engines
    strict = GradCAM(model=eager.model, device="cpu", input_size=64)
    strict._graphs = CamGraphs(capture=tf32_capture)
    equal_to_eager(strict, eager, range(4), atol=1e-6)  # the graph was refused: every call eager
    stats = strict.graph_stats
    assert stats["mismatches"] == 1 and G.CHECK_TOLERANCE < stats["max_rel_err"] < G.TF32_CHECK_TOLERANCE / 4

    monkeypatch.setattr(G, "tf32_in_use", lambda device: True)
    loose = GradCAM(model=eager.model, device="cpu", input_size=64)
    loose._graphs = CamGraphs(capture=tf32_capture)
    for seed in range(4):
        loose.compute(batch(seed))
    stats = loose.graph_stats
    assert stats["mismatches"] == 0 and stats["captures"] == 1 and stats["replays"] >= 2, stats


@pytest.mark.parametrize("fault", ["scaled", "stale", "nan", "raises"])
def test_under_tf32_a_wrong_graph_is_still_caught(engines, monkeypatch, fault):
    """The TF32 tolerance (2e-2) still refuses a wrong graph: maps 5 % off, never updated, NaN, raising."""
    import nstcam.cam._graphed as G

    monkeypatch.setattr(G, "tf32_in_use", lambda device: True)
    eager, _ = engines
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=_faulty_capture(fault, scale=1.05))
    equal_to_eager(cam, eager, range(4), atol=1e-6)
    stats = cam.graph_stats
    assert stats["mismatches"] == 1 and stats["captures"] == 0
    assert stats["max_rel_err"] > G.TF32_CHECK_TOLERANCE


def test_the_self_check_finds_graph_outputs_handed_out_uncopied(engines, monkeypatch):
    """A CUDA graph writes every replay into the same output tensors: ``_replay`` copies them before
    the next replay. A clean graph passes its self-check with an error under 1e-6; the same replay
    without the copy is caught by the check's canary (the second replay overwrites the first's)."""
    eager, _ = engines
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=traced_capture)
    for seed in range(4):
        cam.compute(batch(seed))
    stats = cam.graph_stats
    assert stats["checked"] == 1 and stats["mismatches"] == 0 and stats["max_rel_err"] < 1e-6

    def uncopied(self, captured, x, classes):
        captured.x.copy_(x)
        if captured.classes is not None:
            captured.classes.copy_(classes)
        captured.replay()
        return captured.outputs

    monkeypatch.setattr(CamGraphs, "_replay", uncopied)
    cam._graphs = CamGraphs(capture=traced_capture)
    equal_to_eager(cam, eager, range(4), atol=1e-6)
    assert cam.graph_stats["mismatches"] == 1 and cam.graph_stats["captures"] == 0


class PoolRule:
    """torch's caching allocator's rule for graph memory pools, on CPU: a capture into a pool that
    exists must find it live (a graph captured into it not yet destroyed), else ``INTERNAL ASSERT
    FAILED ... use_count > 0``. The first graph captured is wrong (maps 1.5x), so its self-check drops it."""

    def __init__(self):
        self.made, self.live, self.captures = 0, {}, 0

    def new_pool(self):
        self.made += 1
        return ("pool", self.made)

    def capture(self, fn, inputs, pool):
        if pool in self.live and self.live[pool] == 0:
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED (CUDACachingAllocator)")
        self.live[pool] = self.live.get(pool, 0) + 1
        self.captures += 1
        replay, outputs = traced_capture(fn, inputs, None)
        scale = 1.5 if self.captures == 1 else 1.0

        def graph_replay():
            replay()
            outputs[0].mul_(scale)

        weakref.finalize(graph_replay, lambda: self.live.__setitem__(pool, self.live[pool] - 1))
        return graph_replay, outputs


def test_a_capture_never_reuses_a_pool_no_graph_holds(engines):
    """The H200 run: a first graph failed its self-check and was dropped, and the next key's capture
    into the same pool failed inside torch's allocator. A new pool is made once no graph holds it."""
    eager, _ = engines
    rule = PoolRule()
    cam = GradCAM(model=eager.model, device="cpu", input_size=64)
    cam._graphs = CamGraphs(capture=rule.capture, new_pool=rule.new_pool)
    for h in (64,) * 3 + (72,) * 4:  # 64: captured, wrong, dropped; 72: captured into a new pool
        x = batch(h, h=h)
        torch.testing.assert_close(cam.compute(x), eager.compute(x), atol=1e-6, rtol=0)
    stats = cam.graph_stats
    assert stats["failures"] == 0 and stats["mismatches"] == 1 and stats["captures"] == 1, stats
    assert stats["replays"] >= 2 and rule.made == 2 and rule.live == {("pool", 1): 0, ("pool", 2): 1}
    for h in (80,) * 4:  # a graph is held: the next capture shares its pool
        cam.compute(batch(h, h=h))
    assert rule.made == 2 and rule.live[("pool", 2)] == 2 and cam.graph_stats["captures"] == 2


def test_one_off_shapes_are_never_captured_and_the_cache_is_bounded():
    graphs = CamGraphs(capture=traced_capture, max_graphs=2)
    cam = GradCAM("resnet18", weights="random", device="cpu")
    cam._graphs = graphs
    cam.compute(batch(0))
    for h in (64, 72, 80, 88):  # each seen once
        cam.compute(batch(1, h=h))
    assert graphs.captures == 0
    for h in (64, 72, 80, 64):  # seen again: captured (64 twice: replayed once more)
        cam.compute(batch(2, h=h))
    assert len(graphs) == 2 and graphs.captures == 4  # 64 dropped by the LRU, then captured again


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_equal_eager_on_cuda_from_threads():
    eager = GradCAM("resnet18", weights="random", device="cuda", cuda_graphs=False)
    graphed = GradCAM(model=eager.model, device="cuda")
    assert graphed._graphs is not None
    graphed.compute(batch(0).cuda())
    xs = [batch(s).cuda() for s in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(graphed.compute, xs))
    for g, x in zip(got, xs, strict=True):
        torch.testing.assert_close(g, eager.compute(x), atol=1e-5, rtol=0)
    assert graphed.graph_stats["captures"] == 1 and graphed.graph_stats["replays"] >= 6

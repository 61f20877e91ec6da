"""The compiled style step proves itself at run time (issue 39), on CPU by fault injection.

The faults come in through ``torch.compile`` itself, the public seam: the engine's own call of it
returns the real compiled step (inductor, on CPU) wrapped so that it goes wrong the ways a CUDA
graph can: a term off by 1 %, a stale output (the previous call's), NaN, a step that raises on any
thread but the one torch first ran on (torch < 2.14's cudagraph trees), an output buffer that each
call overwrites. Each run's image equals the eager engine's, the self-check counts the mismatch, and
one warning says so. The Grad-CAM graphs' self-check is tested with the captures in
``test_cam_graphs.py``.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import torch
from _numeric import bound
from conftest import in_threads, pattern

import nstcam.style._compiled as C
import nstcam.style._selfcheck as S
from nstcam import StyleTransfer, build_model
from nstcam.cam import GradCAM
from nstcam.cam._graphed import CamGraphs

KW = dict(steps=3, optimizer="adam", seed=0, style_layers=["relu1_1", "relu2_1"], content_layers=["relu2_1"])
REAL_COMPILE = torch.compile


def close(a, b, levels: int = 2) -> bool:
    return int(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).max()) <= levels


def faulty(fault: str, fn):
    """``fn`` (a compiled step: (3, N) content, style and tv terms) gone wrong as ``fault`` says."""
    box: dict = {}
    main = threading.main_thread().ident

    def step(*args):
        if fault == "raises" and threading.get_ident() != main:
            raise RuntimeError("cudagraph trees: called from a thread other than the one that recorded")
        out = fn(*args)
        if fault == "scaled":
            return out * torch.tensor([1.0, 1.01, 1.0])[:, None]
        if fault == "nan":
            return out * float("nan")
        if fault == "stale":
            last, box["out"] = box.get("out"), out
            return out if last is None else last
        if fault == "static":  # a CUDA graph's output: one buffer, overwritten by every call
            return _Static.apply(out, box.setdefault("buffer", torch.zeros_like(out)))
        return out

    return step


class _Static(torch.autograd.Function):
    """Writes ``out`` into ``buffer`` and returns a view of the buffer (what a CUDA graph hands out:
    the same memory every call); the gradient goes to ``out``."""

    @staticmethod
    def forward(ctx, out, buffer):
        buffer.copy_(out)
        return buffer.view_as(buffer)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


@pytest.fixture(scope="module")
def images():
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    eager = StyleTransfer("random", device="cpu")
    return content, style, eager, eager.stylize(content, style, size=32, **KW)


TOLERANCES = {"float32": "float32", "tf32": "tf32-tolerance", "measured-error": "any-measured-error"}


@pytest.mark.parametrize("tolerance", list(TOLERANCES), ids=list(TOLERANCES.values()))
@pytest.mark.parametrize("fault", ["scaled", "stale", "nan", "raises", "static", None])
def test_a_wrong_compiled_step_is_caught_and_the_run_equals_eager(
    images, monkeypatch, caplog, fault, tolerance
):
    """Each fault is caught, also under the looser tolerance of a GPU whose convolutions run in TF32,
    and however large the eager step's measured float32 error (the tolerance stops at the ceiling)."""
    content, style, eager, want = images
    monkeypatch.setattr(C, "tf32_in_use", lambda device: tolerance == "tf32")
    if tolerance == "measured-error":  # float32 as bad as it gets: every tolerance at the ceiling
        monkeypatch.setattr(C, "float32_error", lambda *a: S.Tolerance(terms=1.0, grad=1.0, cosine=0.0))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: faulty(fault, REAL_COMPILE(fn, **kw)))
    engine = StyleTransfer(model=eager.model, device="cpu", compile=True)
    caplog.set_level(logging.WARNING)
    got = engine.stylize(content, style, size=32, **KW)
    assert close(got, want), fault
    stats = engine.compile_stats
    said = [r for r in caplog.records if "disagrees with eager" in r.message]
    if fault in (None, "static"):  # "static": right only because the step copies its output
        assert stats["mismatches"] == 0 and stats["checked"] == 2 and stats["max_rel_err"] < 1e-4, stats
        assert stats["shapes"] == 1 and not said
        return
    assert stats["mismatches"] == 1 and stats["checked"] == 1 and stats["eager_shapes"] == 1, stats
    assert stats["max_rel_err"] > 1e-3 and len(said) == 1
    again = engine.stylize(content, style, size=32, **KW)  # the key stays eager: no new check, no warning
    assert close(again, want) and engine.compile_stats["checked"] == 1
    assert len([r for r in caplog.records if "disagrees with eager" in r.message]) == 1


def test_two_compiled_engines_from_two_threads_each_equal_their_own_eager_run():
    """Issue 39.3: a closure made in one place shares one code object, so torch.compile served one
    engine's compiled graph to another (other weights); each engine's step now has code of its own."""
    from torch._dynamo.utils import counters

    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    eagers = [StyleTransfer(model=build_model("vgg16_bn", "random", seed=s), device="cpu") for s in (0, 1)]
    wants = [e.stylize(content, style, size=32, **KW) for e in eagers]
    assert not close(wants[0], wants[1], 8)  # other weights, another image
    engines = [StyleTransfer(model=e.model, device="cpu", compile=True) for e in eagers]
    before = counters["stats"]["unique_graphs"]
    got = in_threads(lambda i: engines[i].stylize(content, style, size=32, **KW), 2)
    for g, w, e in zip(got, wants, engines, strict=True):
        assert close(g, w)
        stats = e.compile_stats
        assert stats["shapes"] == 1 and stats["mismatches"] == 0 and stats["torch_fallbacks"] == 0
    assert counters["stats"]["unique_graphs"] - before == 2  # one graph each, none shared


def test_style_compiles_beside_grad_cam_captures_never_overlap(monkeypatch):
    """Issue 39.1: the compiled style step's first calls (where CUDA graphs warm up and record) and
    Grad-CAM's captures take one process-wide lock; a Grad-CAM capture that finds it held runs that
    call eagerly. Style jobs at new sizes on two engines and Grad-CAM of new shapes, from threads:
    a fake capture and a fake compiled step each assert that no other capture is under way."""
    from test_cam_graphs import traced_capture

    active, overlaps, lock = [0], [], threading.Lock()

    def capturing(what: str):
        with lock:
            if active[0]:
                overlaps.append(what)
            active[0] += 1
        time.sleep(0.02)
        with lock:
            active[0] -= 1

    def fake_capture(fn, inputs, pool):
        capturing("grad-cam")
        return traced_capture(fn, inputs, pool)

    def fake_compile(fn, **_kw):
        seen: dict = {}

        def step(x, *args):
            n = seen[x.shape] = seen.get(x.shape, 0) + 1
            if n <= 2:  # cudagraph trees: warm-up, then recording
                capturing("style")
            return fn(x, *args)

        return step

    monkeypatch.setattr(torch, "compile", fake_compile)
    eager_cam = GradCAM("resnet18", weights="random", device="cpu")
    cams = []
    for _ in range(6):  # one per Grad-CAM job
        cam = GradCAM(model=eager_cam.model, device="cpu")
        cam._graphs = CamGraphs(capture=fake_capture, capture_after=1)
        cams.append(cam)
    eager_st = StyleTransfer("random", device="cpu")
    styles = [StyleTransfer(model=eager_st.model, device="cpu", compile=True) for _ in range(2)]
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    kw = {**KW, "steps": 2}

    def job(i: int):
        if i < 4:  # style at new sizes, two engines
            return styles[i % 2].stylize(content, style, size=24 + 8 * i, **kw)
        x = torch.randn(1, 3, 40 + 8 * i, 48, generator=torch.Generator().manual_seed(i))
        cam = cams[i - 4]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # a capture that finds the lock held is deferred: eager
            before = cam.graph_stats["captures"]
            got = cam.compute(x)
            if cam.graph_stats["captures"] > before:
                break
        return got, eager_cam.compute(x)

    results = in_threads(job, 10)
    assert not overlaps, overlaps
    for i, r in enumerate(results):
        if i < 4:
            assert close(r, eager_st.stylize(content, style, size=24 + 8 * i, **kw))
        else:
            torch.testing.assert_close(r[0], r[1], atol=1e-5, rtol=0)
    assert all(s.compile_stats["mismatches"] == 0 for s in styles)
    assert sum(c.graph_stats["captures"] for c in cams) == 6
    assert all(s.compile_stats["shapes"] for s in styles)


def test_the_self_check_costs_a_few_evaluations_per_key(images, monkeypatch):
    """The cost said in README: per new key, 4 compiled and 2 eager evaluations, once."""
    content, style, eager, _ = images
    calls = []
    monkeypatch.setattr(C, "_build", lambda rt, *key: lambda *a: calls.append(1) or _step(rt, key, a))
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)
    engine = StyleTransfer(model=eager.model, device="cpu", compile=True)
    engine.stylize(content, style, size=32, **KW)
    assert len(calls) == 4 + KW["steps"]
    engine.stylize(content, style, size=32, **KW)
    assert len(calls) == 4 + 2 * KW["steps"]  # a key already checked: no more


_BUILT: dict = {}


def _step(rt, key, args):
    """The real (uncompiled) step of ``key`` for ``rt``, built once."""
    fn = _BUILT.get((id(rt), key))
    if fn is None:
        fn = _BUILT[(id(rt), key)] = _REAL_BUILD(rt, *key)
    return fn(*args)


_REAL_BUILD = C._build


def _in_new_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("value", fn()))
    t.start()
    t.join()
    return box["value"]


@pytest.mark.parametrize("torch_sets_it_up", [True, False], ids=["torch-2.14", "torch-2.11"])
def test_a_new_thread_adopts_cudagraph_trees_once(monkeypatch, torch_sets_it_up):
    """torch <= 2.13 keeps the CUDA-graph trees on the thread that imported inductor's module: a compiled
    call from the style engine's owner thread failed on a bare assert (an H200, torch 2.11). The owner
    thread sets them up for itself, with torch's own helper where it has one, else as it would."""
    from torch._inductor import cudagraph_trees as trees

    from nstcam._capture import adopt_cudagraph_trees

    if not torch_sets_it_up:
        monkeypatch.delattr(trees, "_initialize_tls", raising=False)

    def on_a_new_thread():
        had = hasattr(trees.local, "tree_manager_containers")
        first, second = adopt_cudagraph_trees(), adopt_cudagraph_trees()
        stashed = torch._C._get_obj_in_tls("tree_manager_containers")  # what its autograd workers get
        return had, first, second, stashed is trees.local.tree_manager_containers, id(stashed)

    had, first, second, same, ident = _in_new_thread(on_a_new_thread)
    assert (had, first, second, same) == (False, True, False, True)
    adopt_cudagraph_trees()
    assert not adopt_cudagraph_trees()  # this thread has them now, if it had not imported the module
    assert ident != id(trees.local.tree_manager_containers)  # each thread its own trees


@pytest.mark.parametrize("loss", ["gram", "sliced", "wasserstein"])
def test_tf32_convolutions_fail_the_float32_check_and_pass_the_tf32_one(monkeypatch, loss):
    """The first GPU run (an H200, torch 2.11): every compiled float32 key failed its self-check, its
    gradient 1.2e-2 to 6.1e-2 from eager's. TF32 convolutions do that (``tests/_tf32.py`` simulates
    them here; bench_selfcheck.py --tf32 measures 4.2 % to 5.4 % at 96 to 384 px); where they are in
    use the check allows :data:`TF32`, and only there."""
    from _tf32 import tf32_convs

    from nstcam.hooks import twin
    from nstcam.style._selfcheck import FP32, TF32

    monkeypatch.setattr(C, "twin", lambda net: tf32_convs(twin(net)))  # the 'compiled' step: TF32 convs
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    content, style = pattern(1, 96, 64), pattern(11, 64, 64)
    kw = dict(size=96, steps=2, optimizer="adam", seed=0, style_loss=loss)
    model = build_model("vgg16_bn", "random")
    strict = StyleTransfer(model=model, device="cpu", compile=True)
    strict.stylize(content, style, **kw)
    assert strict.compile_stats["max_rel_err"] > FP32.grad * 10
    if loss != "wasserstein":  # W2's own tolerance (1e-1) passes some of these already
        assert strict.compile_stats["mismatches"] == 1 and strict.compile_stats["shapes"] == 0

    monkeypatch.setattr(C, "tf32_in_use", lambda device: True)
    loose = StyleTransfer(model=model, device="cpu", compile=True)
    loose.stylize(content, style, **kw)
    stats = loose.compile_stats
    assert stats["mismatches"] == 0 and stats["shapes"] == 1 and stats["max_rel_err"] < TF32.grad / 2, stats


def test_the_measured_float32_error_widens_a_tolerance_up_to_the_ceiling_only():
    """Issue 48: where float32 itself is far from float64 (as on ties in max pooling, gradients 1.6e-2
    apart at cosine 0.99987 on an AMD EPYC) the check allows ten times the eager step's measured error;
    a tolerance is never tightened, and never loosened past TF32's."""
    tied = S.Tolerance(terms=1e-7, grad=1.6e-2, cosine=0.99987)
    got = S.widened(S.FP32, tied)
    assert got == S.Tolerance(terms=S.FP32.terms, grad=0.16, cosine=pytest.approx(0.9987))
    assert S.widened(S.FP32, S.Tolerance(1e-9, 1e-9, 1.0)) == S.FP32  # exact float32: the base holds
    assert S.widened(S.FP32, S.Tolerance(1.0, 1.0, 0.0)) == S.CEILING
    assert S.widened(S.BF16, S.Tolerance(0.0, 0.0, 1.0)) == S.BF16


def test_the_float64_reference_measures_float32s_own_error(monkeypatch):
    """The eager step against the same step in float64, at the probe: float32 rounding, no more."""
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    engine = StyleTransfer(model=build_model("vgg16_bn", "random", seed=0), device="cpu", compile=True)
    seen = []
    real = C.float32_error
    monkeypatch.setattr(C, "float32_error", lambda *a: seen.append(real(*a)) or seen[-1])
    engine.stylize(content, style, size=32, **KW)
    (error,) = seen
    bound("eager float32 terms vs float64, relative", error.terms, "<", 1e-5)
    bound("eager float32 gradient vs float64, relative L2", error.grad, "<", 1e-4)
    assert engine.compile_stats["mismatches"] == 0


def test_the_app_warm_up_compiles_and_keeps_its_keys_on_this_cpu():
    """Issue 48: ``warmup(96, 64)`` refused its key on an AMD EPYC (a blank image, pooling on ties), and
    under ATEN_CPU_CAPABILITY=default or avx2 torch's inductor broke on its own reading of the variable:
    the engine names the vector width instead (``compile_options``). Under every setting of the numeric
    matrix, the app's start-up warm-up keeps every key: no mismatch, no failure. Its first size is
    ``warmup(96, 64)``'s. A new key costs 15-35 s of inductor's C++ on 2 cores with a cold cache (CI's),
    so the test warms that key of the app's four (3:2, 1:1, 2:3, 4:3); the others are the same step at
    other shapes, and ``bench_selfcheck.py --app-keys 96`` warms all four (issue 74)."""
    from nstcam.app import AppConfig, Models

    engine = StyleTransfer(model=build_model("vgg16_bn", "random", seed=0), device="cpu", compile=True)
    models = Models(AppConfig(random_weights=True, device="cpu", max_size=96, max_steps=20))
    models._style = engine
    sizes = models.warm_sizes()
    assert sizes == [(96, 64), (96, 96), (64, 96), (96, 72)]
    models.warm_sizes = lambda: [sizes[0]]  # this instance only
    thread = models.warm()
    thread.join()
    n = 1
    stats = engine.compile_stats
    assert stats["shapes"] == n and stats["checked"] == 2 * n, stats
    assert stats["mismatches"] == 0 and stats["failures"] == 0 and stats["torch_fallbacks"] == 0, stats
    # within the tolerance the check applied: the float32 one, widened where float32 itself is less
    # exact at the key (the photo's clamped probe has flat patches where pooling ties), never past TF32's
    bound("compiled vs eager, largest relative error", stats["max_rel_err"], "<", S.CEILING.grad)

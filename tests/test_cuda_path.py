"""The compiled style step's contract with a server's threads (issue 19), as far as a CPU holds it:
every compiled call runs on the engine's one owner thread, a failure at any step falls back for that
step and is counted, a shape is given up only after repeated failures, the recompile limit is said,
and bf16 is used only where the GPU has it."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import pattern

import nstcam.style._compiled as C
from nstcam import PixelAnchor, StyleTransfer
from nstcam._device import bf16_autocast

KW = dict(steps=3, optimizer="adam", seed=0, style_layers=["relu1_1", "relu2_1"], content_layers=["relu2_1"])


def close(a, b, levels: int = 2) -> bool:
    return int(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).max()) <= levels


class _FailingBackward(torch.autograd.Function):
    """Identity forward; its backward raises, as a compiled step's backward might (a CUDA graph)."""

    @staticmethod
    def forward(ctx, x, call):
        ctx.call = call
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"injected backward failure at call {ctx.call}")


@pytest.fixture
def recorded(monkeypatch):
    """The compiled step, recording the thread of every call; ``fail`` makes chosen calls raise."""
    threads: list[int] = []
    fail: list[int] = []  # call numbers (1-based) that raise; -(N + 100): call N's backward raises
    calls = [0]
    build = C._build

    def recording_build(rt, *key):
        fn = build(rt, *key)

        def step(*args):
            calls[0] += 1
            threads.append(threading.get_ident())
            if calls[0] in fail or -1 in fail:
                raise RuntimeError(f"injected failure at call {calls[0]}")
            out = fn(*args)
            return _FailingBackward.apply(out, calls[0]) if -(calls[0] + 100) in fail else out

        return step

    monkeypatch.setattr(C, "_build", recording_build)
    return threads, fail


CHECK_CALLS = 4
"""Compiled calls of a new key's self-check (two checks, each the image and its canary): a run's
first step is call CHECK_CALLS + 1."""


def core(stats: dict) -> dict:
    """The compiled step's shape bookkeeping (the self-check's figures are asserted apart)."""
    return {k: stats[k] for k in ("shapes", "eager_shapes", "failures")}


def test_every_compiled_call_runs_on_the_owner_thread_and_threads_equal_eager(recorded):
    """CPU inductor (about 20 s a size on 2 cores): warm-up from the main thread, then 4 threads at
    once and a new size among them. Each result equals eager; one compile per size; no fallback; and
    the compiled function never ran on a request's thread (the CUDA-graph trees' rule)."""
    threads, _ = recorded
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    eager = StyleTransfer("random", device="cpu")
    engine = StyleTransfer(model=eager.model, device="cpu", compile=True)
    assert engine.warmup(32, 21, style_layers=KW["style_layers"], content_layers=KW["content_layers"]) > 0
    sizes = [32, 32, 40, 32]  # 40: a new size mid-run
    want = [eager.stylize(content, style, size=s, **KW) for s in sizes]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda s: engine.stylize(content, style, size=s, **KW), sizes))
    for g, w in zip(got, want, strict=True):
        assert g.size == w.size and close(g, w)
    stats = engine.compile_stats
    assert core(stats) == {"shapes": 2, "eager_shapes": 0, "failures": 0}
    assert stats["checked"] == 4 and stats["mismatches"] == 0 and stats["max_rel_err"] < 1e-4  # 2 per size
    assert stats["recompiles"] == 1 and stats["torch_fallbacks"] == 0
    owner = engine._rt.owner.ident
    assert owner is not None and owner != threading.get_ident()
    assert threads and set(threads) == {owner}, "a compiled call ran outside the owner thread"


def test_a_failure_after_the_probe_falls_back_for_that_step(recorded, monkeypatch, caplog):
    _, fail = recorded
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)  # no inductor: the contract only
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    eager = StyleTransfer("random", device="cpu").stylize(content, style, size=32, **KW)
    engine = StyleTransfer("random", device="cpu", compile=True)
    fail.append(CHECK_CALLS + 2)  # after the self-check's calls, the first step: the second step fails
    caplog.set_level(logging.WARNING)
    got = engine.stylize(content, style, size=32, **KW)
    assert close(got, eager) and len(got.info["nstcam"]["history"]) == 3
    assert core(engine.compile_stats) == {"shapes": 1, "eager_shapes": 0, "failures": 1}
    assert f"injected failure at call {CHECK_CALLS + 2}); running eagerly for this step" in caplog.text

    assert engine._rt.compiled_shapes and all(v is True for v in engine._rt.compiled_shapes.values())
    fail.append(-1)  # from now on every call fails: the shape is given up after 3
    caplog.clear()
    got = engine.stylize(content, style, size=32, steps=5, **{k: v for k, v in KW.items() if k != "steps"})
    stats = engine.compile_stats
    assert stats["eager_shapes"] == 1 and stats["failures"] == C.MAX_FAILURES  # over the engine's life
    assert sum("from now on" in r.message for r in caplog.records) == 1
    assert len(got.info["nstcam"]["history"]) == 5


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_a_failed_backward_of_the_compiled_step_runs_that_step_eagerly(
    recorded, monkeypatch, caplog, optimizer
):
    threads, fail = recorded  # one entry per compiled call
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    kw = {**KW, "optimizer": optimizer}
    eager = StyleTransfer("random", device="cpu").stylize(content, style, size=32, **kw)
    engine = StyleTransfer("random", device="cpu", compile=True)
    fail.append(-(CHECK_CALLS + 2 + 100))  # the second step's backward fails, after its forward succeeded
    caplog.set_level(logging.WARNING)
    got = engine.stylize(content, style, size=32, **kw)
    assert close(got, eager) and len(got.info["nstcam"]["history"]) == 3
    assert core(engine.compile_stats) == {"shapes": 1, "eager_shapes": 0, "failures": 1}
    said = f"injected backward failure at call {CHECK_CALLS + 2}); running eagerly for this step"
    assert said in caplog.text
    anchored = engine.stylize(content, style, size=32, anchors=[PixelAnchor(content, None, 10.0)], **kw)
    fail.append(-(len(threads) + 2 + 100))  # with anchors too: the next run's second step
    again = engine.stylize(content, style, size=32, anchors=[PixelAnchor(content, None, 10.0)], **kw)
    assert close(again, anchored) and again.info["nstcam"]["history"][-1]["anchor"] > 0
    assert engine.compile_stats["failures"] == 2  # the anchored run's failed backward, recovered


def test_past_the_recompile_limit_a_new_size_runs_eagerly_and_says_so(recorded, monkeypatch, caplog):
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)
    monkeypatch.setattr(C, "recompile_limit", lambda: 1)
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    engine = StyleTransfer("random", device="cpu", compile=True)
    caplog.set_level(logging.WARNING)
    engine.stylize(content, style, size=32, **KW)
    engine.stylize(content, style, size=40, **KW)
    assert core(engine.compile_stats) == {"shapes": 1, "eager_shapes": 1, "failures": 0}
    assert "recompile limit (1 sizes per step) is reached" in caplog.text


def test_bf16_only_where_the_gpu_has_it(monkeypatch, caplog):
    cuda = torch.device("cuda")
    assert bf16_autocast(True, torch.device("cpu")) is False
    assert bf16_autocast(False, cuda) is False
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d=None: (7, 5))  # a T4
    caplog.set_level(logging.WARNING)
    assert bf16_autocast(True, cuda) is False
    assert "no native bfloat16; running fp32" in caplog.text
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d=None: (8, 0))  # an A100
    assert bf16_autocast(True, cuda) is True


def test_tf32_is_said_in_use_where_the_gpu_and_torch_flags_make_it(monkeypatch):
    """The self-checks' TF32 tolerances apply on an Ampere-or-newer GPU under torch's default flags only."""
    from nstcam._capture import tf32_in_use

    cuda = torch.device("cuda")
    assert tf32_in_use("cpu") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d=None: (9, 0))  # an H100/H200
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # torch's default
    assert tf32_in_use(cuda) is True
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert tf32_in_use(cuda) is (torch.get_float32_matmul_precision() != "highest")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")  # matmuls in TF32
    assert tf32_in_use(cuda) is True
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d=None: (7, 5))  # a T4: no TF32
    assert tf32_in_use(cuda) is False


def test_the_app_compiles_its_common_sizes_at_start_where_steps_compile(monkeypatch):
    from nstcam.app import AppConfig, Models

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=64, max_steps=20))
    assert models.warm() is None  # CPU: nothing compiles, nothing to warm
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)
    models._style = StyleTransfer("random", device="cpu", compile=True)
    assert models.warm_sizes() == [(64, 42), (64, 64), (42, 64), (64, 48)]
    thread = models.warm()
    thread.join(120)
    assert not thread.is_alive() and models.style().compile_stats["shapes"] == 4


def test_the_distribution_losses_compile_and_equal_eager(recorded):
    """CPU inductor (about 20 s each on 2 cores): the W2 and sliced losses through the compiled
    step give eager's losses at every step (sliced: the same directions, drawn once per step)."""
    threads, _ = recorded
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    eager = StyleTransfer("random", device="cpu")
    engine = StyleTransfer(model=eager.model, device="cpu", compile=True)
    for loss in ("sliced", "wasserstein"):
        kw = {**KW, "steps": 4, "style_loss": loss}
        got, want = (
            engine.stylize(content, style, size=32, **kw),
            eager.stylize(content, style, size=32, **kw),
        )
        for g, w in zip(got.info["nstcam"]["history"], want.info["nstcam"]["history"], strict=True):
            # W2: eigh's float noise, which Adam's steps carry; with the layer balance's weights the
            # style term differed by 1.14e-3 relative at step 4 under oneDNN's SSE4.1 kernels
            assert g["style"] == pytest.approx(w["style"], rel=2e-3), (loss, g, w)
        d = np.abs(np.asarray(got, np.int16) - np.asarray(want, np.int16))
        assert d.mean() < 1.0, (loss, d.mean())  # W2: eigh's float noise, which Adam's step amplifies
    stats = engine.compile_stats
    assert core(stats) == {"shapes": 2, "eager_shapes": 0, "failures": 0}
    assert stats["checked"] == 4 and stats["mismatches"] == 0  # each within its loss' own tolerance
    assert len(threads) >= 2 * (CHECK_CALLS + 4)  # the self-check's calls + 4 steps per loss ran compiled


def test_a_failed_compiled_sliced_step_falls_back_on_the_same_directions(recorded, monkeypatch):
    threads, fail = recorded
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)  # no inductor: the contract only
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    for optimizer in ("adam", "lbfgs"):
        kw = {**KW, "steps": 25, "style_loss": "sliced", "optimizer": optimizer}
        want = StyleTransfer("random", device="cpu").stylize(content, style, size=32, **kw)
        engine = StyleTransfer("random", device="cpu", compile=True)
        n = len(threads) + CHECK_CALLS  # calls before this run's first step
        fail[:] = [n + 2, -(n + 4 + 100)]  # the second step's forward and the fourth's backward fail
        got = engine.stylize(content, style, size=32, **kw)
        assert engine.compile_stats["failures"] == 2
        h, w = got.info["nstcam"]["history"], want.info["nstcam"]["history"]
        assert [r["style"] for r in h] == pytest.approx([r["style"] for r in w], rel=1e-5)


def test_a_compiled_runs_eager_steps_take_the_compiled_steps_square_root(recorded, monkeypatch):
    """Issue 39.6: on CUDA the compiled W2 step takes Newton-Schulz and its eager fallback took eigh,
    so a run that fell back mid-way changed its objective (about 1e-3) under L-BFGS's line search.
    Every step of a compiling engine's run, compiled or fallen back, takes the compiled one's method."""
    import nstcam.style.losses.wasserstein as W

    _, fail = recorded
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)  # no inductor: the contract only
    monkeypatch.setattr(C, "sqrt_method", lambda device: "newton-schulz")  # what CUDA takes
    import nstcam.style._run as R

    monkeypatch.setattr(R, "sqrt_method", lambda device: "newton-schulz")
    seen = []
    real = W.w2_style_loss

    def spy(stats, targets, weights, method="eigh"):
        seen.append(method)
        return real(stats, targets, weights, method)

    monkeypatch.setattr(W, "w2_style_loss", spy)
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    engine = StyleTransfer("random", device="cpu", compile=True)
    fail.append(CHECK_CALLS + 2)  # the second step falls back to eager
    engine.stylize(content, style, size=32, style_loss="wasserstein", **KW)
    assert engine.compile_stats["failures"] == 1 and len(seen) >= 4
    assert set(seen) == {"newton-schulz"}, seen
    seen.clear()
    StyleTransfer("random", device="cpu").stylize(content, style, size=32, style_loss="wasserstein", **KW)
    assert set(seen) == {"eigh"}  # an engine that does not compile keeps the exact eigh


def test_the_compile_key_holds_every_shape_the_traced_step_reads(recorded, monkeypatch):
    """Issue 39.5: the sliced loss' targets take their size from the style image, so a new style
    aspect ratio traces a new graph at the same output size; the bookkeeping (and the recompile
    limit it enforces) counted only the image's shape. Gram targets do not depend on the style's size."""
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)  # no inductor: the bookkeeping only
    content = pattern(1, 48, 32)
    for loss, want in (("sliced", 2), ("gram", 1)):
        engine = StyleTransfer("random", device="cpu", compile=True)
        for style in (pattern(2, 40, 40), pattern(3, 64, 24)):  # two aspect ratios, one output size
            engine.stylize(content, style, size=32, style_loss=loss, **KW)
        assert core(engine.compile_stats) == {"shapes": want, "eager_shapes": 0, "failures": 0}, loss


def test_a_parameter_replaced_on_the_network_is_seen_by_the_compiled_step(monkeypatch, caplog):
    """Issue 39.7: the compiled step runs a twin built over the network's Parameter objects; one
    replaced afterwards was seen by the eager step only. Now the step is compiled again."""
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)  # no inductor: the contract only
    content, style = pattern(1, 48, 32), pattern(2, 40, 40)
    engine = StyleTransfer("random", device="cpu", compile=True)
    eager = StyleTransfer("random", device="cpu")
    assert close(engine.stylize(content, style, size=32, **KW), eager.stylize(content, style, size=32, **KW))
    for st in (engine, eager):
        conv = st.net[0]
        conv.weight = torch.nn.Parameter(conv.weight.detach() * 0.5, requires_grad=False)
    caplog.set_level(logging.WARNING)
    got, want = engine.stylize(content, style, size=32, **KW), eager.stylize(content, style, size=32, **KW)
    assert close(got, want)
    assert "new parameters since its step was compiled" in caplog.text
    assert core(engine.compile_stats) == {"shapes": 1, "eager_shapes": 0, "failures": 0}

"""Many callers, one model: threads mixing stylisation, Grad-CAM on several layers of one shared
network and subject-aware runs get exactly what the same calls get one after another."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import pattern
from torch import nn

from nstcam import GradCAM, StyleTransfer, build_model, count_hooks, subject_aware_stylize

N_THREADS = 6
ROUNDS = 3


@pytest.fixture(scope="module")
def world():
    st = StyleTransfer("random", device="cpu")
    net = build_model("resnet18", "random").train()  # training mode: CAM must not flip it to eval
    net.layer1.eval()  # a mixed state, which a flip-and-restore would get wrong under concurrency
    cams = {
        "layer2": GradCAM(model=net, target_layer="layer2", method="gradcam", device="cpu"),
        "layer3.1": GradCAM(model=net, target_layer="layer3.1", method="gradcam++", device="cpu"),
        "layer4": GradCAM(model=net, target_layer="layer4", method="layercam", device="cpu"),
    }
    content, content_b, style = pattern(1), pattern(3, 56, 56), pattern(2, 64, 64)
    batch = torch.cat([cams["layer2"].preprocess(content), cams["layer2"].preprocess(content.transpose(0))])

    def stylize_lbfgs():
        img = st.stylize(content, style, size=64, steps=4, seed=0)
        return np.asarray(img), img.info["nstcam"]["history"][-1]["total"]

    def stylize_adam_colour():
        img = st.stylize(content_b, style, size=48, steps=3, optimizer="adam", preserve_color=True, seed=1)
        return np.asarray(img)

    def stylize_two_scales():
        return np.asarray(st.stylize(content, [style, content_b], size=64, scales=[32, 64], steps=[2, 2]))

    def explain(layer):
        def job():
            res = cams[layer].explain(content, top_k=2)
            return [(r.class_index, r.score, r.heatmap) for r in res]

        return job

    def compute_under_no_grad():
        with torch.no_grad():
            maps = cams["layer4"].compute(batch, targets=[3, 7])
            assert not torch.is_grad_enabled(), "grad mode must stay the caller's"
        assert torch.is_grad_enabled()
        return maps.numpy()

    def subject(mode, mask_mode):
        def job():
            res = subject_aware_stylize(
                content,
                style,
                engine=st,
                cam=cams["layer4"],
                mode=mode,
                size=48,
                steps=3,
                top_k=2,
                seed=0,
                mask_mode=mask_mode,
            )
            return np.asarray(res.image), res.mask, res.report.iou, res.report.after[0].score

        return job

    jobs = {
        "stylize_lbfgs": stylize_lbfgs,
        "stylize_adam_colour": stylize_adam_colour,
        "stylize_two_scales": stylize_two_scales,
        **{f"explain_{layer}": explain(layer) for layer in cams},
        "compute_no_grad": compute_under_no_grad,
        "subject_background": subject("background", "optimize"),
        "subject_blend": subject("subject", "blend"),
    }
    expected = {name: job() for name, job in jobs.items()}  # one after another
    return st, net, jobs, expected


def assert_same(a, b, where: str) -> None:
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and np.array_equal(a, b), f"{where}: differs from the sequential result"
    else:
        assert a == b, f"{where}: {a} != {b}"


def test_threads_get_the_sequential_results(world, monkeypatch):
    st, net, jobs, expected = world
    flags = {name: m.training for name, m in net.named_modules()}

    def no_flip(self, mode=True):
        raise AssertionError("a call flipped a shared model's training flag")

    monkeypatch.setattr(nn.Module, "train", no_flip)
    for r in range(ROUNDS):
        work = [name for name in jobs for _ in range(2)]
        random.Random(r).shuffle(work)
        chunks = [work[i::N_THREADS] for i in range(N_THREADS)]
        barrier = threading.Barrier(N_THREADS)

        def worker(names, barrier=barrier):
            barrier.wait()  # every thread starts at once
            return [(name, jobs[name]()) for name in names]

        with ThreadPoolExecutor(N_THREADS) as ex:
            done = [item for chunk in ex.map(worker, chunks) for item in chunk]
        assert len(done) == len(work)
        for name, got in done:
            assert_same(got, expected[name], f"round {r}, {name}")
        assert count_hooks(net) == 0 and count_hooks(st.net) == 0
        assert {name: m.training for name, m in net.named_modules()} == flags


def test_train_mode_model_is_explained_as_in_eval_mode(world):
    _, net, _, _ = world
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    in_train = GradCAM(model=net, target_layer="layer3", device="cpu").compute(x, targets=5)
    frozen = build_model("resnet18", "random").eval()
    in_eval = GradCAM(model=frozen, target_layer="layer3", device="cpu").compute(x, targets=5)
    torch.testing.assert_close(in_train, in_eval)
    assert net.training and not net.layer1.training and net.layer2.training

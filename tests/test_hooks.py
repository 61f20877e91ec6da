"""The shared hook manager: recording, cloning, gradients, early stop and clean removal."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import rss_mb
from torch import nn

from nstcam import HookManager, RepeatedCallError, count_hooks


class CallCounter(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.inner(x)


def count_tensors() -> int:
    return sum(torch.Tensor in type(o).__mro__ for o in gc.get_objects())


def tiny_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),  # 0
        nn.ReLU(inplace=True),  # 1: rewrites the conv output in place
        CallCounter(nn.Conv2d(8, 8, 3, padding=1)),  # 2
        nn.ReLU(inplace=True),  # 3
        CallCounter(nn.Conv2d(8, 4, 3, padding=1)),  # 4
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )


def test_records_outputs_by_name():
    net = tiny_net()
    x = torch.randn(2, 3, 16, 16)
    ref = net[4](net[3](net[2](net[1](net[0](x)))))
    with HookManager(net, ["2", "4"]) as h:
        out = net(x)
        assert set(h.outputs) == {"2", "4"}
        assert h.outputs["4"].shape == (2, 4, 16, 16)
        torch.testing.assert_close(h.outputs["4"], ref)
    assert out.shape == (2, 3)


def test_unknown_layer_lists_closest_names():
    from torchvision.models import resnet18

    with pytest.raises(ValueError, match=r"unknown layer 'layer44'.*Closest valid names: layer4"):
        HookManager(resnet18(), ["layer44"])
    with pytest.raises(ValueError, match="layers must name at least one"):
        HookManager(resnet18(), [])


def test_no_hook_left_after_normal_exit_and_exception():
    net = tiny_net()
    assert count_hooks(net) == 0
    with HookManager(net, ["0", "2", "4"], capture_grads=True) as h:
        assert count_hooks(net) == 4  # three layers + the root pre-hook
        net(torch.randn(1, 3, 8, 8)).sum().backward()
        assert len(h._tensor_handles) == 3
    assert count_hooks(net) == 0
    assert h.outputs == {} and h.grads == {}

    with pytest.raises(ZeroDivisionError):
        with HookManager(net, ["0", "4"]) as h:
            net(torch.randn(1, 3, 8, 8))
            1 / 0  # noqa: B018
    assert count_hooks(net) == 0
    assert h.outputs == {}


def test_no_hook_left_after_exception_inside_forward():
    net = tiny_net()
    with pytest.raises(RuntimeError):
        with HookManager(net, ["4"]):
            net(torch.randn(1, 5, 8, 8))  # wrong channel count
    assert count_hooks(net) == 0


def test_remove_is_idempotent():
    net = tiny_net()
    h = HookManager(net, ["0"])
    h.remove()
    h.remove()
    assert count_hooks(net) == 0 and not h.active
    with pytest.raises(RuntimeError, match="removed"):
        h.run(torch.randn(1, 3, 8, 8))


def test_two_hundred_uses_leave_no_hooks_and_flat_memory():
    net = tiny_net()
    x = torch.randn(4, 3, 64, 64, requires_grad=True)  # each record ~0.5 MB, graph alive while held

    def use():
        with HookManager(net, ["0", "2", "4"], clone=True, capture_grads=True) as h:
            net(x).sum().backward()
            return weakref.ref(h.outputs["4"])

    for _ in range(20):  # warm up the allocator
        use()
    gc.collect()
    tensors_before = count_tensors()
    rss_before = rss_mb()
    refs = [use() for _ in range(200)]
    gc.collect()
    assert count_hooks(net) == 0
    assert all(r() is None for r in refs), "a recorded tensor outlived its manager"
    tensors_after = count_tensors()
    assert tensors_after <= tensors_before
    # a leak of the records alone would be 200 * ~1.5 MB = 300 MB
    assert rss_mb() - rss_before < 40


def test_manager_dropped_without_exit_does_not_pin_records():
    net = tiny_net()
    h = HookManager(net, ["4"])
    net(torch.randn(1, 3, 8, 8, requires_grad=True))
    ref = weakref.ref(h.outputs["4"])
    del h
    gc.collect()
    assert ref() is None
    assert count_hooks(net) == 0


def test_early_stop_skips_later_modules():
    net = tiny_net()
    x = torch.randn(1, 3, 8, 8)
    with HookManager(net, ["0", "2"], early_stop=True) as h:
        feats = h.run(x)
    assert net[2].calls == 1
    assert net[4].calls == 0, "the forward pass went past the deepest requested layer"
    assert set(feats) == {"0", "2"}
    with HookManager(net, ["4"]) as h:
        h.run(x)
    assert net[4].calls == 1


def test_run_reports_layers_that_never_fire():
    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Conv2d(3, 3, 1)
            self.unused = nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.used(x)

    net = WithUnused()
    with HookManager(net, ["unused"]) as h, pytest.raises(RuntimeError, match="did not fire"):
        h.run(torch.randn(1, 3, 8, 8))


def test_clone_protects_record_from_inplace_relu():
    net = tiny_net()
    x = torch.randn(1, 3, 8, 8)
    conv_out = net[0](x)
    assert (conv_out < 0).any()
    with HookManager(net, ["0"]) as h:
        net(x)
        assert (h.outputs["0"] >= 0).all(), "without clone the in-place ReLU rewrites the record"
    with HookManager(net, ["0"], clone=True) as h:
        y = net(x)
        torch.testing.assert_close(h.outputs["0"], conv_out)
    with torch.no_grad():
        torch.testing.assert_close(y, tiny_net()(x))  # the network's result is unchanged


def test_captured_gradients_equal_autograd_grad():
    net = tiny_net()
    ref_net = tiny_net()
    for m in ref_net.modules():  # same weights, no in-place ops
        if isinstance(m, nn.ReLU):
            m.inplace = False
    x = torch.randn(2, 3, 8, 8)

    # reference: the gradient of the loss with respect to each conv's output
    acts = {}
    h0 = ref_net[0].register_forward_hook(lambda m, i, o: acts.__setitem__("0", o))
    h2 = ref_net[2].register_forward_hook(lambda m, i, o: acts.__setitem__("2", o))
    loss_ref = ref_net(x).pow(2).sum()
    g0, g2 = torch.autograd.grad(loss_ref, [acts["0"], acts["2"]])
    h0.remove()
    h2.remove()

    for clone in (False, True):
        with HookManager(net, ["0", "2"], capture_grads=True, clone=clone) as h:
            net(x).pow(2).sum().backward()
            torch.testing.assert_close(h.grads["0"], g0)  # conv 0 is followed by an in-place ReLU
            torch.testing.assert_close(h.grads["2"], g2)
        net.zero_grad()

    # asking autograd for the recorded (cloned) tensor directly gives the same gradient
    with HookManager(net, ["0"], clone=True) as h:
        loss = net(x).pow(2).sum()
        (g,) = torch.autograd.grad(loss, h.outputs["0"])
        torch.testing.assert_close(g, g0)


class Twice(nn.Module):
    """Calls one block twice in its forward."""

    def __init__(self):
        super().__init__()
        self.block = nn.Linear(4, 4)

    def forward(self, x):
        return self.block(torch.relu(self.block(x)))


def test_repeated_module_error_or_list():
    net = Twice()
    x = torch.randn(2, 4)
    with HookManager(net, ["block"]) as h, pytest.raises(RepeatedCallError, match="on_repeat='list'"):
        net(x)
    assert count_hooks(net) == 0
    with HookManager(net, ["block"], on_repeat="list", capture_grads=True) as h:
        net(x).sum().backward()
        first, second = h.outputs["block"]
        torch.testing.assert_close(first, net.block(x))
        torch.testing.assert_close(second, net.block(torch.relu(first)))
        assert len(h.grads["block"]) == 2
        torch.testing.assert_close(h.grads["block"][1], torch.ones_like(second))
        # a second pass starts a fresh record
        net(x)
        assert len(h.outputs["block"]) == 2


def test_each_pass_replaces_previous_records():
    net = tiny_net()
    with HookManager(net, ["4"]) as h:
        net(torch.zeros(1, 3, 8, 8))
        a = h.outputs["4"].clone()
        net(torch.ones(1, 3, 8, 8))
        assert not torch.equal(a, h.outputs["4"])


def test_detach_keeps_no_graph_and_training_mode_untouched():
    net = tiny_net().train()
    with HookManager(net, ["2"], detach=True) as h:
        net(torch.randn(1, 3, 8, 8, requires_grad=True))
        assert h.outputs["2"].grad_fn is None
    assert net.training
    with pytest.raises(ValueError, match="pick one"):
        HookManager(net, ["2"], detach=True, capture_grads=True)


# -- many callers, one network -------------------------------------------------------------------
def _in_thread(fn):
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_other_threads_passes_are_not_recorded_nor_stopped():
    net = tiny_net().eval()
    x = torch.randn(1, 3, 8, 8)
    expected = net(x)
    expected_4 = net[:5](x * 2)
    net[4].calls = 0
    with HookManager(net, ["2", "4"], early_stop=True) as h:
        # another thread's pass runs to the end (no early stop) and leaves this manager's record alone
        torch.testing.assert_close(_in_thread(lambda: net(x)), expected)
        assert h.outputs == {}
        assert net[4].calls == 1
        rec = h.run(x)
        assert set(rec) == {"2", "4"}
        # run() records from any thread: it binds the manager to the caller for that call
        other = _in_thread(lambda: h.run(x * 2))
        torch.testing.assert_close(other["4"], expected_4)
    assert count_hooks(net) == 0


def test_managers_in_concurrent_threads_each_see_their_own_pass():
    net = tiny_net().eval()
    n_threads, rounds = 6, 20
    barrier = threading.Barrier(n_threads)
    inputs = [torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(n_threads)]
    with torch.no_grad():
        expected = [net[:3](x) for x in inputs]

    def worker(i: int) -> int:
        barrier.wait()
        ok = 0
        for _ in range(rounds):
            with HookManager(net, ["2"], clone=True) as h, torch.no_grad():
                net(inputs[i])
                ok += torch.equal(h.outputs["2"], expected[i])
        return ok

    with ThreadPoolExecutor(n_threads) as ex:
        assert list(ex.map(worker, range(n_threads))) == [rounds] * n_threads
    assert count_hooks(net) == 0


def test_repeat_message_names_a_reused_module_not_other_threads():
    with (
        HookManager(Twice(), ["block"]) as h,
        pytest.raises(RepeatedCallError, match="Twice.forward calls that module more than once"),
    ):
        h.run(torch.randn(1, 4))


def test_asyncio_tasks_are_callers_of_their_own():
    net = tiny_net().eval()
    x = torch.randn(1, 3, 8, 8)

    async def owner(started: asyncio.Event, other_done: asyncio.Event) -> dict:
        with HookManager(net, ["4"]) as h:
            started.set()
            await other_done.wait()
            return dict(h.outputs)

    async def other(started: asyncio.Event, other_done: asyncio.Event) -> None:
        await started.wait()
        net(x)  # runs in another task while the owner's manager is live
        other_done.set()

    async def main() -> dict:
        started, other_done = asyncio.Event(), asyncio.Event()
        rec, _ = await asyncio.gather(owner(started, other_done), other(started, other_done))
        return rec

    assert asyncio.run(main()) == {}
    assert count_hooks(net) == 0

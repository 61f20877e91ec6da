"""The hook manager that both engines build on.

:class:`HookManager` registers forward hooks on named submodules of a model, records their outputs
(and optionally their gradients), can skip the rest of a forward pass once every requested layer has
fired, and removes every handle it registered on exit, even when the body raises.

Many callers, one network (re-entrancy):
    A network is often shared: one ``StyleTransfer`` or ``GradCAM`` serves every request of a web
    app, and API users call it from thread pools. Hooks live on the *module*, so every pass through
    it, whoever runs it, fires every manager's hooks. Each manager therefore records only the passes
    of its own caller. On creation it draws a unique token and adds it to a context variable
    (``contextvars``: one value per thread, and per asyncio task); its root pre-hook, its forward
    hooks and its early stop do nothing unless the token is in the *current* context, i.e. unless
    the pass runs in the thread (or task) that created the manager. :meth:`HookManager.run` adds the
    token for the duration of its call, so ``run`` records from any thread. Gradient hooks sit on
    the recorded tensors, which belong to one call already. The cost is one context-variable lookup
    per hooked module per pass; no lock is taken on the forward path.

    So any number of managers, in any number of threads, may hook the same modules at once: each
    sees exactly its own passes, and a repeat it reports (:class:`RepeatedCallError`) happened
    inside one of its own passes. One manager object is one caller's: its ``outputs`` are not meant
    to be shared between threads (the engines make one per call).

Example:
    >>> with HookManager(model, ["features.2", "features.5"], early_stop=True) as hooks:
    ...     feats = hooks.run(x)          # dict name -> tensor; layers after features.5 never run
"""

from __future__ import annotations

import contextvars
import copy
import itertools
import logging
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from nstcam._choices import closest

__all__ = ["HookManager", "RepeatedCallError", "eval_view", "float64_copy", "twin"]

logger = logging.getLogger(__name__)

OnRepeat = Literal["error", "list"]


class RepeatedCallError(RuntimeError):
    """A hooked module fired more than once in one forward pass while ``on_repeat="error"``.

    Passes run by other threads are never seen by a manager, so the only cause is a module that the
    model's ``forward`` calls more than once (a reused block)."""


_OWNED: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "nstcam_hook_owners", default=frozenset()
)
"""Tokens of the managers that record passes run in the current context (thread or asyncio task)."""
_TOKENS = itertools.count(1)  # never reused, so a stale token left in a dead context matches nothing


def _own(token: int) -> None:
    owned = _OWNED.get()
    if token not in owned:
        _OWNED.set(owned | {token})


def _disown(token: int) -> None:
    owned = _OWNED.get()
    if token in owned:
        _OWNED.set(owned - {token})


class _StopForward(Exception):  # noqa: N818 - control flow, never escapes HookManager.run
    """Raised from a forward hook to skip the rest of the forward pass."""


def closest_names(name: str, valid: Iterable[str], n: int = 5) -> list[str]:
    """Returns the ``n`` valid names closest to ``name`` (for error messages)."""
    return closest(name, valid, n=n, cutoff=0.4)  # "relu" finds "features.2.relu" too


def resolve_modules(model: nn.Module, names: Sequence[str]) -> dict[str, nn.Module]:
    """Maps layer names, as in ``model.named_modules()``, to their modules.

    Raises:
        ValueError: a name is not a submodule of ``model``; the message lists the closest valid names.
    """
    modules = dict(model.named_modules())
    out: dict[str, nn.Module] = {}
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"layer names must be str, got {type(name).__name__}: {name!r}")
        if name not in modules:
            hint = closest_names(name, [k for k in modules if k])
            tip = f" Closest valid names: {', '.join(hint)}." if hint else ""
            raise ValueError(
                f"unknown layer {name!r} for {type(model).__name__}.{tip} "
                "See [n for n, _ in model.named_modules()] for all names."
            )
        out[name] = modules[name]
    return out


def _tensor_dict(output: Any) -> bool:
    return (
        isinstance(output, dict)
        and bool(output)
        and all(isinstance(v, torch.Tensor) for v in output.values())
    )


def count_hooks(model: nn.Module) -> int:
    """Counts the forward, forward-pre and backward hooks on every module of ``model``."""
    total = 0
    for m in model.modules():
        total += len(m._forward_hooks) + len(m._forward_pre_hooks)
        total += len(m._backward_hooks) + len(getattr(m, "_backward_pre_hooks", {}))
    return total


class HookManager:
    """Records the outputs, and optionally the gradients, of named layers of a model.

    A *pass* is one call of the root ``model``: a forward pre-hook on the root clears what the
    previous pass recorded. Call :meth:`reset` yourself when you call submodules directly.

    Only passes run in the thread (or asyncio task) that created the manager, or inside its
    :meth:`run`, are recorded; other callers' passes through the same modules go by untouched (see
    the module docstring).

    Args:
        model: the network to hook. It is not copied and its training mode is left alone.
        layers: names as in ``model.named_modules()``, e.g. ``"features.2"`` or ``"layer4"``.
        clone: protect recorded outputs from in-place ops that follow the layer. The hook hands a
            clone on to the rest of the network and keeps the original, so the record both keeps
            its value and stays a valid ``inputs`` of :func:`torch.autograd.grad`.
        capture_grads: register a backward hook on each recorded output tensor (from the forward
            hook) that stores the gradient of that output in :attr:`grads` whenever autograd
            computes it. Tensor hooks, unlike module full backward hooks, work next to in-place
            ops (pytorch#61519); a hook registered before an in-place op sees the gradient of the
            value the layer produced.
        early_stop: once every requested layer has fired, skip the rest of the forward pass. Only
            :meth:`run` catches the stop; calling ``model(x)`` directly then raises.
        on_repeat: what to do when a layer fires twice in one pass (a module reused in ``forward``):
            ``"error"`` raises :class:`RepeatedCallError`; ``"list"`` records a list of outputs in
            call order (gradients likewise). Nothing is ever silently overwritten.
        detach: record ``output.detach()`` (no autograd graph is kept alive by the record).
            Incompatible with ``capture_grads``.
        grad_leaf: cut the graph at the hooked layers: record ``output.detach()`` as a new leaf that
            requires grad and hand a clone of it on (so in-place ops downstream are safe). Backward
            then stops at these layers, and the rest of the forward pass records a graph even if it
            started under :func:`torch.no_grad` (grad mode is switched on from the first hooked
            layer; the caller restores it, e.g. by leaving its ``no_grad`` block). A layer that
            returns a dict of tensors (an FPN's levels) is cut level by level: its record is a dict of
            leaves, and with ``capture_grads`` its gradient a dict with the same keys.

    Attributes:
        outputs: layer name -> recorded output (a list of outputs with ``on_repeat="list"``).
        grads: layer name -> gradient of the recorded output, filled during backward.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: Sequence[str] | str,
        *,
        clone: bool = False,
        capture_grads: bool = False,
        early_stop: bool = False,
        on_repeat: OnRepeat = "error",
        detach: bool = False,
        grad_leaf: bool = False,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(layers, str):
            layers = [layers]
        layers = list(dict.fromkeys(layers))
        if not layers:
            raise ValueError("layers must name at least one layer of the model")
        if on_repeat not in ("error", "list"):
            raise ValueError(f"on_repeat must be 'error' or 'list', got {on_repeat!r}")
        if detach and (capture_grads or grad_leaf):
            raise ValueError("detach=True drops the graph, so capture_grads/grad_leaf cannot work: pick one")
        self.model = model
        self.layers: list[str] = layers
        self.modules = resolve_modules(model, layers)
        self.clone = clone
        self.capture_grads = capture_grads
        self.early_stop = early_stop
        self.on_repeat = on_repeat
        self.detach = detach
        self.grad_leaf = grad_leaf
        self.outputs: dict[str, Any] = {}
        self.grads: dict[str, Any] = {}
        self._handles: list[RemovableHandle] = []
        self._tensor_handles: list[RemovableHandle] = []
        self._active = False
        self._token = next(_TOKENS)
        self._register()

    # -- registration -------------------------------------------------------------------------
    def _register(self) -> None:
        ref = weakref.ref(self)  # hooks must not keep the manager (and its records) alive
        token = self._token

        def pre_root(_module: nn.Module, _args: Any) -> None:
            if token not in _OWNED.get():  # another caller's pass
                return
            mgr = ref()
            if mgr is not None:
                mgr.reset()

        _own(token)

        self._handles.append(self.model.register_forward_pre_hook(pre_root))
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_hook(self._make_hook(ref, name)))
        self._active = True
        logger.debug("registered %d hooks on %s", len(self._handles), type(self.model).__name__)

    def _make_hook(self, ref: weakref.ref, name: str):
        token = self._token

        def hook(_module: nn.Module, _inputs: Any, output: Any) -> Any:
            if token not in _OWNED.get():  # another caller's pass: not ours to record or stop
                return None
            mgr = ref()
            if mgr is None:
                return None
            return mgr._on_output(name, output)

        return hook

    def _on_output(self, name: str, output: Any) -> Any:
        passed_on = None
        record = output
        if isinstance(output, torch.Tensor):
            if self.grad_leaf:
                record = output.detach().requires_grad_(True)
                torch.set_grad_enabled(True)
                passed_on = record.clone()
            elif self.detach:
                record = output.detach()
                if self.clone:
                    record = record.clone()
            elif self.clone:
                passed_on = output.clone()  # the network goes on with the clone; we keep the original
            if self.capture_grads and record.requires_grad:
                self._tensor_handles.append(record.register_hook(self._make_grad_hook(name)))
        elif self.grad_leaf and _tensor_dict(output):  # a dict of levels (an FPN's): each level a leaf
            record = {k: v.detach().requires_grad_(True) for k, v in output.items()}
            torch.set_grad_enabled(True)
            passed_on = type(output)((k, leaf.clone()) for k, leaf in record.items())
            if self.capture_grads:
                for k, leaf in record.items():
                    self._tensor_handles.append(leaf.register_hook(self._make_grad_hook(name, k)))
        if name in self.outputs:
            if self.on_repeat == "error":
                raise RepeatedCallError(
                    f"layer {name!r} fired twice in one forward pass: {type(self.model).__name__}.forward "
                    f"calls that module more than once (passes of other threads are never counted). "
                    "Use on_repeat='list' to record every call, or hook a module that runs once per pass"
                )
            prev = self.outputs[name]
            self.outputs[name] = [*prev, record] if isinstance(prev, list) else [prev, record]
        else:
            self.outputs[name] = [record] if self.on_repeat == "list" else record
        if self.early_stop and len(self.outputs) == len(self.layers):
            raise _StopForward
        return passed_on

    def _make_grad_hook(self, name: str, key: Any = None):
        ref = weakref.ref(self)

        def grad_hook(grad: torch.Tensor) -> None:
            mgr = ref()
            if mgr is None:
                return
            if key is not None:  # one level of a dict output: grads[name] is a dict like the output
                mgr.grads.setdefault(name, {})[key] = grad
            elif mgr.on_repeat == "list":
                # backward visits repeated calls in reverse order; keep them in call order
                mgr.grads.setdefault(name, []).insert(0, grad)
            else:
                mgr.grads[name] = grad

        return grad_hook

    # -- public API ---------------------------------------------------------------------------
    def run(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Calls the model and returns the recorded outputs (a new dict, name -> output).

        With ``early_stop=True`` the rest of the forward pass is skipped once every layer fired.

        Raises:
            RuntimeError: the forward pass ended without every requested layer firing.
        """
        if not self._active:
            raise RuntimeError("this HookManager was removed; create a new one")
        owned = _OWNED.get()
        bound = None if self._token in owned else _OWNED.set(owned | {self._token})
        try:
            self.model(*args, **kwargs)
        except _StopForward:
            pass
        finally:
            if bound is not None:
                _OWNED.reset(bound)
        missing = [n for n in self.layers if n not in self.outputs]
        if missing:
            raise RuntimeError(
                f"layers {missing} did not fire during the forward pass; they are not used by "
                f"{type(self.model).__name__}.forward"
            )
        return dict(self.outputs)

    def reset(self) -> None:
        """Drops what was recorded (outputs, gradients and their tensor hooks)."""
        for h in self._tensor_handles:
            h.remove()
        self._tensor_handles.clear()
        self.outputs.clear()
        self.grads.clear()

    def remove(self) -> None:
        """Removes every hook and drops every record. Safe to call more than once."""
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()
        _disown(self._token)
        self.reset()
        if self._active:
            logger.debug("removed hooks from %s", type(self.model).__name__)
        self._active = False

    @property
    def active(self) -> bool:
        """Whether the hooks are still registered."""
        return self._active

    def __enter__(self) -> HookManager:
        if not self._active:
            raise RuntimeError("this HookManager was removed; create a new one")
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __del__(self) -> None:
        try:
            self.remove()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: nothing left to clean
            pass

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={type(self.model).__name__}, layers={self.layers}, "
            f"clone={self.clone}, capture_grads={self.capture_grads}, early_stop={self.early_stop}, "
            f"on_repeat={self.on_repeat!r}, active={self._active})"
        )


_HOOK_TABLES = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def twin(module: nn.Module) -> nn.Module:
    """A hook-free twin of ``module``: a tree of shallow copies whose parameters and buffers *are*
    the module's (no memory; in-place weight updates are seen), with new, empty hook tables.

    Nothing of ``module`` is written, so a twin may be made while other threads run or hook it.
    Uses: an eval-mode view for Grad-CAM that leaves a shared model's flags alone, and the network
    a compiled style step traces (hooks registered by concurrent calls would change its guards).
    """
    new = copy.copy(module)  # a new object whose __dict__ is a shallow copy of the module's
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    new._modules = {name: None if m is None else twin(m) for name, m in module._modules.items()}
    for table in _HOOK_TABLES:
        if table in module.__dict__:
            new.__dict__[table] = OrderedDict()
    return new


def float64_copy(module: nn.Module) -> nn.Module:
    """A hook-free copy of ``module`` in float64, with parameters and buffers of its own (a reference
    to judge float32 results by: the style step's self-check). Made from a :func:`twin`, so nothing
    of ``module`` is written or copied but its tensors."""
    return copy.deepcopy(twin(module)).double()


def eval_view(model: nn.Module) -> nn.Module:
    """``model`` itself if every module is in eval mode, else an eval-mode :func:`twin` of it.

    Reading a network needs eval mode (BatchNorm's running statistics, no dropout), but flipping a
    shared model's flags for the length of a call would change them under another thread's feet.
    """
    if not any(m.training for m in model.modules()):
        return model
    view = twin(model)
    for m in view.modules():
        m.training = False
    return view

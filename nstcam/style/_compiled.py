"""The compiled step: features and losses as one ``torch.compile``d function, cached per engine.

On CUDA the eager step is launch-bound (the GPU idles most of a step at 512 px): compiled with
``mode="reduce-overhead"`` (CUDA graphs), a step is a few graph replays. The compiled function
reads the same VGG16_bn ReLU outputs as the hook manager, by index, in a plain loop over the
modules up to the deepest one, on a hook-free twin of the network (same weights): hooks that
concurrent calls register on the shared network would otherwise enter the traced code and its
guards, and a hook that stops the pass with an exception does not trace. It
returns the unweighted losses, so style, content and TV weights change without recompiling;
targets are arguments, so a new request does not recompile either. Shapes are static: each new
image size compiles once (``StyleTransfer.warmup`` does it ahead), then hits the cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import torch
from torch import nn

from nstcam.hooks import twin
from nstcam.image import normalize
from nstcam.style._optimize import step_directions, unmasked_terms, weighted
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets
from nstcam.style.vgg import layer_index

__all__ = ["MAX_FAILURES", "compile_stats", "compiled_loss", "recompile_limit", "sqrt_method", "tap_features"]

logger = logging.getLogger(__name__)


def tap_features(net: nn.Sequential, x: torch.Tensor, taps: dict[int, str]) -> dict[str, torch.Tensor]:
    """Runs ``net`` up to the deepest tapped index and returns the tapped outputs by name."""
    out: dict[str, torch.Tensor] = {}
    last = max(taps)
    for i in range(last + 1):
        x = net[i](x)
        if i in taps:
            out[taps[i]] = x
    return out


def _build(
    rt: Runtime,
    content_layers: tuple[str, ...],
    style_layers: tuple[tuple[str, float], ...],
    kind: str = "gram",
):
    taps = {layer_index(n): n for n in dict.fromkeys([n for n, _ in style_layers] + list(content_layers))}
    styles = dict(style_layers)
    contents = list(content_layers)
    net = twin(rt.net)  # same weights, its own (always empty) hook tables: stable guards
    sqrt = sqrt_method(rt.device)

    def step(x: torch.Tensor, content: dict, style: dict, directions: dict | None = None) -> torch.Tensor:
        xn = normalize(x)
        if rt.channels_last:
            xn = xn.contiguous(memory_format=torch.channels_last)
        with torch.autocast(rt.device.type, dtype=torch.bfloat16, enabled=rt.amp):
            feats = tap_features(net, xn, taps)
        return torch.stack(unmasked_terms(feats, x, content, style, contents, styles, kind, directions, sqrt))

    mode = "reduce-overhead" if rt.device.type == "cuda" else "default"
    compiled = torch.compile(step, mode=mode, dynamic=False)
    compiled.nstcam_parameters = tuple(rt.net.parameters())  # what its twin reads (see _same_parameters)
    return compiled


def _same_parameters(fn: Callable, net: nn.Module) -> bool:
    """Whether ``net`` still holds the Parameter objects the compiled step's twin was built over. A
    Parameter replaced on the engine's network (``st.net[0].weight = nn.Parameter(...)``) is seen by
    the eager step and the hooks, never by the twin: the step is then compiled again."""
    built = getattr(fn, "nstcam_parameters", None)
    if built is None:
        return True
    now = tuple(net.parameters())
    return len(now) == len(built) and all(a is b for a, b in zip(now, built, strict=True))


def _forget(rt: Runtime, key: tuple) -> None:
    """Drops the compiled step of layer set ``key`` and what is known of its shapes (under rt.lock)."""
    old = rt.compiled.pop(key, None)
    for known in (rt.compiled_shapes, rt.shape_failures):
        for shape_key in [k for k in known if k[0] == key]:
            del known[shape_key]
    with _ENTRIES_LOCK:
        _ENTRIES.difference_update({e for e in _ENTRIES if e[0] == id(old)})


def sqrt_method(device: torch.device) -> str:
    """The W2 loss' square root in the compiled step: Newton-Schulz on CUDA (matrix products only;
    eigh checks its result on the host, which a CUDA graph cannot capture), eigh elsewhere."""
    return "newton-schulz" if device.type == "cuda" else "eigh"


MAX_FAILURES = 3
"""Failures of the compiled step at one shape before that shape runs eagerly for good."""

_ENTRIES: set[tuple[int, tuple]] = set()  # (compiled function, shape): dynamo cache entries
_ENTRIES_LOCK = threading.Lock()


def _shapes(obj: object) -> tuple:
    """The shapes of every tensor in ``obj`` (dicts, lists and tuples of tensors), in order."""
    if isinstance(obj, torch.Tensor):
        return (tuple(obj.shape),)
    if isinstance(obj, dict):
        return tuple(s for k in sorted(obj) for s in _shapes(obj[k]))
    if isinstance(obj, (list, tuple)):
        return tuple(s for v in obj for s in _shapes(v))
    return ()


def recompile_limit() -> int:
    """Entries torch.compile keeps per code object before it silently runs the frame uncompiled
    (``torch._dynamo.config.recompile_limit``, 8 by default). Every engine's step shares one code
    object, so the limit is shared across engines in a process."""
    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", 8))


def _admit(fn: Callable, shape: tuple) -> bool:
    """Whether ``shape`` (the image's and the targets' shapes) may compile: within the process-wide
    recompile limit (see above)."""
    entry = (id(fn), shape)
    with _ENTRIES_LOCK:
        if entry in _ENTRIES:
            return True
        if len(_ENTRIES) >= recompile_limit():
            return False
        _ENTRIES.add(entry)
        return True


def compiled_loss(
    rt: Runtime,
    targets: Targets,
    plan: Plan,
    eager_step: Callable[[torch.Tensor, dict | None], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The step's (4, N) weighted losses through the engine's compiled function for these layers.

    The first step at each image shape is a probe: one forward and backward pass of the compiled
    function on a copy of the image. Every call is guarded: a failure (a compiler error at the
    probe, running out of memory while recording a graph, anything later) is logged and counted,
    and that step runs eagerly (``eager_step(x, directions)``: the same sliced directions) with the
    same result; after :data:`MAX_FAILURES`
    failures at a shape, that shape runs eagerly for good. A new shape beyond torch.compile's
    recompile limit runs eagerly too, said once, rather than silently uncompiled inside torch.
    The backward pass runs later, in the optimiser: a failure there is handed to ``loss.recover``,
    which counts it likewise and gives the step's losses eagerly, and the step runs again eagerly.
    """
    key = (tuple(plan.content_layers), tuple(plan.style_layers.items()), plan.style_loss)
    with rt.lock:
        fn = rt.compiled.get(key)
        if fn and not _same_parameters(fn, rt.net):
            logger.warning(
                "the engine's network has new parameters since its step was compiled: compiling it again"
            )
            _forget(rt, key)
            fn = None
        if fn is None:
            try:
                fn = rt.compiled[key] = _build(rt, *key)
            except Exception as e:  # noqa: BLE001 - no compiler at all: this layer set runs eagerly
                logger.warning("compiled step failed (%s: %s); running eagerly", type(e).__name__, e)
                rt.compile_failures.add()
                fn = rt.compiled[key] = False
    if fn is False:
        return lambda x: eager_step(x, step_directions(targets, plan, x.device))

    def failed(shape_key: tuple, e: BaseException) -> None:
        rt.compile_failures.add()
        with rt.lock:
            n = rt.shape_failures[shape_key] = rt.shape_failures.get(shape_key, 0) + 1
            final = n >= MAX_FAILURES
            if final:
                rt.compiled_shapes[shape_key] = False
        logger.warning(
            "compiled step failed (%s: %s); running eagerly%s",
            type(e).__name__,
            e,
            f" at {shape_key[1]} from now on" if final else " for this step",
        )

    last: dict = {}  # this step's sliced directions, for recover
    target_shapes = _shapes((targets.content, targets.style))  # the sliced loss': the style image's size

    def loss(x: torch.Tensor) -> torch.Tensor:
        directions = last["directions"] = step_directions(targets, plan, x.device)  # once per step

        def eager(x: torch.Tensor) -> torch.Tensor:
            return eager_step(x, directions)

        shape_key = (key, tuple(x.shape), target_shapes)  # every shape the traced graph depends on
        state = rt.compiled_shapes.get(shape_key)  # None: not compiled yet (or its probe failed)
        if state is False:
            return eager(x)
        if state is None:
            if not _admit(fn, shape_key[1:]):
                with rt.lock:
                    rt.compiled_shapes[shape_key] = False
                logger.warning(
                    "compiled step: torch.compile's recompile limit (%d sizes in this process) is reached; "
                    "%s runs eagerly. Warm the sizes you serve first (StyleTransfer.warmup) or raise "
                    "torch._dynamo.config.recompile_limit",
                    recompile_limit(),
                    shape_key[1],
                )
                return eager(x)
            try:
                probe = x.detach().clone().requires_grad_(True)
                dirs = None if directions is None else {n: d.clone() for n, d in directions.items()}
                fn(probe, targets.content, targets.style, dirs).sum().backward()
            except Exception as e:  # noqa: BLE001 - any compiler failure: this step runs eagerly
                failed(shape_key, e)
                return eager(x)
            with rt.lock:
                rt.compiled_shapes[shape_key] = True
        try:
            terms = fn(x, targets.content, targets.style, directions).clone()  # CUDA graph outputs are reused
        except Exception as e:  # noqa: BLE001 - after the probe too: eager for this step, counted
            failed(shape_key, e)
            return eager(x)
        return weighted((terms[0], terms[1], terms[2]), plan)

    def recover(x: torch.Tensor, e: BaseException) -> torch.Tensor:
        """After the compiled step's backward pass failed: counted as a failure at this shape (three
        make it eager for good), and this step's losses computed eagerly."""
        failed((key, tuple(x.shape), target_shapes), e)
        return eager_step(x, last.get("directions"))

    loss.recover = recover
    loss.new_block = targets.new_block  # L-BFGS with the sliced loss: new directions between blocks
    return loss


def compile_stats(rt: Runtime) -> dict[str, int]:
    """The compiled step's record: ``shapes`` compiled and probed, ``eager_shapes`` given up on (after
    repeated failures or past the recompile limit) and ``failures`` (each a step run eagerly
    instead, logged). Benchmarks use it to tell a compiled run from one that silently ran eagerly."""
    shape_states = list(rt.compiled_shapes.values())
    return {
        "shapes": sum(v is True for v in shape_states),
        "eager_shapes": sum(v is False for v in shape_states),
        "failures": rt.compile_failures.value,
    }

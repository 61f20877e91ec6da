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
from collections.abc import Callable

import torch
from torch import nn

from nstcam.hooks import twin
from nstcam.image import normalize
from nstcam.style._optimize import unmasked_terms, weighted
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets
from nstcam.style.vgg import layer_index

__all__ = ["compile_stats", "compiled_loss", "tap_features"]

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


def _build(rt: Runtime, content_layers: tuple[str, ...], style_layers: tuple[tuple[str, float], ...]):
    taps = {layer_index(n): n for n in dict.fromkeys([n for n, _ in style_layers] + list(content_layers))}
    styles = dict(style_layers)
    contents = list(content_layers)
    net = twin(rt.net)  # same weights, its own (always empty) hook tables: stable guards

    def step(x: torch.Tensor, content: dict, style: dict) -> torch.Tensor:
        xn = normalize(x)
        if rt.channels_last:
            xn = xn.contiguous(memory_format=torch.channels_last)
        with torch.autocast(rt.device.type, dtype=torch.bfloat16, enabled=rt.amp):
            feats = tap_features(net, xn, taps)
        return torch.stack(unmasked_terms(feats, x, content, style, contents, styles))

    mode = "reduce-overhead" if rt.device.type == "cuda" else "default"
    return torch.compile(step, mode=mode, dynamic=False)


def compiled_loss(
    rt: Runtime, targets: Targets, plan: Plan, eager: Callable[[torch.Tensor], torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The step's (4, N) weighted losses through the engine's compiled function for these layers.

    The first step at each image shape is a probe: one forward and backward pass of the compiled
    function on a copy of the image. If compiling fails there (an unsupported op, a missing
    compiler), a warning says so and this engine runs that layer set eagerly (``eager``) from then
    on, rather than failing the user's request.
    """
    key = (tuple(plan.content_layers), tuple(plan.style_layers.items()))
    with rt.lock:
        fn = rt.compiled.get(key)
        if fn is None:
            fn = rt.compiled[key] = _build(rt, *key)
    if fn is False:
        return eager

    def loss(x: torch.Tensor) -> torch.Tensor:
        state = rt.compiled.get(key)
        if state is False:
            return eager(x)
        probe_key = (key, tuple(x.shape))
        if probe_key not in rt.compiled:
            try:
                probe = x.detach().clone().requires_grad_(True)
                fn(probe, targets.content, targets.style).sum().backward()
            except Exception as e:  # noqa: BLE001 - any compiler failure: run eagerly instead
                logger.warning("compiled step failed (%s: %s); running eagerly", type(e).__name__, e)
                rt.compile_failures.add()
                rt.compiled[key] = False
                return eager(x)
            rt.compiled[probe_key] = True
        terms = fn(x, targets.content, targets.style).clone()  # CUDA graph outputs are reused
        return weighted((terms[0], terms[1], terms[2]), plan)

    return loss


def compile_stats(rt: Runtime) -> dict[str, int]:
    """The compiled step's record: ``shapes`` compiled and probed, ``failures`` (fallbacks to the eager
    step, each logged). Benchmarks use it to tell a compiled run from one that silently ran eagerly."""
    shapes = sum(1 for k, v in rt.compiled.items() if v is True and len(k) == 2)
    return {"shapes": shapes, "failures": rt.compile_failures.value}

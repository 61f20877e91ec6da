"""The network *after* a layer, as a function of that layer's output: AblationCAM scores one ablated
copy of the activation per channel, and the layers before the target are the same for every copy,
so running only the tail saves all of them (on a ResNet's ``layer4``, the tail is a pooling and one
linear layer: 512 ablations cost about what one forward pass does).

The tail is cut from a ``torch.fx`` trace of a hook-free twin of the network: the target layer's
call becomes the tail's input. It exists only where the cut is clean, i.e. nothing after the layer
reads a value computed before it (a residual connection around the layer, as inside a transformer
block, makes it unclean); the tail is also checked once against the whole network's logits. Where
either fails (or the model does not trace), None: the caller runs the whole network instead.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

import torch
import torch.fx
from torch import nn

from nstcam.hooks import twin

__all__ = ["checked_tail", "network_tail"]

logger = logging.getLogger(__name__)

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def network_tail(model: nn.Module, layer: str) -> nn.Module | None:
    """A module computing ``model``'s output from ``layer``'s output, or None (see module doc).
    Cached per model and layer."""
    with _LOCK:
        per_model = _CACHE.setdefault(model, {})
        if layer not in per_model:
            per_model[layer] = _cut(model, layer)
        return per_model[layer]


class _Tracer(torch.fx.Tracer):
    """Traces through every module but the target layer, which stays one call (the cut)."""

    def __init__(self, layer: str) -> None:
        super().__init__()
        self.layer = layer

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname == self.layer or super().is_leaf_module(m, qualname)


def _cut(model: nn.Module, layer: str) -> nn.Module | None:
    try:
        root = twin(model)
        traced = torch.fx.GraphModule(root, _Tracer(layer).trace(root))
    except Exception as e:  # noqa: BLE001 - an untraceable model runs whole
        logger.debug("no tail for %s at %s: %s", type(model).__name__, layer, e)
        return None
    calls = [n for n in traced.graph.nodes if n.op == "call_module" and n.target == layer]
    if len(calls) != 1:
        return None
    cut = calls[0]
    order = list(traced.graph.nodes)
    before = set(order[: order.index(cut)])
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {cut: graph.placeholder("activation")}
    for node in order[order.index(cut) + 1 :]:
        if any(arg in before for arg in node.all_input_nodes):
            return None  # a value from before the layer is needed after it: no clean cut
        env[node] = graph.node_copy(node, lambda n: env[n])
    tail = torch.fx.GraphModule(traced, graph)
    tail.eval()
    return tail


def checked_tail(
    model: nn.Module, layer: str, activation: torch.Tensor, logits: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The tail if it reproduces ``logits`` from ``activation`` (the same pass), else None."""
    tail = network_tail(model, layer)
    if tail is None:
        return None
    with torch.no_grad():
        try:
            again = tail(activation.clone())  # the tail may begin with an in-place op
        except Exception:  # noqa: BLE001 - a tail that does not run: the whole network instead
            return None
    if not isinstance(again, torch.Tensor) or again.shape != logits.shape:
        return None
    if not torch.allclose(again.float(), logits.float(), rtol=1e-4, atol=1e-4):
        return None
    return tail

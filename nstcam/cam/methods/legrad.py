"""LeGrad (Bousselham et al. 2024) for torchvision Vision Transformers, as torch-cam 0.5.0 computes it.

For the encoder block that holds the target layer (or is it), the block's own class scores are
``heads(encoder.ln(mean of the block's output tokens))``; LeGrad's map is the positive gradient of a
class's score with respect to that block's attention probabilities, averaged over heads and
queries, read at the patch tokens (the class token dropped) as the patch grid.

torchvision's attention returns no probabilities to a caller that does not ask (``need_weights``
is False in ``EncoderBlock``). Rather than change that argument on the shared model (which another
thread's pass would then see), LeGrad runs a private twin whose attention module gets a forward hook
of the twin's own: it recomputes the attention from the module's input and weights, keeping the
probabilities in the graph, and returns the same output. A model without this structure is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from nstcam.cam._attention import math_attention
from nstcam.cam._request import Outputs, Request
from nstcam.hooks import twin

__all__ = ["check_legrad", "legrad_block", "legrad_pass"]


def legrad_block(model: nn.Module, layer: str) -> str:
    """The name of the ViT encoder block that holds (or is) ``layer``.

    Raises:
        ValueError: not a torchvision VisionTransformer, or a layer outside its encoder blocks.
    """
    modules = dict(model.named_modules())
    encoder = getattr(model, "encoder", None)
    if not (
        isinstance(getattr(encoder, "ln", None), nn.Module)
        and isinstance(getattr(model, "heads", None), nn.Module)
    ):
        raise ValueError(
            "method 'legrad' reads a torchvision VisionTransformer's attention maps; a "
            f"{type(model).__name__} has none: use method='gradcam' (or 'layercam')"
        )
    parts = layer.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if isinstance(getattr(modules.get(name), "self_attention", None), nn.MultiheadAttention):
            return name
    raise ValueError(
        f"method 'legrad' explains an encoder block; target layer {layer!r} is in none: name a block "
        "('encoder.layers.encoder_layer_11') or a layer inside one"
    )


def check_legrad(model: nn.Module, layers: Sequence[str], method: str) -> None:
    """Refuses a model or a layer LeGrad cannot read, before any work."""
    for layer in layers:
        legrad_block(model, layer)


def legrad_pass(req: Request) -> Outputs:
    """LeGrad's raw maps (k, N, h, w) on the patch grid."""
    block_name = legrad_block(req.model, req.layer)
    net = twin(req.model)
    modules = dict(net.named_modules())
    block = modules[block_name]
    probs: list[torch.Tensor] = []
    tokens: list[torch.Tensor] = []
    handles = [
        block.self_attention.register_forward_hook(math_attention(probs), with_kwargs=True),
        block.register_forward_hook(lambda _m, _i, out: tokens.append(out)),
    ]
    try:
        with torch.inference_mode(False), torch.enable_grad():
            logits = net(req.x.detach())
            if len(probs) != 1 or len(tokens) != 1:
                raise RuntimeError(
                    f"block {block_name!r} ran {len(tokens)} times in one pass; LeGrad needs once"
                )
            scores = net.heads(net.encoder.ln(tokens[0].mean(dim=1)))
            classes = req.classes(logits.detach())
            patches = probs[0].shape[-1] - 1
            side = math.isqrt(patches)
            if side * side != patches:
                raise ValueError(f"LeGrad reads a square patch grid; this block has {patches} patch tokens")
            raws = []
            for j in range(classes.shape[0]):
                y = scores.gather(1, classes[j].view(-1, 1)).sum()
                (g,) = torch.autograd.grad(y, probs[0], retain_graph=j < classes.shape[0] - 1)
                rel = g.relu().mean(dim=(1, 2))[:, 1:]
                raws.append(rel.reshape(-1, side, side).float().detach())
    finally:
        for h in handles:
            h.remove()
    return torch.stack(raws), logits.detach().float().softmax(1), classes

"""Would the map change if the model knew nothing? Adebayo et al. 2018, "Sanity checks for saliency
maps": the model parameter randomisation test.

The layers' weights are re-initialised from the top (the logits) down, ``"cascading"`` (each step
keeps the layers above random too) or ``"independent"`` (one layer at a time); after each, the maps
are computed again and compared with the original ones. A map that depends on what the model learnt
falls towards 0 similarity as layers go; one that stays high reads the input more than the model
(the paper: guided backpropagation does, Grad-CAM does not).

The model given is never changed: the test works on copies, so it is thread safe. Randomisation is
seeded (``seed``) and leaves the global random state as it was.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nstcam._choices import one_of
from nstcam.hooks import twin
from nstcam.metrics.similarity import SIMILARITIES, spearman, ssim

__all__ = ["ORDERS", "Randomisation", "parameter_randomisation", "randomisation_layers", "randomised_copy"]

ORDERS = ("cascading", "independent")
_RNG_LOCK = threading.Lock()
"""``reset_parameters`` draws from torch's global generator: two threads re-seeding it at once would
draw each other's numbers, so re-initialisations take turns."""

ExplainWith = Callable[[nn.Module], Callable[[torch.Tensor, Any], torch.Tensor]]


@dataclass
class Randomisation:
    """The test's outcome.

    Attributes:
        layers: the layers randomised, top first (cascading: each step randomises this one too).
        similarity: (len(layers), N) each image's map against its original, per step.
        measure: ``"spearman"``, ``"spearman_abs"`` or ``"ssim"``.
        order: ``"cascading"`` or ``"independent"``.
        original: (N, ...) the original maps.
    """

    layers: list[str]
    similarity: torch.Tensor
    measure: str
    order: str
    original: torch.Tensor = field(repr=False)

    def curve(self) -> list[float]:
        """The mean similarity over the images, per step."""
        return [float(v) for v in self.similarity.mean(1)]


def randomisation_layers(model: nn.Module) -> list[str]:
    """The model's layers to randomise, top first: its children that hold parameters, with
    containers (``nn.Sequential``, ``nn.ModuleList``) opened one level (timm's ``blocks.0`` ...)."""
    out = []
    for name, child in model.named_children():
        if isinstance(child, (nn.Sequential, nn.ModuleList)) and len(child) > 1:
            out += [f"{name}.{n}" for n, c in child.named_children() if any(True for _ in c.parameters())]
        elif any(True for _ in child.parameters()):
            out.append(name)
    return out[::-1]


def _randomise(module: nn.Module, seed: int) -> None:
    """Re-initialises every parameter under ``module``: ``reset_parameters`` where a module has one
    (torch's own initialisation; batch norm's running statistics too), else a normal draw of the
    parameter's own spread."""
    with _RNG_LOCK, torch.random.fork_rng(devices=[]), torch.no_grad():  # the global generator: one at a time
        torch.manual_seed(seed)
        done: set[int] = set()
        for sub in module.modules():
            if hasattr(sub, "reset_parameters") and any(True for _ in sub.parameters(recurse=False)):
                sub.reset_parameters()
                done.update(id(p) for p in sub.parameters(recurse=False))
        for p in module.parameters():
            if id(p) not in done:
                p.normal_(0.0, float(p.detach().float().std()) if p.numel() > 1 else 0.02)


def randomised_copy(model: nn.Module, layers: Sequence[str], seed: int = 0) -> nn.Module:
    """A copy of ``model`` with ``layers`` re-initialised, layer ``k`` seeded ``seed + k``: the model of
    the cascading test's step ``len(layers)`` (``model`` itself is not changed)."""
    out = _own_copy(model)
    modules = dict(out.named_modules())
    for k, name in enumerate(layers):
        _randomise(modules[name], seed + k)
    return out


def _own_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with tensors of its own and no hooks: copied from a :func:`twin`, so the
    hooks other threads' calls hold on the shared model at this moment are neither copied nor read
    while they change."""
    return copy.deepcopy(twin(model))


def _similar(measure: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if measure == "ssim":
        return ssim(a, b)
    return spearman(a, b, absolute=measure == "spearman_abs")


def parameter_randomisation(
    model: nn.Module,
    explain_with: ExplainWith,
    x: torch.Tensor,
    targets: Any = None,
    *,
    layers: Sequence[str] | None = None,
    order: str = "cascading",
    similarity: str = "spearman",
    seed: int = 0,
) -> Randomisation:
    """Adebayo et al.'s model parameter randomisation test.

    Args:
        model: the trained model (never changed: the test randomises copies).
        explain_with: given a model, the function that makes the maps ``(x, targets) -> (N, ...)``:
            ``lambda m: GradCAM(model=m, target_layer="layer4", method="gradcam").compute``.
        x: the batch, normalised as the model takes it (images (N, 3, H, W), clips (N, C, T, H, W)).
        targets: the classes explained (one for all, one per image); None: the trained model's
            top-1 class of each image, kept for every step (the randomised models' top classes mean
            nothing).
        layers: module names to randomise, top first (default :func:`randomisation_layers`).
        order: ``"cascading"`` or ``"independent"``.
        similarity: one of :data:`nstcam.metrics.similarity.SIMILARITIES`.
        seed: seeds each layer's re-initialisation (layer ``k`` with ``seed + k``).

    Returns:
        A :class:`Randomisation`.
    """
    one_of("order", order, ORDERS)
    one_of("similarity", similarity, SIMILARITIES)
    names = list(layers) if layers is not None else randomisation_layers(model)
    known = dict(model.named_modules())
    missing = [n for n in names if n not in known]
    if not names or missing:
        shown = ", ".join(missing)[:200] or "none given"
        raise ValueError(f"layers must name modules of the model; not found: {shown}")
    if targets is None:
        targets = _top1(model, x)
    original = explain_with(model)(x, targets).detach().double().cpu()
    rows, cascade = [], _own_copy(model)
    for k, name in enumerate(names):
        if order == "cascading":
            current = cascade
            _randomise(dict(current.named_modules())[name], seed + k)
        else:
            current = randomised_copy(model, [name], seed + k)
        maps = explain_with(current)(x, targets).detach().double().cpu()
        rows.append(_similar(similarity, original, maps))
    return Randomisation(names, torch.stack(rows), similarity, order, original.float())


def _top1(model: nn.Module, x: torch.Tensor) -> list[int]:
    from nstcam.hooks import eval_view

    with torch.inference_mode(False), torch.no_grad():
        return eval_view(model)(x).argmax(1).tolist()

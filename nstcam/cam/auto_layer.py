"""Choose the layer by evidence (issue 53): ``GradCAM(..., target_layer="auto")`` scores the maps of
each candidate layer on a faithfulness metric over a few images and keeps the best, saying which and
why (:class:`LayerChoice`).

The candidates are a model's outermost candidate layers (:func:`nstcam.cam.layers.candidate_layers`
without the blocks inside a stage), the deepest four; each image is explained for its top-1 class on
the network's input. A layer whose maps the method cannot make is left out and said. The scores are
each layer's mean with a bootstrap 95 % interval over the images, so the choice also says when the
evidence does not separate the best layer from the next.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nstcam._checks import whole
from nstcam._choices import one_of
from nstcam.cam._checks import read_layers
from nstcam.cam._sibling import sibling
from nstcam.cam._stats import bootstrap_mean, interval_ranks
from nstcam.cam.layers import candidate_layers
from nstcam.cam.registry import check_method
from nstcam.cam.trust import CORRELATION_SAMPLES, correlation_subset
from nstcam.image import SAMPLES, ImageSource, load_image
from nstcam.metrics import deletion_auc, faithfulness_correlation, insertion_auc
from nstcam.metrics.registry import METRICS

__all__ = ["LAYER_METRICS", "LAYER_PHOTOS", "LayerChoice", "LayerChoosing", "auto_candidates", "choose_layer"]

logger = logging.getLogger(__name__)

LAYER_METRICS = {name: METRICS[name].higher_is_better for name in ("deletion", "insertion", "correlation")}
"""The metrics a layer may be chosen by, and whether higher is better (:mod:`nstcam.metrics`)."""
LAYER_PHOTOS = tuple(SAMPLES / n for n in ("chelsea.png", "coffee.png", "rocket.jpg"))
"""The photos a layer is chosen on when none are given (public domain, shipped with nstcam)."""
MAX_LAYER_IMAGES = 16
MAX_CANDIDATES = 4


@dataclass
class LayerChoice:
    """Which layer ``target_layer="auto"`` chose, and the evidence.

    Attributes:
        layer: the layer chosen.
        metric: the metric it was chosen by; higher_is_better: its direction.
        scores: per candidate, (mean, low, high) of the metric over the images, best first.
        ranks: per candidate, 1 + the candidates whose whole interval is better.
        images: how many images; skipped: candidates the method cannot read, with why.
    """

    layer: str
    metric: str
    higher_is_better: bool
    scores: dict[str, tuple[float, float, float]]
    ranks: dict[str, int]
    images: int
    skipped: dict[str, str] = field(default_factory=dict)

    def why(self) -> str:
        """One paragraph: the layer, its score, the others', and whether the evidence separates them."""
        mean, low, high = self.scores[self.layer]
        way = "higher" if self.higher_is_better else "lower"
        others = ", ".join(f"{k} {v[0]:.3f}" for k, v in self.scores.items() if k != self.layer)
        said = (
            f"{self.layer}: {self.metric} {mean:.3f} [{low:.3f}, {high:.3f}] over {self.images} images "
            f"({way} is better), the best of {len(self.scores)} candidates"
            + (f" ({others})" if others else "")
        )
        tied = [k for k, r in self.ranks.items() if r == 1 and k != self.layer]
        if tied:
            said += f"; its 95 % interval overlaps {', '.join(tied)}'s: more images would tell them apart"
        elif len(self.scores) > 1:
            said += "; its 95 % interval lies apart from every other candidate's"
        if self.skipped:
            said += "; left out: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return said + "."


def auto_candidates(model: torch.nn.Module) -> list[str]:
    """The deepest :data:`MAX_CANDIDATES` of the model's candidate layers that are not inside another
    (a ResNet's stages ``layer1`` to ``layer4``, not their blocks; a ViT's last four blocks)."""
    names = candidate_layers(model)
    outer = [n for n in names if not any(n.startswith(o + ".") for o in names if o != n)]
    return outer[-MAX_CANDIDATES:]


def choose_layer(
    cam: Any,
    images: Sequence[ImageSource] | None = None,
    *,
    candidates: Sequence[str] | None = None,
    metric: str = "deletion",
    steps: int = 10,
    bootstrap: int = 1000,
    seed: int = 0,
) -> LayerChoice:
    """Scores ``cam``'s method at each candidate layer and returns the best (see the module).

    Args:
        cam: a classifier's :class:`nstcam.GradCAM` (its model, method, preprocessing).
        images: 1 to 16 photos (default :data:`LAYER_PHOTOS`).
        candidates: the layers to compare (default :func:`auto_candidates`).
        metric: one of :data:`LAYER_METRICS`.
        steps: deletion and insertion curve points, less one; bootstrap, seed: the intervals'.

    Raises:
        ValueError: naming the argument: not a classifier, an unknown metric, no candidate the
            method can read, too many images.
    """
    if cam.kind != "classifier" or cam.frames is not None:
        raise ValueError(
            f"target_layer='auto' scores an image classifier's class probability; this {cam.arch} is a "
            f"{'clip model' if cam.frames is not None else cam.kind}: name its layer"
        )
    one_of("layer_metric", metric, LAYER_METRICS)
    photos = list(images) if images is not None else list(LAYER_PHOTOS)
    if not 1 <= len(photos) <= MAX_LAYER_IMAGES:
        raise ValueError(f"layer_images must hold 1 to {MAX_LAYER_IMAGES} images, got {len(photos)}")
    steps = whole("steps", steps, minimum=1)
    names = list(candidates) if candidates is not None else auto_candidates(cam.model)
    xs = [cam.preprocess(load_image(p)).to(cam.device) for p in photos]
    targets = [int(cam.predict(x).argmax(1)[0]) for x in xs]
    values, skipped = {}, {}
    for name in names:
        try:  # the method may refuse the layer when built, or when it reads the layer's output
            engine = sibling(cam, layer=name)
            scored = [
                _score(cam.model, engine, x, t, metric, steps) for x, t in zip(xs, targets, strict=True)
            ]
        except ValueError as e:
            skipped[name] = str(e).splitlines()[0][:160]
            continue
        values[name] = np.array(scored)
    if not values:
        raise ValueError(
            f"no candidate layer could be read by {cam.method}: {'; '.join(skipped.values())[:300]}"
        )
    higher = LAYER_METRICS[metric]
    cis = {k: bootstrap_mean(v.astype(np.float64), bootstrap, seed) for k, v in values.items()}
    order = sorted(cis, key=lambda k: -cis[k][0] if higher else cis[k][0])
    choice = LayerChoice(
        order[0], metric, higher, {k: cis[k] for k in order}, interval_ranks(cis, higher), len(xs), skipped
    )
    logger.info("target_layer='auto' chose %s", choice.why())
    return choice


def _score(
    model: torch.nn.Module, engine: Any, x: torch.Tensor, target: int, metric: str, steps: int
) -> float:
    maps = engine.compute(x, target)
    if metric == "correlation":
        subset = correlation_subset(x)
        value = faithfulness_correlation(model, x, maps, target, samples=CORRELATION_SAMPLES, subset=subset)
    else:
        value = (deletion_auc if metric == "deletion" else insertion_auc)(model, x, maps, target, steps=steps)
    return float(value[0])


class LayerChoosing:
    """:class:`nstcam.GradCAM`'s target layers: read and checked, or with ``"auto"`` chosen by
    evidence once the engine is built (``layer_choice``)."""

    def _read_layers(
        self,
        target_layer: str | Sequence[str] | None,
        layout: str | None,
        input_size: int | None,
        method: str,
        candidates: Sequence[str] | None = None,
    ) -> None:
        if _is_auto(target_layer):  # until chosen: the deepest candidate
            target_layer = _deepest(self.model, candidates)
        self.target_layers, self.layouts, self.input_size, self.square = read_layers(
            self.model, self.arch, target_layer, layout, input_size or self.preprocessing.input_size
        )
        self.layout, self.target_layer = self.layouts[0], ",".join(self.target_layers)
        check_method(self.model, method, self.target_layers, clips=self.frames is not None)

    def _choose_layer(
        self,
        target_layer: Any,
        layout: str | None,
        input_size: int | None,
        images: Sequence[ImageSource] | None,
        metric: str,
        candidates: Sequence[str] | None,
    ) -> None:
        self.layer_choice: LayerChoice | None = None
        if _is_auto(target_layer):
            self.layer_choice = choose_layer(self, images, candidates=candidates, metric=metric)
            self._read_layers(self.layer_choice.layer, layout, input_size, self.method)


def _is_auto(target_layer: Any) -> bool:
    return isinstance(target_layer, str) and target_layer == "auto"


def _deepest(model: torch.nn.Module, candidates: Sequence[str] | None) -> str:
    names = list(candidates) if candidates is not None else auto_candidates(model)
    if not names:
        raise ValueError("layer_candidates must name at least one layer for target_layer='auto'")
    return names[-1]

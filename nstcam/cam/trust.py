"""Can these maps be trusted? One table over a set of images for several CAM methods (issue 53):
each metric's mean with a bootstrap 95 % interval, each method's rank (methods whose intervals
overlap share a rank), and what a map costs (seconds, peak memory).

Metrics (:mod:`nstcam.metrics`), each on the network's input, each image's top-1 class:

- ``deletion`` (lower is better) and ``insertion`` (higher): Petsiuk et al.'s AUCs;
- ``correlation`` (higher): Bhatt et al.'s faithfulness correlation;
- ``randomisation`` (lower): Spearman of the map with the one the model gives with its top layer
  re-initialised (Adebayo et al.; a map that does not change reads the input, not the model);
- ``sensitivity`` (lower): max-sensitivity under uniform noise (Yeh et al.);
- ``sparseness`` (higher): the map's Gini index (Chalasani et al.);
- with ``boxes``: ``energy`` (higher: the map's share inside the box) and ``pointing`` (higher).
"""

from __future__ import annotations

import csv
import io
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nstcam._checks import whole
from nstcam.image import ImageSource, load_image
from nstcam.metrics import (
    box_masks,
    deletion_auc,
    energy_in_mask,
    faithfulness_correlation,
    insertion_auc,
    max_sensitivity,
    pointing_game,
    randomisation_layers,
    randomised_copy,
    sparseness,
    spearman,
)

__all__ = ["DEFAULT_METHODS", "HIGHER_IS_BETTER", "TrustReport", "Trusted", "trust"]

logger = logging.getLogger(__name__)

DEFAULT_METHODS = ("gradcam", "gradcam++", "layercam", "eigencam", "guided-gradcam", "randomcam")
"""Gradient methods, a gradient-free one, one built on guided backprop, and a map that knows nothing."""
HIGHER_IS_BETTER = {
    "deletion": False,
    "insertion": True,
    "correlation": True,
    "randomisation": False,
    "sensitivity": False,
    "sparseness": True,
    "energy": True,
    "pointing": True,
}
MAX_IMAGES = 64


@dataclass
class TrustReport:
    """The table: ``stats[method][metric] = (mean, low, high, rank)``; ``seconds[method]`` and
    ``peak_mb[method]`` per map; ``failed[method]`` why a method could not run here."""

    methods: list[str]
    metrics: list[str]
    stats: dict[str, dict[str, tuple[float, float, float, int]]]
    seconds: dict[str, float]
    peak_mb: dict[str, float]
    images: int
    failed: dict[str, str] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per method and metric (the CSV's rows)."""
        return [self._row(m, k) for m in self.methods for k in self.stats[m]]

    def _row(self, method: str, metric: str) -> dict[str, Any]:
        mean, low, high, rank = self.stats[method][metric]
        cost = {"seconds_per_map": self.seconds[method], "peak_mb": self.peak_mb[method]}
        figures = {"mean": mean, "low": low, "high": high, "rank": rank}
        return {
            "method": method,
            "metric": metric,
            **figures,
            "higher_is_better": HIGHER_IS_BETTER[metric],
            **cost,
            "images": self.images,
        }

    def csv(self, path: str | Path | None = None) -> str:
        """The rows as CSV text, also written to ``path`` when given."""
        buf = io.StringIO()
        writer = csv.DictWriter(
            buf, fieldnames=list(self.rows()[0]) if self.rows() else ["method"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(self.rows())
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def markdown(self) -> str:
        """A method per row: each metric as ``mean [low, high] (#rank)``, then the cost."""
        arrows = {k: "↑" if HIGHER_IS_BETTER[k] else "↓" for k in self.metrics}
        head = (
            "| method | " + " | ".join(f"{k} {arrows[k]}" for k in self.metrics) + " | s per map | peak MB |"
        )
        lines = [head, "| --- |" + " --- |" * (len(self.metrics) + 2)]
        for m in self.methods:
            cells = [
                f"{s[0]:.3f} [{s[1]:.3f}, {s[2]:.3f}] (#{s[3]})"
                for s in (self.stats[m][k] for k in self.metrics)
            ]
            lines.append(
                f"| {m} | " + " | ".join(cells) + f" | {self.seconds[m]:.3f} | {self.peak_mb[m]:.0f} |"
            )
        lines += [
            f"| {m} | unavailable: {why} |" + " |" * (len(self.metrics) + 1) for m, why in self.failed.items()
        ]
        return "\n".join(lines)


def _bootstrap(values: np.ndarray, rounds: int, seed: int) -> tuple[float, float, float]:
    """Mean and the 2.5 and 97.5 percentiles of the bootstrapped mean (resampled images)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _ranks(cis: dict[str, tuple[float, float, float]], higher: bool) -> dict[str, int]:
    """1 + the number of methods whose whole interval is better than this one's: overlaps tie."""
    out = {}
    for m, (_, lo, hi) in cis.items():
        better = [o for o, (_, olo, ohi) in cis.items() if (olo > hi if higher else ohi < lo)]
        out[m] = 1 + len(better)
    return out


class _PeakMemory:
    """Peak memory above the start while the block runs, in MB: CUDA's allocator on a GPU, else the
    process's resident set sampled every 2 ms (Linux's /proc; 0 where it cannot be read)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak, self._stop = device, 0.0, threading.Event()

    @staticmethod
    def _rss() -> float:
        try:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * 4096 / 2**20
        except (OSError, ValueError, IndexError):
            return 0.0

    def __enter__(self) -> _PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device) / 2**20
        else:
            self._base, self._top = self._rss(), self._rss()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self._top = max(self._top, self._rss())

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device) / 2**20 - self._base
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self._top, self._rss()) - self._base


def _engine(cam: Any, method: str, model: torch.nn.Module | None = None) -> Any:
    return type(cam)(
        model=model if model is not None else cam.model,
        target_layer=list(cam.target_layers),
        method=method,
        device=cam.device,
        transform=cam.preprocessing,
        input_size=cam.input_size,
        seed=cam.seed,
    )


def _image_metrics(
    cam: Any, engine: Any, method: str, x: torch.Tensor, target: int, box: Any, kw: dict
) -> dict:
    maps = engine.compute(x, target)
    model = cam.model
    out = {
        "deletion": deletion_auc(model, x, maps, target, steps=kw["steps"]),
        "insertion": insertion_auc(model, x, maps, target, steps=kw["steps"]),
        "correlation": faithfulness_correlation(
            model, x, maps, target, samples=kw["samples"], subset=kw["subset"]
        ),
        "randomisation": spearman(maps, kw["random_engines"][method].compute(x, target)),
        "sensitivity": max_sensitivity(engine.compute, x, target, radius=0.02, samples=kw["noise_samples"]),
        "sparseness": sparseness(maps),
    }
    if box is not None:
        mask = box_masks([box], tuple(maps.shape[-2:]))
        out["energy"], out["pointing"] = energy_in_mask(maps, mask), pointing_game(maps, mask)
    return {k: float(v.reshape(-1)[0]) for k, v in out.items()}


def trust(
    cam: Any,
    images: Sequence[ImageSource],
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    boxes: Sequence[Sequence[float] | None] | None = None,
    steps: int = 10,
    samples: int = 30,
    noise_samples: int = 3,
    bootstrap: int = 1000,
    seed: int = 0,
) -> TrustReport:
    """Every method of ``methods`` on every image, scored by every metric (see the module).

    Args:
        cam: the :class:`nstcam.GradCAM` whose model, layer and preprocessing the methods share.
        images: the photos (at most 64), each explained at the engine's input size for its top-1 class.
        methods: CAM methods (:data:`nstcam.cam.METHODS`); one that cannot run on this model or layer
            is reported in ``failed`` and left out of the ranks.
        boxes: one ``(x1, y1, x2, y2)`` box per image in its own pixels (or None), for ``energy`` and
            ``pointing``; metrics over the images that have one.
        steps: deletion and insertion curve points, less one; samples: faithfulness correlation's
            subsets; noise_samples: max-sensitivity's noisy copies.
        bootstrap: resampling rounds of the 95 % intervals; seed: their generator's seed.
    """
    if not 1 <= len(images) <= MAX_IMAGES:
        raise ValueError(f"images must hold 1 to {MAX_IMAGES} images, got {len(images)}")
    if boxes is not None and len(boxes) != len(images):
        raise ValueError(
            f"boxes has {len(boxes)} entries for {len(images)} images (None where an image has none)"
        )
    kw = {
        "steps": whole("steps", steps, minimum=1),
        "samples": whole("samples", samples, minimum=2),
        "noise_samples": whole("noise_samples", noise_samples, minimum=1),
        "random_engines": {},  # per method, on one copy of the model with its top layer re-initialised
    }
    random_model = randomised_copy(cam.model, randomisation_layers(cam.model)[:1])
    loaded = [load_image(i) for i in images]
    xs = [cam.preprocess(img) for img in loaded]
    kw["subset"] = max(1, xs[0].shape[-1] * xs[0].shape[-2] // 50)
    targets = [_top1(cam, x) for x in xs]
    scaled = [_scaled_box(b, img, x) for b, img, x in zip(boxes or [None] * len(xs), loaded, xs, strict=True)]
    values: dict[str, dict[str, list[float]]] = {}
    seconds, peaks, failed = {}, {}, {}
    for method in methods:
        try:
            engine = _engine(cam, method)
        except ValueError as e:
            failed[method] = str(e).splitlines()[0][:200]
            continue
        kw["random_engines"][method] = _engine(cam, method, random_model)
        seconds[method], peaks[method] = _cost(cam, engine, xs, targets)
        rows = [
            _image_metrics(cam, engine, method, *row, kw) for row in zip(xs, targets, scaled, strict=True)
        ]
        values[method] = {
            k: [r[k] for r in rows if k in r] for k in HIGHER_IS_BETTER if any(k in r for r in rows)
        }
    metrics, stats = _table(values, bootstrap, seed)
    return TrustReport(list(values), metrics, stats, seconds, peaks, len(xs), failed)


def _cost(cam: Any, engine: Any, xs: list[torch.Tensor], targets: list[int]) -> tuple[float, float]:
    """Seconds and peak MB per map, after a warm-up call (its one-time costs are not a map's)."""
    engine.compute(xs[0], targets[0])
    t0 = time.perf_counter()
    with _PeakMemory(cam.device) as mem:
        for x, t in zip(xs, targets, strict=True):
            engine.compute(x, t)
    return (time.perf_counter() - t0) / len(xs), max(0.0, mem.peak)


def _table(values: dict[str, dict[str, list[float]]], bootstrap: int, seed: int) -> tuple[list[str], dict]:
    """The metrics every method has, and per method and metric (mean, low, high, rank)."""
    done = list(values)
    metrics = [k for k in HIGHER_IS_BETTER if done and k in values[done[0]]]
    stats: dict[str, dict[str, tuple[float, float, float, int]]] = {m: {} for m in done}
    for k in metrics:
        cis = {m: _bootstrap(np.asarray(values[m][k], dtype=np.float64), bootstrap, seed) for m in done}
        for m, r in _ranks(cis, HIGHER_IS_BETTER[k]).items():
            stats[m][k] = (*cis[m], r)
    return metrics, stats


def _top1(cam: Any, x: torch.Tensor) -> int:
    with torch.inference_mode(False), torch.no_grad():
        from nstcam.hooks import eval_view

        return int(eval_view(cam.model)(x.to(cam.device)).argmax(1)[0])


def _scaled_box(box: Any, img: Any, x: torch.Tensor) -> tuple[float, ...] | None:
    """``box`` in the image's pixels, in the network input's (the image resized to it)."""
    if box is None:
        return None
    sx, sy = x.shape[-1] / img.width, x.shape[-2] / img.height
    x1, y1, x2, y2 = (float(v) for v in box)
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


class Trusted:
    """:class:`nstcam.GradCAM`'s ``trust`` method, kept beside the report it makes."""

    def trust(self, images: Sequence[ImageSource], **params: Any) -> TrustReport:
        """Can these maps be trusted? Several methods on ``images``, every metric with a bootstrap
        95 % interval, ranks and cost: :func:`nstcam.cam.trust.trust` (``methods``, ``boxes``...)."""
        return trust(self, images, **params)

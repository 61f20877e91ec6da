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
import ctypes
import ctypes.util
import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nstcam._checks import whole
from nstcam.cam._passes import PassWatch
from nstcam.cam._sibling import sibling
from nstcam.cam._stats import bootstrap_mean as _bootstrap
from nstcam.cam._stats import interval_ranks as _ranks
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
from nstcam.metrics.registry import METRICS

__all__ = [
    "CORRELATION_SAMPLES",
    "DEFAULT_METHODS",
    "HIGHER_IS_BETTER",
    "TrustReport",
    "Trusted",
    "correlation_subset",
    "maps_per_image",
    "trust",
    "trust_passes",
]

logger = logging.getLogger(__name__)

DEFAULT_METHODS = ("gradcam", "gradcam++", "layercam", "eigencam", "guided-gradcam", "randomcam")
"""Gradient methods, a gradient-free one, one built on guided backprop, and a map that knows nothing."""
TRUST_METRICS = (
    "deletion",
    "insertion",
    "correlation",
    "randomisation",
    "sensitivity",
    "sparseness",
    "energy",
    "pointing",
)
"""The report's metrics, in its columns' order (``energy`` and ``pointing`` with boxes only)."""
HIGHER_IS_BETTER = {name: METRICS[name].higher_is_better for name in TRUST_METRICS}
"""Which way each is better: read from :data:`nstcam.metrics.METRICS`."""
MAX_IMAGES = 64
RANDOM_NOTE = "RANDOM weights: these figures are not meaningful (seeded random weights, for testing only)."
"""The line under a report of a model with random weights (markdown; the CSV has a column)."""
CORRELATION_SAMPLES = 30
"""Faithfulness correlation's random subsets per image, here and where a layer is chosen by it."""


def correlation_subset(x: torch.Tensor) -> int:
    """Faithfulness correlation's subset size for the input ``x`` (1, C, ...): 2 % of its pixels (a
    clip's or a volume's voxels), at least one."""
    return max(1, x[0, 0].numel() // 50)


@dataclass
class TrustReport:
    """The table: ``stats[method][metric] = (mean, low, high, rank)``; ``seconds[method]`` and
    ``peak_mb[method]`` per map; ``failed[method]`` why a method could not run here;
    ``random_weights``: the model's weights were random (said under the markdown, a CSV column)."""

    methods: list[str]
    metrics: list[str]
    stats: dict[str, dict[str, tuple[float, float, float, int]]]
    seconds: dict[str, float]
    peak_mb: dict[str, float]
    images: int
    failed: dict[str, str] = field(default_factory=dict)
    random_weights: bool = False

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
            "random_weights": self.random_weights,
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

    def table(self) -> tuple[list[str], list[list[str]]]:
        """Headers and rows, a method per row: each metric as ``mean [low, high] (#rank)`` (one image:
        ``mean (#rank)``, its interval a point), then the cost; a method that could not run says why."""
        arrows = {k: "↑" if HIGHER_IS_BETTER[k] else "↓" for k in self.metrics}
        head = ["method", *(f"{k} {arrows[k]}" for k in self.metrics), "s per map", "peak MB"]
        rows = []
        for m in self.methods:
            cells = [self._cell(*self.stats[m][k]) for k in self.metrics]
            rows.append([m, *cells, f"{self.seconds[m]:.3f}", f"{self.peak_mb[m]:.0f}"])
        rows += [[m, f"unavailable: {why}", *[""] * (len(head) - 2)] for m, why in self.failed.items()]
        return head, rows

    def _cell(self, mean: float, low: float, high: float, rank: int) -> str:
        spread = "" if self.images == 1 else f" [{low:.3f}, {high:.3f}]"
        return f"{mean:.3f}{spread} (#{rank})"

    def markdown(self) -> str:
        """:meth:`table` as a markdown table."""
        head, rows = self.table()
        lines = ["| " + " | ".join(head) + " |", "| --- |" + " --- |" * (len(head) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        if self.random_weights:
            lines += ["", RANDOM_NOTE]
        return "\n".join(lines)


class _PeakMemory:
    """Peak memory above the start while the block runs, in MB: CUDA's allocator on a GPU, else the
    C heap's bytes in use (glibc's ``mallinfo2``: PyTorch's CPU tensors live there) sampled every
    2 ms, else the process's resident set (Linux's /proc; 0 where neither can be read). The resident
    set alone said 0 for every map: memory freed by the warm-up is reused, so it never grows."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak, self._stop = device, 0.0, threading.Event()

    @staticmethod
    def _used() -> float:
        heap = _heap_in_use()
        if heap is not None:
            return heap
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
            self._base = self._top = self._used()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self._top = max(self._top, self._used())

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device) / 2**20 - self._base
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self._top, self._used()) - self._base


class _MallInfo2(ctypes.Structure):
    _FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS.split()]


def _mallinfo2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def _heap_in_use() -> float | None:
    """MB the C heap holds in use (small blocks and mmapped ones), or None off glibc 2.33+."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()
    return (m.uordblks + m.hblkhd) / 2**20


def _engine(cam: Any, method: str, model: torch.nn.Module | None = None) -> Any:
    return sibling(cam, method=method, model=model)


def _image_metrics(
    cam: Any, engine: Any, method: str, x: torch.Tensor, target: int, region: torch.Tensor | None, kw: dict
) -> dict:
    maps = engine.compute(x, target)
    model = kw["model"]
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
    if region is not None:
        mask = region[None]
        out["energy"], out["pointing"] = energy_in_mask(maps, mask), pointing_game(maps, mask)
    return {k: float(v.reshape(-1)[0]) for k, v in out.items()}


def maps_per_image(noise_samples: int) -> int:
    """Maps one method makes per image: the timed one, the scored one, the randomised model's, and
    max-sensitivity's original and ``noise_samples`` noisy ones (each method also makes one warm-up map)."""
    return 4 + noise_samples


def trust_passes(
    map_passes: Sequence[int],
    images: int,
    *,
    steps: int = 10,
    samples: int = CORRELATION_SAMPLES,
    noise_samples: int = 3,
) -> int:
    """Forward passes (of one input each; a backward counted as a forward) :func:`trust` costs.

    Args:
        map_passes: per method, what one of its maps costs (a gradient method 2: one forward, one
            backward; Score-CAM and co. one more per masked image).
        images: the inputs; steps, samples, noise_samples: as :func:`trust`.

    Per image: one pass for its top class; per method and image, ``maps_per_image`` maps, deletion's
    and insertion's ``steps + 2`` passes each (the unperturbed score first), faithfulness
    correlation's ``samples + 1``; per method, one warm-up map.
    """
    scored = 2 * (steps + 2) + samples + 1
    per_map = maps_per_image(noise_samples)
    return images + sum(p * (1 + images * per_map) + images * scored for p in map_passes)


def trust(
    cam: Any,
    images: Sequence[ImageSource | torch.Tensor],
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    boxes: Sequence[Sequence[float] | None] | None = None,
    masks: Sequence[Any] | None = None,
    steps: int = 10,
    samples: int = CORRELATION_SAMPLES,
    noise_samples: int = 3,
    bootstrap: int = 1000,
    seed: int = 0,
    should_stop: Callable[[], bool] | None = None,
    progress: Callable[[int], Any] | None = None,
) -> TrustReport:
    """Every method of ``methods`` on every image, scored by every metric (see the module).

    Args:
        cam: the :class:`nstcam.GradCAM` whose model, layer and preprocessing the methods share.
        images: the photos (at most 64), each explained at the engine's input size for its top-1 class;
            or network inputs as tensors, ``(C, H, W)``, a clip's window or a volume ``(C, T, H, W)``
            (each with or without the batch's 1 in front): deletion and insertion then run over space
            and time, and randomisation, sensitivity and sparseness over the whole map.
        methods: CAM methods (:data:`nstcam.cam.METHODS`); one that cannot run on this model or layer
            is reported in ``failed`` and left out of the ranks.
        boxes: one ``(x1, y1, x2, y2)`` box per image in its own pixels (or None), for ``energy`` and
            ``pointing``; metrics over the images that have one. Photos only.
        masks: instead of boxes, one mask per input (or None): a photo's in its pixels (H, W), a
            tensor input's at its size ((H, W) or (T, H, W)); > 0.5 is inside. A detector's or a
            segmenter's output works.
        steps: deletion and insertion curve points, less one; samples: faithfulness correlation's
            subsets; noise_samples: max-sensitivity's noisy copies (:func:`trust_passes` counts them).
        bootstrap: resampling rounds of the 95 % intervals; seed: their generator's seed.
        should_stop: asked before every forward pass (a cancel flag, a deadline): once true, the
            report stops there with :class:`nstcam.cam.StoppedEarly`; None: it runs to the end.
        progress: told the passes done so far after each (:func:`trust_passes` counts them all).
    """
    if not 1 <= len(images) <= MAX_IMAGES:
        raise ValueError(f"images must hold 1 to {MAX_IMAGES} images, got {len(images)}")
    for name, given in (("boxes", boxes), ("masks", masks)):
        if given is not None and len(given) != len(images):
            raise ValueError(
                f"{name} has {len(given)} entries for {len(images)} images (None where an image has none)"
            )
    if boxes is not None and masks is not None:
        raise ValueError("give boxes or masks, not both")
    kw = {
        "steps": whole("steps", steps, minimum=1),
        "samples": whole("samples", samples, minimum=2),
        "noise_samples": whole("noise_samples", noise_samples, minimum=1),
        "random_engines": {},  # per method, on one copy of the model with its top layer re-initialised
    }
    xs, regions = _inputs(cam, images, boxes, masks)
    random_model = randomised_copy(cam.model, randomisation_layers(cam.model)[:1])
    kw["subset"] = correlation_subset(xs[0])
    watch = PassWatch(should_stop, progress, "the trust report")
    kw["model"] = watch.model(cam.model)
    targets = [_top1(kw["model"], x, cam.device) for x in xs]
    values: dict[str, dict[str, list[float]]] = {}
    seconds, peaks, failed = {}, {}, {}
    for method in methods:
        try:
            engine = _engine(cam, method)
        except ValueError as e:
            failed[method] = str(e).splitlines()[0][:200]
            continue
        engine = watch.engine(engine)
        kw["random_engines"][method] = watch.engine(_engine(cam, method, random_model))
        seconds[method], peaks[method] = _cost(cam, engine, xs, targets)
        rows = [
            _image_metrics(cam, engine, method, *row, kw) for row in zip(xs, targets, regions, strict=True)
        ]
        values[method] = {
            k: [r[k] for r in rows if k in r] for k in HIGHER_IS_BETTER if any(k in r for r in rows)
        }
    metrics, stats = _table(values, bootstrap, seed)
    random = bool(cam.weights is not None and cam.weights.is_random)
    return TrustReport(list(values), metrics, stats, seconds, peaks, len(xs), failed, random)


def _inputs(
    cam: Any, images: Sequence[Any], boxes: Sequence[Any] | None, masks: Sequence[Any] | None
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Each input as the network takes it (1, C, ...) on the engine's device, and its region (a mask
    at the input's size, or None)."""
    xs, regions = [], []
    for i, item in enumerate(images):
        box = boxes[i] if boxes is not None else None
        mask, name = (masks[i], f"masks[{i}]") if masks is not None else (None, f"boxes[{i}]")
        if isinstance(item, torch.Tensor):
            x = _tensor_input(cam, item, i)
            if box is not None:
                raise ValueError(f"boxes[{i}] is in a photo's pixels; give a tensor input masks instead")
        else:
            img = load_image(item)
            x = cam.preprocess(img)
            if box is not None:
                mask = _box_mask(box, img, x, name)
        xs.append(x.to(cam.device))
        regions.append(None if mask is None else _mask_at(mask, x, name))
    return xs, regions


def _tensor_input(cam: Any, item: torch.Tensor, i: int) -> torch.Tensor:
    x = item.detach()
    if x.ndim in (3, 4) and (x.ndim == 3 or cam.frames is not None or x.shape[0] != 1):
        x = x[None]  # (C, H, W) or (C, T, H, W): the batch's 1 in front
    if x.ndim not in (4, 5) or x.shape[0] != 1 or not torch.is_floating_point(x):
        raise ValueError(
            f"images[{i}] must be a float tensor (C, H, W) or (C, T, H, W), with or without a batch of 1 "
            f"in front; got {x.dtype} {tuple(item.shape)}"
        )
    return x


def _box_mask(box: Any, img: Any, x: torch.Tensor, name: str) -> torch.Tensor:
    try:
        return box_masks([_scaled_box(box, img, x)], tuple(x.shape[-2:]))[0]
    except (TypeError, ValueError):
        why = "four finite numbers (x1, y1, x2, y2), x2 > x1 and y2 > y1"
        raise ValueError(f"{name} must be {why}") from None


def _mask_at(mask: Any, x: torch.Tensor, name: str) -> torch.Tensor:
    """``mask`` (H, W) or (T, H, W) at the input's grid ``x.shape[2:]`` (nearest), as 0/1."""
    m = torch.as_tensor(np.asarray(mask) if not isinstance(mask, torch.Tensor) else mask).detach()
    grid = tuple(x.shape[2:])
    if m.ndim not in (len(grid) - 1, len(grid)) or m.ndim < 2 or not m.numel():
        shapes = "(H, W) or (T, H, W)" if len(grid) == 3 else "(H, W)"
        raise ValueError(f"{name} must be {shapes}, got {tuple(m.shape)}")
    m = (m.double().cpu() > 0.5).double()
    if m.ndim < len(grid):  # one mask for every frame of a clip
        m = m[None].expand(grid[0], *m.shape)
    m = torch.nn.functional.interpolate(m[None, None], size=grid, mode="nearest")[0, 0]
    if not (m > 0.5).any():
        raise ValueError(f"{name} holds no pixel of the input (> 0.5 at the network's input size)")
    return m


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


def _top1(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> int:
    with torch.inference_mode(False), torch.no_grad():
        from nstcam.hooks import eval_view

        return int(eval_view(model)(x.to(device)).argmax(1)[0])


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

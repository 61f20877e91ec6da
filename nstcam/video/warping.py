"""Warping a frame by a flow, the certainty of a flow (Ruder et al. 2016), and the warping error
(Lai et al. 2018) that measures flicker."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import cv2
import numpy as np

from nstcam.video.flow import FlowEstimator

__all__ = ["certainty", "pair_error", "warp", "warping_error"]


def _grid(flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    return xs + flow[..., 0], ys + flow[..., 1]


def warp(image: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """``image`` pulled along ``flow``: ``out[y, x] = image[y + flow[y, x, 1], x + flow[y, x, 0]]``
    (bilinear; edges repeat). To bring frame ``t - 1`` onto frame ``t``, pass the flow ``t -> t - 1``.

    Args:
        image: ``(H, W, C)`` or ``(H, W)``, uint8 or float.
        flow: ``(H, W, 2)`` float32.
    """
    mx, my = _grid(flow)
    src = image.astype(np.float32) if image.dtype != np.float32 else image
    out = cv2.remap(src, mx, my, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return out.reshape(image.shape) if out.ndim != image.ndim else out


def certainty(back: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    """Where the flow ``back`` (frame ``t -> t - 1``) can be trusted: ``(H, W)`` float32, 1 or 0.

    0 where the forward-backward check fails (``fwd`` is ``t - 1 -> t``; the pixel was occluded or
    disoccluded), on motion boundaries, and where the flow leaves the frame (Ruder et al. 2016).
    """
    h, w = back.shape[:2]
    f_at = warp(fwd, back)  # the forward flow where each pixel of t came from
    total = back + f_at
    bad = (total**2).sum(-1) > 0.01 * ((back**2).sum(-1) + (f_at**2).sum(-1)) + 0.5
    gy_u, gx_u = np.gradient(back[..., 0])
    gy_v, gx_v = np.gradient(back[..., 1])
    edge = gx_u**2 + gy_u**2 + gx_v**2 + gy_v**2 > 0.01 * (back**2).sum(-1) + 0.002
    mx, my = _grid(back)
    outside = (mx < 0) | (mx > w - 1) | (my < 0) | (my > h - 1)
    return (~(bad | edge | outside)).astype(np.float32)


def pair_error(prev_out: np.ndarray, out: np.ndarray, back: np.ndarray, mask: np.ndarray) -> float:
    """One pair's warping error: the ``mask``-weighted mean squared difference between ``out`` and
    ``prev_out`` warped by ``back`` (images in [0, 1], averaged over channels)."""
    a = out.astype(np.float32) / (255.0 if out.dtype == np.uint8 else 1.0)
    b = warp(prev_out, back) / (255.0 if prev_out.dtype == np.uint8 else 1.0)
    d = ((a - b) ** 2).mean(-1)
    return float((d * mask).sum()) / max(float(mask.sum()), 1.0)


def warping_error(
    outputs: Sequence[np.ndarray],
    inputs: Sequence[np.ndarray] | None = None,
    *,
    flows: Iterable[tuple[np.ndarray, np.ndarray]] | None = None,
    method: str = "dis",
) -> float:
    """Flicker of a stylised clip (Lai et al. 2018): the mean over frame pairs of the masked mean
    squared difference between each output frame and the previous output frame warped by the
    motion of the *input* clip. Images count in [0, 1] (averaged over channels); 0 is perfectly
    stable; only pixels whose motion is certain count (:func:`certainty`).

    Args:
        outputs: the stylised frames, ``(H, W, 3)`` uint8 (or float in [0, 1]).
        inputs: the input frames at the same size; the flows are computed from them with ``method``.
        flows: instead of ``inputs``: for each pair ``(t - 1, t)``, ``(back, mask)``: the flow
            ``t -> t - 1`` and the ``(H, W)`` weights of the pixels to count (e.g. the true motion).
        method: flow method for ``inputs`` (see :class:`nstcam.video.FlowEstimator`).

    Raises:
        ValueError: fewer than two frames, or neither (or both of) ``inputs`` and ``flows``.
    """
    if len(outputs) < 2:
        raise ValueError(f"warping_error needs at least two frames, got {len(outputs)}")
    if (inputs is None) == (flows is None):
        raise ValueError("warping_error takes the input frames or the flows, exactly one of them")
    if flows is None:
        est = FlowEstimator(method)
        pairs = []
        for a, b in itertools.pairwise(inputs):
            fwd, back = est.pair(a, b)
            pairs.append((back, certainty(back, fwd)))
        flows = pairs
    pairs = zip(flows, outputs[:-1], outputs[1:], strict=False)
    return float(np.mean([pair_error(prev, out, back, mask) for (back, mask), prev, out in pairs]))

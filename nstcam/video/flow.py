"""Optical flow between two frames: OpenCV's DIS (default: no weights, any machine) or torchvision's
RAFT (``raft_small`` / ``raft_large``, official weights through nstcam's weights registry).

A flow ``f`` from frame ``a`` to frame ``b`` says where each pixel of ``a`` went:
``a[y, x] ~ b[y + f[y, x, 1], x + f[y, x, 0]]``; it is an ``(H, W, 2)`` float32 array of (dx, dy).
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nstcam._choices import one_of
from nstcam.weights import build_model

__all__ = ["FLOW_METHODS", "FlowEstimator", "optical_flow"]

FLOW_METHODS = ("dis", "raft", "raft_small", "raft_large")
"""``"raft"`` means ``raft_small``."""


class FlowEstimator:
    """Computes flows with one method; safe to share between threads (RAFT runs read-only, under
    ``no_grad``; each DIS call makes its own OpenCV object).

    Args:
        method: one of :data:`FLOW_METHODS`.
        device: where RAFT runs (default CPU); DIS runs on the CPU.
        weights: RAFT's weights: ``"imagenet"`` (the official ones, named as for every model),
            ``"random"`` (tests only: meaningless flows) or a state dict's path.
        model: a ready torchvision RAFT, instead of ``weights``.

    Raises:
        ValueError: unknown ``method``.
        WeightsUnavailableError: RAFT's official weights are absent and cannot be downloaded.
    """

    def __init__(
        self,
        method: str = "dis",
        *,
        device: torch.device | str | None = None,
        weights: str = "imagenet",
        model: nn.Module | None = None,
    ) -> None:
        one_of("flow", method, FLOW_METHODS)
        self.method = "raft_small" if method == "raft" else method
        self.device = torch.device(device or "cpu")
        self.model = None
        if self.method != "dis":
            self.model = (model or build_model(self.method, weights)).to(self.device).eval()
            for p in self.model.parameters():
                p.requires_grad_(False)
        self._lock = threading.Lock()

    @property
    def is_random(self) -> bool:
        """RAFT with random weights (its flows mean nothing)."""
        info = getattr(self.model, "nstcam_weights", None)
        return bool(info is not None and info.is_random)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The flow from RGB frame ``a`` to frame ``b`` (both ``(H, W, 3)`` uint8, one size)."""
        if a.shape != b.shape:
            raise ValueError(f"frames must have one size, got {a.shape} and {b.shape}")
        if self.method == "dis":
            return _dis(a, b)
        return self._raft(a, b)

    def pair(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flows ``a -> b`` and ``b -> a``."""
        if self.method == "dis":
            return _dis(a, b), _dis(b, a)
        both = self._raft(np.stack([a, b]), np.stack([b, a]))
        return both[0], both[1]

    @torch.no_grad()
    def _raft(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        batched = a.ndim == 4
        x = torch.from_numpy(np.stack([a, b]) if not batched else np.concatenate([a, b]))
        x = x.to(self.device).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        h, w = x.shape[-2:]
        ph, pw = max(128, h + (-h) % 8) - h, max(128, w + (-w) % 8) - w  # RAFT: sides of 8k, >= 128
        x = F.pad(x, (0, pw, 0, ph), mode="replicate")
        n = x.shape[0] // 2
        flows = self.model(x[:n].contiguous(), x[n:].contiguous())[-1][..., :h, :w]
        out = flows.permute(0, 2, 3, 1).float().cpu().numpy()
        return out if batched else out[0]


def _dis(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    ga = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY)
    gb = cv2.cvtColor(b, cv2.COLOR_RGB2GRAY)
    return dis.calc(ga, gb, None).astype(np.float32, copy=False)


def optical_flow(a: np.ndarray, b: np.ndarray, method: str = "dis") -> np.ndarray:
    """The flow from RGB frame ``a`` to frame ``b`` (``(H, W, 3)`` uint8); see :class:`FlowEstimator`
    (for RAFT, build one estimator and reuse it)."""
    return FlowEstimator(method)(a, b)

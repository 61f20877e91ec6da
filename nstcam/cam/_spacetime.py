"""What :class:`nstcam.GradCAM` does on clips and volumes (N, C, T, H, W), beside images: one forward
pass's probabilities, several classes' raw maps from one pass, and the clip and volume entry points
(:mod:`nstcam.cam.clips`, :mod:`nstcam.cam.volumes`). The engine's own attributes are read:
``frames`` (None: an image model), ``model``, ``device``, ``arch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nstcam._checks import whole
from nstcam.cam._dispatch import Spec, class_maps
from nstcam.cam.hooks import eval_view

__all__ = ["SpaceTime", "check_batch"]


def check_batch(x: Any, clips: bool, aug_smooth: bool = False) -> None:
    """An image batch (N, 3, H, W) for an image model, (N, C, T, H, W) for a video or volume model
    (without ``aug_smooth``, whose flips and brightness are an image's)."""
    if clips and aug_smooth:
        raise ValueError("aug_smooth flips and brightens images; leave it off for clips and volumes")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a tensor; got a {type(x).__name__}")
    if clips and x.ndim != 5:
        raise ValueError(
            f"x must be a batch of clips or volumes (N, C, T, H, W) for this video model, got "
            f"{tuple(x.shape)}"
        )
    if not clips and (x.ndim != 4 or x.shape[1] != 3):
        raise ValueError(f"x must be a batch of shape (N, 3, H, W), got {tuple(x.shape)}")


class SpaceTime:
    """The engine's calls for clips and volumes (mixed into :class:`nstcam.GradCAM`)."""

    frames: int | None
    model: torch.nn.Module
    device: torch.device
    arch: str

    def class_maps(self, x: torch.Tensor, classes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw maps of several classes for every input of the batch ``x``, in one forward pass and
        one backward pass per class (what a clip's windows need: the same classes in each).

        Returns:
            (raw maps (k, N, *grid) at the layer's resolution, probabilities (N, classes)).
        """
        check_batch(x, self.frames is not None)
        x = x.to(self.device)
        x = x.clone() if x.is_inference() else x
        chosen = [whole("classes", c, minimum=0) for c in classes]
        if not chosen:
            raise ValueError("classes must name at least one class")
        rows = torch.tensor(chosen, dtype=torch.long, device=x.device)[:, None].expand(-1, x.shape[0])
        raws, probs, _ = class_maps(Spec.of(self, graphs=False), eval_view(self.model), x, rows)
        return raws, probs

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Class probabilities (N, classes) of a normalised batch (one forward pass, no hooks)."""
        check_batch(x, self.frames is not None)
        return eval_view(self.model)(x.to(self.device)).float().softmax(1)

    def explain_video(self, clip: Any, **options: Any) -> Any:
        """Explains a clip: see :func:`nstcam.cam.clips.explain_video` (a video classifier's sliding
        windows, or an image classifier frame by frame) for ``options`` and what it returns."""
        from nstcam.cam.clips import explain_video

        return explain_video(self, clip, **options)

    def explain_volume(self, volume: Any, **options: Any) -> Any:
        """Explains a volume (C, D, H, W): see :func:`nstcam.cam.volumes.explain_volume`."""
        from nstcam.cam.volumes import explain_volume

        return explain_volume(self, volume, **options)

    def images_only(self) -> None:
        """Refuses an image call on a video or volume model, naming the calls that fit."""
        if self.frames is not None:
            raise ValueError(
                f"this {self.arch} explains clips and volumes (N, C, T, H, W), not images: use "
                "explain_video(clip), explain_volume(volume) or compute(x)"
            )

"""One run's progress: the loss history, the tqdm bar, previews and the cancel check."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from PIL import Image
from tqdm.auto import tqdm

from nstcam.style._types import Cancelled, StepInfo

__all__ = ["Progress"]


class Progress:
    """Counts evaluations over all scales of one run and reports each to the caller.

    Args:
        total_steps: evaluations the run will do.
        callback: called with a :class:`StepInfo` after each; returning False cancels.
        preview_every: put a preview in every N-th :class:`StepInfo` (0: never).
        bar: show a tqdm bar.
    """

    def __init__(
        self,
        total_steps: int,
        callback: Callable[[StepInfo], bool | None] | None,
        preview_every: int,
        bar: bool,
    ) -> None:
        self.total_steps = total_steps
        self.callback = callback
        self.preview_every = preview_every
        self.history: list[dict[str, float]] = []
        self.t0 = time.perf_counter()
        self._bar = tqdm(total=total_steps, desc="stylize", unit="step", disable=not bar, leave=False)

    def step(
        self,
        scale: int,
        size: tuple[int, int],
        values: dict[str, float],
        best: torch.Tensor,
        preview: Callable[[torch.Tensor], Image.Image],
    ) -> None:
        """Records one evaluation; raises :class:`Cancelled` (holding ``best``) if asked to stop."""
        self.history.append({"step": len(self.history) + 1, "scale": scale, **values})
        self._bar.update(1)
        self._bar.set_postfix(loss=f"{values['total']:.4g}", refresh=False)
        if self.callback is None:
            return
        n = len(self.history)
        shown = None
        if self.preview_every and (n % self.preview_every == 0 or n == self.total_steps):
            shown = preview(best)
        info = StepInfo(n, self.total_steps, scale, size, values, shown, time.perf_counter() - self.t0)
        if self.callback(info) is False:
            raise Cancelled(best, self.history)

    def close(self) -> None:
        self._bar.close()

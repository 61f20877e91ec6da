"""One run's progress: the loss history, the tqdm bar, previews and the cancel check.

Nothing here waits for the device on an ordinary step: each step's losses are kept as a tensor on
the device, and they are read (one synchronisation) only on reporting steps, every
``report_every`` steps and on preview steps, or when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from PIL import Image
from tqdm.auto import tqdm

from nstcam._terminal import watching
from nstcam.style._types import Cancelled, StepInfo

__all__ = ["LOSS_KEYS", "Progress"]

LOSS_KEYS = ("total", "content", "style", "tv", "anchor")  # "anchor": only where a run has anchors


class Progress:
    """Counts evaluations over all scales of one run (of one image, or a batch) and reports them.

    Args:
        total_steps: evaluations the run will do.
        n_images: images optimised together.
        callback: called with a :class:`StepInfo` on reporting steps; returning False cancels.
        preview_every: put a preview in every N-th :class:`StepInfo` (0: never).
        report_every: call ``callback`` every N steps (previews and the last step always report).
        bar: show a tqdm bar; None: where a person watches (:func:`watching`).
        n_scales: scales the run optimises at (the bar says which one it is at).
    """

    def __init__(
        self,
        total_steps: int,
        n_images: int,
        callback: Callable[[StepInfo], bool | None] | None,
        preview_every: int,
        report_every: int,
        bar: bool | None,
        n_scales: int = 1,
    ) -> None:
        self.total_steps = total_steps
        self.n_scales = n_scales
        self._scale: int | None = None
        self._last: tuple | None = None  # the last step's scale, size, best images and preview maker
        self.callback = callback
        self.preview_every = preview_every
        self.report_every = max(1, report_every)
        self.histories: list[list[dict[str, float]]] = [[] for _ in range(n_images)]
        self.t0 = time.perf_counter()
        self.done = 0
        self._pending: list[tuple[int, torch.Tensor]] = []  # (scale, (4, N) losses on the device)
        bar = watching() if bar is None else bool(bar)
        self._bar = tqdm(total=total_steps, desc="stylize", unit="step", disable=not bar, leave=False)
        self._show_bar = bar

    @property
    def history(self) -> list[dict[str, float]]:
        """The first (or only) image's history, read from the device."""
        self.flush()
        return self.histories[0]

    def step(
        self,
        scale: int,
        size: tuple[int, int],
        losses: torch.Tensor,
        best: torch.Tensor,
        preview: Callable[[torch.Tensor], Image.Image],
    ) -> None:
        """Records one evaluation's ``losses`` ((4, N): total, content, style, tv per image; a fifth
        row, anchor, where the run has anchors);
        raises :class:`Cancelled` (holding ``best``) if the callback asks to stop."""
        self.done += 1
        self._pending.append((scale, losses))
        if scale != self._scale:
            self._scale = scale
            desc = f"stylize scale {scale + 1}/{self.n_scales} {size[0]}x{size[1]}"
            self._bar.set_description(desc, refresh=False)
        self._bar.update(1)
        self._last = (scale, size, best, preview)
        self._report()

    def _report(self) -> None:
        """Reports the last step where it is a reporting step (the callback; the bar's loss)."""
        n = self.done
        scale, size, best, preview = self._last
        shows_preview = self.preview_every and (n % self.preview_every == 0 or n == self.total_steps)
        reports = self.callback is not None and (
            n % self.report_every == 0 or shows_preview or n == self.total_steps
        )
        if not reports and not (self._show_bar and n % self.report_every == 0):
            return
        self.flush()
        keys = [k for k in LOSS_KEYS if k in self.histories[0][-1]]
        values = {k: sum(h[-1][k] for h in self.histories) / len(self.histories) for k in keys}
        self._bar.set_postfix(loss=f"{values['total']:.4g}", refresh=False)
        if not reports:
            return
        shown = preview(best) if shows_preview else None
        info = StepInfo(n, self.total_steps, scale, size, values, shown, time.perf_counter() - self.t0)
        if self.callback(info) is False:
            raise Cancelled(best, self.history)

    def skip(self, steps: int) -> None:
        """``steps`` of the run's total will not run (a scale converged early): the total shrinks."""
        self.total_steps -= steps
        self._bar.total = self.total_steps
        self._bar.refresh()
        if steps and self.done == self.total_steps and self._last is not None:
            self._report()  # the run's last step, again with the shrunk total: the callback's last word

    def flush(self) -> None:
        """Reads the losses recorded on the device into the histories (one synchronisation)."""
        if not self._pending:
            return
        scales = [s for s, _ in self._pending]
        values = torch.stack([v for _, v in self._pending]).double().cpu().tolist()  # (steps, 4, N)
        self._pending.clear()
        for s, rows in zip(scales, values, strict=True):  # rows: 4, or 5 with anchors
            for i, history in enumerate(self.histories):
                history.append(
                    {
                        "step": len(history) + 1,
                        "scale": s,
                        **{k: row[i] for k, row in zip(LOSS_KEYS, rows, strict=False)},
                    }
                )

    def close(self) -> None:
        self.flush()
        self._bar.close()

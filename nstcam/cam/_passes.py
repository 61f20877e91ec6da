"""A long run's passes watched: each forward pass (a map's, a metric's) first asks whether the run
should stop, so a cancel or a deadline frees the worker within one pass, and says how many are done.

The shared model is never touched: the watch wraps it in a module of its own per run (no hook, no
flag another thread could see)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from nstcam._checks import StoppedEarly

__all__ = ["PassWatch"]


class _Watched(nn.Module):
    """``model`` behind a check before each forward pass (its modules' flags left as they are)."""

    def __init__(self, model: nn.Module, watch: PassWatch) -> None:
        super().__init__()
        self.inner = model
        self.training = False  # this wrapper's own flag only: eval_view reads the inner modules'
        self._watch = watch

    def forward(self, x: torch.Tensor) -> Any:
        self._watch.tick()
        return self.inner(x)


class _WatchedEngine:
    """An engine whose ``compute`` ticks before each map (a forward and a backward: 2 passes) and
    after each of Score-CAM's masked passes."""

    def __init__(self, engine: Any, watch: PassWatch) -> None:
        self._engine, self._watch = engine, watch

    def compute(self, x: torch.Tensor, targets: Any = None, **kwargs: Any) -> torch.Tensor:
        self._watch.tick(2)
        kwargs.setdefault("progress", lambda done, total: self._watch.tick())
        return self._engine.compute(x, targets, **kwargs)


class PassWatch:
    """Counts a run's passes; stops it (:class:`nstcam.cam.StoppedEarly`) before the next one once
    ``should_stop()`` is true, and calls ``progress(done)`` after each.

    Args:
        should_stop: asked before every pass (a cancel flag's ``is_set``, a deadline); None: never.
        progress: told the passes done so far; None: nobody listens.
        what: how the stop names the run ("the trust report").
    """

    def __init__(
        self,
        should_stop: Callable[[], bool] | None = None,
        progress: Callable[[int], Any] | None = None,
        what: str = "the run",
    ) -> None:
        self.should_stop, self.progress, self.what = should_stop, progress, what
        self.done = 0

    def tick(self, passes: int = 1) -> None:
        """One more pass (``passes``) is about to run: stops first where asked."""
        if self.should_stop is not None and self.should_stop():
            raise StoppedEarly(f"{self.what} stopped after {self.done:,} passes")
        self.done += passes
        if self.progress is not None:
            self.progress(self.done)

    def model(self, model: nn.Module) -> nn.Module:
        """``model`` as this run calls it: each forward pass watched."""
        return _Watched(model, self)

    def progress_of(self, progress: Callable[[int, int], Any] | None) -> Callable[[int, int], Any]:
        """``progress(done, total)`` (an engine's, after each masked pass) that first stops where
        asked; None: only the check."""

        def checked(done: int, total: int) -> None:
            self.tick(0)
            if progress is not None:
                progress(done, total)

        return checked

    def engine(self, engine: Any) -> _WatchedEngine:
        """``engine`` as this run calls it: each map watched."""
        return _WatchedEngine(engine, self)

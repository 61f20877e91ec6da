"""What a style-transfer run reports: progress, cancellation and the memory refusal."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

__all__ = ["BudgetSpent", "Cancelled", "InsufficientMemoryError", "StepInfo"]


class Cancelled(RuntimeError):  # noqa: N818 - reads naturally: `except Cancelled`
    """The progress callback asked to stop.

    Attributes:
        image: the result so far (a PIL image), or None if no step had run.
        history: the loss history so far.
    """

    def __init__(self, image: Image.Image | None, history: list[dict[str, float]]) -> None:
        super().__init__(f"style transfer cancelled after {len(history)} steps")
        self.image = image
        self.history = history

    def __reduce__(self) -> tuple[type, tuple[Image.Image | None, list[dict[str, float]]]]:
        """Pickled with its image and history (a ZeroGPU worker sends it back to the server)."""
        return Cancelled, (self.image, self.history)


class BudgetSpent(Exception):  # noqa: N818 - control flow inside the optimisation loop
    """The step budget ran out inside an L-BFGS line search."""


class InsufficientMemoryError(MemoryError):
    """A run would not fit in the device's free memory; the message gives a size that fits."""


@dataclass
class StepInfo:
    """What the progress callback receives after every evaluation of the network.

    Attributes:
        step: evaluations done so far, over all scales (1-based).
        total_steps: evaluations the whole run will do (it shrinks when a scale converges early:
            ``tolerance``).
        scale: index of the current scale (0 = coarsest).
        size: (width, height) being optimised.
        losses: ``total``, ``content``, ``style`` and ``tv`` (weighted).
        preview: the current image every ``preview_every`` steps, else None.
        elapsed: seconds since the run started.
    """

    step: int
    total_steps: int
    scale: int
    size: tuple[int, int]
    losses: dict[str, float]
    preview: Image.Image | None
    elapsed: float

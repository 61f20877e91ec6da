"""Argument checks shared by the engines: each error names the argument, the limit and the value."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["StoppedEarly", "check_targets", "finite", "whole"]


class StoppedEarly(ValueError):  # noqa: N818 - reads naturally: `except StoppedEarly`
    """A run stopped because its progress callback said so (a cancel, a time budget): not a fault,
    not a bad argument (a ValueError, as it was before it had a name of its own)."""


def whole(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int if it is a whole number (Python or numpy integer) within the limits.

    Raises:
        ValueError: not an integer (``2.5``, ``"3"``, ``True``) or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number, got {value!r} ({type(value).__name__})")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {v}")
    return v


def finite(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a float if it is a finite real number within the limits.

    Raises:
        ValueError: not a real number, NaN, infinite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {v:g}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {v:g}")
    return v


def check_targets(targets: Any, n: int, num_classes: int) -> list[int]:
    """One class index per image, from one class for all or one per image, checked on the host.

    Raises:
        ValueError: a target that is not a whole number, the wrong number of targets for the
            batch, or a class out of range.
    """
    if hasattr(targets, "dtype") and hasattr(targets, "tolist"):  # a tensor or an array
        if str(targets.dtype).split(".")[-1].startswith(("float", "complex", "bool")):
            raise ValueError(f"targets must hold class indices (integers), got {targets.dtype} values")
        targets = targets.tolist()
    if isinstance(targets, (list, tuple, range)) or hasattr(targets, "__array__"):
        values = [whole("targets", v) for v in (targets.tolist() if hasattr(targets, "tolist") else targets)]
        if len(values) != n:
            raise ValueError(
                f"targets has {len(values)} entries for a batch of {n} images; give one per image"
            )
    else:
        values = [whole("target", targets)] * n
    bad = [v for v in values if not 0 <= v < num_classes]
    if bad:
        raise ValueError(
            f"target class {bad[0]} is out of range: the model has {num_classes} classes "
            f"(0-{num_classes - 1})"
        )
    return values

"""Whether a person watches this process: where progress bars go by default (both engines, video)."""

from __future__ import annotations

import sys

__all__ = ["watching"]


def watching() -> bool:
    """Whether a person is watching: standard error is a terminal (not a log file, pipe or notebook
    cell captured by a server). Progress bars default to on exactly then."""
    stream = sys.stderr
    return bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())

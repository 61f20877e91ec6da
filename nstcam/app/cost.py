"""What a request will cost, estimated before any work and checked against this server's limits.

A request's cost is counted in the unit that bounds its time and memory: a clip's in windows
planned (from its decoded frame count, never its declared duration: a clip of one frame per
timebase tick packs 10,000 frames in 10 s), a volume's in voxel-passes (passes x voxels of its one
window, the whole volume), each side of a volume at most twice the side of the largest cube (on a
CPU a side of 512 or more took 2.1-2.2x the time and 1.7x the memory of a 64**3 cube of as many
voxels, sides up to 256 1.0-1.3x: ``tests/benchmarks/bench_volume_shapes.py``, docs/security.md).
A refusal is one line: the request, its cost, the limit and what would fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nstcam.app.config import AppConfig
from nstcam.app.errors import refuse
from nstcam.cam.clips import window_starts

__all__ = ["Cost", "clip_cost", "max_volume_side", "volume_cost", "volume_passes"]


@dataclass(frozen=True)
class Cost:
    """A request's estimated cost.

    Attributes:
        what: how the refusal names the request (its file's own name).
        units: its cost; limit: the most this server takes; unit: what is counted.
        fix: what would make it fit.
    """

    what: str
    units: float
    limit: float
    unit: str
    fix: str = ""

    def check(self) -> Cost:
        """Refuses the request (one line) over its limit; returns itself otherwise."""
        if self.units > self.limit:
            fix = f" {self.fix}" if self.fix else ""
            raise refuse(
                f"{self.what} would cost {self.units:,.0f} {self.unit}, over this server's limit of "
                f"{self.limit:,.0f}.{fix}"
            )
        return self


def clip_cost(cfg: AppConfig, name: str, frames: int, window: int, stride: int) -> Cost:
    """A clip request's windows planned: ``frames`` decoded frames, windows of ``window`` frames
    (1: an image model, frame by frame), ``stride`` apart; at most one window per frame the server
    takes (``max_video_frames``)."""
    windows = len(window_starts(frames, window, max(1, stride)))
    return Cost(f"{name}: {frames:,} frames", windows, cfg.max_video_frames, "windows", "Trim the clip.")


def volume_passes(top_k: int) -> int:
    """Forward-pass equivalents of explaining a volume: one pass for its top classes, one forward
    and one backward (about two forwards) per class for the maps."""
    return 2 + 2 * top_k


def max_volume_side(cfg: AppConfig) -> int:
    """Longest side a volume may have: twice the side of the largest cube (256 on a CPU)."""
    return 2 * round(cfg.max_volume_values ** (1 / 3))


def volume_cost(cfg: AppConfig, name: str, shape: tuple[int, ...], top_k: int) -> Cost:
    """A volume request's voxel-passes (passes x voxels of the volume, its one window); a side over
    :func:`max_volume_side` is refused first, by name."""
    sides = tuple(shape[-3:])
    longest = max_volume_side(cfg)
    if max(sides) > longest:
        raise refuse(
            f"{name} is {' x '.join(map(str, sides))} voxels; each side may be at most {longest} on this "
            "server (a long, thin volume costs 2 to 4 times a cube of as many voxels)"
        )
    return Cost(
        f"{name} ({' x '.join(map(str, sides))} voxels, top-{top_k})",
        volume_passes(top_k) * math.prod(sides),
        cfg.max_volume_voxel_passes,
        "voxel-passes",
        "Send a smaller volume.",
    )

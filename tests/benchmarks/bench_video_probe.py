"""What probing an oversized clip costs: an 8192x4320 H.264 clip refused from its header (the app's
4K frame limit) against the same clip probed with no limit, which decodes its first frame.

    python tests/benchmarks/bench_video_probe.py

Each probe runs in a fresh process and reports its peak RSS growth (``ru_maxrss``) and time.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import av

PROBE = """
import resource, sys, time
from nstcam.video import VideoError, probe_video
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
limit = None if sys.argv[2] == "none" else int(sys.argv[2])
p0, t0 = peak(), time.perf_counter()
try:
    probe_video(sys.argv[1], max_pixels=limit)
    outcome = "accepted"
except VideoError:
    outcome = "refused"
print(outcome, peak() - p0, time.perf_counter() - t0)
"""


def write_clip(path: Path, w: int = 8192, h: int = 4320) -> Path:
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=Fraction(2), options={"preset": "ultrafast"})
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        frame = av.VideoFrame(w, h, "yuv420p")
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for _ in range(2):
            for p in vs.encode(frame):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        clip = write_clip(Path(d) / "huge.mp4")
        print(f"clip: 8192x4320, 2 frames, {clip.stat().st_size / 1e3:.0f} KB; each probe in a fresh process")
        print("| probe | outcome | peak RSS growth (MB) | seconds |")
        print("| --- | --- | --- | --- |")
        for name, limit in (("app limit 3840x2160 (header only)", str(3840 * 2160)), ("no limit", "none")):
            out = subprocess.run([sys.executable, "-c", PROBE, str(clip), limit], capture_output=True, text=True,
                                 check=True).stdout.split()  # fmt: skip
            print(f"| {name} | {out[0]} | {float(out[1]):.1f} | {float(out[2]):.3f} |")


if __name__ == "__main__":
    main()

"""The cost of a volume by its shape: one forward and backward pass of r3d_18 (random weights: the
cost does not depend on them) on volumes of the same number of voxels, each shape in a fresh
process (its peak memory its own). Why the app caps a volume's longest side as well as its values
(docs/security.md).

    python tests/benchmarks/bench_volume_shapes.py [--voxels 262144]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

SHAPES = ["64x64x64", "4x256x256", "8x128x256", "32x32x256", "8x64x512", "16x16x1024", "8x8x4096"]

ONE = """
import json, resource, sys, time, torch
from nstcam.weights import build_model
torch.manual_seed(0)
m = build_model("r3d_18", "random").eval()
x = torch.randn(1, 3, *json.loads(sys.argv[1]), requires_grad=True)
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); m(x)[0, 0].backward(); dt = time.perf_counter() - t
print(json.dumps({"s": dt, "mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0) / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=SHAPES)
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        dims = [int(v) for v in shape.split("x")]
        out = (
            subprocess.run(
                [sys.executable, "-c", ONE, json.dumps(dims)], capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        r = json.loads(out)
        rows.append((shape, dims[0] * dims[1] * dims[2], r["s"], r["mb"]))
    base = rows[0][2]
    sys.stdout.write("| shape | voxels | seconds | x the first | + MB |\n| --- | --- | --- | --- | --- |\n")
    for shape, voxels, s, mb in rows:
        sys.stdout.write(f"| {shape} | {voxels:,} | {s:.2f} | {s / base:.1f} | {mb:.0f} |\n")


if __name__ == "__main__":
    main()

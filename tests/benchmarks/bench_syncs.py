"""Host synchronisations and aten ops per evaluation of the style engine's two optimisers.

    python tests/benchmarks/bench_syncs.py [--size 64] [--steps 20] [--history 50]

On a GPU every read of a device value by the host (``.item()``, ``float(tensor)``, a tensor used as
a Python bool) stalls the launch queue until the GPU catches up: a launch-bound loop must have none.
This counts them on any device, through a dispatch mode that sees every aten op: Adam's loop has
none per step (losses are read on reporting steps only; its one read per step is of the optimiser's
step counter, a CPU tensor); torch's L-BFGS with the strong-Wolfe line
search reads the loss, the directional derivative and its convergence tests on the host at every
evaluation. The table is what README quotes for issue 19 item 7.
"""

from __future__ import annotations

import argparse
import traceback
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nstcam import StyleTransfer
from nstcam.image import load_image

SYNC_OPS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.equal.default,
}


class Count(TorchDispatchMode):
    """Counts aten ops and host reads; a read of Adam's step counter is apart: torch.optim.Adam keeps
    it on the CPU even for a GPU image (``capturable=False``), so on a GPU it waits for nothing."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNC_OPS:
            where = "".join(traceback.format_stack(limit=8))
            self.ops["counter" if "optim/adam.py" in where else "sync"] += 1
        else:
            self.ops["op"] += 1
        return func(*args, **(kwargs or {}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--history", type=int, default=50)
    a = p.parse_args()
    st = StyleTransfer("random", device="cpu")
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples"
    content, style = load_image(samples / "chelsea.png"), load_image(samples / "brick.png")
    print(f"torch {torch.__version__}, {a.size} px, {a.steps} evaluations, L-BFGS history {a.history}\n")
    print("| optimiser | device syncs per evaluation | host-side counter reads | aten ops per evaluation |")
    print("| --- | --- | --- | --- |")
    for optimizer in ("adam", "lbfgs"):
        kw = dict(size=a.size, optimizer=optimizer, seed=0, history_size=a.history, progress_every=10**6)
        st.stylize(content, style, steps=2, **kw)  # warm-up
        counts = []
        for steps in (a.steps, 2 * a.steps):  # the difference cancels the set-up (targets, the image)
            mode = Count()
            with mode:
                st.stylize(content, style, steps=steps, **kw)
            counts.append(mode.ops)
        per = {k: (counts[1][k] - counts[0][k]) / a.steps for k in ("sync", "counter", "op")}
        print(f"| {optimizer} | {per['sync']:.1f} | {per['counter']:.1f} | {per['op']:.0f} |")


if __name__ == "__main__":
    main()

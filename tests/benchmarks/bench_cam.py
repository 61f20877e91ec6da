"""Grad-CAM benchmark: nstcam vs pytorch-grad-cam (optional, benchmark-only) vs a plain forward.

    pip install grad-cam && python tests/benchmarks/bench_cam.py [--device cuda] [--weights imagenet]

Same model object, same 224 px input, same target class, each arch's default layer (vit_b_16: the last
block's ln_1, tokens; swin_t: the last norm2, channels-last; pytorch-grad-cam gets the matching
``reshape_transform``); latency is the median of ``--repeat`` runs
of one image, throughput is images/s on a batch of ``--batch``. "nstcam" is the engine's default:
on CUDA that replays captured CUDA graphs, and a second table compares it with the eager pass
(``cuda_graphs=False``) at batch 1, after checking that graphs were really captured and replayed
and that their maps equal the eager ones. Without pytorch-grad-cam its columns say so. nstcam is
timed before pytorch-grad-cam's object exists: its hooks (``activation.cpu()`` on the layer) would
otherwise run inside nstcam's capture and force the eager path.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import torch
from _timing import median_seconds

from nstcam import GradCAM, build_model

GRAPH_TOLERANCE = 1e-5  # graphed maps against eager ones, max |difference|


def timeit(fn, repeat, device):
    return median_seconds(fn, device, repeat, warmups=2)  # the second: after a CUDA graph's capture


def pgc_available() -> bool:
    try:
        import pytorch_grad_cam  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class CamRow:
    arch: str
    ms: dict = field(default_factory=dict)  # fwd1, ours1, pgc1 (latency); fwdb, oursb, pgcb (batch s)
    agree: float | None = None  # max |nstcam - pgc| map difference
    eager_ms: float | None = None  # CUDA: nstcam with cuda_graphs=False, batch 1
    graph_diff: float | None = None  # CUDA: max |graph - eager|
    graphs: dict = field(default_factory=dict)  # CUDA: GradCAM.graph_stats after the timings


def measure(arch, device, weights, batch, repeat, size=224):
    """One model's row: forward, nstcam and (where installed) pytorch-grad-cam, batch 1 and ``batch``."""
    model = build_model(arch, weights).to(device).eval()
    ours = GradCAM(model=model, device=device)  # the arch's default layer (layer4, a ViT's last ln_1...)
    size = ours.square or size  # a ViT takes its own square
    torch.manual_seed(0)
    x1 = torch.randn(1, 3, size, size, device=device)
    xb = torch.randn(batch, 3, size, size, device=device)
    row = CamRow(arch)

    def fwd(x):
        with torch.no_grad():
            model(x)

    rb = max(2, repeat // 3)
    row.ms["fwd1"] = timeit(lambda: fwd(x1), repeat, device)
    row.ms["ours1"] = timeit(lambda: ours.compute(x1, targets=281), repeat, device)
    row.ms["fwdb"] = timeit(lambda: fwd(xb), rb, device)
    row.ms["oursb"] = timeit(lambda: ours.compute(xb, targets=281), rb, device)
    m_ours = ours.compute(x1, targets=281)
    if device.type == "cuda":
        eager = GradCAM(model=model, device=device, cuda_graphs=False)
        row.eager_ms = timeit(lambda: eager.compute(x1, targets=281), repeat, device)
        row.graph_diff = float((eager.compute(x1, targets=281) - m_ours).abs().max())
        row.graphs = ours.graph_stats
    if pgc_available():
        from pytorch_grad_cam import GradCAM as PGC
        from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

        layer = dict(model.named_modules())[ours.target_layer]
        theirs = PGC(model=model, target_layers=[layer], reshape_transform=reshape_for(ours.layout, size))
        try:
            t1, tb = [ClassifierOutputTarget(281)], [ClassifierOutputTarget(281)] * batch
            row.ms["pgc1"] = timeit(lambda: theirs(input_tensor=x1, targets=t1), repeat, device)
            row.ms["pgcb"] = timeit(lambda: theirs(input_tensor=xb, targets=tb), rb, device)
            row.agree = float(abs(m_ours[0].cpu().numpy() - theirs(input_tensor=x1, targets=t1)[0]).max())
        finally:
            theirs.activations_and_grads.release()
    return row


def reshape_for(layout, size):
    """pytorch-grad-cam's ``reshape_transform`` for a layout (what its users write by hand)."""
    from nstcam.layouts import to_nchw

    if layout in (None, "nchw"):
        return None
    return lambda t: to_nchw(t, layout, size, size)


def graph_problems(row: CamRow) -> list[str]:
    """What is wrong with a CUDA row's graph path (empty when the graphs ran and agree)."""
    problems = []
    if row.graphs.get("captures", 0) < 1 or row.graphs.get("replays", 0) < 1:
        problems.append(
            f"{row.arch}: no CUDA graph captured or replayed ({row.graphs}): the 'graph' column timed eager"
        )
    if row.graph_diff is not None and not row.graph_diff <= GRAPH_TOLERANCE:
        problems.append(
            f"{row.arch}: graphed maps differ from eager by {row.graph_diff:.3g} > {GRAPH_TOLERANCE}"
        )
    return problems


def tables(rows: list[CamRow], batch: int) -> str:
    """The README's two Grad-CAM tables as markdown."""
    na = "not installed"

    def pgc(key, fmt):
        return lambda r: fmt(r.ms[key]) if key in r.ms else na

    lines = [
        "| model | forward (no grad) ms | nstcam ms | pytorch-grad-cam ms | nstcam / pgc | nstcam / forward "
        f"| batch {batch}: forward img/s | nstcam img/s | pgc img/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m = r.ms
        ratio = f"{m['ours1'] / m['pgc1']:.2f}x" if "pgc1" in m else na
        lines.append(
            f"| {r.arch} | {m['fwd1'] * 1e3:.1f} | {m['ours1'] * 1e3:.1f} | {pgc('pgc1', lambda v: f'{v * 1e3:.1f}')(r)} "
            f"| {ratio} | {m['ours1'] / m['fwd1']:.2f}x | {batch / m['fwdb']:.1f} | {batch / m['oursb']:.1f} "
            f"| {pgc('pgcb', lambda v: f'{batch / v:.1f}')(r)} |"
        )
    agree = [r.agree for r in rows if r.agree is not None]
    if agree:
        lines.append(
            f"\nThe maps agree with pytorch-grad-cam's to {max(agree):.2g} (max absolute difference)."
        )
    graph = [r for r in rows if r.eager_ms is not None]
    if graph:
        lines += [
            "",
            "| model, batch 1 | forward (no grad) ms | nstcam eager ms | nstcam CUDA graph ms "
            "| graph / forward | max |graph - eager| | captures / replays |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in graph:
            lines.append(
                f"| {r.arch} | {r.ms['fwd1'] * 1e3:.2f} | {r.eager_ms * 1e3:.2f} | {r.ms['ours1'] * 1e3:.2f} | "
                f"{r.ms['ours1'] / r.ms['fwd1']:.2f}x | {r.graph_diff:.2g} | "
                f"{r.graphs.get('captures', 0)} / {r.graphs.get('replays', 0)} |"
            )
    else:
        lines.append("\n(CUDA-graph rows: run with --device cuda)")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--archs", default="resnet18,resnet50,vit_b_16,swin_t")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--found", action="store_true", help="detectors and segmenters (bench_cam_found.py)")
    a = p.parse_args()
    if a.found:
        from bench_cam_found import main as found

        return found(["--device", a.device, "--weights", a.weights, "--repeat", str(min(a.repeat, 5))])
    device = torch.device(a.device)
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    pgc = "installed" if pgc_available() else "not installed (pip install grad-cam adds its columns)"
    print(
        f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}, {a.size} px, pytorch-grad-cam {pgc}"
    )
    rows = [measure(arch, device, a.weights, a.batch, a.repeat, a.size) for arch in a.archs.split(",")]
    print("\n" + tables(rows, a.batch))
    problems = [p for r in rows if r.eager_ms is not None for p in graph_problems(r)]
    for problem in problems:
        print(f"FAILED: {problem}")
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()

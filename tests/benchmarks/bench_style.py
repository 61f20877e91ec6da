"""Style-transfer benchmark: nstcam against a PyTorch-tutorial-style reference, in the same run.

The reference is written the way the PyTorch NST tutorial does it: a rebuilt ``nn.Sequential`` of
VGG16_bn with loss modules inserted after the same layers, trimmed after the last one, optimised with
Adam. It uses the same loss code as nstcam (``nstcam.style._losses``), and one judge scores both.

    python tests/benchmarks/bench_style.py                 # CPU (and CUDA when present)
    python tests/benchmarks/bench_style.py --weights imagenet --device cuda --sizes 512,2048

Reports per-step cost and peak memory at each size, and time to quality: the wall time nstcam needs
to reach the total loss the reference reaches after 300 Adam steps.

    python tests/benchmarks/bench_style.py --tile 512 [--tile-sizes 1024,2048,4096] [--device cuda]

prints only the tiled-versus-untiled table instead: peak memory (and the calibrated estimate),
wall time and windows per output size, each size in a fresh process (``tests/_tile_probe.py``,
which resets the peak before each run; the tiled run in a process of its own under
``--gpu-limit-gb``), ``--tile-steps`` Adam evaluations per window at one scale. An untiled run whose estimate exceeds
the free memory is not started. On CUDA 8192 px is added and ``--gpu-limit-gb 16`` emulates a
16 GB card.

    python tests/benchmarks/bench_style.py --tile-quality 640

prints the tiled run's quality against the untiled one at that size (tile a quarter of it, 4 Adam
steps, one fresh process): peak memory, the independent judge's Gram distance and the largest
seam, each beside the bar ``tests/test_tiles.py`` held at 640 px before issue 74 moved the figure
here (the test runs 384 px, where the windows are small next to the VGG's receptive field).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from PIL import Image
from torch import nn

from nstcam import StyleTransfer, build_model, load_image
from nstcam.image import image_to_tensor, normalize, resize_long_side
from nstcam.style import DEFAULT_CONTENT_LAYERS, DEFAULT_STYLE_LAYERS, Cancelled
from nstcam.style.losses.gram import gram, style_loss
from nstcam.style.losses.terms import content_loss, total_variation
from nstcam.style.vgg import VGG_LAYERS

SAMPLES = str(Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples")
CONTENT, STYLE = f"{SAMPLES}/chelsea.png", f"{SAMPLES}/hubble_deep_field.jpg"
W = dict(style_weight=50.0, content_weight=1.0, tv_weight=5.0)


# -- the reference, tutorial style --------------------------------------------------------------
class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()
        self.loss = torch.zeros(())

    def forward(self, x):
        self.loss = content_loss(x, self.target)
        return x


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram(target_feature).detach()
        self.g = None

    def forward(self, x):
        self.g = gram(x)
        return x


class Normalization(nn.Module):
    def forward(self, x):
        return normalize(x)


def build_reference(vgg, content, style):
    """Tutorial-style model: copy layers one by one, insert loss modules after the chosen ReLUs."""
    idx_to_name = {v: k for k, v in VGG_LAYERS.items()}
    model = nn.Sequential()
    model.add_module("normalize", Normalization())
    content_losses, style_losses = [], {}
    deepest = max(VGG_LAYERS[n] for n in (*DEFAULT_STYLE_LAYERS, *DEFAULT_CONTENT_LAYERS))
    for i, layer in enumerate(vgg.features[: deepest + 1]):
        layer = nn.ReLU(inplace=False) if isinstance(layer, nn.ReLU) else layer
        model.add_module(str(i), layer)
        name = idx_to_name.get(i)
        if name in DEFAULT_CONTENT_LAYERS:
            cl = ContentLoss(model(content))
            model.add_module(f"content_{name}", cl)
            content_losses.append(cl)
        if name in DEFAULT_STYLE_LAYERS:
            sl = StyleLoss(model(style))
            model.add_module(f"style_{name}", sl)
            style_losses[name] = sl
    return model.eval().requires_grad_(False), content_losses, style_losses


def run_reference(vgg, c, s, steps, on_step=None):
    model, cls, sls = build_reference(vgg, c, s)
    x = c.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=0.02)
    weights = dict.fromkeys(DEFAULT_STYLE_LAYERS, 1.0)
    for k in range(steps):
        with torch.no_grad():
            x.clamp_(0, 1)
        opt.zero_grad()
        model(x)
        sl = style_loss({n: m.g for n, m in sls.items()}, {n: m.target for n, m in sls.items()}, weights)
        loss = (
            W["content_weight"] * cls[0].loss + W["style_weight"] * sl + W["tv_weight"] * total_variation(x)
        )
        loss.backward()
        opt.step()
        if on_step:
            on_step(k)
    with torch.no_grad():
        x.clamp_(0, 1)
    return x.detach()


# -- the judge ------------------------------------------------------------------------------------
class Judge:
    """Scores an image with nstcam's loss code against fixed targets (unfolded VGG16_bn)."""

    def __init__(self, vgg, c, s):
        self.model, self.cls, self.sls = build_reference(vgg, c, s)

    @torch.no_grad()
    def __call__(self, x):
        self.model(x.clamp(0, 1))
        weights = dict.fromkeys(DEFAULT_STYLE_LAYERS, 1.0)
        sl = style_loss(
            {n: m.g for n, m in self.sls.items()}, {n: m.target for n, m in self.sls.items()}, weights
        )
        return float(
            W["content_weight"] * self.cls[0].loss
            + W["style_weight"] * sl
            + W["tv_weight"] * total_variation(x.clamp(0, 1))
        )


def pil_images(size):
    """Content at ``size`` long side, style resized to exactly the content's size (as the tutorial does)."""
    c = resize_long_side(load_image(CONTENT), size)
    return c, load_image(STYLE).resize(c.size, Image.Resampling.LANCZOS)


def images(size, device):
    c, s = pil_images(size)
    return image_to_tensor(c, device), image_to_tensor(s, device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _runner(impl, vgg, size, device):
    c, s = images(size, device)
    cimg, simg = pil_images(size)
    if impl == "nstcam":
        st = StyleTransfer(model=vgg, device=device)
        return lambda n: st.stylize(cimg, simg, size=size, steps=n, scales=[size], **W)
    return lambda n: run_reference(vgg, c, s, n)


def peak_memory(impl, size, steps, device, weights):
    """Peak memory of ``steps`` steps in MiB (CUDA: max allocated; CPU: growth of this fresh process's
    peak RSS, so run it in a child process)."""
    vgg = build_model("vgg16_bn", weights).to(device)
    run = _runner(impl, vgg, size, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    run(steps)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base


def per_step_times(size, steps, device, weights, repeats=3):
    """Marginal seconds per step of each implementation: (time of 2*steps - time of steps) / steps,
    so set-up cancels out; the two alternate in one process and the median of ``repeats`` is kept."""
    vgg = build_model("vgg16_bn", weights).to(device)
    runs = {impl: _runner(impl, vgg, size, device) for impl in ("reference", "nstcam")}
    for run in runs.values():
        run(2)  # warm-up
    out = {impl: [] for impl in runs}
    for _ in range(repeats):
        for impl, run in runs.items():
            t = {}
            for n in (steps, 2 * steps):
                sync(device)
                t0 = time.perf_counter()
                run(n)
                sync(device)
                t[n] = time.perf_counter() - t0
            out[impl].append((t[2 * steps] - t[steps]) / steps)
    return {impl: statistics.median(v) for impl, v in out.items()}


def time_to_quality(size, device, weights, ref_steps, scales):
    vgg = build_model("vgg16_bn", weights).to(device)
    c, s = images(size, device)
    judge = Judge(vgg, c, s)
    sync(device)
    t = time.perf_counter()
    ref = run_reference(vgg, c, s, ref_steps)
    sync(device)
    t_ref = time.perf_counter() - t
    target = judge(ref)

    st = StyleTransfer(model=vgg, device=device)
    cimg, simg = pil_images(size)
    for side in scales:  # warm-up at every timed size: on CUDA each compiles here, not in the timing
        st.stylize(cimg, simg, size=side, steps=2, scales=[side])
    final = len(scales) - 1
    reached = {}

    def stop_when_there(info):
        if info.scale == final and info.losses["total"] <= target:
            reached["step"] = info.step
            return False
        return None

    sync(device)
    t = time.perf_counter()
    try:
        img = st.stylize(
            cimg,
            simg,
            size=size,
            scales=scales,
            steps=[max(1, ref_steps // 3)] * (len(scales) - 1) + [ref_steps],
            progress=stop_when_there,
            **W,
        )
    except Cancelled as e:
        img = e.image
    sync(device)
    t_ours = time.perf_counter() - t
    ours = judge(image_to_tensor(img, device))
    return dict(
        size=size,
        ref_steps=ref_steps,
        ref_seconds=t_ref,
        ref_loss=target,
        scales=scales,
        ours_seconds=t_ours,
        ours_loss=ours,
        ours_steps=reached.get("step"),
        reached=bool(reached),
        speedup=t_ref / t_ours,
    )


def wall_rows(device, weights, size, steps, batch, batch_steps):
    """The GPU table: wall time of ``size`` px x ``steps`` steps for both optimisers, fp32 and bf16,
    compiled (compilation timed apart, by ``warmup``) and eager; and batched throughput."""
    import tempfile

    vgg = build_model("vgg16_bn", weights).to(device)
    cimg, simg = pil_images(size)
    c, s = images(size, device)
    judge = Judge(vgg, c, s)
    rows = []
    for compiled in (False, True):
        for amp in (False, True):
            st = StyleTransfer(model=vgg, device=device, amp=amp, compile=compiled)
            w, h = cimg.size
            warm = st.warmup(w, h)
            for optimizer in ("adam", "lbfgs"):
                sync(device)
                t = time.perf_counter()
                img = st.stylize(cimg, simg, size=size, steps=steps, scales=[size], optimizer=optimizer, **W)
                sync(device)
                rows.append(
                    dict(
                        compiled=compiled,
                        amp=amp,
                        optimizer=optimizer,
                        seconds=time.perf_counter() - t,
                        compile_s=warm,
                        loss=judge(image_to_tensor(img, device)),
                    )
                )
    st = StyleTransfer(model=vgg, device=device)
    with tempfile.TemporaryDirectory() as d:
        for i in range(batch):
            cimg.save(f"{d}/c{i}.png")
        through = {}
        for bs in (1, batch):
            out = f"{d}/out{bs}"
            st.stylize_batch(
                d,
                simg,
                out,
                size=size,
                steps=batch_steps,
                optimizer="adam",
                batch_size=bs,
                progress_bar=False,
                **W,
            )  # warm-up (and compilation)
            sync(device)
            t = time.perf_counter()
            st.stylize_batch(d, simg, out, size=size, steps=batch_steps, optimizer="adam", batch_size=bs,
                             progress_bar=False, overwrite=True, **W)  # fmt: skip
            sync(device)
            through[bs] = batch / (time.perf_counter() - t)
    return rows, through


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--sizes", default="256,512")
    p.add_argument("--steps", type=int, default=5, help="timed steps per size (per-step cost)")
    p.add_argument("--quality-size", type=int, default=None, help="default: 256 on CPU, 512 on GPU")
    p.add_argument("--ref-steps", type=int, default=300)
    p.add_argument("--json", help="also write the results here")
    p.add_argument(
        "--wall",
        action="store_true",
        help="also time whole runs (compiled/eager, fp32/bf16, both optimisers) and batched throughput; "
        "on by default with --device cuda",
    )
    p.add_argument("--wall-size", type=int, default=512)
    p.add_argument("--wall-steps", type=int, default=500)
    p.add_argument("--batch", type=int, default=8, help="images per step in the throughput rows")
    p.add_argument("--batch-steps", type=int, default=300)
    p.add_argument("--_one", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--tile", type=int, help="print the tiled-vs-untiled table for this tile size only")
    p.add_argument("--tile-sizes", help="default 1024,2048,4096 (and 8192 on CUDA)")
    p.add_argument("--tile-steps", type=int, default=2)
    p.add_argument("--gpu-limit-gb", type=float, help="cap the GPU memory of the tiled runs (CUDA)")
    p.add_argument("--tile-quality", type=int, metavar="SIZE", help="only the tiled-vs-untiled quality row")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="print the memory estimate against measured peaks of untiled runs (256-768 px, both optimisers)",
    )
    p.add_argument(
        "--losses", action="store_true", help="only the time-to-quality race, one row per style loss"
    )
    p.add_argument("--regions", action="store_true", help="only the style-per-region table")
    p.add_argument("--region-size", type=int, default=128)
    p.add_argument("--region-steps", type=int, default=60)
    p.add_argument(
        "--gallery", type=Path, metavar="DIR", help="only the gallery: content x style x loss, one PNG"
    )
    p.add_argument("--gallery-size", type=int, default=256)
    p.add_argument("--gallery-steps", type=int, default=100)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    torch.manual_seed(0)
    if a.losses or a.regions or a.gallery:
        return quality_tables(a, device)
    if a.weights != "random":
        import _style_quality

        if _style_quality.engine_or_advice(a.weights, device) is None:
            return 1
    if a.tile_quality:
        tile_quality(a.tile_quality)
        return
    if a.tile:
        tile_table(a, device)
        return
    if a.calibrate:
        calibration_table(a)
        return
    if a._one:  # child process: one peak-memory measurement
        print(json.dumps({"peak": peak_memory(a._one[0], int(a._one[1]), a.steps, device, a.weights)}))
        return

    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}")
    rows = []
    for size in [int(v) for v in a.sizes.split(",")]:
        res = {}
        for impl in ("reference", "nstcam"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--device",
                    a.device,
                    "--weights",
                    a.weights,
                    "--steps",
                    str(a.steps),
                    "--_one",
                    impl,
                    str(size),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            res[impl] = json.loads(out.stdout.strip().splitlines()[-1])
        for impl, dt in per_step_times(size, a.steps, device, a.weights).items():
            res[impl]["dt"] = dt
        rows.append((size, res))
    print("\n| size | reference s/step | nstcam s/step | ratio | reference peak MiB | nstcam peak MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size, r in rows:
        print(
            f"| {size} | {r['reference']['dt']:.3f} | {r['nstcam']['dt']:.3f} | "
            f"{r['reference']['dt'] / r['nstcam']['dt']:.2f}x | {r['reference']['peak']:.0f} | "
            f"{r['nstcam']['peak']:.0f} |"
        )

    qsize = a.quality_size or (512 if device.type == "cuda" else 256)
    scales = [qsize // 2, qsize]
    q = time_to_quality(qsize, device, a.weights, a.ref_steps, scales)
    print(
        f"\ntime to quality at {qsize} px: reference (Adam, {a.ref_steps} steps) {q['ref_seconds']:.1f} s "
        f"-> loss {q['ref_loss']:.4f}; nstcam (L-BFGS, scales {scales}) reached "
        f"{q['ours_loss']:.4f} in {q['ours_seconds']:.1f} s ({q['ours_steps']} steps): "
        f"{q['speedup']:.1f}x faster"
        if q["reached"]
        else "\nnstcam did not reach the reference's loss"
    )
    wall = None
    if a.wall or device.type == "cuda":
        wall = wall_rows(device, a.weights, a.wall_size, a.wall_steps, a.batch, a.batch_steps)
        print(f"\n{a.wall_size} px x {a.wall_steps} steps, whole runs (compilation timed apart):\n")
        print("| step | precision | optimiser | seconds | compile s | judge loss |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in wall[0]:
            kind = "compiled" if r["compiled"] else "eager"
            prec = "bf16" if r["amp"] and device.type == "cuda" else "fp32"
            print(
                f"| {kind} | {prec} | {r['optimizer']} | {r['seconds']:.2f} | {r['compile_s']:.1f} | {r['loss']:.4f} |"
            )
        print(f"\nbatched Adam, {a.wall_size} px x {a.batch_steps} steps, {a.batch} images:\n")
        print("| batch_size | images/s |")
        print("| --- | --- |")
        for bs, v in wall[1].items():
            print(f"| {bs} | {v:.3f} |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"per_step": rows, "quality": q, "wall": wall}, fh, indent=2, default=str)


def quality_tables(a, device) -> int:
    """``--losses``, ``--regions`` and ``--gallery`` (``_style_quality.py``)."""
    import _style_quality as q

    st = q.engine_or_advice(a.weights, device)
    if st is None:
        return 1
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}")
    if a.losses:
        qsize = a.quality_size or (512 if device.type == "cuda" else 256)
        rows = q.loss_race(st, a.weights, qsize, a.ref_steps, device)
        print(f"\ntime to quality per loss at {qsize} px: the judge's distance (second VGG16_bn) of the "
              f"reference (Gram, Adam, {a.ref_steps} steps, {rows[0]['ref_s']:.1f} s), reached by each loss "
              "(L-BFGS, two scales):\n")  # fmt: skip
        print(
            "| style_loss | judge distance | reference | nstcam s | steps | speed-up |\n| --- | --- | --- | --- | --- | --- |"
        )
        for r in rows:
            got = (f"{r['s']:.1f} | {r['steps']} | {r['ref_s'] / r['s']:.1f}x" if r["reached"]
                   else f"not reached in {r['s']:.1f} s | | ")  # fmt: skip
            print(f"| {r['loss']} | {r['metric']} | {r['ref']:.4f} | {got} |")
    if a.regions:
        r = q.region_rows(st, a.weights, a.region_size, a.region_steps, device)
        print(f"\na style per region at {a.region_size} px, {a.region_steps} steps (L-BFGS): brick left, "
              "hubble right; judge distances of each half to each style (lower is closer):\n")  # fmt: skip
        print("| half | to brick (w2) | to hubble (w2) | to brick (sliced) | to hubble (sliced) | nearer |")
        print("| --- | --- | --- | --- | --- | --- |")
        for half, own in (("left", "brick"), ("right", "hubble")):
            b, h = r["dist"][(half, "brick")], r["dist"][(half, "hubble")]
            near = "brick" if b["w2"] < h["w2"] and b["sliced"] < h["sliced"] else "hubble" if (
                h["w2"] < b["w2"] and h["sliced"] < b["sliced"]) else "mixed"  # fmt: skip
            print(
                f"| {half} ({own}) | {b['w2']:.4f} | {h['w2']:.4f} | {b['sliced']:.4f} | {h['sliced']:.4f} | {near} |"
            )
        print(f"\nright mask of zeros: the right half moved {r['zero_right']:.2f} grey levels from the content "
              f"(styled everywhere: {r['styled_right']:.2f})")  # fmt: skip
        print("\ncost per step (Adam, eager, marginal): one style against two styles in two regions\n")
        print("| size | one style s | two regions s | ratio |\n| --- | --- | --- | --- |")
        for c in q.region_cost(st):
            print(f"| {c['size']} | {c['one']:.3f} | {c['two']:.3f} | {c['two'] / c['one']:.2f} |")
    if a.gallery:
        path = q.gallery(st, a.gallery, a.gallery_size, a.gallery_steps)
        print(f"\ngallery: {path}" + (" (RANDOM weights: not meaningful)" if st.weights.is_random else ""))
    return 0


def _probe(args):
    probe = Path(__file__).resolve().parent.parent / "_tile_probe.py"
    out = subprocess.run([sys.executable, str(probe), *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tile_quality(size: int) -> None:
    """One tiled and one untiled run at ``size`` (tile size / 4, 4 Adam steps): the ratios and their bars."""
    r = _probe([str(size), str(size // 4), "4"])
    print(
        f"CPU, torch {torch.__version__}, random weights, chelsea with brick, {size} px, tile {size // 4}, 4 steps"
    )
    print("\n| measure | tiled | untiled | ratio or value | bar |\n| --- | --- | --- | --- | --- |")
    mib = 2**20
    print(
        f"| peak MiB | {r['tiled_peak'] / mib:.0f} | {r['untiled_peak'] / mib:.0f} | "
        f"{r['tiled_peak'] / r['untiled_peak']:.2f} | <= 0.5 |"
    )
    print(
        f"| judge's Gram distance | {r['tiled_distance']:.3f} | {r['untiled_distance']:.3f} | "
        f"{r['tiled_distance'] / r['untiled_distance']:.2f} | <= 1.5 |"
    )
    print(f"| largest seam | {max(r['tiled_seams']):.2f} | {max(r['untiled_seams']):.2f} | | <= 2.5 |")
    for kind in ("tiled", "untiled"):
        err = (r[f"{kind}_estimate"] - r[f"{kind}_peak"]) / r[f"{kind}_peak"]
        print(f"| {kind} estimate MiB | {r[f'{kind}_estimate'] / mib:.0f} | | {err:+.1%} off | within 60 % |")


def calibration_table(a):
    """Measured peak (above the RSS, or CUDA memory, before the run) against the estimate."""
    print(f"device: {a.device}, torch {torch.__version__}, random weights, one scale, fresh process per row")
    print("\n| size | optimiser | steps | peak MiB | estimate MiB | estimate error |")
    print("| --- | --- | --- | --- | --- | --- |")
    runs = [(s, "adam", 2) for s in (256, 384, 512, 640, 768)] + [(256, "lbfgs", 3), (512, "lbfgs", 3)]
    for size, opt, steps in runs:
        extra = ["--lbfgs"] if opt == "lbfgs" else []
        r = _probe([str(size), "0", str(steps), "--no-judge", "--device", a.device, *extra])
        peak, est = r["untiled_peak"], r["untiled_estimate"]
        print(
            f"| {size} | {opt} | {steps} | {peak / 2**20:.0f} | {est / 2**20:.0f} | {(est - peak) / peak * 100:+.1f} % |"
        )


def tile_table(a, device):
    """Peak memory and wall time against output size, tiled and untiled (see the module docstring)."""
    from nstcam._device import available_memory

    probe = Path(__file__).resolve().parent.parent / "_tile_probe.py"
    default = "1024,2048,4096,8192" if device.type == "cuda" else "1024,2048,4096"
    sizes = [int(v) for v in (a.tile_sizes or default).split(",")]
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    free = available_memory(device)
    limit = f", tiled runs capped at {a.gpu_limit_gb:g} GB" if a.gpu_limit_gb else ""
    print(
        f"device: {device} ({hw}), torch {torch.__version__}, random weights, Adam, "
        f"{a.tile_steps} evaluations per window at one scale, tile {a.tile} px{limit}; "
        f"free memory {free / 2**30:.1f} GiB"
    )
    st = StyleTransfer("random", device=device)
    print("\n| output | run | windows | peak MiB | estimate MiB | wall s | s per evaluation |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    common = ["--no-judge", "--device", a.device]
    for size in sizes:
        w, h = size, round(size * 300 / 451)  # chelsea's aspect
        need = st.estimate_memory(w, h, optimizer="adam", steps=a.tile_steps)
        fits = free is None or need < 0.8 * free
        if fits and not a.gpu_limit_gb:  # both in one process: the probe resets the peak before each
            runs = [(("tiled", "untiled"), [str(size), str(a.tile), str(a.tile_steps), *common])]
        else:  # the cap is the tiled run's alone
            tiled = [str(size), str(a.tile), str(a.tile_steps), "--no-untiled", *common]
            if a.gpu_limit_gb:
                tiled.extend(["--gpu-limit-gb", str(a.gpu_limit_gb)])
            runs = [(("tiled",), tiled)]
            if fits:
                runs.append((("untiled",), [str(size), "0", str(a.tile_steps), *common]))
        for kinds, args in runs:
            try:
                out = subprocess.run(
                    [sys.executable, str(probe), *args],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=3600,
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
            except subprocess.CalledProcessError as e:
                for kind in kinds:
                    print(f"| {w}x{h} | {kind} | failed: {e.stderr.strip().splitlines()[-1][:80]} | | | | |")
                continue
            for kind in kinds:
                windows = r.get("windows", 1) if kind == "tiled" else 1
                evals = a.tile_steps * windows
                print(
                    f"| {w}x{h} | {kind} | {windows} | {r[f'{kind}_peak'] / 2**20:.0f} | "
                    f"{r[f'{kind}_estimate'] / 2**20:.0f} | {r[f'{kind}_s']:.1f} | {r[f'{kind}_s'] / evals:.2f} |"
                )
        if not fits:
            print(f"| {w}x{h} | untiled | 1 | not run: needs about {need / 2**30:.1f} GiB | | | |")


if __name__ == "__main__":
    sys.exit(main())

"""The style losses' quality benchmarks that ``bench_style.py`` runs: the race to a judge's
distance per loss (``--losses``), a style per region (``--regions``) and the gallery
(``--gallery DIR``). The judge is a second VGG16_bn (``bench_style_dist.Judge``, seed 1)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from bench_style_dist import Judge, _load
from PIL import Image, ImageDraw

from nstcam import StyleTransfer, build_model
from nstcam.image import image_to_tensor, long_side_size
from nstcam.style import Cancelled
from nstcam.weights import WeightsUnavailableError

LOSSES = ("gram", "wasserstein", "sliced")
METRIC = {"gram": "gram", "wasserstein": "w2", "sliced": "sliced"}  # each loss raced on its own kind


def engine_or_advice(weights: str, device: torch.device) -> StyleTransfer | None:
    """The engine, or None after printing what a run with ``weights`` needs (offline: where the
    file comes from and the command that fetches it)."""
    try:
        return StyleTransfer(weights, device=device)
    except WeightsUnavailableError as e:
        print(f"--weights {weights} needs VGG16_bn's ImageNet weights (528 MB), not on this machine:\n  {e}")
        print("Then rerun this command: the same tables and gallery, measured with real features.")
        return None


def loss_race(
    st: StyleTransfer, weights: str, size: int, ref_steps: int, device: torch.device, every: int = 5
):
    """Time to quality per loss: the tutorial reference (Gram, Adam, ``ref_steps``) sets the judge's
    distances; each loss (L-BFGS, scales size/2 and size) runs until the judge's distance of its
    own kind is at or below the reference's, checked every ``every`` steps of the last scale (the
    judge's own time is not counted)."""
    from bench_style import images, pil_images, run_reference, sync

    vgg = build_model("vgg16_bn", weights).to(device)
    c, s = images(size, device)
    judge = Judge(weights, s, device)
    sync(device)
    t = time.perf_counter()
    ref = judge(run_reference(vgg, c, s, ref_steps))
    ref_s = time.perf_counter() - t
    cimg, simg = pil_images(size)
    scales = [size // 2, size]
    rows = []
    for loss in LOSSES:
        st.stylize(cimg, simg, size=size, steps=2, scales=[size], style_loss=loss, progress_bar=False)  # warm
        spent, seen = [0.0], {}

        def check(info, loss=loss, spent=spent, seen=seen):
            if info.scale == 1 and info.preview is not None:
                t0 = time.perf_counter()
                d = judge(image_to_tensor(info.preview, device))[METRIC[loss]]
                spent[0] += time.perf_counter() - t0
                if d <= ref[METRIC[loss]]:
                    seen.update(step=info.step, d=d)
                    return False
            return None

        t = time.perf_counter()
        try:
            st.stylize(cimg, simg, size=size, scales=scales, steps=[max(1, ref_steps // 3), ref_steps],
                       style_loss=loss, seed=0, progress=check, preview_every=every, progress_bar=False)  # fmt: skip
        except Cancelled:
            pass
        sync(device)
        took = time.perf_counter() - t - spent[0]
        rows.append({"loss": loss, "metric": METRIC[loss], "ref": ref[METRIC[loss]], "ref_s": ref_s,
                     "reached": bool(seen), "s": took, "steps": seen.get("step"), "d": seen.get("d")})  # fmt: skip
    return rows


def _halves(content: Image.Image, size: int) -> tuple[np.ndarray, tuple[int, int]]:
    w, h = long_side_size(content.size, size)
    left = np.zeros((h, w), np.float32)
    left[:, : w // 2] = 1
    return left, (w, h)


def region_rows(st: StyleTransfer, weights: str, size: int, steps: int, device: torch.device) -> dict:
    """chelsea with brick on the left half and hubble on the right: the judge's distance of each
    half (8 px from the edge left out) to each style; a run whose right mask is zeros: how far its
    right half moved from the content (grey levels) against a run styling everything."""
    content, brick, hubble = (
        _load("chelsea.png", 512),
        _load("brick.png", 512),
        _load("hubble_deep_field.jpg", 512),
    )
    left, (w, h) = _halves(content, size)
    kw = dict(size=size, steps=steps, seed=0, progress_bar=False)
    out = image_to_tensor(st.stylize(content, [brick, hubble], style_masks=[left, 1 - left], **kw), device)
    halves = {"left": out[..., : w // 2 - 8], "right": out[..., w // 2 + 8 :]}
    dist = {}
    for name, img in (("brick", brick), ("hubble", hubble)):
        judge = Judge(weights, image_to_tensor(img.resize((w // 2, h)), device), device)
        for half, x in halves.items():
            dist[(half, name)] = judge(x)
    c = np.asarray(content.resize((w, h), Image.Resampling.LANCZOS), np.float32)
    kept = np.asarray(
        st.stylize(content, [brick, hubble], style_masks=[left, np.zeros_like(left)], **kw), np.float32
    )
    everywhere = np.asarray(st.stylize(content, brick, **kw), np.float32)
    return {
        "dist": dist,
        "zero_right": float(np.abs(kept[:, w // 2 + 8 :] - c[:, w // 2 + 8 :]).mean()),
        "styled_right": float(np.abs(everywhere[:, w // 2 + 8 :] - c[:, w // 2 + 8 :]).mean()),
    }


def region_cost(st: StyleTransfer, sizes: tuple[int, ...] = (256, 512), steps: int = 4) -> list[dict]:
    """Marginal seconds per step (Adam, eager): one style everywhere, against two styles each in
    its own half."""
    content, brick, hubble = (
        _load("chelsea.png", 512),
        _load("brick.png", 512),
        _load("hubble_deep_field.jpg", 512),
    )
    rows = []
    for size in sizes:
        left, _ = _halves(content, size)
        runs = {
            "one": ([brick], {}),
            "two": ([brick, hubble], {"style_masks": [left, 1 - left]}),
        }
        r = {"size": size}
        for name, (styles, extra) in runs.items():
            kw = dict(size=size, seed=0, optimizer="adam", progress_bar=False, **extra)
            st.stylize(content, styles, steps=2, **kw)
            times = []
            for n in (1, steps + 1):
                t = time.perf_counter()
                st.stylize(content, styles, steps=n, **kw)
                times.append(time.perf_counter() - t)
            r[name] = (times[1] - times[0]) / steps
        rows.append(r)
    return rows


def gallery(st: StyleTransfer, out_dir: Path, size: int, steps: int) -> Path:
    """One PNG grid: a row per content x style, columns content, style, then each loss's result
    (L-BFGS, ``steps`` at ``size`` px); random weights are written on it."""
    contents = [_load("chelsea.png", 512), _load("astronaut.png", 512)]
    styles = {"hubble": _load("hubble_deep_field.jpg", 512), "brick": _load("brick.png", 512)}
    cell, pad, top = size, 4, 36
    cols = 2 + len(LOSSES)
    rows = [(c, name, s) for c in contents for name, s in styles.items()]
    grid = Image.new("RGB", (cols * (cell + pad), top + len(rows) * (cell + pad)), "white")
    draw = ImageDraw.Draw(grid)
    for j, title in enumerate(["content", "style", *LOSSES]):
        draw.text((j * (cell + pad) + 4, 4), title, fill="black")
    draw.text((4, 20), st.weights.notice, fill="red" if st.weights.is_random else "black")
    for i, (c, _, s) in enumerate(rows):
        outs = [
            st.stylize(c, s, size=size, steps=steps, seed=0, style_loss=loss, progress_bar=False)
            for loss in LOSSES
        ]
        for j, img in enumerate([c, s, *outs]):
            thumb = img.copy()
            thumb.thumbnail((cell, cell))
            grid.paste(thumb, (j * (cell + pad), top + i * (cell + pad)))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gallery.png"
    grid.save(path)
    return path

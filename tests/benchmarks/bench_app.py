"""The web app's handling of big inputs, as a user meets it (handlers called as Gradio calls them).

    python tests/benchmarks/bench_app.py [--device cuda --weights imagenet]

Each case runs in a fresh process and reports wall time and the growth of peak RSS:
- a decompression bomb: a ~170 KB PNG declaring 13000 x 13000 px, refused on upload
  (``SafeImage.preprocess``, what Gradio calls before the handler);
- a 36 MP photo-sized PNG (7360 x 4912, mostly flat, ~120 KB) explained with top-k 10 on
  resnet50 (``cam_handler``: decode, Grad-CAM, overlays and heatmap at display size, files written).
"""

from __future__ import annotations

import argparse
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def png_bomb(side: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z = zlib.compressobj(9)
    row = bytes(side + 1)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def case(name: str, path: str, device: str, weights: str) -> dict:
    import gradio as gr
    from gradio.data_classes import FileData

    from nstcam.app import AppConfig, Models, SafeImage, cam_handler

    if name == "bomb":
        comp = SafeImage(label="x")
        base = peak_mb()
        t = time.perf_counter()
        try:
            comp.preprocess(FileData(path=path, orig_name="bomb.png"))
            outcome = "accepted"
        except gr.Error as e:
            outcome = str(e)
        return {"seconds": time.perf_counter() - t, "peak_mb": peak_mb() - base, "outcome": outcome}
    models = Models(AppConfig(random_weights=weights == "random", device=device))
    models.cam("resnet50", "layer4", "gradcam")  # loaded once per process in the app, not per request
    base = peak_mb()
    t = time.perf_counter()
    gallery, _heat, _ = cam_handler(models, path, "resnet50", "layer4", "gradcam", 10)
    secs = time.perf_counter() - t
    return {
        "seconds": secs,
        "peak_mb": peak_mb() - base,
        "outcome": f"{len(gallery)} overlays of {Image.open(gallery[0][0]).size}",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.case:
        print(json.dumps(case(a.case, a.path, a.device, a.weights)))
        return
    with tempfile.TemporaryDirectory() as d:
        bomb = Path(d) / "bomb.png"
        bomb.write_bytes(png_bomb(13000))
        photo = Path(d) / "photo36mp.png"
        h, w = 4912, 7360
        y, x = np.mgrid[0:h:64, 0:w:64]
        small = ((np.sin(x / 400.0) + np.cos(y / 300.0)) * 60 + 128).astype(np.uint8)
        big = np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.NEAREST))
        Image.fromarray(np.stack([big, big // 2, 255 - big], -1)).save(photo, optimize=True)
        print(
            f"weights {a.weights}, device {a.device}; bomb {bomb.stat().st_size / 1e3:.0f} KB, "
            f"photo {w}x{h} = {w * h / 1e6:.1f} MP, {photo.stat().st_size / 1e3:.0f} KB\n"
        )
        print("| case | seconds | peak RSS growth MB | outcome |")
        print("| --- | --- | --- | --- |")
        for name, path in (("bomb", bomb), ("36 MP Grad-CAM, top-k 10", photo)):
            key = "bomb" if name == "bomb" else "photo"
            out = subprocess.run(
                [sys.executable, __file__, "--case", key, "--path", str(path), "--device", a.device,
                 "--weights", a.weights],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {name} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | {r['outcome'][:80]} |")


if __name__ == "__main__":
    main()

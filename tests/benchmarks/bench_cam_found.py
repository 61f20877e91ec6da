"""Detectors and segmenters: Grad-CAM of a detector's top boxes and of a segmenter's class region,
against one forward pass of the same model and against pytorch-grad-cam for the same maps.

    python tests/benchmarks/bench_cam_found.py [--device cpu] [--repeat 5]
    (also: python tests/benchmarks/bench_cam.py --found)

Detector: fasterrcnn_mobilenet_v3_large_fpn (its own 800 px resize) on a 640x427 photo; nstcam
explains the top 5 detections (``explain(max_detections=5)``: one forward pass, five backward
passes stopped at the FPN's levels). pytorch-grad-cam cannot take Grad-CAM of the FPN's dict (it
records no gradient there), so it gets the FPN's last level block (a tensor) and its
``FasterRCNNBoxScoreTarget``, one call per box: the way its users get 5 Grad-CAM maps.
Segmenter: lraspp_mobilenet_v3_large at 520 px; one class region (``explain(classes=[c])``)
against pytorch-grad-cam's SemanticSegmentationTarget through its tutorial's output wrapper.
Random weights (the detector keeps every score) unless ``--weights imagenet``; median of ``--repeat``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from bench_cam_methods import timeit  # the same median timing as every CAM benchmark
from PIL import Image

from nstcam import GradCAM, build_model

SAMPLE = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples" / "chelsea.png"


def setup(arch: str, weights: str, device: torch.device):
    """(the model, the 640x427 photo, a GradCAM of it, the batch it sees)."""
    model = build_model(arch, weights).to(device)
    img = Image.open(SAMPLE).convert("RGB").resize((640, 427))
    cam = GradCAM(model=model, device=device)
    return model, img, cam, cam.preprocess(img)


def detector_row(weights: str, device: torch.device, repeat: int) -> dict:
    det, img, cam, x = setup("fasterrcnn_mobilenet_v3_large_fpn", weights, device)
    with torch.no_grad():
        out = det(x)[0]
    boxes, labels = out["boxes"][:5], out["labels"][:5]
    row = {"model": "fasterrcnn_mobilenet_v3_large_fpn, top 5 boxes"}
    with torch.no_grad():
        row["forward"] = timeit(lambda: det(x), repeat)
    row["nstcam"] = timeit(lambda: cam.explain(img, score_threshold=0.0, max_detections=5), repeat)
    try:
        import pytorch_grad_cam as pgc
        from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget
    except ImportError:
        return row
    ref = pgc.GradCAM(det, target_layers=[det.backbone.fpn.layer_blocks[-1]])

    def theirs() -> None:
        for b, lab in zip(boxes, labels, strict=True):
            ref(x, targets=[FasterRCNNBoxScoreTarget([int(lab)], b[None])])

    try:
        row["pytorch-grad-cam"] = timeit(theirs, repeat)
    finally:
        ref.activations_and_grads.release()
    return row


def segmenter_row(weights: str, device: torch.device, repeat: int) -> dict:
    seg, img, cam, x = setup("lraspp_mobilenet_v3_large", weights, device)
    with torch.no_grad():
        pred = seg(x)["out"][0].argmax(0)
    c = int(pred.flatten().mode().values)
    row = {"model": f"lraspp_mobilenet_v3_large, class {c}, {x.shape[-1]}x{x.shape[-2]} px"}
    with torch.no_grad():
        row["forward"] = timeit(lambda: seg(x), repeat)
    row["nstcam"] = timeit(lambda: cam.explain(img, classes=[c]), repeat)
    try:
        import pytorch_grad_cam as pgc
        from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget
    except ImportError:
        return row

    class Out(torch.nn.Module):  # its tutorial's wrapper: the "out" tensor
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, t):
            return self.m(t)["out"]

    ref = pgc.GradCAM(Out(seg), target_layers=[seg.backbone["16"]])
    mask = (pred == c).float().cpu().numpy()
    try:
        row["pytorch-grad-cam"] = timeit(
            lambda: ref(x, targets=[SemanticSegmentationTarget(c, mask)]), repeat
        )
    finally:
        ref.activations_and_grads.release()
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| model | forward (s) | nstcam (s) | x forward | pytorch-grad-cam (s) | nstcam / pgc |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        pgc = r.get("pytorch-grad-cam")
        lines.append(
            f"| {r['model']} | {r['forward']:.3f} | {r['nstcam']:.3f} | {r['nstcam'] / r['forward']:.2f} | "
            + (f"{pgc:.3f} | {r['nstcam'] / pgc:.2f} |" if pgc else "not installed | - |")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}")
    print(table([detector_row(a.weights, device, a.repeat), segmenter_row(a.weights, device, a.repeat)]))


if __name__ == "__main__":
    main()

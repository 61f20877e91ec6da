"""Explanations on disk: one naming and one CSV schema for the CLI, the batch and the Ray paths.

For an image ``cat.jpg`` and its rank-``k`` class, say "tabby cat":

- ``cat_cam<k>_tabby-cat.png``: the overlay (heatmap over the image);
- ``cat_cam<k>_tabby-cat_heatmap.png``: the heatmap alone (greyscale, 255 = most relevant), and
  ``..._heatmap.npy`` (float32 in [0, 1]) when asked;
- ``cat_cam.json``: the image's sidecar (written last: it marks the image as done, so reruns
  resume), with one entry per class;
- ``explanations.csv``: one row per image and class, columns :data:`CSV_FIELDS`, for every image
  explained in the folder (its sidecars), not only the last run's.

Redoing an image removes the files its old sidecar lists that the new one does not (top-k 3 then
1 leaves no stale ``_cam2``/``_cam3``).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from nstcam._files import unique_names
from nstcam._mark import tag_weights
from nstcam.cam.result import CamResult
from nstcam.image import save_image

__all__ = [
    "BOX_FIELDS",
    "CSV_FIELDS",
    "class_stem",
    "csv_row",
    "csv_rows",
    "save_clip_explanation",
    "folder_csv",
    "save_explanation",
    "sidecar_names",
    "write_csv",
]

CSV_FIELDS = ("image", "rank", "class_index", "label", "score", "random_weights")
"""Columns of ``explanations.csv`` (and the first columns of the CLI's ``metrics.csv``)."""
BOX_FIELDS = ("x0", "y0", "x1", "y1")
"""A detection's box, in the image's pixels: columns added where a row has one."""


def sidecar_names(items: Sequence[Any]) -> list[str]:
    """``<stem>_cam.json`` for each input, unique as the stylised outputs' names are."""
    return unique_names(list(items), "_cam.json")


def class_stem(image_stem: str, rank: int, result: CamResult) -> str:
    """``<image stem>_cam<rank>_<label slug>``: the stem of one class's files."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", result.label).strip("-").lower() or str(result.class_index)
    return f"{image_stem}_cam{rank}_{slug}"


def csv_row(image: str, rank: int, result: CamResult) -> dict[str, Any]:
    """One class's row of ``explanations.csv``."""
    return {
        "image": image,
        "rank": rank,
        "class_index": result.class_index,
        "label": result.label,
        "score": round(result.score, 6),
        "random_weights": bool(result.weights and result.weights.is_random),
        **(dict(zip(BOX_FIELDS, (round(v, 2) for v in result.box), strict=True)) if result.box else {}),
    }


def save_explanation(
    results: Sequence[CamResult],
    image: str,
    sidecar: Path,
    *,
    arch: str | None = None,
    save_npy: bool = False,
) -> dict[str, Any]:
    """Writes each class's overlay and heatmap beside ``sidecar`` (``<stem>_cam.json``), then the
    sidecar itself (atomically, last); returns what the sidecar holds."""
    stem = sidecar.name.removesuffix("_cam.json")
    old = _listed_files(sidecar)
    classes = []
    for rank, r in enumerate(results, 1):
        base = sidecar.with_name(class_stem(stem, rank, r))
        said = (r.weights.notice, r.weights.is_random) if r.weights else ("", False)  # PNG metadata
        overlay = save_image(tag_weights(r.overlay.copy(), *said), base.with_name(base.name + ".png"))
        heat = base.with_name(base.name + "_heatmap.png")
        save_image(tag_weights(Image.fromarray((r.heatmap * 255).astype(np.uint8), "L"), *said), heat)
        if save_npy:
            np.save(base.with_name(base.name + "_heatmap.npy"), r.heatmap)
        classes.append(
            {**csv_row(image, rank, r), **r.to_dict(), "overlay": str(overlay), "heatmap": str(heat)}
        )
    meta = {
        "image": image,
        "arch": arch,
        "layer": results[0].layer if results else None,
        "method": results[0].method if results else None,
        "random_weights": bool(results and results[0].weights and results[0].weights.is_random),
        "classes": classes,
    }
    _write_sidecar(sidecar, meta)
    for stale in old - _listed_files(sidecar):
        stale.unlink(missing_ok=True)
    return meta


def save_clip_explanation(
    cam: Any, clip: str, sidecar: Path, *, label: str | None = None, **options: Any
) -> dict:
    """Explains the clip ``clip`` with ``cam`` (:meth:`nstcam.GradCAM.explain_video`, ``options``)
    and writes beside ``sidecar`` (``<stem>_cam.json``) the overlay clip ``<stem>_cam.mp4`` (the
    source's audio), the contact sheet ``<stem>_sheet.png`` and the windows' scores
    ``<stem>_scores.csv``, then the sidecar (last, atomically): one entry per class with the
    ``explanations.csv`` columns (``score``: the mean probability over windows) and the frames where
    it is strongest. Returns what the sidecar holds."""
    stem = sidecar.name.removesuffix("_cam.json")
    r = cam.explain_video(
        clip,
        name=Path(label or clip).name,
        output=sidecar.with_name(f"{stem}_cam.mp4"),
        contact_sheet=sidecar.with_name(f"{stem}_sheet.png"),
        csv_path=sidecar.with_name(f"{stem}_scores.csv"),
        **options,
    )
    random = bool(cam.weights is not None and cam.weights.is_random)
    classes = [
        {
            "image": label or clip,
            "rank": rank,
            "class_index": c.index,
            "label": c.label,
            "score": c.score,
            "random_weights": random,
            "peak_frames": list(c.peak),
            "peak_frame": c.peak_frame,
            "window_scores": [round(float(s), 6) for s in c.window_scores],
            "overlay": str(r.output) if rank == 1 else None,
            **({"faithfulness": c.faithfulness} if c.faithfulness else {}),
        }
        for rank, c in enumerate(r.classes, 1)
    ]
    meta = {
        "image": label or clip,
        "arch": cam.arch,
        "layer": cam.target_layer,
        "method": cam.method,
        "random_weights": random,
        "frames": r.frames,
        "fps": r.fps,
        "window": r.window,
        "windows": [list(w) for w in r.windows],
        "video": str(r.output),
        "contact_sheet": str(r.contact_sheet),
        "scores_csv": str(r.csv),
        "classes": classes,
    }
    _write_sidecar(sidecar, meta)
    return meta


def _write_sidecar(sidecar: Path, meta: dict[str, Any]) -> None:
    """``meta`` as ``sidecar``'s JSON, atomically: the file that makes a rerun skip its input appears
    only whole, after every file it lists."""
    tmp = sidecar.with_name(f".{sidecar.name}.partial")
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, sidecar)


def _listed_files(sidecar: Path) -> set[Path]:
    """The class files an image's sidecar lists (its overlays, heatmaps and their ``.npy``)."""
    try:
        meta = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return set()
    files = set()
    for c in meta.get("classes", []):
        for key in ("overlay", "heatmap"):
            if c.get(key):
                f = Path(c[key])
                files |= {f, f.with_suffix(".npy")} if key == "heatmap" else {f}
    return {f for f in files if f.parent == sidecar.parent}


def folder_csv(out_dir: str | os.PathLike) -> Path | None:
    """``explanations.csv`` of every image explained in ``out_dir`` (all its sidecars, by name), so a
    run that adds or redoes some images keeps the others' rows; None where there is none."""
    out_dir = Path(out_dir)
    metas = []
    for f in sorted(out_dir.glob("*_cam.json")):
        try:
            metas.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue  # a sidecar being written by another run: its image is not done
    return write_csv(out_dir / "explanations.csv", csv_rows(metas)) if metas else None


def csv_rows(sidecars: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``explanations.csv`` rows of some sidecars, in their order."""
    return [
        {k: c[k] for k in (*CSV_FIELDS, *BOX_FIELDS) if k in c} for meta in sidecars for c in meta["classes"]
    ]


def write_csv(
    path: str | os.PathLike, rows: Sequence[dict[str, Any]], fields: Sequence[str] | None = None
) -> Path:
    """Writes ``rows`` as a CSV with a header (``fields``; default :data:`CSV_FIELDS`, and
    :data:`BOX_FIELDS` where a row has a box); returns the path."""
    path = Path(path)
    if fields is None:
        fields = (*CSV_FIELDS, *BOX_FIELDS) if any("x0" in r for r in rows) else CSV_FIELDS
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.6f}" if k == "score" else v for k, v in row.items() if k in fields})
    return path

"""Stylising many images: inputs expanded from folders or globs, output names, sidecars, and a
batch that goes on past a bad file."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image
from tqdm.auto import tqdm

from nstcam._checks import whole
from nstcam._files import IMAGE_EXTENSIONS, BatchResult, expand_contents, output_names
from nstcam._terminal import watching
from nstcam.anchor import PixelAnchor
from nstcam.image import ImageError, ImageSource, load_image, probe_image, save_image
from nstcam.mask import load_mask
from nstcam.style._plan import Plan, make_plan
from nstcam.style._regions import load_regions
from nstcam.style._run import run_many, sizes_at_scales
from nstcam.style._runtime import Runtime
from nstcam.style._types import Cancelled, InsufficientMemoryError, StepInfo
from nstcam.style.options import StyleOptions

__all__ = [
    "IMAGE_EXTENSIONS",
    "BatchResult",
    "batch_call",
    "many_call",
    "expand_contents",
    "output_names",
    "run_batch",
]

logger = logging.getLogger(__name__)


def load_styles(style: ImageSource | Sequence[ImageSource]) -> list[Image.Image]:
    """One style image or a list of them to blend, loaded."""
    return [load_image(s) for s in (style if isinstance(style, (list, tuple)) else [style])]


def many_call(
    rt: Runtime,
    contents: Sequence[ImageSource],
    style: ImageSource | Sequence[ImageSource],
    inits: Sequence[ImageSource | None] | None,
    anchors: Sequence[Sequence[PixelAnchor]] | None,
    params: dict[str, Any],
) -> list[Image.Image]:
    """:meth:`StyleTransfer.stylize_many`: checks, loads, plans and runs :func:`run_many`."""
    images = [load_image(c) for c in contents]
    n = len(images)
    if n == 0:
        raise ValueError("contents is empty")
    for name, given in (("inits", inits), ("anchors", anchors)):
        if given is not None and len(given) != n:
            raise ValueError(f"{name} has {len(given)} entries for {n} contents")
    starts = [None if i is None else load_image(i) for i in (inits or [None] * n)]
    style_imgs = load_styles(style)
    callback, bar = params.pop("progress", None), params.pop("progress_bar", None)
    masks = [None] * n
    if params.pop("style_mask", None) is not None:
        raise ValueError("stylize_many takes no style_mask; call stylize for a masked image")
    regions = _regions(params, len(style_imgs))
    opts = StyleOptions.of(params.pop("options", None), **params)
    if not isinstance(opts.init, str):
        raise ValueError("stylize_many takes its start images as inits=[...], one per content")
    given = next((i for i in starts if i is not None), None)
    opts = opts if given is None else StyleOptions.of(opts, init=given)
    plan = make_plan(opts, n_styles=len(style_imgs), **rt.planning())
    if n > 1 and plan.optimizer != "adam":
        raise ValueError("stylize_many needs optimizer='adam' for more than one image (L-BFGS couples them)")
    if len({sizes_at_scales(c, plan) for c in images}) != 1:
        raise ValueError("stylize_many needs contents of one size; group them by size first")
    return run_many(
        rt,
        images,
        style_imgs,
        plan,
        callback,
        bar,
        {},
        masks,
        inits=starts,
        anchors=[list(a) for a in anchors] if anchors is not None else None,
        regions=regions,
    )


def batch_call(
    rt: Runtime,
    contents: str | Path | Sequence[ImageSource],
    style: ImageSource | Sequence[ImageSource],
    out_dir: str | Path,
    *,
    overwrite: bool,
    ext: str,
    progress_bar: bool | None,
    batch_size: int,
    **params: Any,
) -> BatchResult:
    """:meth:`StyleTransfer.stylize_batch`: checks, loads the styles, plans, runs :func:`run_batch`."""
    if ext.lower() not in (".png", ".jpg", ".jpeg"):
        raise ValueError(f"ext must be '.png', '.jpg' or '.jpeg', got {ext!r}")
    callback = params.pop("progress", None)
    params.pop("progress_bar", None)
    style_mask = params.pop("style_mask", None)
    anchors, masks = params.pop("anchors", None), params.pop("style_masks", None)
    opts = StyleOptions.of(params.pop("options", None), **params)
    if not isinstance(opts.init, str) or anchors:
        raise ValueError("stylize_batch takes no init image or anchors; call stylize for each image")
    items = expand_contents(contents)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    style_imgs = load_styles(style)
    regions = None if masks is None else load_regions(masks, len(style_imgs))
    plan = make_plan(opts, n_styles=len(style_imgs), **rt.planning())
    return run_batch(
        rt,
        items,
        out_dir,
        style_imgs,
        plan,
        ext=ext,
        overwrite=overwrite,
        style_mask=style_mask,
        callback=callback,
        progress_bar=progress_bar,
        batch_size=batch_size,
        regions=regions,
    )


def _regions(params: dict[str, Any], n_styles: int) -> list | None:
    """``style_masks`` popped from ``params`` and loaded (one per style, for every image), or None."""
    given = params.pop("style_masks", None)
    return None if given is None else load_regions(given, n_styles)


def run_batch(
    rt: Runtime,
    items: list[ImageSource],
    out_dir: Path,
    styles: list[Image.Image],
    plan: Plan,
    *,
    ext: str,
    overwrite: bool,
    style_mask: Any,
    callback: Callable[[StepInfo], bool | None] | None,
    progress_bar: bool | None,
    batch_size: int = 1,
    regions: list | None = None,
) -> BatchResult:
    """Stylises ``items`` into ``out_dir`` with one style-target cache; see ``stylize_batch``.

    Inputs are loaded (and bad ones recorded) first; the rest are grouped by their size at every
    scale and optimised ``batch_size`` at a time, in input order within a group.
    """
    batch_size = whole("batch_size", batch_size, minimum=1)
    if batch_size > 1 and plan.optimizer != "adam":
        raise ValueError(
            f"batch_size={batch_size} needs optimizer='adam' (L-BFGS's shared line search would "
            f"couple the images); got optimizer={plan.optimizer!r}"
        )
    fixed_mask = load_mask(style_mask) if style_mask is not None and not callable(style_mask) else None
    cache: dict = {}
    result = BatchResult()
    todo: list[tuple[Path, str, ImageSource, tuple]] = []
    for item, name in zip(items, output_names(items, ext), strict=True):
        out = out_dir / name
        label = str(item) if isinstance(item, (str, Path)) else name
        if out.exists() and not overwrite:
            logger.info("skipping %s: %s exists", label, out)
            result.append(out)
            result.skipped.append(out)
            continue
        try:
            key = _size_key(item, plan) if batch_size > 1 else ()
        except (ImageError, FileNotFoundError, OSError) as e:
            logger.error("skipping %s: %s", label, e)
            result.failed[label] = str(e)
            continue
        todo.append((out, label, item, key))
    groups: dict[tuple, list] = {}
    for entry in todo:  # images are decoded chunk by chunk: a big folder is never all in memory
        groups.setdefault(entry[3], []).append(entry)
    chunks = [g[i : i + batch_size] for g in groups.values() for i in range(0, len(g), batch_size)]
    progress_bar = watching() if progress_bar is None else bool(progress_bar)
    bar = tqdm(total=len(todo), desc="stylize", unit="img", disable=not progress_bar)
    try:
        for chunk in chunks:
            for group in _load_chunk(chunk, style_mask, fixed_mask, plan, result):
                _stylize_group(rt, group, styles, plan, callback, cache, result, progress_bar, regions)
            bar.update(len(chunk))
    finally:
        bar.close()
    if result.failed:
        logger.warning("%d of %d inputs failed", len(result.failed), len(items))
    return result


def _size_key(item: ImageSource, plan: Plan) -> tuple:
    """The image's size at every scale, from the file's header where it is a file."""
    if isinstance(item, (str, Path)):
        w, h = probe_image(item)
        return sizes_at_scales(Image.new("1", (w, h)), plan)
    return sizes_at_scales(load_image(item), plan)


def _load_chunk(chunk: list, style_mask: Any, fixed_mask: Any, plan: Plan, result: BatchResult) -> list[list]:
    """Decodes a chunk; bad files go to ``result.failed``; the rest grouped by their actual size
    (EXIF rotation can swap a header's width and height)."""
    groups: dict[tuple, list] = {}
    for out, label, item, _ in chunk:
        try:
            content = load_image(item)
            mask = load_mask(style_mask(content)) if callable(style_mask) else fixed_mask
        except (ImageError, FileNotFoundError, OSError, ValueError) as e:
            logger.error("skipping %s: %s", label, e)
            result.failed[label] = str(e)
            continue
        groups.setdefault(sizes_at_scales(content, plan), []).append((out, label, content, mask))
    return list(groups.values())


def _stylize_group(
    rt: Runtime,
    group: list,
    styles: list[Image.Image],
    plan: Plan,
    callback: Callable[[StepInfo], bool | None] | None,
    cache: dict,
    result: BatchResult,
    steps_bar: bool = False,
    regions: list | None = None,
) -> None:
    try:
        images = run_many(
            rt,
            [e[2] for e in group],
            styles,
            plan,
            callback,
            steps_bar,
            cache,
            [e[3] for e in group],
            regions=regions,
        )
    except Cancelled:
        raise
    except (InsufficientMemoryError, OSError) as e:
        for _, label, _, _ in group:
            logger.error("skipping %s: %s", label, e)
            result.failed[label] = str(e)
        return
    for (out, label, _, _), img in zip(group, images, strict=True):
        save_image(img, out)
        meta = dict(img.info["nstcam"], input=label, output=str(out), batch=len(group))
        out.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))
        result.append(out)
        result.written.append(out)

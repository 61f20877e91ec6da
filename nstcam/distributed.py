"""Many images, many machines: stylise and explain whole datasets on Ray Data.

``pip install "nstcam[ray]"``. The same code runs on a laptop (a local Ray instance sized to the
machine), a multi-GPU box or a cluster (``address="auto"`` or ``"ray://head:10001"``): Ray Data reads
the inputs and feeds a pool of workers; each worker process builds its engine once (and, for style
transfer, computes the style targets once), keeps it for the next call with the same settings, and
writes its outputs itself, named exactly as
:meth:`nstcam.StyleTransfer.stylize_batch` names them, so the two are interchangeable and a rerun
skips what exists. A bad image is recorded and the rest complete; a worker whose process dies is
replaced by Ray and its images are retried (outputs are written atomically, so a retry never
leaves half a file).

Example:
    >>> from nstcam.distributed import stylize_dataset
    >>> res = stylize_dataset("photos/", "starry.jpg", "out/", num_workers=4, size=512, steps=300)
    >>> len(res.written), res.failed
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nstcam._files import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, expand_contents, output_names, unique_names
from nstcam.cam.files import folder_csv, sidecar_names, write_csv
from nstcam.image import ImageSource, load_image, save_image
from nstcam.style import BatchResult, StyleOptions
from nstcam.weights import DETECTORS

__all__ = ["explain_dataset", "stylize_dataset"]

logger = logging.getLogger(__name__)

CPUS_PER_WORKER = 0.5
"""Ray CPUs a worker reserves: a fraction, so that Ray Data's read tasks always find a CPU (a worker
pool that takes every CPU starves them and the job hangs)."""


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError('nstcam.distributed needs Ray Data: pip install "nstcam[ray]"') from None
    return ray


def _connect(address: str | None) -> Any:
    """Joins ``address`` ("auto", "ray://host:10001"), or starts a local instance sized to the machine
    (``None``); an instance this process already joined is reused."""
    ray = _ray()
    if not ray.is_initialized():
        if address is None:
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    return ray


def _inputs(inputs: str | Path | Sequence[str | Path]) -> list[str]:
    """Local files from a folder, glob or list; or files under a URI that pyarrow reads (s3://...)."""
    if isinstance(inputs, str) and "://" in inputs and not inputs.startswith("file://"):
        from pyarrow import fs as pafs

        filesystem, root = pafs.FileSystem.from_uri(inputs)
        info = filesystem.get_file_info(root)
        if info.type == pafs.FileType.File:
            return [inputs]
        scheme = inputs.split("://", 1)[0]
        found = filesystem.get_file_info(pafs.FileSelector(root, recursive=False))
        files = sorted(f.path for f in found if f.is_file and Path(f.path).suffix.lower() in IMAGE_EXTENSIONS)
        if not files:
            raise ValueError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) under {inputs}")
        return [f"{scheme}://{f}" for f in files]
    if isinstance(inputs, (str, Path)) and Path(inputs).is_dir():  # its images and its videos
        kinds = (*IMAGE_EXTENSIONS, *VIDEO_EXTENSIONS)
        items = sorted(f for f in Path(inputs).iterdir() if f.is_file() and f.suffix.lower() in kinds)
        if not items:
            raise ValueError(f"no image or video files ({', '.join(kinds)}) in {inputs}")
    else:
        items = expand_contents(inputs)
    bad = [i for i in items if not isinstance(i, (str, Path))]
    if bad:
        raise TypeError(
            "inputs must be paths, a folder, a glob or a URI (images in memory cannot be shipped)"
        )
    return [str(i) for i in items]


def _read(path: str) -> ImageSource:
    if "://" in path and not path.startswith("file://"):
        from pyarrow import fs as pafs

        filesystem, p = pafs.FileSystem.from_uri(path)
        with filesystem.open_input_stream(p) as fh:
            return fh.read()
    return path


def _check_weights(arch: str, weights: str, address: str | None) -> None:
    """On a local run, fetch (or refuse) the weights once here, with a clear error, rather than in
    every worker, where a failure would only kill the workers. Random weights are announced here:
    the workers' own warnings do not reach this console."""
    if weights == "random":
        logger.warning(
            "%s runs on RANDOM weights: the results are not meaningful (tests and demos only)", arch
        )
    if address is not None:
        return  # each node of a cluster has its own weights folder
    if arch.startswith("timm:"):
        if weights not in ("imagenet", "pretrained", "random") and not Path(weights).is_file():
            raise FileNotFoundError(f"weights file not found: {Path(weights).name}")
    elif weights == "imagenet":
        from nstcam.weights import ensure_file

        ensure_file(arch, download=True, timeout=30.0)
    elif weights != "random" and not Path(weights).is_file():
        raise FileNotFoundError(f"weights file not found: {weights}")


def _workers(num_workers: int | None, gpus_per_worker: float) -> int:
    ray = _ray()
    if num_workers is not None:
        if int(num_workers) < 1:
            raise ValueError(f"num_workers must be at least 1, got {num_workers}")
        return int(num_workers)
    res = ray.cluster_resources()
    if gpus_per_worker:
        return max(1, int(res.get("GPU", 0) // gpus_per_worker))
    return max(1, int(res.get("CPU", 1) // 2))


def _pending(items: list[str], outs: list[Path], overwrite: bool, result: BatchResult) -> list[dict]:
    """The rows still to do; outputs that exist are skipped (``result.skipped``) unless ``overwrite``."""
    rows = []
    for item, out in zip(items, outs, strict=True):
        if out.exists() and not overwrite:
            result.append(out)
            result.skipped.append(out)
            continue
        rows.append({"path": item, "out": str(out), "label": item})
    return rows


def _pool(address: str | None, num_workers: int | None, gpus: float, n_rows: int) -> tuple[Any, int, int]:
    """Ray, the number of workers, and torch threads per worker (the machine's CPUs shared out)."""
    ray = _connect(address)
    n = min(_workers(num_workers, gpus), n_rows)
    threads = 1 if gpus else max(1, int(ray.cluster_resources().get("CPU", 1) // n))
    return ray, n, threads


def _map(ray: Any, rows: list[dict], worker: type, kwargs: dict, n: int, gpus: float) -> list[dict]:
    """Runs ``worker`` over ``rows``, one image per call, ``n`` at a time.

    On CPUs, Ray tasks: Ray keeps their worker processes between jobs, and each process keeps the
    engine it built (:func:`_cached_call`), so a second call of the same job starts in a tenth of a
    second where fresh actors take seconds (importing torch, building the network). On GPUs, a pool
    of actors: Ray ends a GPU task's process after each call (to free its memory), so a task would
    rebuild the engine per image. Either way Ray retries the images of a process that dies."""
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    if gpus:
        ds = ds.map_batches(
            worker,
            fn_constructor_kwargs=kwargs,
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=n),
            num_cpus=CPUS_PER_WORKER,
            num_gpus=gpus,
        )
    else:
        ds = ds.map_batches(
            _cached_call,
            fn_kwargs={"worker": worker, "kwargs": kwargs, "key": _engine_key(worker, kwargs)},
            batch_size=1,
            concurrency=n,
            num_cpus=CPUS_PER_WORKER,
        )
    try:
        return list(ds.iter_rows())
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(f"the Ray job failed: {first}") from e


ENGINES_PER_PROCESS = 1
"""Engines a Ray worker process keeps between calls (the last ones used): one VGG or classifier,
so an idle worker holds no more memory than one actor did."""

_engines: OrderedDict[str, Any] = OrderedDict()
_engines_lock = threading.Lock()


def _engine_key(worker: type, kwargs: dict) -> str:
    """What makes two calls' engines the same: the worker and every argument it is built from."""
    from ray import cloudpickle

    return hashlib.sha256(cloudpickle.dumps((worker.__qualname__, kwargs))).hexdigest()


def _cached_call(batch: dict, *, worker: type, kwargs: dict, key: str) -> dict:
    """A Ray task's body: this process's engine for ``key`` (built on first use, the oldest beyond
    :data:`ENGINES_PER_PROCESS` dropped), run on ``batch``."""
    import torch

    with _engines_lock:
        engine = _engines.pop(key, None)
        if engine is None:
            engine = worker(**kwargs)
        _engines[key] = engine
        while len(_engines) > ENGINES_PER_PROCESS:
            _engines.popitem(last=False)
    torch.set_num_threads(max(1, kwargs["threads"]))
    return engine(batch)


class _StyleWorker:
    """One worker: one engine, one plan and one style-target cache for all its images."""

    def __init__(
        self, styles: list[bytes], weights: str, params: StyleOptions, threads: int, gpu: bool
    ) -> None:
        import torch

        from nstcam.style import StyleTransfer

        torch.set_num_threads(max(1, threads))
        self.st = StyleTransfer(weights, device="cuda" if gpu else "cpu")
        self.styles = [load_image(s) for s in styles]
        self.plan = self.st.plan(len(self.styles), params)  # the options the driver checked
        self.cache: dict = {}

    def __call__(self, batch: dict) -> dict:
        def write(path: str, out: Path, label: str) -> None:
            img = self.st.run_plan(_read(path), self.styles, self.plan, self.cache)
            save_image(img, out)  # atomic: a killed worker leaves no half file
            meta = dict(img.info["nstcam"], input=label, output=str(out))
            out.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))

        before = self.st.style_target_computations
        rows = _each(batch, write)
        made = self.st.style_target_computations - before  # by this batch: an engine outlives a job
        return {**rows, "targets": [made] * len(rows["status"]), "pid": [os.getpid()] * len(rows["status"])}


class _VideoWorker:
    """One worker: one engine for all its clips, one clip per call (resumable: a clip's file appears
    only when it is complete)."""

    def __init__(self, styles: list[bytes], weights: str, params: dict, threads: int, gpu: bool) -> None:
        import torch

        from nstcam.style import StyleTransfer

        torch.set_num_threads(max(1, threads))
        self.st = StyleTransfer(weights, device="cuda" if gpu else "cpu")
        self.styles = [load_image(s) for s in styles]
        self.params = params

    def __call__(self, batch: dict) -> dict:
        def write(path: str, out: Path, label: str) -> None:
            res = self.st.stylize_video(path, self.styles, str(out), progress_bar=False, **self.params)
            meta = {k: v for k, v in vars(res).items() if k != "histories"}
            meta.update(input=label, output=str(out), seconds_per_frame=res.seconds / max(1, res.frames))
            out.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))

        rows = _each(batch, write)
        return {**rows, "targets": [0] * len(rows["status"])}


class _FastWorker:
    """One worker: one :class:`nstcam.FastStyle` (real weights) for all its images, or (``video``)
    clips; the style read once: a built-in style, a learned style, one painting's vector, or
    paintings' blend."""

    def __init__(self, styles: list[bytes] | Any, params: dict, threads: int, gpu: bool, video: bool) -> None:
        import torch

        from nstcam.fast import FastStyle

        torch.set_num_threads(max(1, threads))
        self.fast = FastStyle(device="cuda" if gpu else "cpu")
        params = dict(params)
        blend = params.pop("style_weights", None)
        if isinstance(styles, list):  # paintings shipped as PNG bytes
            paintings = [load_image(s) for s in styles]
            colour = {k: params.get(k) for k in ("strength", "preserve_color") if params.get(k) is not None}
            styles = self.fast.read_style(paintings if len(paintings) > 1 else paintings[0], blend, **colour)
        self.style, self.params, self.video = styles, params, video

    def __call__(self, batch: dict) -> dict:
        def write(path: str, out: Path, label: str) -> None:
            if self.video:
                res = self.fast.stylize_video(path, self.style, str(out), progress_bar=False, **self.params)
                meta = {k: v for k, v in vars(res).items() if k != "histories"}
                meta.update(input=label, output=str(out), seconds_per_frame=res.seconds / max(1, res.frames))
            else:
                img = self.fast.stylize(_read(path), self.style, **self.params)
                save_image(img, out)
                meta = dict(img.info["nstcam"], input=label, output=str(out))
            out.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))

        rows = _each(batch, write)
        return {**rows, "targets": [0] * len(rows["status"])}


_FAST_BOTH = ("size", "strength", "preserve_color", "style_weights")
_FAST_IMAGE = (*_FAST_BOTH, "tile")
_FAST_VIDEO = (*_FAST_BOTH, "temporal_blend", "flow", "max_frames", "fps")


def _each(batch: dict, write: Callable[[str, Path, str], None]) -> dict:
    """Runs ``write(path, out, label)`` for each row of a Ray batch: "written", or "failed" with the
    reason for a bad input (an ImageError or VideoError is a ValueError), the others going on."""
    status, errors = [], []
    for path, out, label in zip(batch["path"], batch["out"], batch["label"], strict=True):
        try:
            write(str(path), Path(str(out)), str(label))
        except (FileNotFoundError, OSError, MemoryError, ValueError) as e:
            status.append("failed")
            errors.append(str(e))
            continue
        status.append("written")
        errors.append("")
    return {"label": batch["label"], "out": batch["out"], "status": status, "error": errors}


def _video_only() -> set[str]:
    """Keywords of :func:`nstcam.video.stylize_video` that still images do not take (derived from
    the two signatures, so a new video keyword never reaches an image worker)."""
    from nstcam.style import stylize_defaults
    from nstcam.video import stylize_video

    params = inspect.signature(stylize_video).parameters
    return {k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} - set(
        stylize_defaults()
    )


def _most_per_process(done: list[dict]) -> int:
    """The most style targets one worker process computed in this job (1: each computed them once)."""
    made: dict[int, int] = {}
    for r in done:
        made[int(r["pid"])] = made.get(int(r["pid"]), 0) + int(r["targets"])
    return max(made.values(), default=0)


def _collect(rows: list[dict], done: list[dict], result: BatchResult) -> None:
    order = {r["label"]: i for i, r in enumerate(rows)}
    for r in sorted(done, key=lambda r: order[str(r["label"])]):
        if r["status"] == "written":
            result.append(Path(str(r["out"])))
            result.written.append(Path(str(r["out"])))
        else:
            result.failed[str(r["label"])] = str(r["error"])


def stylize_dataset(
    inputs: str | Path | Sequence[str | Path],
    style: ImageSource | Sequence[ImageSource],
    out_dir: str | Path,
    *,
    num_workers: int | None = None,
    gpus_per_worker: float = 0,
    address: str | None = None,
    weights: str = "imagenet",
    overwrite: bool = False,
    ext: str = ".png",
    video_ext: str = ".mp4",
    fast: bool = False,
    **stylize_params: Any,
) -> BatchResult:
    """Stylises every input on a pool of Ray workers; see the module docstring.

    Videos (:data:`nstcam.video.VIDEO_EXTENSIONS`) are stylised with temporal consistency, one task
    per clip (:meth:`nstcam.StyleTransfer.stylize_video`), as ``<stem>_stylized<video_ext>`` with a
    JSON sidecar (frames, fps, warping error...); a rerun skips the clips done.

    Args:
        inputs: a folder (its images and videos), a glob, a list of paths, or a URI pyarrow reads
            (``s3://bucket/photos/``; images only).
        style: one style image or a list to blend (read here, shipped to every worker once).
        out_dir: a local (or shared) folder; outputs and JSON sidecars as ``stylize_batch`` names them.
        num_workers: workers at once (default: one per GPU with ``gpus_per_worker``, else one per two CPUs).
        gpus_per_worker: GPUs each worker reserves (0: run on CPU; above 0, one Ray actor per worker).
        address: ``None`` starts a local Ray instance; ``"auto"`` or ``"ray://host:10001"`` joins one.
        weights: weights of the engines (``"imagenet"``, ``"random"`` or a path every worker sees).
        overwrite: redo inputs whose output exists (else they are skipped: reruns resume).
        ext: ``".png"`` or ``".jpg"``.
        video_ext: format of stylised videos (``.mp4``, ``.webm``, ``.mov``, ``.mkv``, ``.gif``).
        fast: paint with the pretrained feed-forward network (:class:`nstcam.FastStyle`, real
            weights) instead of optimising: ``style`` is then also a built-in style (an index 0-25 or
            a mapping) or a learned style (:meth:`nstcam.FastStyle.learn`: a ``LearnedStyle`` or its
            ``.safetensors`` file, read and checked here, once); ``stylize_params`` take ``size``,
            ``strength``, ``preserve_color``, ``style_weights`` and for videos ``temporal_blend``,
            ``flow``, ``max_frames``, ``fps``.
        **stylize_params: keywords of :meth:`nstcam.StyleTransfer.stylize` (size, steps, ...); for
            videos also those of :func:`nstcam.video.stylize_video` (``temporal_weight``, ``flow``,
            ``passes``, ``max_frames``, ``fps``), which images ignore.

    Returns:
        A :class:`nstcam.BatchResult`: ``.written``, ``.skipped``, ``.failed`` (input -> reason).
    """
    if ext.lower() not in (".png", ".jpg", ".jpeg"):
        raise ValueError(f"ext must be '.png', '.jpg' or '.jpeg', got {ext!r}")
    for key in ("progress", "progress_bar", "style_mask"):
        if key in stylize_params:
            raise ValueError(f"{key} is not supported by stylize_dataset (Ray Data shows progress)")
    if video_ext.lower() not in (".mp4", ".webm", ".mov", ".mkv", ".gif"):
        raise ValueError(f"video_ext must be '.mp4', '.webm', '.mov', '.mkv' or '.gif', got {video_ext!r}")
    if not fast:  # the images' options checked before any work (a clip's keywords are its own)
        options = StyleOptions.of(**{k: v for k, v in stylize_params.items() if k not in _video_only()})
    items = _inputs(inputs)
    videos = [i for i in items if Path(i).suffix.lower() in VIDEO_EXTENSIONS]
    images = [i for i in items if i not in set(videos)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    style, builtin = _fast_ready(style, stylize_params) if fast else (style, False)
    styles = style if isinstance(style, (list, tuple)) else [style]
    style_bytes = style if builtin else [_png_bytes(load_image(s)) for s in styles]
    result = BatchResult()
    image_rows = _pending(images, [out_dir / n for n in output_names(images, ext)], overwrite, result)
    video_outs = [out_dir / n for n in unique_names(videos, f"_stylized{video_ext}")]
    video_rows = _pending(videos, video_outs, overwrite, result)
    if not image_rows and not video_rows:
        return result
    if fast:
        return _fast_dataset(
            image_rows, video_rows, style_bytes, stylize_params, result, address, num_workers, gpus_per_worker
        )
    _check_weights("vgg16_bn", weights, address)
    for rows, worker, params in (
        (image_rows, _StyleWorker, options),
        (video_rows, _VideoWorker, stylize_params),
    ):
        if not rows:
            continue
        ray, n, threads = _pool(address, num_workers, gpus_per_worker, len(rows))
        kwargs = dict(
            styles=style_bytes, weights=weights, params=params, threads=threads, gpu=bool(gpus_per_worker)
        )
        done = _map(ray, rows, worker, kwargs, n, gpus_per_worker)
        if worker is _StyleWorker:
            result.style_target_computations = _most_per_process(done)
        _collect(rows, done, result)
    if result.failed:
        logger.warning("%d of %d inputs failed", len(result.failed), len(items))
    return result


def _fast_dataset(
    image_rows: list[dict],
    video_rows: list[dict],
    styles: Any,
    params: dict,
    result: BatchResult,
    address: str | None,
    num_workers: int | None,
    gpus: float,
) -> BatchResult:
    """:func:`stylize_dataset` with ``fast=True``: the fast network's workers over images, then clips."""
    takes = dict.fromkeys((*_FAST_IMAGE, *_FAST_VIDEO))
    unknown = sorted(set(params) - set(takes))
    if unknown:
        raise ValueError(f"fast=True takes {', '.join(takes)}; not {', '.join(unknown)}")
    for rows, video in ((image_rows, False), (video_rows, True)):
        if not rows:
            continue
        kept = {k: v for k, v in params.items() if k in (_FAST_VIDEO if video else _FAST_IMAGE)}
        ray, n, threads = _pool(address, num_workers, gpus, len(rows))
        kwargs = dict(styles=styles, params=kept, threads=threads, gpu=bool(gpus), video=video)
        _collect(rows, _map(ray, rows, _FastWorker, kwargs, n, gpus), result)
    if result.failed:
        logger.warning("%d of %d inputs failed", len(result.failed), len(image_rows) + len(video_rows))
    return result


def _fast_ready(style: Any, params: dict) -> tuple[Any, bool]:
    """The fast network's style as the driver ships it, and whether it goes as it is: a built-in
    style or a learned one (a ``.safetensors`` file read and checked here, once) as it is, and a
    list holding a learned style as their blend (``FastStyle.blend``, with ``style_weights``, which
    it then takes from ``params``); paintings (False) as PNG bytes."""
    from nstcam.fast import LearnedStyle, holds_learned, is_style_file
    from nstcam.fast.engine import shared_fast_style

    if isinstance(style, (list, tuple)) and holds_learned(style):
        style = shared_fast_style().blend(list(style), params.pop("style_weights", None))
    style = LearnedStyle.load(style) if is_style_file(style) else style
    return style, isinstance(style, (int, dict, LearnedStyle))


def _png_bytes(img: Any) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class _CamWorker:
    """One worker: one GradCAM for all its images."""

    def __init__(
        self,
        arch: str,
        layer: str,
        method: str,
        weights: str,
        top_k: int,
        npy: bool,
        threads: int,
        gpu: bool,
        input_size: int | None = None,
        found: dict | None = None,
        mean: tuple | None = None,
        std: tuple | None = None,
    ):
        import torch

        from nstcam.cam import GradCAM

        torch.set_num_threads(max(1, threads))
        self.cam = GradCAM(
            arch,
            weights=weights,
            target_layer=layer,
            method=method,
            device="cuda" if gpu else "cpu",
            input_size=input_size,
            mean=mean,
            std=std,
        )
        self.top_k, self.npy, self.arch = top_k, npy, arch
        # a detector: score_threshold, max_detections, classes; a segmenter: classes
        kind = self.cam.kind
        keep = {"detector": ("classes", "score_threshold", "max_detections"), "segmenter": ("classes",)}
        self.found = {k: v for k, v in (found or {}).items() if k in keep.get(kind, ())}
        if kind == "detector":
            self.top_k = None
        elif kind == "classifier" and self.top_k is None:
            self.top_k = 1

    def __call__(self, batch: dict) -> dict:
        def write(path: str, out: Path, label: str) -> None:
            from nstcam.cam.files import save_clip_explanation, save_explanation

            if Path(path).suffix.lower() in VIDEO_EXTENSIONS and "://" not in path:  # a clip: over time
                save_clip_explanation(self.cam, path, out, label=label, top_k=self.top_k or 1)
                return
            results = self.cam.explain(load_image(_read(path)), top_k=self.top_k, **self.found)
            save_explanation(results, label, out, arch=self.arch, save_npy=self.npy)

        return _each(batch, write)


def explain_dataset(
    inputs: str | Path | Sequence[str | Path],
    out_dir: str | Path,
    *,
    arch: str = "resnet50",
    layer: str | None = None,
    method: str = "gradcam",
    top_k: int | None = None,
    num_workers: int | None = None,
    gpus_per_worker: float = 0,
    address: str | None = None,
    weights: str = "imagenet",
    save_npy: bool = False,
    overwrite: bool = False,
    input_size: int | None = None,
    classes: Sequence[int | str] | None = None,
    score_threshold: float = 0.5,
    max_detections: int = 5,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> BatchResult:
    """Explains every input on a pool of Ray workers, writing what ``nstcam cam`` writes
    (:mod:`nstcam.cam.files`): per image and class an overlay ``<stem>_cam<rank>_<label>.png`` and a
    heatmap ``..._heatmap.png`` (and ``.npy`` with ``save_npy``), a JSON sidecar per image
    (``<stem>_cam.json``, what makes reruns resume) and one CSV, ``out_dir/explanations.csv``, with
    columns ``image, rank, class_index, label, score, random_weights`` (and a detection's box,
    ``x0, y0, x1, y1``), one row per image and class, in input order.

    ``arch`` may be a detector or a segmenter (:data:`nstcam.weights.DETECTORS`, ``SEGMENTERS``):
    a row per detection kept (``score_threshold``, ``max_detections``, ``classes``) or per class
    found (``top_k`` of them, or the ``classes`` asked), as :meth:`nstcam.GradCAM.explain` gives.
    ``top_k`` defaults to 1 for a classifier. ``arch`` may be ``"timm:<name>"``; ``mean`` / ``std``:
    the model's normalisation, as :class:`nstcam.GradCAM` takes them (default: the model's own).

    Returns:
        A :class:`nstcam.BatchResult` of the per-image sidecars; ``.csv`` is the CSV's path.
    """
    from nstcam._checks import whole

    if top_k is not None:
        top_k = whole("top_k", top_k, minimum=1)
    if arch in DETECTORS and top_k is not None:
        raise ValueError("top_k: a detector explains boxes; use score_threshold= and max_detections=")
    if input_size is not None:
        input_size = whole("input_size", input_size, minimum=16)
    items = _inputs(inputs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sidecar_names(items)
    result = BatchResult()
    rows = _pending(items, [out_dir / n for n in names], overwrite, result)
    if rows:
        _check_weights(arch, weights, address)
        ray, n, threads = _pool(address, num_workers, gpus_per_worker, len(rows))
        kwargs = dict(
            arch=arch,
            layer=layer,
            method=method,
            weights=weights,
            top_k=top_k,
            npy=save_npy,
            threads=threads,
            gpu=bool(gpus_per_worker),
            input_size=input_size,
            found={"classes": classes, "score_threshold": score_threshold, "max_detections": max_detections},
            mean=None if mean is None else tuple(mean),
            std=None if std is None else tuple(std),
        )
        for r in _map(ray, rows, _CamWorker, kwargs, n, gpus_per_worker):
            if r["status"] == "written":
                result.written.append(Path(str(r["out"])))
            else:
                result.failed[str(r["label"])] = str(r["error"])
    result.extend(result.written)
    result.csv = folder_csv(out_dir) or write_csv(out_dir / "explanations.csv", [])
    if result.failed:
        logger.warning("%d of %d inputs failed", len(result.failed), len(items))
    return result

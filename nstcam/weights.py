"""Model construction with weights chosen by one argument.

``weights`` is one of:

- ``"imagenet"``: torchvision's official ImageNet weights (``VGG16_BN_Weights.IMAGENET1K_V1``, each
  ResNet's ``DEFAULT``), read from the weights directory and downloaded there, with torchvision's
  hash check, when absent and a network exists;
- ``"random"``: seeded random initialisation, for tests and offline demos. Results are meaningless,
  and everything nstcam shows from such a model says so;
- a path to a ``.pth``/``.pt`` or ``.safetensors`` state dict.

The weights directory is ``$NSTCAM_WEIGHTS_DIR`` if set, else ``weights/`` beside the ``nstcam``
package when nstcam runs from a checkout (or a Space), else ``~/.cache/nstcam/weights``.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision import models
from tqdm.auto import tqdm

from nstcam._files import atomic_file

__all__ = [
    "announce_weights",
    "ARCHS",
    "DETECTORS",
    "FLOW_ARCHS",
    "SEGMENTERS",
    "VIDEO_ARCHS",
    "WeightsInfo",
    "WeightsUnavailableError",
    "build_model",
    "download_weights",
    "ensure_file",
    "load_checked",
    "read_state_dict",
    "weights_dir",
    "weights_file",
    "weights_info",
]

logger = logging.getLogger(__name__)

_CLASSIFIERS = (
    *(f"resnet{d}" for d in (18, 34, 50, 101, 152)),
    "vit_b_16",
    "vit_b_32",
    "vit_l_16",
    "swin_t",
    "swin_s",
    "swin_b",
    "swin_v2_t",
    "swin_v2_s",
    "swin_v2_b",
    "convnext_tiny",
    "convnext_small",
    "convnext_base",
    "convnext_large",
    *(f"efficientnet_b{i}" for i in range(8)),
    "efficientnet_v2_s",
    "efficientnet_v2_m",
    "efficientnet_v2_l",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    *(f"regnet_{k}_{s}" for k in "xy" for s in ("400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf")),
    "vgg11_bn",
    "vgg13_bn",
    "vgg19_bn",
    "vgg16",  # plain VGGs: style transfer's other networks (nstcam.style.STYLE_ARCHS), classifiers too
    "vgg19",
)

ARCHS: dict[str, tuple[Callable[..., nn.Module], models.WeightsEnum]] = {
    "vgg16_bn": (models.vgg16_bn, models.VGG16_BN_Weights.IMAGENET1K_V1),
    **{
        name: (models.get_model_builder(name), models.get_model_weights(name).DEFAULT)
        for name in _CLASSIFIERS
    },
}
"""Architecture name -> (torchvision constructor, official ImageNet weights): VGG16_bn for style
transfer, and the torchvision classifiers Grad-CAM knows (:data:`nstcam.cam.CAM_ARCHS`)."""

FLOW_ARCHS: dict[str, tuple[Callable[..., nn.Module], models.WeightsEnum]] = {
    "raft_small": (models.optical_flow.raft_small, models.optical_flow.Raft_Small_Weights.DEFAULT),
    "raft_large": (models.optical_flow.raft_large, models.optical_flow.Raft_Large_Weights.DEFAULT),
}
"""Optical-flow models (video, ``flow="raft"``) and their official weights (``weights="official"``,
also spelt ``"imagenet"`` like every other model's; RAFT's are trained on optical-flow datasets)."""


def _official(*names: str) -> dict[str, tuple[Callable[..., nn.Module], models.WeightsEnum]]:
    """Each torchvision model named, with its builder and its official (``DEFAULT``) weights."""
    return {name: (models.get_model_builder(name), models.get_model_weights(name).DEFAULT) for name in names}


SEGMENTERS = _official(
    "deeplabv3_resnet50",
    "deeplabv3_resnet101",
    "deeplabv3_mobilenet_v3_large",
    "fcn_resnet50",
    "fcn_resnet101",
    "lraspp_mobilenet_v3_large",
)
"""Semantic segmentation models Grad-CAM explains by class region (official weights: COCO with the
20 Pascal VOC categories and background)."""

DETECTORS = _official(
    "fasterrcnn_resnet50_fpn",
    "fasterrcnn_resnet50_fpn_v2",
    "fasterrcnn_mobilenet_v3_large_fpn",
    "retinanet_resnet50_fpn",
    "retinanet_resnet50_fpn_v2",
    "fcos_resnet50_fpn",
    "ssdlite320_mobilenet_v3_large",
    "maskrcnn_resnet50_fpn",
    "maskrcnn_resnet50_fpn_v2",
)
"""Object detectors Grad-CAM explains by box (official weights: COCO's 91 categories)."""

VIDEO_ARCHS = _official(
    "r3d_18",
    "mc3_18",
    "r2plus1d_18",
    "s3d",
    "mvit_v1_b",
    "mvit_v2_s",
    "swin3d_t",
    "swin3d_s",
    "swin3d_b",
)
"""Video classifiers Grad-CAM explains over space and time (official weights: Kinetics-400's 400
actions, ``weights="kinetics"``, also spelt ``"imagenet"``/``"official"`` like every other model's)."""

_HASH_RE = re.compile(r"-([a-f0-9]+)\.")  # torchvision's convention: name-<sha256 prefix>.pth
_CHUNK = 1 << 20


class WeightsUnavailableError(RuntimeError):
    """Official weights are not on disk and could not be downloaded.

    ``str(e)`` speaks to Python users; a front end rebuilds it in its own words with
    :meth:`explain` (the app names ``--random-weights``, the CLI ``--weights random``).

    Attributes:
        arch: the architecture, e.g. ``"resnet50"``.
        path: where the file was looked for.
        url: where it is downloaded from.
        reason: why it is not there (offline, downloads disabled, or the download's error).
    """

    def __init__(
        self,
        message: str,
        *,
        arch: str | None = None,
        path: Path | None = None,
        url: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.arch, self.path, self.url, self.reason = arch, path, url, reason

    def explain(self, random_hint: str, show_folder: bool = True) -> str:
        """The message with ``random_hint`` as the way to run without these weights.

        Args:
            random_hint: how to run without them.
            show_folder: name the weights folder (the CLI's user); ``False`` for a page that
                strangers read (a public Space), which says "on this server" instead.
        """
        if self.path is None:
            return f"{self}. {random_hint}"
        where = f"in {self.path.parent}" if show_folder else "on this server"
        return (
            f"{self.path.name} is not {where} and {self.reason}. Where a network exists, "
            f"run: nstcam weights download {self.arch}; or copy it there by hand from {self.url}. "
            f"{random_hint}"
        )


@dataclass(frozen=True)
class WeightsInfo:
    """Where a model's weights came from; attached to models as ``model.nstcam_weights``.

    Attributes:
        arch: architecture name, e.g. ``"resnet50"``.
        kind: ``"imagenet"``, ``"random"`` or ``"file"``.
        source: the file read, or ``"seed=N"`` for random weights.
        categories: ImageNet class names (from torchvision's weight metadata).
    """

    arch: str
    kind: str
    source: str
    categories: tuple[str, ...] = field(repr=False, default=())

    @property
    def is_random(self) -> bool:
        """True when the weights are random, so results are not meaningful."""
        return self.kind == "random"

    @property
    def notice(self) -> str:
        """One line for users: what the weights are, with a plain warning for random ones."""
        if self.is_random:
            return (
                f"{self.arch} has RANDOM weights ({self.source}): results are not meaningful, "
                "for testing only."
            )
        return f"{self.arch} weights: {self.kind} ({self.source})"


def weights_dir() -> Path:
    """The directory that holds weight files (see the module docstring for how it is chosen)."""
    env = os.environ.get("NSTCAM_WEIGHTS_DIR")
    if env:
        return Path(env).expanduser()
    checkout = Path(__file__).resolve().parent.parent / "weights"
    if checkout.is_dir():
        return checkout
    return Path.home() / ".cache" / "nstcam" / "weights"


def _check_arch(arch: str) -> tuple[Callable[..., nn.Module], models.WeightsEnum]:
    known = {**ARCHS, **SEGMENTERS, **DETECTORS, **FLOW_ARCHS, **VIDEO_ARCHS}
    if isinstance(arch, str) and arch in known:
        return known[arch]
    names = ", ".join(known)
    given = repr(arch[:60]) if isinstance(arch, str) else f"a {type(arch).__name__}"
    raise ValueError(f"unknown architecture {given}; choose one of {names}")


def _official_url(arch: str) -> str:
    return _check_arch(arch)[1].url


def weights_file(arch: str, directory: Path | None = None) -> Path:
    """Where the official weights of ``arch`` live (whether or not the file exists yet)."""
    name = Path(urllib.parse.urlparse(_official_url(arch)).path).name
    return (directory or weights_dir()) / name


def _fetch_command(arch: str) -> str:
    return f"nstcam weights download {arch}   (or: python -m nstcam weights download {arch})"


def sha256_file(path: Path) -> str:
    """The SHA-256 hex digest of the file at ``path``, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected_prefix(path: Path) -> str | None:
    m = _HASH_RE.search(path.name)
    return m.group(1) if m else None


def _offline() -> bool:
    return os.environ.get("NSTCAM_OFFLINE", "").lower() in ("1", "true", "yes")


def _download(url: str, dest: Path, *, timeout: float, progress: bool) -> None:
    """Downloads ``url`` to ``dest`` atomically, checking the sha256 prefix in the file name."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    prefix = _expected_prefix(dest)
    with atomic_file(dest, suffix=".part") as out, urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310
        total = int(resp.headers.get("Content-Length") or 0) or None
        h = hashlib.sha256()
        with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress) as bar:
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
                h.update(chunk)
                bar.update(len(chunk))
        digest = h.hexdigest()
        if prefix and not digest.startswith(prefix):
            raise WeightsUnavailableError(
                f"hash check failed for {dest.name}: sha256 starts with {digest[: len(prefix)]}, "
                f"expected {prefix}; the download is corrupt, try again"
            )


def ensure_file(
    arch: str, *, download: bool, timeout: float, progress: bool = True, asked: bool = False
) -> Path:
    """The path of ``arch``'s official file, downloading it if allowed. ``asked``: the user asked for
    the download itself (``nstcam weights download``), so the message must not send them back to it."""
    path = weights_file(arch)
    if path.is_file():
        return path
    url = _official_url(arch)
    where = f"{path.name} is not in {path.parent}"
    by_hand = f"copy it by hand into {path.parent} (or a folder named by NSTCAM_WEIGHTS_DIR) from {url}"
    if not download or _offline():
        why = "downloads are disabled" if not download else "NSTCAM_OFFLINE is set"
        if asked:
            msg = f"{where} and {why}: unset NSTCAM_OFFLINE to download it, or {by_hand}"
        else:
            msg = (
                f"{where} and {why}. Fetch it where a network exists with: {_fetch_command(arch)}; "
                f"or {by_hand}; or use weights='random' to test."
            )
        raise WeightsUnavailableError(msg, arch=arch, path=path, url=url, reason=why)
    logger.info("downloading %s to %s", url, path.parent)
    try:
        _download(url, path, timeout=timeout, progress=progress)
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        reason = f"downloading it failed ({getattr(e, 'reason', e)})"
        if asked:
            msg = (
                f"could not download {url}: {getattr(e, 'reason', e)}. The network is unreachable from "
                f"here: {by_hand}"
            )
        else:
            msg = (
                f"{where} and {reason}. Where a network exists run: {_fetch_command(arch)}; "
                f"or {by_hand}; or use weights='random' to test offline."
            )
        raise WeightsUnavailableError(msg, arch=arch, path=path, url=url, reason=reason) from None
    return path


def download_weights(
    archs: Iterable[str] | None = None, *, timeout: float = 30.0, progress: bool = True
) -> list[Path]:
    """Downloads the official weights of ``archs`` (default: vgg16_bn and resnet50) ahead of time.

    Files already present are kept. Returns the paths of the weight files.
    """
    archs = list(archs) if archs else ["vgg16_bn", "resnet50"]
    for a in archs:
        _check_arch(a)
    return [ensure_file(a, download=True, timeout=timeout, progress=progress, asked=True) for a in archs]


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The state dict in a .pth, .pt, .bin or .safetensors file (a checkpoint's ``state_dict`` or
    ``model`` entry, DataParallel's ``module.`` prefix removed), on the CPU."""
    if not path.is_file():
        raise FileNotFoundError(f"weights file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors.torch import load_file

        sd = load_file(str(path), device="cpu")
    elif suffix in (".pth", ".pt", ".bin"):
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
            raise ValueError(f"{path} is not a readable PyTorch state dict: {e}") from None
    else:
        raise ValueError(f"{path.name}: weights must be a .pth, .pt or .safetensors file")
    for key in ("state_dict", "model"):
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd = sd[key]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ValueError(f"{path} does not hold a state dict (a mapping of names to tensors)")
    if sd and all(k.startswith("module.") for k in sd):  # saved from DataParallel
        sd = {k[len("module.") :]: v for k, v in sd.items()}
    return sd


def load_checked(
    model: nn.Module, sd: dict[str, torch.Tensor], what: str, arch: str, part: str | None = None
) -> None:
    """Loads ``sd`` into ``model`` by name, or raises a ValueError saying how file ``what`` does not
    fit ``arch``: missing and unexpected keys, wrong shapes (a few of each). With ``part`` (a
    submodule's name, ``"features"``), only that part must be in the file, and only it is loaded (a
    VGG's convolutions without its classifier); the file's other keys are not read."""
    own = model.state_dict()
    if part is not None:
        own = {k: v for k, v in own.items() if k.startswith(part + ".")}
        sd = {k: v for k, v in sd.items() if k.startswith(part + ".")}
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    wrong = [
        f"{k}: file {tuple(sd[k].shape)} vs model {tuple(v.shape)}"
        for k, v in own.items()
        if k in sd and sd[k].shape != v.shape
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing keys (e.g. {', '.join(missing[:3])})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys (e.g. {', '.join(unexpected[:3])})")
    if wrong:
        problems.append(f"{len(wrong)} wrong shapes (e.g. {'; '.join(wrong[:3])})")
    if problems:
        where = f"{arch}'s {part}" if part else arch
        raise ValueError(f"{what} does not fit {where}: " + "; ".join(problems))
    model.load_state_dict(sd, strict=part is None)


def build_model(
    arch: str,
    weights: str | os.PathLike = "imagenet",
    *,
    seed: int = 0,
    download: bool = True,
    timeout: float = 5.0,
    part: str | None = None,
) -> nn.Module:
    """Builds a torchvision model in eval mode with the chosen weights.

    Args:
        arch: a name of :data:`ARCHS`: ``"vgg16_bn"``, a ResNet, ViT, Swin, ConvNeXt, EfficientNet,
            MobileNetV3, DenseNet, RegNet or VGG-bn classifier of torchvision.
        weights: ``"imagenet"`` (or ``"official"``, or ``"kinetics"`` for a video classifier:
            torchvision's official weights), ``"random"``,
            or a path to a state dict file.
        seed: seed of the random initialisation with ``weights="random"``.
        download: allow downloading missing official weights.
        timeout: seconds to wait for the download server before giving up.
        part: with a state dict file, the only submodule it must hold (``"features"``: a VGG's
            convolutions, all that style transfer reads); the rest keeps torchvision's initialisation.

    Returns:
        The model; ``model.nstcam_weights`` is a :class:`WeightsInfo` saying where its weights came
        from.

    Raises:
        WeightsUnavailableError: official weights are absent and could not be fetched.
        ValueError: unknown ``arch`` or ``weights``, or a state dict that does not fit.
        FileNotFoundError: ``weights`` is a path that does not exist.
    """
    ctor, official = _check_arch(arch)
    categories = tuple(official.meta.get("categories", ()))
    weights = "imagenet" if isinstance(weights, str) and weights in ("official", "kinetics") else weights
    if isinstance(weights, str) and weights == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _construct(ctor, trained=False)
            for m in model.modules():  # ViT's head starts at zeros: every class score, every map 0
                if isinstance(m, nn.Linear) and _all_zero(m.weight):
                    nn.init.normal_(m.weight, std=0.02)
        info = WeightsInfo(arch, "random", f"seed={seed}", categories)
    elif isinstance(weights, str) and weights == "imagenet":
        path = ensure_file(arch, download=download, timeout=timeout)
        prefix = _expected_prefix(path)
        if prefix and not sha256_file(path).startswith(prefix):
            raise WeightsUnavailableError(
                f"{path} is corrupt (its sha256 does not start with {prefix}); delete it and run: "
                f"{_fetch_command(arch)}"
            )
        model = _construct(ctor, trained=True)
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        info = WeightsInfo(arch, "imagenet", str(path), categories)
    elif isinstance(weights, (str, os.PathLike)) and (
        isinstance(weights, os.PathLike) or os.sep in weights or Path(weights).suffix
    ):
        path = Path(weights)
        sd = read_state_dict(path)
        model = _construct(ctor, trained=any(k.startswith("aux_classifier.") for k in sd))
        load_checked(model, sd, path.name, arch, part)
        info = WeightsInfo(arch, "file", str(path), categories)
    else:
        raise ValueError(
            "weights must be 'imagenet', 'random' or a path to a .pth/.safetensors file, got "
            + (repr(weights[:60]) if isinstance(weights, str) else f"a {type(weights).__name__}")
        )
    model.eval()
    model.nstcam_weights = info
    announce_weights(model)
    return model


_ANNOUNCED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_ANNOUNCED_LOCK = threading.Lock()


def announce_weights(model: nn.Module) -> None:
    """Logs where ``model``'s weights came from (random ones as a warning), once per model however
    many engines share it (:func:`build_model` and each engine call this)."""
    info = weights_info(model)
    if info is None:
        return
    with _ANNOUNCED_LOCK:
        if model in _ANNOUNCED:
            return
        _ANNOUNCED.add(model)
    (logger.warning if info.is_random else logger.info)("%s", info.notice)


def _all_zero(w: torch.Tensor) -> bool:
    """Whether every entry of ``w`` is 0, its first 1024 read first: a random weight answers there, where
    the whole of VGG16's first classifier layer (103 M entries) took 0.1 s to read."""
    return not w.reshape(-1)[:1024].any() and not w.any()


def _construct(ctor: Callable[..., nn.Module], trained: bool) -> nn.Module:
    """``ctor`` with no weights: never its backbone's ImageNet weights either (a segmenter's or a
    detector's default, which would download); with ``trained``, a segmenter's auxiliary head as
    its official weights have it. A detector keeps every detection whatever its score (its own
    threshold, 0.05 for most, would hide what ``explain(score_threshold=)`` asks for)."""
    params = inspect.signature(ctor).parameters
    kwargs: dict[str, Any] = {"weights": None}
    if "weights_backbone" in params:
        kwargs["weights_backbone"] = None
    if trained and "aux_loss" in params:
        kwargs["aux_loss"] = True
    name = getattr(ctor, "__name__", "")
    if name in DETECTORS:
        kwargs["box_score_thresh" if name.startswith(("fasterrcnn", "maskrcnn")) else "score_thresh"] = 0.0
    return ctor(**kwargs)


def weights_info(model: nn.Module) -> WeightsInfo | None:
    """The :class:`WeightsInfo` of a model built by :func:`build_model`, else None."""
    info = getattr(model, "nstcam_weights", None)
    return info if isinstance(info, WeightsInfo) else None

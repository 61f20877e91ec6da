"""A new instant style learned in minutes (issue 65): the arbitrary network's style parameters
trained on the style engine's hooked VGG loss (:meth:`nstcam.StyleTransfer.perceptual_loss`).

Dumoulin et al. 2017 learn a new style of a conditional-instance-norm network by training only its
normalisation scales and shifts; Magenta's arbitrary network predicts those from any painting, so
learning starts from its prediction (:meth:`ArbitraryTransformer.norm_params`) and trains the 694
numbers a style is, never the shared network's weights. A learned style is a :class:`LearnedStyle`
(``_learned.py``): its own small object, saved as a safetensors file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from PIL import Image

from nstcam._checks import finite, whole
from nstcam._files import expand_contents
from nstcam.fast._learned import LearnedStyle
from nstcam.fast._tiled import Stages
from nstcam.image import SAMPLES, ImageSource, image_to_tensor, load_image, resize_long_side

__all__ = [
    "CONTENT_LAYERS",
    "CONTENT_MARGIN",
    "MARGIN_PENALTY",
    "MAX_PHOTOS",
    "REFERENCE_AREA",
    "SAMPLE_PHOTOS",
    "LearnCancelled",
    "LearnStep",
    "Teacher",
    "learn_style",
    "paint_learned",
]

logger = logging.getLogger(__name__)

SAMPLE_PHOTOS = ("chelsea.png", "coffee.png", "rocket.jpg", "astronaut.png")
"""The bundled photos learning crops from when none are given."""
MAX_PHOTOS = 256
"""The most training photos one call reads."""
CONTENT_MARGIN = 0.15
"""The default ``content_margin`` of :func:`learn_style`: 15 % more content loss than the one pass's."""
CONTENT_LAYERS = ("relu4_2", "relu5_2")
"""The content layers learning reads unless ``content_layers`` is given: the style engine's relu4_2
and the VGG's deepest, relu5_2 (what a classifier reads): the four paintings of docs/style.md move
further with both (0.644 against 0.615 at 10 minutes, the penalty at ten)."""
MARGIN_PENALTY = 100.0
"""What each unit of content loss beyond the margin costs, in the teacher's weighted units (the
default ``margin_penalty``): at ten, gravel's rocket was lost in one 10-minute run of two; at a
hundred it was kept in both, the mean move 0.627 against the one pass's 0.557 (docs/style.md)."""
REFERENCE_AREA = 4
"""The margin reads each photo's one-pass content loss on at most ``REFERENCE_AREA * size**2``
pixels (a longer photo on its middle, at the crops' scale: the loss is a mean), so a panorama costs
no more than four crops."""


class Teacher(Protocol):
    """What teaches: :class:`nstcam.StyleTransfer` (its hooked VGG loss and where its weights came
    from); the fast engine sits below the style engine, so it takes one rather than builds one."""

    weights: Any

    def perceptual_loss(self, style: Any, options: Any = None, **changes: Any) -> Any: ...


class LearnCancelled(RuntimeError):  # noqa: N818 - reads naturally: `except LearnCancelled`
    """The progress callback asked to stop; nothing was written.

    Attributes:
        style: the style so far.
    """

    def __init__(self, style: LearnedStyle) -> None:
        super().__init__(f"learning cancelled after {len(style.losses)} steps")
        self.style = style

    def __reduce__(self) -> tuple[type, tuple[LearnedStyle]]:
        """Pickled with its style (a ZeroGPU worker sends it back to the server)."""
        return LearnCancelled, (self.style,)


@dataclass(frozen=True)
class LearnStep:
    """What the progress callback gets after each step.

    Attributes:
        step: steps done (1, 2, ...).
        steps: the planned steps (a ``minutes`` budget may end sooner).
        loss: this step's loss (the engine's weighted total, mean over the batch).
        seconds: since learning began.
        style: the style so far (its own copy: paint a preview with it).
    """

    step: int
    steps: int
    loss: float
    seconds: float
    style: LearnedStyle


def _photos(photos: str | Path | Sequence[ImageSource] | None, size: int) -> list[torch.Tensor]:
    """The training photos, each with its short side at ``size`` (crops are drawn from them)."""
    items = [SAMPLES / n for n in SAMPLE_PHOTOS] if photos is None else expand_contents(photos)
    if len(items) > MAX_PHOTOS:
        raise ValueError(f"photos: {len(items)} given, at most {MAX_PHOTOS}")
    out = []
    for item in items:
        img = load_image(item)
        short = min(img.size)
        img = resize_long_side(img, max(size, round(max(img.size) * size / short)))
        out.append(image_to_tensor(img))
    return out


def _draw(
    photos: list[torch.Tensor], size: int, batch: int, gen: torch.Generator
) -> tuple[torch.Tensor, list[int]]:
    """``batch`` random ``size`` x ``size`` crops of random photos, each flipped at random, and the
    photo each came from."""
    crops, which = [], []
    for _ in range(batch):
        k = int(torch.randint(len(photos), (1,), generator=gen))
        p = photos[k]
        h, w = p.shape[-2:]
        top = int(torch.randint(h - size + 1, (1,), generator=gen))
        left = int(torch.randint(w - size + 1, (1,), generator=gen))
        crop = p[..., top : top + size, left : left + size]
        if bool(torch.randint(2, (1,), generator=gen)):
            crop = crop.flip(-1)
        crops.append(crop)
        which.append(k)
    return torch.cat(crops), which


_TEACHER_LOCK = threading.Lock()
TEACHERS: dict[str, Callable[..., Any]] = {}
"""How ``learn`` builds its default teacher: ``TEACHERS["default"](device=...)``, registered by
:mod:`nstcam.style` (which sits above this package) as ``StyleTransfer``."""


def default_teacher(fast: Any) -> Teacher:
    """The teacher ``learn`` uses when none is given: one ``StyleTransfer()`` (VGG16_bn, official
    ImageNet weights) on ``fast``'s device, built at the first call and shared after (an engine is
    safe to share between threads)."""
    with _TEACHER_LOCK:
        teacher = getattr(fast, "_default_teacher", None)
        if teacher is None:
            if "default" not in TEACHERS:  # pragma: no cover - nstcam imports nstcam.style
                raise ValueError("engine: pass engine=StyleTransfer() (import nstcam.style first)")
            teacher = TEACHERS["default"](device=fast.device)
            fast._default_teacher = teacher
        return teacher


def learn_style(
    fast: Any,
    painting: ImageSource,
    photos: str | Path | Sequence[ImageSource] | None = None,
    *,
    engine: Teacher | None = None,
    size: int = 256,
    steps: int = 200,
    minutes: float | None = None,
    batch: int = 2,
    lr: float = 0.05,
    seed: int = 0,
    callback: Callable[[LearnStep], bool | None] | None = None,
    progress_bar: bool | None = None,
    name: str | None = None,
    train: str = "norm",
    content_margin: float | None = CONTENT_MARGIN,
    margin_penalty: float = MARGIN_PENALTY,
    **loss_options: Any,
) -> LearnedStyle:
    """Learns ``painting`` as a new instant style (``FastStyle().learn``): the arbitrary network's
    style parameters (each styled convolution's normalisation scale and shift, 694 numbers;
    Dumoulin et al. 2017), from its prediction for the painting, trained by Adam on ``engine``'s
    hooked VGG loss over random crops of ``photos``. The shared networks are only read.

    Args:
        fast: the :class:`nstcam.FastStyle` whose arbitrary network paints.
        painting: the style image.
        photos: a folder, a glob, or a list of photos to crop from (at most ``MAX_PHOTOS``);
            None: the bundled sample photos (``SAMPLE_PHOTOS``).
        engine: the :class:`nstcam.StyleTransfer` whose loss teaches (any VGG it takes); None:
            :func:`default_teacher` (VGG16_bn, official ImageNet weights, built once per ``fast``).
        size: the crops' side in px (64 to 1024); the style is read at this size too.
        steps: Adam steps, each one batch of crops.
        minutes: stop after this much time, whatever ``steps`` says.
        batch: crops per step (1 to 16).
        lr: Adam's learning rate.
        seed: the crops and flips drawn; one seed gives the same style, bit for bit, on one CPU.
        callback: called after every step with a :class:`LearnStep` (its ``style`` paints a
            preview); return False to cancel (:class:`LearnCancelled` is raised).
        progress_bar: a tqdm bar; None: only where a person watches.
        name: the painting's name in the style's metadata (default: its file's stem).
        train: what Adam trains: ``"norm"`` (default), the 694 normalisation scales and shifts
            themselves; ``"vector"``, the 100-number style vector they are made from (fewer
            numbers, the network's own map from vector to scales; docs/style.md compares them).
        content_margin: how much more content loss than in the one pass (the painting's predicted
            style, where learning starts) each photo may have: beyond ``1 + content_margin`` times
            it the excess costs ``margin_penalty`` times as much, so a subject the one pass keeps
            stays longer (docs/style.md measures it). None: the loss alone.
        margin_penalty: what each unit of content loss beyond the margin costs (0 to 10000;
            docs/style.md measures 10 and 100: more keeps the subject surer and moves less).
        **loss_options: options of the loss, as :meth:`nstcam.StyleTransfer.stylize` takes them
            (``strength``, ``style_weight``, ``style_layers``, ``style_loss``...);
            ``content_layers`` defaults to ``CONTENT_LAYERS`` here.

    Raises:
        LearnCancelled: ``callback`` returned False.
        ValueError: an argument out of range (named, with its range).
    """
    engine = default_teacher(fast) if engine is None else engine
    size, steps, batch = _checked(size, steps, batch, lr, minutes, engine, train)
    margin = _margin(content_margin, margin_penalty)
    loss_options = {"content_layers": CONTENT_LAYERS, **loss_options}
    style_img = load_image(painting)
    teacher = engine.perceptual_loss(style_img, size=size, **loss_options)  # its options checked here
    pool = [p.to(fast.device) for p in _photos(photos, size)]
    t = fast.arbitrary_net.transformer
    leaves, current, start = _trained(t, fast.style_vector(style_img), train)
    label = name or (Path(painting).stem if isinstance(painting, (str, Path)) else "painting")
    settings = _settings(size, batch, lr, seed, train, margin, loss_options)
    losses: list[float] = []

    def snapshot() -> LearnedStyle:
        with torch.no_grad():
            flat = [p for pair in current() for p in pair]
        return LearnedStyle.of(flat, painting=label, settings=settings, losses=losses, engine=engine)

    opt = torch.optim.Adam(leaves, lr=float(lr))
    gen = torch.Generator().manual_seed(int(seed))
    t0, bar = time.perf_counter(), _bar(steps, progress_bar)
    try:  # torch's own thread count (not sized to the load): one seed, the same bits
        with teacher as loss_fn:
            held = _Margin(margin, loss_fn, t, pool, start, size)
            for step in range(1, steps + 1):
                x, which = _draw(pool, size, batch, gen)
                losses.append(_step(opt, held.loss(loss_fn(t.paint(x, current()), x), which)))
                seconds = time.perf_counter() - t0
                _show(bar, losses[-1])
                if (
                    callback is not None
                    and callback(LearnStep(step, steps, losses[-1], seconds, snapshot())) is False
                ):
                    raise LearnCancelled(snapshot())
                if minutes is not None and seconds >= float(minutes) * 60:
                    logger.info("learning stopped at its %g minute(s): step %d of %d", minutes, step, steps)
                    break
    finally:
        if bar is not None:
            bar.close()
    return snapshot()


class _Margin:
    """The content margin: each training photo's weighted content loss painted the one pass's way
    (the painting's predicted style, where learning starts), read once per photo, when one of its
    crops is first drawn (the loss is a ratio, the same at any size), bounds its crops' own."""

    def __init__(
        self,
        margin: tuple[float, float] | None,
        loss_fn: Any,
        t: Any,
        pool: list[torch.Tensor],
        start: Any,
        size: int,
    ) -> None:
        self.margin, self._most = margin, REFERENCE_AREA * size**2
        self._loss, self._t, self._pool, self._start = loss_fn, t, pool, start
        self._read: dict[int, torch.Tensor] = {}

    def loss(self, terms: torch.Tensor, which: list[int]) -> torch.Tensor:
        """Each crop's loss from the teacher's (4, N) ``terms``: the weighted total, plus, with a
        margin ``(fraction, penalty)``, ``penalty`` times its content loss beyond ``1 + fraction``
        times its photo's (``which``: the photo each crop came from)."""
        if self.margin is None:
            return terms[0]
        reference = torch.stack([self._reference(k) for k in which])
        fraction, penalty = self.margin
        return terms[0] + penalty * torch.relu(terms[1] - (1 + fraction) * reference)

    def _reference(self, k: int) -> torch.Tensor:
        if k not in self._read:
            p = self._pool[k]
            h, w = p.shape[-2:]
            if h * w > self._most:  # a panorama: its middle, REFERENCE_AREA crops' pixels, at full scale
                keep_h, keep_w = (min(h, self._most // w), w) if h > w else (h, min(w, self._most // h))
                top, left = (h - keep_h) // 2, (w - keep_w) // 2
                p = p[..., top : top + keep_h, left : left + keep_w]
            p = p[..., : p.shape[-2] // 4 * 4, : p.shape[-1] // 4 * 4]  # the network's multiples of 4
            with torch.no_grad():
                self._read[k] = self._loss(self._t.paint(p, self._start), p)[1, 0]
        return self._read[k]


def _settings(
    size: int,
    batch: int,
    lr: float,
    seed: int,
    train: str,
    margin: tuple[float, float] | None,
    loss_options: dict,
) -> dict[str, Any]:
    """What the style file records of how it was learned (its metadata's ``settings``)."""
    return {
        "size": size,
        "batch": batch,
        "lr": float(lr),
        "seed": int(seed),
        "train": train,
        "content_margin": None if margin is None else margin[0],
        "margin_penalty": None if margin is None else margin[1],
        **loss_options,
    }


def _step(opt: Any, losses: torch.Tensor) -> float:
    """One Adam step on the mean of the crops' ``losses``; that mean."""
    loss = losses.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


TRAINED = ("norm", "vector")
"""What :func:`learn_style` may train: the normalisation parameters, or the style vector."""


def _trained(
    t: Any, vector: torch.Tensor, train: str
) -> tuple[list[torch.Tensor], Callable[[], Any], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The tensors Adam trains, from the painting's predicted style ``vector`` (1, 100), a function
    giving the (scale, shift) pairs they set now, and those pairs at the start (the one pass's
    style, kept apart from what Adam trains)."""
    if train == "vector":
        vec = vector.detach().clone().requires_grad_(True)
        leaves, current = [vec], lambda: t.norm_params(vec)
    else:
        with torch.no_grad():
            first = t.norm_params(vector)
        params = [p.detach().clone().requires_grad_(True) for pair in first for p in pair]
        leaves, current = params, lambda: list(zip(params[0::2], params[1::2], strict=True))
    with torch.no_grad():
        start = [(s.clone(), b.clone()) for s, b in current()]
    return leaves, current, start


def _checked(
    size: Any, steps: Any, batch: Any, lr: Any, minutes: Any, engine: Any, train: Any
) -> tuple[int, int, int]:
    """The arguments in range, before any work (each error names its argument and its range): the
    size, steps and batch as whole numbers."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < float(lr) <= 1:
        raise ValueError(f"lr must be in (0, 1], got {str(lr)[:20]}")
    if minutes is not None and (
        isinstance(minutes, bool)
        or not isinstance(minutes, (int, float))
        or not 0 < float(minutes) <= 24 * 60
    ):
        raise ValueError(f"minutes must be in (0, 1440], got {str(minutes)[:20]}")
    if not callable(getattr(engine, "perceptual_loss", None)):
        raise ValueError(
            "engine must be a StyleTransfer (its hooked VGG loss teaches): engine=StyleTransfer()"
        )
    if train not in TRAINED:
        raise ValueError(f"train must be {' or '.join(map(repr, TRAINED))}, got {str(train)[:20]!r}")
    return (
        whole("size", size, minimum=64, maximum=1024),
        whole("steps", steps, minimum=1, maximum=100_000),
        whole("batch", batch, minimum=1, maximum=16),
    )


def _margin(content_margin: Any, margin_penalty: Any) -> tuple[float, float] | None:
    """The content margin as ``(fraction, penalty)``, each in range (None: no margin)."""
    penalty = finite("margin_penalty", margin_penalty, minimum=0, maximum=10_000)
    if content_margin is None:
        return None
    return finite("content_margin", content_margin, minimum=0, maximum=10), penalty


def _show(bar: Any, loss: float) -> None:
    if bar is not None:
        bar.set_postfix(loss=f"{loss:.4g}")
        bar.update()


def _bar(steps: int, progress_bar: bool | None) -> Any:
    import sys

    from tqdm.auto import tqdm

    show = sys.stderr.isatty() if progress_bar is None else progress_bar
    return tqdm(total=steps, desc="learn style", unit="step") if show else None


def paint_learned(
    fast: Any, img: Image.Image, style: LearnedStyle, strength: float, source: str = ""
) -> tuple[Stages, str, dict]:
    """The arbitrary transformer's stages that paint with a learned style (:class:`Stages`: the
    engine runs them whole or in tiles), what paints and its parameters; below strength 1 the
    style's scales and shifts move toward the photo's own (its predicted style), as a style
    vector's do."""
    t = fast.arbitrary_net.transformer
    params = [(s.to(fast.device), b.to(fast.device)) for s, b in style.params]
    if strength < 1.0:
        own = t.norm_params(fast.style_vector(img))
        params = [
            (strength * s + (1 - strength) * os, strength * b + (1 - strength) * ob)
            for (s, b), (os, ob) in zip(params, own, strict=True)
        ]
    note = ", learned on a VGG with RANDOM weights: not meaningful" if style.random_weights else ""
    what = f"Magenta's arbitrary style network (Ghiasi et al. 2017){source}, a learned style{note}"
    return t.stages(params), what, {"style": "learned", "painting": style.meta.get("painting", "")}

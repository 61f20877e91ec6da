"""A learned style (issue 65): the arbitrary network's 13 normalisation scales and shifts for one
painting, a small object of its own and a safetensors file (about 3 KB of numbers and its metadata).

A file is read like any upload: its size first, then the header (safetensors' own parser; no code
runs), then each tensor's name, shape, dtype and values, and refused in one line naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "LEARNED_CHANNELS",
    "MAX_FILE_BYTES",
    "LearnedStyle",
    "LearnedStyleError",
    "holds_learned",
    "is_style_file",
]

LEARNED_CHANNELS = (32,) * 10 + (16, 8, 3)
"""Each styled convolution's channels in the arbitrary transformer, in the order it paints."""
MAX_FILE_BYTES = 1 << 20
"""The largest style file read (a real one is about 3 KB plus its loss curve)."""
MAX_VALUE = 1e4
"""The largest magnitude a learned scale or shift may hold (the predicted ones stay under 50)."""
_FORMAT = "nstcam learned style 1"


class LearnedStyleError(ValueError):
    """A style file that is not a learned style (one line naming the file and what is wrong)."""


def is_style_file(style: object) -> bool:
    """``style`` names a learned style's file (a ``.safetensors`` path) rather than an image."""
    return isinstance(style, (str, Path)) and str(style).lower().endswith(".safetensors")


@dataclass(frozen=True)
class LearnedStyle:
    """A style learned by :meth:`nstcam.FastStyle.learn`: each styled convolution's normalisation
    scale and shift, (1, C, 1, 1) float32 each, and what made it.

    Attributes:
        params: ((scale, shift), ...) in the order of ``LEARNED_CHANNELS``.
        meta: the painting's name, the settings, the loss curve and the VGG's weights, as strings.
    """

    params: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    meta: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        flat: Sequence[torch.Tensor],
        *,
        painting: str,
        settings: Mapping[str, Any],
        losses: Sequence[float],
        engine: Any = None,
    ) -> LearnedStyle:
        """A snapshot (copies on the CPU) of ``flat`` (scale, shift, scale, shift, ...)."""
        values = [p.detach().to("cpu", torch.float32).clone() for p in flat]
        params = tuple(zip(values[0::2], values[1::2], strict=True))
        info = getattr(engine, "weights", None)
        meta = {
            "format": _FORMAT,
            "painting": str(painting)[:200],
            "settings": json.dumps(dict(settings), default=str),
            "losses": json.dumps([round(float(v), 6) for v in losses]),
            "steps": str(len(losses)),
            "vgg": str(getattr(info, "notice", "unknown"))[:300],
            "random_weights": str(bool(getattr(info, "is_random", False))).lower(),
        }
        return cls(params, meta)

    @property
    def random_weights(self) -> bool:
        """Learned on a VGG with random weights: its paintings are not meaningful."""
        return self.meta.get("random_weights") == "true"

    @property
    def losses(self) -> list[float]:
        """The loss of every step of its learning."""
        return json.loads(self.meta.get("losses", "[]"))

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensors by name, as saved: ``norm.{i}.scale`` and ``norm.{i}.shift``."""
        out = {}
        for i, (s, b) in enumerate(self.params):
            out[f"norm.{i}.scale"], out[f"norm.{i}.shift"] = s.contiguous(), b.contiguous()
        return out

    def save(self, path: str | Path) -> Path:
        """Writes the style as a safetensors file (its metadata: ``meta``); returns the path."""
        from safetensors.torch import save_file

        path = Path(path)
        save_file(self.tensors(), str(path), metadata=dict(self.meta))
        return path

    @classmethod
    def load(cls, path: str | Path) -> LearnedStyle:
        """Reads and checks a style file.

        Raises:
            LearnedStyleError: the file is too large, not safetensors, or holds other tensors than a
                learned style's (names, shapes, dtype), or values that are not finite or too large.
            FileNotFoundError: there is no such file.
        """
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        name = path.name[:80]
        if not path.is_file():
            raise FileNotFoundError(f"style file {name} does not exist")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise LearnedStyleError(
                f"style file {name} is {size:,} bytes; a learned style is at most {MAX_FILE_BYTES:,}"
            )
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = dict(f.metadata() or {})
                keys = set(f.keys())
                tensors = {k: f.get_tensor(k) for k in keys} if keys == _expected_names() else {}
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise LearnedStyleError(  # the error's type only: its text may hold the file's path
                f"style file {name} is not a safetensors file ({type(e).__name__}); "
                "make one with nstcam learn-style or FastStyle.learn"
            ) from None
        if meta.get("format") != _FORMAT or keys != _expected_names():
            raise LearnedStyleError(
                f"style file {name} is not an nstcam learned style: it holds {len(keys)} tensors, "
                f"a learned style {len(_expected_names())} (norm.0.scale ... norm.12.shift); "
                "make one with nstcam learn-style or FastStyle.learn"
            )
        params = []
        for i, c in enumerate(LEARNED_CHANNELS):
            pair = []
            for part in ("scale", "shift"):
                t = tensors[f"norm.{i}.{part}"]
                if t.dtype != torch.float32 or tuple(t.shape) != (1, c, 1, 1):
                    raise LearnedStyleError(
                        f"style file {name}: norm.{i}.{part} is {t.dtype} {tuple(t.shape)}, "
                        f"expected float32 (1, {c}, 1, 1)"
                    )
                if not torch.isfinite(t).all() or t.abs().max() > MAX_VALUE:
                    raise LearnedStyleError(
                        f"style file {name}: norm.{i}.{part} holds values not finite or over {MAX_VALUE:g}"
                    )
                pair.append(t)
            params.append(tuple(pair))
        return cls(tuple(params), {k: str(v)[:100_000] for k, v in meta.items()})


def _expected_names() -> set[str]:
    return {f"norm.{i}.{part}" for i in range(len(LEARNED_CHANNELS)) for part in ("scale", "shift")}


def holds_learned(styles: Sequence[object]) -> bool:
    """Some of ``styles`` is a learned style (or its file): the list blends by ``FastStyle.blend``."""
    return any(isinstance(s, LearnedStyle) or is_style_file(s) for s in styles)

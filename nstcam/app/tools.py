"""What each endpoint says about itself: the API docs and, with ``python app.py --mcp``, the
description an AI agent reads of each Model Context Protocol tool; and the method menu's labels.

Gradio builds a tool from the endpoint function's docstring (a paragraph, then ``Args:`` with one
``name: description`` line per parameter, then ``Returns:``) and its type hints. Each tab holds its
endpoint's docstring (``DOC``) with the limits as fields; :func:`fill_doc` fills in this server's
(:class:`AppConfig`), and the lists the registries give (CAM methods, style losses, models).
"""

from __future__ import annotations

from nstcam.app.config import AppConfig
from nstcam.app.guard.cost import faithfulness_curves
from nstcam.cam import METHODS, PERTURBATION_METHODS, REGISTRY, TARGET_METHODS
from nstcam.cam.layers import DETECTOR_ARCHS, SEGMENTER_ARCHS
from nstcam.style import stylize_defaults
from nstcam.style.losses import REGISTRY as STYLE_LOSSES

__all__ = ["clip_methods", "fill_doc", "method_choices", "method_note"]

_IMAGE = "an image as an http(s) URL or a data: URL (PNG, JPEG, WebP...; at most {upload} MB, 40 megapixels)"


def fill_doc(doc: str, config: AppConfig, **ranges: tuple[float, float]) -> str:
    """An endpoint's docstring ``doc`` with this server's limits and lists filled in; ``ranges``: a
    tab's own ranges (``temporal_range=(0, 1000)`` fills ``{temporal_range}`` as "0 to 1000"), from
    the one tuple its slider and its check read too."""
    on_gpu = config.torch_device.type != "cpu"
    fields = {
        "device": config.torch_device.type.upper(),
        "cost": "far faster than on a CPU" if on_gpu else "slow, so prefer small sizes and steps",
        "style_mode": config.style_mode,
        "upload": f"{config.max_upload_mb:g}",
        "max_size": config.max_size,
        "max_steps": config.max_steps,
        "scorecam": config.scorecam_budget,
        "archs": ", ".join(config.cam_archs),
        "methods": ", ".join(METHODS),
        "explain_archs": ", ".join(config.explain_archs),
        "detectors": ", ".join(a for a in config.found_archs if a in DETECTOR_ARCHS),
        "segmenters": ", ".join(a for a in config.found_archs if a in SEGMENTER_ARCHS),
        "target_methods": ", ".join(TARGET_METHODS),
        "style_losses": "; ".join(f'"{name}" ({loss.summary})' for name, loss in STYLE_LOSSES.items()),
        "perturbation": ", ".join(PERTURBATION_METHODS),
        "samples": "; ".join(
            f"{m}: times {REGISTRY[m].samples} samples"
            for m in PERTURBATION_METHODS
            if REGISTRY[m].samples > 1
        ),
        "passes": f"about {faithfulness_curves(config)}",
        **{k: _weight(v) for k, v in stylize_defaults().items() if k.endswith("_weight")},
        "video_seconds": config.max_video_seconds,
        "video_pixels": config.max_video_pixels,
        "clip_archs": ", ".join(config.clip_archs),
        "clip_methods": ", ".join(clip_methods()),
    } | {name: "{:g} to {:g}".format(*bounds) for name, bounds in ranges.items()}
    fields["image"] = _IMAGE.format(**fields)
    return doc.format(**fields)


def _weight(value: float | None) -> str:
    """A loss weight's default as the docs say it (the style weight's: from the strength)."""
    if value is None:
        from nstcam.style import strength_weight

        return f"{strength_weight(1.0):g} at strength 1"
    return f"{value:g}"


def clip_methods() -> tuple[str, ...]:
    """Methods the Explain a clip tab offers: one forward and one backward pass a window (the
    perturbation ones would cost a pass per channel per window; KPCA an eigensolve of the window's
    positions)."""
    return tuple(
        name
        for name, m in REGISTRY.items()
        if m.flat_only is None and m.family in ("gradient", "gradient-free") and name != "kpcacam"
    )


_FAMILIES = {
    "gradient": "Gradient",
    "gradient-free": "Gradient-free",
    "perturbation": "Perturbation",
    "other": "Whole network",
}


def method_choices() -> list[tuple[str, str]]:
    """The Grad-CAM methods as (label, value), grouped by family in the catalogue's order."""
    order = list(_FAMILIES)
    items = sorted(REGISTRY.items(), key=lambda kv: order.index(kv[1].family))
    return [(f"{_FAMILIES[info.family]} · {name}", name) for name, info in items]


def method_note(method: str) -> str:
    """One line under the method menu: what it computes and what it costs."""
    info = REGISTRY.get(method, None)
    return f"{info.summary}; costs {info.cost} ({info.paper})" if info else ""

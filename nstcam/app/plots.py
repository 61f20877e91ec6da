"""Figures the app shows: the deletion and insertion curves of a map beside a random map's, and a
clip's class scores over time."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from nstcam.cam.clips import score_text
from nstcam.metrics import Faithfulness
from nstcam.metrics.registry import METRICS, better_word

__all__ = ["curves_figure", "scores_figure"]


def curves_figure(
    ours: Faithfulness, chance: Faithfulness, title: str, centre: Faithfulness | None = None
) -> Image.Image:
    """Two panels: the target's score as the most relevant pixels are deleted (left) and inserted
    into a blurred copy (right), for the map, a random map and (given) a centre blob, with each
    curve's area."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 2.8), dpi=100, layout="constrained")
    curves_of = ("deletion", "insertion")
    panels = [(f"{k.capitalize()} ({better_word(METRICS[k])} area is better)", k) for k in curves_of]
    for i, (name, key) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        curves = [(ours, "this map", "-"), (chance, "random map", "--")]
        if centre is not None:
            curves.append((centre, "centre blob", ":"))
        for f, label, style in curves:
            y, auc = getattr(f, f"{key}_curve"), getattr(f, f"{key}_auc")
            ax.plot(np.linspace(0, 1, len(y)), y, style, label=f"{label} (AUC {auc:.3f})")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(f"share of pixels {'removed' if key == 'deletion' else 'inserted'}", fontsize=8)
        ax.set_ylabel("class probability", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def scores_figure(result: Any) -> Image.Image:
    """Each explained class's probability over the clip (a :class:`nstcam.cam.VideoCamResult`): the
    windows' scores blended per frame, the strongest window shaded."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 2.6), dpi=100, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    t = result.times()
    for c in result.classes:
        ax.plot(t, c.frame_scores, label=f"{c.label} (mean {score_text(c.score)})")
    first, last = result.classes[0].peak
    ax.axvspan(first / result.fps, (last + 1) / result.fps, alpha=0.15, color="C0")
    ax.set_xlabel("time (s)", fontsize=8)
    ax.set_ylabel("class probability", fontsize=8)
    top = max(float(np.max(c.frame_scores)) for c in result.classes)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)  # the highest line clear of the frame
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    ax.set_title(f"{result.name}: score over time ({result.window}-frame windows)", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")

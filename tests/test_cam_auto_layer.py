"""Issue 53: ``GradCAM(..., target_layer="auto")`` chooses the layer by evidence (random weights and a
known-answer network, 64 px)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _clipnet import BrightNet
from _numeric import bound
from PIL import Image
from torch import nn

from nstcam import GradCAM
from nstcam.cam.auto_layer import LAYER_PHOTOS, auto_candidates, choose_layer
from nstcam.metrics import deletion_auc


class TwoPaths(nn.Module):
    """Class 1 is the bright area, read by ``bright``; ``blind`` computes beside it and never reaches
    the logits: its Grad-CAM map is zero, so the pixels it "explains" are merely the first ones."""

    def __init__(self) -> None:
        super().__init__()
        self.bright = BrightNet(dims=2, channels=3)
        self.blind = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bright(x) + 0 * self.blind(x).mean((1, 2, 3))[:, None]


def squares(n: int = 3) -> list[Image.Image]:
    out = []
    for i in range(n):
        a = np.full((64, 64, 3), 40, np.uint8)
        a[20 + 3 * i : 44 + 3 * i, 24 - 2 * i : 48 - 2 * i] = 255
        out.append(Image.fromarray(a))
    return out


def test_the_layer_that_reads_the_object_is_chosen_and_said():
    cam = GradCAM(
        TwoPaths(),
        target_layer="auto",
        layer_images=squares(),
        layer_candidates=["blind", "bright.relu"],
        input_size=64,
        mean=0.45,
        std=0.225,
        device="cpu",
    )
    choice = cam.layer_choice
    assert cam.target_layer == choice.layer == "bright.relu" and choice.images == 3
    low_blind, high_chosen = choice.scores["blind"][1], choice.scores["bright.relu"][2]
    bound("blind's deletion interval's low less the chosen's high", low_blind - high_chosen, ">", 0)
    assert choice.ranks == {"bright.relu": 1, "blind": 2}  # the intervals are apart
    assert (
        choice.why().startswith("bright.relu: deletion ")
        and "the best of 2 candidates (blind " in choice.why()
    )


def test_the_scores_are_the_metric_of_each_candidates_own_maps():
    """Each candidate's score equals deletion AUC of a GradCAM built at that layer, computed here."""
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    photos = LAYER_PHOTOS[:2]
    choice = choose_layer(cam, photos, candidates=["layer3", "layer4"], steps=5, bootstrap=100)
    for layer in ("layer3", "layer4"):
        one = GradCAM(cam.model, target_layer=layer, device="cpu", input_size=64)
        aucs = []
        for p in photos:
            x = one.preprocess(Image.open(p).convert("RGB"))
            t = int(one.predict(x).argmax())
            aucs.append(float(deletion_auc(cam.model, x, one.compute(x, t), t, steps=5)[0]))
        assert choice.scores[layer][0] == pytest.approx(np.mean(aucs), abs=1e-6)
    assert choice.layer == min(choice.scores, key=lambda k: choice.scores[k][0])
    assert next(iter(choice.scores)) == choice.layer  # best first


def test_candidates_the_method_cannot_read_are_left_out_with_the_reason():
    cam = GradCAM(
        "resnet18",
        weights="random",
        device="cpu",
        input_size=64,
        method="cam",
        target_layer="auto",
        layer_images=LAYER_PHOTOS[:1],
        layer_candidates=["layer3", "layer4"],
    )
    assert cam.target_layer == "layer4" and "layer3" in cam.layer_choice.skipped
    assert "left out: layer3 (method 'cam' needs" in cam.layer_choice.why()


def test_default_candidates_are_the_deepest_stages():
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    assert auto_candidates(cam.model) == ["layer1", "layer2", "layer3", "layer4"]


def test_what_auto_cannot_score_is_refused_by_name():
    cam = GradCAM("resnet18", weights="random", device="cpu", input_size=64)
    with pytest.raises(ValueError, match="layer_metric must be one of deletion, insertion, correlation"):
        choose_layer(cam, metric="road")
    with pytest.raises(ValueError, match="layer_images must hold 1 to 16 images, got 0"):
        choose_layer(cam, [])
    seg = GradCAM("lraspp_mobilenet_v3_large", weights="random", device="cpu")
    with pytest.raises(ValueError, match="target_layer='auto' scores an image classifier's .* segmenter"):
        choose_layer(seg)


def test_the_cli_chooses_the_layer_and_says_why(tmp_path, caplog):
    from nstcam.cli import main

    cat = str(LAYER_PHOTOS[0])
    args = ["cam", cat, "--arch", "resnet18", "--weights", "random", "--input-size", "64", "--layer", "auto"]
    with caplog.at_level("INFO", logger="nstcam.cam.auto_layer"):
        assert main([*args, "-o", str(tmp_path)]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "nstcam.cam.auto_layer"]
    assert len(said) == 1 and said[0].startswith("target_layer='auto' chose layer")
    sidecar = json.loads((tmp_path / "chelsea_cam.json").read_text())
    assert "over 3 images" in said[0] and sidecar["layer"] == said[0].split()[2].rstrip(":")

"""A model's own preprocessing, timm by name, and the checks that read a real model as it is (issue
40), on seeded random weights (the real ones: ``test_real_weights.py``)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import pattern
from PIL import Image
from torch import nn

from nstcam import GradCAM, Preprocess
from nstcam.image import image_to_tensor
from nstcam.preprocess import preprocess_for


def tiny(act: type[nn.Module] = nn.ReLU) -> nn.Module:
    layers = [nn.Conv2d(3, 8, 3, padding=1), act(), nn.Conv2d(8, 8, 3, padding=1), act()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def test_given_statistics_are_what_the_model_sees():
    torch.manual_seed(0)
    model = tiny()
    cam = GradCAM(model, target_layer="2", device="cpu", input_size=32, mean=0.5, std=(0.25, 0.5, 1.0))
    img = pattern(1, 48, 32)
    x = cam.preprocess(img)
    pixels = image_to_tensor(img.resize((48, 32), Image.Resampling.BILINEAR))[0]
    torch.testing.assert_close(x[0], (pixels - 0.5) / torch.tensor([0.25, 0.5, 1.0]).view(3, 1, 1))
    assert cam.preprocessing.source == "given"


def test_statistics_are_read_from_a_transform_or_the_model_else_imagenet_with_a_warning(caplog):
    from torchvision.models import ResNet18_Weights

    t = preprocess_for(tiny(), transform=ResNet18_Weights.DEFAULT.transforms())
    assert t.is_imagenet and t.input_size == 224 and t.interpolation == "bilinear"
    cfg = {
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "input_size": (3, 256, 256),
        "interpolation": "bicubic",
    }
    d = preprocess_for(tiny(), transform=cfg)
    assert d.mean == (0.5,) * 3 and d.input_size == 256 and d.interpolation == "bicubic"
    model = tiny()
    model.pretrained_cfg = cfg  # as timm's models carry it
    assert preprocess_for(model).mean == (0.5,) * 3
    assert preprocess_for(model, std=0.2).std == (0.2,) * 3  # given over read
    caplog.set_level(logging.WARNING)
    assert preprocess_for(tiny()).is_imagenet
    assert "assuming ImageNet mean/std; pass mean= and std=" in caplog.text
    caplog.clear()
    preprocess_for(tiny(), mean=0.4, std=0.3)
    assert not caplog.records
    built = GradCAM("resnet18", weights="random", device="cpu")
    assert built.preprocessing.is_imagenet and built.preprocessing.source.startswith("torchvision resnet18")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mean": (0.5, 0.5)}, "mean must be 3 finite numbers"),
        ({"std": (0.5, 0.0, 0.5)}, "std must be above 0"),
        ({"mean": "grey"}, "mean must be 3 numbers"),
        ({"transform": 7}, "transform must be a nstcam.Preprocess"),
    ],
)
def test_bad_statistics_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GradCAM(tiny(), target_layer="2", device="cpu", **kwargs)


def test_the_model_positional_once_and_messages_never_print_a_model():
    model = tiny()
    cam = GradCAM(model, target_layer="2", device="cpu", mean=0.5, std=0.5)
    assert cam.model is model
    with pytest.raises(ValueError, match="give the model once"):
        GradCAM(model, model=model, target_layer="2", device="cpu")
    big = nn.Sequential(*[nn.Linear(4, 4) for _ in range(300)])
    for bad in ({"weights": big}, {"arch": 3.5}):
        with pytest.raises((ValueError, TypeError)) as e:
            GradCAM(**bad, device="cpu")
        assert len(str(e.value)) < 1200 and "Linear(" not in str(e.value)
    with pytest.raises(ValueError) as e:
        GradCAM(big, device="cpu", mean=0.5, std=0.5)  # no default layer: said without the printout
    assert "Linear(" not in str(e.value) and len(str(e.value)) < 400


def test_std_alone_with_a_noise_method_is_still_the_noise():
    cam = GradCAM(tiny(), target_layer="2", method="smoothgradcam++", std=0.2, device="cpu", mean=None)
    assert cam.noise_std == 0.2 and cam.preprocessing.source == "ImageNet, assumed"
    cam = GradCAM(tiny(), target_layer="2", method="smoothgradcam++", std=0.2, mean=0.5, device="cpu")
    assert cam.noise_std is None and cam.preprocessing.std == (0.2,) * 3


def test_guided_backprop_reads_relu6_and_says_what_a_model_has_instead():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    maps = GradCAM(
        tiny(nn.ReLU6), target_layer="2", method="guided-backprop", device="cpu", mean=0.5, std=0.5
    )
    assert maps.compute(x).abs().sum() > 0
    with pytest.raises(ValueError, match=r"guides ReLU and ReLU6 modules.*activation modules: 2 SiLU"):
        GradCAM(tiny(nn.SiLU), target_layer="2", method="guided-backprop", device="cpu", mean=0.5, std=0.5)


class _NormAct(nn.BatchNorm2d):
    """A BatchNorm2d subclass with its activation inside (timm's BatchNormAct2d)."""

    def forward(self, x):
        return torch.relu(super().forward(x))


def test_fullgrad_reads_batchnorm_subclasses():
    body = [nn.Conv2d(3, 8, 3, padding=1, bias=False), _NormAct(8)]
    model = nn.Sequential(*body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)).eval()
    cam = GradCAM(model, target_layer="1", method="fullgrad", device="cpu", mean=0.5, std=0.5)
    assert cam.compute(torch.randn(1, 3, 32, 32)).shape == (1, 32, 32)
    biasless = nn.Sequential(
        nn.Conv2d(3, 4, 3, bias=False), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )
    with pytest.raises(ValueError, match=r"has none with a bias \(its 1 Conv2d without a bias"):
        GradCAM(biasless, target_layer="0", method="fullgrad", device="cpu", mean=0.5, std=0.5)


timm = pytest.importorskip("timm")


@pytest.mark.parametrize(
    ("name", "layer", "layout"),
    [
        ("efficientnet_lite0", "bn2", None),
        ("resnet18", "layer4", None),
        ("convnext_atto", "norm_pre", None),
        ("mobilenetv3_small_050", "blocks", None),  # its stages; its head pools before conv_head
        ("vit_tiny_patch16_224", "blocks.11.norm1", "tokens"),
        ("deit_tiny_distilled_patch16_224", "blocks.11.norm1", "tokens"),  # class and distillation tokens
        ("regnetx_002", "final_conv", None),
        ("swin_tiny_patch4_window7_224", "norm", None),  # channels-last, read from the shape
    ],
)
def test_timm_by_name_with_each_familys_default_layer(name, layer, layout):
    cam = GradCAM(f"timm:{name}", weights="random", device="cpu")
    assert cam.target_layer == layer and cam.layout == layout and cam.layers[-1] == layer
    assert cam.weights.is_random and cam.preprocessing.source.startswith("timm pretrained_cfg")
    (r,) = cam.explain(pattern(3, 96, 64), top_k=1)
    assert r.heatmap.shape == (64, 96) and float(np.ptp(r.heatmap)) > 0
    assert r.label  # ImageNet's names: timm's 1000 classes


def test_timm_names_and_weights_are_checked():
    with pytest.raises(
        ValueError, match=r"timm has no model 'efficientnet_lite9' \(closest: efficientnet_lite"
    ):
        GradCAM("timm:efficientnet_lite9", weights="random", device="cpu")
    with pytest.raises(FileNotFoundError, match="weights file not found"):
        GradCAM("timm:resnet18", weights="nowhere/r18.pth", device="cpu")


def test_the_cli_takes_mean_std_and_timm_names():
    from nstcam.cli import build_parser
    from nstcam.cli.cam import _stats

    args = build_parser().parse_args(
        [
            "cam",
            "x.jpg",
            "-o",
            "out",
            "--arch",
            "timm:resnet18",
            "--mean",
            "0.5",
            "--std",
            "0.2",
            "0.3",
            "0.4",
        ]
    )
    assert args.arch == "timm:resnet18" and _stats(args.mean) == 0.5 and _stats(args.std) == (0.2, 0.3, 0.4)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cam", "x.jpg", "--arch", "resnet9000"])
    assert Preprocess(mean=0.5, std=0.5).denormalize(torch.zeros(3, 1, 1)).flatten().tolist() == [0.5] * 3

"""The engines' options objects (issue 75): :class:`nstcam.StyleOptions` and :class:`nstcam.CamOptions`
shown where users look (``help()``, ``inspect.signature``, IDEs through ``Unpack``), and GradCAM's one
checked object behind its unchanged keywords."""

from __future__ import annotations

import inspect

import pytest


def _engines_options():
    from nstcam import GradCAM, StyleTransfer
    from nstcam.cam import CamChanges, CamOptions
    from nstcam.style import StyleChanges, StyleOptions

    style = (StyleTransfer.stylize, StyleTransfer.plan, StyleTransfer.perceptual_loss)
    return [(StyleOptions, StyleChanges, style), (CamOptions, CamChanges, (GradCAM.__init__,))]


@pytest.mark.parametrize("which", ["style", "cam"])
def test_the_options_are_shown_where_users_look(which):
    """Issue 75: ``help()``, ``inspect.signature`` and notebooks show every option of
    :meth:`StyleTransfer.stylize` (and of ``plan`` and ``perceptual_loss``) and of :class:`GradCAM`
    with its type and default, and IDEs read them from ``StyleChanges`` / ``CamChanges``: each is its
    options object's own, field by field, with nothing declared twice."""
    import dataclasses
    import typing

    options, changes, functions = _engines_options()[["style", "cam"].index(which)]
    fields = dataclasses.fields(options)
    names = tuple(f.name for f in fields)
    assert tuple(changes.__annotations__) == names and not changes.__required_keys__
    assert len(typing.get_type_hints(changes)) == len(fields)  # every hint resolves
    for f in fields:  # the same type, as written
        assert changes.__annotations__[f.name].__forward_arg__ == f.type, f.name
    for fn in functions:
        params = inspect.signature(fn).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), fn.__qualname__
        assert set(names) <= set(params), fn.__qualname__
        for f in fields:
            p = params[f.name]
            shown = p.default, p.annotation
            assert shown == (f.default, f.type) or (
                p.default is None and p.kind is p.POSITIONAL_OR_KEYWORD
            ), f.name
        assert f"Unpack[{changes.__name__}]" in inspect.getsource(fn)
    if which == "style":  # what the call receives as changes
        bound = inspect.signature(functions[0]).bind(None, "c.png", "s.png", size=64, style_loss="sliced")
        assert bound.kwargs == {"size": 64, "style_loss": "sliced"}


def test_gradcams_options_are_one_checked_object():
    """Issue 75: ``GradCAM(..., options=CamOptions(...))`` is the keyword call, keywords change it,
    and a bad value or an unknown name is refused before any network is built."""
    import torch

    from nstcam import GradCAM
    from nstcam.cam import CamOptions

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    ).eval()
    o = CamOptions(target_layer="1", method="gradcam++", alpha=0.25, input_size=32)
    by_keywords = GradCAM(
        model=net, target_layer="1", method="gradcam++", alpha=0.25, input_size=32, device="cpu"
    )
    by_object = GradCAM(model=net, options=o, device="cpu")
    changed = GradCAM(model=net, options=o, device="cpu", alpha=0.75, method="xgradcam")
    assert by_keywords.options == by_object.options == o
    assert (changed.options.alpha, changed.method, changed.options.target_layer) == (0.75, "xgradcam", "1")
    img = (torch.rand(40, 40, 3) * 255).to(torch.uint8).numpy()
    a = by_keywords.explain(img, target=1)[0].heatmap
    b = by_object.explain(img, target=1)[0].heatmap
    assert (a == b).all() and a.std() > 0
    with pytest.raises(ValueError, match="alpha must be <= 1"):
        CamOptions(alpha=2)
    with pytest.raises(ValueError, match="layer_metric must be one of deletion"):
        GradCAM(model=net, target_layer="1", layer_metric="area", device="cpu")
    with pytest.raises(TypeError, match="'colourmap' is not a GradCAM option; did you mean 'colormap'"):
        GradCAM(model=net, target_layer="1", colourmap="jet")
    assert CamOptions(method="sscam", std=0.2).noise_std == 0.2  # std= meant the noise's, as before


def test_one_registry_helper_and_one_of_name_the_choices_and_the_closest():
    """Issue 75: one registry helper (get, names, register, a did-you-mean error) and one ``one_of``
    that every registry and every "must be one of" of the package uses; a stranger's long value is
    shown cut, a non-string by its type only, and ``1`` is not ``"1"`` nor ``True``."""
    from nstcam._choices import MAX_SHOWN, Registry, one_of
    from nstcam.cam.registry import REGISTRY as METHODS
    from nstcam.fast._import import FAST_NETS
    from nstcam.style.losses import REGISTRY as LOSSES

    reg = Registry("colour", {"red": 1, "green": 2})
    assert reg.names() == ("red", "green") and reg.get("green") == 2 and reg.get("blue", 0) == 0
    with pytest.raises(
        ValueError, match=r"^colour must be one of red, green, got 'gren'; did you mean 'green'\?$"
    ):
        reg.get("gren")
    assert reg.register("blue", 3) == 3 and reg.names() == ("red", "green", "blue")
    with pytest.raises(TypeError, match="colour's name"):
        reg[""] = 4
    long = "x" * 10_000
    with pytest.raises(ValueError) as refused:
        reg.get(long)
    assert len(str(refused.value)) < 60 + MAX_SHOWN and "..." in str(refused.value)
    with pytest.raises(ValueError, match="got a list"):
        reg.get(["red"])
    assert one_of("mode", "fast", ("fast", "optimise")) == "fast"
    for wrong in ("1", True, 1.5):
        with pytest.raises(ValueError, match="n must be one of 1, 2 or None"):
            one_of("n", wrong, (1, 2), also=" or None")
    with pytest.raises(ValueError, match=r"method must be one of .*gradcam.*; did you mean 'gradcam'\?"):
        METHODS.get("gradcm")
    with pytest.raises(ValueError, match=r"style_loss must be one of gram, .*did you mean 'sliced'"):
        LOSSES.get("slice")
    with pytest.raises(ValueError, match="fast network must be one of multistyle26, arbitrary"):
        FAST_NETS.get("johnson")


def test_every_must_be_one_of_is_written_once():
    """Issue 75: 33 hand-written "must be one of" messages over 20 files and four did-you-mean helpers
    became ``nstcam._choices``: no other module of the package writes either."""
    import re
    from pathlib import Path

    pkg = Path(__file__).resolve().parent.parent / "nstcam"
    offenders = []
    for path in pkg.rglob("*.py"):
        if path.name == "_choices.py":
            continue
        code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings may say it
        if re.search(r"must be one of \{|get_close_matches|import difflib", code):
            offenders.append(path.relative_to(pkg).as_posix())
    assert not offenders, offenders


def test_the_metrics_registry_is_what_the_reports_read():
    """Issue 75: each metric's name, family and which way is better in one registry, which the trust
    report, the faithfulness panel and the plots read (no table of its own)."""
    from nstcam.app.tabs.panels.faithfulness import _FIGURES
    from nstcam.cam.auto_layer import LAYER_METRICS
    from nstcam.cam.trust import HIGHER_IS_BETTER, TRUST_METRICS
    from nstcam.metrics import METRICS, Faithfulness

    assert {m.family for m in METRICS.values()} == {
        "faithfulness",
        "randomisation",
        "robustness",
        "complexity",
        "localisation",
    }
    assert HIGHER_IS_BETTER == {n: METRICS[n].higher_is_better for n in TRUST_METRICS}
    assert HIGHER_IS_BETTER["deletion"] is False and HIGHER_IS_BETTER["insertion"] is True
    assert set(LAYER_METRICS) <= set(METRICS)
    fields = {f for f in Faithfulness.__dataclass_fields__}
    assert [key for key, _, _ in _FIGURES] == ["confidence_change", "deletion_auc", "insertion_auc", "road"]
    assert {key for key, _, _ in _FIGURES} <= fields
    assert [better for _, _, better in _FIGURES] == ["higher", "lower", "higher", "higher"]

"""Every CAM method, one record each: what it is (for people), how it runs (for the engine).

The engine, the target-object path, the CUDA graphs, the app's choices and notes, the CLI's help,
the MCP docs and ``docs/cam-methods.md`` all read :data:`REGISTRY`; nothing else lists methods.
Adding a gradient method is one terms function (``methods/gradient.py``) and one record here; a
method with a pass of its own is one module in ``methods/`` and one record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from nstcam._choices import Registry
from nstcam.cam._request import Outputs, Request, TargetRequest
from nstcam.cam.methods import activation, fullgrad, gradient, guided, legrad, perturbation, shapley, smooth
from nstcam.cam.methods.activation import ActivationMap
from nstcam.cam.methods.gradient import Formula

__all__ = [
    "ACTIVATION_METHODS",
    "GRADIENT_METHODS",
    "GRAPHED_METHODS",
    "METHODS",
    "METHOD_INFO",
    "PERTURBATION_METHODS",
    "REGISTRY",
    "SPACETIME_METHODS",
    "TARGET_METHODS",
    "Method",
    "MethodInfo",
    "check_method",
    "method",
    "methods_table",
]

Check = Callable[[nn.Module, Sequence[str], str], None]
"""``check(model, layers, name)`` raises ValueError where the method cannot explain the model."""


@dataclass(frozen=True)
class Method:
    """One CAM method.

    Attributes:
        name: what ``GradCAM(method=...)`` takes.
        family: ``"gradient"``, ``"gradient-free"``, ``"perturbation"`` or ``"other"``.
        summary: one line: what it computes (the app's note, ``--help``, the docs' table).
        cost: what it costs, in passes.
        paper: the paper it comes from.
        libraries: the other libraries that have it (``pgc``: pytorch-grad-cam, ``torch-cam``).
        run: its whole call on a batch of class indices: a :class:`Request` in, raw maps out.
        targets: how it explains target objects (boxes, regions, any output): ``"one-pass"`` (one
            forward pass, a backward pass per row), ``"perturbation"`` (scored on changed inputs),
            ``"scored"`` (its own class pass on a model whose output is the target's score), or
            None (class indices only; a ClassTarget's logit is its class index).
        formula: a gradient method's map from (A, G) (CUDA graphs and target objects read it).
        activation: a gradient-free method's map from the activation alone (target objects).
        target_weights: a perturbation method's (k, N, C) channel weights for target objects, from a
            :class:`~nstcam.cam._request.TargetRequest`.
        graphed: its whole pass (no SVD, no random numbers) can be captured in a CUDA graph.
        eigen: ``eigen_smooth`` applies (it has weighted activations to project).
        whole_network: it reads the whole network, not a layer: one target layer or none.
        check: refuses a model it cannot explain, before any work.
        title: its name as papers write it (the app's messages).
        samples: forward passes per channel by default (SS-CAM's and IS-CAM's samples), for budgets.
        flat_only: why the method does not explain clips or volumes (N, C, T, H, W), or None: it
            does, its formula read over (t, h, w) as over (h, w).
    """

    name: str
    family: str
    summary: str
    cost: str
    paper: str
    libraries: tuple[str, ...]
    run: Callable[[Request], Outputs]
    targets: str | None = None
    formula: Formula | None = None
    activation: ActivationMap | None = None
    target_weights: Callable[[TargetRequest], torch.Tensor] | None = None
    graphed: bool = False
    eigen: bool = True
    whole_network: bool = False
    check: Check | None = None
    title: str = ""
    samples: int = 1
    flat_only: str | None = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.name)


MethodInfo = Method
"""The record's former name (its people-facing fields are the same)."""

_TO_LAYER = "1 forward + 1 backward to the layer"
_TO_LAYER_SVD = "1 forward + 1 backward to the layer + an SVD"
_CHUNKED = "1 + channels forwards (chunked)"
_CHUNKED_SAMPLES = "1 + channels x n_samples forwards (chunked)"
_WHOLE = "1 forward + 1 whole backward"
_PGC, _BOTH, _TORCHCAM = ("pgc",), ("pgc", "torch-cam"), ("torch-cam",)


def _gradient(
    name: str, formula: Formula, summary: str, paper: str, libraries: tuple[str, ...], **more
) -> Method:
    """A method of one forward and one backward pass stopped at the layer, from its formula
    (captured in CUDA graphs unless ``graphed=False``)."""
    more = {"graphed": True, "cost": _TO_LAYER, **more}
    run = gradient.gradient_method(formula)
    return Method(
        name,
        "gradient",
        summary,
        paper=paper,
        libraries=libraries,
        run=run,
        targets="one-pass",
        formula=formula,
        **more,
    )


def _activation(
    name: str, fn: ActivationMap, summary: str, cost: str, paper: str, per_class: bool = False
) -> Method:
    """A gradient-free method: a map of the activation alone, one forward pass to the layer."""
    run = activation.activation_pass(fn, per_class)
    return Method(name, "gradient-free", summary, cost, paper, _PGC, run, targets="one-pass", activation=fn)


def _perturbation(
    name: str,
    run: Callable[[Request], Outputs],
    summary: str,
    cost: str,
    paper: str,
    libraries: tuple[str, ...],
    **more,
) -> Method:
    """A method scored on changed inputs, ``chunk`` at a time with a progress callback."""
    return Method(name, "perturbation", summary, cost, paper, libraries, run, targets="perturbation", **more)


_GRADIENT = (
    _gradient(
        "gradcam",
        gradient.GRADCAM,
        "channel weights: the spatial mean of the gradients",
        "Selvaraju et al. 2017",
        _BOTH,
    ),
    _gradient(
        "gradcam++",
        Formula(gradient.gradcam_pp_terms),
        "positive gradients weighted by second/third-order terms",
        "Chattopadhyay et al. 2018",
        _BOTH,
    ),
    _gradient(
        "xgradcam",
        Formula(gradient.xgradcam_terms),
        "gradients weighted by the normalised activations",
        "Fu et al. 2020",
        _BOTH,
    ),
    _gradient(
        "layercam",
        Formula(gradient.layercam_terms),
        "element-wise ReLU(gradient) x activation",
        "Jiang et al. 2021",
        _BOTH,
    ),
    _gradient(
        "hirescam",
        Formula(gradient.hirescam_terms),
        "element-wise gradient x activation, no averaging",
        "Draelos & Carin 2020",
        _PGC,
    ),
    _gradient(
        "gradcam-elementwise",
        Formula(gradient.elementwise_terms),
        "sum over channels of ReLU(gradient x activation)",
        "pytorch-grad-cam",
        _PGC,
    ),
    _gradient(
        "eigengradcam",
        Formula(gradient.hirescam_terms, projected="sum"),
        "first principal component of gradient x activation",
        "Muhammad & Yeasin 2020",
        _PGC,
        graphed=False,
        cost=_TO_LAYER_SVD,
    ),
    _gradient(
        "segeigencam",
        Formula(gradient.abs_gradient_terms, projected="extreme"),
        "first principal component of abs(gradient) x activation, sign-corrected",
        "Chung & Ying 2025",
        _PGC,
        graphed=False,
        cost=_TO_LAYER_SVD,
    ),
    Method(
        "shapleycam",
        "gradient",
        "weights mean(gradient - Hessian x activation / 2)",
        "1 forward + a double backward to the layer",
        "Cai et al. 2025",
        _PGC,
        shapley.shapleycam_pass,
        targets="scored",
    ),
    Method(
        "smoothgradcam++",
        "gradient",
        "Grad-CAM++ terms averaged over noisy inputs (n_samples, std)",
        "1 + n_samples forwards and backwards to the layer",
        "Omeiza et al. 2019",
        _TORCHCAM,
        smooth.smoothgradcampp_pass,
        targets="scored",
    ),
    Method(
        "finercam",
        "gradient",
        "Grad-CAM of the target's score against its 3 most similar classes",
        _TO_LAYER,
        "Zhang et al. 2025",
        _PGC,
        gradient.finercam_pass,
    ),
)
_GRADIENT_FREE = (
    _activation(
        "randomcam",
        activation.randomcam_map,
        "uniform random channel weights (seeded): a baseline",
        "1 forward to the layer",
        "pytorch-grad-cam",
        per_class=True,
    ),
    Method(
        "cam",
        "gradient-free",
        "the classifier's linear weights (needs a pooled linear head)",
        "1 forward",
        "Zhou et al. 2016",
        _TORCHCAM,
        activation.cam_pass,
        check=activation.check_cam,
    ),
    _activation(
        "eigencam",
        activation.eigencam_map,
        "first principal component of the activations (every class)",
        "1 forward + an SVD",
        "Muhammad & Yeasin 2020",
    ),
    _activation(
        "fem",
        activation.fem_map,
        "channels weighted by their share of positions above mean + 2 std",
        "1 forward",
        "Fuad et al. 2020",
    ),
    _activation(
        "kpcacam",
        activation.kpca_map,
        "first kernel principal component (sigmoid kernel) of the activations",
        "1 forward + an eigendecomposition",
        "Karmani et al. 2024",
    ),
)
_PERTURBATION = (
    _perturbation(
        "scorecam",
        perturbation.scorecam_pass,
        "channel weights: the class probability of the input masked by it",
        _CHUNKED,
        "Wang et al. 2020",
        _BOTH,
        title="Score-CAM",
        target_weights=perturbation.scorecam_targets,
    ),
    _perturbation(
        "sscam",
        perturbation.score_variant("sscam"),
        "Score-CAM with noisy masks averaged (n_samples, std)",
        _CHUNKED_SAMPLES,
        "Wang et al. 2020 (SS-CAM)",
        _TORCHCAM,
        title="SS-CAM",
        samples=35,
        target_weights=perturbation.variant_targets("sscam"),
    ),
    _perturbation(
        "iscam",
        perturbation.score_variant("iscam"),
        "Score-CAM with masks integrated from 0 to 1 (n_samples)",
        _CHUNKED_SAMPLES,
        "Naidu et al. 2020",
        _TORCHCAM,
        title="IS-CAM",
        samples=10,
        target_weights=perturbation.variant_targets("iscam"),
    ),
    _perturbation(
        "ablationcam",
        perturbation.ablationcam_pass,
        "channel weights: the score's drop when the channel is zeroed",
        _CHUNKED,
        "Desai & Ramaswamy 2020",
        _PGC,
        title="AblationCAM",
        target_weights=perturbation.ablationcam_targets,
    ),
)
_OTHER = (
    Method(
        "fullgrad",
        "other",
        "input gradient x input plus every bias gradient x bias (BatchNorm's too)",
        _WHOLE,
        "Srinivas & Fleuret 2019",
        _PGC,
        fullgrad.fullgrad_pass,
        targets="scored",
        eigen=False,
        whole_network=True,
        check=fullgrad.check_fullgrad,
        flat_only="its bias terms are read per 2D convolution and BatchNorm2d",
    ),
    Method(
        "guided-backprop",
        "other",
        "input gradients through ReLUs that pass only positive gradients",
        _WHOLE,
        "Springenberg et al. 2015",
        _PGC,
        guided.guided_backprop_pass,
        targets="scored",
        eigen=False,
        whole_network=True,
        check=guided.check_guided,
        flat_only="its input-gradient map is drawn per image, not per frame",
    ),
    Method(
        "guided-gradcam",
        "other",
        "guided backpropagation x the Grad-CAM map",
        "2 forwards + 2 backwards",
        "Selvaraju et al. 2017",
        _PGC,
        guided.guided_gradcam_pass,
        targets="scored",
        eigen=False,
        check=guided.check_guided,
        flat_only="its input-gradient map is drawn per image, not per frame",
    ),
    Method(
        "legrad",
        "other",
        "ViT: positive gradients of each block's score on its attention maps",
        "1 forward + 1 backward to the block",
        "Bousselham et al. 2024",
        _TORCHCAM,
        legrad.legrad_pass,
        eigen=False,
        check=legrad.check_legrad,
        flat_only="it reads a ViT's attention maps per image",
    ),
)
_RECORDS = (*_GRADIENT, *_GRADIENT_FREE, *_PERTURBATION, *_OTHER)

REGISTRY: Registry[Method] = Registry("method", ((m.name, m) for m in _RECORDS))
"""Every method ``GradCAM(method=...)`` takes: name -> its record."""

METHOD_INFO = REGISTRY
"""The registry under its former name."""

METHODS = tuple(REGISTRY)
SPACETIME_METHODS = tuple(m.name for m in _RECORDS if m.flat_only is None)
"""The methods that explain clips and volumes: their formulas read (t, h, w) as they read (h, w)."""
GRAPHED_METHODS = tuple(m.name for m in _RECORDS if m.graphed)
"""Gradient methods whose whole pass (no SVD, no random numbers) is captured in CUDA graphs."""
GRADIENT_METHODS = {m.name: m.formula for m in _RECORDS if m.formula is not None}
"""Methods of one forward and one backward pass stopped at the target layer: name -> ``(A, G) -> map``."""
ACTIVATION_METHODS = tuple(m.name for m in _RECORDS if m.family == "gradient-free")
"""Methods of one forward pass to the layer, no gradient."""
PERTURBATION_METHODS = tuple(m.name for m in _RECORDS if m.family == "perturbation")
"""Methods that score one forward pass per channel of the layer (chunked; a progress callback)."""
TARGET_METHODS = tuple(m.name for m in _RECORDS if m.targets is not None)
"""Methods that explain target objects: gradient methods, the gradient-free ones (which read the
activation only), the perturbation ones, and those that differentiate a score their own way. CAM,
Finer-CAM and LeGrad read more than one class (a ClassTarget's logit is their class index)."""


def method(name: str) -> Method:
    """The record of ``name``.

    Raises:
        ValueError: an unknown method, listing the known ones.
    """
    return REGISTRY.get(name)


def check_method(model: nn.Module, name: str, layers: Sequence[str], clips: bool = False) -> None:
    """Raises ValueError where method ``name`` cannot explain ``model`` at ``layers`` (``clips``: a
    video or volume model, (N, C, T, H, W))."""
    record = method(name)
    if clips and record.flat_only is not None:
        works = ", ".join(SPACETIME_METHODS[:6])
        raise ValueError(
            f"method {name!r} does not explain clips or volumes: {record.flat_only}; use one of "
            f"{works}... (nstcam.cam.SPACETIME_METHODS)"
        )
    if record.check is not None:
        record.check(model, layers, name)
    if record.whole_network and len(layers) > 1:
        raise ValueError(
            f"method {name!r} reads the whole network, not a target layer: give one target_layer "
            "(or none), or pick a layer method to fuse several layers"
        )


def methods_table() -> str:
    """The methods as a Markdown table (``docs/cam-methods.md`` is this, checked by a test)."""
    rows = [
        "| method | family | what it computes | cost | paper | also in | clips, volumes |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in _RECORDS:
        also = ", ".join({"pgc": "pytorch-grad-cam"}.get(lib, lib) for lib in m.libraries)
        clips = "(t, h, w)" if m.flat_only is None else f"no: {m.flat_only}"
        rows.append(f"| `{m.name}` | {m.family} | {m.summary} | {m.cost} | {m.paper} | {also} | {clips} |")
    return "\n".join(rows)

"""The optimisation at one scale: the starting image, the losses, and the L-BFGS or Adam loop."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from PIL import Image

from nstcam.color import color_stats, luminance_only, match_color
from nstcam.image import image_to_tensor
from nstcam.style._fast_init import fast_images
from nstcam.style._plan import Plan
from nstcam.style._progress import Progress
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets
from nstcam.style._types import BudgetSpent
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.losses import style_loss_named
from nstcam.style.losses.sliced import directions_for
from nstcam.style.losses.terms import content_loss, style_term, total_variation
from nstcam.style.vgg import layer_channels

__all__ = [
    "CONVERGE_WINDOW",
    "Convergence",
    "compute_losses",
    "in_range",
    "init_image",
    "loss_terms",
    "optimize",
    "step_directions",
    "weighted",
]

REDRAW = 20
"""L-BFGS with the sliced loss: evaluations per block of fixed directions (Adam: new each step)."""
CONVERGE_WINDOW = 20
"""Evaluations between convergence checks (``tolerance``): one read of the loss per window."""
_KEEP = 10.0  # with a style mask: content loss weight where the mask is 0, relative to where it is 1
_PIXEL_KEEP = 100.0  # with a style mask: weight of the pixel-space content anchor where the mask is 0


def init_image(
    rt: Runtime,
    prev: torch.Tensor | None,
    c_in: torch.Tensor,
    styles: list[Image.Image],
    plan: Plan,
    start: torch.Tensor | None = None,
) -> torch.Tensor:
    """The images to optimise at this scale: the previous scale's result upscaled, else per ``init``
    (noise is drawn per image from a generator seeded with ``plan.seed``, as a run of one would;
    ``"image"``: ``start``, the given images at this size)."""
    n, _, h, w = c_in.shape
    if prev is not None:
        x = F.interpolate(prev, size=(h, w), mode="bicubic", align_corners=False).clamp(0, 1)
    elif plan.init == "image":  # an image without a start image of its own starts from its content
        x = (c_in if start is None else start).clone()
    elif plan.init == "content":
        x = c_in.clone()
    elif plan.init == "noise":
        draws = [
            torch.rand((1, 3, h, w), generator=torch.Generator().manual_seed(plan.seed)) for _ in range(n)
        ]
        x = torch.cat(draws).to(rt.device)
    elif plan.init == "style_stats":
        x = _style_noise(rt, styles, plan, c_in)
    elif plan.init == "fast":
        x = fast_images(rt, c_in, styles, plan)
    else:  # style, blended by weight where several (recoloured per image with "histogram")
        x = torch.zeros_like(c_in)
        for img, wt in zip(styles, plan.blend, strict=True):
            s = image_to_tensor(img.resize((w, h), Image.Resampling.LANCZOS), rt.device)
            if plan.luminance:
                x += wt * luminance_only(s)
            elif plan.histogram:
                x += wt * torch.cat([match_color(s, c_in[i : i + 1]) for i in range(n)])
            else:
                x += wt * s
    return x.detach().contiguous().requires_grad_(True)


def _style_noise(rt: Runtime, styles: list[Image.Image], plan: Plan, c_in: torch.Tensor) -> torch.Tensor:
    """Gaussian noise with the styles' RGB mean and covariance (their blend's: a mixture's moments;
    recoloured to each content with "histogram", grey with "luminance"), drawn per image from a
    generator seeded with ``plan.seed``, clamped to [0, 1] (and shifted so that the clamped channel
    means stay the style's). The styles' moments are read once, or once per image with "histogram"."""
    n, _, h, w = c_in.shape
    if not plan.histogram:  # the same for every image
        noise = _noise_for(_moments(rt, styles, plan, None), h, w, plan.seed)
        return noise.expand(n, -1, -1, -1).to(rt.device)
    out = [_noise_for(_moments(rt, styles, plan, c_in[i : i + 1]), h, w, plan.seed) for i in range(n)]
    return torch.cat(out).to(rt.device)


def _moments(
    rt: Runtime, styles: list[Image.Image], plan: Plan, content: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The blended styles' RGB mean and second moment (float64, CPU), recoloured to ``content``
    with "histogram"."""
    mu, second = torch.zeros(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)
    for img, wt in zip(styles, plan.blend, strict=True):
        s = image_to_tensor(img, rt.device)
        s = match_color(s, content) if content is not None else luminance_only(s) if plan.luminance else s
        m, c = color_stats(s)
        mu, second = mu + wt * m.cpu(), second + wt * (c.cpu() + torch.outer(m.cpu(), m.cpu()))
    return mu, second


def _noise_for(moments: tuple[torch.Tensor, torch.Tensor], h: int, w: int, seed: int) -> torch.Tensor:
    """(1, 3, h, w) float32 noise of these moments from ``seed``, clamped, its means kept."""
    mu, second = moments
    cov = second - torch.outer(mu, mu)
    root = torch.linalg.cholesky(cov + 1e-6 * torch.eye(3, dtype=torch.float64))
    z = torch.randn((3, h * w), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    noise, shift = mu[:, None] + root @ z, torch.zeros(3, 1, dtype=torch.float64)
    for _ in range(4):  # clamping to [0, 1] moves a dark or bright style's means: moved back
        shift += mu[:, None] - (noise + shift).clamp(0, 1).mean(1, keepdim=True)
    return (noise + shift).clamp(0, 1).reshape(1, 3, h, w).float()


def unmasked_terms(
    feats: dict[str, torch.Tensor],
    x: torch.Tensor,
    content: dict[str, torch.Tensor],
    style: dict[str, torch.Tensor],
    content_layers: list[str],
    style_layers: dict[str, float],
    kind: str = "gram",
    directions: dict[str, torch.Tensor] | None = None,
    sqrt: str = "eigh",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`loss_terms` without a mask, on plain arguments (what the compiled step traces)."""
    c = _content_term(feats, content, content_layers)
    s = style_term(feats, style, style_layers, kind, directions=directions, sqrt=sqrt)
    return c, s, total_variation(x, reduction="none")


def _content_term(feats: dict[str, torch.Tensor], content: dict[str, torch.Tensor], layers) -> torch.Tensor:
    """Each image's content loss (N,), the mean over ``layers``."""
    return sum(content_loss(feats[n], content[n], reduction="none") for n in layers) / len(layers)


def step_directions(targets: Targets, plan: Plan, device: torch.device) -> dict[str, torch.Tensor] | None:
    """The sliced loss' directions of this evaluation (None for the other losses): fresh at each
    Adam step, one set per block of L-BFGS evaluations, drawn from the run's seed."""
    if not style_loss_named(plan.style_loss).random_directions:
        return None
    draw = targets.next_draw() if plan.optimizer == "adam" else -targets.block
    return {n: directions_for(layer_channels(n), plan.seed, draw, device) for n in plan.style_layers}


def loss_terms(
    feats: dict[str, torch.Tensor],
    x: torch.Tensor,
    targets: Targets,
    plan: Plan,
    directions: dict[str, torch.Tensor] | None = None,
    sqrt: str = "eigh",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unweighted content, style and total-variation losses of each image (three (N,) tensors);
    the sliced loss on ``directions``, else on this evaluation's (:func:`step_directions`); the W2
    loss' square roots by ``sqrt`` (a compiled run's eager steps: the compiled step's method)."""
    dirs = step_directions(targets, plan, x.device) if directions is None else directions
    if targets.mask is None:
        return unmasked_terms(
            feats,
            x,
            targets.content,
            targets.style,
            plan.content_layers,
            plan.style_layers,
            plan.style_loss,
            dirs,
            sqrt,
        )
    # style where the mask is 1; content kept KEEP times harder where it is 0 (if it is anywhere)
    if targets.covered:
        c = _content_term(feats, targets.content, plan.content_layers)
    else:
        c = sum(
            content_loss(
                feats[n],
                targets.content[n],
                mask=1 + (_KEEP - 1) * (1 - targets.mask_for(feats[n])),
                reduction="none",
            )
            for n in plan.content_layers
        )
        c = c + _PIXEL_KEEP * len(plan.content_layers) * content_loss(
            x, targets.pixels, mask=1 - targets.mask, reduction="none"
        )
        c = c / len(plan.content_layers)
    if targets.regions:  # a style per region: each reads its own region's features
        s = 0
        for r in targets.regions:  # on the positions the region reaches: its share of the cost
            sel = {n: r.select(feats[n]) for n in plan.style_layers}
            f, m = {n: v[0] for n, v in sel.items()}, {n: v[1] for n, v in sel.items()}
            region = style_term(f, r.style, plan.style_layers, plan.style_loss, None, dirs, sqrt, masks=m)
            s = s + r.weight * region
    else:
        s = style_term(feats, targets.style, plan.style_layers, plan.style_loss, targets.mask_for, dirs, sqrt)
    return c, s, total_variation(x, reduction="none")


def weighted(terms: tuple[torch.Tensor, torch.Tensor, torch.Tensor], plan: Plan) -> torch.Tensor:
    """(4, N): the weighted total, content, style and tv losses of each image."""
    c, s, tv = terms
    c, s, tv = plan.content_weight * c, plan.style_weight * s, plan.tv_weight * tv
    return torch.stack([c + s + tv, c, s, tv])


def compute_losses(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    x: torch.Tensor,
    targets: Targets,
    plan: Plan,
    directions: dict[str, torch.Tensor] | None = None,
    sqrt: str = "eigh",
) -> torch.Tensor:
    """The eager step: features through the hooks, then :func:`weighted` losses, (4, N)."""
    return weighted(loss_terms(rt.features(hooks, x), x, targets, plan, directions, sqrt), plan)


class _InRange(torch.autograd.Function):
    """``x.clamp(0, 1)`` whose gradient passes where ``0 <= x <= 1``, the bounds included.

    torch's ``clamp`` passes no gradient at its bounds (``d clamp(x) / dx`` is 0 at x = 0 and x = 1
    since torch 2.x), so every pixel of a photo that is exactly black or white (clipped skies and
    shadows: most real photos) had no gradient under L-BFGS, which sees the image through the
    clamp, and never moved: a black-and-white silhouette came back unchanged after any number of
    steps (issue 64: 0.0/255 changed, the judge's style move 0.000; its mid-tone twin 0.850). A pixel
    at a bound now moves as any other; one pushed past it is held there (its value clamps, its
    gradient is 0), as a projection onto [0, 1] would hold it.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(0, 1)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * ((x >= 0) & (x <= 1))


def in_range(x: torch.Tensor) -> torch.Tensor:
    """``x`` clamped to [0, 1], its gradient passing at the bounds (:class:`_InRange`)."""
    return _InRange.apply(x)


class Convergence:
    """Whether a scale's optimisation has converged: its best total loss fell by less than
    ``tolerance`` x its first loss over the last ``window`` evaluations (checked every ``window``,
    one synchronisation each; never with ``tolerance`` 0)."""

    def __init__(self, tolerance: float, window: int = CONVERGE_WINDOW) -> None:
        self.tolerance, self.window = tolerance, window
        self.first: float | None = None
        self.last: float | None = None  # the best total at the previous check

    def __call__(self, done: int, best_loss: torch.Tensor) -> bool:
        if not self.tolerance or (done > 1 and done % self.window):
            return False
        now = float(best_loss.sum())
        if self.first is None:  # the first evaluation: the scale's scale of losses
            self.first = self.last = now
            return False
        converged = self.last - now < self.tolerance * abs(self.first)
        self.last = now
        return converged


class Converged(BudgetSpent):
    """A scale's loss has converged (:class:`Convergence`): its remaining steps are not run."""


def _make_optimizer(x: torch.Tensor, plan: Plan, n_steps: int) -> torch.optim.Optimizer:
    if plan.optimizer == "lbfgs":
        return torch.optim.LBFGS(
            [x],
            lr=plan.lr,
            max_iter=n_steps,
            max_eval=n_steps,
            history_size=plan.history_size,
            tolerance_grad=0.0,
            tolerance_change=0.0,
            line_search_fn="strong_wolfe",
        )
    return torch.optim.Adam([x], lr=plan.lr)


def optimize(
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    plan: Plan,
    scale: int,
    n_steps: int,
    progress: Progress,
    preview: Callable[[torch.Tensor], Image.Image],
    moments: dict | None = None,
) -> torch.Tensor:
    """Runs ``n_steps`` evaluations (forward + backward) of ``loss_fn`` (image batch -> (4, N)
    losses), fewer once converged (``plan.tolerance``, :class:`Convergence`), and returns, for each
    image, the best iterate seen. Where ``loss_fn.recover``
    exists (the compiled step), a failed backward pass is handed to it (``recover(x, error)``
    counts it and returns the losses computed eagerly) and that step runs again eagerly.

    L-BFGS sees the images through a clamp (:func:`in_range`: its gradient passes at 0 and 1, so
    black and white pixels move), so every point it evaluates is a valid image and its line search
    sees one consistent function; Adam's iterate is projected onto [0, 1] instead. The
    best iterate is tracked on the device (no synchronisation per step). With ``plan.average`` the
    result is instead the bias-corrected exponential moving average of the evaluated images (Adam:
    its iterates; L-BFGS: also its line search's points), as crowsonkb/style-transfer-pytorch does,
    and Adam resumes the previous scale's moment estimates from ``moments`` (resized) instead of
    starting from zero; ``moments`` receives this scale's at the end.
    """
    lbfgs = plan.optimizer == "lbfgs"
    opt = _make_optimizer(x, plan, n_steps)
    carry = moments is not None and plan.average is not None and not lbfgs
    if carry and moments:
        _resume(opt, x, moments)
    done = 0
    mean = torch.zeros_like(x) if plan.average else None  # the moving average of the iterates
    best_loss = torch.full((x.shape[0],), math.inf, device=x.device)
    best = x.detach().clone()
    size = (x.shape[-1], x.shape[-2])
    converged = Convergence(plan.tolerance)

    def closure() -> torch.Tensor:
        nonlocal done, best, best_loss
        if done >= n_steps:  # the line search wants more than the budget allows
            raise BudgetSpent
        opt.zero_grad(set_to_none=True)
        if not lbfgs:
            with torch.no_grad():
                x.clamp_(0, 1)
        losses = loss_fn(in_range(x) if lbfgs else x)
        total = losses[0].sum()
        try:
            total.backward()
        except Exception as e:
            recover = getattr(loss_fn, "recover", None)  # a compiled step's backward: eager this once
            if recover is None:
                raise
            opt.zero_grad(set_to_none=True)
            losses = recover(in_range(x) if lbfgs else x, e)
            total = losses[0].sum()
            total.backward()
        done += 1
        with torch.no_grad():
            now = losses.detach()
            better = now[0] < best_loss
            best_loss = torch.where(better, now[0], best_loss)
            best = torch.where(better.view(-1, 1, 1, 1), x.detach().clamp(0, 1), best)
            if mean is not None:
                mean.mul_(plan.average).add_(x.detach().clamp(0, 1), alpha=1 - plan.average)
        progress.step(scale, size, now, best, preview)
        if converged(done, best_loss):
            raise Converged
        return total

    try:
        if lbfgs:
            redraws = style_loss_named(plan.style_loss).random_directions
            new_block = getattr(loss_fn, "new_block", None) if redraws else None
            while done < n_steps:  # each LBFGS.step stops at max_eval evaluations
                if new_block is not None:  # a fixed objective per block: its line searches stay sound
                    new_block()
                    opt = _make_optimizer(x, plan, n_steps)  # the history belongs to the last block's
                left = n_steps - done if new_block is None else min(REDRAW, n_steps - done)
                opt.param_groups[0]["max_iter"] = opt.param_groups[0]["max_eval"] = left
                opt.step(closure)
        else:
            for _ in range(n_steps):
                opt.step(closure)
    except Converged:
        progress.skip(n_steps - done)
    except BudgetSpent:
        pass
    if carry:
        moments.update(opt.state.get(x, {}))  # exp_avg, exp_avg_sq, step: the next scale resumes them
    if mean is not None and done:
        return mean / (1 - plan.average**done)  # bias-corrected: the average starts at zero
    return best


def _resume(opt: torch.optim.Optimizer, x: torch.Tensor, moments: dict) -> None:
    """Adam's state for ``x`` from the previous scale's: the moment estimates resized bilinearly
    to this scale, the step count kept (its bias corrections go on where they were)."""
    state = {}
    for key, value in moments.items():
        if isinstance(value, torch.Tensor) and value.ndim == 4:
            up = F.interpolate(value, size=x.shape[-2:], mode="bilinear", align_corners=False)
            state[key] = up.clamp_min(0) if key == "exp_avg_sq" else up
        else:
            state[key] = value.clone() if isinstance(value, torch.Tensor) else value
    opt.state[x] = state

"""The compiled style step proves itself: compared with the eager step before it serves a key.

A compiled key (layer set, image and target shapes, engine) runs two checks on its first step, one
on the compiled function's first call and one on its first replay (with CUDA graphs torch records on
the second call and replays from the third): each check evaluates the compiled step (losses and the
gradient with respect to the image) at the image plus seeded noise (:func:`probe_of`), then at a
*canary*, a different image, before it reads the first result (so an output buffer that a later call
overwrites is caught), then the eager step at the first point, and compares:

- each image's loss terms within ``terms`` relative (1e-4 in float32, 2e-2 under bf16 autocast),
  terms under a millionth of the image's largest weighted term judged against that millionth;
- every value finite;
- each image's gradient within ``grad`` relative L2 (1e-3; bf16 2e-2) and cosine >= ``cosine``
  (0.9999; bf16 0.999).

A style loss whose float32 value is itself less exact says so (``StyleLoss.check``): the Gaussian W2
loss, a difference of nearly cancelling traces, is held to 2e-3, 1e-1 and 0.999.

**What float32 can promise at this key.** Two float32 evaluations of one step differ by their
rounding, and how much depends on the key and on the machine's kernels. So before its checks a
float32 key measures the eager step's own error at the probe against the same step in float64
(:func:`float32_error`; the network and the targets copied to float64 once per key), and each
tolerance is widened to :data:`MARGIN` times that error where that is looser, never past
:data:`CEILING`. A blank warm-up image once put max pooling on ties (equal values in a window, where
eager and compiled may pick other winners: gradients 1.6 % apart at cosine 0.99987 on an AMD EPYC,
issue 48); float64 breaks such ties as float32 eager does, so no measured error covers them: the
warm-up judges its keys on a photo instead (:func:`probe_of`).

On a GPU whose float32 convolutions run in TF32 (torch's default from compute capability 8.0:
``nstcam._capture.tf32_in_use``) the eager step is itself that exact only to TF32's 10-bit mantissa,
and the compiled step's convolutions (other layouts, other cuDNN algorithms) round differently. On an
H200 with torch 2.11 every float32 key's gradient differed from eager by 1.2e-2 to 6.1e-2 relative L2
(cosine down to 0.9981) and its terms by up to 1.0e-4; simulating TF32 convolutions against float32 on
a CPU gives 4.2e-2 to 5.4e-2 and up to 4.4e-4 (``tests/benchmarks/bench_selfcheck.py --tf32``). There the
check holds each key to :data:`TF32` (terms 2e-3, gradient 0.2 relative L2, cosine 0.99), or the
precision's or the loss' own where that is looser. A wrong step still fails, whatever the measured
error: no tolerance passes :data:`CEILING`, and a style term off by 1 %, another call's output or a
NaN is off by more (``tests/test_selfcheck.py``).

A key that fails runs eagerly from then on (``_compiled.py``). The cost: per key, four compiled, three
eager and one float64 evaluation, once (``README``: the measured figure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "BF16",
    "CEILING",
    "FP32",
    "MARGIN",
    "TF32",
    "Tolerance",
    "Verdict",
    "canary_of",
    "check_step",
    "float32_error",
    "probe_of",
    "tolerance",
    "widened",
]


@dataclass(frozen=True)
class Tolerance:
    """How close the compiled step must come to eager (see the module docstring)."""

    terms: float
    grad: float
    cosine: float


FP32 = Tolerance(terms=1e-4, grad=1e-3, cosine=0.9999)
BF16 = Tolerance(terms=2e-2, grad=2e-2, cosine=0.999)
TF32 = Tolerance(terms=2e-3, grad=0.2, cosine=0.99)
"""Where convolutions run in TF32 (module docstring: gradients 6.1e-2 apart at most, a margin of 3)."""
CEILING = TF32
"""The loosest a check gets, whatever the measured float32 error: a style term off by 1 % (the
smallest injected fault) is still five times past its terms tolerance."""
MARGIN = 10.0
"""Compiled and eager may each be off by the measured error, in other directions: a margin of 5 on
their difference."""


def _looser(a: Tolerance, b: Tolerance | None) -> Tolerance:
    if b is None:
        return a
    return Tolerance(max(a.terms, b.terms), max(a.grad, b.grad), min(a.cosine, b.cosine))


def tolerance(bf16: bool, loss: Tolerance | None = None, tf32: bool = False) -> Tolerance:
    """The self-check's tolerance: the precision's (:data:`FP32` or :data:`BF16`; at least :data:`TF32`
    where ``tf32``: convolutions in TF32), or the loss' own where that is looser (``StyleLoss.check``:
    a loss whose float32 value is less exact)."""
    base = BF16 if bf16 else FP32
    return _looser(_looser(base, TF32 if tf32 else None), loss)


def widened(tol: Tolerance, error: Tolerance) -> Tolerance:
    """``tol`` widened to :data:`MARGIN` times the eager step's measured float32 ``error`` (its terms'
    and gradient's relative errors and its gradient's cosine against float64) where that is looser,
    never past :data:`CEILING`."""
    return Tolerance(
        terms=max(tol.terms, min(MARGIN * error.terms, CEILING.terms)),
        grad=max(tol.grad, min(MARGIN * error.grad, CEILING.grad)),
        cosine=min(tol.cosine, max(1 - MARGIN * (1 - error.cosine), CEILING.cosine)),
    )


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: the largest relative error (terms and gradient), the smallest cosine,
    and why it failed (empty when it passed)."""

    error: float
    cosine: float
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.why


Step = Callable[[torch.Tensor], torch.Tensor]
"""An image batch -> its losses (eager: the (4, N) weighted total, content, style, tv)."""
Weigh = Callable[[torch.Tensor], torch.Tensor]
"""The compiled step's (3, N) unweighted terms -> the (4, N) weighted losses."""


def probe_of(x: torch.Tensor) -> torch.Tensor:
    """Where a check evaluates: the image plus seeded noise (std 0.1), clamped. At the image itself
    every term can be zero (a first step that starts at the content), and relative errors of zeros
    mean nothing. Where the image is black or white the clamp leaves flat regions, and max pooling
    over a flat region ties, its gradient going to whichever element a kernel picks: judge a key on
    a photo (``warmup`` does), not a blank image. Unclamped noise was tried against that and made
    things worse: compiled and eager then differed by up to 5.7e-3 relative L2 (2.1e-6 clamped, gram
    at 96 x 64 px, ``bench_selfcheck.py``'s patterns), for a reason not found yet."""
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(x.device, x.dtype)
    return (x.detach() + 0.1 * noise).clamp(0, 1)


def canary_of(x: torch.Tensor) -> torch.Tensor:
    """A different image of the same shape: inverted and squeezed (every loss term changes)."""
    return (1 - x.detach()) * 0.8 + 0.1


def _evaluate(run: Step, weigh: Weigh, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``run`` at a copy of ``x``: its output as returned (not copied: the check reads it later) and
    the gradient of its weighted total with respect to the image."""
    xg = x.detach().clone().requires_grad_(True)
    out = run(xg)
    (grad,) = torch.autograd.grad(weigh(out)[0].sum(), xg)
    return out, grad.detach().clone()


def _gradient_error(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """The largest per-image relative L2 error and the smallest per-image cosine."""
    g, w = got.detach().double().flatten(1), want.detach().double().flatten(1)
    if not bool(torch.isfinite(g).all()):
        return float("inf"), -1.0
    norm_w, norm_g = w.norm(dim=1), g.norm(dim=1)
    nothing = torch.where(norm_g > 0, float("inf"), 0.0)  # want is zero: any gradient at all is wrong
    rel = torch.where(norm_w > 0, (g - w).norm(dim=1) / norm_w.clamp_min(1e-300), nothing)
    both = norm_w * norm_g
    cos = torch.where(both > 0, (g * w).sum(1) / both.clamp_min(1e-300), (norm_g == norm_w).double())
    return float(rel.max()), float(cos.min())


def check_step(run: Step, weigh: Weigh, eager: Step, x: torch.Tensor, tol: Tolerance) -> Verdict:
    """Compares the compiled step (``weigh(run(x))``: ``run`` gives the unweighted terms as the step
    does, its output copy included) with ``eager`` at ``x``, with an overwrite canary between the
    compiled call and the reading of its result (module docstring). Raises what ``run`` raises."""
    x = probe_of(x)
    out, grad = _evaluate(run, weigh, x)
    _evaluate(run, weigh, canary_of(x))  # an output buffer the step reuses now holds the canary's terms
    got = weigh(out.detach())
    want, want_grad = _evaluate(eager, lambda losses: losses, x)
    want = want.detach()
    terms = _terms_error(got, want)
    grad_err, cosine = _gradient_error(grad, want_grad)
    error = max(terms, grad_err)
    if not (bool(torch.isfinite(got).all()) and bool(torch.isfinite(grad).all())):
        return Verdict(float("inf"), cosine, "not finite")
    if terms > tol.terms:
        return Verdict(error, cosine, f"loss terms differ by {terms:.2e} relative (tolerance {tol.terms:g})")
    if grad_err > tol.grad or cosine < tol.cosine:
        why = f"gradient differs by {grad_err:.2e} relative L2, cosine {cosine:.6f}"
        return Verdict(error, cosine, f"{why} (tolerance {tol.grad:g}, {tol.cosine:g})")
    return Verdict(error, cosine)


def float32_error(eager: Step, exact: Step, x: torch.Tensor) -> Tolerance:
    """The eager float32 step's own error at :func:`probe_of` ``x`` against ``exact`` (the same step
    in float64): its terms' largest relative error, its gradient's relative L2 error and cosine, in a
    :class:`Tolerance`'s fields (what :func:`widened` reads)."""
    x = probe_of(x)
    want, want_grad = _evaluate(exact, lambda losses: losses, x.double())
    got, grad = _evaluate(eager, lambda losses: losses, x)
    grad_err, cosine = _gradient_error(grad, want_grad)
    return Tolerance(terms=_terms_error(got.detach(), want.detach()), grad=grad_err, cosine=cosine)


def _terms_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest relative error of the (4, N) weighted losses, each judged against ``max(|want|,
    floor)`` (``floor``: a millionth of its image's largest term)."""
    got, want = got.double(), want.double()
    floor = want[1:].abs().amax(0, keepdim=True).clamp_min(1e-30) * 1e-6  # per image
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    rel = (got - want).abs() / torch.maximum(want.abs(), floor)
    return float(rel.max()) if rel.numel() else 0.0

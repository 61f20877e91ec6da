"""The convergence stop (issue 64): a scale ends once its loss has converged (``tolerance``), not
after a fixed count of steps; known-answer cases on a quadratic, then a run of the engine."""

from __future__ import annotations

import pytest
import torch

from nstcam import StyleTransfer
from nstcam.image import tensor_to_image
from nstcam.style import StyleOptions
from nstcam.style._optimize import CONVERGE_WINDOW, Convergence, optimize
from nstcam.style._plan import make_plan
from nstcam.style._progress import Progress


def _quadratic(target: float, calls: list[int]):
    def loss_fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        total = (x - target).pow(2).sum().view(1)
        return torch.stack([total, total * 0, total * 0, total * 0])

    return loss_fn


def _run(optimizer: str, lr: float, tolerance: float, n_steps: int = 200) -> tuple[int, Progress]:
    plan = make_plan(StyleOptions(optimizer=optimizer, lr=lr, tolerance=tolerance), n_styles=1)
    calls: list[int] = []
    progress = Progress(n_steps, 1, None, 0, 1, False)
    x = torch.zeros(1, 3, 8, 8, requires_grad=True)
    optimize(_quadratic(0.3, calls), x, plan, 0, n_steps, progress, lambda b: None)
    progress.close()
    return len(calls), progress


def test_a_converged_scale_stops_at_the_first_check_after_it_converged():
    """L-BFGS solves a quadratic in its first steps: the loss at step 20 is ~0, less than the first
    by far more than the tolerance (no stop), and at step 40 it has not moved (stop). The run's
    total shrinks by the steps not run."""
    done, progress = _run("lbfgs", 1.0, 1e-3)
    assert done == 2 * CONVERGE_WINDOW
    assert progress.total_steps == done == len(progress.history)


def test_a_scale_still_falling_runs_every_step():
    """Adam at lr 1e-3 walks toward the minimum at 1e-3 a step: over each window the loss falls by
    about 4 % of its first value, above the tolerance, so all 200 steps run; tolerance 0 runs them
    all even when converged."""
    assert _run("adam", 1e-3, 1e-3)[0] == 200
    assert _run("lbfgs", 1.0, 0.0)[0] == 200


def test_the_check_reads_the_best_loss_over_each_window():
    watch = Convergence(0.01, window=10)
    assert not watch(1, torch.tensor([100.0]))  # the first loss sets the scale
    assert not watch(5, torch.tensor([0.0]))  # between checks: not read
    assert not watch(10, torch.tensor([98.0]))  # fell 2 >= 0.01 x 100
    assert watch(20, torch.tensor([97.5]))  # fell 0.5 < 1


def test_a_stylisation_stops_each_scale_when_converged_and_says_so():
    """On random weights (the arithmetic, not a painting) at 64 px: with a loose tolerance each
    scale stops at a multiple of the window, the history holds the steps run, and the progress
    callback's total is the steps run; tolerance 0 runs every step."""
    st = StyleTransfer("random", device="cpu")
    c = torch.rand(3, 48, 64, generator=torch.Generator().manual_seed(0))
    s = torch.rand(3, 48, 64, generator=torch.Generator().manual_seed(1))
    c, s = tensor_to_image(c[None]), tensor_to_image(s[None])
    seen = []
    kw = dict(size=64, scales=[32, 64], seed=0, progress_bar=False)
    out = st.stylize(c, s, steps=[100, 100], tolerance=0.05, progress=seen.append, **kw)
    history = out.info["nstcam"]["history"]
    per_scale = [sum(1 for h in history if h["scale"] == i) for i in (0, 1)]
    assert all(n % CONVERGE_WINDOW == 0 and n < 100 for n in per_scale), per_scale
    assert seen[-1].total_steps == len(history) == seen[-1].step
    full = st.stylize(c, s, steps=[30, 30], **kw)
    assert len(full.info["nstcam"]["history"]) == 60


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), True])
def test_tolerance_is_checked(bad):
    with pytest.raises(ValueError, match="tolerance"):
        StyleOptions(tolerance=bad)

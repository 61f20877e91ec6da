"""The one-command GPU report (tests/benchmarks/gpu_report.py): its dry run on this CPU, its refusal
without CUDA, and that a compiled step which fell back to eager is reported as a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "benchmarks" / "gpu_report.py"
SECTIONS = (
    "## Failures",
    "## Checks: the compiled style step",
    "## Grad-CAM",
    "## Style transfer: whole runs",
    "## The app's pattern: a thread per request, mixed and concurrent",
    "## Style transfer: per step against the tutorial reference",
    "## Style transfer: batched throughput",
    "## Tiled outputs",
    "## Memory estimate against measured peaks",
    "## Video: temporal consistency",
)


def _report_module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_report
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gpu_report


def test_dry_run_on_cpu_writes_every_section(tmp_path, monkeypatch, capsys):
    """The report's ``main`` in this worker, as ``python gpu_report.py --device cpu --quick`` runs it
    (issue 74: a process of its own spent 5 s importing and 7 s drawing random networks this worker
    has built already; the sections that measure a fresh process's peak still start one each)."""
    out = tmp_path / "report.md"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the report puts the checkout and its folder first
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # its children import the checkout
    gpu_report = _report_module()
    with torch.random.fork_rng(devices=[]):  # the benchmarks seed the global generator
        # a budget no machine spends: every section runs however slow the machine (the report's own
        # budget skips sections once spent, and a wall-clock budget inside a test is a timed test)
        code = gpu_report.main(["--device", "cpu", "--quick", "--budget-s", "1e9", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    text = out.read_text()
    positions = [text.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    assert "DRY RUN" in text and f"torch {torch.__version__}" in text and "## Failures\n\n- none" in text
    for header in (
        "| model | forward (no grad) ms | nstcam ms | pytorch-grad-cam ms |",
        "| step | precision | optimiser | seconds | ms per step | compile s | judge loss |",
        "| size | reference s/step | nstcam s/step | ratio |",
        "| batch_size | images/s | vs batch 1 |",
        "| output | run | windows | peak MiB | estimate MiB | wall s | s per evaluation |",
        "| size | optimiser | steps | peak MiB | estimate MiB | estimate error |",
        "| setting | s per frame | x baseline time | warping error (DIS flow) |",
    ):
        assert header in text, header
    assert "skipped:" not in text.split("## Checks")[1].split("##")[0] or "--cpu-compile" in text
    try:
        import pytorch_grad_cam  # noqa: F401
    except ImportError:  # bench_cam runs without it, and its columns say so
        assert "| not installed | not installed |" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_refuses_clearly_without_cuda(tmp_path):
    run = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert (
        run.returncode == 2 and "no CUDA device here" in run.stderr and "--device cpu --quick" in run.stderr
    )
    assert not (tmp_path / "gpu_report.md").exists()


def test_a_compiled_step_that_fell_back_is_a_failure(monkeypatch):
    """The engine's fallback keeps users' requests alive; the report must not let it hide a broken
    compiled path behind eager timings."""
    import nstcam.style._compiled as C

    gpu_report = _report_module()

    def broken(*_args, **_kw):
        def fn(*_a):
            raise RuntimeError("inductor failed")

        return fn

    monkeypatch.setattr(C, "_build", broken)
    settings = gpu_report.Settings.for_mode("cpu", True, cpu_compile=True)
    report = gpu_report.Report(budget_s=600)
    report.section("Checks", 1, lambda: gpu_report.check_compiled(report, torch.device("cpu"), settings))
    text = report.sections[0]
    # the self-check's first call raised: the key runs eagerly, counted as a fallback and a mismatch
    assert re.search(
        r"FAILED: compiled step ran compiled \(0 shape\(s\) compiled, [1-9] fallbacks to eager\)", text
    )
    assert re.search(r"FAILED: compiled style step self-check: 1 comparisons with eager, 1 mismatches", text)
    assert len(report.failures) == 2  # the images still agree: the fallback computed them eagerly

    report = gpu_report.Report(budget_s=1)
    report.section("Late", 5, lambda: "never")
    assert "skipped: it takes about 5 s" in report.sections[0] and not report.failures

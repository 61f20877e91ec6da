"""Gradio's internals behind one door (nstcam/app/gradio_internals.py): each patched function still
has the name and parameters its patch was written for, each private attribute read is still there,
every patch goes through the door, and the app refuses a Gradio it was not tested on."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import gradio as gr
import pytest

from nstcam.app import gradio_internals as gi

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("patch", gi.PATCHES, ids=lambda p: f"{p.owner}.{p.name}")
def test_each_patched_function_is_still_what_its_patch_was_written_for(patch):
    owner = gi.resolve(patch.owner)
    where = f"Gradio {gr.__version__}: {patch.owner}.{patch.name} (patched in nstcam/app/{patch.by}.py)"
    assert hasattr(owner, patch.name), f"{where} is gone"
    found = gi.original(owner, patch.name)
    if patch.params is not None or patch.keywords:
        names = gi.parameters(found)
        assert names[: len(patch.params or ())] == tuple(patch.params or ()), f"{where} now takes {names}"
        assert set(patch.keywords) <= set(names), f"{where} no longer takes {patch.keywords}"
    if patch.calls:
        assert patch.calls in inspect.getsource(owner), f"{where}: {patch.calls!r} no longer in its source"
    assert (ROOT / "nstcam" / "app" / f"{patch.by}.py").is_file()


def _live_blocks():
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda s: s, box, box)
    demo.queue()
    return demo, box


def test_each_private_attribute_read_is_still_there():
    from gradio.mcp import GradioMCPServer
    from gradio.queueing import Event, EventQueue

    demo, box = _live_blocks()
    assert gi.queue_of(demo) is not None
    block_fn = next(iter(demo.fns.values()))
    live = {
        "gradio.blocks:Blocks": demo,
        "gradio.queueing:Queue": gi.queue_of(demo),
        "gradio.queueing:Event": Event("s", block_fn, None, None),
        "gradio.queueing:EventQueue": EventQueue("line", 1),
        "gradio.components:Component": box,
        "gradio.mcp:GradioMCPServer": GradioMCPServer(demo),
    }
    for read in gi.READS:
        obj = live[read.owner] if read.owner in live else gi.resolve(read.owner)
        where = f"Gradio {gr.__version__}: {read.owner}.{read.name} (read in nstcam/app/{read.by}.py)"
        assert hasattr(obj, read.name), where
        assert (ROOT / "nstcam" / "app" / f"{read.by}.py").is_file(), where
    assert gi.queued_events(demo) == [] and isinstance(gi.component_id(box), int)
    assert Path(gi.upload_folder()).is_absolute()


def test_every_patch_goes_through_the_door_and_is_installed_once(tmp_path, monkeypatch):
    from nstcam.app import AppConfig, Models, build_demo, launch_kwargs

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    config = AppConfig(random_weights=True, device="cpu")
    demo = build_demo(config, Models(config))
    launch_kwargs(config, mcp=True)
    for patch in gi.PATCHES:
        owner = gi.resolve(patch.owner)
        if patch.owner == "gradio.blocks:Blocks":
            owner = demo
        elif patch.owner.startswith("gradio.components:"):
            continue  # per component: below
        assert gi.installed(owner, patch.name), f"{patch.owner}.{patch.name} is not patched"
    inputs = [c for fn in demo.fns.values() if fn.api_name for c in fn.inputs]
    assert any(gi.installed(c, "api_info") for c in inputs)
    before = {p: getattr(gi.resolve(p.owner), p.name) for p in gi.PATCHES if ":" not in p.owner}
    launch_kwargs(config, mcp=True)
    build_demo(config, Models(config))
    assert all(getattr(gi.resolve(p.owner), p.name) is f for p, f in before.items())  # idempotent
    with pytest.raises(ValueError, match="not in gradio_internals.PATCHES"):
        gi.install(demo, "render", lambda f: f)
    # every patch in the app's code goes through install: no assignment into Gradio elsewhere
    pattern = re.compile(r"^\s*(route_utils|processing_utils|GradioMCPServer|comp|demo)\.\w+\s*=", re.M)
    for path in (ROOT / "nstcam" / "app").rglob("*.py"):
        if path.name != "gradio_internals.py":
            assert not pattern.search(path.read_text()), f"{path.name} patches Gradio outside the door"


@pytest.mark.parametrize(
    "version, known",
    [(gr.__version__, True), (gi.TESTED[0], True), (gi.TESTED[1], True), ("5.50.0", False),
     ("6.32.0", False), ("7.0.0", False), ("6.0.2", False), ("6.x", False)],
)  # fmt: skip
def test_the_app_knows_the_gradio_versions_it_was_tested_on(version, known):
    problem = gi.version_problem(version)
    assert (problem is None) == known
    if not known:
        assert f"Gradio {version}" in problem and gi.SUPPORTED in problem and "\n" not in problem


def test_requirements_and_pyproject_declare_the_tested_range():
    for name in ("requirements.txt", "pyproject.toml"):
        text = (ROOT / name).read_text()
        assert f"gradio[mcp]{gi.SUPPORTED}" in text, name


def test_the_app_refuses_to_start_on_an_unknown_gradio_in_one_line(monkeypatch):
    import app

    monkeypatch.setattr(gr, "__version__", "6.99.0")
    monkeypatch.setattr(app, "check_torch_pair", lambda: None)
    with pytest.raises(SystemExit) as e:
        app.main(["--random-weights", "--port", "0"])
    message = str(e.value.code)  # sys.exit(message): printed to stderr, exit status 1
    assert message.startswith("nstcam cannot start: ") and "Gradio 6.99.0" in message
    assert gi.SUPPORTED in message and "\n" not in message

"""The layout shows the design: the shared hook manager at the bottom, one subpackage per engine
(style, cam, fast), subject-aware as the only module below the app that uses both, the app and CLI
on top; no module imports upward, no cycles, no long classes."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "nstcam"

# rank of each part: a module may import its own part and the parts below it, never above
BASE = {
    "nstcam._version",
    "nstcam._device",
    "nstcam._checks",
    "nstcam._options",
    "nstcam._choices",
    "nstcam._files",
    "nstcam._terminal",
    "nstcam._lapack",
    "nstcam._threads",
    "nstcam._heap",
    "nstcam._mark",
    "nstcam._capture",
    "nstcam.preprocess",
    "nstcam.timm_zoo",
    "nstcam.layouts",
    "nstcam.hooks",
    "nstcam.image",
    "nstcam.mask",
    "nstcam.anchor",
    "nstcam.weights",
    "nstcam.color",
}
TOP = {
    "nstcam",
    "nstcam.__main__",
    "nstcam._entry",
    "nstcam._commands",
    "nstcam.distributed",
}


def part(module: str) -> str:
    if module in BASE:
        return "base"
    if module in TOP or any(module == p or module.startswith(f"{p}.") for p in ("nstcam.app", "nstcam.cli")):
        return "top"
    if module == "nstcam.subject":
        return "subject"
    if module == "nstcam.features":
        return "features"
    if module == "nstcam.metrics" or module.startswith("nstcam.metrics."):
        return "metrics"
    if module == "nstcam.video" or module.startswith("nstcam.video."):
        return "video"
    for engine in ("style", "cam", "fast"):
        if module == f"nstcam.{engine}" or module.startswith(f"nstcam.{engine}."):
            return engine
    raise AssertionError(f"{module} is in no layer of the layout: add it to this test")


ALLOWED = {
    "base": {"base"},
    "video": {"base", "video"},  # on any engine's public API (duck-typed): StyleTransfer.stylize_video
    "style": {"base", "style", "video", "fast"},  # init="fast": the fast network's painting
    "metrics": {"base", "metrics"},
    "fast": {"base", "fast", "video"},  # the feed-forward style networks; FastStyle.stylize_video
    "cam": {
        "base",
        "metrics",
        "cam",
        "video",
    },  # clips read and written as style's are: GradCAM.explain_video
    "subject": {"base", "style", "metrics", "cam"},
    "features": {"base", "style"},
    "top": {"base", "video", "style", "metrics", "cam", "subject", "features", "fast", "top"},
}


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(path: Path, known: set[str]) -> set[str]:
    """nstcam modules imported anywhere in the file (functions included), resolved to modules."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("nstcam"):
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, set(mods)) - {m} for m, p in mods.items()}


def test_expected_layout_exists():
    mods = modules()
    for name in (
        "nstcam.hooks",
        "nstcam.style.engine",
        "nstcam.style.hooks",
        "nstcam.cam.engine",
        "nstcam.cam.hooks",
        "nstcam.cam.methods",
        "nstcam.cam.overlay",
        "nstcam.subject",
    ):
        assert name in mods, f"{name} is missing"
    assert not (PKG / "style.py").exists() and not (PKG / "cam.py").exists()


def test_nothing_imports_upward():
    bad = []
    for mod, deps in graph().items():
        for dep in deps:
            if dep == "nstcam" and part(mod) != "top":
                bad.append(f"{mod} -> nstcam (import the defining module instead)")
            elif part(dep) not in ALLOWED[part(mod)]:
                bad.append(f"{mod} ({part(mod)}) -> {dep} ({part(dep)})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(sorted(bad))


def test_subject_is_the_only_module_below_the_app_using_both_engines():
    both = [
        m for m, deps in graph().items() if {part(d) for d in deps} >= {"style", "cam"} and part(m) != "top"
    ]
    assert both == ["nstcam.subject"]


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(g[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(d) :], d]))
            if d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])


def test_no_class_over_250_lines():
    long = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 250:
                long.append(f"{mod}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, long


def test_no_private_module_of_another_package_is_imported():
    """A package's ``_private`` modules and names are its own: what another part needs is its API
    (issue 38: distributed.py reached into style._run, style._plan and the engine's ``_rt``)."""
    reached = []
    for mod, path in modules().items():
        own = mod.split(".")[1] if mod.count(".") >= 1 else ""
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nstcam.")):
                continue
            parts = node.module.split(".")
            if parts[1] == own or (len(parts) == 2 and parts[1].startswith("_")):
                continue  # its own package, or a top-level helper (nstcam._files, nstcam._checks...)
            private = [p for p in parts[2:] if p.startswith("_")]
            names = [a.name for a in node.names if a.name.startswith("_")]
            if private or names:
                reached.append(f"{mod}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert not reached, reached


def test_import_nstcam_and_its_engines_load_neither_pyav_nor_opencv():
    import subprocess
    import sys

    code = (
        "import sys, nstcam; from nstcam import StyleTransfer, GradCAM; import nstcam.distributed;"
        "print(sorted(m for m in ('av', 'cv2') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr


FUNCTION_LINES = 100


def test_no_function_over_100_lines():
    """Issue 63: a function longer than this is split by meaning (a tab's layout from its handlers, a
    video loop from its frame step), never squeezed."""
    long = {}
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{mod}.{node.name}"] = lines
    assert not long, f"functions over {FUNCTION_LINES} lines (split them by meaning): {long}"


def test_no_formatter_is_told_to_skip():
    """Code reshaped to fit, never squeezed past the formatter (``fmt: skip`` / ``fmt: off``)."""
    marks = [
        f"{mod}:{i}"
        for mod, path in modules().items()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not marks, marks


def test_a_stylisations_options_and_defaults_live_in_one_place():
    """Issue 63: :class:`StyleOptions` holds every option of a stylisation with its default; the engine's
    methods, the plan, the CLI and the app read them from it instead of declaring their own."""

    from nstcam.cli import build_parser
    from nstcam.style import StyleOptions, StyleTransfer, stylize_defaults
    from nstcam.style._plan import make_plan
    from nstcam.style.options import OPTION_NAMES

    assert stylize_defaults() == StyleOptions().as_dict() and set(stylize_defaults()) == set(OPTION_NAMES)
    methods = (
        StyleTransfer.stylize,
        StyleTransfer.stylize_batch,
        StyleTransfer.stylize_many,
        StyleTransfer.plan,
    )
    for fn in (*methods, make_plan):
        code = fn.__code__  # what the code declares, not the signature shown to people (shows_options)
        named = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        declared = set(named) & set(OPTION_NAMES)
        assert not declared, f"{fn.__qualname__} declares options of its own: {declared}"
    # the CLI's defaults are the options' own
    args = build_parser().parse_args(["stylize", "c.png", "--style", "s.png", "-o", "out"])
    from nstcam.cli.stylize import _options

    assert _options(args) == StyleOptions()
    # the app's Advanced panel starts from them
    from nstcam.app.tabs import style as tab

    assert tab.DEFAULTS == stylize_defaults()


def test_the_command_line_is_one_module_per_command_as_the_app_is_one_per_tab():
    """Issue 63: ``nstcam/cli/`` holds one module per command, each adding its own arguments
    (``add_parser``) and running them (``run``, or one function per subcommand); every other public
    module there is an option group a command adds (``--fast``, ``--trust``)."""
    import inspect

    from nstcam._commands import COMMANDS
    from nstcam.cli import COMMAND_MODULES, build_parser

    assert list(COMMAND_MODULES) == list(COMMANDS)  # the commands in nstcam --help's order
    public = {p.stem for p in (PKG / "cli").glob("*.py") if not p.stem.startswith("_")}
    modules = {c.replace("-", "_") for c in COMMANDS}  # learn-style: learn_style.py
    groups = public - modules
    assert not (PKG / "cli.py").exists() and modules <= public and groups == {"fast", "trust"}
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, module in COMMAND_MODULES.items():
        assert module.__name__ == f"nstcam.cli.{name.replace('-', '_')}" and callable(module.add_parser)
        parser = sub.choices[name]
        funcs = [parser.get_default("func")]
        nested = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        funcs += [p.get_default("func") for a in nested for p in a.choices.values()]
        funcs = [f for f in funcs if f is not None]
        assert funcs, name
        # each command runs what its own module (or the option group it adds) defines
        homes = {inspect.getmodule(f).__name__ for f in funcs}
        assert homes <= {module.__name__, *(f"nstcam.cli.{g}" for g in groups)}, (name, homes)
        if not nested:
            assert parser.get_default("func") is module.run


# The app's own floors, bottom to top (issue 75): a module of nstcam.app imports its own floor and the
# floors below it, never above. Gradio's internals, the messages and the plots at the bottom; then the
# files this server owns; the run record the config holds; the config; the guard (admission and cost);
# run control; the widgets the tabs share; the tabs; and on top what assembles them (ui, the guard's
# install, MCP, the API info).
APP_FLOORS = (
    ("base", ("errors", "gradio_internals", "plots")),
    ("disk", ("disk", "disk.*")),
    ("runs", ("run.runs",)),
    ("config", ("config", "layers")),
    ("guard", ("guard.*",)),
    ("run", ("run", "run.*")),
    ("shared", ("widgets", "tools", "found")),
    ("tabs", ("tabs", "tabs.*")),
    ("top", ("", "ui", "mcp", "api_info", "guard", "guard._install")),
)


def app_floor(module: str) -> int:
    """The floor of an nstcam.app module (exact names before ``pattern.*`` ones)."""
    rel = module.removeprefix("nstcam.app").removeprefix(".")
    for exact in (True, False):
        for i, (_, patterns) in enumerate(APP_FLOORS):
            for pat in patterns:
                if exact and pat == rel:
                    return i
                if not exact and pat.endswith(".*") and rel.startswith(pat[:-1]):
                    return i
    raise AssertionError(f"{module} is on no floor of the app: add it to APP_FLOORS")


def test_the_app_imports_only_its_own_floor_and_below():
    app = {m: {d for d in deps if d.startswith("nstcam.app")} for m, deps in graph().items()}
    app = {m: deps for m, deps in app.items() if m.startswith("nstcam.app")}
    up = [
        f"{m} ({APP_FLOORS[app_floor(m)][0]}) -> {d} ({APP_FLOORS[app_floor(d)][0]})"
        for m, deps in app.items()
        for d in deps
        if app_floor(d) > app_floor(m)
    ]
    assert not up, "the app imports upward:\n" + "\n".join(sorted(up))
    # every floor holds a module, and the folders are the design's: one concept a folder
    floors = {APP_FLOORS[app_floor(m)][0] for m in app}
    assert floors == {name for name, _ in APP_FLOORS}
    folders = {p.name for p in (PKG / "app").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {"tabs", "guard", "run", "disk"}


def test_every_limit_of_the_app_is_a_named_constant_in_the_guard():
    """A refused request is explained by one folder: each ``MAX_*`` cap the app applies is defined in
    ``nstcam/app/guard/`` (``errors.MAX_ECHO``, the length a message quotes, is re-exported there)."""
    import nstcam.app.guard.limits as limits

    outside = {}
    for mod, path in modules().items():
        if not mod.startswith("nstcam.app") or mod.startswith("nstcam.app.guard"):
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Name) and "MAX" in t.id.lstrip("_").split("_"):
                    outside[t.id] = mod
    assert outside == {"MAX_ECHO": "nstcam.app.errors"}, outside
    from nstcam.app import errors

    assert limits.MAX_ECHO is errors.MAX_ECHO and "MAX_ECHO" in limits.__all__


def test_the_architecture_page_counts_and_names_what_the_tree_holds():
    """Issue 75: docs/architecture.md said 178 files and 27.8k lines where the tree held 184 and 29.5k,
    and named a ``style/_color.py`` that did not exist. Its counts are the tree's; every module it names
    is there, every module is named, and each app folder is drawn with its modules."""
    import re

    page = (PKG.parent / "docs" / "architecture.md").read_text()
    files = sorted(PKG.rglob("*.py"))
    lines = sum(len(p.read_text().splitlines()) for p in files)
    said = re.search(r"nstcam is (\d+) Python files in `nstcam/` \(([\d.]+)k lines\)", page)
    assert said, "docs/architecture.md no longer says how many files and lines nstcam is"
    assert int(said[1]) == len(files), f"docs/architecture.md says {said[1]} files; nstcam holds {len(files)}"
    assert float(said[2]) == round(lines / 1000, 1), f"it says {said[2]}k lines; nstcam holds {lines}"
    named = set(re.findall(r"\b(\w+)\.py\b", page)) - {"test_layout"}
    stems = {p.stem for p in files}
    assert named <= stems, f"docs/architecture.md names modules nstcam lacks: {sorted(named - stems)}"
    words = set(re.findall(r"\w+", page))
    unnamed = sorted(stems - words - {"__init__"})
    assert not unnamed, f"docs/architecture.md's map names no {unnamed}"
    app = page[page.index("├── app/") : page.index("├── cli/")]
    folders = {p.name for p in (PKG / "app").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for folder in folders:
        there = {p.stem for p in (PKG / "app" / folder).rglob("*.py") if p.stem != "__init__"}
        assert f"{folder}/" in app and there <= set(re.findall(r"\w+", app)), (folder, sorted(there))

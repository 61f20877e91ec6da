"""Gradio's internals, behind one door.

The app stands on Gradio's public API everywhere but here: this module lists every Gradio function
the app replaces or wraps (:data:`PATCHES`) and every private attribute it reads (:data:`READS`),
with the Gradio versions they were tested on (:data:`TESTED`). Every patch goes through
:func:`install` (idempotent; a patch not listed is refused), every private read through an accessor
here (:func:`queued_events`, :func:`component_id`, :func:`upload_folder`), and the app refuses to
start on a Gradio outside :data:`SUPPORTED` (:func:`check_version`), in one line.

``tests/test_gradio_internals.py`` holds each listed function to the parameters it had when its patch
was written, and each read attribute to its existence on a live Blocks, so that a Gradio release that
renames or reshapes one fails a named test instead of a visitor's request.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CACHE_SAVERS",
    "PATCHES",
    "READS",
    "SUPPORTED",
    "TESTED",
    "Patch",
    "Read",
    "check_version",
    "component_id",
    "install",
    "installed",
    "queued_events",
    "upload_folder",
    "version_problem",
]

TESTED = ("6.31.0", "6.31.0")
"""The oldest and the newest Gradio the suite passed on: one version so far (6.0.2, inside the range
declared before, started but served a stray public endpoint ``/False``), so the range is that one
minor until an older or newer Gradio passes the suite."""

SUPPORTED = ">=6.31.0,<6.32"
"""The Gradio versions the app starts on: those tested, as requirements.txt and pyproject declare them."""


@dataclass(frozen=True)
class Patch:
    """A Gradio function (or module attribute) the app replaces.

    Args:
        owner: a module (``"gradio.route_utils"``) or a class (``"gradio.blocks:Blocks"``, patched
            on each instance the app builds).
        name: the attribute replaced.
        params: the original's leading parameter names, as the wrapper passes them (None: not a
            function, or one called with whatever Gradio passes).
        keywords: parameters the wrapper reads by name.
        calls: source text the owner must hold for the patch to take effect (a replaced ``os`` works
            only where Gradio calls ``os.rename``).
        by: the module that installs it, its path under nstcam/app without ".py".
        why: what the app needs it for.
    """

    owner: str
    name: str
    params: tuple[str, ...] | None
    by: str
    why: str
    calls: str | None = None
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Read:
    """A private (or undocumented) Gradio attribute the app reads."""

    owner: str
    name: str
    by: str
    why: str


CACHE_SAVERS = (
    "save_pil_to_cache",
    "save_img_array_to_cache",
    "save_audio_to_cache",
    "save_bytes_to_cache",
    "save_file_to_cache",
    "save_base64_to_cache",
)
"""Gradio's functions that write a file into its cache and return its path (``processing_utils``)."""

PATCHES: tuple[Patch, ...] = (
    Patch(
        "gradio.route_utils",
        "os",
        None,
        "disk/owned",
        "an upload never replaces a file already at its name (os.rename), and is recorded as this server's",
        calls="os.rename(",
    ),
    Patch(
        "gradio.route_utils",
        "delete_files_created_by_app",
        ("blocks", "age"),
        "disk/owned",
        "Gradio's sweeps remove this server's files only",
    ),
    Patch(
        "gradio.route_utils",
        "NamedTemporaryFile",
        None,
        "guard/uploads",
        "the files of an upload cut short are known and removed",
    ),
    *(
        Patch(
            "gradio.processing_utils",
            name,
            None,
            "disk/cache",
            "every file Gradio caches is recorded, granted to its client and swept by this server",
        )
        for name in CACHE_SAVERS
    ),
    Patch(
        "gradio.mcp:GradioMCPServer",
        "_execute_tool_without_progress",
        ("self", "job"),
        "mcp",
        "a tool of several outputs returns one content item per output",
    ),
    Patch(
        "gradio.mcp:GradioMCPServer",
        "_prepare_tool_call_args",
        ("self", "name", "arguments"),
        "mcp",
        "an agent's files are written as the client of its HTTP request",
    ),
    Patch(
        "gradio.mcp:GradioMCPServer",
        "postprocess_output_data",
        ("self", "data", "root_url"),
        "mcp",
        "no server URL goes back to an agent",
    ),
    Patch(
        "gradio.mcp:GradioMCPServer",
        "get_input_schema",
        ("self", "tool_name", "parameters"),
        "mcp",
        "a tool's schema resolves (no $ref to a $defs inside a property) and takes the nulls it offers",
    ),
    Patch(
        "gradio.mcp:GradioMCPServer",
        "convert_strings_to_filedata",
        ("self", "value", "filedata_positions"),
        "mcp",
        "each file of a list (training photos, an editor's layers) is read as a file",
    ),
    Patch(
        "gradio.queueing:Queue",
        "send_message",
        ("self", "event", "event_message"),
        "guard/fair",
        "an event whose answer was sent no longer counts as its client's job (Gradio frees its worker "
        "a moment later, after the client may have read it and asked again)",
    ),
    Patch(
        "gradio.blocks:Blocks",
        "validate_inputs",
        ("self", "block_fn", "inputs"),
        "guard/gate",
        "every request's values are checked where Gradio first reads them",
    ),
    Patch(
        "gradio.blocks:Blocks",
        "process_api",
        None,
        "disk/access",
        "every event runs as its request's client (its files only)",
        keywords=("request",),
    ),
    Patch(
        "gradio.components:Image",
        "preprocess",
        ("self", "payload"),
        "guard/streams",
        "a webcam frame's size is read from its header before Gradio decodes it; an image upload is "
        "handed over as the file itself (files)",
    ),
    Patch(
        "gradio.components:Video",
        "preprocess",
        ("self", "payload"),
        "guard/inputs",
        "a video reaches Gradio's FFmpeg only in an allowed container",
    ),
    Patch(
        "gradio.components:File",
        "preprocess",
        ("self", "payload"),
        "guard/inputs",
        "a file input is an upload of this client's",
    ),
    Patch(
        "gradio.components:ImageEditor",
        "preprocess",
        ("self", "payload"),
        "guard/inputs",
        "an editor's layers are uploads of this client's, within the pixel cap",
    ),
    Patch(
        "gradio.components:Component",
        "api_info",
        ("self",),
        "api_info",
        "each endpoint input's description and true type in the API info",
    ),
    Patch(
        "gradio.components:Component",
        "api_info_as_input",
        ("self",),
        "api_info",
        "the same, where Gradio asks for the input's info",
    ),
)

READS: tuple[Read, ...] = (
    Read("gradio.blocks:Blocks", "_queue", "guard/streams", "the queue's waiting and running events"),
    Read("gradio.queueing:Queue", "event_queue_per_concurrency_id", "guard/fair", "the waiting lines"),
    Read("gradio.queueing:EventQueue", "queue", "guard/fair", "a line's waiting events, reordered in turns"),
    Read("gradio.queueing:Queue", "active_jobs", "guard/fair", "the running events"),
    Read("gradio.queueing:Event", "concurrency_id", "guard/fair", "the line a running event is of"),
    Read("gradio.queueing:Event", "fn", "guard/streams", "which endpoint an event runs"),
    Read("gradio.queueing:Event", "request", "guard/fair", "its client (the cookie) and address"),
    Read("gradio.queueing:Event", "session_hash", "guard/streams", "its browser tab"),
    Read("gradio.queueing:Event", "closed", "guard/streams", "ended streams are not counted; set to end one"),
    Read("gradio.queueing:Event", "alive", "guard/streams", "set to end a stream as Gradio's close does"),
    Read("gradio.queueing:Event", "run_time", "guard/streams", "set to end a stream as Gradio's close does"),
    Read("gradio.queueing:Event", "signal", "guard/streams", "set to wake the stream's loop"),
    Read("gradio.components:Component", "_id", "api_info", "an input two endpoints share is described once"),
    Read("gradio.blocks:Blocks", "temp_file_sets", "disk/cache", "the cached files join Gradio's sweep"),
    Read("gradio.utils", "get_upload_folder", "disk/owned", "where Gradio keeps uploads"),
    Read("gradio.blocks:Blocks", "get_config_file", "api_info", "the config retaken"),
    Read("gradio.blocks:Blocks", "config", "api_info", "the config Gradio serves"),
    Read("gradio.blocks:Blocks", "fns", "guard/gate", "each endpoint's function and inputs"),
    Read("gradio.mcp:GradioMCPServer", "api_info", "mcp", "a tool's parameters and their defaults"),
    Read("gradio.mcp:GradioMCPServer", "tool_to_endpoint", "mcp", "the endpoint a tool calls"),
)


def _version() -> str:
    import gradio

    return gradio.__version__


def version_problem(version: str | None = None) -> str | None:
    """Why this app cannot run on Gradio ``version`` (default: the installed one), in one line, or None."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    version = version or _version()
    try:
        known = Version(version) in SpecifierSet(SUPPORTED)
    except InvalidVersion:
        known = False
    if known:
        return None
    return (
        f"nstcam's app was tested on Gradio {SUPPORTED.replace(',', ' and ')} (it patches Gradio's "
        f"internals: nstcam/app/gradio_internals.py); this is Gradio {version}: "
        f"pip install 'gradio[mcp]{SUPPORTED}'"
    )


def check_version() -> None:
    """Raises RuntimeError (one line) unless the installed Gradio is in :data:`SUPPORTED`."""
    problem = version_problem()
    if problem:
        raise RuntimeError(problem)


def resolve(owner: str) -> Any:
    """The module or class ``owner`` names (``"gradio.route_utils"``, ``"gradio.blocks:Blocks"``)."""
    module, _, cls = owner.partition(":")
    found = importlib.import_module(module)
    return getattr(found, cls) if cls else found


def _listed(obj: Any, name: str) -> Patch:
    for patch in PATCHES:
        if patch.name != name:
            continue
        owner = resolve(patch.owner)
        if owner is obj or (isinstance(owner, type) and isinstance(obj, owner)):
            return patch
    raise ValueError(f"{type(obj).__name__}.{name} is not in gradio_internals.PATCHES: list it there first")


def install(obj: Any, name: str, make: Callable[[Any], Any], again: bool = False) -> Any:
    """Replaces ``obj.name`` by ``make(current)``, once (idempotent), where :data:`PATCHES` lists it.

    ``obj`` is the patch's owner module or class, or an instance of its class; the replacement keeps
    what it replaced as ``__wrapped__`` and is marked as nstcam's. ``again`` replaces an nstcam patch
    already there too (a component's API info, described once more by the app). Returns the
    replacement.
    """
    _listed(obj, name)
    current = getattr(obj, name)
    if getattr(current, "nstcam_patch", False) and not again:
        return current
    new = make(current)
    new.nstcam_patch = True
    new.__wrapped__ = current
    setattr(obj, name, new)
    return new


def original(obj: Any, name: str) -> Any:
    """``obj.name`` as Gradio made it, under any nstcam patch."""
    found = getattr(obj, name)
    while getattr(found, "nstcam_patch", False):
        found = found.__wrapped__
    return found


def installed(obj: Any, name: str) -> bool:
    """Whether nstcam's patch of ``obj.name`` is in place."""
    return bool(getattr(getattr(obj, name, None), "nstcam_patch", False))


def parameters(func: Any) -> tuple[str, ...]:
    """The parameter names Gradio's ``func`` takes (a class: its ``__init__``'s, ``self`` included)."""
    func = func.__init__ if isinstance(func, type) else func
    return tuple(inspect.signature(func, follow_wrapped=False).parameters)


def queue_of(blocks: Any) -> Any:
    """Gradio's queue of ``blocks`` (None before it has one)."""
    return getattr(blocks, "_queue", None)


def queued_events(blocks: Any) -> list[Any]:
    """Every event Gradio's queue holds: waiting and running."""
    queue = queue_of(blocks)
    if queue is None:
        return []
    waiting = [e for q in queue.event_queue_per_concurrency_id.values() for e in q.queue]
    return waiting + running_events(blocks)


def waiting_lines(blocks: Any) -> dict[str, list[Any]]:
    """The queue's waiting lines by ``concurrency_id``, each Gradio's own list (the order it serves
    them in: reordering one in place reorders the line)."""
    queue = queue_of(blocks)
    if queue is None:
        return {}
    return {line: q.queue for line, q in queue.event_queue_per_concurrency_id.items()}


def running_events(blocks: Any) -> list[Any]:
    """The events Gradio's queue is running."""
    queue = queue_of(blocks)
    return [e for job in queue.active_jobs if job for e in job] if queue is not None else []


def drop_waiting(blocks: Any, event: Any) -> None:
    """Takes ``event`` out of the queue's waiting lines."""
    queue = queue_of(blocks)
    for q in queue.event_queue_per_concurrency_id.values() if queue is not None else ():
        if event in q.queue:
            q.queue.remove(event)


def end_event(event: Any) -> None:
    """Ends a queued event as Gradio's own close does."""
    event.run_time, event.closed, event.alive = float("inf"), True, False
    event.signal.set()


def tool_parameters(server: Any, tool_name: str) -> list[dict[str, Any]]:
    """The API info of the parameters of the endpoint that the MCP ``server``'s tool calls."""
    endpoint = server.tool_to_endpoint.get(tool_name)
    return server.api_info["named_endpoints"].get(endpoint, {}).get("parameters", [])


def component_id(comp: Any) -> int:
    """A component's id within its Blocks."""
    return comp._id


def upload_folder() -> str:
    """Gradio's upload folder (``GRADIO_TEMP_DIR``, else its default)."""
    from gradio.utils import get_upload_folder

    return get_upload_folder()


def refresh_config(blocks: Any) -> None:
    """Retakes the config Gradio serves (taken when the Blocks closed), after the app changed it."""
    blocks.config = blocks.get_config_file()

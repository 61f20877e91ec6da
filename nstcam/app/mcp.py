"""The app's endpoints as Model Context Protocol tools (``python app.py --mcp``).

Gradio serves them itself (``launch(mcp_server=True)``, the ``gradio[mcp]`` extra) at
``/gradio_api/mcp/``, describing each tool from its endpoint's docstring (``tools.py``). One
correction is applied: Gradio 6 returns the outputs of a multi-output endpoint, called without a
progress token, as a single text item (the tuple's repr) instead of one item per output, so an
agent would get no image. :func:`enable_mcp` unpacks them, so images come back as image content;
a gallery's images come back each as an image item followed by its caption (Gradio gave the
gallery as one text, a Python repr of server paths); a text file (the trust report's CSV and
markdown) comes back as its name and its text; a learned style's file as its name and a ``data:``
URL (which the agent sends back as ``/stylize``'s ``style_file``: Gradio gave a URL holding its
server path); and no item names a server path (Gradio adds an
"Image URL" text per image, a URL that holds the file's path on the server). The files an agent
sends are its own (:mod:`nstcam.app.disk.access`): granted to the client of the request that calls the
tool.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.guard.limits import MAX_TOOL_FILE_BYTES, MAX_TOOL_MEDIA_BYTES

__all__ = ["enable_mcp"]

logger = logging.getLogger(__name__)


def enable_mcp() -> None:
    """Makes Gradio's MCP server return one content item per output (idempotent)."""
    try:
        from gradio.mcp import GradioMCPServer
    except ImportError as e:  # pragma: no cover - gradio[mcp] is in requirements.txt
        raise RuntimeError("--mcp needs the MCP extra: pip install 'gradio[mcp]'") from e
    install = gradio_internals.install
    install(GradioMCPServer, "_execute_tool_without_progress", _unpacked)
    install(GradioMCPServer, "_prepare_tool_call_args", _as_caller)
    install(GradioMCPServer, "postprocess_output_data", _without_paths)
    install(GradioMCPServer, "get_input_schema", _agent_schema)
    install(GradioMCPServer, "convert_strings_to_filedata", _each_file_of_a_list)
    logger.debug("MCP: multi-output tools return one content item per output")


_FILE_FORMAT = "Gradio File Input"
"""How Gradio's MCP server marks a file parameter it takes as a URL (the start of ``format``)."""


def _agent_schema(original: Any) -> Any:
    """Gradio's tool schema made one an MCP client validates against: see :func:`tool_schema`."""

    @functools.wraps(original)
    def agent_schema(self: Any, tool_name: str, parameters: Any = None) -> tuple[dict[str, Any], list]:
        schema, positions = original(self, tool_name, parameters)
        params = gradio_internals.tool_parameters(self, tool_name)
        nullable = {
            p["parameter_name"]
            for p in params
            if p.get("parameter_has_default") and p.get("parameter_default") is None
        }
        return tool_schema(schema, nullable), positions

    return agent_schema


def tool_schema(schema: dict[str, Any], nullable: Iterable[str] = ()) -> dict[str, Any]:
    """``schema`` (Gradio's for a tool) as an MCP client validates it: a file taken as a URL keeps
    no ``$ref`` (Gradio left ``{"$ref": "#/$defs/FileData", "type": "string"}`` in a list of files,
    and its ``$defs`` inside the property, where no reference resolves: "PointerToNowhere"); any
    ``$defs`` still referenced move to the schema's root; each parameter of ``nullable`` (its
    default is None, as its description says) also takes null."""
    schema = copy.deepcopy(schema)
    defs: dict[str, Any] = {}

    def clean(node: Any) -> Any:
        if isinstance(node, list):
            return [clean(n) for n in node]
        if not isinstance(node, dict):
            return node
        defs.update(node.pop("$defs", None) or {})
        if str(node.get("format", "")).startswith(_FILE_FORMAT):
            for key in ("$ref", "required", "properties"):
                node.pop(key, None)
        return {k: clean(v) for k, v in node.items()}

    props = {name: clean(prop) for name, prop in schema.get("properties", {}).items()}
    refs = {m.rsplit("/", 1)[-1] for m in _refs(props)}
    for name in set(nullable) & set(props):
        props[name] = _with_null(props[name])
    schema["properties"] = props
    if refs:
        schema["$defs"] = {k: clean(v) for k, v in defs.items()}
    return schema


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _with_null(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` that also takes null."""
    if "anyOf" in prop:
        if {"type": "null"} not in prop["anyOf"]:
            prop["anyOf"] = [*prop["anyOf"], {"type": "null"}]
        return prop
    kind = prop.get("type")
    if isinstance(kind, str):
        prop["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        prop["type"] = [*kind, "null"]
    if "enum" in prop and None not in prop["enum"]:
        prop["enum"] = [*prop["enum"], None]
    return prop


def _each_file_of_a_list(original: Any) -> Any:
    """Gradio's conversion of an agent's file URLs into files, for every item of a list of files
    and every optional file too: Gradio records their positions as the schema's
    (``[name, "items"]``, ``[name, "background", "anyOf", 0]``), which no value has, so a list of
    photos and an editor's layers and background reached the app as texts."""

    @functools.wraps(original)
    def each_file(self: Any, value: Any, filedata_positions: list) -> Any:
        return original(self, value, _item_positions(value, filedata_positions))

    return each_file


def _item_positions(value: Any, positions: list[list[Any]]) -> list[list[Any]]:
    """``positions`` as the value's own: each ``"items"`` step replaced by every index the value has
    there, and each ``"anyOf", k`` step (a file or null: an editor's background) left out."""
    out: list[list[Any]] = []
    for position in positions:
        steps = [
            step
            for i, step in enumerate(position)
            if step != "anyOf" and not (i and position[i - 1] == "anyOf" and isinstance(step, int))
        ]
        paths: list[list[Any]] = [[]]
        for step in steps:
            grown = []
            for path in paths:
                node = _at(value, path)
                if step == "items" and isinstance(node, list):
                    grown += [[*path, i] for i in range(len(node))]
                else:
                    grown.append([*path, step])
            paths = grown
        out += paths
    return out


def _at(value: Any, path: list[Any]) -> Any:
    for step in path:
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and isinstance(step, int) and step < len(value):
            value = value[step]
        else:
            return None
    return value


def _unpacked(original: Any) -> Any:
    """Gradio's tool call, its outputs one content item each (images as images, texts read)."""

    @functools.wraps(original)
    async def unpacked(self: Any, job: Any) -> list[Any]:
        out = await original(self, job)
        if len(out) == 1 and isinstance(out[0], tuple):
            out = list(out[0])
        return _data_sent(_texts_read(_galleries_expanded(out)))

    return unpacked


def _without_paths(contents: Any) -> Any:
    """Gradio's tool outputs without a server path or URL: its "Image URL" texts dropped, and a
    video (which Gradio gave as a text naming a URL of the server's own loopback client, 404 to the
    agent) sent as an embedded resource, its bytes inline (:func:`_as_resource`)."""

    @functools.wraps(contents)
    def without_paths(self: Any, data: Any, root_url: str) -> list[Any]:
        items: list[Any] = []
        sent: set[bytes] = set()
        for output in data:
            if _is_file(output) and Path(output["path"]).suffix.lower() in _MEDIA_FILES:
                digest = hashlib.sha256(Path(output["path"]).read_bytes()).digest()
                if digest not in sent:  # a clip both played and offered to download: sent once
                    sent.add(digest)
                    items.append(_as_resource(self.types, output))
            else:
                items += contents(self, [output], root_url)
        return [i for i in items if not (i.type == "text" and _names_a_path(i.text))]

    return without_paths


_MEDIA_FILES = {".mp4": "video/mp4", ".webm": "video/webm", ".gif": "image/gif"}
"""Results an agent gets as an embedded resource (their bytes): the clips."""


def _names_a_path(text: str) -> bool:
    """Whether an output's text is a server URL or path (Gradio's "Image URL: ..." and a file's URL)."""
    return text.startswith(_URL_TEXT) or "/gradio_api/file=" in text or text.startswith("/")


def _as_resource(types: Any, f: dict) -> Any:
    """A result file as an MCP embedded resource (``nstcam://results/<name>``, its MIME type, its
    bytes in base64), or one line saying it is too large to send (:data:`MAX_TOOL_MEDIA_BYTES`)."""
    import base64

    path = Path(f["path"])
    name = Path(f.get("orig_name") or path.name).name
    size = path.stat().st_size
    if size > MAX_TOOL_MEDIA_BYTES:
        text = (
            f"{name}: {size / 1e6:.1f} MB, over the {MAX_TOOL_MEDIA_BYTES / 1e6:.0f} MB a tool sends inline"
        )
        return types.TextContent(type="text", text=text)
    blob = types.BlobResourceContents(
        uri=f"nstcam://results/{name}",
        mimeType=_MEDIA_FILES[path.suffix.lower()],
        blob=base64.b64encode(path.read_bytes()).decode("ascii"),
    )
    return types.EmbeddedResource(type="resource", resource=blob)


def _as_caller(prepare: Any) -> Any:
    """Gradio's preparation of a tool call, run as the client of the HTTP request that calls it."""

    @functools.wraps(prepare)
    def as_caller(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The files an agent sends (data: URLs) are written here, in the MCP session's own task:
        # they are granted to the client of the HTTP request that calls the tool (a call Gradio
        # runs directly reads them as that client). A queued call goes through Gradio's loopback
        # client, which uploads them again as its own: it runs as that client, so its cookie, not
        # the agent's, goes with the call (an agent names no server path: its files are data: URLs).
        from nstcam.app.disk.access import as_client, client_of_gradio_request, new_token

        client = client_of_gradio_request(self.mcp_server.request_context.request) or new_token()
        with as_client(client):
            endpoint, values, headers, block_fn = prepare(self, *args, **kwargs)
        headers = {k: v for k, v in headers.items() if k.lower() != "cookie"}
        return endpoint, values, headers, block_fn

    return as_caller


_URL_TEXT = ("Image URL: ", "SVG Image URL: ")
_FILE_META = {"_type": "gradio.FileData"}


def _is_gallery(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "image" in i for i in value)
    )


def _galleries_expanded(outputs: list[Any]) -> list[Any]:
    """Each gallery output replaced by its images (file values Gradio's MCP server sends as image
    items), each followed by its caption."""
    flat: list[Any] = []
    for output in outputs:
        if not _is_gallery(output):
            flat.append(output)
            continue
        for item in output:
            image = item["image"]
            if isinstance(image, str):  # a client that downloaded it: a path of its own
                image = {"path": image, "url": None, "orig_name": Path(image).name, "meta": _FILE_META}
            flat.append(image)
            if item.get("caption"):
                flat.append(item["caption"])
    return flat


_TEXT_FILES = (".csv", ".md", ".txt", ".json")


def _is_file(value: Any) -> bool:
    return isinstance(value, dict) and "path" in value and value.get("meta") == _FILE_META


def _texts_read(outputs: list[Any]) -> list[Any]:
    """Each text file output (one, or a list of them) replaced by ``"name:\ntext"`` (an agent reads
    the report; Gradio would give a Python repr of server paths); other files stay as they are."""
    flat: list[Any] = []
    for output in outputs:
        files = output if isinstance(output, list) and output and all(map(_is_file, output)) else [output]
        if not all(_is_file(f) and Path(f["path"]).suffix.lower() in _TEXT_FILES for f in files):
            flat.append(output)
            continue
        for f in files:
            path = Path(f["path"])
            name = f.get("orig_name") or path.name
            small = path.stat().st_size <= MAX_TOOL_FILE_BYTES
            text = path.read_text(errors="replace") if small else "(too long)"
            flat.append(f"{name}:\n{text}")
    return flat


_DATA_FILES = (".safetensors",)
"""Small binary results (a learned style, a few KB) an agent gets as a ``data:`` URL."""


def _data_sent(outputs: list[Any]) -> list[Any]:
    """Each small binary file output (:data:`_DATA_FILES`) replaced by its name and a ``data:`` URL."""
    return [
        _as_data_url(o) if _is_file(o) and Path(o["path"]).suffix.lower() in _DATA_FILES else o
        for o in outputs
    ]


def _as_data_url(f: dict) -> str:
    """``"name: data:application/octet-stream;base64,..."``, to send back as a file input."""
    import base64

    path = Path(f["path"])
    name = f.get("orig_name") or path.name
    if path.stat().st_size > MAX_TOOL_FILE_BYTES:
        return f"{name}: (too large to send)"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"{name}: data:application/octet-stream;base64,{data}"

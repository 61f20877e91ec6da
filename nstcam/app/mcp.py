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

import functools
import logging
from pathlib import Path
from typing import Any

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.guard.limits import MAX_TOOL_FILE_BYTES

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
    logger.debug("MCP: multi-output tools return one content item per output")


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
    """Gradio's tool outputs without the server URLs it adds as text."""

    @functools.wraps(contents)
    def without_paths(self: Any, data: Any, root_url: str) -> list[Any]:
        items = contents(self, data, root_url)
        return [i for i in items if not (i.type == "text" and i.text.startswith(_URL_TEXT))]

    return without_paths


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

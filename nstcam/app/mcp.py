"""The app's endpoints as Model Context Protocol tools (``python app.py --mcp``).

Gradio serves them itself (``launch(mcp_server=True)``, the ``gradio[mcp]`` extra) at
``/gradio_api/mcp/``, describing each tool from its endpoint's docstring (``tools.py``). One
correction is applied: Gradio 6 returns the outputs of a multi-output endpoint, called without a
progress token, as a single text item (the tuple's repr) instead of one item per output, so an
agent would get no image. :func:`enable_mcp` unpacks them, so images come back as image content.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["enable_mcp"]

logger = logging.getLogger(__name__)


def enable_mcp() -> None:
    """Makes Gradio's MCP server return one content item per output (idempotent)."""
    try:
        from gradio.mcp import GradioMCPServer
    except ImportError as e:  # pragma: no cover - gradio[mcp] is in requirements.txt
        raise RuntimeError("--mcp needs the MCP extra: pip install 'gradio[mcp]'") from e
    original = getattr(GradioMCPServer, "_execute_tool_without_progress", None)
    if original is None or getattr(original, "_nstcam_unpacks", False):
        return

    @functools.wraps(original)
    async def unpacked(self: Any, job: Any) -> list[Any]:
        out = await original(self, job)
        if len(out) == 1 and isinstance(out[0], tuple):
            return list(out[0])
        return out

    unpacked._nstcam_unpacks = True  # type: ignore[attr-defined]
    GradioMCPServer._execute_tool_without_progress = unpacked  # type: ignore[method-assign]
    logger.debug("MCP: multi-output tools return one content item per output")

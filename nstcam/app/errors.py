"""User errors: shown in the app, logged as one line (no traceback, which is kept for real faults)."""

from __future__ import annotations

import logging

import gradio as gr

__all__ = ["refuse"]

logger = logging.getLogger("nstcam.app")


def refuse(message: str) -> gr.Error:
    """The error to raise for an ordinary mistake (no upload, a bad layer, a size over the limit).

    Gradio shows ``message`` to the user; the server log gets one line, not a traceback.
    """
    logger.info("request refused: %s", message)
    return gr.Error(message, print_exception=False)

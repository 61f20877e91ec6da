"""The ``nstcam`` command's top level: its commands and what each does, with no heavy import, so that
``nstcam --help`` answers without loading PyTorch (:mod:`nstcam._entry`); :func:`nstcam.cli.build_parser`
builds every command's own arguments on the same top."""

from __future__ import annotations

import argparse
from typing import Any

from nstcam._version import __version__

__all__ = ["COMMANDS", "command", "top_level_help", "top_parser"]

COMMANDS: dict[str, str] = {
    "weights": "manage pretrained weight files",
    "stylize": "stylise images (files, folders or globs) with one or more styles",
    "cam": "Grad-CAM saliency overlays and top classes",
    "video": "stylise a clip without flicker (temporal consistency, Ruder et al. 2016)",
    "features": "a grid of the most active channels of one layer",
    "learn-style": "learn a painting as a new instant style for --fast (a .safetensors file)",
}
"""Each command and its one-line help, in the order ``nstcam --help`` lists them."""


def top_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The parser's top (program, description, ``--version``, ``-v``) and its commands' subparsers
    action, to which :func:`command` adds each command."""
    p = argparse.ArgumentParser(prog="nstcam", description="Neural style transfer and Grad-CAM.")
    p.add_argument("--version", action="version", version=f"nstcam {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return p, p.add_subparsers(dest="command", required=True)


def command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of command ``name``, with its help from :data:`COMMANDS`."""
    return sub.add_parser(name, help=COMMANDS[name], **kwargs)


def top_level_help(args: list[str]) -> bool:
    """Whether ``args`` ask for the top level's help only (``-h``, ``--help``, or nothing)."""
    return args in ([], ["-h"], ["--help"])

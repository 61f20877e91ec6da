"""The ``nstcam`` command's entry point: ``--version`` and the top level's ``--help`` answer without
loading PyTorch; anything else runs :func:`nstcam.cli.main`."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        from nstcam._version import __version__

        print(f"nstcam {__version__}")
        return 0
    from nstcam._commands import COMMANDS, command, top_level_help, top_parser

    if top_level_help(args):  # the commands and what each does: no PyTorch to load for that
        parser, sub = top_parser()
        for name in COMMANDS:
            command(sub, name)
        parser.parse_args(args)  # prints the help and exits (0; 2 with no command)
    from nstcam.cli import main as cli_main

    return cli_main(argv)

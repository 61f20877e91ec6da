"""The ``nstcam`` command's entry point: ``--version`` answers without loading PyTorch; anything else
runs :func:`nstcam.cli.main`."""

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
    from nstcam.cli import main as cli_main

    return cli_main(argv)

"""The ``nstcam`` command line (``nstcam`` or ``python -m nstcam``): one module per command, as the
app has one module per tab.

Each command's module (:mod:`~nstcam.cli.weights`, :mod:`~nstcam.cli.stylize`, :mod:`~nstcam.cli.cam`,
:mod:`~nstcam.cli.video`, :mod:`~nstcam.cli.features`) owns its arguments (``add_parser(sub)``) and
what it does (``run(args)``, which ``add_parser`` sets as the command's ``func``); what several share is
in :mod:`nstcam.cli._common`, how a run is framed (logging, folders) in :mod:`nstcam.cli._run`. A new
command is a module here, its line in :data:`nstcam._commands.COMMANDS` (its help, which
``nstcam --help`` reads without loading PyTorch) and its name in :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from nstcam._commands import top_parser
from nstcam.cli import cam, features, learn_style, stylize, video, weights
from nstcam.cli._run import CliWords, OncePerRun, folders_to_make, options, remove_empty

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES: dict[str, ModuleType] = {
    "weights": weights,
    "stylize": stylize,
    "cam": cam,
    "video": video,
    "features": features,
    "learn-style": learn_style,
}
"""Each command's module, in the order of :data:`nstcam._commands.COMMANDS`."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nstcam`` command: each command's module adds its own."""
    p, sub = top_parser()
    for module in COMMAND_MODULES.values():
        module.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    filters = [CliWords(options(parser, argv)), OncePerRun()]
    handlers = logging.getLogger().handlers
    for h in handlers:
        for f in filters:
            h.addFilter(f)
    made = folders_to_make(getattr(args, "output", None))
    try:
        return int(args.func(args) or 0)
    finally:
        for h in handlers:
            for f in filters:
                h.removeFilter(f)
        remove_empty(made)


if __name__ == "__main__":
    sys.exit(main())

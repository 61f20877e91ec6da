"""How a command runs: the library's words said in the CLI's (``top_k=`` as ``--top-k``), the
random-weights notice once per run, and the folders a command made and left empty removed."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CliWords", "OncePerRun", "folders_to_make", "options", "remove_empty"]


class CliWords(logging.Filter):
    """Says what the library says in Python (``size=2024``, ``tile=512``, ``top_k``) in the CLI's own
    words (``--size 2024``, ``--tile 512``, ``--top-k``), for the options of the command that runs;
    the Python recipe for listing a model's layers is dropped (the closest names are given)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__()
        self.options = options
        assigned = "|".join(sorted(map(re.escape, options), key=len, reverse=True))
        bare = "|".join(sorted((re.escape(o) for o in options if "_" in o), key=len, reverse=True))
        parts = [rf"(?<![\w/.(-])({assigned})=([^\s,;)]*)"] if assigned else []  # "(seed=0)" stays
        parts += [rf"(?<![\w/.-])({bare})(?![\w/.=-])"] if bare else []
        self.pattern = re.compile("|".join(parts)) if parts else None

    def _say(self, m: re.Match) -> str:
        if m[1] is not None:  # name=value, or name= alone
            return f"{self.options[m[1]]} {m[2]}" if m[2] else self.options[m[1]]
        return self.options[m[3]]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        new = text.replace(" See [n for n, _ in model.named_modules()] for all names.", "")
        if self.pattern is not None:
            new = self.pattern.sub(self._say, new)
        if new != text:
            record.msg, record.args = new, ()
        return True


def options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> dict[str, str]:
    """The chosen command's options, Python name -> flag (``top_k`` -> ``--top-k``). :class:`CliWords`
    rewrites ``name=value`` and bare names with an underscore, never a word of a path."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    words = list(argv if argv is not None else sys.argv[1:])
    command = next((sub.choices[w] for w in words if sub is not None and w in sub.choices), None)
    actions = command._actions if command is not None else []
    return {
        a.dest: max(a.option_strings, key=len)
        for a in actions
        if a.option_strings and a.dest not in ("help", "verbose") and a.dest.isidentifier()
    }


class OncePerRun(logging.Filter):
    """Lets a message through once per CLI run: the random-weights notice is logged where the model
    is built and where each engine takes it, and a person needs to read it once."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, logging.LogRecord] = {}  # each handler asks about the same record

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "RANDOM weights" not in text or self.first.setdefault(text, record) is record


def folders_to_make(output: str | None) -> list[Path]:
    """The folders of ``output`` that do not exist yet, deepest first: what a command may create."""
    if not output:
        return []
    path, missing = Path(output).absolute(), []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def remove_empty(folders: list[Path]) -> None:
    """The one rule of every command: a folder it made and left empty (the run failed, or wrote
    nothing) is removed again, deepest first."""
    for folder in folders:
        try:
            folder.rmdir()  # only if it is an empty folder
        except OSError:
            return

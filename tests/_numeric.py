"""Threshold assertions that say how close they ran to their edge.

``bound("style fell to", ratio, "<", 0.9)`` asserts like ``assert ratio < 0.9`` and, where
``NSTCAM_NUMERIC_LOG`` names a file (``tests/numeric_matrix.py`` sets it), appends the measured value,
the comparison and the test's name to it as one JSON line: the matrix prints each value beside its
bound under every setting, so a test that runs near its edge shows before a machine flips it.
"""

from __future__ import annotations

import json
import math
import operator
import os

LOG = "NSTCAM_NUMERIC_LOG"
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


def current_test() -> str:
    """The running test's id, ``file.py::name[params]`` (from pytest's PYTEST_CURRENT_TEST)."""
    now = os.environ.get("PYTEST_CURRENT_TEST", "?")
    return now.rsplit(" (", 1)[0].removeprefix("tests/")


def bound(what: str, value: float, op: str, limit: float) -> float:
    """Asserts ``value op limit`` (``op``: <, <=, >, >= or ==), recorded for the numeric matrix;
    returns ``value``."""
    value, limit = float(value), float(limit)
    ok = OPS[op](value, limit) and not math.isnan(value)
    path = os.environ.get(LOG)
    if path:
        row = {"test": current_test(), "what": what, "value": value, "op": op, "limit": limit, "ok": ok}
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    assert ok, f"{what}: {value:.6g} is not {op} {limit:.6g}"
    return value

"""The numeric matrix: the chosen tests once per CPU setting, and how close each ran to its bounds.

A developer's machine can play a newcomer's: environment variables choose which kernels PyTorch runs
on this CPU, and each choice rounds floats differently. This runs the tests marked ``numeric`` (or a
``-m`` expression of your own) under each setting in a fresh process and prints one markdown table: a
row per test (pass / FAIL / skip under each setting) and below it a row per recorded threshold
(``tests/_numeric.py``'s ``bound``): the measured value under each setting beside its bound, and the
closest any setting came to the edge.

    python tests/numeric_matrix.py                     # every setting, the numeric tests
    python tests/numeric_matrix.py --settings aten-default onednn-sse41 --out matrix.md
    python tests/numeric_matrix.py -- -k wasserstein   # after --: more pytest arguments

Exits 1 when any test failed under any setting. docs/development.md has the last table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KNOBS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS")
SETTINGS: dict[str, tuple[dict[str, str], str]] = {
    "default": ({}, "this machine as it is"),
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, "ATen's scalar kernels: a CPU with no AVX"),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, "ATen's AVX2 kernels: a CPU without AVX-512 (Zen 3)"),
    "onednn-sse41": ({"ONEDNN_MAX_CPU_ISA": "SSE41"}, "oneDNN's convolutions as on an old CPU"),
    "mkl-sse4_2": ({"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, "MKL's matrix products as on an old CPU"),
    "old-cpu": (
        {
            "ATEN_CPU_CAPABILITY": "default",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        },
        "a CPU without AVX: ATen's scalar kernels, oneDNN and MKL at SSE4",
    ),
    "omp-1": ({"OMP_NUM_THREADS": "1"}, "one thread: reductions split once"),
    "omp-3": ({"OMP_NUM_THREADS": "3"}, "three threads: reductions split another way"),
}


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux), empty where /proc/cpuinfo cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def available(names: list[str]) -> list[str]:
    """``names`` less the settings this CPU cannot play (ATen's AVX2 kernels need AVX2)."""
    if "avx2" not in cpu_flags():
        return [n for n in names if n != "aten-avx2"]
    return names


def outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome in a JUnit XML file: ``file.py::name`` -> pass, FAIL or skip."""
    found: dict[str, str] = {}
    if not junit.exists():
        return found
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.test_style, or a path's parts
        module = next((part for part in reversed(parts) if part.startswith("test_")), parts[-1])
        test = f"{module}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            found[test] = "FAIL"
        elif case.find("skipped") is not None:
            found[test] = "skip"
        else:
            found[test] = "pass"
    return found


def run_setting(name: str, marker: str, extra: list[str], work: Path) -> tuple[dict, list[dict], float]:
    """The tests under one setting, in a fresh process: outcomes, recorded bounds, seconds."""
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(SETTINGS[name][0])
    log, junit = work / f"{name}.jsonl", work / f"{name}.xml"
    env["NSTCAM_NUMERIC_LOG"] = str(log)
    cmd = [sys.executable, "-m", "pytest", "-m", marker, "-q", "-p", "no:cacheprovider"]
    cmd.append(f"--junitxml={junit}")
    t = time.perf_counter()
    run = subprocess.run([*cmd, *extra], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if run.returncode not in (0, 5):  # 5: no test selected
        print(
            f"{name}: pytest exited {run.returncode}:\n{run.stdout[-6000:]}{run.stderr[-2000:]}",
            file=sys.stderr,
        )
    rows = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    return outcomes(junit), rows, seconds


def _cell(row: dict | None) -> str:
    if row is None:
        return "-"
    text = f"{row['value']:.4g}"
    return text if row["ok"] else f"**{text} FAIL**"


def _edge(rows: list[dict]) -> str:
    """The value, over settings, nearest its bound (for < and <=: the largest; for > and >=: the
    smallest), as a share of the bound."""
    if not rows or rows[0]["op"] == "==":
        return ""
    pick = max if "<" in rows[0]["op"] else min
    worst = pick(rows, key=lambda r: r["value"])
    return f"{worst['value'] / worst['limit']:.3g} of it" if worst["limit"] else f"{worst['value']:.3g}"


def _nearer(a: dict | None, b: dict) -> dict:
    """Of two records of one bound (a test that checks it in a loop), the one nearer its edge."""
    if a is None or (a["ok"] and not b["ok"]):
        return b
    if b["ok"] and not a["ok"]:
        return a
    pick = max if "<" in b["op"] else min
    return pick(a, b, key=lambda r: r["value"])


def bounds(names: list[str], results: dict) -> dict[tuple, dict[str, dict]]:
    """Each recorded bound, ``(test, what, op, limit)``, and its record under each setting."""
    per: dict[tuple, dict[str, dict]] = {}
    for n in names:
        for row in results[n][1]:
            by = per.setdefault((row["test"], row["what"], row["op"], row["limit"]), {})
            by[n] = _nearer(by.get(n), row)
    return per


def moved(names: list[str], per: dict[tuple, dict[str, dict]]) -> list[str]:
    """Under each setting: how many bounds' values differ from the first setting's, and the largest
    relative difference (what CI's choice of settings reads)."""
    cells = []
    for n in names:
        diffs = [
            abs(by[n]["value"] - by[names[0]]["value"]) / max(abs(by[names[0]]["value"]), 1e-30)
            for by in per.values()
            if n in by and names[0] in by
        ]
        changed = [d for d in diffs if d > 0]
        cells.append(f"{len(changed)} of {len(diffs)}, up to {max(changed, default=0):.2g}")
    return cells


def table(names: list[str], results: dict[str, tuple[dict, list[dict], float]]) -> str:
    """The markdown table: a row per test and, below it, a row per bound it recorded."""
    head = "| test / bound | " + " | ".join(names) + " | nearest the bound |"
    lines = [head, "|" + " --- |" * (len(names) + 2)]
    tests = sorted({t for outs, _, _ in results.values() for t in outs})
    per = bounds(names, results)
    for test in tests:
        cells = [results[n][0].get(test, "-") for n in names]
        lines.append(f"| `{test}` | " + " | ".join(cells) + " | |")
        for (of, what, op, limit), by in per.items():
            if of != test:
                continue
            cells = [_cell(by.get(n)) for n in names]
            edge = _edge(list(by.values()))
            lines.append(f"| &nbsp;&nbsp;{what} {op} {limit:.4g} | " + " | ".join(cells) + f" | {edge} |")
    lines.append(
        "| bounds whose value moved from the first column's | " + " | ".join(moved(names, per)) + " | |"
    )
    seconds = [f"{results[n][2]:.0f} s" for n in names]
    lines.append("| wall time | " + " | ".join(seconds) + " | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--marker", default="numeric", help="pytest -m expression (default: numeric)")
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    p.add_argument("--out", help="also write the table (markdown) to this file")
    p.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    a = p.parse_args(argv)
    names = available(a.settings)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results[name] = run_setting(name, a.marker, a.pytest_args, Path(tmp))
            outs = results[name][0]
            failed = sum(v == "FAIL" for v in outs.values())
            print(f"{name}: {len(outs)} tests, {failed} failed, {results[name][2]:.0f} s", file=sys.stderr)
    legend = "\n".join(
        f"- `{n}`: {' '.join(f'{k}={v}' for k, v in SETTINGS[n][0].items()) or 'no variable'}"
        f" ({SETTINGS[n][1]})"
        for n in names
    )
    text = f"{legend}\n\n{table(names, results)}\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return int(any(v == "FAIL" for outs, _, _ in results.values() for v in outs.values()))


if __name__ == "__main__":
    sys.exit(main())

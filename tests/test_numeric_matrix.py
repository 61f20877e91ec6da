"""The numeric matrix (tests/numeric_matrix.py) and the bounds it reports (tests/_numeric.py): a bound
asserts and records its value; the matrix runs tests under a setting in a fresh process and tables
each test's outcome and each bound's value under each setting."""

from __future__ import annotations

import json
from pathlib import Path

import numeric_matrix as M
import pytest
from _numeric import bound

TESTS = Path(__file__).resolve().parent


def test_a_bound_asserts_and_records_its_value(tmp_path, monkeypatch):
    log = tmp_path / "bounds.jsonl"
    monkeypatch.setenv("NSTCAM_NUMERIC_LOG", str(log))
    assert bound("ratio", 0.5, "<", 0.9) == 0.5
    with pytest.raises(AssertionError, match=r"ratio: 0.95 is not < 0.9"):
        bound("ratio", 0.95, "<", 0.9)
    with pytest.raises(AssertionError, match="nan is not >= 0"):
        bound("anything", float("nan"), ">=", 0)  # NaN passes no bound
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["value"], r["ok"]) for r in rows[:2]] == [(0.5, True), (0.95, False)]
    assert rows[0]["test"] == "test_numeric_matrix.py::test_a_bound_asserts_and_records_its_value"


def test_the_table_shows_outcomes_and_each_bound_beside_its_limit():
    test = "test_x.py::test_y[a]"
    row = {"test": test, "what": "ratio", "op": "<", "limit": 0.9}
    checked_twice = [{**row, "value": 0.5, "ok": True}, {**row, "value": 0.7, "ok": True}]  # in a loop
    results = {
        "default": ({test: "pass"}, checked_twice, 10.0),
        "omp-1": ({test: "FAIL"}, [{**row, "value": 0.95, "ok": False}], 12.0),
    }
    text = M.table(["default", "omp-1"], results)
    assert f"| `{test}` | pass | FAIL | |" in text
    assert "| &nbsp;&nbsp;ratio < 0.9 | 0.7 | **0.95 FAIL** | 1.06 of it |" in text  # the nearest its edge
    moved = "| bounds whose value moved from the first column's | 0 of 1, up to 0 | 1 of 1, up to 0.36 | |"
    assert moved in text
    assert "| wall time | 10 s | 12 s | |" in text


def test_settings_a_cpu_cannot_play_are_left_out(monkeypatch):
    monkeypatch.setattr(M, "cpu_flags", lambda: {"sse4_2"})
    assert "aten-avx2" not in M.available(list(M.SETTINGS))
    monkeypatch.setattr(M, "cpu_flags", lambda: {"avx2"})
    assert M.available(list(M.SETTINGS)) == list(M.SETTINGS)


def test_a_setting_runs_in_a_process_of_its_own_with_its_variables(tmp_path, monkeypatch):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        f"import os, sys\nsys.path.insert(0, {str(TESTS)!r})\nimport pytest\nfrom _numeric import bound\n\n"
        "@pytest.mark.numeric\ndef test_sees_its_setting():\n"
        "    bound('threads', int(os.environ['OMP_NUMTHREADS_SEEN']), '==', 1)\n"
        "    assert os.environ.get('OMP_NUM_THREADS') == '1'\n"
        "    assert 'ATEN_CPU_CAPABILITY' not in os.environ\n"
    )
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # the run's own setting replaces the caller's
    monkeypatch.setenv("OMP_NUMTHREADS_SEEN", "1")
    outs, rows, seconds = M.run_setting("omp-1", "numeric", [str(probe)], tmp_path)
    assert outs == {"test_probe.py::test_sees_its_setting": "pass"} and seconds > 0
    assert [(r["what"], r["value"], r["ok"]) for r in rows] == [("threads", 1.0, True)]

"""bench/test_suite_time.py at its seams, cheaply: the per-test CPU record its plugin hook
writes, the table it prints, and the committed measurement's shape. The measurement itself
(a fresh clone running the whole test command) is the benchmark, not a test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_test_suite_time", ROOT / "bench" / "test_suite_time.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bs = _bench()


def test_the_plugin_hook_records_each_tests_cpu_and_wall(tmp_path, monkeypatch):
    record = tmp_path / "tests.jsonl"
    monkeypatch.setenv(bs._RECORD, str(record))
    for nodeid in ("tests/a.py::test_one", "tests/a.py::test_two"):
        hook = bs.pytest_runtest_protocol(SimpleNamespace(nodeid=nodeid), None)
        next(hook)
        sum(i * i for i in range(20000))  # some CPU inside the "test"
        for _ in hook:
            pass
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["tests/a.py::test_one", "tests/a.py::test_two"]
    assert all(r["cpu"] >= 0 and r["wall"] >= 0 for r in rows)


def test_without_the_record_variable_the_hook_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(bs._RECORD, raising=False)
    monkeypatch.chdir(tmp_path)
    hook = bs.pytest_runtest_protocol(SimpleNamespace(nodeid="tests/a.py::test_one"), None)
    next(hook)
    for _ in hook:
        pass
    assert list(tmp_path.iterdir()) == []


def test_the_table_names_the_command_its_times_the_load_and_the_costliest_tests():
    result = {
        "command": "python3 -m pytest -q", "commit": "0123456789abcdef", "exit_code": 0,
        "summary": "1 failed, 2 passed in 1.00s", "failed": ["tests/a.py::test_small"], "cpu_s": 123.4, "wall_s": 210.0, "tests": 3,
        "cpu_in_tests_s": 100.0, "load_before": [3.5, 3.0, 2.0], "load_after": [4.25, 3.0, 2.0],
        "cpu_count": 2,
        "most_expensive": [{"id": "tests/a.py::test_big", "cpu": 0.9, "wall": 1.1}],
    }
    text = bs.table(result)
    assert "python3 -m pytest -q in a fresh clone (0123456789): 1 failed, 2 passed in 1.00s" in text
    assert "123.4 s" in text and "210.0 s" in text
    assert "load average before 3.50, after 4.25 on 2 CPUs" in text
    assert "0.90   1.10  tests/a.py::test_big" in text
    assert text.endswith("failed:\n  tests/a.py::test_small")


def test_the_committed_measurement_has_every_field_and_at_most_ten_tests_costliest_first():
    result = json.loads((ROOT / "bench" / "test_suite_time_results.json").read_text())
    for key in ("commit", "exit_code", "failed", "cpu_s", "wall_s", "tests", "load_before", "load_after"):
        assert key in result
    costs = [r["cpu"] for r in result["most_expensive"]]
    assert 0 < len(costs) <= 10 and costs == sorted(costs, reverse=True)
    assert "/work/" not in json.dumps(result) and "/tmp/" not in json.dumps(result)

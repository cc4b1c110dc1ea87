"""CPU and wall time of the README's test command (``python3 -m pytest -q``) in a fresh clone.

Clones the repository's committed state into a temporary folder with nothing beside it and runs
the test command there, with the clone first on ``PYTHONPATH`` so ``vigor_cli`` is the clone's.
The command's CPU is user + system time of the pytest process and every child it waited for (the
sandbox's workers, new interpreters), as ``/usr/bin/time`` counts it; the load average before and
after says how busy the machine was (CPU seconds change far less with load than wall time). It is
also the pytest plugin that records each test's CPU (``-p bench.test_suite_time``).

    python bench/test_suite_time.py                   # writes bench/test_suite_time_results.json

Details (the budget: under 150 CPU-seconds): docs/development.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

_RECORD = "VIGOR_SUITE_CPU_RECORD"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Plugin hook: append the test's id, CPU (self and waited children) and wall to the record."""
    path = os.environ.get(_RECORD)
    cpu, wall = _cpu(), time.perf_counter()
    yield
    if path:
        row = {"id": item.nodeid, "cpu": round(_cpu() - cpu, 3), "wall": round(time.perf_counter() - wall, 3)}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(repo: Path, python: str) -> dict:
    """Clone ``repo``, run the test command in the clone, return its times and per-test record."""
    with tempfile.TemporaryDirectory(prefix="vigor-suite-") as tmp:
        clone = Path(tmp) / "vigor"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        record = Path(tmp) / "tests.jsonl"
        env = dict(os.environ, PYTHONPATH=str(clone), **{_RECORD: str(record)})
        where = subprocess.run([python, "-c", "import vigor_cli; print(vigor_cli.__file__)"],
                               cwd=clone, env=env, capture_output=True, text=True, check=True).stdout.strip()
        if not where.startswith(str(clone)):
            sys.exit(f"vigor_cli resolves to {where}, not the clone: check the interpreter's installs")
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                                text=True, check=True).stdout.strip()
        load_before = os.getloadavg()
        cpu, wall = _children_cpu(), time.perf_counter()
        proc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "bench.test_suite_time"], cwd=clone, env=env,
                              capture_output=True, text=True)
        cpu, wall = _children_cpu() - cpu, time.perf_counter() - wall
        load_after = os.getloadavg()
        rows = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {
        "command": "python3 -m pytest -q",
        "commit": commit,
        "exit_code": proc.returncode,
        "summary": summary,
        "failed": [line.split()[1] for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))],
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "tests": len(rows),
        "cpu_in_tests_s": round(sum(r["cpu"] for r in rows), 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "cpu_count": os.cpu_count(),
        "most_expensive": sorted(rows, key=lambda r: -r["cpu"])[:10],
    }


def table(result: dict) -> str:
    lines = [
        f"{result['command']} in a fresh clone ({result['commit'][:10]}): {result['summary']}",
        f"  CPU (user+sys, children included) {result['cpu_s']:7.1f} s",
        f"  wall                               {result['wall_s']:7.1f} s",
        f"  tests {result['tests']}, CPU inside tests {result['cpu_in_tests_s']:.1f} s "
        f"(the rest: start-up and collection)",
        f"  load average before {result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f} "
        f"on {result['cpu_count']} CPUs",
        "",
        f"  {'CPU s':>6} {'wall s':>6}  the 10 most expensive fast tests",
    ]
    lines += [f"  {r['cpu']:6.2f} {r['wall']:6.2f}  {r['id']}" for r in result["most_expensive"]]
    lines += ["", "  failed:"] + [f"  {test}" for test in result["failed"]] if result["failed"] else []
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent
    p.add_argument("--repo", type=Path, default=here.parent, help="repository to clone (its HEAD)")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the tests")
    p.add_argument("--out", type=Path, default=here / "test_suite_time_results.json")
    args = p.parse_args()
    result = measure(args.repo, args.python)
    print(table(result))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    if result["exit_code"] != 0:
        sys.exit(result["exit_code"])


if __name__ == "__main__":
    main()

"""Sandbox throughput: tests per second on 2 workers, fork server vs a fresh python3 per test.

Two workloads, each run by (a) `SandboxPool(workers=2)` (fork server, full
confinement: rlimits, uid drop, seccomp, temp dir) and (b) the baseline: a
fresh `python3` process per test, two at a time, with no confinement at all.
The baseline is also run with `python3 -I -S` (no site import: the cheapest
possible interpreter start) to show the floor a per-test interpreter cannot beat.

    python bench/sandbox.py [--tests 200]

Prints a table and writes bench/results/sandbox.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from vigor_cli.sandbox import Job, Limits, SandboxPool  # noqa: E402

WORKERS = 2
RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"

TRIVIAL = ("print(input()[::-1])", b"hello sandbox\n", None, "")

_NUMBERS = " ".join(str((i * 7919) % 100003) for i in range(100_000))
# Most LiveCodeBench tests are small inputs; a few are large (the 10^5-number case).
REALISTIC = [
    # Read 10^5 integers and sort them (typical AtCoder B/C input size).
    ("import sys\nd = sys.stdin.buffer.read().split()\nn = int(d[0])\n"
     "a = sorted(map(int, d[1:n + 1]))\nprint(a[0], a[-1], sum(a))\n",
     f"100000\n{_NUMBERS}\n".encode(), None, ""),
    # A small DP with the usual imports.
    ("from functools import lru_cache\nimport sys\nsys.setrecursionlimit(10000)\n"
     "n = int(input())\n@lru_cache(None)\ndef f(i):\n    return 1 if i < 2 else (f(i - 1) + f(i - 2)) % 1000000007\n"
     "print(f(n))\n", b"2000\n", None, ""),
    # Heap + collections, moderate work.
    ("import heapq\nfrom collections import Counter\nn = int(input())\nh = [(i * 37) % 1000 for i in range(n)]\n"
     "heapq.heapify(h)\nc = Counter(heapq.heappop(h) for _ in range(n // 2))\nprint(len(c))\n",
     b"50000\n", None, ""),
    # LeetCode-style functional call.
    ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
     "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
     "                return [seen[target - x], i]\n            seen[x] = i\n",
     b"", "twoSum", "[2,7,11,15]\n9"),
    # A wrong but fast answer and a runtime error: graded like any other test.
    ("print(0)", b"5\n", None, ""),
    ("x = int(input())\nprint(1 // (x - x))", b"3\n", None, ""),
    # A pure-Python loop of a few tens of milliseconds.
    ("s = 0\nfor i in range(300_000):\n    s += i * i % 7\nprint(s)\n", b"", None, ""),
    # Trivial one-liner.
    TRIVIAL,
]

_FUNCTIONAL_HARNESS = (
    "import json, sys\nfrom typing import *\nns = {'__name__': '__main__'}\n"
    "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), ns)\n"
    "args = [json.loads(l) for l in sys.argv[3].split('\\n')]\n"
    "print(json.dumps(getattr(ns['Solution'](), sys.argv[2])(*args)))\n"
)


def run_pool(cases: list[tuple], pool: SandboxPool) -> float:
    jobs = [Job(src, stdin, Limits(timeout_s=10), func_name=fn, args_json=args)
            for src, stdin, fn, args in cases]
    started = time.perf_counter()
    results = pool.run(jobs)
    elapsed = time.perf_counter() - started
    assert all(r.outcome in ("ok", "exit") for r in results), [r.outcome for r in results]
    return elapsed


def run_baseline(cases: list[tuple], python_flags: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (src, *_rest) in enumerate(cases):
            path = Path(tmp) / f"s{i}.py"
            path.write_text(src)
            paths.append(path)

        def one(i: int) -> int:
            src, stdin, fn, args = cases[i]
            if fn is None:
                cmd = [sys.executable, *python_flags, str(paths[i])]
            else:
                cmd = [sys.executable, *python_flags, "-c", _FUNCTIONAL_HARNESS, str(paths[i]), fn, args]
            done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=30, cwd=tmp)
            return done.returncode

        started = time.perf_counter()
        with ThreadPoolExecutor(WORKERS) as executor:
            list(executor.map(one, range(len(cases))))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200, help="tests per workload")
    options = parser.parse_args()
    n = options.tests
    workloads = {
        "trivial stdin": [TRIVIAL] * n,
        "realistic mix": [REALISTIC[i % len(REALISTIC)] for i in range(n)],
    }
    rows = []
    with SandboxPool(workers=WORKERS) as pool:
        run_pool([TRIVIAL] * 10, pool)  # warm up the workers
        for name, cases in workloads.items():
            pool_s = run_pool(cases, pool)
            base_s = run_baseline(cases, [])
            floor_s = run_baseline(cases, ["-I", "-S"])
            rows.append({
                "workload": name, "tests": len(cases),
                "sandbox_tests_per_s": len(cases) / pool_s,
                "fresh_python3_tests_per_s": len(cases) / base_s,
                "fresh_python3_minimal_tests_per_s": len(cases) / floor_s,
                "speedup_vs_fresh_python3": base_s / pool_s,
                "speedup_vs_minimal_python3": floor_s / pool_s,
            })
        capabilities = pool.capabilities

    table = Table(title=f"Sandbox throughput, {WORKERS} workers, {os.cpu_count()} CPUs "
                  f"(seccomp={capabilities['seccomp']}, uid switch={capabilities['uid_switch']})")
    for column in ("workload", "tests", "sandbox tests/s", "fresh python3 tests/s",
                   "python3 -I -S tests/s", "speedup", "speedup vs -I -S"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(row["workload"], str(row["tests"]), f"{row['sandbox_tests_per_s']:.1f}",
                      f"{row['fresh_python3_tests_per_s']:.1f}",
                      f"{row['fresh_python3_minimal_tests_per_s']:.1f}",
                      f"{row['speedup_vs_fresh_python3']:.2f}x",
                      f"{row['speedup_vs_minimal_python3']:.2f}x")
    Console().print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    payload = {"workers": WORKERS, "cpus": os.cpu_count(), "python": sys.version.split()[0],
               "capabilities": {k: capabilities[k] for k in ("seccomp", "uid_switch", "root")},
               "rows": rows}
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload))


if __name__ == "__main__":
    main()

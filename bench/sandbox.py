"""Sandbox throughput: tests per second on 2 workers, fork server vs a fresh python3 per test.

Two workloads, each run by (a) `SandboxPool(workers=2)` (zygote per worker, full
isolation: Landlock, seccomp, a uid per slot, PID/IPC/network/mount namespaces, a
tmpfs per job, rlimits) and (b) the baseline: a fresh `python3` process per test,
two at a time, with no confinement at all. The baseline is also run with
`python3 -I -S` (no site import: the cheapest possible interpreter start) to show
the floor a per-test interpreter cannot beat.

    python bench/sandbox.py [--tests 200] [--rounds 3] [--compare DIR]

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


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


_POOL_RUNNER = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from vigor_cli.sandbox import Job, Limits, SandboxPool
workloads = json.loads(sys.stdin.read())
def cpu_s(pool):
    # CPU of every process of the pool: this one, each fork server, each zygote, and the
    # reaped children (counted in their reaper's cutime/cstime).
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for worker in pool._workers:
        for pid in (worker.process.pid, worker.capabilities.get("zygote_pid")):
            if pid:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                total += sum(int(x) for x in fields[11:15]) / ticks
    return total
with SandboxPool(workers=int(sys.argv[2])) as pool:
    warm = [Job("print(input()[::-1])", b"x\\n", Limits(timeout_s=10))] * 10
    pool.run(warm)
    out, cpu = {}, {}
    for name, cases in workloads.items():
        jobs = [Job(src, stdin.encode("latin-1"), Limits(timeout_s=10), func_name=fn, args_json=args)
                for src, stdin, fn, args in cases]
        cpu_before = cpu_s(pool)
        started = time.perf_counter()
        results = pool.run(jobs)
        out[name] = time.perf_counter() - started
        cpu[name] = cpu_s(pool) - cpu_before
        assert all(r.outcome in ("ok", "exit") for r in results), [r.outcome for r in results]
    caps = pool.capabilities
    level = getattr(pool, "isolation", "seccomp+uid (before issue 12)")
print(json.dumps({"seconds": out, "cpu_seconds": cpu, "isolation": level}))
"""


def run_pool_at(checkout: Path, workloads: dict) -> dict:
    """Time each workload on a fresh 2-worker pool of the sandbox in ``checkout``."""
    payload = {name: [(src, stdin.decode("latin-1"), fn, args) for src, stdin, fn, args in cases]
               for name, cases in workloads.items()}
    done = subprocess.run([sys.executable, "-c", _POOL_RUNNER, str(checkout), str(WORKERS)],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=900,
                          cwd=str(checkout))
    if done.returncode != 0:
        raise SystemExit(f"the pool at {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200, help="tests per workload")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="another checkout whose sandbox is measured side by side")
    options = parser.parse_args()
    n = options.tests
    workloads = {
        "trivial stdin": [TRIVIAL] * n,
        "realistic mix": [REALISTIC[i % len(REALISTIC)] for i in range(n)],
    }
    here = Path(__file__).resolve().parents[1]
    versions = {"this checkout": here}
    if options.compare is not None:
        versions["compared checkout"] = options.compare.resolve()
    seconds: dict[str, dict[str, list[float]]] = {v: {w: [] for w in workloads} for v in versions}
    cpu: dict[str, dict[str, list[float]]] = {v: {w: [] for w in workloads} for v in versions}
    levels = {}
    for _ in range(options.rounds):
        for version, checkout in versions.items():
            measured = run_pool_at(checkout, workloads)
            levels[version] = measured["isolation"]
            for name, value in measured["seconds"].items():
                seconds[version][name].append(value)
                cpu[version][name].append(measured["cpu_seconds"][name])
    baselines = {name: (run_baseline(cases, []), run_baseline(cases, ["-I", "-S"]))
                 for name, cases in workloads.items()}

    rows = []
    for name, cases in workloads.items():
        base_s, floor_s = baselines[name]
        row = {"workload": name, "tests": len(cases),
               "fresh_python3_tests_per_s": len(cases) / base_s,
               "fresh_python3_minimal_tests_per_s": len(cases) / floor_s}
        for version in versions:
            pool_s = statistics.median(seconds[version][name])
            key = "sandbox" if version == "this checkout" else "compared"
            row[f"{key}_tests_per_s"] = len(cases) / pool_s
            row[f"{key}_rounds_tests_per_s"] = [len(cases) / s for s in seconds[version][name]]
            row[f"{key}_speedup_vs_fresh_python3"] = base_s / pool_s
            row[f"{key}_cpu_ms_per_test"] = 1000 * statistics.median(cpu[version][name]) / len(cases)
        if "compared_tests_per_s" in row:
            row["slowdown_vs_compared"] = 1 - row["sandbox_tests_per_s"] / row["compared_tests_per_s"]
            row["cpu_cost_vs_compared"] = (row["sandbox_cpu_ms_per_test"]
                                           / row["compared_cpu_ms_per_test"] - 1)
        rows.append(row)

    table = Table(title=f"Sandbox throughput, {WORKERS} workers, {os.cpu_count()} CPUs, median of "
                  f"{options.rounds} rounds; this checkout: isolation {levels['this checkout']}")
    columns = ["workload", "tests", "sandbox tests/s", "speedup vs python3", "CPU ms/test"]
    if options.compare is not None:
        columns += ["compared tests/s", "compared CPU ms/test", "slower (wall)", "more CPU"]
    columns += ["fresh python3 tests/s", "python3 -I -S tests/s"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        cells = [row["workload"], str(row["tests"]), f"{row['sandbox_tests_per_s']:.1f}",
                 f"{row['sandbox_speedup_vs_fresh_python3']:.2f}x",
                 f"{row['sandbox_cpu_ms_per_test']:.2f}"]
        if options.compare is not None:
            cells += [f"{row['compared_tests_per_s']:.1f}", f"{row['compared_cpu_ms_per_test']:.2f}",
                      f"{100 * row['slowdown_vs_compared']:+.1f}%",
                      f"{100 * row['cpu_cost_vs_compared']:+.1f}%"]
        cells += [f"{row['fresh_python3_tests_per_s']:.1f}",
                  f"{row['fresh_python3_minimal_tests_per_s']:.1f}"]
        table.add_row(*cells)
    Console(width=160).print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    payload = {"workers": WORKERS, "cpus": os.cpu_count(), "python": sys.version.split()[0],
               "rounds": options.rounds, "isolation": levels,
               "load_average_1m": os.getloadavg()[0], "rows": rows}
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload))


if __name__ == "__main__":
    main()

"""The README's quick start, measured as a new user meets it: `vigor train` with no argument
(the bundled default) in a fresh folder, from start to exit.

    python bench/quick_start.py            # prints a table, writes quick_start_results.json

What it records is what the README and BENCHMARKS.md say of the quick start (a test holds
them to this file): held-out greedy accuracy and pass rate before and after, steps, rollouts,
the run's training time, the whole command's wall and CPU time, the health warnings it
printed and the load average it ran at.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("quick_start_results.json")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "vigor_cli", "train"], cwd=folder, capture_output=True,
                              text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"vigor train exited {done.returncode}:\n{done.stderr[-2000:]}")
        runs = sorted(Path(folder, "runs").iterdir())
        summary = json.loads((runs[-1] / "summary.json").read_text())
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("warning:")]
    result = {
        "command": "vigor train",
        "start_accuracy": round(summary["start_accuracy"], 3),
        "final_accuracy": round(summary["final_accuracy"], 3),
        "start_pass_rate": round(summary["start_pass_rate"], 3),
        "final_pass_rate": round(summary["final_pass_rate"], 3),
        "steps": summary["steps"],
        "rollouts": summary["rollouts"],
        "train_seconds": round(summary["wall_time"]),
        "wall_seconds": round(wall),
        "cpu_seconds": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)),
        "health_warnings": len(warnings),
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    for key, value in result.items():
        print(f"{key:<18} {value}")
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

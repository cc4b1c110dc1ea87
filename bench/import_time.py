"""How long `vigor --version` and `vigor --help` take, and what importing each of vigor_cli's
top-level modules and folders costs, each in a fresh interpreter (so nothing is cached).

    python bench/import_time.py                 # 5 repeats; prints a table, writes import_time_results.json
    python bench/import_time.py --repeats 9

A module's time is ``python -X importtime``'s cumulative figure for it (its own imports
included); the command times are wall and CPU of the whole process, Python's start included,
beside ``python -c pass`` measured the same way. Medians of the repeats, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("import_time_results.json")


def top_level(root: Path = ROOT / "vigor_cli") -> list[str]:
    """vigor_cli's top-level modules and folders (packages), as import names."""
    names = [f"vigor_cli.{p.stem}" for p in sorted(root.glob("*.py")) if p.stem not in ("__init__", "__main__")]
    names += [f"vigor_cli.{p.name}" for p in sorted(root.iterdir()) if (p / "__init__.py").is_file()]
    return sorted(names)


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one process, children included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_ms(module: str) -> float:
    """-X importtime's cumulative milliseconds for ``module`` in a fresh interpreter."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stderr
    for line in err.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s?(\s*)(\S+)$", line)
        if m and m.group(3) == module:
            return int(m.group(1)) / 1000
    raise RuntimeError(f"{module}: not in -X importtime's output")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "vigor --version": [sys.executable, "-m", "vigor_cli", "--version"],
                "vigor --help": [sys.executable, "-m", "vigor_cli", "--help"]}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    modules = {m: [] for m in top_level()}
    for _ in range(args.repeats):  # interleaved: a busy moment costs every row alike
        for name, argv in commands.items():
            runs[name].append(timed(argv))
        for m in modules:
            modules[m].append(import_ms(m))
    rows = {name: {"wall_s": statistics.median(w for w, _ in r), "cpu_s": statistics.median(c for _, c in r)}
            for name, r in runs.items()}
    imports = {m: statistics.median(v) for m, v in modules.items()}
    print(f"{'command':<20} {'wall s':>8} {'CPU s':>8}")
    for name, row in rows.items():
        print(f"{name:<20} {row['wall_s']:>8.3f} {row['cpu_s']:>8.3f}")
    print(f"\n{'module (import alone)':<36} {'ms':>8}")
    for m, ms in sorted(imports.items(), key=lambda kv: -kv[1]):
        print(f"{m:<36} {ms:>8.1f}")
    load = os.getloadavg()
    result = {"repeats": args.repeats, "load_average": [round(x, 2) for x in load], "python": platform.python_version(),
              "commands": rows, "import_ms": imports}
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nload average {load[0]:.1f}; wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

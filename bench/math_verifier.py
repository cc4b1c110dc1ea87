"""Math verifier: agreement with labelled suites, one-shot cost, throughput, latency.

Usage: ``python bench/math_verifier.py [--workers N] [--timeout S] [--limit K] [--runs R]
[--baseline REF] [--data-dir DIR]``. Prints tables and writes ``bench/math_verifier_results.json``.

Details: docs/modules.md.
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
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vigor_cli.verifiers.math import MathVerifier, grade  # noqa: E402
from vigor_cli.verifiers.math_answers import load_benchmark  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SUITES = {
    "peers' grader suites": FIXTURES / "math_grading_cases.jsonl",
    "trackers, graders, near misses": FIXTURES / "math_regression_cases.jsonl",
}
CASES = SUITES["peers' grader suites"]

ONE_SHOT = [  # (gold, prediction): one that needs Math-Verify, one the plain-number path decides
    (r"\sqrt{2}", r"\boxed{\sqrt2}"),
    ("1/2", r"\boxed{0.5}"),
]

PATHOLOGICAL = {
    "power tower 9^9^9^9": ("5", r"\boxed{9^{9^{9^{9}}}}"),
    "factorial of 10^10^10": ("5", r"\boxed{(10^{10^{10}})!}"),
    "3000 nested parentheses": ("1", r"\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}"),
    "400 nested fractions": ("1", r"\boxed{" + r"\frac{1}{" * 400 + "1" + "}" * 400 + "}"),
    "sum of 2000 powers": ("1", r"\boxed{" + "+".join(f"x_{{{i}}}^{{{i}}}" for i in range(2000)) + "}"),
    "200000-digit integer": ("1", r"\boxed{" + "9" * 200000 + "}"),
    "50k-word completion, no box": ("1", "word $x$ " * 50000),
    "20000 boxes": ("1", r"\boxed{1} " * 20000),
}


def perturb(gold: str) -> str:
    """The gold with its first digit changed (or '+1' appended when it has no digit)."""
    m = re.search(r"\d", gold)
    if not m:
        return gold + "+1"
    digit = str((int(m.group(0)) + 1) % 10)
    return gold[: m.start()] + digit + gold[m.end() :]


def cases_for(golds: list[str]) -> list[tuple[str, str]]:
    cases = []
    for g in golds:
        cases += [
            (g, "We simplify step by step and get the result.\nThe final answer is \\boxed{" + g + "}."),
            (g, "\\boxed{" + perturb(g) + "}"),
            (g, "\\boxed{12345}"),
            (g, "The answer is $" + g + "$."),
        ]
    return cases


# ----------------------------------------------------------------------------- agreement


def raw_math_verify(case: dict) -> int:
    """Raw Math-Verify 0.9 on one labelled case, the gold as the source wrote it."""
    import math_verify as mv

    if case["pred_kind"] == "answer":
        gold_text, pred_text = "\\boxed{" + case["gold"] + "}", "\\boxed{" + case["pred"] + "}"
    else:
        gold_text = "\\boxed{" + case["gold"] + "}" if case.get("roles") else case.get("peer_gold", "\\boxed{" + case["gold"] + "}")
        pred_text = case["pred"]
    try:
        gold_parsed = mv.parse(gold_text, parsing_timeout=None)
        return int(mv.verify(gold_parsed, mv.parse(pred_text, parsing_timeout=None), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - a failure of the raw grader is a 0
        return 0


def read_cases(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def grade_case(case: dict) -> int:
    """vigor's verdict on one labelled case (an "answer" prediction is graded boxed)."""
    completion = case["pred"] if case["pred_kind"] == "completion" else "\\boxed{" + case["pred"] + "}"
    return int(grade(case["gold"], completion, case.get("problem")).reward)


def _empty_row() -> dict:
    return {"cases": 0, "vigor": 0, "raw": 0, "vigor_wrong_accepts": 0, "raw_wrong_accepts": 0,
            "vigor_wrong_rejects": 0, "raw_wrong_rejects": 0}


def agreement(path: Path = CASES) -> dict:
    """Per-source agreement of vigor and raw Math-Verify with one suite's labelled cases."""
    rows: dict = defaultdict(_empty_row)
    disputed, misses = [], []
    for c in read_cases(path):
        ours, raw = grade_case(c), raw_math_verify(c)
        if "dispute" in c:
            disputed.append({"id": c["id"], "source": c["source"], "expected": c["expected"], "vigor": ours, "raw": raw,
                             "dispute": c["dispute"]})
            continue
        if ours != c["expected"]:
            misses.append({"id": c["id"], "expected": c["expected"], "gold": c["gold"], "pred": c["pred"][-200:]})
        row = rows[re.split(r"[:#]", c["source"])[0]]
        row["cases"] += 1
        for name, got in (("vigor", ours), ("raw", raw)):
            row[name] += got == c["expected"]
            row[f"{name}_wrong_accepts"] += got > c["expected"]
            row[f"{name}_wrong_rejects"] += got < c["expected"]
    total = _empty_row()
    for row in rows.values():
        for k in total:
            total[k] += row[k]
    all_labels = {
        "cases": total["cases"] + len(disputed),
        "vigor": total["vigor"] + sum(d["vigor"] == d["expected"] for d in disputed),
        "raw": total["raw"] + sum(d["raw"] == d["expected"] for d in disputed),
        "vigor_wrong_accepts": total["vigor_wrong_accepts"] + sum(d["vigor"] > d["expected"] for d in disputed),
        "raw_wrong_accepts": total["raw_wrong_accepts"] + sum(d["raw"] > d["expected"] for d in disputed),
    }
    return {"file": str(path.relative_to(ROOT)), "per_source": dict(rows), "undisputed": total,
            "disputed": disputed, "all_labels": all_labels, "vigor_misses": misses}


# -------------------------------------------------------------------------------- one shot


def _timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, stdout) of one fresh run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done.stdout


def _summary(samples: list[tuple[float, float]]) -> dict:
    walls, cpus = [s[0] for s in samples], [s[1] for s in samples]
    return {"wall_min_s": round(min(walls), 3), "wall_median_s": round(statistics.median(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3)}


def one_shot(runs: int) -> list[dict]:
    """``vigor verify math`` and a raw Math-Verify one-shot on the same case, alternately."""
    py = sys.executable
    rows = []
    for gold, pred in ONE_SHOT:
        raw = ["-c", "import math_verify as mv; print(mv.verify(mv.parse(r'\\boxed{%s}'), mv.parse(r'%s')))" % (gold, pred)]
        vigor = ["-m", "vigor_cli", "verify", "math", "--gold", gold, "--pred", pred]
        samples: dict[str, list] = {"raw": [], "vigor": []}
        verdicts = {}
        for _ in range(runs):
            for name, args in (("raw", raw), ("vigor", vigor)):
                wall, cpu, out = _timed([py, *args])
                samples[name].append((wall, cpu))
                verdicts[name] = "True" in out or "correct" in out
        raw_s, vigor_s = _summary(samples["raw"]), _summary(samples["vigor"])
        rows.append({"gold": gold, "pred": pred, "raw_math_verify": raw_s, "vigor_verify_math": vigor_s,
                     "cpu_ratio": round(vigor_s["cpu_median_s"] / raw_s["cpu_median_s"], 2),
                     "wall_ratio": round(vigor_s["wall_median_s"] / raw_s["wall_median_s"], 2),
                     "same_verdict": verdicts["raw"] == verdicts["vigor"]})
    return rows


# ------------------------------------------------------------------------------ throughput


def _export(ref: str) -> Path:
    """The ``verifiers`` folder of git ref ``ref``, in a temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="math-verifier-baseline-"))
    archive = subprocess.run(["git", "archive", ref, "verifiers"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "verifiers"


def throughput_worker(verifiers_dir: str, limit: int, data_dir: str | None) -> None:
    """(Run in a fresh process.) Grade the throughput cases in-line with the grader in
    ``verifiers_dir`` ("" for this tree's) and print one JSON line of timings and rewards."""
    import importlib

    import vigor_cli.verifiers as package

    if verifiers_dir:  # the baseline's modules stand in for this tree's (loaded above): forget those
        for name in [n for n in sys.modules if n.startswith("vigor_cli.verifiers.math")]:
            del sys.modules[name]
        package.__path__[:] = [verifiers_dir]
    grade_with = importlib.import_module("vigor_cli.verifiers.math").grade
    load_benchmark = importlib.import_module("vigor_cli.verifiers.math_answers").load_benchmark

    golds = [r.golds[0] for r in load_benchmark("math500", data_dir)[:limit]]
    cases = cases_for(golds)
    grade_with("1", "The answer is $1$.")  # Math-Verify imported and its regexes built before the clock
    start, cpu = time.perf_counter(), time.process_time()
    rewards = [grade_with(g, p).reward for g, p in cases]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"items": len(cases), "wall_s": wall, "cpu_s": cpu,
                      "reward_by_kind": [sum(rewards[k::4]) / len(golds) for k in range(4)]}))


def throughput_side_by_side(ref: str, limit: int, runs: int, data_dir: str | None) -> dict:
    """In-line throughput of this tree's grader and ``ref``'s, each in fresh processes, alternately."""
    baseline = _export(ref)
    results: dict[str, list] = {"baseline": [], "this tree": []}
    for _ in range(runs):
        for name, folder in (("baseline", str(baseline)), ("this tree", "")):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--throughput-of", folder, "--limit", str(limit)]
            if data_dir:
                cmd += ["--data-dir", data_dir]
            results[name].append(json.loads(_timed(cmd)[2].strip().splitlines()[-1]))
    out = {"ref": ref}
    for name, samples in results.items():
        items = samples[0]["items"]
        out[name] = {"items": items, "per_s_cpu_median": round(items / statistics.median(s["cpu_s"] for s in samples), 1),
                     "per_s_wall_median": round(items / statistics.median(s["wall_s"] for s in samples), 1),
                     "reward_by_kind": samples[0]["reward_by_kind"]}
    out["cpu_ratio"] = round(out["this tree"]["per_s_cpu_median"] / out["baseline"]["per_s_cpu_median"], 2)
    return out


def pool_throughput(cases: list, timeout: float, workers: int) -> dict:
    """Verifications per second through the worker pool: cold gold caches, then warm."""
    with MathVerifier(timeout_s=timeout, workers=workers) as verifier:
        start = time.perf_counter()
        verifier.score_many([("1", "\\boxed{1}")] * verifier.workers)
        t_start = time.perf_counter() - start
        start = time.perf_counter()
        cold = verifier.score_many(cases)
        t_cold = time.perf_counter() - start
        start = time.perf_counter()
        verifier.score_many(cases)
        t_warm = time.perf_counter() - start
        n = verifier.workers
    in_line = [grade(g, p) for g, p in cases[:400]]
    return {"workers": n, "startup_s": round(t_start, 3), "items": len(cases),
            "cold_per_s": round(len(cases) / t_cold, 1), "warm_per_s": round(len(cases) / t_warm, 1),
            "pool_equals_in_process": all(a.reward == b.reward for a, b in zip(in_line, cold))}


def latency(timeout: float) -> list[dict]:
    rows = []
    with MathVerifier(timeout_s=timeout, workers=1) as verifier:
        verifier.score("1", "\\boxed{1}")
        for name, (g, p) in PATHOLOGICAL.items():
            start = time.perf_counter()
            v = verifier.score(g, p)
            rows.append({"input": name, "seconds": round(time.perf_counter() - start, 3), "verdict": v.reason})
    return rows


# --------------------------------------------------------------------------------- report


def _print_agreement(console, name: str, result: dict) -> None:
    from rich.table import Table

    table = Table(title=f"agreement: {name} ({result['file']})")
    for col in ("source", "cases", "vigor agrees", "raw MV agrees", "vigor wrong accepts", "raw MV wrong accepts",
                "vigor wrong rejects", "raw MV wrong rejects"):
        table.add_column(col, justify="left" if col == "source" else "right")
    keys = ("cases", "vigor", "raw", "vigor_wrong_accepts", "raw_wrong_accepts", "vigor_wrong_rejects", "raw_wrong_rejects")
    for source, row in sorted(result["per_source"].items(), key=lambda kv: -kv[1]["cases"]) + [("all undisputed", result["undisputed"])]:
        table.add_row(source, *(str(row[k]) for k in keys))
    console.print(table)
    al = result["all_labels"]
    if result["disputed"]:
        console.print(f"with the {len(result['disputed'])} disputed labels too ({al['cases']} cases): vigor {al['vigor']}, "
                      f"raw Math-Verify {al['raw']}; wrong accepts vigor {al['vigor_wrong_accepts']}, raw {al['raw_wrong_accepts']}")


def _print_timings(console, shots: list[dict], side: dict, pool: dict, lat: list[dict], timeout: float, runs: int) -> None:
    from rich.table import Table

    table = Table(title=f"one case from a fresh process, alternately, {runs} runs each (target: vigor/raw at most 1.5)")
    for col in ("case", "raw MV CPU s", "vigor CPU s", "CPU ratio", "raw MV wall s", "vigor wall s", "wall ratio"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for s in shots:
        r, v = s["raw_math_verify"], s["vigor_verify_math"]
        table.add_row(f"{s['gold']} vs {s['pred']}", f"{r['cpu_median_s']:.2f}", f"{v['cpu_median_s']:.2f}", f"{s['cpu_ratio']:.2f}",
                      f"{r['wall_median_s']:.2f}", f"{v['wall_median_s']:.2f}", f"{s['wall_ratio']:.2f}")
    console.print(table)
    table = Table(title=f"in-line throughput, MATH-500 golds x 4 predictions, fresh processes alternately ({runs} runs)")
    for col in ("grader", "items", "per s (CPU)", "per s (wall)", "reward by kind: boxed gold, digit changed, wrong, unboxed"):
        table.add_column(col, justify="left" if col == "grader" else "right")
    for name in ("baseline", "this tree"):
        row = side[name]
        label = f"{side['ref']} (baseline)" if name == "baseline" else "this tree"
        table.add_row(label, str(row["items"]), f"{row['per_s_cpu_median']:.0f}", f"{row['per_s_wall_median']:.0f}",
                      ", ".join(f"{x:.3f}" for x in row["reward_by_kind"]))
    console.print(table)
    console.print(f"throughput ratio (this tree / {side['ref']}, CPU): {side['cpu_ratio']:.2f}; pool of {pool['workers']}: "
                  f"start-up {pool['startup_s']:.2f} s, cold {pool['cold_per_s']:.0f}/s, warm {pool['warm_per_s']:.0f}/s, "
                  f"pool verdicts equal in-process verdicts: {pool['pool_equals_in_process']}")
    worst = max(r["seconds"] for r in lat)
    console.print(f"worst latency of {len(lat)} pathological predictions: {worst:.2f} s "
                  f"({'within' if worst < timeout + 0.5 else 'OVER'} the {timeout:g} s limit + 0.5 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0, help="pool size (0: one per core)")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-item limit, seconds")
    parser.add_argument("--limit", type=int, default=500, help="MATH-500 problems to use")
    parser.add_argument("--data-dir", default=None, help="folder of the benchmark files (default: the built-in one)")
    parser.add_argument("--runs", type=int, default=5, help="fresh-process runs of each one-shot and throughput timing")
    parser.add_argument("--baseline", default="main", help="git ref whose grader the throughput is compared with")
    parser.add_argument("--throughput-of", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.throughput_of is not None:
        throughput_worker(args.throughput_of, args.limit, args.data_dir)
        return

    from rich.console import Console

    console = Console()
    suites = {name: agreement(path) for name, path in SUITES.items()}
    shots = one_shot(args.runs)
    side = throughput_side_by_side(args.baseline, args.limit, args.runs, args.data_dir)
    cases = cases_for([r.golds[0] for r in load_benchmark("math500", args.data_dir)[: args.limit]])
    pool = pool_throughput(cases, args.timeout, args.workers)
    lat = latency(args.timeout)
    for name, result in suites.items():
        _print_agreement(console, name, result)
    _print_timings(console, shots, side, pool, lat, args.timeout, args.runs)
    out = {
        "machine": {"cores": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "platform": platform.platform()},
        "timeout_s": args.timeout, "runs": args.runs,
        "agreement": suites, "one_shot": shots, "throughput_in_line": side, "throughput_pool": pool,
        "latency": lat, "worst_latency_s": max(r["seconds"] for r in lat),
    }
    path = ROOT / "bench" / "math_verifier_results.json"
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    console.print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

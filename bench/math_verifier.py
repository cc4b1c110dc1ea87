"""Math verifier: agreement with peers' labelled cases, throughput, latency.

Agreement: the cases of ``tests/fixtures/math_grading_cases.jsonl`` (taken from the grader
test suites of Math-Verify, lighteval, NeMo-Skills, hendrycks MATH, rllm/DeepScaleR and
verl, each with its source), graded by :func:`verifiers.math.grade` and by raw Math-Verify
0.9 (``verify(parse(gold), parse(prediction))``, the gold as the peer's test wrote it):
agreement with the labels per source, wrong accepts (label 0, graded 1) and wrong rejects.
Cases marked ``dispute`` (a label that records a grader's own bug, depends on a peer's
non-default extraction, or contradicts another peer's) are counted apart.

Throughput: every MATH-500 gold answer with four predictions each (the gold boxed at the
end of a short solution, the gold with one digit changed, a wrong boxed number, and an
unboxed "The answer is $gold$." that needs Math-Verify's own extraction), graded

- in this process with :func:`verifiers.math.grade` (no time limit, the floor cost), also
  with the plain-number fast path off (every case through Math-Verify), and
- through :class:`verifiers.math.MathVerifier` (worker pool, per-item time limit), once
  with cold gold caches and once warm (the trainer's case: the same golds every epoch).

Latency: pathological predictions, each scored alone with the default 5 s limit; the
verdict must come back within limit + 0.5 s.

One case from a fresh process (what ``vigor verify math`` costs): ``vigor verify math
--gold 1/2 --pred '\\boxed{0.5}'`` end to end and a case that needs Math-Verify, beside
the two ways of grading one case from a fresh interpreter (the worker pool, and the child
forked by :func:`verifiers.math.grade_forked`) and the imports they pay for.

Usage: ``python bench/math_verifier.py [--workers N] [--timeout S] [--limit K] [--data-dir DIR] [--runs R]``.
Prints a table and writes ``bench/results/math_verifier.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vigor_cli.verifiers import math_grade  # noqa: E402
from vigor_cli.verifiers.math import MathVerifier, grade  # noqa: E402
from vigor_cli.verifiers.math_answers import load_benchmark  # noqa: E402

CASES = ROOT / "tests" / "fixtures" / "math_grading_cases.jsonl"

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


def raw_math_verify(case: dict) -> int:
    """Raw Math-Verify 0.9 on one labelled case, the gold as the peer's test wrote it."""
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


def agreement() -> dict:
    """Per-source agreement of vigor and raw Math-Verify with the labelled cases."""
    cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    rows: dict = defaultdict(lambda: {"cases": 0, "vigor": 0, "raw": 0, "vigor_wrong_accepts": 0, "raw_wrong_accepts": 0,
                                      "vigor_wrong_rejects": 0, "raw_wrong_rejects": 0})
    disputed = []
    for c in cases:
        completion = c["pred"] if c["pred_kind"] == "completion" else "\\boxed{" + c["pred"] + "}"
        ours = int(grade(c["gold"], completion, c.get("problem")).reward)
        raw = raw_math_verify(c)
        if "dispute" in c:
            disputed.append({"id": c["id"], "source": c["source"], "expected": c["expected"], "vigor": ours, "raw": raw,
                             "dispute": c["dispute"]})
            continue
        row = rows[c["source"].split(":")[0]]
        row["cases"] += 1
        for name, got in (("vigor", ours), ("raw", raw)):
            row[name] += got == c["expected"]
            row[f"{name}_wrong_accepts"] += got > c["expected"]
            row[f"{name}_wrong_rejects"] += got < c["expected"]
    total = {k: sum(r[k] for r in rows.values()) for k in next(iter(rows.values()))}
    all_labels = {
        "cases": total["cases"] + len(disputed),
        "vigor": total["vigor"] + sum(d["vigor"] == d["expected"] for d in disputed),
        "raw": total["raw"] + sum(d["raw"] == d["expected"] for d in disputed),
        "vigor_wrong_accepts": total["vigor_wrong_accepts"] + sum(d["vigor"] > d["expected"] for d in disputed),
        "raw_wrong_accepts": total["raw_wrong_accepts"] + sum(d["raw"] > d["expected"] for d in disputed),
    }
    return {"per_source": dict(rows), "undisputed": total, "disputed": disputed, "all_labels": all_labels}


def _wall(cmd: list[str], runs: int, cpu_counted: bool = True) -> dict:
    """Wall seconds of a command from a fresh process (min and median of ``runs``), and the
    CPU seconds (user + system) of the command and its children: on a busy machine the
    CPU time is what the wall time would be on an idle one (the work is sequential).
    ``cpu_counted=False`` where the work runs in processes nobody waits for (a forkserver
    and its workers outlive the command's accounting): no CPU figure then."""
    import resource

    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return {"min_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
            "cpu_median_s": round(statistics.median(cpu), 3) if cpu_counted else None}


def one_case_latency(runs: int) -> list[tuple[str, dict]]:
    py = sys.executable
    pool = ("from vigor_cli.verifiers.math import MathVerifier\n"
            "if __name__ == '__main__':\n"
            "    with MathVerifier() as v: assert v.score(r'\\sqrt{2}', r'\\boxed{\\sqrt2}').correct")
    forked = ("from vigor_cli.verifiers.math import grade_forked\n"
              "assert grade_forked([(r'\\sqrt{2}', r'\\boxed{\\sqrt2}')])[0].correct")
    return [
        ("vigor verify math --gold 1/2 --pred '\\boxed{0.5}'", _wall([py, "-m", "vigor_cli", "verify", "math", "--gold", "1/2", "--pred", r"\boxed{0.5}"], runs)),
        ("vigor verify math --gold '\\sqrt{2}' --pred '\\boxed{\\sqrt2}'", _wall([py, "-m", "vigor_cli", "verify", "math", "--gold", r"\sqrt{2}", "--pred", r"\boxed{\sqrt2}"], runs)),
        ("python: import vigor_cli.cli", _wall([py, "-c", "import vigor_cli.cli"], runs)),
        ("python: import math_verify", _wall([py, "-c", "import math_verify"], runs)),
        ("python: one case, worker pool (the old way)", _wall([py, "-c", pool], runs, cpu_counted=False)),
        ("python: one case, grade_forked (the CLI's way)", _wall([py, "-c", forked], runs)),
    ]


def _clear_caches() -> None:
    """Forget parsed golds and Math-Verify's own parse caches, so runs over the same cases compare."""
    from math_verify import parser

    math_grade._gold_cache.clear()
    for name in ("parse_latex_cached", "parse_expr_cached", "extract_latex"):
        cached = getattr(parser, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0, help="pool size (0: one per core)")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-item limit, seconds")
    parser.add_argument("--limit", type=int, default=500, help="MATH-500 problems to use")
    parser.add_argument("--data-dir", default=None, help="folder of the benchmark files (default: the built-in one)")
    parser.add_argument("--runs", type=int, default=5, help="fresh-process runs per one-case timing")
    args = parser.parse_args()

    agree_cases = agreement()
    latency_one = one_case_latency(args.runs)

    golds = [r.golds[0] for r in load_benchmark("math500", args.data_dir)[: args.limit]]
    cases = cases_for(golds)
    rows = []

    for g, p in cases[:200]:  # warm-up: Math-Verify's regexes and parser tables, for both runs below
        grade(g, p)
    _clear_caches()
    start = time.perf_counter()
    single = [grade(g, p) for g, p in cases]
    t_single = time.perf_counter() - start
    rows.append(("single process, in-line (no limit)", len(cases), t_single))

    _clear_caches()
    fast_grade, math_grade.fast_grade = math_grade.fast_grade, lambda *a: None
    start = time.perf_counter()
    full = [grade(g, p) for g, p in cases]
    t_full = time.perf_counter() - start
    math_grade.fast_grade = fast_grade
    rows.append(("single process, in-line, plain-number fast path off", len(cases), t_full))
    fast_equals_full = all(a.reward == b.reward for a, b in zip(single, full))

    with MathVerifier(timeout_s=args.timeout, workers=args.workers) as verifier:
        start = time.perf_counter()
        verifier.score_many([("1", "\\boxed{1}")] * verifier.workers)
        t_start = time.perf_counter() - start
        start = time.perf_counter()
        cold = verifier.score_many(cases)
        t_cold = time.perf_counter() - start
        start = time.perf_counter()
        verifier.score_many(cases)  # warm: golds now cached in the workers
        t_warm = time.perf_counter() - start
        n_one = min(200, len(cases))
        start = time.perf_counter()
        for g, p in cases[:n_one]:
            verifier.score(g, p)
        t_one = time.perf_counter() - start
        workers = verifier.workers
    rows.append((f"pool of {workers}, cold gold cache", len(cases), t_cold))
    rows.append((f"pool of {workers}, warm gold cache", len(cases), t_warm))
    rows.append((f"pool of {workers}, one call per item (warm)", n_one, t_one))
    agree = sum(a.reward == b.reward for a, b in zip(single, cold)) / len(cases)
    accuracy = [sum(v.reward for v in single[k::4]) / len(golds) for k in range(4)]

    latencies = []
    with MathVerifier(timeout_s=args.timeout, workers=1) as verifier:
        verifier.score("1", "\\boxed{1}")
        for name, (g, p) in PATHOLOGICAL.items():
            start = time.perf_counter()
            v = verifier.score(g, p)
            latencies.append((name, time.perf_counter() - start, v.reason))

    from rich.console import Console
    from rich.table import Table

    console = Console()
    ag = Table(title="agreement with peers' labelled grader cases (tests/fixtures/math_grading_cases.jsonl)")
    for col in ("source", "cases", "vigor agrees", "raw MV agrees", "vigor wrong accepts", "raw MV wrong accepts",
                "vigor wrong rejects", "raw MV wrong rejects"):
        ag.add_column(col, justify="left" if col == "source" else "right")
    order = sorted(agree_cases["per_source"].items(), key=lambda kv: -kv[1]["cases"])
    for name, r in order + [("all undisputed", agree_cases["undisputed"])]:
        ag.add_row(name, *(str(r[k]) for k in ("cases", "vigor", "raw", "vigor_wrong_accepts", "raw_wrong_accepts",
                                                 "vigor_wrong_rejects", "raw_wrong_rejects")))
    console.print(ag)
    al = agree_cases["all_labels"]
    console.print(
        f"with the {len(agree_cases['disputed'])} disputed labels too ({al['cases']} cases): vigor {al['vigor']}, raw Math-Verify "
        f"{al['raw']}; wrong accepts vigor {al['vigor_wrong_accepts']}, raw {al['raw_wrong_accepts']}"
    )
    for d in agree_cases["disputed"]:
        console.print(f"  disputed {d['id']} (label {d['expected']}, vigor {d['vigor']}, raw {d['raw']}): {d['dispute']}")
    one = Table(title=f"one case from a fresh process ({args.runs} runs, load {os.getloadavg()[0]:.1f}; the target is < 1.5 s idle)")
    for col in ("command", "wall min s", "wall median s", "CPU median s"):
        one.add_column(col, justify="left" if col == "command" else "right")
    for name, t in latency_one:
        cpu = "n/a" if t["cpu_median_s"] is None else f"{t['cpu_median_s']:.2f}"
        one.add_row(name, f"{t['min_s']:.2f}", f"{t['median_s']:.2f}", cpu)
    console.print(one)
    load = os.getloadavg()[0]
    table = Table(title=f"math verifier throughput: MATH-500 golds x 4 predictions ({os.cpu_count()} cores, load {load:.1f})")
    for col in ("run", "items", "seconds", "verifications/s"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for name, n, t in rows:
        table.add_row(name, str(n), f"{t:.2f}", f"{n / t:.0f}")
    console.print(table)
    console.print(
        f"pool start-up ({workers} workers): {t_start:.2f} s; pool verdicts equal in-process verdicts: "
        f"{agree:.1%}; fast path equals full grading: {fast_equals_full}; rewards by prediction kind (boxed gold, digit changed, wrong number, unboxed gold): "
        + ", ".join(f"{a:.3f}" for a in accuracy)
    )
    lat = Table(title=f"worst-case latency, pathological predictions (limit {args.timeout:g} s, must be < {args.timeout + 0.5:g} s)")
    for col in ("input", "seconds", "verdict"):
        lat.add_column(col)
    for name, t, reason in latencies:
        lat.add_row(name, f"{t:.2f}", reason)
    console.print(lat)
    worst = max(t for _, t, _ in latencies)
    console.print(f"worst latency {worst:.2f} s: {'within' if worst < args.timeout + 0.5 else 'OVER'} limit + 0.5 s")

    out = {
        "machine": {"cores": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "platform": platform.platform()},
        "timeout_s": args.timeout,
        "workers": workers,
        "problems": len(golds),
        "throughput": [{"run": n, "items": k, "seconds": round(t, 3), "per_second": round(k / t, 1)} for n, k, t in rows],
        "pool_startup_s": round(t_start, 3),
        "pool_equals_in_process": agree,
        "fast_path_equals_full_grading": fast_equals_full,
        "reward_by_prediction_kind": dict(zip(["boxed gold", "digit changed", "wrong number", "unboxed gold"], accuracy)),
        "latency": [{"input": n, "seconds": round(t, 3), "verdict": r} for n, t, r in latencies],
        "worst_latency_s": round(worst, 3),
        "worst_within_limit_plus_half_second": worst < args.timeout + 0.5,
        "agreement": agree_cases,
        "one_case_from_fresh_process": [{"command": n, **t} for n, t in latency_one],
    }
    path = ROOT / "bench" / "results" / "math_verifier.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

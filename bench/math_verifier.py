"""Math verifier throughput and worst-case latency.

Throughput: every MATH-500 gold answer with four predictions each (the gold boxed at the
end of a short solution, the gold with one digit changed, a wrong boxed number, and an
unboxed "The answer is $gold$." that needs Math-Verify's own extraction), graded

- in this process with :func:`verifiers.math.grade` (no time limit, the floor cost), and
- through :class:`verifiers.math.MathVerifier` (worker pool, per-item time limit), once
  with cold gold caches and once warm (the trainer's case: the same golds every epoch).

Latency: pathological predictions, each scored alone with the default 5 s limit; the
verdict must come back within limit + 0.5 s.

Usage: ``python bench/math_verifier.py [--workers N] [--timeout S] [--limit K]``.
Prints a table and writes ``bench/results/math_verifier.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vigor_cli.verifiers import math as vmath  # noqa: E402
from vigor_cli.verifiers.math import MathVerifier, grade  # noqa: E402
from vigor_cli.verifiers.math_answers import load_benchmark  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0, help="pool size (0: one per core)")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-item limit, seconds")
    parser.add_argument("--limit", type=int, default=500, help="MATH-500 problems to use")
    args = parser.parse_args()

    golds = [r.golds[0] for r in load_benchmark("math500")[: args.limit]]
    cases = cases_for(golds)
    rows = []

    vmath._gold_cache.clear()
    start = time.perf_counter()
    single = [grade(g, p) for g, p in cases]
    t_single = time.perf_counter() - start
    rows.append(("single process, in-line (no limit)", len(cases), t_single))

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
    load = os.getloadavg()[0]
    table = Table(title=f"math verifier throughput: MATH-500 golds x 4 predictions ({os.cpu_count()} cores, load {load:.1f})")
    for col in ("run", "items", "seconds", "verifications/s"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for name, n, t in rows:
        table.add_row(name, str(n), f"{t:.2f}", f"{n / t:.0f}")
    console.print(table)
    console.print(
        f"pool start-up ({workers} workers): {t_start:.2f} s; pool verdicts equal in-process verdicts: "
        f"{agree:.1%}; rewards by prediction kind (boxed gold, digit changed, wrong number, unboxed gold): "
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
        "reward_by_prediction_kind": dict(zip(["boxed gold", "digit changed", "wrong number", "unboxed gold"], accuracy)),
        "latency": [{"input": n, "seconds": round(t, 3), "verdict": r} for n, t, r in latencies],
        "worst_latency_s": round(worst, 3),
        "worst_within_limit_plus_half_second": worst < args.timeout + 0.5,
    }
    path = ROOT / "bench" / "results" / "math_verifier.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Evaluation metrics: avg@n, unbiased pass@k, per-benchmark and overall summaries.

Pure Python over per-sample rewards, so `vigor eval`, `vigor eval --rescore`
and the trainer's periodic evaluation compute the same numbers from the same
verdicts.

Details: docs/modules.md.
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any, Iterable, Mapping, Sequence

from vigor_cli.verifiers.math_answers import BENCHMARKS as MATH_SIX  # the paper's six, averaged


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k for one problem with ``c`` correct of ``n`` samples.

    Computed as a running product, ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which
    equals ``1 - C(n-c, k) / C(n, k)`` without huge binomials.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def pass_at_k_exact(n: int, c: int, k: int) -> float:
    """Same estimate from the binomial ratio (slow for large n; used as a cross-check)."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def ks_for(n: int) -> list[int]:
    """The k values reported for n samples: 1, 2, 4, ... up to n, and n itself."""
    ks = []
    k = 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks


def is_correct(reward: float, threshold: float = 1.0) -> bool:
    """A sample passes when its reward reaches ``threshold`` (task.pass_threshold; 1: every
    test, or the right answer)."""
    return reward >= threshold - 1e-9


def summarize_problems(
    rewards_per_problem: Sequence[Sequence[float]],
    test_fractions: Sequence[Sequence[float | None]] | None = None,
    threshold: float = 1.0,
) -> dict:
    """Metrics of one benchmark from each problem's per-sample rewards.

    Returns ``problems``, ``samples``, ``n`` (samples per problem; the smallest
    when they differ), ``avg@n``, ``pass@k`` for each k in :func:`ks_for`, and,
    when ``test_fractions`` holds numbers (code), ``test_pass_rate``.
    """
    problems = [list(r) for r in rewards_per_problem if len(r) > 0]
    if not problems:
        return {"problems": 0, "samples": 0, "n": 0, "avg@n": None, "pass@k": {}}
    n = min(len(r) for r in problems)
    samples = sum(len(r) for r in problems)
    avg = sum(sum(r) for r in problems) / samples
    passk = {}
    for k in ks_for(n):
        passk[str(k)] = sum(
            pass_at_k(len(r), sum(is_correct(x, threshold) for x in r), k) for r in problems
        ) / len(problems)
    out = {"problems": len(problems), "samples": samples, "n": n, "avg@n": avg, "pass@k": passk}
    if test_fractions is not None:
        fractions = [f for per in test_fractions for f in per if f is not None]
        if fractions:
            out["test_pass_rate"] = sum(fractions) / len(fractions)
    return out


def overall(per_benchmark: dict[str, dict]) -> dict:
    """Averages across benchmarks: the six-math average (when all six are present) and the
    unweighted mean avg@n over every evaluated benchmark."""
    out: dict = {}
    scored = {name: m["avg@n"] for name, m in per_benchmark.items() if m.get("avg@n") is not None}
    if scored:
        out["mean_avg@n"] = sum(scored.values()) / len(scored)
    if all(name in scored for name in MATH_SIX):
        out["math6_avg@n"] = sum(scored[name] for name in MATH_SIX) / len(MATH_SIX)
    return out



def reward_components(components: Iterable[Mapping[str, float | None]]) -> dict[str, float | int]:
    """Per reward function of a task that combines several, from each sample's values (name ->
    value, None: it could not score that sample): ``reward/<name>/mean`` over its values (no
    mean when it has none: a mean of nothing is not 0) and ``reward/<name>/unscored``, how many
    it returned None for (another function may have scored them)."""
    values: dict[str, list[float]] = defaultdict(list)
    unscored: dict[str, int] = defaultdict(int)
    for parts in components:
        for name, v in parts.items():
            if v is None:
                unscored[name] += 1
            else:
                values[name].append(float(v))
    out: dict[str, float | int] = {f"reward/{name}/mean": sum(v) / len(v) for name, v in values.items()}
    for name in dict.fromkeys([*values, *unscored]):
        out[f"reward/{name}/unscored"] = unscored[name]
    return out


def pass_rate_of(held: Mapping[str, Any]) -> float:
    """The mean over an evaluation file's sets of pass@1 (a sample passes at reward >=
    task.pass_threshold)."""
    passed = [float(s["metrics"]["pass@k"].get("1") or 0.0) for s in held["sets"].values()]
    return sum(passed) / len(passed) if passed else 0.0

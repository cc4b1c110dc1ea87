"""The evaluation results file: every per-sample verdict, and the metrics computed from them.

One schema for `vigor eval --output`, for `vigor eval --rescore`, and for the
trainer's ``eval/step-<N>.json``::

    {
      "schema": "vigor-eval/1",
      "model": {...},                  # what was evaluated (path, adapter, run, checkpoint)
      "sampling": {"n", "temperature", "top_p", "max_new_tokens", "seed"},
      "data_dir": "..." | null,
      "benchmarks": {
        "<name>": {
          "kind": "math" | "code",
          "metrics": {problems, samples, n, avg@n, pass@k: {k: value}, [test_pass_rate]},
          "problems": [
            {"uid", "question", "gold" (math only),
             "samples": [{"completion", "reward", "reason", "truncated", "tokens",
                          ["test_fraction"] (code)}]}
          ]
        }
      },
      "overall": {"mean_avg@n", ["math6_avg@n"]}
    }

Metrics are always recomputed from the samples (:func:`recompute`), so a
re-scored file and a fresh one agree by construction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.report.metrics import overall, summarize_problems

SCHEMA = "vigor-eval/1"


def benchmark_metrics(bench: dict) -> dict:
    """Metrics of one benchmark entry from its problems' samples."""
    rewards = [[float(s["reward"]) for s in p["samples"]] for p in bench["problems"]]
    fractions = None
    if bench.get("kind") == "code":
        fractions = [[s.get("test_fraction") for s in p["samples"]] for p in bench["problems"]]
    return summarize_problems(rewards, fractions)


def recompute(results: dict) -> dict:
    """Fill every benchmark's ``metrics`` and the ``overall`` block from the samples."""
    for bench in results["benchmarks"].values():
        bench["metrics"] = benchmark_metrics(bench)
    results["overall"] = overall({k: b["metrics"] for k, b in results["benchmarks"].items()})
    return results


def write_results(results: dict, path: Path) -> Path:
    """Write atomically (temp file + rename), so an interrupted write loses nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_results(path: Path) -> dict:
    """A results file, checked for the fields a re-score needs."""
    if not path.is_file():
        raise UserError(f"results file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{path}: not a vigor eval results file (schema {SCHEMA!r} expected)")
    benches = data.get("benchmarks")
    if not isinstance(benches, dict):
        raise UserError(f"{path}: 'benchmarks' must be a mapping")
    for name, bench in benches.items():
        problems = bench.get("problems") if isinstance(bench, dict) else None
        if not isinstance(problems, list):
            raise UserError(f"{path}: benchmark '{name}' has no 'problems' list")
        for i, p in enumerate(problems):
            if not isinstance(p, dict) or "uid" not in p or not isinstance(p.get("samples"), list):
                raise UserError(f"{path}: benchmark '{name}' problem {i} lacks 'uid' or 'samples'")
            for j, s in enumerate(p["samples"]):
                if not isinstance(s, dict) or not isinstance(s.get("completion"), str):
                    raise UserError(
                        f"{path}: benchmark '{name}' problem {p['uid']} sample {j} lacks 'completion'"
                    )
    return data


def jsonable(value: Any) -> Any:
    """``value`` if it survives JSON as it is, else None (gold answers of code tasks)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return list(value)
    return None

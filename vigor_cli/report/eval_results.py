"""The evaluation results file: every per-sample verdict, and the metrics computed from them.

Details: docs/modules.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from vigor_cli.errors import UserError
from vigor_cli.report.metrics import overall, reward_components, summarize_problems

SCHEMA = "vigor-eval/1"


def samples_by_uid(samples: list[dict]) -> dict[str, list[dict]]:
    """Samples grouped by problem uid, in first-appearance order, each by sample index."""
    grouped: dict[str, list[dict]] = {}
    for s in samples:
        grouped.setdefault(str(s["uid"]), []).append(s)
    for group in grouped.values():
        group.sort(key=lambda s: int(s.get("sample", 0)))
    return grouped


def recompute_set(entry: dict) -> dict:
    """Refresh a set's avg@n, per-example means and metrics from its samples."""
    grouped = samples_by_uid(entry["samples"])
    rewards = [[float(s["reward"]) for s in group if s["reward"] is not None] for group in grouped.values()]
    fractions = None
    if entry.get("kind") == "code":
        fractions = [[s.get("test_fraction") for s in group] for group in grouped.values()]
    metrics = summarize_problems(rewards, fractions, threshold=float(entry.get("pass_threshold", 1.0)))
    metrics["unscored"] = sum(s["reward"] is None for s in entry["samples"])
    parts = reward_components(s.get("rewards") or {} for s in entry["samples"])
    if parts:
        metrics["rewards"] = parts
    entry["metrics"] = metrics
    entry["per_example"] = {uid: sum(r) / len(r) for uid, r in zip(grouped, rewards) if r}  # None: unscored
    entry["examples"] = len(grouped)
    per = entry["per_example"]  # avg@n as evaluation computes it: the mean over problems of their means
    entry["accuracy"] = sum(per.values()) / len(per) if per else 0.0
    return entry


def recompute(results: dict) -> dict:
    """Fill every set's metrics, the overall block and the top-level accuracy from samples."""
    sets = results["sets"]
    for entry in sets.values():
        recompute_set(entry)
    results["overall"] = overall({k: e["metrics"] for k, e in sets.items()})
    results["accuracy"] = (sum(e["accuracy"] for e in sets.values()) / len(sets)) if sets else 0.0
    return results


def write_results(results: dict, path: Path) -> Path:
    """Write atomically (temp file + rename), so an interrupted write loses nothing and leaves
    no temporary file; any text can be written (``atomic.json_bytes``: a program's lone
    surrogate in a verdict is its JSON escape); a failure is one line naming ``path`` (the
    file asked for, never the temporary one)."""
    from vigor_cli.atomic import json_bytes, replace_atomic
    from vigor_cli.errors import os_error_message

    data = json_bytes(results) + b"\n"  # before any file is touched
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomic(path, data)
    except OSError as e:
        raise UserError(os_error_message(e, path)) from None
    return path


def read_results(path: Path) -> dict:
    """A results file (from `vigor eval` or a run's eval/step-N.json), checked for what a
    re-score needs."""
    from vigor_cli.user.files import LINE_MAX_BYTES, read_json

    if not os.path.lexists(path):
        raise UserError(f"results file not found: {path}")
    data = read_json(path, limit=LINE_MAX_BYTES)  # a FIFO, a device, bad or deep JSON: one line
    sets = data.get("sets") if isinstance(data, dict) else None
    if not isinstance(sets, dict):
        raise UserError(f"{path}: not an evaluation results file (no 'sets' mapping)")
    for name, entry in sets.items():
        samples = entry.get("samples") if isinstance(entry, dict) else None
        if not isinstance(samples, list):
            raise UserError(f"{path}: set '{name}' has no 'samples' list")
        for j, s in enumerate(samples):
            if (not isinstance(s, dict) or "uid" not in s or not isinstance(s.get("completion"), str)
                    or not (isinstance(s.get("reward"), (int, float)) or s.get("reward", 0) is None)):
                raise UserError(
                    f"{path}: set '{name}' sample {j} lacks 'uid', 'completion' or a numeric 'reward' (or null)"
                )
    return data

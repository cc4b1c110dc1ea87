"""What one run cost and where its rollouts went: rollouts, tokens and training seconds to a
target accuracy, per-rollout timing, the allocation's signal per step (allocation.jsonl), and
the starting model's pass-rate distribution with its variance law."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

def train_seconds_at_evals(metrics: list[dict]) -> dict[int, float]:
    """Cumulative training seconds (sum of time/step, evaluation excluded) at each step."""
    total, out = 0.0, {0: 0.0}
    for rec in sorted((r for r in metrics if "time/step" in r), key=lambda r: r["step"]):
        total += float(rec["time/step"])
        out[int(rec["step"])] = total
    return out


def update_signal(run_path: Path) -> dict[str, float | None]:
    """Per step, from allocation.jsonl: prompts whose used rewards differ (the only groups
    with a gradient), the rollouts in them, and the largest share of those rollouts that one
    prompt holds; each averaged over steps. This is where allocations differ in kind:
    the same rollout budget spread over many prompts or concentrated on a few."""
    from vigor_cli.user.jsonl import read_jsonl

    empty = {"signal_prompts": None, "signal_rollouts": None, "top_prompt_share": None, "kept_zero_var_share": None,
             "deep_share": None, "zero_variance_share": None, "deep_zero_variance_share": None,
             "wide_zero_variance_share": None, "no_signal": None}
    path = run_path / "allocation.jsonl"
    if not path.is_file():
        return empty
    prompts, rollouts, top = [], [], []
    kept = kept_flat = 0
    decisions = []
    spent: dict[str, list[int]] = {"deep": [0, 0], "wide": [0, 0], "all": [0, 0]}  # [no signal, rollouts]
    cumulative: list[list[int]] = []  # per step: [rollouts so far, of them without signal]
    from vigor_cli.allocation import registry

    vigor_family = registry.in_family("vigor")
    for rec in read_jsonl(path).records:
        if "auto" in rec.get("totals", {}):
            decisions.append(rec["totals"]["auto"].get("decision") == "deep")
        if rec.get("strategy") in vigor_family:
            for p in rec.get("prompts", []):
                for rnd in p.get("rounds", []):
                    if rnd.get("kept") is True:
                        kept += 1
                        kept_flat += rnd.get("var", 0) == 0
        flat, total = no_signal_rollouts(rec)
        plan = rec.get("totals", {}).get("auto", {}).get("decision")
        for key in ("all", plan) if plan in spent else ("all",):
            spent[key][0] += flat
            spent[key][1] += total
        cumulative.append([spent["all"][1], spent["all"][0]])
        sizes = []
        for p in rec.get("prompts", []):
            if not p.get("in_update"):
                continue
            rewards = [r for rnd in p.get("rounds", []) for r in rnd.get("rewards", [])]
            used = [rewards[i] for i in p["used_idx"]] if "used_idx" in p else rewards
            if used and max(used) != min(used):
                sizes.append(len(used))
        prompts.append(len(sizes))
        rollouts.append(sum(sizes))
        top.append(max(sizes) / sum(sizes) if sizes else 0.0)
    if not prompts:
        return empty
    return {
        "signal_prompts": statistics.mean(prompts),
        "signal_rollouts": statistics.mean(rollouts),
        "top_prompt_share": statistics.mean(top),
        # vigor family: share of the prompts kept for another round whose pool had no
        # variance yet (kept only by the seeded tie-break, or by low mean for difficulty)
        "kept_zero_var_share": kept_flat / kept if kept else None,
        # auto: the share of its steps that went deep
        "deep_share": statistics.mean(decisions) if decisions else None,
        # rollouts spent without signal (all rewards of their prompt equal): over the run, and
        # auto's in its deep and wide steps apart
        **{("zero_variance_share" if key == "all" else f"{key}_zero_variance_share"): (f / n if n else None)
           for key, (f, n) in spent.items()},
        "no_signal": cumulative,
    }


def no_signal_rollouts(record: dict) -> tuple[int, int]:
    """An allocation record's rollouts spent without signal (every rollout of a prompt whose
    recorded rewards are all equal, or none scored: metrics.jsonl's rollouts/zero_variance)
    and its rollouts."""
    flat = total = 0
    for p in record.get("prompts", []):
        n = int(p.get("rollouts", 0))
        rewards = [r for rnd in p.get("rounds", []) for r in rnd.get("rewards", [])]
        total += n
        if n and (not rewards or max(rewards) == min(rewards)):
            flat += n
    return flat, total


def no_signal_at(cumulative: list[list[int]] | None, points: list[float]) -> list[int] | None:
    """Rollouts spent without signal up to each of ``points`` (cumulative rollouts: the
    evaluations'), from update_signal's per-step ``no_signal``."""
    if not cumulative:
        return None
    out = []
    for x in points:
        done = [flat for spent, flat in cumulative if spent <= x + 1e-9]
        out.append(done[-1] if done else 0)
    return out


def run_measures(run: Any, target: float) -> dict:
    """One run's costs to ``target`` on three axes and its per-rollout timing."""
    from vigor_cli.report.curves import first_crossing, run_curve

    curve = run_curve(run)
    seconds = train_seconds_at_evals(run.metrics())
    eval_steps = sorted({int(r["step"]) for r in run.metrics() if r.get("eval/accuracy") is not None})
    secs = [seconds[s] for s in eval_steps]
    steps = [r for r in run.metrics() if "time/step" in r]
    rollouts = sum(r["rollouts/step"] for r in steps)
    gen = sum(r["time/generate"] for r in steps)
    signal = update_signal(run.path)
    cumulative = signal.pop("no_signal")
    return {
        "run": run.name,
        "seed": run.config_value("train.seed"),
        "eval_items": eval_items(run.path),
        "start_accuracy": curve.by_rollouts.y[0],
        "final_accuracy": curve.final_accuracy,
        "rollouts_to_target": first_crossing(curve.by_rollouts.x, curve.by_rollouts.y, target),
        "tokens_to_target": first_crossing(curve.by_tokens.x, curve.by_tokens.y, target),
        "seconds_to_target": first_crossing(secs, curve.by_rollouts.y, target),
        "rollouts": rollouts,
        "steps": len(steps),
        "seconds_per_rollout": sum(r["time/step"] for r in steps) / rollouts if rollouts else None,
        "generate_seconds_per_rollout": gen / rollouts if rollouts else None,
        "zero_var_frac": statistics.mean(r["groups/zero_var_frac"] for r in steps) if steps else None,
        "reward_mean": statistics.mean(r["reward/mean"] for r in steps) if steps else None,
        **signal,
        "curve": {"rollouts": curve.by_rollouts.x, "tokens": curve.by_tokens.x, "train_seconds": secs, "accuracy": curve.by_rollouts.y,
                  "no_signal": no_signal_at(cumulative, curve.by_rollouts.x)},
    }


def eval_items(run_path: Path) -> int | None:
    """Graded answers behind one evaluation (held-out problems x samples each), from the
    start's evaluation file: what the evaluation's own noise scales with."""
    path = run_path / "eval" / "step-0.json"
    if not path.is_file():
        return None
    sets = json.loads(path.read_text()).get("sets", {})
    return sum(int(s["examples"]) * int(s["n"]) for s in sets.values()) or None


def kept_measures(m: dict, target: float) -> dict:
    """A run kept from an earlier study's results (its curve and per-run measures, no run
    directory), measured again against this study's target."""
    from vigor_cli.report.curves import first_crossing

    c = m["curve"]
    return {**m, "kept": True,
            "rollouts_to_target": first_crossing(c["rollouts"], c["accuracy"], target),
            "tokens_to_target": first_crossing(c["tokens"], c["accuracy"], target),
            "seconds_to_target": first_crossing(c["train_seconds"], c["accuracy"], target)}


def start_distribution(task_name: str, model: str, temperature: float, cache: Path, problems: int = 256, samples: int = 16) -> dict:
    """Pass counts out of ``samples`` of the starting model on ``problems`` training prompts at
    the regime's rollout temperature, and their variance law: the distribution allocation
    starts from (cached)."""
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if "variance_law" in cached:
            return cached
    import random

    import torch

    from vigor_cli.config import TaskConfig
    from vigor_cli.model.loading import resolve_model_path
    from vigor_cli.tasks import get_task
    from vigor_cli.model.tiny import load, pass_rates
    from vigor_cli.study.variance_law import census

    torch.set_num_threads(1)
    model_obj, tokenizer = load(resolve_model_path(model))
    task = get_task(TaskConfig(name=task_name), workers=1)
    try:
        train = task.train_examples()
        examples = random.Random(0).sample(train, min(problems, len(train)))
        max_new = 48 if task_name == "tiny-code" else 16
        rates = pass_rates(task, model_obj, tokenizer, examples, samples, seed=0, temperature=temperature, max_new_tokens=max_new)
    finally:
        task.close()
    counts = [round(r * samples) for r in rates]
    law = census(counts, samples)
    out = {
        "problems": len(examples),
        "samples_per_problem": samples,
        "temperature": temperature,
        "pass_counts": counts,
        "mean_pass_rate": law.mean_pass_rate,
        "pass_count_histogram": law.histogram,
        # unbiased share of zero-variance groups of 8 (vigor_cli/study/variance_law.py)
        "zero_variance_at_8": law.zero_variance_share_8,
        # unbiased per-prompt reward variances: their mean, the mean over the top eighth (the
        # prompts VIGOR's last round concentrates on), the fitted Pareto k and its eta
        "mean_variance": law.mean_variance,
        "top_eighth_variance": law.top_eighth_variance,
        "variance_law": law.to_dict(),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1) + "\n")
    return out

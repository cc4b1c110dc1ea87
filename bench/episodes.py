"""Does the environment's answer matter? tiny-guess episodes with and without it, on the CPU.

    nice -n 10 python bench/episodes.py                    # 5 seeds, 40 steps (about 2 h on 2 shared cores)
    python bench/episodes.py --seeds 1 --steps 2 --quick   # the plumbing only

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = {"higher-lower": "higher-lower", "retry": "retry", "one-turn": None}
"""Arm -> task.env (None: one completion per rollout)."""
COLOURS = {"higher-lower": "#1f77b4", "retry": "#d62728", "one-turn": "#7f7f7f"}
RESULTS = ROOT / "bench" / "episodes_results.json"
PLOT = ROOT / "bench" / "episodes_curves.png"
BOOTSTRAP_REPS = 4000


def common_sets(arm: str, seed: int, steps: int, workdir: Path, *, task: str, prompt_tokens: int, new_tokens: int,
                prompts: int, eval_every: int, eval_samples: int) -> list[str]:
    """What every episode benchmark's runs share (grpo, 8 per prompt, the tiny model, full
    fine-tuning at 5e-4, held-out at temperature 1), with the task and its sizes."""
    return [
        "model.name_or_path=tiny", "model.lora.enabled=false", f"task.name={task}", f"task.max_prompt_tokens={prompt_tokens}",
        "allocation.strategy=grpo", "allocation.group_size=8", f"sampling.max_new_tokens={new_tokens}", "engine.kind=hf",
        "grpo.learning_rate=5.0e-4", f"train.steps={steps}", f"train.prompts_per_step={prompts}",
        f"train.eval_every={eval_every}", f"train.eval_samples={eval_samples}", "train.eval_temperature=1.0",
        "train.save_every=0", "train.log_completions_every=0", f"train.seed={seed}",
        f"train.output_dir={workdir}", f"train.run_name={arm}-s{seed}",
    ]


def train_quiet(sets: list[str]) -> tuple[dict, Path, float, list[dict]]:
    """Train one run from ``--set`` lines with the progress output discarded: its summary,
    run directory, wall seconds and metrics.jsonl lines."""
    from rich.console import Console

    from vigor_cli.settings import build_config
    from vigor_cli.train.trainer import train

    cfg = build_config(sets=sets)
    t0 = time.time()
    with open(os.devnull, "w") as devnull:
        summary = train(cfg, out=Console(file=devnull))
    run = Path(summary["run_dir"])
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return summary, run, time.time() - t0, lines


def settings(arm: str, seed: int, steps: int, workdir: Path, quick: bool) -> list[str]:
    """The arm's run config as --set lines (the same in every arm but task.env)."""
    sets = common_sets(arm, seed, steps, workdir, task="tiny-guess", prompt_tokens=64, new_tokens=16,
                       prompts=4 if quick else 16, eval_every=steps if quick else 10, eval_samples=1 if quick else 8)
    if ARMS[arm] is not None:
        sets += [f"task.env={ARMS[arm]}", "task.max_turns=3", "task.max_episode_tokens=96"]
    return sets


def run_one(arm: str, seed: int, steps: int, workdir: Path, quick: bool) -> dict:
    """Train one arm at one seed; its evaluation curve, tokens and wall time."""
    summary, run, wall, lines = train_quiet(settings(arm, seed, steps, workdir, quick))
    curve: dict[str, list] = {"step": [], "accuracy": [], "first_attempt": []}
    train_lines = []
    for row in lines:
        if "eval/accuracy" in row:
            curve["step"].append(row["step"])
            curve["accuracy"].append(row["eval/accuracy"])
            curve["first_attempt"].append(row.get("eval/tiny-guess/first_attempt", row["eval/accuracy"]))
        else:
            train_lines.append(row)
    return {
        "arm": arm, "seed": seed, "steps": steps, "wall_s": wall, "curve": curve,
        "final_accuracy": curve["accuracy"][-1], "final_first_attempt": curve["first_attempt"][-1],
        "rollouts": summary["rollouts"], "model_tokens": summary["tokens"],
        "env_tokens": sum(r.get("episodes/env_tokens", 0) for r in train_lines),
        "turns_mean": statistics.mean(r.get("episodes/turns/mean", 1.0) for r in train_lines),
        **({"answer_use": answer_use(run)} if ARMS[arm] is not None else {}),
    }


def answer_use(run: Path) -> dict:
    """How the policy uses the environment's answers, at the run's first and last evaluation
    (the untrained model, then the trained one): of the next guesses after a wrong one, the
    share that differ from it (``changed``) and, after "Higher"/"Lower", the share that move
    that way (``followed_direction``; None for retry, whose answers give no direction)."""
    evals = sorted((run / "eval").glob("step-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return {"start": guess_moves(evals[0]), "end": guess_moves(evals[-1])}


def guess_moves(eval_file: Path) -> dict:
    """``answer_use``'s counts over one evaluation's episodes of tiny-guess."""
    import re

    samples = json.loads(eval_file.read_text())["sets"]["tiny-guess"]["samples"]
    moves = changed = directed = followed = 0
    for sample in samples:
        messages = (sample.get("episode") or {}).get("messages", [])
        for before, said, after in zip(messages, messages[1:], messages[2:]):
            if before["role"] != "assistant" or said["role"] != "user":
                continue
            a, b = (re.search(r"\\boxed\{(-?\d+)\}", m["content"]) for m in (before, after))
            if a is None or b is None:
                continue
            a, b = int(a.group(1)), int(b.group(1))
            moves += 1
            changed += a != b
            if said["content"].startswith(("Higher", "Lower")):
                directed += 1
                followed += (b > a) if said["content"].startswith("Higher") else (b < a)
    return {"follow_ups": moves, "changed": changed / moves if moves else None,
            "followed_direction": followed / directed if directed else None}


def bootstrap(values: list[float], reps: int = BOOTSTRAP_REPS, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean over ``values`` (seeds)."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float(x.mean())
    means = x[np.random.default_rng(seed).integers(0, len(x), size=(reps, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975], method="inverted_cdf")
    return float(lo), float(hi)


def summarise(runs: list[dict]) -> dict:
    """Per arm: final accuracy and first attempt (mean, interval), tokens, wall; the arms
    paired by seed; and, over the runs that measured it, how the policy used the answers."""
    out: dict = {"arms": {}, "paired": {}, "answer_use": {}}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        acc = [r["final_accuracy"] for r in mine]
        first = [r["final_first_attempt"] for r in mine]
        out["arms"][arm] = {
            "seeds": len(mine), "final_accuracy": statistics.mean(acc), "final_accuracy_ci": bootstrap(acc),
            "first_attempt": statistics.mean(first), "first_attempt_ci": bootstrap(first),
            "start_accuracy": statistics.mean(r["curve"]["accuracy"][0] for r in mine),
            "model_tokens": statistics.mean(r["model_tokens"] for r in mine),
            "env_tokens": statistics.mean(r["env_tokens"] for r in mine),
            "turns_mean": statistics.mean(r["turns_mean"] for r in mine),
            "wall_s": statistics.mean(r["wall_s"] for r in mine),
        }
    for a, b in (("higher-lower", "retry"), ("higher-lower", "one-turn"), ("retry", "one-turn")):
        pa = {r["seed"]: r["final_accuracy"] for r in runs if r["arm"] == a}
        pb = {r["seed"]: r["final_accuracy"] for r in runs if r["arm"] == b}
        seeds = sorted(set(pa) & set(pb))
        if seeds:
            diff = [pa[s] - pb[s] for s in seeds]
            out["paired"][f"{a} - {b}"] = {"seeds": len(seeds), "mean": statistics.mean(diff), "ci": bootstrap(diff)}
    for arm in ARMS:
        mine = [r["answer_use"] for r in runs if r["arm"] == arm and "answer_use" in r]
        if mine:
            out["answer_use"][arm] = {"seeds": len(mine), **{when: {
                key: statistics.mean(u[when][key] for u in mine) if all(u[when][key] is not None for u in mine) else None
                for key in ("changed", "followed_direction")} for when in ("start", "end")}}
    return out


def table(summary: dict) -> str:
    """The markdown table BENCHMARKS.md shows."""
    rows = ["| arm | seeds | held-out accuracy at the end [95 % interval] | first attempt | at the start | "
            "model / env tokens per run | turns per episode | wall per run |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arm, a in summary["arms"].items():
        lo, hi = a["final_accuracy_ci"]
        flo, fhi = a["first_attempt_ci"]
        rows.append(f"| {arm} | {a['seeds']} | {a['final_accuracy']:.3f} [{lo:.3f}, {hi:.3f}] | "
                    f"{a['first_attempt']:.3f} [{flo:.3f}, {fhi:.3f}] | {a['start_accuracy']:.3f} | "
                    f"{a['model_tokens']:,.0f} / {a['env_tokens']:,.0f} | {a['turns_mean']:.2f} | {a['wall_s']:.0f} s |")
    rows += ["", "| paired by seed | seeds | difference in final accuracy [95 % interval] |", "| --- | --- | --- |"]
    for name, p in summary["paired"].items():
        rows.append(f"| {name} | {p['seeds']} | {p['mean']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] |")
    if summary.get("answer_use"):
        rows += ["", "| answers used (held-out episodes) | seeds | next guess differs: start -> end | "
                 "moves the way Higher/Lower said: start -> end |", "| --- | --- | --- | --- |"]
        for arm, u in summary["answer_use"].items():
            said = [f"{u[w]['followed_direction']:.3f}" if u[w]["followed_direction"] is not None else "-"
                    for w in ("start", "end")]
            rows.append(f"| {arm} | {u['seeds']} | {u['start']['changed']:.3f} -> {u['end']['changed']:.3f} | "
                        f"{said[0]} -> {said[1]} |")
    return "\n".join(rows)


def plot(runs: list[dict], summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        steps = mine[0]["curve"]["step"]
        mean = [statistics.mean(r["curve"]["accuracy"][i] for r in mine) for i in range(len(steps))]
        ax.plot(steps, mean, marker="o", color=COLOURS[arm], label=f"{arm} (mean of {len(mine)} seeds; band: their range)")
        ax.fill_between(steps, [min(r["curve"]["accuracy"][i] for r in mine) for i in range(len(steps))],
                        [max(r["curve"]["accuracy"][i] for r in mine) for i in range(len(steps))],
                        color=COLOURS[arm], alpha=0.15, linewidth=0)
    pair = summary["paired"].get("higher-lower - retry")
    said = (f"higher-lower ends {pair['mean'] * 100:+.1f} points above retry "
            f"[{pair['ci'][0] * 100:+.1f}, {pair['ci'][1] * 100:+.1f}]" if pair else "tiny-guess episodes")
    ax.set_title(f"tiny-guess: {said}", fontsize=10)
    ax.set_xlabel("training step (128 episodes each)")
    ax.set_ylabel("held-out games won (avg@8, T=1)")
    ax.set_ylim(0, 1)
    ax.axhline(3 / 7, color=COLOURS["retry"], linestyle=":", linewidth=0.8)
    ax.axhline(1 / 7, color=COLOURS["one-turn"], linestyle=":", linewidth=0.8)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def run_seeds(out: Path, arms: list[str], seeds: int, steps: int, quick: bool, run_one: Any, summarise: Any,
              final_key: str) -> tuple[list[dict], dict]:
    """Every arm at seeds 0..seeds-1, seed by seed, keeping the runs ``out`` already holds at
    this length and writing ``out`` (runs and summary) after each run."""
    done = json.loads(out.read_text())["runs"] if out.is_file() else []
    runs = [r for r in done if r["steps"] == steps]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            for arm in arms:
                if any(r["arm"] == arm and r["seed"] == seed for r in runs):
                    continue
                runs.append(run_one(arm, seed, steps, Path(tmp), quick))
                out.write_text(json.dumps({"runs": runs, "summary": summarise(runs)}, indent=1) + "\n")
                print(f"{arm} seed {seed}: final {runs[-1][final_key]:.3f} ({runs[-1]['wall_s']:.0f} s)", flush=True)
    summary = summarise(runs)
    out.write_text(json.dumps({"runs": runs, "summary": summary}, indent=1) + "\n")
    return runs, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--quick", action="store_true", help="4 prompts, 1 evaluation sample: the plumbing only")
    ap.add_argument("--out", type=Path, help="the results file (default: bench/episodes_results.json; "
                    "with --quick, episodes_quick.json in the temporary directory, so the study is kept)")
    ap.add_argument("--answer-use", type=Path, metavar="RUN", help="only print how RUN's last evaluation "
                    "follows the environment's answers")
    a = ap.parse_args()
    if a.answer_use is not None:
        print(json.dumps(answer_use(a.answer_use)))
        return
    if a.out is None:
        a.out = Path(tempfile.gettempdir()) / "episodes_quick.json" if a.quick else RESULTS
    runs, summary = run_seeds(a.out, a.arms.split(","), a.seeds, a.steps, a.quick, run_one, summarise, "final_accuracy")
    print(table(summary))
    if not a.quick:
        plot(runs, summary)


if __name__ == "__main__":
    main()

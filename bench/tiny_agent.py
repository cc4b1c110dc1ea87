"""A tiny agent on a laptop: does GRPO teach the warmed tiny model to call a calculator?

    nice -n 10 python bench/tiny_agent.py            # 3 seeds x 2 arms (writes the JSON and the plot)
    python bench/tiny_agent.py --quick               # the plumbing only (1 seed, 2 steps, 4 prompts)

The starting model is the bundled tiny model warmed on the tool-call format (`vigor make-tiny
--recipe tools`; built once here and kept under bench/results/tiny_agent/). Arm "tool": GRPO
on tiny-products with the built-in calculator environment (configs/tiny-agent.yaml); arm "no
tool": the same model, task, seeds and rollout budget, one completion per rollout and no tool
list in the prompt. Each run on one torch thread. Details: docs/modules.md.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from episodes import bootstrap  # noqa: E402  (bench/episodes.py: the same interval)

ARMS = {"tool": "calculator", "no tool": None}
"""Arm -> task.env (None: one completion per rollout, no tool)."""
COLOURS = {"tool": "#1f77b4", "no tool": "#7f7f7f"}
RESULTS = ROOT / "bench" / "tiny_agent_results.json"
PLOT = ROOT / "bench" / "tiny_agent_curves.png"
MODEL = ROOT / "bench" / "results" / "tiny_agent" / "model"
"""Where the warmed starting model is built once (`vigor make-tiny --recipe tools`, seed 0)."""
FULL = dict(steps=16, prompts=16, eval_every=4, eval_limit=64, eval_samples=2)
QUICK = dict(steps=2, prompts=4, eval_every=2, eval_limit=4, eval_samples=1)


def starting_model(path: Path = MODEL, steps: int | None = None) -> tuple[Path, dict]:
    """The warmed tiny model, built on first use (one thread, seed 0) and then reused; a
    folder without recipe.json is built there (``steps``: a shorter warm-up)."""
    from vigor_cli.model.tiny_agent import TOOLS_RECIPE

    recipe = path / "recipe.json"
    stale = path == MODEL and recipe.is_file() and any(
        json.loads(recipe.read_text()).get(k) != v for k, v in TOOLS_RECIPE.items())
    if stale:  # the cache, built by another recipe: built again (a model given with --model is used as it is)
        import shutil

        shutil.rmtree(path)
    if not recipe.is_file():
        import torch

        from vigor_cli.model.tiny_agent import warm_tools

        torch.set_num_threads(1)
        warm_tools(path, steps=steps)
    return path, json.loads(recipe.read_text())


def settings(arm: str, seed: int, model: Path, workdir: Path, plan: dict) -> tuple[dict, list[str]]:
    """The arm's run: configs/tiny-agent.yaml (without the episode keys in the "no tool" arm)
    and --set lines, the same in both arms."""
    import yaml

    tree = yaml.safe_load((ROOT / "configs" / "tiny-agent.yaml").read_text())
    if ARMS[arm] is None:
        for key in ("env", "max_turns", "max_episode_tokens"):
            tree["task"].pop(key, None)
    sets = [
        f"model.name_or_path={model}", f"train.steps={plan['steps']}", f"train.prompts_per_step={plan['prompts']}",
        f"train.eval_every={plan['eval_every']}", f"train.eval_limit={plan['eval_limit']}",
        f"train.eval_samples={plan['eval_samples']}", "train.log_completions_every=0", f"train.seed={seed}",
        f"train.output_dir={workdir}", f"train.run_name={arm.replace(' ', '-')}-s{seed}",
    ]
    return tree, sets


def called_tool(sample: dict) -> bool:
    """A held-out sample whose model wrote a tool call (an episode's messages, or a plain completion)."""
    episode = sample.get("episode")
    if episode:
        return any(m.get("tool_calls") or "<tool_call>" in str(m.get("content", ""))
                   for m in episode.get("messages", []) if m.get("role") == "assistant")
    return "<tool_call>" in str(sample.get("text", sample.get("completion", "")))


def eval_point(eval_file: Path) -> dict:
    """Held-out pass rate and tool-call rate of one evaluation file."""
    data = json.loads(eval_file.read_text())
    samples = data["sets"]["tiny-products"]["samples"]
    passed = [s.get("reward") == 1.0 for s in samples]
    return {"pass_rate": sum(passed) / len(samples), "tool_call_rate": sum(map(called_tool, samples)) / len(samples),
            "samples": len(samples)}


def run_one(arm: str, seed: int, model: Path, workdir: Path, plan: dict) -> dict:
    """Train one arm at one seed: held-out and training curves against rollouts, wall time."""
    import torch
    from rich.console import Console

    from vigor_cli.settings import build_config
    from vigor_cli.train.trainer import train

    torch.set_num_threads(1)
    tree, sets = settings(arm, seed, model, workdir, plan)
    cfg = build_config(tree=tree, sets=sets)
    t0 = time.time()
    cpu0 = time.process_time()
    with open(os.devnull, "w") as devnull:
        summary = train(cfg, out=Console(file=devnull))
    run = Path(summary["run_dir"])
    held: dict[str, list] = {"step": [], "rollouts": [], "pass_rate": [], "tool_call_rate": []}
    training: dict[str, list] = {"step": [], "rollouts": [], "pass_rate": [], "tool_call_rate": []}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/accuracy" in row:
            point = eval_point(run / "eval" / f"step-{row['step']}.json")
            held["step"].append(row["step"])
            held["rollouts"].append(row["rollouts/cumulative"])
            held["pass_rate"].append(point["pass_rate"])
            held["tool_call_rate"].append(point["tool_call_rate"])
        if "reward/pass_rate" in row:
            training["step"].append(row["step"])
            training["rollouts"].append(row["rollouts/cumulative"])
            training["pass_rate"].append(row["reward/pass_rate"])
            none = row.get("episodes/tool_calls/none")
            training["tool_call_rate"].append(None if none is None else 1.0 - none)
    return {
        "arm": arm, "seed": seed, "steps": plan["steps"], "wall_s": round(time.time() - t0, 1),
        "cpu_s": round(time.process_time() - cpu0, 1), "rollouts": summary["rollouts"],
        "held_out": held, "training": training,
    }


def summarise(runs: list[dict]) -> dict:
    """Per arm: held-out pass and tool-call rates at the start and the end (mean over seeds,
    interval), wall and CPU time; the arms paired by seed on the final pass rate."""
    out: dict = {"arms": {}, "paired": {}}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        entry: dict = {"seeds": len(mine), "rollouts": mine[0]["rollouts"]}
        for key in ("pass_rate", "tool_call_rate"):
            start = [r["held_out"][key][0] for r in mine]
            end = [r["held_out"][key][-1] for r in mine]
            entry[key] = {"start": statistics.mean(start), "end": statistics.mean(end), "end_ci": bootstrap(end),
                          "change": statistics.mean(e - s for s, e in zip(start, end)),
                          "change_ci": bootstrap([e - s for s, e in zip(start, end)])}
        entry["wall_s"] = statistics.mean(r["wall_s"] for r in mine)
        entry["cpu_s"] = statistics.mean(r["cpu_s"] for r in mine)
        out["arms"][arm] = entry
    pa = {r["seed"]: r["held_out"]["pass_rate"][-1] for r in runs if r["arm"] == "tool"}
    pb = {r["seed"]: r["held_out"]["pass_rate"][-1] for r in runs if r["arm"] == "no tool"}
    seeds = sorted(set(pa) & set(pb))
    if seeds:
        diff = [pa[s] - pb[s] for s in seeds]
        out["paired"]["tool - no tool"] = {"seeds": len(seeds), "mean": statistics.mean(diff), "ci": bootstrap(diff)}
    out["total_cpu_s"] = round(sum(r["cpu_s"] for r in runs), 1)
    return out


def table(summary: dict) -> str:
    """The markdown table BENCHMARKS.md shows."""
    rows = ["| arm | seeds | rollouts per run | held-out pass rate: start -> end [95 % interval of the end] | "
            "held-out tool-call rate: start -> end [interval] | wall / CPU per run |",
            "| --- | --- | --- | --- | --- | --- |"]
    for arm, a in summary["arms"].items():
        p, t = a["pass_rate"], a["tool_call_rate"]
        rows.append(f"| {arm} | {a['seeds']} | {a['rollouts']:,} | {p['start']:.3f} -> {p['end']:.3f} "
                    f"[{p['end_ci'][0]:.3f}, {p['end_ci'][1]:.3f}] | {t['start']:.3f} -> {t['end']:.3f} "
                    f"[{t['end_ci'][0]:.3f}, {t['end_ci'][1]:.3f}] | {a['wall_s']:.0f} s / {a['cpu_s']:.0f} s |")
    rows += ["", "| paired by seed | seeds | difference in final held-out pass rate [95 % interval] |",
             "| --- | --- | --- |"]
    for name, p in summary["paired"].items():
        rows.append(f"| {name} | {p['seeds']} | {p['mean']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] |")
    return "\n".join(rows)


def plot(runs: list[dict], summary: dict, path: Path = PLOT) -> None:
    """Two panels against rollouts: tool-call rate and pass rate, held-out (solid) and
    training (dotted), one colour per arm, the mean over seeds with their range as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharex=True)
    for ax, key, label in ((axes[0], "tool_call_rate", "tool-call rate"), (axes[1], "pass_rate", "pass rate")):
        for arm in ARMS:
            mine = [r for r in runs if r["arm"] == arm]
            if not mine:
                continue
            xs = mine[0]["held_out"]["rollouts"]
            ys = [[r["held_out"][key][i] for r in mine] for i in range(len(xs))]
            ax.plot(xs, [statistics.mean(y) for y in ys], marker="o", color=COLOURS[arm],
                    label=f"{arm}: held-out (mean of {len(mine)} seeds; band: their range)")
            ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=COLOURS[arm], alpha=0.15, linewidth=0)
            tx = mine[0]["training"]["rollouts"]
            ty = [[r["training"][key][i] for r in mine] for i in range(len(tx))]
            if all(v is not None for y in ty for v in y):
                ax.plot(tx, [statistics.mean(y) for y in ty], linestyle=":", color=COLOURS[arm],
                        label=f"{arm}: training rollouts")
        ax.set_xlabel("rollouts (episodes) trained on")
        ax.set_ylabel(label)
        ax.set_ylim(-0.03, 1.03)  # a curve at 0 stays in sight
        ax.legend(loc="best", fontsize=7)
    tool, none = summary["arms"].get("tool"), summary["arms"].get("no tool")
    if tool and none:
        title = (f"tiny-products, warmed tiny model: with the calculator, tool calls {tool['tool_call_rate']['start']:.2f}"
                 f" -> {tool['tool_call_rate']['end']:.2f} and pass rate {tool['pass_rate']['start']:.2f} -> "
                 f"{tool['pass_rate']['end']:.2f}; without it {none['pass_rate']['start']:.2f} -> {none['pass_rate']['end']:.2f}")
    else:
        title = "tiny-products: tool-call and pass rates under GRPO"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def merge(files: list[Path], out: Path, plan: dict) -> None:
    """Join results files (each run once, by arm and seed) into ``out``; print the table, draw the plot."""
    runs: dict[tuple, dict] = {}
    recipe = None
    for path in files:
        data = json.loads(path.read_text())
        recipe = recipe or data["starting_model"]
        for r in data["runs"]:
            if r["steps"] == plan["steps"]:
                runs.setdefault((r["seed"], r["arm"]), r)
    ordered = [runs[k] for k in sorted(runs, key=lambda k: (k[0], list(ARMS).index(k[1])))]
    summary = summarise(ordered)
    out.write_text(json.dumps({"plan": plan, "starting_model": recipe, "runs": ordered, "summary": summary},
                              indent=1) + "\n")
    print(table(summary))
    plot(ordered, summary)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--start-seed", type=int, default=0, help="the first seed (seeds run in parallel processes "
                    "write their own --out, then --merge joins them)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--merge", type=Path, nargs="+", metavar="JSON", help="only join these results files into --out "
                    "(a run in several is kept once) and draw the plot")
    ap.add_argument("--quick", action="store_true", help="1 seed, 2 steps of 4 prompts: the plumbing only")
    ap.add_argument("--model", type=Path, help="the warmed starting model (default: built once under "
                    "bench/results/tiny_agent/model; with --quick, a 20-step warm-up in the temporary directory)")
    ap.add_argument("--out", type=Path, help="the results file (default: bench/tiny_agent_results.json; with "
                    "--quick, tiny_agent_quick.json in the temporary directory, so the study is kept)")
    a = ap.parse_args()
    plan = QUICK if a.quick else FULL
    seeds = 1 if a.quick and a.seeds == 3 else a.seeds
    if a.merge:
        merge(a.merge, a.out or RESULTS, plan)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if a.out is None:
            a.out = Path(tmp) / "tiny_agent_quick.json" if a.quick else RESULTS
        model, recipe = starting_model(a.model or (Path(tmp) / "model" if a.quick else MODEL),
                                       steps=20 if a.quick and a.model is None else None)
        done = json.loads(a.out.read_text())["runs"] if a.out.is_file() else []
        runs = [r for r in done if r["steps"] == plan["steps"]]
        for seed in range(a.start_seed, a.start_seed + seeds):
            for arm in a.arms.split(","):
                if any(r["arm"] == arm and r["seed"] == seed for r in runs):
                    continue
                runs.append(run_one(arm, seed, model, Path(tmp), plan))
                last = runs[-1]
                a.out.write_text(json.dumps({"plan": plan, "starting_model": recipe, "runs": runs,
                                             "summary": summarise(runs)}, indent=1) + "\n")
                print(f"{arm} seed {seed}: held-out pass {last['held_out']['pass_rate'][0]:.3f} -> "
                      f"{last['held_out']['pass_rate'][-1]:.3f}, tool calls {last['held_out']['tool_call_rate'][0]:.3f}"
                      f" -> {last['held_out']['tool_call_rate'][-1]:.3f} ({last['wall_s']:.0f} s)", flush=True)
        summary = summarise(runs)
        a.out.write_text(json.dumps({"plan": plan, "starting_model": recipe, "runs": runs, "summary": summary},
                                    indent=1) + "\n")
        print(table(summary))
        if not a.quick:
            plot(runs, summary)


if __name__ == "__main__":
    main()

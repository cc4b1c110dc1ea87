"""Does code-feedback beat one attempt? tiny-code episodes on paired seeds, on the CPU.

    nice -n 10 python bench/episodes_code.py                    # 4 seeds, 6 steps of 8 prompts
    python bench/episodes_code.py --seeds 1 --steps 1 --quick   # the plumbing only

Three arms at the same training budget (prompts and rollouts per step): code-feedback (two
attempts, the first failing public test shown between them), retry (two attempts, only
"Wrong" between them: the same turns without the information) and one attempt (no
environment). Episodes fit the tiny model's 256-token context: task.max_turns=2 and
task.max_episode_tokens=200 beside prompts of at most 44 tokens. Held-out: the 40 tiny-code
problems' private tests. Prints a table and writes bench/episodes_code_results.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from episodes import bootstrap, common_sets, run_seeds, train_quiet  # noqa: E402  (bench/episodes.py: the same interval and runs)

ARMS = {"code-feedback": "code-feedback", "retry": "retry", "one-attempt": None}
"""Arm -> task.env (None: one completion per rollout)."""
RESULTS = ROOT / "bench" / "episodes_code_results.json"
EPISODE = ["task.max_turns=2", "task.max_episode_tokens=200"]
"""Two attempts that fit the tiny model's context (prompt <= 44 tokens + 200 <= 256)."""


def settings(arm: str, seed: int, steps: int, workdir: Path, quick: bool) -> list[str]:
    """The arm's run config as --set lines (the same in every arm but task.env)."""
    sets = common_sets(arm, seed, steps, workdir, task="tiny-code", prompt_tokens=128, new_tokens=48,
                       prompts=4 if quick else 8, eval_every=steps, eval_samples=1 if quick else 4)
    sets += ["task.code_reward=full", "train.reward_workers=2"]
    if quick:
        sets.append("train.eval_limit=4")
    if ARMS[arm] is not None:
        sets += [f"task.env={ARMS[arm]}", *EPISODE]
    return sets


def run_one(arm: str, seed: int, steps: int, workdir: Path, quick: bool) -> dict:
    """Train one arm at one seed; its held-out curve (after the answers, and the first attempt)."""
    summary, run, wall, lines = train_quiet(settings(arm, seed, steps, workdir, quick))
    curve: dict[str, list] = {"step": [], "pass_rate": [], "first_attempt": []}
    for row in lines:
        if "eval/accuracy" in row:
            curve["step"].append(row["step"])
            curve["pass_rate"].append(row["eval/accuracy"])
            curve["first_attempt"].append(row.get("eval/tiny-code/first_attempt", row["eval/accuracy"]))
    steps_lines = [r for r in lines if "rollouts/step" in r]
    passed = sum(r.get("episodes/ended/passed", 0) for r in steps_lines)
    episodes = sum(r["rollouts/step"] for r in steps_lines)
    return {"arm": arm, "seed": seed, "steps": steps, "wall_s": wall, "curve": curve,
            "final": curve["pass_rate"][-1], "final_first_attempt": curve["first_attempt"][-1],
            "start": curve["pass_rate"][0], "rollouts": summary["rollouts"],
            "training_passed_share": passed / episodes if ARMS[arm] == "code-feedback" and episodes else None,
            "turns_mean": statistics.mean(r.get("episodes/turns/mean", 1.0) for r in steps_lines)}


def summarise(runs: list[dict]) -> dict:
    out: dict = {"arms": {}, "paired": {}}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if mine:
            final = [r["final"] for r in mine]
            first = [r["final_first_attempt"] for r in mine]
            out["arms"][arm] = {"seeds": len(mine), "final": statistics.mean(final), "final_ci": bootstrap(final),
                                "first_attempt": statistics.mean(first), "start": statistics.mean(r["start"] for r in mine),
                                "turns_mean": statistics.mean(r["turns_mean"] for r in mine),
                                "wall_s": statistics.mean(r["wall_s"] for r in mine)}
    for a, b in (("code-feedback", "one-attempt"), ("code-feedback", "retry"), ("retry", "one-attempt")):
        pa = {r["seed"]: r["final"] for r in runs if r["arm"] == a}
        pb = {r["seed"]: r["final"] for r in runs if r["arm"] == b}
        seeds = sorted(set(pa) & set(pb))
        if seeds:
            diff = [pa[s] - pb[s] for s in seeds]
            out["paired"][f"{a} - {b}"] = {"seeds": len(seeds), "mean": statistics.mean(diff), "ci": bootstrap(diff),
                                           "per_seed": diff}
    return out


def table(summary: dict) -> str:
    rows = ["| arm | seeds | held-out pass rate at the end [95 % interval] | first attempt | at the start | "
            "turns per episode | wall per run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for arm, a in summary["arms"].items():
        lo, hi = a["final_ci"]
        rows.append(f"| {arm} | {a['seeds']} | {a['final']:.3f} [{lo:.3f}, {hi:.3f}] | {a['first_attempt']:.3f} | "
                    f"{a['start']:.3f} | {a['turns_mean']:.2f} | {a['wall_s']:.0f} s |")
    rows += ["", "| paired by seed | seeds | difference in final pass rate [95 % interval] |", "| --- | --- | --- |"]
    for name, p in summary["paired"].items():
        rows.append(f"| {name} | {p['seeds']} | {p['mean']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--quick", action="store_true", help="4 prompts, 4 held-out problems: the plumbing only")
    ap.add_argument("--out", type=Path, help="the results file (default: bench/episodes_code_results.json; "
                    "with --quick, episodes_code_quick.json in the temporary directory)")
    a = ap.parse_args()
    if a.out is None:
        a.out = Path(tempfile.gettempdir()) / "episodes_code_quick.json" if a.quick else RESULTS
    runs, summary = run_seeds(a.out, a.arms.split(","), a.seeds, a.steps, a.quick, run_one, summarise, "final")
    print(table(summary))


if __name__ == "__main__":
    main()

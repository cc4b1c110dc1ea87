"""Benchmark: the allocator's own time per step, and the simulator's strategy comparison.

Run: python bench/allocation.py [--repeats N]   -> bench/results/allocation.json

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from vigor_cli.allocation import STRATEGIES, make_allocator  # noqa: E402
from vigor_cli.config import AllocationConfig  # noqa: E402
from vigor_cli.study.simulate import SimSettings, simulate  # noqa: E402

SIZES = (64, 512, 4096)
LAWS = ("beta:0.3,0.3", "mix:0.3,0.2,1,1", "pareto:1.5")


def time_step(strategy: str, prompts: int, step: int, alloc, rates: dict, rng: random.Random):
    """One step; returns (allocator seconds, prompt-rounds, record serialisation seconds).

    The sampler hands out slices of a list prepared before the clock starts, so its cost
    is not counted; the same holds for the rewards, drawn between the timed calls.
    """
    ready = [f"q{i}-{step}" for i in range(prompts * 12)]
    for u in ready:
        rates[u] = rng.choice((0.0, 1.0, rng.random()))
    position = 0

    def draw(n: int) -> list[str]:
        nonlocal position
        position += n
        return ready[position - n : position]

    spent = 0.0
    t0 = time.process_time()
    alloc.start_step(step, draw)
    spent += time.process_time() - t0
    rounds = 0
    while True:
        t0 = time.process_time()
        requests = alloc.ask()
        spent += time.process_time() - t0
        if not requests:
            break
        rounds += len(requests)
        told = {r.uid: [float(rng.random() < rates[r.uid]) for _ in range(r.n)] for r in requests}
        t0 = time.process_time()
        alloc.tell(told)
        spent += time.process_time() - t0
    t0 = time.process_time()
    result = alloc.finish()
    spent += time.process_time() - t0
    t0 = time.process_time()
    json.dumps(result.record)
    return spent, rounds, time.process_time() - t0


def timing(repeats: int) -> list[dict]:
    rows = []
    for strategy in STRATEGIES:
        for prompts in SIZES:
            alloc = make_allocator(
                AllocationConfig(strategy=strategy, max_gen_batches=100), prompts, seed=0
            )
            rng = random.Random(0)
            rates: dict = {}
            samples, prompt_rounds, dumps = [], [], []
            time_step(strategy, prompts, -1, alloc, rates, rng)  # warm-up
            for step in range(repeats):
                spent, handled, dump = time_step(strategy, prompts, step, alloc, rates, rng)
                samples.append(spent)
                prompt_rounds.append(handled)
                dumps.append(dump)
            per_step = min(samples)  # least disturbed by other processes on a shared machine
            handled = statistics.mean(prompt_rounds)
            rows.append(
                {
                    "strategy": strategy,
                    "prompts": prompts,
                    "ms_per_step": round(per_step * 1e3, 3),
                    "ms_per_step_median": round(statistics.median(samples) * 1e3, 3),
                    "prompt_rounds": round(handled, 1),
                    "ms_per_512_prompt_rounds": round(per_step * 1e3 / handled * 512, 3),
                    "ms_record_json": round(statistics.median(dumps) * 1e3, 3),
                }
            )
    return rows


def comparison(steps: int) -> dict:
    out = {}
    for law in LAWS:
        out[law] = simulate(SimSettings(law=law, steps=steps, prompts=64), AllocationConfig())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per (strategy, B)")
    parser.add_argument("--steps", type=int, default=50, help="simulated steps per strategy and law")
    args = parser.parse_args()
    console = Console()

    load_at_start = os.getloadavg()[0]
    rows = timing(args.repeats)
    table = Table(title="Allocator CPU time per step (sampler and rewards outside the clock; best of the timed steps)", title_justify="left")
    for h in ("strategy", "B", "ms/step", "median", "prompt-rounds", "ms per 512 prompt-rounds", "record json ms"):
        table.add_column(h, justify="left" if h == "strategy" else "right")
    for r in rows:
        target = r["ms_per_512_prompt_rounds"]
        table.add_row(
            r["strategy"], str(r["prompts"]), f"{r['ms_per_step']:.2f}", f"{r['ms_per_step_median']:.2f}",
            f"{r['prompt_rounds']:g}",
            f"[{'green' if target < 1 else 'red'}]{target:.3f}[/]", f"{r['ms_record_json']:.2f}",
        )
    console.print(table)

    sims = comparison(args.steps)
    for law, summary in sims.items():
        t = Table(title=f"simulate, law {law}: {summary['prompts']} prompts/step, {summary['steps']} steps, "
                        f"pool mean pass rate {summary['pool_mean_pass_rate']}", title_justify="left")
        for h in ("strategy", "rollouts/step", "zero-var rollouts", "signal/step", "signal/rollout", "η measured"):
            t.add_column(h, justify="left" if h == "strategy" else "right")
        for name, s in summary["strategies"].items():
            eta = s.get("pareto", {})
            eta_text = "–"
            if eta:
                eta_text = f"{eta['eta_measured']:.2f}"
                if "eta_closed_form" in eta:
                    eta_text += f" (oracle {eta['eta_oracle_ranking']:.2f}, closed form {eta['eta_closed_form']:.2f})"
            t.add_row(name, f"{s['rollouts_per_step']:.0f}", f"{s['zero_var_rollout_share']:.1%}",
                      f"{s['signal_per_step']:.1f}", f"{s['signal_per_rollout']:.3f}", eta_text)
        console.print(t)

    result = {
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "allocator_timing": rows,
        "target_ms_per_512_prompt_rounds": 1.0,
        "load_average_at_start": load_at_start,
        "simulate": {law: s["strategies"] for law, s in sims.items()},
        "simulate_settings": {"steps": args.steps, "prompts": 64, "seed": 0, "mode": "static pass rates"},
    }
    out = Path(__file__).resolve().parent / "results" / "allocation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

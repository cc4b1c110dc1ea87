"""`vigor probe`: will rollout allocation pay on this model and task? Measure before a long run.

Samples ``--samples`` rollouts (default 8) on ``--prompts`` training prompts (default 256)
of the model and task a `vigor train` with the same flags would use (``--model``,
``--task``, ``--config``, ``--set``: the same config, engine and sampling settings),
grades them with the task's verifier, and fits the variance law
(:mod:`vigor_cli.variance_law`): pass-count histogram, share of zero-variance groups of 8,
Pareto tail index k, the paper's closed-form eta and eta^(1/3). Then it runs
`vigor simulate --learn` in process on the measured per-prompt pass rates (as a
``file:`` law) for grpo, vigor and auto, and prints their rollouts to a target there, and a
recommended strategy.

What it implies is a model, stated as such: the closed form assumes a Pareto law and no
transfer between prompts; the simulation is the toy learning model of `vigor simulate`
(each prompt learns from its own signal only, ``transfer`` 0). Neither sees how much
learning one prompt gives the others, which is what decided the tiny-model study
(BENCHMARKS.md); the recommendation rule below is written from that study.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.errors import UserError

SIM_STRATEGIES = ("grpo", "vigor", "auto")
"""Strategies simulated on the probed pass rates."""
SIM_STEPS = 300
"""Most simulated steps per strategy (each stops at the target)."""


def probe(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config, as for `vigor train`.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model.name_or_path: hub id, local dir or 'tiny'.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="task.name (see `vigor train --help`).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set sampling.temperature=0.7 (repeatable).")] = None,
    engine: Annotated[Optional[str], opt.engine()] = None,
    prompts: Annotated[int, opt.count("--prompts", help="Training prompts to probe (drawn at random, seeded).")] = 256,
    samples: Annotated[int, opt.count("--samples", low=2, help="Rollouts per prompt (at least 2: a variance needs two rollouts).")] = 8,
    seed: Annotated[Optional[int], opt.seed(help="Seeds the prompt draw, sampling and simulation (default train.seed).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the tables.")] = False,
) -> None:
    """Sample a few rollouts per prompt, fit the variance law, and say whether allocation pays."""
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.config import build_config
    from vigor_cli.report.probe_view import print_result

    if config is not None:
        from vigor_cli.user_files import regular_file

        if not config.exists() and not config.is_symlink():
            raise UserError(f"--config {config}: file not found")
        regular_file(config, "--config ")  # a folder, a FIFO or a device: said as such
    overrides = {"model.name_or_path": model, "task.name": task, "engine.kind": engine, "train.seed": seed}
    path = config if config is not None else default_config_file(model, task)
    cfg = build_config(path, overrides=overrides, sets=set_)
    counts, info = sample_pass_counts(cfg, prompts, samples, quiet=json_out)
    result = analyse(counts, samples, cfg, info)
    if json_out:
        typer.echo(json.dumps(result, indent=1))
    else:
        print_result(result)


def sample_pass_counts(cfg: Any, prompts: int, samples: int, quiet: bool = False) -> tuple[list[int], dict]:
    """Correct-out-of-``samples`` per probed prompt, with the config's engine and sampling."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vigor_cli.console import err_console
    from vigor_cli.evaluation import encode_prompt
    from vigor_cli.models import load_policy
    from vigor_cli.rollout import SamplingParams, make_engine
    from vigor_cli.tasks import get_task

    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:
        examples = task.train_examples()
        if not examples:
            raise UserError(f"task {cfg.task.name!r} has no training prompts")
        rng = random.Random(f"probe/{cfg.train.seed}")
        chosen = rng.sample(examples, min(prompts, len(examples)))
        policy, tokenizer, _ = load_policy(cfg.model)
        policy.eval()
        for p in policy.parameters():
            p.requires_grad_(False)
        eng = make_engine(cfg, policy, tokenizer, announce=lambda m: None if quiet else err_console.print(m, highlight=False))
        counts: list[int] = []
        rewards_seen: set[float] = set()
        per_chunk = max(1, 512 // samples)
        try:
            with Progress(TextColumn("probe: sample + grade"), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"),
                          TimeElapsedColumn(), console=err_console, transient=True, disable=quiet) as progress:
                bar = progress.add_task("probe", total=len(chosen))
                for c, start in enumerate(range(0, len(chosen), per_chunk)):
                    chunk = chosen[start:start + per_chunk]
                    ids = [encode_prompt(tokenizer, task.render_prompt(ex, tokenizer)) for ex in chunk]
                    params = SamplingParams(temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                                            max_new_tokens=cfg.sampling.max_new_tokens, seed=cfg.train.seed * 1_000_003 + c)
                    with torch.no_grad():
                        outs = eng.generate(ids, [samples] * len(chunk), params)
                    flat_ex = [ex for ex, group in zip(chunk, outs) for _ in group]
                    scores = task.score(flat_ex, [r.text for group in outs for r in group])
                    k = 0
                    for group in outs:
                        rs = [float(s.reward) for s in scores[k:k + len(group)]]
                        k += len(group)
                        rewards_seen.update(rs)
                        counts.append(sum(r > 0.5 for r in rs))
                    progress.advance(bar, len(chunk))
        finally:
            eng.close()
    finally:
        task.close()
    info = {"model": cfg.model.name_or_path, "task": cfg.task.name, "temperature": cfg.sampling.temperature,
            "binary_rewards": rewards_seen <= {0.0, 1.0}}
    return counts, info


def recommend(law: Any, sim: dict) -> tuple[str, str]:
    """(strategy, why) from the variance law, following the tiny-model study (BENCHMARKS.md):
    VIGOR's fixed 2/4/8/16 schedule lost to grpo in five of six regimes (a tie on the ladder), including the
    heavy-tailed low-transfer one; spreading a step's rollouts over more prompts (grpo-wide)
    won or tied in most; auto, which measures every step, goes wide on flat laws (the
    grpo-wide shape) and deep only on a heavy tail of prompts it has seen before. So auto
    is the recommendation whenever there is variance to reallocate, with the reason the law
    gives; grpo when auto is not available."""
    auto_ok = "auto" in sim.get("strategies", {})
    zero, k = law.zero_variance_share_8, _k(law.k)
    if not auto_ok:
        return "grpo", "auto is not available here; the study found no fixed reallocation that beats grpo reliably"
    if zero >= 0.5 and law.speedup >= 1.2:
        return "auto", (f"{zero:.0%} of groups of 8 are zero-variance and the tail is heavy (k {k}, eta^(1/3) "
                        f"{law.speedup:.2f}): auto concentrates on the prompts with signal once they recur; in the "
                        "study VIGOR's fixed schedule still lost to grpo on such a law")
    if zero >= 0.25:
        return "auto", (f"{zero:.0%} of groups of 8 are zero-variance, the tail is moderate (k {k}): auto goes wide "
                        "(twice the prompts, fewer rollouts each), which won or tied in the study's regimes")
    return "auto", (f"only {zero:.0%} of groups of 8 are zero-variance (k {k}): little to reallocate; auto goes wide, "
                    "the breadth that helped most in the study")


def _k(k: float) -> str:
    return "inf" if math.isinf(k) else f"{k:.2f}"


def simulate_on(counts: list[int], samples: int, cfg: Any, strategies: tuple[str, ...] = SIM_STRATEGIES) -> dict:
    """`vigor simulate --learn` on the probed pass rates (a file: law), in process."""
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.simulate import SimSettings, simulate

    names = tuple(s for s in strategies if s in STRATEGIES)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pass_rates.txt"
        path.write_text("\n".join(f"{c / samples:.6f}" for c in counts) + "\n")
        prompts = max(1, min(cfg.train.prompts_per_step, len(counts) // 2))
        settings = SimSettings(law=f"file:{path}", strategies=names, prompts=prompts, seed=cfg.train.seed,
                               learn=True, steps=SIM_STEPS)
        summary = simulate(settings, cfg.allocation)
    summary["law"] = "file:<probed pass rates>"
    base = summary["strategies"].get("grpo", {}).get("rollouts_to_target")
    for row in summary["strategies"].values():
        mine = row.get("rollouts_to_target")
        row["speedup_vs_grpo"] = round(base / mine, 3) if base and mine else None
    return summary


def analyse(counts: list[int], samples: int, cfg: Any, info: dict) -> dict:
    from vigor_cli.variance_law import census

    a = cfg.allocation
    law = census(counts, samples, rounds=a.rounds, alpha=a.alpha, gamma=a.gamma)
    sim = simulate_on(counts, samples, cfg)
    strategy, why = recommend(law, sim)
    return {
        **info,
        "prompts": len(counts),
        "samples": samples,
        "pass_counts": counts,
        "variance_law": law.to_dict(),
        "simulated": {
            "model": "vigor simulate --learn (toy: each prompt learns from its own signal, transfer 0)",
            "prompts_per_step": sim["prompts"],
            "target_mean_pass_rate": sim["learning"]["target"],
            "strategies": {n: {"rollouts_to_target": r.get("rollouts_to_target"), "speedup_vs_grpo": r.get("speedup_vs_grpo")}
                           for n, r in sim["strategies"].items()},
        },
        "recommended": strategy,
        "why": why,
    }

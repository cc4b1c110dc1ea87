"""`vigor probe`: will rollout allocation pay on this model and task? Measure before a long run.

Samples ``--samples`` rollouts (default 8) on ``--prompts`` training prompts (default 256)
of the model and task a `vigor train` with the same flags would use (``--model``,
``--task``, ``--config``, ``--set``: the same config, engine and sampling settings),
grades them with the task's verifier, and fits the variance law
(:mod:`vigor_cli.variance_law`): pass-count histogram, share of zero-variance groups of 8,
Pareto tail index k, the paper's closed-form eta and eta^(1/3). Then it runs
`vigor simulate --learn` in process on the measured per-prompt pass rates (as a
``file:`` law) for grpo, vigor and auto, and prints their rollouts to a target there, and a
recommended strategy: the fastest there, with its departures stated (:func:`recommend`).

What it implies is a model, stated as such: the closed form assumes a Pareto law and no
transfer between prompts; the simulation is the toy learning model of `vigor simulate`
(each prompt learns from its own signal only, ``transfer`` 0). Neither sees how much
learning one prompt gives the others, which is what decided the tiny-model study
(BENCHMARKS.md); where the recommendation departs from the simulation it says so, citing
that study.
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
from vigor_cli.commands.flags import TASK_FLAGS, command, task_overrides
from vigor_cli.errors import UserError

SIM_STRATEGIES = ("grpo", "vigor", "auto")
"""Strategies simulated on the probed pass rates."""
SIM_STEPS = 300
"""Most simulated steps per strategy (each stops at the target)."""


def _probe(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config, as for `vigor train`.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model.name_or_path: hub id, local dir or 'tiny'.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="task.name (see `vigor train --help`).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set sampling.temperature=0.7 (repeatable).")] = None,
    engine: Annotated[Optional[str], opt.engine()] = None,
    prompts: Annotated[int, opt.count("--prompts", help="Training prompts to probe (drawn at random, seeded).")] = 256,
    samples: Annotated[int, opt.count("--samples", low=2, help="Rollouts per prompt (at least 2: a variance needs two rollouts).")] = 8,
    seed: Annotated[Optional[int], opt.seed(help="Seeds the prompt draw, sampling and simulation (default train.seed).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the tables.")] = False,
    **own_task: Any,
) -> None:
    """Sample a few rollouts per prompt, fit the variance law, and say whether allocation pays."""
    from vigor_cli.commands.train import FLAG_OF_KEY, default_config_file, resolve_config
    from vigor_cli.settings import build_config
    from vigor_cli.report.probe_view import print_result

    overrides = {"model.name_or_path": model, "task.name": task, "engine.kind": engine, "train.seed": seed,
                 **task_overrides({**own_task, "task": task})}  # --data, --reward, ...: as vigor train
    model, task = overrides["model.name_or_path"], overrides.get("task.name")
    path = resolve_config(config) if config is not None else default_config_file(model, task)  # as vigor train
    cfg = build_config(path, overrides=overrides, sets=set_, flags=FLAG_OF_KEY)
    counts, info = sample_pass_counts(cfg, prompts, samples, quiet=json_out)
    result = analyse(counts, samples, cfg, info)
    if json_out:
        typer.echo(json.dumps(result, indent=1))
    else:
        print_result(result)


probe = command(_probe, TASK_FLAGS, at=3)
"""`vigor probe`: its options, with the task flags of `vigor train` after --task (commands/flags.py)."""
probe.__name__ = "probe"


def sample_pass_counts(cfg: Any, prompts: int, samples: int, quiet: bool = False) -> tuple[list[int], dict]:
    """Passed-out-of-``samples`` per probed prompt (reward >= task.pass_threshold), with the
    config's engine and sampling."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vigor_cli.console import err_console
    from vigor_cli.evaluation import encode_prompt
    from vigor_cli.models import load_policy
    from vigor_cli.rollout import SamplingParams, make_engine
    from vigor_cli.tasks import get_task
    from vigor_cli.tasks.base import grade

    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:
        examples = task.train_examples()
        if not examples:
            raise UserError(f"task {cfg.task.name!r} has no training prompts")
        policy, tokenizer, _ = load_policy(cfg.model)
        examples = _prompts_that_fit(cfg, task, tokenizer, examples)
        rng = random.Random(f"probe/{cfg.train.seed}")
        chosen = rng.sample(examples, min(prompts, len(examples)))
        policy.eval()
        for p in policy.parameters():
            p.requires_grad_(False)
        eng = make_engine(cfg, policy, tokenizer, announce=lambda m: None if quiet else err_console.print(m, highlight=False))
        counts: list[int] = []
        rewards_seen: set[float] = set()
        unscored = 0
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
                    flat = [r for group in outs for r in group]
                    scores = grade(task, flat_ex, [r.text for r in flat], [r.token_ids for r in flat])
                    k = 0
                    for group in outs:
                        # a reward of None (your reward function cannot score it) counts as not passed
                        rs = [None if s.reward is None else float(s.reward) for s in scores[k:k + len(group)]]
                        k += len(group)
                        unscored += rs.count(None)
                        rewards_seen.update(r for r in rs if r is not None)
                        counts.append(sum(r is not None and r >= cfg.task.pass_threshold for r in rs))
                    progress.advance(bar, len(chunk))
        finally:
            eng.close()
    finally:
        task.close()
    info = {"model": cfg.model.name_or_path, "task": cfg.task.name, "temperature": cfg.sampling.temperature,
            "binary_rewards": rewards_seen <= {0.0, 1.0}, "unscored": unscored,
            "pass_threshold": cfg.task.pass_threshold}
    return counts, info


def _prompts_that_fit(cfg: Any, task: Any, tokenizer: Any, examples: list) -> list:
    """The training prompts a run would train on (vigor_cli/train_data.fit_prompts: none longer
    than task.max_prompt_tokens, none empty), the others said in one warning line."""
    from vigor_cli.train_data import fit_prompts, left_out_line, warn

    kept, long, empty = fit_prompts(cfg.task.max_prompt_tokens, task, tokenizer, examples)
    warn(left_out_line("training prompts", len(examples), long, empty, cfg.task.max_prompt_tokens))
    if not kept:
        raise UserError(f"none of the {len(examples)} training prompts fits task.max_prompt_tokens="
                        f"{cfg.task.max_prompt_tokens}; raise it")
    return [ex for ex in examples if ex.uid in kept]


TIE = 0.05
"""Simulated rollouts to target within 5 % of each other are a tie: the simulation's seed moves
them about that much (grpo on a 245-prompt mixed law, seeds 0-3: 7,552 to 7,936)."""


def recommend(law: Any, sim: dict) -> tuple[str, str]:
    """(strategy, why): the fastest strategy of the simulation it prints (fewest rollouts to
    the target), with two stated departures. VIGOR's fixed schedule is never recommended: the
    simulation has no transfer between prompts, and in the tiny-model study (BENCHMARKS.md) the
    schedule lost to grpo in five of six regimes; the fastest of the others is. A tie between
    auto and grpo (within :data:`TIE`) goes to auto, which needed no more rollouts than grpo in
    all six regimes of the study. When no strategy reaches the target the study alone decides."""
    rows = sim.get("strategies", {})
    if "auto" not in rows:
        return "grpo", "auto is not available here; the study found no fixed reallocation that beats grpo reliably"
    cost = {n: r["rollouts_to_target"] for n, r in rows.items() if r.get("rollouts_to_target")}
    if not cost:
        return "auto", (f"no simulated strategy reached the target in {SIM_STEPS} steps, so the numbers decide "
                        f"nothing; the tiny-model study's default: {_law_reason(law)}")
    shown = ", ".join(f"{n} {cost[n]:,}" if n in cost else f"{n} not reached" for n in rows)
    numbers = f"simulated rollouts to target: {shown}"
    others = {n: c for n, c in cost.items() if n != "vigor"}
    if not others:
        return "auto", (f"{numbers}; only vigor reached the target, and its fixed schedule lost to grpo in the "
                        f"study's real training (the simulation has no transfer between prompts): {_law_reason(law)}")
    choice = min(others, key=lambda n: (others[n], n != "auto"))
    if choice == "grpo" and "auto" in cost and cost["auto"] <= cost["grpo"] * (1 + TIE):
        choice = "auto"
        verdict = (f"auto ties grpo ({cost['grpo'] / cost['auto']:.2f}x, within the {TIE:.0%} the simulation "
                   "cannot tell apart), and auto needed no more rollouts than grpo in every regime of the study")
    elif choice == "auto":
        verdict = (f"auto beats grpo ({cost['grpo'] / cost['auto']:.2f}x)" if "grpo" in cost
                   else "auto reaches it, grpo does not")
    else:
        verdict = (f"grpo beats auto (auto needs {cost['auto'] / cost['grpo']:.2f}x grpo's rollouts)" if "auto" in cost
                   else "grpo reaches it, auto does not")
    why = f"{numbers}: {verdict}"
    if choice == "auto":
        why += f"; {_law_reason(law)}"
    if "vigor" in cost and cost["vigor"] * (1 + TIE) < cost[choice]:
        why += (f"; vigor is faster in this simulation ({cost[choice] / cost['vigor']:.2f}x {choice}), but not "
                "recommended: the simulation has no transfer between prompts, and in the study's real training "
                "VIGOR's fixed schedule lost to grpo in five of six regimes")
    return choice, why


def _law_reason(law: Any) -> str:
    """What auto does on the measured law (the study's reading of it)."""
    zero, k = law.zero_variance_share_8, _k(law.k)
    if zero >= 0.5 and law.speedup >= 1.2:
        return (f"{zero:.0%} of groups of 8 are zero-variance and the tail is heavy (k {k}, eta^(1/3) "
                f"{law.speedup:.2f}): auto concentrates on the prompts with signal once they recur")
    if zero >= 0.25:
        return (f"{zero:.0%} of groups of 8 are zero-variance, the tail is moderate (k {k}): auto goes wide "
                "(twice the prompts, fewer rollouts each), which won or tied in the study's regimes")
    return (f"only {zero:.0%} of groups of 8 are zero-variance (k {k}): little to reallocate; auto goes wide, "
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

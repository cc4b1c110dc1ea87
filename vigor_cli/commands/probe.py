"""`vigor probe`: will rollout allocation pay on this model and task? Measure before a long run.

Details: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
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
TIE = 0.05
"""Strategies whose simulated rollouts to target are within 5 % of each other tie: the
simulation cannot tell them apart (one simulation's count moves in whole steps, 6-8 %)."""
SIM_REPEATS = 8
"""Simulations per strategy, each seeded from the probe's seed and its index, each on its own
resample of the probed prompts: the mean of their interpolated rollouts to target, and the
95 % interval in which another probe's speed-up would fall, decide, so the answer hangs
neither on one simulation's luck nor on which prompts the probe drew."""
FIT_STEPS = 4
"""grpo steps of the short real run the transfer is fitted to (a few minutes on the tiny model)."""
VERDICT_STEPS = 30
"""Most steps of the run the predicted verdicts simulate (the study's longest runs): train.steps
when shorter."""
STUDY = {"regimes": 9, "vigor_losses": 6, "vigor_wins": 0, "auto_losses": 0}
"""What the tiny-model study in BENCHMARKS.md found (mean held-out accuracy against grpo, 95 %
paired intervals): the numbers the recommendation quotes (a test holds them to the committed
results, bench/efficiency_results.json)."""


def _probe(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config, as for `vigor train`.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model.name_or_path: hub id, local dir or 'tiny'.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="task.name (see `vigor train --help`).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set sampling.temperature=0.7 (repeatable).")] = None,
    engine: Annotated[Optional[str], opt.engine()] = None,
    prompts: Annotated[int, opt.count("--prompts", help="Training prompts to probe (drawn at random, seeded).")] = 256,
    samples: Annotated[int, opt.count("--samples", low=2, help="Rollouts per prompt (at least 2: a variance needs two rollouts).")] = 8,
    seed: Annotated[Optional[int], opt.seed(help="Seeds the prompt draw, sampling and simulation (default train.seed).")] = None,
    simulations: Annotated[int, opt.count("--simulations", help="Simulations of each strategy on the probed pass rates, each with its own seed: more give a steadier answer and take longer.")] = SIM_REPEATS,
    fit_steps: Annotated[int, opt.count("--fit-steps", low=0, help="grpo steps of the short real run the transfer between prompts is fitted to (0: no run; the transfer is then 0 unless --transfer gives it).")] = FIT_STEPS,
    transfer: Annotated[Optional[float], opt.number("--transfer", low=0, high=1, integer=False, help="The simulation's transfer between prompts (its shared step), given instead of fitted: no short run.")] = None,
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
    counts, info = sample_pass_counts(cfg, prompts, samples, quiet=json_out,
                                      fit_steps=0 if transfer is not None else fit_steps)
    result = analyse(counts, samples, cfg, info, simulations, transfer=transfer)
    if json_out:
        typer.echo(json.dumps(result, indent=1))
    else:
        print_result(result)


probe = command(_probe, TASK_FLAGS, at=3)
"""`vigor probe`: its options, with the task flags of `vigor train` after --task (commands/flags.py)."""
probe.__name__ = "probe"


def sample_pass_counts(cfg: Any, prompts: int, samples: int, quiet: bool = False,
                       fit_steps: int = 0) -> tuple[list[int], dict]:
    """Passed-out-of-``samples`` per probed prompt (reward >= task.pass_threshold), with the
    config's engine and sampling; with ``fit_steps``, the short real run's held-out gain too
    (``info['short_run']``, commands/probe_fit.py)."""
    from vigor_cli.console import err_console
    from vigor_cli.model.loading import load_policy
    from vigor_cli.rollout import make_engine
    from vigor_cli.tasks import get_task

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
        seen: dict = {"rewards": set(), "unscored": 0}
        try:
            counts = count_passes(cfg, task, tokenizer, eng, chosen, samples, quiet, seen)
        finally:
            eng.close()
        held = _held_out(cfg, task)
    finally:
        task.close()
    del policy, eng  # before the short run loads the model again (one copy on a GPU at a time)
    info = {"model": cfg.model.name_or_path, "task": cfg.task.name, "temperature": cfg.sampling.temperature,
            "binary_rewards": seen["rewards"] <= {0.0, 1.0}, "unscored": seen["unscored"],
            "pass_threshold": cfg.task.pass_threshold, "train_prompts": len(examples), **held}
    if fit_steps:
        from vigor_cli.commands.probe_fit import short_run

        try:
            info["short_run"] = short_run(cfg, fit_steps, chosen, counts, samples, count_passes, quiet,
                                              train_prompts=len(examples))
        except UserError as e:  # a config `vigor train` refuses: the probe still answers, without transfer
            info["short_run"] = {"error": str(e), "steps": fit_steps}
    return counts, info


def count_passes(cfg: Any, task: Any, tokenizer: Any, eng: Any, chosen: list, samples: int, quiet: bool = False,
                 seen: dict | None = None) -> list[int]:
    """Passed-out-of-``samples`` per example of ``chosen`` on engine ``eng``, in seeded chunks
    (the same seeds every call: a second call after training samples with common numbers)."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vigor_cli.console import err_console
    from vigor_cli.rollout import SamplingParams
    from vigor_cli.task_base import grade
    from vigor_cli.tasks.prompts import encode_prompt

    seen = seen if seen is not None else {"rewards": set(), "unscored": 0}
    counts: list[int] = []
    per_chunk = max(1, 512 // samples)
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
                seen["unscored"] += rs.count(None)
                seen["rewards"].update(r for r in rs if r is not None)
                counts.append(sum(r is not None and r >= cfg.task.pass_threshold for r in rs))
            progress.advance(bar, len(chunk))
    return counts


def _held_out(cfg: Any, task: Any) -> dict:
    """The held-out set a run evaluates: its size x samples per problem, and whether it is the
    training set itself (tiny-facts): what the predicted verdicts' metric is and how noisy."""
    try:
        held = task.eval_examples()
    except (UserError, ValueError, OSError):
        held = []
    train = {ex.uid for ex in task.train_examples()}
    return {"eval_prompts": len(held), "eval_samples": cfg.train.eval_samples,
            "eval_on_training_prompts": bool(held) and all(ex.uid in train for ex in held)}


def _prompts_that_fit(cfg: Any, task: Any, tokenizer: Any, examples: list) -> list:
    """The training prompts a run would train on (vigor_cli/train_data.fit_prompts: none longer
    than task.max_prompt_tokens, none empty), the others said in one warning line."""
    from vigor_cli.evaluate.sets import keep_fitting

    kept, _ = keep_fitting(cfg.task.max_prompt_tokens, task, tokenizer, examples, "training prompts")
    if not kept:
        raise UserError(f"none of the {len(examples)} training prompts fits task.max_prompt_tokens="
                        f"{cfg.task.max_prompt_tokens}; raise it")
    return kept


def _study_vigor() -> str:
    return (f"in the tiny-model study's real training VIGOR's fixed schedule lost to grpo in {STUDY['vigor_losses']} "
            f"of {STUDY['regimes']} regimes and beat it in {STUDY['vigor_wins'] or 'none'}")


def _study_auto() -> str:
    return f"auto lost to grpo in {STUDY['auto_losses']} of the study's {STUDY['regimes']} regimes"


def _x(s: float) -> str:
    return "inf" if math.isinf(s) else f"{s:.2f}x"


def recommend(law: Any, sim: dict) -> tuple[str, str]:
    """(strategy or 'tie', why), from the simulation's repeats (:func:`simulate_on`): auto
    against grpo by the 95 % interval of auto's speed-up (where another probe's estimate
    would fall): 'auto' when all of it is above
    1 + :data:`TIE`, 'grpo' when all of it is below 1 / (1 + TIE), else 'tie' (auto, vigor's
    default, is the one to run then). VIGOR's fixed schedule is never recommended: the
    rollouts to target on the training prompts are not what the study judged, and in its real
    training the schedule lost to grpo (the predicted verdicts, :func:`predict`, hold the held-out
    metric the study judged). When no strategy reaches the target in most repeats the study alone decides."""
    rows = sim.get("strategies", {})
    if "auto" not in rows:
        return "grpo", "auto is not available here; the study found no fixed reallocation that beats grpo reliably"
    repeats = sim.get("repeats", 1)
    reached = {n: r for n, r in rows.items() if r.get("reached", 0) * 2 > repeats}
    if not reached:
        return "auto", (f"no simulated strategy reached the target in {SIM_STEPS} steps, so the numbers decide "
                        f"nothing; the tiny-model study's default: {_law_reason(law)}")
    shown = ", ".join(f"{n} {rows[n]['rollouts_to_target']:,}" if n in reached else f"{n} not reached" for n in rows)
    numbers = f"simulated rollouts to target (mean of {repeats} simulations): {shown}"
    auto, grpo = reached.get("auto"), reached.get("grpo")
    if auto is None or grpo is None:
        if auto is None and grpo is None:
            return "auto", (f"{numbers}; only vigor reached the target, and its fixed schedule lost to grpo in the "
                            f"study's real training: {_law_reason(law)}")
        choice = "auto" if grpo is None else "grpo"
        verdict = f"{choice} reaches it, {'grpo' if choice == 'auto' else 'auto'} does not"
    else:
        speed, (lo, hi) = auto["speedup_vs_grpo"], auto["speedup_ci"]
        interval = f"{_x(speed)} [{_x(lo)}, {_x(hi)}]"
        if lo > 1 + TIE:
            choice, verdict = "auto", f"auto beats grpo ({interval} grpo's speed)"
        elif hi < 1 / (1 + TIE):
            choice, verdict = "grpo", f"grpo beats auto (auto's speed-up {interval}, below the {TIE:.0%} tie band)"
        else:
            choice = "tie"
            verdict = (f"auto and grpo tie (auto's speed-up {interval} is not beyond the {TIE:.0%} the simulation cannot "
                       f"tell apart): run auto, vigor's default; {_study_auto()}")
    why = f"{numbers}: {verdict}"
    if choice == "auto":
        why += f"; {_law_reason(law)}"
    v, mine = reached.get("vigor"), reached.get("auto" if choice == "tie" else choice)
    if v is not None and mine is not None and v["rollouts_to_target"] * (1 + TIE) < mine["rollouts_to_target"]:
        ratio = mine["rollouts_to_target"] / v["rollouts_to_target"]
        why += (f"; vigor is faster in this simulation ({ratio:.2f}x {mine['name']}), but not recommended: the "
                f"training prompts' rollouts to target are not the held-out accuracy the study judged, and {_study_vigor()}")
    return choice, why


def _law_reason(law: Any) -> str:
    """What auto does on the measured law (the study's reading of it)."""
    zero, k = law.zero_variance_share_8, _k(law.k)
    if zero >= 0.5 and law.speedup >= 1.2:
        return (f"{zero:.0%} of groups of 8 are zero-variance and the tail is heavy (k {k}, eta^(1/3) "
                f"{law.speedup:.2f}): auto concentrates on the prompts with signal once they recur")
    if zero >= 0.25:
        return (f"{zero:.0%} of groups of 8 are zero-variance, the tail is moderate (k {k}): auto goes wide "
                "(twice the prompts, fewer rollouts each), as in the study's regimes")
    return (f"only {zero:.0%} of groups of 8 are zero-variance (k {k}): little to reallocate; auto goes wide, "
            "the breadth that helped most in the study")


def _k(k: float) -> str:
    return "inf" if math.isinf(k) else f"{k:.2f}"


def simulate_on(counts: list[int], samples: int, cfg: Any, strategies: tuple[str, ...] = SIM_STRATEGIES,
                repeats: int = SIM_REPEATS, transfer: float = 0.0) -> dict:
    """`vigor simulate --learn` on the probed pass rates (a file: law), in process, ``repeats``
    times, each with its own seed and its own draw of the probed prompts (with replacement:
    the interval then holds what another probe's prompts would say too, not only another
    simulation's luck): per strategy the mean of its interpolated rollouts to target over the
    repeats that reached it, how many did, and its speed-up over grpo (geometric mean over
    the repeats both reached) with the 95 % interval in which another probe's estimate would
    fall (a t prediction interval over the repeats, each a bootstrap replicate)."""
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.study.intervals import prediction_interval
    from vigor_cli.run.seeding import derive_seed
    from vigor_cli.study.simulate import SimSettings, simulate

    names = tuple(s for s in strategies if s in STRATEGIES)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pass_rates.txt"
        prompts = max(1, min(cfg.train.prompts_per_step, len(counts) // 2))
        for r in range(repeats):
            drawn = random.Random(derive_seed(cfg.train.seed, "probe-prompts", r)).choices(counts, k=len(counts))
            path.write_text("\n".join(f"{c / samples:.6f}" for c in (drawn if repeats > 1 else counts)) + "\n")
            settings = SimSettings(law=f"file:{path}", strategies=names, prompts=prompts, learn=True, steps=SIM_STEPS,
                                   seed=derive_seed(cfg.train.seed, "probe-simulation", r), transfer=transfer)
            runs.append(simulate(settings, cfg.allocation))
    summary = {**runs[0], "law": "file:<probed pass rates>", "repeats": repeats, "seed": cfg.train.seed}
    crossings = {n: [run["strategies"][n]["rollouts_to_target_interpolated"] for run in runs] for n in names}
    base = crossings.get("grpo", [])
    for n in names:
        got = [c for c in crossings[n] if c is not None]
        row = {**runs[0]["strategies"][n], "name": n, "reached": len(got), "per_repeat": crossings[n],
               "rollouts_to_target": round(sum(got) / len(got)) if got else None}
        pairs = [math.log(b / c) for b, c in zip(base, crossings[n]) if b and c]
        if pairs:
            mean, lo, hi = prediction_interval(pairs) if len(pairs) > 1 else (pairs[0], pairs[0], pairs[0])
            row["speedup_vs_grpo"], row["speedup_ci"] = round(math.exp(mean), 3), [round(math.exp(lo), 3), round(math.exp(hi), 3)]
        else:
            row["speedup_vs_grpo"], row["speedup_ci"] = None, None
        summary["strategies"][n] = row
    return summary


def analyse(counts: list[int], samples: int, cfg: Any, info: dict, simulations: int = SIM_REPEATS,
            transfer: float | None = None) -> dict:
    from vigor_cli.study.variance_law import census

    a = cfg.allocation
    law = census(counts, samples, rounds=a.rounds, alpha=a.alpha, gamma=a.gamma)
    fit, shape = fit_of(counts, samples, cfg, info, transfer)
    sim = simulate_on(counts, samples, cfg, repeats=simulations, transfer=fit.value)
    verdicts = None
    if fit.value > 0:  # with transfer the held-out verdicts decide: the measure the study judged
        verdicts = predict(counts, samples, cfg, shape, fit.value, simulations)
        strategy, why = recommend_by_verdicts(verdicts, shape)
    else:  # without, a held-out pass rate never moves (every verdict a tie): rollouts to target decide
        strategy, why = recommend(law, sim)
    return {
        **info,
        "prompts": len(counts),
        "samples": samples,
        "pass_counts": counts,
        "variance_law": law.to_dict(),
        "transfer": fit.to_dict(),
        "simulated": {
            "model": f"vigor simulate --learn (toy: each prompt learns from its own signal, every prompt from the "
                     f"step's breadth x transfer {fit.value:.4g})",
            "prompts_per_step": sim["prompts"],
            "target_mean_pass_rate": sim["learning"]["target"],
            "repeats": sim["repeats"],
            "strategies": {n: {k: r.get(k) for k in ("rollouts_to_target", "reached", "speedup_vs_grpo", "speedup_ci")}
                           for n, r in sim["strategies"].items()},
        },
        "verdicts": None if verdicts is None else {"steps": shape.steps, "prompts_per_step": shape.prompts, "pool": shape.pool,
                     "eval_steps": shape.eval_steps, "eval_se": round(shape.eval_se, 4),
                     "metric": "mean pass rate of the training prompts" if shape.eval_on_pool
                     else "mean held-out pass rate over the run's evaluations",
                     "strategies": verdicts},
        "recommended": strategy,
        "why": why,
    }


def run_shape(counts: list[int], samples: int, cfg: Any, info: dict) -> Any:
    """The run the verdicts are about: the config's batch and evaluation cadence over its first
    VERDICT_STEPS steps, its training set as the pool, its held-out set's sampling noise."""
    from vigor_cli.study.transfer import RunShape

    t = cfg.train
    steps = max(1, min(t.steps, VERDICT_STEPS))
    every = t.eval_every or max(1, steps // 5)
    start = sum(counts) / (samples * len(counts))
    draws = max(1, info.get("eval_prompts") or len(counts)) * max(1, info.get("eval_samples") or 1)
    pool = max(info.get("train_prompts") or len(counts), t.prompts_per_step * 2)
    return RunShape(prompts=t.prompts_per_step, steps=steps, pool=pool,
                    eval_steps=[0, *range(every, steps + 1, every)] if every <= steps else [0, steps],
                    eval_se=math.sqrt(max(start * (1 - start), 1e-4) / draws), held_out_start=start,
                    eval_on_pool=bool(info.get("eval_on_training_prompts")))


def fit_of(counts: list[int], samples: int, cfg: Any, info: dict, transfer: float | None) -> tuple[Any, Any]:
    """The transfer the simulation uses: given (--transfer), fitted to the short real run, or
    none (no run); and the run shape it was fitted on."""
    from vigor_cli.study.transfer import fit_transfer, given

    shape = run_shape(counts, samples, cfg, info)
    run = info.get("short_run")
    if transfer is not None:
        return given(transfer), shape
    if not run or not run.get("held_out_prompts"):
        why = ("no short run (--fit-steps 0)" if not run else f"the short run could not run ({run['error']})"
               if "error" in run else "the short run sampled every probed prompt")
        return given(0.0, source=f"none: {why}; transfer 0"), shape
    rates = [c / samples for c in counts]
    source = (f"short real run: {run['steps']} grpo steps, held-out pass rate of the {run['held_out_prompts']} "
              f"probed prompts it did not sample {run['before']:.3f} -> {run['after']:.3f}")
    fit_shape = dataclasses.replace(shape, held_out_start=run["before"], eval_on_pool=False)
    return fit_transfer(cfg.allocation, fit_shape, rates, [run["steps"]], {cfg.allocation.group_size: [run["gain"]]},
                        source, seed=cfg.train.seed, se={cfg.allocation.group_size: run["se"]}), shape


def predict(counts: list[int], samples: int, cfg: Any, shape: Any, transfer: float, repeats: int) -> dict:
    """Each simulated strategy's predicted verdict against grpo (study/transfer.py)."""
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.study.transfer import predict_verdicts

    names = tuple(s for s in SIM_STRATEGIES if s in STRATEGIES)
    return predict_verdicts(cfg.allocation, shape, [c / samples for c in counts], transfer, repeats,
                            seed=cfg.train.seed, strategies=names)


def recommend_by_verdicts(verdicts: dict, shape: Any) -> tuple[str, str]:
    """(strategy or 'tie', why) from the predicted verdicts: 'auto' when auto is ahead of grpo,
    'grpo' when it is behind, 'tie' otherwise (run auto, vigor's default). A vigor ahead of
    grpo while auto is not is said, not recommended: VIGOR's schedule stays for research."""
    auto = verdicts.get("auto", {}).get("verdict")
    choice = {"ahead": "auto", "behind": "grpo"}.get(auto, "tie")
    why = verdict_text(verdicts, shape)
    if choice == "tie":
        why += "; auto and grpo tie: run auto, vigor's default"
    if verdicts.get("vigor", {}).get("verdict") == "ahead" and auto != "ahead":
        why += "; vigor is ahead in this prediction: measure it on your model before relying on it"
    return choice, why


def verdict_text(verdicts: dict, shape: Any) -> str:
    """One clause: each strategy's predicted verdict against grpo with its interval."""
    parts = [f"{n} {v['verdict']} grpo ({v['delta'] * 100:+.1f} points [{v['interval'][0] * 100:+.1f}, "
             f"{v['interval'][1] * 100:+.1f}])" for n, v in verdicts.items() if n != "grpo"]
    return f"predicted over {shape.steps} steps with transfer: " + ", ".join(parts)

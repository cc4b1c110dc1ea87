"""`vigor eval` on a task's own held-out sets: what a run evaluated, or a user's set given by
the task flags of `vigor train`, on any model (a run's checkpoint, a hub id, a local or
exported folder, a base with a LoRA adapter).

Details: docs/modules.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vigor_cli.errors import UserError


@dataclass
class Target:
    """A model and the task settings to evaluate it with."""

    cfg: Any
    """The RunConfig: model (name, LoRA), task, sampling and evaluation settings, engine."""
    load_dir: str | None
    """A checkpoint or adapter folder loaded on top of ``cfg.model`` (None: the model alone)."""
    step: int
    """The step whose evaluation seed is used (a run's checkpoint, an export's step; else 0)."""
    desc: dict
    """What was evaluated, for the results file."""
    settings_from: str
    """Where the task and sampling settings come from, in words."""
    tokenizer_dir: str | None = None
    """An exported adapter's own tokenizer (it holds the run's chat template)."""
    from_run: bool = False
    """The settings are a run's (its checkpoint, or an export's record): its train.eval_limit
    applies unless --limit is given."""
    env: Any = None
    """task.env's environment (made with the sets, before the model): each sample is an episode."""


def _absolute_path(value: str) -> str:
    """``PATH`` or ``PATH:SPLIT`` with PATH made absolute when it exists here (a hub id, or a
    path that is not here, is kept as typed)."""
    path = Path(value).expanduser()
    if path.exists():
        return os.path.abspath(path)
    head, sep, split = value.rpartition(":")
    if sep and head and Path(head).expanduser().exists():
        return f"{os.path.abspath(Path(head).expanduser())}:{split}"
    return value


def _absolute(overrides: dict[str, Any]) -> dict[str, Any]:
    """The task flags' paths made absolute (--data, --eval-data, a reward's FILE.py), so they
    mean what they meant where the command was typed after the move to a run's launch folder."""
    from vigor_cli.user.rewards import is_file_spec

    out = dict(overrides)
    for key in ("task.data", "task.eval_data"):
        if out.get(key):
            out[key] = _absolute_path(str(out[key]))
    if out.get("task.rewards"):
        out["task.rewards"] = [f"{_absolute_path(s.rpartition(':')[0])}:{s.rpartition(':')[2]}" if is_file_spec(s)
                               else s for s in out["task.rewards"]]
    return out


def the_set(overrides: dict[str, Any], alone: bool = True) -> dict[str, Any]:
    """The task flags of `vigor eval`: ``--eval-data`` is the set evaluated, else every row of
    ``--data`` (a DatasetDict's test split); with ``alone`` (no run's config to keep), a held-out
    set alone is enough (it is task.data too)."""
    keys = dict(overrides)
    if keys.get("task.data") and not keys.get("task.eval_data"):
        keys["task.eval_data"] = keys["task.data"]
    if alone and keys.get("task.eval_data") and not keys.get("task.data"):
        keys["task.data"] = keys["task.eval_data"]
        keys["task.name"] = keys.get("task.name") or "custom"
    return keys


def weights_kept(keys: dict[str, Any], tree: dict) -> dict[str, Any]:
    """``--reward`` without ``--reward-weights`` on a run's (or an export's) settings: the run's
    weights are kept when the rewards are the run's own (the same functions, in order), and
    dropped (every weight 1, TRL's default) for other rewards."""
    rewards, before = keys.get("task.rewards"), (tree.get("task") or {}).get("rewards") or []
    if rewards is None or keys.get("task.reward_weights") is not None:
        return keys

    def same(spec: str) -> str:
        head, sep, func = spec.rpartition(":")
        return f"{os.path.realpath(head)}:{func}" if sep and head.endswith(".py") else spec

    if [same(r) for r in rewards] != [same(r) for r in before]:
        keys = {**keys, "task.reward_weights": []}
    return keys


def run_target(run: Path, checkpoint: str | None, overrides: dict[str, Any], sets: list[str] | None,
               flags: dict[str, str], warn: Callable[[str], Any]) -> tuple[Target, Any]:
    """A run's checkpoint with the run's own config (the task flags and ``--set`` change it):
    the target, and the run (whose launch folder the evaluation works in)."""
    from vigor_cli.export.card import absolute_from, map_paths
    from vigor_cli.run.directory import RunDir, check_run_path, read_config
    from vigor_cli.settings import build_config

    check_run_path(run, "--run")
    run = Path(os.path.abspath(run))
    rundir = RunDir(run)
    ckpt = rundir.store.pick(checkpoint, warn)
    tree = read_config(run)
    keys = _absolute(the_set(overrides, alone=False))
    keys = weights_kept(keys, map_paths(tree, absolute_from(rundir.launch_dir() or Path.cwd())))
    try:
        cfg = build_config(tree=tree, overrides=keys, sets=sets, flags=flags)
    except ValueError as e:  # pydantic's message names the key
        raise UserError(f"--run {run}: {str(e).splitlines()[0]}") from None
    changed = [k for k, v in keys.items() if v is not None] + [s.split("=", 1)[0] for s in sets or []]
    source = f"the run's own settings, {run.name}/config.yaml" + (f"; changed: {', '.join(changed)}" if changed else "")
    desc = {"run": str(run), "checkpoint": ckpt.name, "name_or_path": cfg.model.name_or_path}
    return Target(cfg, str(ckpt), int(ckpt.name.removeprefix("step-")), desc, source, from_run=True), rundir


def model_target(model: str, adapter: Path | None, base: str | None, overrides: dict[str, Any],
                 sets: list[str] | None, flags: dict[str, str]) -> Target:
    """A model given by name: a hub id, ``tiny``, a local or exported folder (an adapter folder
    loads on its base), or a base with ``--adapter``. An exported folder's vigor_run.json gives
    the run's settings; otherwise the settings `vigor train` would start from for that model."""
    from vigor_cli.package_data import DEFAULT_CONFIG
    from vigor_cli.export.card import absolute_from, map_paths, read_run_record
    from vigor_cli.settings import build_config

    folder = Path(model).expanduser()
    if adapter is None and folder.is_dir() and (folder / "adapter_config.json").is_file():
        adapter, model = folder, adapter_base(folder, base)  # an adapter folder: it names its base
    elif base is not None:
        raise UserError("--base names the base of an adapter folder given as MODEL; with --adapter, MODEL is the base")
    if adapter is not None and not (adapter / "adapter_config.json").is_file():
        raise UserError(f"--adapter {adapter}: not a PEFT adapter directory (no adapter_config.json)")
    record = read_run_record(adapter if adapter is not None else folder) if (adapter or folder.is_dir()) else None
    keys = the_set(overrides)
    keys.update({"model.name_or_path": model, "model.lora.enabled": adapter is not None})
    if record is not None:
        keys["model.load_in_4bit"] = record["config"]["model"]["load_in_4bit"] and adapter is not None
        tree = map_paths(record["config"], absolute_from(adapter if adapter is not None else folder))
        cfg = build_config(tree=tree, overrides=weights_kept(_absolute(keys), tree), sets=sets, flags=flags)
        source = f"the run's settings, from {(adapter or folder) / 'vigor_run.json'}"
    else:
        path = DEFAULT_CONFIG if model == "tiny" else None  # as `vigor train --data` starts for this model
        cfg = build_config(path, overrides=keys, sets=sets, flags=flags)
        source = f"{path.name}'s settings for the tiny model" if path else "the built-in defaults"
    tokenizer_dir = str(adapter) if adapter is not None and (adapter / "tokenizer_config.json").is_file() else None
    desc = {"name_or_path": model, "adapter": str(adapter) if adapter else None}
    return Target(cfg, str(adapter) if adapter else None, int(record["step"]) if record else 0, desc, source,
                  tokenizer_dir, from_run=record is not None)


def adapter_base(folder: Path, base: str | None) -> str:
    """The base of an adapter folder: ``--base``, else what its adapter_config.json names
    (``tiny``; a path, relative to the folder when it is; a hub id); one line saying how to
    give it when it is not here."""
    import json

    from vigor_cli.model.loading import resolve_model_path

    if base is not None:
        return base
    try:
        named = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise UserError(f"{folder / 'adapter_config.json'}: cannot read ({e})") from None
    if not named:
        raise UserError(f"{folder}: a LoRA adapter whose adapter_config.json names no base; give it with --base PATH")
    if named == "tiny":
        return "tiny"
    for candidate in (folder / named, Path(named).expanduser()):
        if candidate.is_dir():
            return str(candidate)
    looks_local = named.startswith((".", "/", "~")) or named.count("/") != 1
    if looks_local:
        raise UserError(f"{folder}: a LoRA adapter whose base '{named}' (adapter_config.json) is not here; "
                        "give the base with --base PATH (or a hub id)")
    try:
        resolve_model_path(named, to_load=True)
    except UserError as e:
        raise UserError(f"{folder}: a LoRA adapter on '{named}', which cannot be had here ({e}); give the base "
                        "with --base PATH") from None
    return named


def describe(target: Target, sets: dict[str, list], sampling: dict, task: Any = None) -> list[str]:
    """What is about to be evaluated, in a few lines: the model, the task, the sets, the sampling."""
    t = target.cfg.task
    what = target.desc.get("run") and f"run {target.desc['run']} ({target.desc['checkpoint']})"
    what = what or target.desc["name_or_path"] + (f" with adapter {target.desc['adapter']}" if target.desc.get("adapter") else "")
    lines = [f"evaluating {what} on task {t.name} ({target.settings_from})"]
    if t.name == "custom":
        weights = t.reward_weights or [1.0] * len(t.rewards)
        parts = [f"rewards {', '.join(f'{r} x{w:g}' for r, w in zip(t.rewards, weights))}"]
        if t.system_prompt is not None:
            parts.append(f"system prompt {t.system_prompt!r}")
        if t.prompt_template:
            parts.append(f"prompt template {t.prompt_template!r}")
        parts.append(f"a sample passes at reward >= {t.pass_threshold:g}")
        lines.append("  " + "; ".join(parts))
    if target.env is not None:
        lines.append(f"  environment {target.env.describe()}; each sample is an episode of at most {t.max_turns} "
                     f"model turns and {target.cfg.completion_tokens()} tokens")
    cut = " (the run's train.eval_limit; --limit changes it)" if target.from_run and target.cfg.train.eval_limit else ""
    table = getattr(task, "tables", {}).get("eval")
    for name, exs in sets.items():
        source = f" of {table.source}" + (f" (split {table.split})" if table.split else "") if table is not None else ""
        lines.append(f"  set {name}: {len(exs)} problems{source}{cut if len(exs) == target.cfg.train.eval_limit else ''}")
    lines.append(f"  n={sampling['n']}, temperature {sampling['temperature']:g}, top_p {sampling['top_p']:g}, "
                 f"max_new_tokens {sampling['max_new_tokens']}, seed {sampling['seed']}")
    return lines


def sampling_of(target: Target, n: int | None, temperature: float | None, top_p: float | None,
                max_new_tokens: int | None, seed: int | None) -> dict:
    """The flags, or the target's evaluation settings (train.eval_samples, eval_temperature,
    sampling.top_p and max_new_tokens, train.seed) where a flag is not given."""
    cfg = target.cfg
    return {
        "n": n if n is not None else cfg.train.eval_samples,
        "temperature": temperature if temperature is not None else cfg.train.eval_temperature,
        "top_p": top_p if top_p is not None else cfg.sampling.top_p,
        "max_new_tokens": max_new_tokens if max_new_tokens is not None else cfg.sampling.max_new_tokens,
        "seed": seed if seed is not None else cfg.train.seed,
    }


def load_sets(target: Target, limit: int | None) -> tuple[Any, dict[str, list]]:
    """The task and its held-out sets (read before the model, so bad data fails first)."""
    from vigor_cli.tasks import get_task
    from vigor_cli.evaluate.sets import task_sets

    cfg = target.cfg
    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:
        sets = task_sets(cfg, task, limit if limit is not None else cfg.train.eval_limit if target.from_run else None)
        for name, exs in sets.items():
            if not exs:
                raise UserError(f"set {name}: no problems to evaluate")
        sets = fit_sets(target, task, sets)
    except BaseException:
        close(target, task)
        raise
    return task, sets


def close(target: Target, task: Any) -> None:
    """Close the environment (if any) and the task's reward workers."""
    try:
        if target.env is not None:
            target.env.close()
    finally:
        task.close()


def fit_sets(target: Target, task: Any, sets: dict[str, list]) -> dict[str, list]:
    """Each set without the prompts the model cannot take, as a run's evaluation leaves them
    out (vigor_cli/train_data.fit_prompts: longer than task.max_prompt_tokens, or no token;
    under task.env, rendered with the environment's tools as the model sees them): `vigor
    eval --run` scores the prompts the run scored. One warning line per set that loses some;
    a set that loses all is refused. The environment is made here (``target.env``)."""
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.evaluate.sets import make_env
    from vigor_cli.evaluate.sets import keep_fitting

    cfg = target.cfg
    tokenizer = load_tokenizer(cfg.model, target.tokenizer_dir)
    target.env = make_env(cfg, task, tokenizer)  # a bad environment file fails here, before the model
    limit = cfg.task.max_prompt_tokens
    fitted: dict[str, list] = {}
    for name, exs in sets.items():
        fitted[name], _ = keep_fitting(limit, task, tokenizer, exs, f"held-out prompts of set {name}", env=target.env)
        if not fitted[name]:
            raise UserError(f"set {name}: none of its {len(exs)} prompts fit task.max_prompt_tokens={limit} "
                            "(raise it with --set task.max_prompt_tokens=N)")
    return fitted


def evaluate_target(target: Target, task: Any, sets: dict[str, list], sampling: dict,
                    announce: Callable[[str], Any]) -> Any:
    """Load the model (and adapter), evaluate every set as training does; the HeldOut."""
    import torch

    from vigor_cli.run import seeding
    from vigor_cli.evaluate.evaluation import evaluate_sets, held_out_sampling
    from vigor_cli.model.loading import load_policy, load_tokenizer
    from vigor_cli.user.reward_log import trainer_state
    from vigor_cli.rollout import make_engine

    cfg = target.cfg
    policy, tokenizer, _ = load_policy(cfg.model, target.load_dir)
    if target.tokenizer_dir is not None:
        tokenizer = load_tokenizer(cfg.model, target.tokenizer_dir)
    policy.eval()
    for p in policy.parameters():
        p.requires_grad_(False)
    engine = make_engine(cfg, policy, tokenizer, announce=announce)
    task.trainer_state = trainer_state(target.step, cfg.train.steps)
    params = held_out_sampling(sampling["seed"], target.step, sampling["temperature"], sampling["top_p"],
                               sampling["max_new_tokens"])
    episodes = None
    if target.env is not None:  # the run's episodes: its environment, max_turns and episode budget
        from vigor_cli.episodes.loop import make_runner
        from vigor_cli.rollout.weights import stop_token_ids

        episodes = make_runner(cfg, task, tokenizer, engine, target.env, stop_token_ids(policy, tokenizer))
    seeding.seed_step(sampling["seed"], target.step, "eval")  # a reward's draws, as the run's evaluation
    try:
        with torch.no_grad():
            return evaluate_sets(engine, task, tokenizer, sets, sampling["n"], params, target.step,
                                 pass_threshold=cfg.task.pass_threshold, episodes=episodes)
    finally:
        engine.close()


def results_of(held: Any, target: Target, sampling: dict, logged: dict[str, float]) -> dict:
    """The results file: the evaluation's sets as training writes them (eval/step-N.json),
    with what was evaluated, how, and the task's settings."""
    from vigor_cli.report.eval_results import SCHEMA
    from vigor_cli.report.metrics import overall

    data = held.to_json()
    return {"schema": SCHEMA, "model": target.desc, "sampling": sampling, "settings_from": target.settings_from,
            "task": target.cfg.task.model_dump(mode="json"), "step": data["step"], "accuracy": data["accuracy"],
            "sets": data["sets"], "overall": overall({k: s["metrics"] for k, s in data["sets"].items()}),
            **({"logged": logged} if logged else {})}


def rescore_task(results: dict) -> None:
    """Grade a results file's stored completions again with the task it records (its data and
    reward functions as they are now); no generation. The samples' rewards, per-function
    values and reasons are replaced."""
    from vigor_cli.settings import build_config
    from vigor_cli.tasks import get_task
    from vigor_cli.evaluate.sets import task_sets

    try:
        cfg = build_config(tree={"task": results["task"]})
    except ValueError as e:
        raise UserError(f"--rescore: the file's task does not validate ({str(e).splitlines()[0]})") from None
    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:
        sets = task_sets(cfg, task, None)
        for name, entry in results["sets"].items():
            by_uid = {ex.uid: ex for ex in sets.get(name, [])}
            samples = entry["samples"]
            missing = [s["uid"] for s in samples if s["uid"] not in by_uid]
            if missing:
                raise UserError(f"--rescore: set '{name}' has problem {missing[0]!r}, which the task's data no longer has")
            scores = task.score([by_uid[s["uid"]] for s in samples], [s["completion"] for s in samples])
            for sample, score in zip(samples, scores):
                sample.update(reward=None if score.reward is None else float(score.reward), reason=score.reason)
                for key, value in (("rewards", dict(score.components)), ("extra", dict(score.extra))):
                    if value:
                        sample[key] = value
                    else:
                        sample.pop(key, None)
            entry["pass_threshold"] = cfg.task.pass_threshold
    finally:
        task.close()

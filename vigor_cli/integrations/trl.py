"""The allocation strategies inside TRL's ``GRPOTrainer``: one GPU, several, several nodes.

``pip install 'vigor[trl]'`` (TRL 1.16). :class:`VigorGRPOTrainer` runs each step's rollout
phase through vigor's rollout core (vigor_cli/train/rollout_core.py, the copy `vigor train` runs),
with TRL's generation and reward functions as the round runner, then replays the step through
TRL's scoring pass so that TRL's log-probs, KL and loss train on it. docs/scaling.md has the
commands, how the ranks share a step, the constraints TRL imposes and what is tested.

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, NoReturn, Sequence

from vigor_cli.config import parse_override
from vigor_cli.integrations.trl_config import (VigorGRPOConfig, _trl_device, allocation_config, model_load_kwargs,
                                               trl_args)
from vigor_cli.integrations.trl_evaluation import HeldOutEval, TRLEngine
from vigor_cli.integrations.trl_metrics import write_run_files
from vigor_cli.integrations.trl_rewards import task_dataset, task_reward, task_reward_components, task_reward_funcs
from vigor_cli.integrations.trl_rounds import (ROLLOUT_INDEX, RankDisagreement, StepLayout, TRLRounds,
                                               check_agreement, round_digest, split_requests)
from vigor_cli.integrations.trl_trainer import VigorGRPOTrainer
from vigor_cli.settings import build_config


def build_trainer(cfg: Any, output_dir: str | Path, **overrides: Any) -> tuple[VigorGRPOTrainer, HeldOutEval, Any]:
    """The trainer for a vigor ``RunConfig`` (model, task, reward through the task's verifier,
    held-out evaluation as `vigor train` schedules it); returns (trainer, evaluation, task)."""
    from transformers import AutoModelForCausalLM

    from vigor_cli.model.loading import load_tokenizer, resolve_model_path, set_cpu_threads
    from vigor_cli.tasks import get_task
    from vigor_cli.train.data import fitted_sets

    args = trl_args(cfg, output_dir, **overrides)  # bad keys fail before anything loads
    m = cfg.model
    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:  # the task's data and reward functions are read before the model: a bad one fails first
        train_examples = task.train_examples()
        task.eval_examples(cfg.task.eval_sets[0] if cfg.task.eval_sets else None)
        path = resolve_model_path(m.name_or_path)
        tok = load_tokenizer(m, path)  # vigor's: pad-token fallback, enable_thinking
        # the prompts the model cannot take, left out of training and evaluation as vigor train does
        examples = next(iter(fitted_sets(cfg, task, tok, train_examples, enough=False)[2].values()))
        device = _trl_device(overrides)
        model = AutoModelForCausalLM.from_pretrained(path, **model_load_kwargs(m, device))
        set_cpu_threads(model, m.cpu_threads, device)  # model.cpu_threads, as vigor train sets it
        env = None
        if cfg.task.env is not None:  # task.env: episodes (vigor_cli/integrations/trl_episodes.py)
            from vigor_cli.episodes.registry import make_environment

            env = make_environment(cfg.task, task, tok)
    except BaseException:
        task.close()
        raise
    peft_config = None
    if m.lora.enabled:
        from peft import LoraConfig

        peft_config = LoraConfig(r=m.lora.r, lora_alpha=m.lora.alpha, lora_dropout=m.lora.dropout,
                                 target_modules=m.lora.target_modules, task_type="CAUSAL_LM")
    funcs, weights = task_reward_funcs(task, env=env)
    if weights is not None:
        args.reward_weights = weights  # read by GRPOTrainer when it is built
    episodes = {}
    if env is not None:
        from vigor_cli.episodes.loop import EpisodeLimits

        episodes = dict(vigor_env=env, vigor_task=task, env_timeout_s=cfg.task.env_timeout_s,
                        episode_limits=(EpisodeLimits(cfg.task.max_turns, cfg.completion_tokens(),
                                                      cfg.task.max_prompt_tokens),
                                        cfg.sampling.max_new_tokens))
    trainer = VigorGRPOTrainer(model=model, reward_funcs=funcs, args=args,
                               train_dataset=task_dataset(task, tok, cfg.task.max_prompt_tokens, env),
                               processing_class=tok, peft_config=peft_config, **episodes)
    held_out = HeldOutEval(trainer, task, examples,  # train.eval_limit applied (fitted_sets)
                           max_new_tokens=cfg.sampling.max_new_tokens, every=cfg.train.eval_every,
                           samples=cfg.train.eval_samples, temperature=cfg.train.eval_temperature,
                           top_p=cfg.sampling.top_p)
    trainer.add_callback(held_out)
    return trainer, held_out, task


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors (an unknown flag, a bad or missing value) raise
    ``UserError``: one line and exit 2 through :func:`main`, not the usage block."""

    def error(self, message: str) -> NoReturn:
        from vigor_cli.errors import UserError

        raise UserError(f"{message} (see --help)")


def _parser() -> _Parser:
    from vigor_cli.package_data import DEFAULT_CONFIG

    ap = _Parser(prog="python -m vigor_cli.integrations.trl", description=main.__doc__)
    ap.add_argument("--config", help=f"vigor run config (YAML; default {DEFAULT_CONFIG.name})")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override a key: section.key=value")
    ap.add_argument("--output-dir", help="TRL's output_dir, the run directory: vigor's run files and "
                    "checkpoints/step-N go here")
    ap.add_argument("--resume", metavar="RUN", help="continue the TRL run in RUN from its newest intact checkpoint "
                    "(its saved config; instead of --output-dir)")
    ap.add_argument("--allow-changed-files", action="store_true", help="with --resume: continue although a data, "
                    "reward or model file changed since the run started (its provenance.json records the change)")
    ap.add_argument("--vllm-mode", choices=["server", "colocate"], help="generate with TRL's vLLM integration")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU (TRL's use_cpu)")
    ap.add_argument("--trl", dest="trl_keys", action="append", default=[],
                    help="set a GRPOConfig key last: key=value (YAML), e.g. vllm_server_host=10.0.0.5")
    from vigor_cli.commands.flags import add_arguments

    add_arguments(ap.add_argument_group("your own task (as in vigor train; --data selects task 'custom')"))
    return ap


def _check_output_dirs(output_dir: str, trl_keys: Mapping[str, Any]) -> None:
    """Refuse, before anything slow, a directory that cannot be created (a regular file at
    it or above it) and a run directory that already holds a run's allocation.jsonl."""
    from vigor_cli.errors import UserError, file_in_the_way

    dirs = {"--output-dir": output_dir}  # --trl keys are set last, so they win
    dirs.update({f"--trl {k}": trl_keys[k] for k in ("output_dir", "vigor_run_dir") if trl_keys.get(k) is not None})
    for flag, value in dirs.items():
        if (blocker := file_in_the_way(Path(str(value)))) is not None:
            raise UserError(f"{flag} {value}: {blocker} is a file, not a directory")
    flag, run = list(dirs.items())[-1]  # where allocation.jsonl goes: vigor_run_dir, else output_dir
    if (Path(str(run)) / "allocation.jsonl").exists():
        raise UserError(f"{flag} {run}: already holds a run's allocation.jsonl; give a new directory")


def _resume_plan(a: argparse.Namespace, own: Mapping[str, Any]) -> tuple[Any, str, str, tuple[int, Any]]:
    """``--resume RUN``: the run's saved config, its directory, and what to resume from (its
    newest intact checkpoint, else the run itself: started over) and, for its record, the step
    and the changed files and versions; refused in one line when a flag would change the
    config, RUN is not a TRL run, or a file it read changed (vigor_cli/run/provenance.py)."""
    from vigor_cli.run import provenance
    from vigor_cli.run.checkpoints import step_of
    from vigor_cli.errors import UserError
    from vigor_cli.train.resume import check_resume_config
    from vigor_cli.run.directory import RunDir

    given = [f for f, v in (("--config", a.config), ("--set", a.sets), ("--output-dir", a.output_dir)) if v]
    given += [f"the flag setting {k}" for k, v in own.items() if v is not None]
    if given:
        raise UserError(f"--resume continues the run's saved config; drop {', '.join(given)}")
    def warn(line: str) -> None:
        print(f"warning: {line}", file=sys.stderr)

    run = RunDir.open_existing(a.resume)
    record = run.path / "provenance.json"
    if record.is_file() and json.loads(record.read_text()).get("trainer") not in (None, "trl"):
        raise UserError(f"--resume {a.resume}: a vigor train run; resume it with vigor train --resume {a.resume}")
    cfg = build_config(run.path / "config.yaml")
    checkpoint = run.store.newest_intact(warn)
    if checkpoint is not None:
        data = json.loads((checkpoint / "data_state.json").read_text())
        if data.get("trainer") != "trl":
            raise UserError(f"--resume {a.resume}: a vigor train run; resume it with vigor train --resume {a.resume}")
    check_resume_config(run, cfg, checkpoint, None, warn)
    if checkpoint is not None and step_of(checkpoint) >= cfg.train.steps:
        raise UserError(f"--resume {a.resume}: the run is finished (its checkpoint is at step {step_of(checkpoint)} "
                        f"of train.steps={cfg.train.steps})")
    changes = provenance.check_resume(run.path, a.allow_changed_files, warn)
    return cfg, str(run.path), str(checkpoint if checkpoint is not None else run.path), (
        max(step_of(checkpoint), 0), changes)


def _train(a: argparse.Namespace) -> int:
    from vigor_cli.errors import UserError, user_message

    try:
        from vigor_cli.commands.flags import task_overrides
        from vigor_cli.commands.train import FLAG_OF_KEY

        own = task_overrides(vars(a))
        extra: dict[str, Any] = {"use_cpu": a.cpu}
        if a.resume is not None:
            cfg, a.output_dir, extra["resume_from_checkpoint"], resumed = _resume_plan(a, own)
        else:
            if a.output_dir is None:
                raise UserError("--output-dir is required (or --resume RUN to continue a run)")
            if a.allow_changed_files:
                raise UserError("--allow-changed-files goes with --resume RUN only")
            from vigor_cli.package_data import DEFAULT_CONFIG

            cfg = build_config(a.config or str(DEFAULT_CONFIG), overrides=own, sets=a.sets, flags=FLAG_OF_KEY)
        for text in a.trl_keys:
            key, value = parse_override(text)
            extra[key] = value
        if a.vllm_mode:
            extra.update(use_vllm=True, vllm_mode=a.vllm_mode)
        if a.resume is None:
            _check_output_dirs(a.output_dir, extra)
        from vigor_cli.console import console
        from vigor_cli.integrations import trl_plan

        main_process = int(os.environ.get("RANK", "0")) == 0  # every rank checks; the main one prints
        trl_plan.announce(cfg, extra, console if main_process else None)  # one rank's plan, before the model loads
        trainer, held_out, task = build_trainer(cfg, a.output_dir, **extra)
        if trainer.accelerator.is_main_process and a.resume is not None:
            from vigor_cli.run import provenance

            provenance.add_resume(Path(a.output_dir), *resumed)
        elif trainer.accelerator.is_main_process:  # the run's record of what made it (vigor_cli/run/provenance.py)
            from vigor_cli.run import provenance

            train = task.train_examples()
            provenance.write(a.output_dir, provenance.build(
                cfg, str(trainer.accelerator.device), train, {"held-out": held_out.examples}, 0,
                provenance.rows_read(cfg, task, len(train)), trainer="trl"))
    except (ValueError, TypeError) as e:  # ConfigError is a ValueError; a bad --trl key a TypeError
        raise UserError(user_message(e) or str(e).splitlines()[0]) from None
    try:
        trainer.train()
    finally:
        task.close()
    if trainer.accelerator.is_main_process:
        totals = trainer.vigor_totals
        print(json.dumps({"output_dir": a.output_dir, "rollouts": totals["rollouts"],
                          "rollouts_zero_variance": totals["zero_variance"], "held_out": held_out.results}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``[accelerate launch ...] python -m vigor_cli.integrations.trl``: a vigor config
    (default: the bundled tiny-math run) trained through TRL; docs/scaling.md."""
    from vigor_cli.errors import EXIT_USER, user_message

    try:
        return _train(_parser().parse_args(argv))
    except Exception as e:  # the user's to fix: one line, exit 2; a bug keeps its traceback
        message = user_message(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USER


__all__ = [
    "HeldOutEval",
    "ROLLOUT_INDEX",
    "RankDisagreement",
    "StepLayout",
    "TRLEngine",
    "TRLRounds",
    "VigorGRPOConfig",
    "VigorGRPOTrainer",
    "allocation_config",
    "build_trainer",
    "check_agreement",
    "main",
    "model_load_kwargs",
    "round_digest",
    "trl_args",
    "split_requests",
    "task_dataset",
    "task_reward",
    "task_reward_components",
    "task_reward_funcs",
    "write_run_files",
]


if __name__ == "__main__":
    raise SystemExit(main())

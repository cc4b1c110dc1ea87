"""The TRL path's checkpoints, in the layout `vigor train` writes (vigor_cli/run/checkpoints.py):
``<run>/checkpoints/step-N/`` sealed by a manifest and ``COMPLETE``, holding the policy (adapter
or full weights, gathered from every rank under FSDP or ZeRO-3), the tokenizer, the
allocator's state, the loop's position and counters (``data_state.json``), the config, and
Transformers' own optimizer, scheduler, RNG (one file per rank) and trainer state, which its
``train(resume_from_checkpoint=...)`` reads back. Written by the main process; every rank
takes part in the gathers. :func:`load` restores what is vigor's before a resume.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from vigor_cli.errors import UserError

TRAINER_STATE = "trainer_state.json"
"""Transformers' trainer state (its global step, log history), read back by its resume."""


def _barrier(trainer: Any) -> None:
    if trainer.accelerator.num_processes > 1:
        trainer.accelerator.wait_for_everyone()


def loop_state(trainer: Any) -> dict:
    """The rollout loop's position and counters (``data_state.json``): vigor's step, the data
    order, the totals, the token estimates the ranks' layout reads, the health monitor."""
    tr = trainer
    return {
        "step": tr.vigor_step,
        "optimizer_step": int(tr.state.global_step),
        "trainer": "trl",
        "data": tr.vigor_data.state_dict(),
        "rollouts_cumulative": int(tr.vigor_totals["rollouts"]),
        "tokens_cumulative": int(tr.vigor_totals["tokens"]),
        "prompt_tokens": dict(tr._prompt_tokens),
        "all_prompts": list(tr._all_prompts),
        "all_completions": list(tr._all_completions),
        "health": tr.vigor_health.monitor.state_dict(),
        "health_prompts": {uid: [p.tokens, p.templated] for uid, p in tr.vigor_health.prompts.items()},
    }


def _gathered_state_dict(trainer: Any) -> dict:
    """The policy's full state dict on the main process (accelerate gathers it from the ranks'
    shards under FSDP and ZeRO-3; every rank must call this)."""
    try:
        return trainer.accelerator.get_state_dict(trainer.model_wrapped if trainer.is_deepspeed_enabled
                                                  else trainer.model)
    except ValueError as e:  # ZeRO-3 without a 16-bit consolidation on save
        raise UserError(f"checkpoint: the ZeRO-3 shards cannot be gathered ({str(e).splitlines()[0]}); set "
                        "zero3_save_16bit_model: true in the accelerate config") from None


def save(trainer: Any) -> Path | None:
    """Publish the checkpoint of the trainer's current step (every rank calls this; the main
    process writes and seals it). Returns its directory on the main process."""
    from vigor_cli.config import dump_config
    from vigor_cli.run.directory import RunDir, write_json_atomic, write_text_atomic

    tr = trainer
    step, main = tr.vigor_step, tr.accelerator.is_main_process
    run = RunDir(tr.vigor_run_dir)
    tmp = run.checkpoints / f".tmp-step-{step}"
    if main:
        tmp = run.begin_checkpoint(step)
    _barrier(tr)
    try:
        state_dict = _gathered_state_dict(tr)
        if main:
            policy = tr.accelerator.unwrap_model(tr.model)
            policy.save_pretrained(tmp, state_dict=state_dict)  # safetensors; peft keeps the adapter's keys
            tr.processing_class.save_pretrained(tmp)
        del state_dict
        if not tr.args.save_only_model:  # Transformers' own (sharded optimizers included), as its save
            tr._save_optimizer_and_scheduler(str(tmp))
            tr._save_scaler(str(tmp))
            tr._save_rng_state(str(tmp))  # rng_state.pth, or rng_state_<rank>.pth per rank
        if main:
            tr.state.save_to_json(str(tmp / TRAINER_STATE))
            write_json_atomic(tmp / "allocator.json", tr.allocator.state_dict())
            write_json_atomic(tmp / "data_state.json", loop_state(tr))
            if tr.args.vigor_config:
                write_text_atomic(tmp / "config.yaml", dump_config(_run_config(tr.args.vigor_config)))
        _barrier(tr)  # every rank's files are in before the seal
    except BaseException:
        if main:
            run.discard_checkpoint(tmp)
        raise
    final = None
    if main:
        final = run.commit_checkpoint(tmp, step, keep=tr.args.save_total_limit or 2)
    _barrier(tr)
    return final


def _run_config(tree: dict) -> Any:
    from vigor_cli.config import RunConfig

    return RunConfig.model_validate(tree)


def resolve(target: str | Path, warn: Callable[[str], Any]) -> Path | None:
    """The checkpoint ``resume_from_checkpoint`` names: a ``step-N`` directory as it is, or a
    run directory's newest intact checkpoint (None when it has none yet)."""
    from vigor_cli.run.checkpoints import STEP_DIR, CheckpointStore, verify_checkpoint

    path = Path(target)
    if STEP_DIR.match(path.name) and path.is_dir():
        problem = verify_checkpoint(path)
        if problem is not None:
            raise UserError(f"resume_from_checkpoint {path}: damaged ({problem})")
        return path
    if not (path / "checkpoints").is_dir():
        raise UserError(f"resume_from_checkpoint {path}: neither a run directory (no checkpoints/) nor a "
                        "checkpoints/step-N directory")
    return CheckpointStore(path / "checkpoints").newest_intact(warn)


def load(trainer: Any, path: Path) -> int:
    """Restore vigor's part of checkpoint ``path`` (the allocator, the loop's position and
    counters, the health monitor); Transformers' resume restores the rest. Returns its step."""
    from vigor_cli.train.health import PromptInfo

    tr = trainer
    try:
        allocator = json.loads((path / "allocator.json").read_text())
        data = json.loads((path / "data_state.json").read_text())
        if data.get("trainer") != "trl" or not (path / TRAINER_STATE).is_file():
            raise ValueError("written by vigor train, not the TRL path: resume it with vigor train --resume")
        if not list(path.glob("rng_state*.pth")):
            raise ValueError("saved with save_only_model: no optimizer or RNG state to continue from")
        tr.allocator.load_state_dict(allocator)
        tr.vigor_data.load_state_dict(data["data"])
        tr.vigor_step = int(data["step"])
        tr.vigor_totals.update(rollouts=int(data["rollouts_cumulative"]), tokens=int(data["tokens_cumulative"]))
        tr._prompt_tokens = {str(k): int(v) for k, v in data["prompt_tokens"].items()}
        tr._all_prompts, tr._all_completions = list(data["all_prompts"]), list(data["all_completions"])
        tr.vigor_health.monitor.load_state_dict(data["health"])
        tr.vigor_health.prompts.clear()
        tr.vigor_health.prompts.update({k: PromptInfo(int(t), bool(m)) for k, (t, m) in data["health_prompts"].items()})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"resume: checkpoint {path} cannot be resumed on the TRL path ({str(e).splitlines()[0]})") from None
    return tr.vigor_step

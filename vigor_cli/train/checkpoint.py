"""A `vigor train` checkpoint: what is saved beside the policy's weights, and how it comes back.

A checkpoint holds the policy (HF format), the learner's optimizer and schedule with every
global generator's state (``trainer_state.pt``: torch's, Python's and numpy's, vigor_cli/run/seeding.py), the allocator's state (``allocator.json``), the loop's
position and counters (``data_state.json``) and the config; vigor_cli/run/directory.py publishes it
under a manifest and rotates old ones. Restoring all of it makes a resumed run continue as
if never stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from vigor_cli.errors import UserError
from vigor_cli.run.seeding import rng_state, set_rng_state


def save(trainer: Any) -> Path:
    """Publish the trainer's checkpoint at its current step; a full disk is one line and
    leaves earlier checkpoints intact."""
    from vigor_cli.config import dump_config
    from vigor_cli.model.loading import save_policy
    from vigor_cli.run.directory import disk_full, is_disk_full, write_json_atomic, write_text_atomic

    run = trainer.rundir
    tmp = run.begin_checkpoint(trainer.step)
    try:
        save_policy(trainer.learner.model, trainer.tokenizer, tmp)
        with open(tmp / "trainer_state.pt", "wb") as f:  # a file object: ENOSPC stays visible
            torch.save({**trainer.learner.state_dict(), **rng_state()}, f)
        write_json_atomic(tmp / "allocator.json", trainer.allocator.state_dict())
        write_json_atomic(tmp / "data_state.json", trainer.loop_state())
        write_text_atomic(tmp / "config.yaml", dump_config(trainer.cfg))  # checked on resume
    except BaseException as e:
        run.discard_checkpoint(tmp)
        if isinstance(e, Exception) and not isinstance(e, UserError) and is_disk_full(e, tmp):
            raise disk_full(tmp) from None
        raise
    return run.commit_checkpoint(tmp, trainer.step, trainer.cfg.train.keep_checkpoints)


def load(trainer: Any, path: Path) -> None:
    """Restore what :func:`save` wrote (resume verified ``path`` first; the weights were
    loaded with the learner)."""
    try:
        state = torch.load(path / "trainer_state.pt", weights_only=True)
        allocator = json.loads((path / "allocator.json").read_text())
        data = json.loads((path / "data_state.json").read_text())
    except (OSError, RuntimeError, ValueError, EOFError) as e:  # a checkpoint without manifest
        raise UserError(f"--resume: checkpoint {path} is damaged ({str(e).splitlines()[0]}); "
                        f"delete {path} to resume from the one before") from None
    trainer.learner.load_state_dict(state)
    set_rng_state(state)
    trainer.allocator.load_state_dict(allocator)
    trainer.load_loop_state(data)

"""Two steps of VigorGRPOTrainer on the bundled tiny model with a reward that depends only on
(uid, rollout index), so one process and two (`torchrun --nproc_per_node 2`, gloo on CPU)
see the same rewards. Each rank writes what it generated and its allocator's records to
OUT/rank-<r>.json; rank 0 also writes the run directory OUT/run. Used by
tests/test_trl_integration.py."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def keyed_reward(prompts, completions, uid, rollout_index, **kwargs):
    """1 with probability p(uid) in {0, 1/4, ..., 1}, decided by a hash of (uid, index)."""
    out = []
    for u, i in zip(uid, rollout_index):
        p = int(hashlib.sha256(u.encode()).hexdigest(), 16) % 5 / 4
        draw = int(hashlib.sha256(f"{u}:{i}".encode()).hexdigest(), 16) % 1000 / 1000
        out.append(1.0 if draw < p else 0.0)
    return out


def main(out: Path, strategy: str = "vigor") -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.config import TaskConfig
    from vigor_cli.integrations.trl import VigorGRPOConfig, VigorGRPOTrainer, task_dataset
    from vigor_cli.models import TINY_DIR
    from vigor_cli.tasks import get_task

    class Recording(VigorGRPOTrainer):
        generated: list = []
        records: list = []

        def _generate_round(self, rows):
            self.generated.append(len(rows))
            return super()._generate_round(rows)

        def _finish_step(self, step, layout, *args):
            result = super()._finish_step(step, layout, *args)
            self.records.append({"step": step, "spent": list(layout.spent)})
            return result

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    data = task_dataset(get_task(TaskConfig(name="tiny-math")), tok)
    args = VigorGRPOConfig(
        output_dir=str(out / "run"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        seed=3, lr_scheduler_type="constant", prompts_per_step=5,
        vigor={"strategy": strategy, "m0": 1, "gamma": 3.0},
    )
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[keyed_reward],
                        args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    rank = trainer.accelerator.process_index
    (out / f"rank-{rank}.json").write_text(json.dumps({
        "ranks": trainer.accelerator.num_processes, "generated": trainer.generated,
        "steps": trainer.records, "allocator": trainer.allocator.state_dict(),
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])

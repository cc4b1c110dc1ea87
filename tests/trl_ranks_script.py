"""Two steps of VigorGRPOTrainer on the bundled tiny model with a reward that depends only on
(uid, rollout index), so one process and two (`torchrun --nproc_per_node 2`, gloo on CPU)
see the same rewards; held-out evaluation at the start and the end. Each rank writes what
it generated, its layout per step, its allocator's state, its micro-batches per update (a
budget of 40 tokens: two or three rows each) and its held-out results to
OUT/rank-<r>.json; rank 0 also writes the run directory OUT/run. With ``diverge``, rank 1
draws its prompts in another order (its allocator asks for other rollouts than rank 0's);
with ``episodes``, every rollout is a tiny-guess episode with higher-lower (the ranks'
episodes end at different turns, and every rank must still generate each turn together).
Used by tests/test_trl_integration.py."""

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


def main(out: Path, mode: str = "") -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.config import TaskConfig
    from vigor_cli.integrations.trl import HeldOutEval, VigorGRPOConfig, VigorGRPOTrainer, task_dataset
    from vigor_cli.model.loading import TINY_DIR
    from vigor_cli.train.rollout_core import DataOrder
    from vigor_cli.tasks import get_task

    class Recording(VigorGRPOTrainer):
        generated: list = []
        steps: list = []
        updates: list = []

        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            if self.model.training:
                self.updates.append({"micro_batches": self.vigor_update.micro_batches,
                                     "forwarded": self.vigor_update.forwarded,
                                     "fillers": self.vigor_update.fillers,
                                     "filler_rows": self.vigor_update.filler_rows,
                                     "completions/mean_length": self._metrics["train"]["completions/mean_length"]})
            return loss

        def _generate_round(self, rows):
            self.generated.append(len(rows))
            return super()._generate_round(rows)

        def _generate_and_score_completions(self, inputs):
            result = super()._generate_and_score_completions(inputs)
            if self.model.training:
                layout = self.last_rounds.layout
                self.steps.append({"step": self.vigor_step, "spent": list(layout.spent),
                                   "tokens": list(layout.tokens), "rows": layout.rows})
            return result

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    episodes = mode == "episodes"  # tiny-guess with higher-lower: the ranks' episodes end at different turns
    task = get_task(TaskConfig(name="tiny-guess" if episodes else "tiny-math"))
    extra: dict = {}
    if episodes:
        from vigor_cli.episodes.loop import EpisodeLimits
        from vigor_cli.episodes.registry import make_environment

        env = make_environment(TaskConfig(name="tiny-guess", env="higher-lower"), task, tok)
        extra = dict(vigor_env=env, vigor_task=task, episode_limits=(EpisodeLimits(3, 48), 8))
    data = task_dataset(task, tok, env=extra.get("vigor_env"))
    args = VigorGRPOConfig(
        output_dir=str(out / "run"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=48 if episodes else 8, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, seed=3, lr_scheduler_type="constant", prompts_per_step=5, beta=0.04,
        learning_rate=1e-3,
        micro_batch_tokens=160 if episodes else 40,  # two or three rows per micro-batch: the ranks' counts differ
        vigor={"strategy": "vigor", "m0": 1, "gamma": 3.0},
    )
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[keyed_reward],
                        args=args, train_dataset=data, processing_class=tok, **extra)
    held_out = HeldOutEval(trainer, task, task.eval_examples()[:7], max_new_tokens=8)
    trainer.add_callback(held_out)
    rank = trainer.accelerator.process_index
    if mode == "diverge" and rank == 1:
        trainer.vigor_data = DataOrder(list(reversed(list(trainer.vigor_index))), args.seed)
    try:
        trainer.train()
    finally:
        task.close()
    from vigor_cli.integrations.trl_checks import every_rank_texts

    texts = trainer.last_rounds.texts  # this rank's completions of the last step; the health checks read all ranks'
    seen = every_rank_texts(trainer, texts)
    (out / f"rank-{rank}.json").write_text(json.dumps({
        "texts_own": sorted(map(list, texts)), "texts_seen": sorted(map(list, seen)),
        "ranks": trainer.accelerator.num_processes, "generated": trainer.generated,
        "steps": trainer.steps, "allocator": trainer.allocator.state_dict(),
        "held_out": held_out.results, "max_prompt_tokens": max(trainer._prompt_tokens.values()),
        "updates": trainer.updates,
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])

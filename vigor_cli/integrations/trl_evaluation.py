"""Held-out evaluation on the TRL path: TRL's own generation as a vigor rollout engine
(:class:`TRLEngine`), and the callback that evaluates as `vigor train` does, at the start,
on schedule and at the end, sharded over the ranks (:class:`HeldOutEval`)."""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from transformers import TrainerCallback

from vigor_cli.integrations.trl_metrics import write_run_files
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams


class TRLEngine(RolloutEngine):
    """TRL's own generation as a vigor rollout engine, for the held-out evaluation on every
    rank: its transformers path (ZeRO-3 parameters gathered, FSDP parameters summoned, ranks
    kept in step by ``generate``) or its vLLM. Every rank calls :meth:`generate` together,
    with equally many prompts (vigor_cli/evaluate/evaluation.py pads the shards)."""

    name = "trl"
    shares_policy = True

    def __init__(self, trainer: VigorGRPOTrainer):
        self.trainer = trainer

    def generate(self, prompts: Sequence[Sequence[int]], counts: Sequence[int],
                 sampling: SamplingParams) -> list[list[Rollout]]:
        from vigor_cli.rollout.weights import cut_at_stop

        tr = self.trainer
        rows = [list(p) for p, c in zip(prompts, counts) for _ in range(c)]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with tr.generation_settings(sampling), torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(sampling.seed or 0) + tr.accelerator.process_index)
            completion_ids, logprobs = tr._generate_single_turn(rows, None, {}, 1)
        stops = set(tr.eos_token_ids)
        out: list[list[Rollout]] = [[] for _ in counts]
        owners = [i for i, c in enumerate(counts) for _ in range(c)]
        for row, (owner, ids) in enumerate(zip(owners, completion_ids)):
            ids = [int(t) for t in ids]
            end = cut_at_stop(ids, stops)
            ids = ids[:end] if end else ids
            text = tr._tokenizer.decode(ids, skip_special_tokens=True)
            # vLLM's log-probs of the sampled tokens (an episode hands them to TRL); transformers: none
            lp = [float(x) for x in logprobs[row][: len(ids)]] if logprobs is not None else [0.0] * len(ids)
            out[owner].append(Rollout(ids, lp, text, truncated=end is None))
        return out


class HeldOutEval(TrainerCallback):
    """Held-out accuracy as ``vigor train`` measures it (vigor_cli/evaluation.evaluate_sets),
    at the start, every ``every`` steps and at the end: on every rank, each on its share of
    the examples through TRL's generation, results gathered; the main process writes
    ``eval/step-<N>.json`` and the metrics.jsonl line."""

    def __init__(self, trainer: VigorGRPOTrainer, task: Any, examples: list, max_new_tokens: int,
                 every: int = 0, samples: int = 1, temperature: float = 0.0, top_p: float = 1.0):
        self.trainer, self.task, self.examples = trainer, task, examples
        self.max_new_tokens, self.every, self.samples = max_new_tokens, every, samples
        self.temperature, self.top_p = temperature, top_p
        self.results: dict[int, float] = {}
        self.seconds = 0.0
        """Wall time spent evaluating (bench/trl_path.py's per-phase split)."""

    def evaluate(self, step: int) -> float:
        from accelerate.utils import gather_object

        from vigor_cli.evaluate.evaluation import Shard, evaluate_sets, held_out_sampling

        tr = self.trainer
        acc = tr.accelerator
        t0 = time.perf_counter()
        shard = Shard(acc.process_index, acc.num_processes, gather_object) if acc.num_processes > 1 else None
        params = held_out_sampling(tr.args.seed, step, self.temperature, self.top_p, self.max_new_tokens)
        was_training = tr.model.training
        tr.model.eval()
        self.task.trainer_state = tr.state  # TRL's own, as its reward calls get it
        episodes = tr.vigor_episodes.eval_runner(tr.processing_class) if tr.vigor_episodes is not None else None
        try:
            held = evaluate_sets(TRLEngine(tr), self.task, tr.processing_class, {self.task.name: self.examples},
                                 self.samples, params, step, shard, tr.args.pass_threshold, episodes=episodes)
        finally:
            tr.model.train(was_training)
        self.task.logged_metrics()  # what they logged while evaluating: in the file's sets, not the step's
        self.results[step] = held.accuracy
        if acc.is_main_process:
            write_run_files(tr.vigor_run_dir, evaluation=held.to_json(),
                            metrics=held.line(tr.vigor_totals["rollouts"], tr.vigor_totals["tokens"],
                                              getattr(tr, "vigor_step_no_signal", (0, 0.0))))
        self.seconds += time.perf_counter() - t0
        return held.accuracy

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 0:
            self.evaluate(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        iterations = max(1, self.trainer.num_iterations)
        if state.global_step % iterations and state.global_step != state.max_steps:
            return  # mid-way through a rollout phase's num_iterations optimizer steps
        step = self.trainer.vigor_step
        due = self.every and step % self.every == 0
        if due or state.global_step == state.max_steps:
            self.evaluate(step)

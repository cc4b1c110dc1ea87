"""``VigorGRPOTrainer``: TRL's ``GRPOTrainer`` whose generation step runs a vigor allocation
strategy. Each step's rollout phase goes through vigor's rollout core (vigor_cli/train/rollout_core.py)
with TRL's generation and reward functions as the round runner (trl_rounds.py), then is
replayed through TRL's scoring pass so that TRL's log-probs, KL and loss train on it."""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch

try:
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"vigor_cli.integrations.trl_trainer needs TRL: pip install 'vigor[trl]' ({e})"
    ) from None

from vigor_cli.train import health
from vigor_cli.allocation import make_allocator
from vigor_cli.allocation.base import Request
from vigor_cli.integrations import trl_checks, trl_metrics, trl_save, trl_update, trl_vllm
from vigor_cli.integrations.trl_config import VigorGRPOConfig
from vigor_cli.integrations.trl_evaluation import TRLEngine
from vigor_cli.integrations.trl_metrics import write_run_files
from vigor_cli.integrations.trl_rounds import ROLLOUT_INDEX, Key, TRLRounds, check_agreement, round_digest
from vigor_cli.rollout.base import SamplingParams
from vigor_cli.train.rollout_core import DataOrder, RolloutBatch, run_rounds
from vigor_cli.allocation.base import reward_range


class VigorGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose generation step runs a vigor allocation strategy (module doc).

    ``args`` is a :class:`VigorGRPOConfig`. Rows of ``train_dataset`` are prompts keyed by
    ``uid_column`` (default ``uid``; the row index when the column is absent). Reward
    functions get every dataset column plus ``rollout_index``; a reward function may return
    None for a completion it cannot score (excluded as `vigor train` excludes it).
    ``environment_factory`` (TRL's argument: a class in TRL's convention) or ``vigor_env`` (a
    vigor environment, with its ``vigor_task`` and ``episode_limits``: :func:`build_trainer`
    from ``task.env``) makes every rollout an episode (vigor_cli/integrations/trl_episodes.py).
    """

    def __init__(self, model: Any, reward_funcs: Any, args: VigorGRPOConfig | None = None, *rest: Any,
                 uid_column: str = "uid", environment_factory: Any = None, vigor_env: Any = None,
                 vigor_task: Any = None, episode_limits: tuple | None = None, env_timeout_s: float | None = None,
                 **kwargs: Any):
        from vigor_cli.integrations import trl_episodes

        if not isinstance(args, VigorGRPOConfig):
            raise TypeError("VigorGRPOTrainer needs args=VigorGRPOConfig(...)")
        from vigor_cli.integrations import trl_versions

        trl_versions.check_installed()
        problems = trl_checks.refusals(model, args, kwargs.get("peft_config"))
        if problems:
            raise ValueError(problems[0])
        model = trl_checks.prepare_kbit(model, kwargs.get("peft_config"), args.gradient_checkpointing)
        self.vigor_episodes: Any = None
        """The episodes' loop when an environment answers (vigor_cli/integrations/trl_episodes.py)."""
        self.vigor_uid_column = uid_column
        env, positional, kwargs = trl_episodes.environment_for(self, environment_factory, vigor_env, env_timeout_s,
                                                               (model, reward_funcs, args, *rest), kwargs)
        super().__init__(*positional, **kwargs)
        refused = trl_checks.tool_refusals(self, kwargs.get("tools"), env is not None)
        if refused:
            raise ValueError(refused[0])
        trl_checks.float32_adapters(self.model)
        a = self.args
        if a.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("VigorGRPOTrainer needs multi_objective_aggregation='sum_then_normalize'")
        if self._entropy_bonus_enabled or self.aux_loss_enabled:
            raise ValueError(
                "an entropy bonus (entropy_coef, use_adaptive_entropy) or a router aux loss (router_aux_loss_coef): "
                "VigorGRPOTrainer runs the update in micro-batches (micro_batch_tokens) and TRL adds those terms once "
                "per forward, so they would count once per micro-batch; set them to 0"
            )
        data = self.train_dataset
        uids = [str(u) for u in data[uid_column]] if uid_column in data.column_names else [
            str(i) for i in range(len(data))]
        if len(set(uids)) != len(uids):
            raise ValueError(f"train_dataset: column {uid_column!r} repeats a uid; uids must be unique")
        self.vigor_index = {u: i for i, u in enumerate(uids)}
        self.vigor_data = DataOrder(uids, a.seed)
        self.allocator = make_allocator(a.allocation, a.prompts_per_step, a.seed)
        self.vigor_run_dir = Path(a.vigor_run_dir or a.output_dir)
        self.vigor_totals = {"rollouts": 0, "tokens": 0, "zero_variance": 0}
        self.vigor_step = 0
        """Rollout phases so far: vigor's step (TRL's optimizer steps are num_iterations per phase)."""
        self._prompt_tokens: dict[str, int] = {}
        self._completion_tokens: dict[str, tuple[int, int]] = {}  # uid -> (sum, count), this step
        self._all_completions = [0, 0]  # (sum, count) over the run: the estimate of an unseen prompt
        self._all_prompts = [0, 0]  # (sum, count) of _prompt_tokens: an unseen prompt's estimate
        self._replay: tuple | None = None
        self._scoring_rows: list[int] | None = None
        """During the replay's scoring pass: the rows whose old and reference log-probs the
        update reads (trl_update.scoring_logps); None otherwise."""
        self.vigor_update = trl_update.UpdateStats()
        """The last optimizer step's update metrics under vigor's keys (trl_update)."""
        self.vigor_pending: trl_metrics.PendingStep | None = None
        """The step whose rollouts are logged and whose update line is not yet (trl_metrics)."""
        self.add_callback(trl_metrics.PhaseEnd(self))
        self.last_batch: RolloutBatch | None = None
        self.last_rounds: TRLRounds | None = None
        self._vigor_logged: dict[str, list[float]] = {}
        """What reward functions logged through log_metric this step (metrics.jsonl)."""
        self._use_vigor_stops()
        if env is not None:  # after the stop tokens: an environment's messages follow a turn's stop token
            limits, turn_tokens = episode_limits or trl_episodes.limits_from_trl(a)
            self.vigor_episodes = trl_episodes.TRLEpisodes(self, TRLEngine(self), env, limits, turn_tokens, vigor_task)
        config = getattr(self.model, "config", None)
        context = getattr(config, "max_position_embeddings", None) if config is not None else None
        self.vigor_health = health.RunHealth(a.health_view, {}, a.vllm_max_model_length or context,
                                             tools=bool(getattr(env, "tools", None)))
        if self.accelerator.is_main_process and not a.resume_from_checkpoint:
            if (self.vigor_run_dir / "allocation.jsonl").exists():
                raise ValueError(f"{self.vigor_run_dir} already holds allocation.jsonl; use a new output_dir "
                                 "(or resume_from_checkpoint to continue it)")
            write_run_files(self.vigor_run_dir, config=a.vigor_config or {
                "allocation": a.allocation.model_dump(mode="json"),
                "train": {"seed": a.seed, "prompts_per_step": a.prompts_per_step,
                          "steps": a.max_steps // max(1, a.num_iterations)},
                "trainer": {"kind": "trl", "loss_type": a.loss_type, "scale_rewards": a.scale_rewards,
                            "processes": self.accelerator.num_processes},
            }, new_run=True)

    # ------------------------------------------------------------------ checkpoints (trl_save.py)
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Transformers' save (save_strategy, save_steps) in `vigor train`'s layout:
        ``<vigor_run_dir>/checkpoints/step-N/``, sealed, N the rollout phase (trl_save.py)."""
        trl_save.save(self)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """TRL's training; ``resume_from_checkpoint`` (else ``args.resume_from_checkpoint``): a
        ``checkpoints/step-N`` directory, a run directory (its newest intact checkpoint) or True
        (this run's). The allocator, data order and counters come back with Transformers'
        optimizer, RNG and step, and the logs are cut back to the checkpoint's step."""
        target = resume_from_checkpoint if resume_from_checkpoint is not None else self.args.resume_from_checkpoint
        if target is True:
            target = self.vigor_run_dir
        path = None
        if target:
            from vigor_cli.train.resume import keep_logs_until
            from vigor_cli.run.directory import RunDir

            path = trl_save.resolve(target, self._vigor_warn)
            step = trl_save.load(self, path) if path is not None else -1
            if self.accelerator.is_main_process:
                keep_logs_until(RunDir(self.vigor_run_dir), step, self._vigor_warn)
            if self.accelerator.num_processes > 1:
                self.accelerator.wait_for_everyone()
        return super().train(str(path) if path is not None else None, *args, **kwargs)

    def _vigor_warn(self, line: str) -> None:
        if self.accelerator.is_main_process:
            import sys

            print(f"warning: {line}", file=sys.stderr)

    def _log_metric(self, name: str, value: float) -> None:
        """TRL's ``log_metric`` (a reward function's scalar), also kept for vigor's metrics.jsonl."""
        super()._log_metric(name, value)
        self._vigor_logged.setdefault(name, []).append(float(value))

    def _use_vigor_stops(self) -> None:
        """vigor's stop tokens (rollout/weights.py: EOS, the generation config's, the chat
        template's end of turn) in TRL's generation settings: a base model under a chat
        template (Qwen2.5 base) would otherwise write past ``<|im_end|>``."""
        from vigor_cli.rollout.weights import stop_token_ids

        stops = stop_token_ids(self.accelerator.unwrap_model(self.model), self._tokenizer)
        self.eos_token_ids = list(dict.fromkeys([*self.eos_token_ids, *stops]))
        if self.use_vllm:
            kwargs = self.vllm_generation.generation_kwargs
            kwargs["stop_token_ids"] = list(dict.fromkeys([*(kwargs.get("stop_token_ids") or []), *stops]))
        else:
            self.generation_kwargs["eos_token_id"] = self.eos_token_ids
            self.generation_config.eos_token_id = self.eos_token_ids

    # ------------------------------------------------------------------ TRL's hooks
    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        if not self.model.training:  # evaluation keeps TRL's fixed groups
            return super()._generate_and_score_completions(inputs)
        self.vigor_step += 1
        rounds = TRLRounds(self)
        marks = trl_metrics.completion_marks(self)
        with trl_vllm.one_push_per_phase(self):  # colocated vLLM: the weights pushed once, not once per round
            batch = run_rounds(self.vigor_step, self.allocator, self.vigor_data, rounds,
                               _scale(self.args.scale_rewards),
                               reward_range(self.args.allocation.reward_range, self.reward_weights.tolist()))
        self.last_batch, self.last_rounds = batch, rounds  # the step just generated (tests, debugging)
        generated, per_func, advantages = rounds.replay(batch)
        engine_logprobs, nonfinite = trl_checks.nonfinite_to_nan(generated[4])
        generated = (*generated[:4], engine_logprobs, *generated[5:])
        t0 = time.perf_counter()
        self._replay = (generated, per_func)
        use = [m and any(mask) for m, mask in zip([a != 0 or self.beta != 0 for a in advantages], generated[2])]
        self._scoring_rows = [i for i, u in enumerate(use) if u]
        try:
            with self._one_generation_per_row():
                out = super()._generate_and_score_completions(rounds.rows)
        finally:
            self._replay = None
            self._scoring_rows = None
        t1 = time.perf_counter()
        out["advantages"] = torch.tensor(advantages, dtype=out["advantages"].dtype, device=out["advantages"].device)
        self._completion_tokens.clear()
        extra = trl_checks.report_nonfinite(self, nonfinite) if engine_logprobs is not None else {}
        trl_metrics.start_step(self, batch, rounds.layout, t1 - t0, marks, extra)
        return out

    def _generate(self, prompts: list) -> tuple:
        if self._replay is not None:
            return self._replay[0]
        return super()._generate(prompts)

    def _calculate_rewards(self, inputs: list, prompts: list, completions: list, completion_ids_list: list):
        if self._replay is not None:
            return self._replay[1].to(self.accelerator.device)
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def compute_loss(self, model: Any, inputs: dict, return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> torch.Tensor:
        """Training: TRL's loss in token-budgeted micro-batches over the rows that move it
        (vigor_cli/integrations/trl_update.py); evaluation: TRL's."""
        if not self.model.training or return_outputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = trl_update.micro_batched_loss(self, model, inputs, super()._compute_loss, self.args.micro_batch_tokens)
        trl_metrics.note_update(self, float(loss.detach()))
        return loss

    def log(self, logs: dict, start_time: float | None = None) -> None:
        """At a rollout phase's end (trl_metrics.PhaseEnd), the step's metrics.jsonl line and
        health checks, before TRL's log clears the metrics they read."""
        pending = self.vigor_pending
        if self.model.training and pending is not None and pending.done:
            logs = {**logs, **trl_metrics.finish_step(self, logs)}  # health/* on TRL's dashboards too
        super().log(logs, start_time)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        """vigor_optimizer: vigor train's warm-up (VigorGRPOConfig.vigor_optimizer); else TRL's."""
        if not self.args.vigor_optimizer:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = trl_update.vigor_schedule(optimizer if optimizer is not None else self.optimizer,
                                                          int(self.args.warmup_steps), self.num_iterations)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def get_decay_parameter_names(self, model: Any) -> list[str]:
        """vigor_optimizer: weight decay on every trained parameter, as vigor train's AdamW."""
        if not self.args.vigor_optimizer:
            return super().get_decay_parameter_names(model)
        return [name for name, p in model.named_parameters() if p.requires_grad]

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                           logits_to_keep: int, batch_size: int | None = None, **kwargs: Any) -> tuple:
        """In the replay's scoring pass: TRL's, on the rows the update reads only, in forwards
        of at most micro_batch_tokens tokens (trl_update.scoring_logps); else TRL's."""
        parent = super()._get_per_token_logps_and_entropies
        rows = self._scoring_rows
        if rows is None or any(v is not None for k, v in kwargs.items() if k not in ("compute_entropy", "compute_aux_loss")):
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
        return trl_update.scoring_logps(lambda *a, **k: parent(model, *a, **k), rows, input_ids, attention_mask,
                                        logits_to_keep, self.args.micro_batch_tokens, **kwargs)

    @contextlib.contextmanager
    def _one_generation_per_row(self) -> Iterator[None]:
        """Rows are single rollouts: TRL's generation (vLLM server dedupe included) and
        advantage code must see groups of 1 (our advantages replace TRL's zeros)."""
        saved, self.num_generations = self.num_generations, 1
        try:
            yield
        finally:
            self.num_generations = saved

    # ------------------------------------------------------------------ one round, this rank
    def check_ranks_agree(self, step: int, round_index: int, requests: Sequence[Request]) -> None:
        """Gather every rank's hash of the round's requests and compare (every rank raises
        :class:`RankDisagreement` on a mismatch, so none is left waiting)."""
        digest = torch.tensor([round_digest(step, round_index, requests)], dtype=torch.int64,
                              device=self.accelerator.device)
        check_agreement(self.accelerator.gather(digest).tolist(), step, round_index)

    def rollout_cost(self, uid: str) -> float:
        """Estimated tokens of one rollout of ``uid``: its prompt (exact once seen, else the mean
        prompt) plus its mean completion so far this step (else the run's mean completion)."""
        seen, (total_prompt, n_prompts) = self._prompt_tokens, self._all_prompts
        prompt = seen.get(uid, total_prompt / n_prompts if n_prompts else 0.0)
        total, count = self._completion_tokens.get(uid, self._all_completions)
        return prompt + (total / count if count else 0.0)

    def observe_sizes(self, sizes: Mapping[Key, tuple[int, int, bool]]) -> None:
        """Measured (prompt, completion) tokens of a round, every rank's: the next rounds'
        estimates (:meth:`rollout_cost`)."""
        for (uid, _), (prompt, completion, _) in sizes.items():
            old = self._prompt_tokens.get(uid)
            self._all_prompts[0] += prompt - (old or 0)
            self._all_prompts[1] += old is None
            self._prompt_tokens[uid] = prompt
            total, count = self._completion_tokens.get(uid, (0, 0))
            self._completion_tokens[uid] = (total + completion, count + 1)
            self._all_completions[0] += completion
            self._all_completions[1] += 1

    def _row(self, key: Key) -> dict:
        uid, index = key
        return {**self.train_dataset[self.vigor_index[uid]], ROLLOUT_INDEX: index}

    def _generate_round(self, rows: list[dict]) -> tuple[tuple, torch.Tensor]:
        """This rank's rows through TRL's generation (episodes under an environment:
        vigor_cli/integrations/trl_episodes.py); every rank's (prompt tokens, completion tokens,
        truncated, failed) per row, gathered (the ranks' row counts are equal)."""
        if self.vigor_episodes is not None:
            out, sizes = self.vigor_episodes.generate_round(rows, self.vigor_uid_column)
            return out, self.accelerator.gather(sizes).cpu()
        prompts = [row["prompt"] for row in rows]
        trl_checks.set_tool_dicts(self, len(prompts))  # tools=: TRL's tool loop reads them
        with self._one_generation_per_row():
            out = super()._generate(prompts)
        prompt_ids, completion_ids, extra = out[0], out[1], out[5]
        for i, row in enumerate(rows):
            for key, values in extra.items():
                row[key] = values[i] if isinstance(values, list) else values
        stops = set(self.eos_token_ids)
        sizes = torch.tensor([[len(p), len(c), int(len(c) >= self.max_completion_length and (not c or c[-1] not in stops)), 0]
                              for p, c in zip(prompt_ids, completion_ids)], device=self.accelerator.device)
        return out, self.accelerator.gather(sizes).cpu()

    def _score_round(self, rows: list[dict], out: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """TRL's reward functions on this rank's rows; every rank's, gathered [rows, functions],
        and every rank's hard-coding signs [rows, 3] (trl_checks.hard_coding_signs). Episodes:
        the functions get their environment instances (``environments=``), released after."""
        from vigor_cli.user.rewards import _completion_text

        prompts = [row["prompt"] for row in rows]
        if self.vigor_episodes is None:
            rewards = super()._calculate_rewards(rows, prompts, out[3], out[1]).float().cpu()
        else:
            self.environments = self.vigor_episodes.environments()
            try:
                rewards = super()._calculate_rewards(rows, prompts, out[3], out[1]).float().cpu()
            finally:
                self.environments = None
                self.vigor_episodes.release()
        return rewards, trl_checks.hard_coding_signs(self, rows, [_completion_text(c) for c in out[3]])

    # ------------------------------------------------------------------ evaluation's generation
    @contextlib.contextmanager
    def generation_settings(self, sampling: SamplingParams) -> Iterator[None]:
        """TRL's generation set to ``sampling`` (temperature 0: greedy), restored after."""
        if self.use_vllm:
            g = self.vllm_generation
            saved = (g.temperature, g.top_p, g.max_completion_length)
            g.temperature, g.top_p, g.max_completion_length = sampling.temperature, sampling.top_p, sampling.max_new_tokens
            try:
                yield
            finally:
                g.temperature, g.top_p, g.max_completion_length = saved
            return
        saved = (self.generation_config, self.generation_kwargs)
        sample = sampling.temperature > 0
        settings = {"do_sample": sample, "max_new_tokens": sampling.max_new_tokens,
                    "temperature": sampling.temperature if sample else 1.0, "top_p": sampling.top_p if sample else 1.0}
        config = copy.deepcopy(self.generation_config)
        config.update(**settings)
        self.generation_config, self.generation_kwargs = config, {**self.generation_kwargs, **settings}
        try:
            yield
        finally:
            self.generation_config, self.generation_kwargs = saved


def _scale(scale_rewards: Any) -> str:
    """TRL's scale_rewards as vigor's grpo.scale_rewards name (the same three names)."""
    if scale_rewards is True:
        return "group"
    if scale_rewards is False:
        return "none"
    return str(scale_rewards)

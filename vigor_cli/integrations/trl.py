"""The allocation strategies inside TRL's ``GRPOTrainer``: one GPU, several, several nodes.

``pip install 'vigor[trl]'`` (TRL 1.16). :class:`VigorGRPOTrainer` replaces the one place
TRL draws ``num_generations`` completions per prompt: each training step runs the
allocator's rounds (``vigor_cli.allocation``'s ask/tell), one generation call per round
with per-prompt counts, scores them with TRL's reward functions, tells the allocator, and
asks again. The update then uses TRL's own machinery (old/reference log-probs, TRL's
loss) with advantages from :func:`vigor_cli.grpo.compute_advantages` over uid groups of
any size. Everything else is TRL's: ``accelerate launch``, DeepSpeed/FSDP, vLLM
server or colocate generation. docs/scaling.md has the commands and what is tested.

Several processes. Every rank runs the same allocator with the same seed, draws the same
prompts (:class:`vigor_cli.trainer.DataOrder` over ``train_dataset``) and is told the same
rewards, which are gathered across ranks after every round; so the selection is global
and identical on every rank, without a broadcast. Each round's requests are split into
contiguous per-rank chunks whose sizes differ by at most one rollout, the extra ones
going to the ranks that got the fewest so far in the step, so that over a step the
ranks' rollout counts differ by at most one. A rank with a shorter chunk generates
duplicates of its last request to match (TRL's collectives need equal row counts); they
are left out of rewards, the allocator, the loss and the metrics.

What TRL constrains, and how this works around it:

- TRL's batch is ``num_generations`` copies of ``generation_batch_size / num_generations``
  prompts. Here the prompts of a step come from the allocator (which may draw more than
  ``prompts_per_step``: auto's census, DAPO's batches); TRL's dataloader only paces the
  steps, and its ``num_generations`` divisibility checks still apply to the config but
  not to what is generated.
- ``steps_per_generation`` must be 1 (``gradient_accumulation_steps=1``): TRL splits a
  generation batch into equal slices and would drop the remainder of a variable-size one.
  The whole step's rollouts of a rank are one micro-batch of TRL's loss.
- Rows that are not in the update (PODS's unused rollouts, DAPO's filtered groups, the
  balancing duplicates) stay in the batch with a zero loss mask (``tool_mask``), so every
  rank holds the same number of rows. With ``loss_type`` ``dapo`` (TRL's default) or
  ``bnpo`` they change nothing; ``grpo`` and ``dr_grpo`` average over rows and count them.
- Rewards must lie in [0, 1] after TRL's weighting (the allocator's contract);
  ``multi_objective_aggregation`` must be ``sum_then_normalize``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, NoReturn, Sequence

import torch

try:
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"vigor_cli.integrations.trl needs TRL: pip install 'vigor[trl]' ({e})"
    ) from None

from vigor_cli import grpo
from vigor_cli.allocation import make_allocator
from vigor_cli.config import AllocationConfig, ConfigError, parse_override
from vigor_cli.settings import build_config
from vigor_cli.tasks.base import score_once
from vigor_cli.runs import RunDir
from vigor_cli.trainer import DataOrder

ROLLOUT_INDEX = "rollout_index"
"""Column added to every row handed to reward functions: the rollout's index among its
prompt's rollouts of the step (generation order across rounds)."""


# --------------------------------------------------------------------------- config
def allocation_config(section: Mapping[str, Any] | AllocationConfig | None,
                      prompts_per_step: int | None = None) -> AllocationConfig:
    """The ``vigor`` section (keys of vigor's ``allocation`` config) validated exactly as
    ``vigor train`` validates it: a bad key or value raises ``ConfigError`` naming
    ``allocation.<key>``. With ``prompts_per_step``, also the strategy's own rules (its first
    round must fit the budget), which need the number of prompts a step starts from."""
    from vigor_cli.allocation import registry
    from vigor_cli.errors import UserError

    if isinstance(section, AllocationConfig):
        alloc = section
    else:
        tree = {f"allocation.{key}": value for key, value in dict(section or {}).items()}
        alloc = build_config(overrides=tree, strategy_rules=False).allocation
    if prompts_per_step is not None:
        try:
            registry.check(alloc, prompts_per_step)
        except UserError as e:
            raise ConfigError(str(e)) from None
    return alloc


@dataclass
class VigorGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus the allocation: ``vigor`` holds the keys of vigor's
    ``allocation`` section (``{"strategy": "vigor", "budget": 512}``)."""

    vigor: dict = field(
        default_factory=dict,
        metadata={"help": "vigor's allocation keys (vigor_cli/config.py AllocationConfig)."},
    )
    prompts_per_step: int | None = field(
        default=None,
        metadata={"help": "Prompts the allocator starts a step from (vigor's train.prompts_per_step). "
                  "Default: generation_batch_size // num_generations."},
    )
    vigor_run_dir: str | None = field(
        default=None,
        metadata={"help": "Where allocation.jsonl and metrics.jsonl go. Default: output_dir."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompts_per_step is None:
            self.prompts_per_step = self.generation_batch_size // self.num_generations
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1 (got {self.prompts_per_step})")
        self.allocation = allocation_config(self.vigor, self.prompts_per_step)


# --------------------------------------------------------------------------- balancing
def split_requests(n: int, spent: Sequence[int]) -> list[int]:
    """Per-rank sizes of a round of ``n`` rollouts: n // ranks each, the remainder one more
    each to the ranks with the fewest rollouts so far in the step (``spent``; ties to the
    lower rank). Sizes differ by at most one, and so do the step's running totals."""
    ranks = len(spent)
    sizes = [n // ranks] * ranks
    for r in sorted(range(ranks), key=lambda r: (spent[r], r))[: n % ranks]:
        sizes[r] += 1
    return sizes


Key = tuple[str, int]
"""(uid, rollout index): one rollout of a step."""


@dataclass
class StepLayout:
    """Which rank generated which rollout, in every rank's row order."""

    ranks: int
    rows: list[list[tuple[Key, bool]]] = field(default_factory=list)
    """Per rank: (key, real) per row, rounds appended; real=False marks a balancing duplicate."""
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    spent: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.ranks)]
        self.spent = [0] * self.ranks

    def add_round(self, flat: Sequence[str]) -> list[list[tuple[Key, bool]]]:
        """Lay out one round's requests (a uid per rollout, in request order); return each
        rank's rows of the round, padded to the longest with copies of its last row."""
        keys = []
        for uid in flat:
            keys.append((uid, self.counts[uid]))
            self.counts[uid] += 1
        sizes = split_requests(len(keys), self.spent)
        width, start, out = max(sizes), 0, []
        for r, size in enumerate(sizes):
            chunk = [(k, True) for k in keys[start:start + size]]
            filler = chunk[-1][0] if chunk else keys[0]
            chunk += [(filler, False)] * (width - size)
            out.append(chunk)
            self.rows[r].extend(chunk)
            self.spent[r] += size
            start += size
        return out


# --------------------------------------------------------------------------- verifiers
def task_reward(task: Any, uid_column: str = "uid") -> Any:
    """A TRL reward function scoring with a vigor task's verifier (math, code: the real
    verifiers and sandbox): rows carry the example's uid in ``uid_column``. As in `vigor
    train`, each distinct (uid, completion) of a training step is graded once (a reward is
    a function of the two alone; repeats are common, a sandbox run each for code)."""
    examples = {ex.uid: ex for ex in task.train_examples()}
    graded: dict[tuple[str, str], Any] = {}
    seen_step: list[Any] = [None]

    def reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        if step is None or step != seen_step[0]:
            graded.clear()
            seen_step[0] = step
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        scores = score_once(task, examples, list(zip(kwargs[uid_column], texts)), graded)
        out = [None if s.reward is None else float(s.reward) for s in scores]  # None: TRL's "cannot score"
        if step is None:
            graded.clear()
        return out

    reward.__name__ = f"{task.name}_verifier"
    return reward


def task_dataset(task: Any, tokenizer: Any, max_prompt_tokens: int | None = None) -> Any:
    """The task's training examples as a ``datasets.Dataset`` of (prompt, uid) rows, the
    prompt rendered as ``vigor train`` renders it; longer prompts dropped as it does."""
    from datasets import Dataset

    from vigor_cli.evaluation import encode_prompt

    rows = []
    for ex in task.train_examples():
        text = task.render_prompt(ex, tokenizer)
        if max_prompt_tokens is None or len(encode_prompt(tokenizer, text)) <= max_prompt_tokens:
            rows.append({"prompt": text, "uid": ex.uid})
    return Dataset.from_list(rows)


# --------------------------------------------------------------------------- run directory
def write_run_files(run_dir: str | Path, allocation: dict | None = None, metrics: dict | None = None,
                    config: dict | None = None) -> None:
    """The one place the TRL path writes vigor's run-directory files (docs/run-directory.md):
    ``config.yaml`` (the allocation section and the step's prompts), one ``allocation.jsonl``
    record and one ``metrics.jsonl`` line, so `vigor inspect-allocation` and `vigor report`
    read the run."""
    import yaml

    from vigor_cli.runs import write_text_atomic

    run = RunDir(Path(run_dir))
    run.path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        write_text_atomic(run.path / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    if allocation is not None:
        run.append("allocation.jsonl", allocation)
    if metrics is not None:
        run.append("metrics.jsonl", metrics)


def _prompt_text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(prompt[-1].get("content", ""))


# --------------------------------------------------------------------------- the step's rollouts
@dataclass
class _StepRollouts:
    """What the allocation rounds of one step produced, for TRL's scoring pass to replay."""

    layout: StepLayout
    rows: list[dict]
    """This rank's rows (dataset row + rollout index), in generation order."""
    generated: list
    """This rank's ``_generate`` outputs, rounds concatenated (TRL's tuple of 8)."""
    per_func: torch.Tensor
    """Every rank's per-function rewards, [ranks x rows, functions], NaN for duplicates."""
    advantages: dict[Key, float]
    loss_rows: list[bool]
    """This rank's rows that the update uses."""
    zero_var_frac: float


def _concat_generated(parts: list[tuple]) -> tuple:
    """Concatenate per-round ``GRPOTrainer._generate`` outputs along the rows."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra = [], [], [], [], [], defaultdict(list)
    for p, c, tm, comp, lp, ex, _images, _tool_images in parts:
        prompt_ids += p
        completion_ids += c
        tool_mask += tm if tm is not None else [[1] * len(ids) for ids in c]
        completions += comp
        logprobs = None if lp is None else (logprobs or []) + list(lp)
        for key, values in ex.items():
            extra[key] += values if isinstance(values, list) else [values] * len(c)
    return prompt_ids, completion_ids, tool_mask, completions, logprobs, dict(extra), None, []


class VigorGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose generation step runs a vigor allocation strategy (module doc).

    ``args`` is a :class:`VigorGRPOConfig`. Rows of ``train_dataset`` are prompts keyed by
    ``uid_column`` (default ``uid``; the row index when the column is absent). Reward
    functions get every dataset column plus ``rollout_index``.
    """

    def __init__(self, *args: Any, uid_column: str = "uid", **kwargs: Any):
        super().__init__(*args, **kwargs)
        a = self.args
        if not isinstance(a, VigorGRPOConfig):
            raise TypeError("VigorGRPOTrainer needs args=VigorGRPOConfig(...)")
        if a.steps_per_generation != 1:
            raise ValueError(
                f"steps_per_generation={a.steps_per_generation}: VigorGRPOTrainer needs 1 "
                "(gradient_accumulation_steps=1); a step's rollouts are one variable-size batch"
            )
        if a.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("VigorGRPOTrainer needs multi_objective_aggregation='sum_then_normalize'")
        data = self.train_dataset
        uids = [str(u) for u in data[uid_column]] if uid_column in data.column_names else [
            str(i) for i in range(len(data))]
        if len(set(uids)) != len(uids):
            raise ValueError(f"train_dataset: column {uid_column!r} repeats a uid; uids must be unique")
        self.vigor_index = {u: i for i, u in enumerate(uids)}
        self.vigor_data = DataOrder(uids, a.seed)
        self.allocator = make_allocator(a.allocation, a.prompts_per_step, a.seed)
        self.vigor_run_dir = Path(a.vigor_run_dir or a.output_dir)
        self.vigor_totals = {"rollouts": 0, "tokens": 0}
        self._replay: _StepRollouts | None = None
        if self.accelerator.is_main_process:
            if (self.vigor_run_dir / "allocation.jsonl").exists():
                raise ValueError(f"{self.vigor_run_dir} already holds allocation.jsonl; use a new output_dir")
            write_run_files(self.vigor_run_dir, config={
                "allocation": a.allocation.model_dump(mode="json"),
                "train": {"seed": a.seed, "prompts_per_step": a.prompts_per_step, "steps": a.max_steps},
                "trainer": {"kind": "trl", "loss_type": a.loss_type, "scale_rewards": a.scale_rewards,
                            "processes": self.accelerator.num_processes},
            })

    # ------------------------------------------------------------------ TRL's hooks
    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        if not self.model.training:  # evaluation keeps TRL's fixed groups
            return super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        step = self._run_rounds()
        self._replay = step
        try:
            with self._one_generation_per_row():
                out = super()._generate_and_score_completions(step.rows)
        finally:
            self._replay = None
        rank = self.accelerator.process_index
        keys = [key for key, _ in step.layout.rows[rank]]
        adv = [step.advantages.get(k, 0.0) if use else 0.0 for k, use in zip(keys, step.loss_rows)]
        out["advantages"] = torch.tensor(adv, dtype=out["advantages"].dtype, device=out["advantages"].device)
        self._fix_logged_advantages(step)
        self._metrics["train"]["frac_reward_zero_std"][-1] = step.zero_var_frac
        self._metrics["train"]["vigor/step_seconds"].append(time.perf_counter() - t0)
        return out

    def _generate(self, prompts: list) -> tuple:
        if self._replay is not None:
            return self._replay.generated
        return super()._generate(prompts)

    def _calculate_rewards(self, inputs: list, prompts: list, completions: list, completion_ids_list: list):
        if self._replay is not None:
            return self._replay.per_func.to(self.accelerator.device)
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    @contextlib.contextmanager
    def _one_generation_per_row(self) -> Iterator[None]:
        """Rows are single rollouts: TRL's generation (vLLM server dedupe included) and
        advantage code must see groups of 1 (our advantages replace TRL's zeros)."""
        saved, self.num_generations = self.num_generations, 1
        try:
            yield
        finally:
            self.num_generations = saved

    # ------------------------------------------------------------------ the rounds
    def _run_rounds(self) -> _StepRollouts:
        """One step's allocation: ask, generate this rank's share, gather rewards, tell."""
        step = self.state.global_step + 1
        layout = StepLayout(self.accelerator.num_processes)
        self.vigor_data.new_step()
        self.allocator.start_step(step, self.vigor_data.draw)
        rank = self.accelerator.process_index
        rows, generated, per_func, rewards, lengths, round_sizes = [], [], [], {}, [], []
        while requests := self.allocator.ask():
            flat = [r.uid for r in requests for _ in range(r.n)]
            round_rows = layout.add_round(flat)
            mine = [self._row(key) for key, _ in round_rows[rank]]
            out, gathered, comp_len = self._generate_round(mine)
            told: dict[str, list[float]] = defaultdict(list)
            width = len(round_rows[0])
            combined = self._combined(gathered).view(layout.ranks, width)
            for r, chunk in enumerate(round_rows):
                for j, (key, real) in enumerate(chunk):
                    if real:
                        rewards[key] = float(combined[r, j])
                        told[key[0]].append(rewards[key])
            self._check_rewards(step, len(round_sizes) + 1, told)
            self.allocator.tell(dict(told))
            real = torch.tensor([[real for _, real in chunk] for chunk in round_rows])
            gathered = gathered.view(layout.ranks, width, -1).masked_fill(~real[..., None], float("nan"))
            rows += mine
            generated.append(out)
            per_func.append(gathered)
            lengths.append(comp_len.view(layout.ranks, width)[real])
            round_sizes.append(len(flat))
        result = self.allocator.finish()
        return self._finish_step(step, layout, rows, generated, per_func, rewards, result, lengths, round_sizes)

    def _row(self, key: Key) -> dict:
        uid, index = key
        return {**self.train_dataset[self.vigor_index[uid]], ROLLOUT_INDEX: index}

    def _generate_round(self, rows: list[dict]) -> tuple[tuple, torch.Tensor, torch.Tensor]:
        """This rank's rows through TRL's generation and reward functions; the rewards and
        completion lengths of every rank (TRL gathers them; the widths are equal)."""
        prompts = [row["prompt"] for row in rows]
        with self._one_generation_per_row():
            out = super()._generate(prompts)
        completion_ids, completions, extra = out[1], out[3], out[5]
        for i, row in enumerate(rows):
            for key, values in extra.items():
                row[key] = values[i] if isinstance(values, list) else values
        gathered = super()._calculate_rewards(rows, prompts, completions, completion_ids)
        lengths = torch.tensor([len(c) for c in completion_ids], device=self.accelerator.device)
        return out, gathered.float().cpu(), self.accelerator.gather(lengths).cpu()

    def _combined(self, per_func: torch.Tensor) -> torch.Tensor:
        """TRL's weighted sum of the reward functions (its sum_then_normalize reward)."""
        return (per_func * self.reward_weights.cpu().unsqueeze(0)).nansum(dim=1)

    def _check_rewards(self, step: int, round_index: int, told: Mapping[str, list[float]]) -> None:
        bad = [r for values in told.values() for r in values if not 0.0 <= r <= 1.0]
        if bad:
            raise ValueError(
                f"step {step} round {round_index}: reward {bad[0]} outside [0, 1] (weighted sum of "
                f"{', '.join(self.reward_func_names)}); allocation needs rewards in [0, 1]"
            )

    def _finish_step(self, step: int, layout: StepLayout, rows: list[dict], generated: list,
                     per_func: list[torch.Tensor], rewards: dict[Key, float], result: Any,
                     lengths: list[torch.Tensor], round_sizes: list[int]) -> _StepRollouts:
        """Advantages over the update's uid groups (vigor_cli.grpo), the loss rows, the
        metrics and the allocation record."""
        used = [(uid, i) for uid, indices in result.groups.items() for i in indices]
        adv = grpo.compute_advantages([rewards[k] for k in used], [k[0] for k in used],
                                      _scale(self.args.scale_rewards))
        advantages = dict(zip(used, adv.tolist()))
        groups: dict[str, list[float]] = defaultdict(list)
        for uid, i in used:
            groups[uid].append(rewards[(uid, i)])
        zero_var = sum(1 for g in groups.values() if max(g) == min(g)) / len(groups) if groups else 0.0
        rank = self.accelerator.process_index
        loss_rows = [real and key in advantages for key, real in layout.rows[rank]]
        tokens = int(torch.cat(lengths).sum()) if lengths else 0
        self._log_step(step, layout, rewards, zero_var, len(groups), tokens, round_sizes, result.record)
        return _StepRollouts(layout, rows, _concat_generated(generated),
                             torch.cat(per_func, dim=1).flatten(0, 1), advantages, loss_rows, zero_var)

    def _log_step(self, step: int, layout: StepLayout, rewards: dict[Key, float], zero_var: float,
                  groups: int, tokens: int, round_sizes: list[int], record: dict) -> None:
        """TRL metrics (vigor/...) and, on the main process, vigor's run-directory lines."""
        n = sum(round_sizes)
        self.vigor_totals["rollouts"] += n
        self.vigor_totals["tokens"] += tokens
        m = self._metrics["train"]
        m["vigor/rollouts_per_step"].append(n)
        m["vigor/rollouts_cumulative"].append(self.vigor_totals["rollouts"])
        m["vigor/rounds"].append(len(round_sizes))
        for t, size in enumerate(round_sizes, start=1):
            m[f"vigor/round_{t}_rollouts"].append(size)
        m["vigor/zero_var_frac"].append(zero_var)
        m["vigor/balance_duplicates"].append(sum(len(r) for r in layout.rows) - n)
        m["vigor/rank_rollouts_spread"].append(max(layout.spent) - min(layout.spent))
        if not self.accelerator.is_main_process:
            return
        values = torch.tensor(list(rewards.values()), dtype=torch.float64)
        for entry in record.get("prompts", []):
            entry["text"] = _prompt_text(self.train_dataset[self.vigor_index[entry["uid"]]]["prompt"])[:200]
        metrics = {
            "step": step, "rollouts/step": n, "rollouts/cumulative": self.vigor_totals["rollouts"],
            "tokens/step": tokens, "tokens/cumulative": self.vigor_totals["tokens"],
            "reward/mean": float(values.mean()) if n else 0.0,
            "reward/std": float(values.std(unbiased=False)) if n else 0.0,
            "groups/count": groups, "groups/zero_var_frac": zero_var,
            "rollouts/per_rank": list(layout.spent),
        }
        write_run_files(self.vigor_run_dir, allocation={"step": step, **record}, metrics=metrics)

    def _fix_logged_advantages(self, step: _StepRollouts) -> None:
        """TRL logged its (zero) advantages for the completions table; put ours there."""
        flat = [step.advantages.get(key, 0.0) for rank_rows in step.layout.rows for key, _ in rank_rows]
        logged = self._logs["advantages"]  # a deque of TRL's generation_batch_size, newest last
        n = min(len(logged), len(flat))
        for i in range(1, n + 1):
            logged[-i] = flat[-i]


def _scale(scale_rewards: Any) -> str:
    """TRL's scale_rewards as vigor's grpo.scale_rewards name (the same three names)."""
    if scale_rewards is True:
        return "group"
    if scale_rewards is False:
        return "none"
    return str(scale_rewards)


# --------------------------------------------------------------------------- evaluation
class HeldOutEval(TrainerCallback):
    """Held-out accuracy as ``vigor train`` measures it (vigor_cli.evaluation, greedy),
    at the start, every ``every`` steps and at the end, written to metrics.jsonl."""

    def __init__(self, trainer: VigorGRPOTrainer, task: Any, examples: list, max_new_tokens: int,
                 every: int = 0, samples: int = 1):
        self.trainer, self.task, self.examples = trainer, task, examples
        self.max_new_tokens, self.every, self.samples = max_new_tokens, every, samples
        self.results: dict[int, float] = {}

    def evaluate(self, step: int) -> float:
        from vigor_cli.evaluation import evaluate_examples
        from vigor_cli.rollout.base import SamplingParams
        from vigor_cli.rollout.hf import HFEngine
        from vigor_cli.trainer import derive_seed

        tr = self.trainer
        engine = HFEngine(tr.accelerator.unwrap_model(tr.model), tr.processing_class)
        params = SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=self.max_new_tokens,
                                seed=derive_seed(tr.args.seed, "eval", step))
        result = evaluate_examples(engine, self.task, tr.processing_class, self.examples, self.samples,
                                   params, self.task.name)
        self.results[step] = result.accuracy
        write_run_files(tr.vigor_run_dir, metrics={
            "step": step, "eval/accuracy": result.accuracy, f"eval/{self.task.name}/accuracy": result.accuracy,
            "eval/samples": len(result.samples), "rollouts/cumulative": tr.vigor_totals["rollouts"],
            "tokens/cumulative": tr.vigor_totals["tokens"],
        })
        return result.accuracy

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero and state.global_step == 0:
            self.evaluate(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        due = self.every and state.global_step % self.every == 0
        if state.is_world_process_zero and (due or state.global_step == state.max_steps):
            self.evaluate(state.global_step)


# --------------------------------------------------------------------------- from a vigor config
LOSS_TYPES = {"dapo": "dapo", "grpo": "grpo", "dr_grpo": "dr_grpo"}
"""vigor's grpo.loss_agg -> TRL's loss_type (prompt_mean has no TRL counterpart)."""


def trl_args(cfg: Any, output_dir: str | Path, **overrides: Any) -> VigorGRPOConfig:
    """A :class:`VigorGRPOConfig` with a vigor ``RunConfig``'s allocation, prompts per step,
    seed, steps, optimiser, clip range, KL, sampling and loss aggregation; ``overrides`` are
    TRL keys set last (``use_vllm=True``, ``vllm_mode="server"``)."""
    g, s, t = cfg.grpo, cfg.sampling, cfg.train
    if g.loss_agg not in LOSS_TYPES:
        raise ValueError(f"grpo.loss_agg={g.loss_agg!r} has no TRL loss_type; use one of {sorted(LOSS_TYPES)}")
    from vigor_cli.models import gradient_checkpointing_on
    from vigor_cli.tracking import require

    require(t.report_to)  # a missing dashboard package: one line, before anything loads
    group = cfg.allocation.group_size
    checkpointing = gradient_checkpointing_on(cfg.model, _trl_device(overrides))  # as vigor train decides it
    keys = dict(
        gradient_checkpointing=checkpointing, output_dir=str(output_dir), max_steps=t.steps, seed=t.seed, prompts_per_step=t.prompts_per_step,
        vigor=cfg.allocation.model_dump(), per_device_train_batch_size=group, num_generations=group,
        learning_rate=g.learning_rate, lr_scheduler_type="constant_with_warmup", warmup_steps=g.warmup_steps,
        weight_decay=g.weight_decay, max_grad_norm=g.max_grad_norm, epsilon=g.epsilon,
        epsilon_high=g.epsilon_high, beta=g.beta, loss_type=LOSS_TYPES[g.loss_agg],
        scale_rewards=g.scale_rewards, num_iterations=g.mu, mask_truncated_completions=g.mask_truncated,
        temperature=s.temperature or 1.0, top_p=s.top_p, max_completion_length=s.max_new_tokens,
        logging_steps=1, save_strategy="no", disable_tqdm=True,
        report_to=list(t.report_to) or "none",  # train.report_to: TRL's own dashboard callbacks
    )
    keys.update(overrides)
    return VigorGRPOConfig(**keys)


def _trl_device(overrides: dict) -> torch.device:
    """Where TRL will train: the CPU when asked (``use_cpu``) or without CUDA, else the GPU."""
    cpu = overrides.get("use_cpu", False) or not torch.cuda.is_available()
    return torch.device("cpu" if cpu else "cuda")


def build_trainer(cfg: Any, output_dir: str | Path, **overrides: Any) -> tuple[VigorGRPOTrainer, HeldOutEval, Any]:
    """The trainer for a vigor ``RunConfig`` (model, task, reward through the task's verifier,
    held-out evaluation as `vigor train` schedules it); returns (trainer, evaluation, task)."""
    from transformers import AutoModelForCausalLM

    from vigor_cli.models import load_tokenizer, pick_dtype, resolve_model_path
    from vigor_cli.tasks import get_task

    args = trl_args(cfg, output_dir, **overrides)  # bad keys fail before anything loads
    m = cfg.model
    task = get_task(cfg.task, workers=cfg.train.reward_workers)
    try:  # the task's data and reward functions are read before the model: a bad one fails first
        task.train_examples()
        examples = task.eval_examples(cfg.task.eval_sets[0] if cfg.task.eval_sets else None)
        path = resolve_model_path(m.name_or_path)
        tok = load_tokenizer(m, path)  # vigor's: pad-token fallback, enable_thinking
        dtype = pick_dtype(m, _trl_device(overrides))
        model = AutoModelForCausalLM.from_pretrained(path, revision=m.revision, dtype=dtype)
    except BaseException:
        task.close()
        raise
    peft_config = None
    if m.lora.enabled:
        from peft import LoraConfig

        peft_config = LoraConfig(r=m.lora.r, lora_alpha=m.lora.alpha, lora_dropout=m.lora.dropout,
                                 target_modules=m.lora.target_modules, task_type="CAUSAL_LM")
    trainer = VigorGRPOTrainer(model=model, reward_funcs=[task_reward(task)], args=args,
                               train_dataset=task_dataset(task, tok, cfg.task.max_prompt_tokens),
                               processing_class=tok, peft_config=peft_config)
    held_out = HeldOutEval(trainer, task, examples[: cfg.train.eval_limit] if cfg.train.eval_limit else examples,
                           max_new_tokens=cfg.sampling.max_new_tokens, every=cfg.train.eval_every,
                           samples=cfg.train.eval_samples)
    trainer.add_callback(held_out)
    return trainer, held_out, task


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors (an unknown flag, a bad or missing value) raise
    ``UserError``: one line and exit 2 through :func:`main`, not the usage block."""

    def error(self, message: str) -> NoReturn:
        from vigor_cli.errors import UserError

        raise UserError(f"{message} (see --help)")


def _parser() -> _Parser:
    from vigor_cli.commands.train import DEFAULT_CONFIG

    ap = _Parser(prog="python -m vigor_cli.integrations.trl", description=main.__doc__)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="vigor run config (YAML)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override a key: section.key=value")
    ap.add_argument("--output-dir", required=True, help="TRL's output_dir; vigor's run files go here too")
    ap.add_argument("--vllm-mode", choices=["server", "colocate"], help="generate with TRL's vLLM integration")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU (TRL's use_cpu)")
    ap.add_argument("--trl", dest="trl_keys", action="append", default=[],
                    help="set a GRPOConfig key last: key=value (YAML), e.g. vllm_server_host=10.0.0.5")
    own = ap.add_argument_group("your own task (as in vigor train; --data selects task 'custom')")
    own.add_argument("--data", help="task.data: your training data (file, folder or hub org/name[:split])")
    own.add_argument("--eval-data", help="task.eval_data: held-out data")
    own.add_argument("--reward", action="append", help="task.rewards (repeatable): a built-in name or FILE.py:FUNC")
    own.add_argument("--reward-weights", help="task.reward_weights: comma-separated, one per --reward")
    own.add_argument("--system-prompt", help="task.system_prompt")
    own.add_argument("--prompt-field", help="task.fields.prompt")
    own.add_argument("--answer-field", help="task.fields.answer")
    own.add_argument("--prompt-template", help="task.prompt_template")
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


def _train(a: argparse.Namespace) -> int:
    from vigor_cli.errors import UserError, user_message

    try:
        from vigor_cli.commands.train import FLAG_OF_KEY, own_task_overrides

        own = own_task_overrides(data=a.data, eval_data=a.eval_data, reward=a.reward,
                                 reward_weights=a.reward_weights, system_prompt=a.system_prompt,
                                 prompt_field=a.prompt_field, answer_field=a.answer_field,
                                 prompt_template=a.prompt_template)
        cfg = build_config(a.config, overrides=own, sets=a.sets, flags=FLAG_OF_KEY)
        extra: dict[str, Any] = {"use_cpu": a.cpu}
        for text in a.trl_keys:
            key, value = parse_override(text)
            extra[key] = value
        if a.vllm_mode:
            extra.update(use_vllm=True, vllm_mode=a.vllm_mode)
        _check_output_dirs(a.output_dir, extra)
        trainer, held_out, task = build_trainer(cfg, a.output_dir, **extra)
    except (ValueError, TypeError) as e:  # ConfigError is a ValueError; a bad --trl key a TypeError
        raise UserError(user_message(e) or str(e).splitlines()[0]) from None
    try:
        trainer.train()
    finally:
        task.close()
    if trainer.accelerator.is_main_process:
        print(json.dumps({"output_dir": a.output_dir, "rollouts": trainer.vigor_totals["rollouts"],
                          "held_out": held_out.results}))
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
    "StepLayout",
    "VigorGRPOConfig",
    "VigorGRPOTrainer",
    "allocation_config",
    "build_trainer",
    "main",
    "trl_args",
    "split_requests",
    "task_dataset",
    "task_reward",
    "write_run_files",
]


if __name__ == "__main__":
    raise SystemExit(main())

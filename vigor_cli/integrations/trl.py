"""The allocation strategies inside TRL's ``GRPOTrainer``: one GPU, several, several nodes.

``pip install 'vigor[trl]'`` (TRL 1.16). :class:`VigorGRPOTrainer` runs each step's rollout
phase through vigor's rollout core (vigor_cli/rollout_core.py, the copy `vigor train` runs),
with TRL's generation and reward functions as the round runner, then replays the step through
TRL's scoring pass so that TRL's log-probs, KL and loss train on it. docs/scaling.md has the
commands, how the ranks share a step, the constraints TRL imposes and what is tested.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NoReturn, Sequence

import torch

try:
    from transformers import TrainerCallback
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"vigor_cli.integrations.trl needs TRL: pip install 'vigor[trl]' ({e})"
    ) from None

from vigor_cli import health
from vigor_cli.allocation import make_allocator
from vigor_cli.allocation.base import Request
from vigor_cli.config import parse_override
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams
from vigor_cli.rollout_core import DataOrder, Generated, RolloutBatch, reward_range, run_rounds
from vigor_cli.settings import build_config
from vigor_cli.reward_log import forward_logs
from vigor_cli.rewards import _completion_text
from vigor_cli.tasks.base import Score, score_once
from vigor_cli.integrations import trl_checks, trl_metrics, trl_update
from vigor_cli.integrations.trl_config import (VigorGRPOConfig, _trl_device, allocation_config, model_load_kwargs,
                                               trl_args)
from vigor_cli.integrations.trl_metrics import write_run_files

ROLLOUT_INDEX = "rollout_index"
"""Column added to every row handed to reward functions: the rollout's index among its
prompt's rollouts of the step (generation order across rounds)."""



# --------------------------------------------------------------------------- ranks
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
    """Which rank generates which rollout of a step: decided on every rank from the same
    inputs (the allocator's requests and the gathered token counts), so identically.

    Each round's rollouts are dealt to the ranks by estimated tokens (prompt plus expected
    completion), the costliest first, each to the rank with the fewest tokens so far in the
    step among those with room; a rank's room is its share of the round's count
    (:func:`split_requests`). So a prompt's rollouts spread over the ranks, and the ranks'
    tokens stay close as well as their rollout counts."""

    ranks: int
    rows: list[list[tuple[Key, bool]]] = field(default_factory=list)
    """Per rank: (key, real) per row, rounds appended; real=False marks a balancing copy."""
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    spent: list[int] = field(default_factory=list)
    """Real rollouts per rank this step."""
    tokens: list[int] = field(default_factory=list)
    """Measured tokens (prompt + completion) of the real rollouts per rank this step."""

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.ranks)]
        self.spent = [0] * self.ranks
        self.tokens = [0] * self.ranks

    def add_round(self, flat: Sequence[str], cost: Callable[[str], float] = lambda uid: 0.0
                  ) -> tuple[list[Key], list[list[tuple[Key, bool]]]]:
        """Lay out one round's requests (a uid per rollout, in request order): the round's keys
        in request order, and each rank's rows of the round (request order within a rank),
        padded to the longest with copies of its last row."""
        keys = []
        for uid in flat:
            keys.append((uid, self.counts[uid]))
            self.counts[uid] += 1
        sizes = split_requests(len(keys), self.spent)
        load = [float(t) for t in self.tokens]
        mine: list[list[int]] = [[] for _ in range(self.ranks)]
        costs = {uid: cost(uid) for uid in set(flat)}  # once per prompt of the round, not per rollout
        for i in sorted(range(len(keys)), key=lambda i: -costs[keys[i][0]]):  # stable: ties in request order
            r = min((r for r in range(self.ranks) if len(mine[r]) < sizes[r]), key=lambda r: (load[r], r))
            mine[r].append(i)
            load[r] += costs[keys[i][0]]
        width, out = max(sizes), []
        for r in range(self.ranks):
            chunk = [(keys[i], True) for i in sorted(mine[r])]
            filler = chunk[-1][0] if chunk else keys[0]
            chunk += [(filler, False)] * (width - len(chunk))
            out.append(chunk)
            self.rows[r].extend(chunk)
            self.spent[r] += len(mine[r])
        return keys, out


def round_digest(step: int, round_index: int, requests: Sequence[Request]) -> int:
    """A signed 64-bit hash of a round's requests, for the ranks to compare."""
    text = json.dumps([step, round_index, [[r.uid, r.n] for r in requests]])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little", signed=True)


class RankDisagreement(RuntimeError):
    """The ranks' allocators asked for different rollouts: their selection is no longer one."""


def check_agreement(digests: Sequence[int], step: int, round_index: int) -> None:
    """Raise :class:`RankDisagreement` (on every rank: each compares the gathered hashes)
    unless every rank's round hash is the same."""
    if len(set(digests)) > 1:
        first = digests[0]
        apart = [r for r, d in enumerate(digests) if d != first]
        raise RankDisagreement(
            f"step {step} round {round_index + 1}: rank(s) {apart} asked for other rollouts than rank 0 "
            f"(request hashes by rank: {list(digests)}); every rank must run the same allocation config, "
            "seed, train_dataset order and reward functions"
        )


# --------------------------------------------------------------------------- verifiers
def _graded_scores(task: Any, uid_column: str, env: Any = None) -> Callable[..., list[Any]]:
    """The task's Scores for a TRL reward call's completions: each distinct (uid, completion)
    of a training step graded once (a reward is a function of the two alone; repeats are
    common, a sandbox run each for code), for every function of the task together. Under an
    environment an episode's final turn is graded against the example it names
    (code-feedback: all of a training problem's tests)."""
    examples = {ex.uid: ex if env is None else env.scoring_example(ex) for ex in task.train_examples()}
    graded: dict[tuple[str, str], Any] = {}
    seen_step: list[Any] = [None]

    def scores(prompts: list, completions: list, _forward: bool = True, **kwargs: Any) -> list[Any]:
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        if step is None or step != seen_step[0]:
            graded.clear()
            seen_step[0] = step
        if kwargs.get("trainer_state") is not None:  # TRL's, for the task's reward functions
            task.trainer_state = kwargs["trainer_state"]
        texts = [_completion_text(c) for c in completions]
        out = score_once(task, examples, list(zip(kwargs[uid_column], texts)), graded, kwargs.get("completion_ids"))
        if step is None:  # no step to key the memo by: nothing is kept across calls
            graded.clear()
        if _forward:  # what the functions logged, to TRL's log_metric and log_extra (once per call)
            forward_logs(out, task.logged_metrics(), kwargs)
        return out

    return scores


def task_reward(task: Any, uid_column: str = "uid", env: Any = None) -> Any:
    """A TRL reward function scoring with a vigor task's verifier (math, code: the real
    verifiers and sandbox): rows carry the example's uid in ``uid_column``; graded as `vigor
    train` grades (:func:`_graded_scores`). A completion the task cannot score gets None
    (TRL's convention)."""
    scores = _graded_scores(task, uid_column, env)

    def reward(prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        return [None if s.reward is None else float(s.reward) for s in scores(prompts, completions, **kwargs)]

    reward.__name__ = f"{task.name}_verifier"
    return reward


def task_reward_funcs(task: Any, uid_column: str = "uid", env: Any = None) -> tuple[list[Callable], list[float] | None]:
    """The TRL reward functions of a task and their weights: one per reward function of a
    task that combines several (the custom task's ``--reward``s, each logged by TRL under its
    own name, weighted as ``--reward-weights``: TRL's weighted sum over the ones that scored
    is vigor's), else the task's verifier alone (:func:`task_reward`, weights None: TRL's)."""
    parts = [r.name for r in getattr(task, "rewards", [])]
    if len(parts) < 2:
        return [task_reward(task, uid_column, env)], None
    whole = task_reward_components(task, uid_column, env)
    funcs = []
    for name in parts:
        def part(prompts: list, completions: list, _name: str = name, **kwargs: Any) -> list[float | None]:
            return [c.get(_name) for c in whole(prompts, completions, _forward=_name == parts[0], **kwargs)]

        part.__name__ = name
        funcs.append(part)
    return funcs, list(task.weights)


def task_reward_components(task: Any, uid_column: str = "uid", env: Any = None) -> Callable[..., list[dict]]:
    """Each completion's per-function values (``Score.components``), every distinct (uid,
    completion) of a step graded once for all the functions together."""
    scores = _graded_scores(task, uid_column, env)

    def components(prompts: list, completions: list, _forward: bool = True, **kwargs: Any) -> list[dict]:
        return [s.components for s in scores(prompts, completions, _forward, **kwargs)]

    return components


def task_dataset(task: Any, tokenizer: Any, max_prompt_tokens: int | None = None, env: Any = None) -> Any:
    """The task's training examples as a ``datasets.Dataset`` of (prompt, uid) rows, the
    prompt rendered as ``vigor train`` renders it (under an environment, with its tools); the
    prompts it leaves out left out as it does (vigor_cli/train_data.fit_prompts: longer than
    ``max_prompt_tokens``, or no token)."""
    from datasets import Dataset

    from vigor_cli.train_data import fit_prompts

    examples = task.train_examples()
    if env is None:
        kept, _, _ = fit_prompts(max_prompt_tokens or 2**62, task, tokenizer, examples)
        return Dataset.from_list([{"prompt": task.render_prompt(ex, tokenizer), "uid": ex.uid}
                                  for ex in examples if ex.uid in kept])
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.evaluation import encode_prompt

    rows = []
    for ex in examples:
        text = render_prompt(task, ex, tokenizer, env)
        ids = encode_prompt(tokenizer, text)
        if ids and (max_prompt_tokens is None or len(ids) <= max_prompt_tokens):
            rows.append({"prompt": text, "uid": ex.uid})
    return Dataset.from_list(rows)


# --------------------------------------------------------------------------- the step's rounds
def _concat_generated(parts: list[tuple], loss_rows: Sequence[bool]) -> tuple:
    """Per-round ``GRPOTrainer._generate`` outputs concatenated along the rows, with a zero
    loss mask (``tool_mask``) on the rows outside the update: TRL's token normaliser
    (``num_items_in_batch``) and its row means then count the update's rows only."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra = [], [], [], [], [], defaultdict(list)
    for p, c, tm, comp, lp, ex, _images, _tool_images in parts:
        prompt_ids += p
        completion_ids += c
        tool_mask += tm if tm is not None else [[1] * len(ids) for ids in c]
        completions += comp
        logprobs = None if lp is None else (logprobs or []) + list(lp)
        for key, values in ex.items():
            extra[key] += values if isinstance(values, list) else [values] * len(c)
    tool_mask = [mask if use else [0] * len(mask) for mask, use in zip(tool_mask, loss_rows, strict=True)]
    return prompt_ids, completion_ids, tool_mask, completions, logprobs, dict(extra), None, []


class TRLRounds:
    """The TRL path's rounds (vigor_cli/rollout_core.RoundRunner). Every rank runs the
    same allocator and sees every rank's rewards, so each round's requests are the same on
    every rank (a gathered hash checks it); the round is laid out over the ranks
    (:class:`StepLayout`), each rank generates its rows with TRL's generation and scores
    them with TRL's reward functions, which gather every rank's rewards."""

    def __init__(self, trainer: "VigorGRPOTrainer"):
        self.tr = trainer
        self.layout = StepLayout(trainer.accelerator.num_processes)
        self.rank = trainer.accelerator.process_index
        self.rows: list[dict] = []
        """This rank's rows (dataset row + rollout index), rounds concatenated."""
        self.outputs: list[tuple] = []
        """This rank's ``_generate`` outputs per round (TRL's tuple of 8)."""
        self.per_func: list[torch.Tensor] = []
        """Per round, every rank's per-function rewards [ranks, width, functions], NaN for copies."""
        self._round: tuple | None = None
        self._where: tuple[int, int] = (0, 0)
        self.failed = torch.zeros(0, dtype=torch.bool)
        """Per rank and row of the round: an episode the environment failed (left unscored)."""
        self.texts: dict[Key, str] = {}
        """This rank's completion texts by row key."""

    def generate(self, requests: Sequence[Request], step: int, round_index: int) -> list[Generated]:
        tr = self.tr
        tr.check_ranks_agree(step, round_index, requests)
        keys, chunks = self.layout.add_round([r.uid for r in requests for _ in range(r.n)], tr.rollout_cost)
        mine = [tr._row(key) for key, _ in chunks[self.rank]]
        out, measured = tr._generate_round(mine)
        width = len(chunks[0])
        measured = measured.view(self.layout.ranks, width, 4).tolist()
        self.failed = torch.tensor([[bool(row[3]) for row in rank_rows] for rank_rows in measured])
        sizes: dict[Key, tuple[int, int, bool]] = {}
        for r, chunk in enumerate(chunks):
            for (key, real), (prompt_len, completion_len, truncated, _) in zip(chunk, measured[r]):
                if real:
                    sizes[key] = (int(prompt_len), int(completion_len), bool(truncated))
                    self.layout.tokens[r] += int(prompt_len) + int(completion_len)
        tr.observe_sizes(sizes)
        self._round = (chunks, mine, out)
        self._where = (step, round_index)
        for (key, real), completion in zip(chunks[self.rank], out[3]):
            if real:  # this rank's completions, for the health checks that read text
                self.texts[key] = _completion_text(completion)
        episodes = tr.vigor_episodes.summaries(chunks, self.rank) if tr.vigor_episodes is not None else {}
        return [Generated(key[0], key, sizes[key][1], sizes[key][2], episodes.get(key)) for key in keys]

    def score(self, generated: Sequence[Generated]) -> list[Score]:
        tr = self.tr
        chunks, mine, out = self._round
        per_func = tr._score_round(mine, out)  # [ranks * width, functions], every rank's
        width = len(chunks[0])
        real = torch.tensor([[is_real for _, is_real in chunk] for chunk in chunks])
        kept = real & ~self.failed  # an episode the environment failed is not scored
        per_func = per_func.view(self.layout.ranks, width, -1).masked_fill(~kept[..., None], float("nan"))
        scores: dict[Key, Score] = {}
        names = tr.reward_func_names
        weights = tr.reward_weights.cpu()
        # the weighted sum over the functions that scored (nansum), and which rollouts none
        # scored, for the whole round at once; then plain floats per rollout
        rewards = (per_func * weights).nansum(-1).tolist()
        unscored = torch.isnan(per_func).all(-1).tolist()
        values = per_func.tolist()
        for r, chunk in enumerate(chunks):
            for j, (key, is_real) in enumerate(chunk):
                if not is_real:
                    continue
                parts = {n: (None if math.isnan(v) else v) for n, v in zip(names, values[r][j])}
                scores[key] = Score(None if unscored[r][j] else rewards[r][j], components=parts)
        self.rows += mine
        self.outputs.append(out)
        self.per_func.append(per_func)
        return [scores[g.rollout] for g in generated]

    def replay(self, batch: RolloutBatch) -> tuple[tuple, torch.Tensor, list[float]]:
        """This rank's whole step for TRL's scoring pass: its ``_generate`` outputs with the
        loss mask, every rank's per-function rewards (rank-major, as TRL gathers them) and
        this rank's advantages (0 outside the update)."""
        by_key = {(s.uid, s.index): s for s in batch.generated}
        mine = self.layout.rows[self.rank]
        use = [real and by_key[key].in_update for key, real in mine]
        advantages = [by_key[key].advantage if u else 0.0 for (key, _), u in zip(mine, use)]
        per_func = torch.cat(self.per_func, dim=1).flatten(0, 1)
        return _concat_generated(self.outputs, use), per_func, advantages


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
        self.vigor_totals = {"rollouts": 0, "tokens": 0}
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
        self.vigor_health = health.RunHealth(a.health_view, {}, a.vllm_max_model_length or context)
        if self.accelerator.is_main_process:
            if (self.vigor_run_dir / "allocation.jsonl").exists():
                raise ValueError(f"{self.vigor_run_dir} already holds allocation.jsonl; use a new output_dir")
            write_run_files(self.vigor_run_dir, config={
                "allocation": a.allocation.model_dump(mode="json"),
                "train": {"seed": a.seed, "prompts_per_step": a.prompts_per_step,
                          "steps": a.max_steps // max(1, a.num_iterations)},
                "trainer": {"kind": "trl", "loss_type": a.loss_type, "scale_rewards": a.scale_rewards,
                            "processes": self.accelerator.num_processes},
            })

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
        batch = run_rounds(self.vigor_step, self.allocator, self.vigor_data, rounds, _scale(self.args.scale_rewards),
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

    def _score_round(self, rows: list[dict], out: tuple) -> torch.Tensor:
        """TRL's reward functions on this rank's rows; every rank's, gathered [rows, functions].
        Episodes: the functions get their environment instances (``environments=``), which
        are released after."""
        prompts = [row["prompt"] for row in rows]
        if self.vigor_episodes is None:
            return super()._calculate_rewards(rows, prompts, out[3], out[1]).float().cpu()
        self.environments = self.vigor_episodes.environments()
        try:
            return super()._calculate_rewards(rows, prompts, out[3], out[1]).float().cpu()
        finally:
            self.environments = None
            self.vigor_episodes.release()

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


# --------------------------------------------------------------------------- evaluation
class TRLEngine(RolloutEngine):
    """TRL's own generation as a vigor rollout engine, for the held-out evaluation on every
    rank: its transformers path (ZeRO-3 parameters gathered, FSDP parameters summoned, ranks
    kept in step by ``generate``) or its vLLM. Every rank calls :meth:`generate` together,
    with equally many prompts (vigor_cli/evaluation.py pads the shards)."""

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

        from vigor_cli.evaluation import Shard, evaluate_sets, held_out_sampling

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
                            metrics=held.line(tr.vigor_totals["rollouts"], tr.vigor_totals["tokens"]))
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


def build_trainer(cfg: Any, output_dir: str | Path, **overrides: Any) -> tuple[VigorGRPOTrainer, HeldOutEval, Any]:
    """The trainer for a vigor ``RunConfig`` (model, task, reward through the task's verifier,
    held-out evaluation as `vigor train` schedules it); returns (trainer, evaluation, task)."""
    from transformers import AutoModelForCausalLM

    from vigor_cli.models import load_tokenizer, resolve_model_path, set_cpu_threads
    from vigor_cli.tasks import get_task
    from vigor_cli.train_data import fitted_sets

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
                        episode_limits=(EpisodeLimits(cfg.task.max_turns, cfg.completion_tokens()),
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
    from vigor_cli.commands.flags import DEFAULT_CONFIG

    ap = _Parser(prog="python -m vigor_cli.integrations.trl", description=main.__doc__)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="vigor run config (YAML)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override a key: section.key=value")
    ap.add_argument("--output-dir", required=True, help="TRL's output_dir; vigor's run files go here too")
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


def _train(a: argparse.Namespace) -> int:
    from vigor_cli.errors import UserError, user_message

    try:
        from vigor_cli.commands.flags import task_overrides
        from vigor_cli.commands.train import FLAG_OF_KEY

        own = task_overrides(vars(a))
        cfg = build_config(a.config, overrides=own, sets=a.sets, flags=FLAG_OF_KEY)
        extra: dict[str, Any] = {"use_cpu": a.cpu}
        for text in a.trl_keys:
            key, value = parse_override(text)
            extra[key] = value
        if a.vllm_mode:
            extra.update(use_vllm=True, vllm_mode=a.vllm_mode)
        _check_output_dirs(a.output_dir, extra)
        trainer, held_out, task = build_trainer(cfg, a.output_dir, **extra)
        if trainer.accelerator.is_main_process:  # the run's record of what made it (vigor_cli/provenance.py)
            from vigor_cli import provenance

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
    "write_run_files",
]


if __name__ == "__main__":
    raise SystemExit(main())

"""One training step's rollout phase, the one copy `vigor train` and the TRL path share.

:func:`run_rounds` drives the allocator round by round (ask -> generate -> score -> tell),
then sets the GRPO advantages of the rollouts the update uses, and returns a
:class:`RolloutBatch`: every rollout generated, the update's samples with their advantages
and loss mask, the allocation record and the step's metrics (:func:`step_metrics`). The two
trainers differ only in their :class:`RoundRunner` (how a round generates and scores), so a
step decides the same way on both.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch

from vigor_cli import grpo
from vigor_cli.allocation.base import Allocator, Request
from vigor_cli.episodes.base import episode_metrics
from vigor_cli.errors import UserError
from vigor_cli.report.metrics import reward_components
from vigor_cli.sandbox.pool import MEMORY_RLIMIT_ONLY
from vigor_cli.run.seeding import derive_seed
from vigor_cli.task_base import Score


# --------------------------------------------------------------------------- data order
class DataOrder:
    """Training prompts in a seeded random order, reshuffled every epoch.

    ``draw(n)`` returns the next ``n`` uids not yet drawn in the current step
    (a prompt is never in a step twice, since allocation keys groups by uid).
    """

    def __init__(self, uids: list[str], seed: int):
        self.uids = uids
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffled(0)
        self._in_step: set[str] = set()

    def _shuffled(self, epoch: int) -> list[str]:
        order = list(self.uids)
        random.Random(derive_seed(self.seed, "data", epoch)).shuffle(order)
        return order

    def new_step(self) -> None:
        self._in_step = set()

    def draw(self, n: int) -> list[str]:
        if len(self._in_step) + n > len(self.uids):
            raise UserError(
                f"a step asked for {len(self._in_step) + n} distinct prompts but the task has "
                f"{len(self.uids)}: lower train.prompts_per_step (or allocation.gen_batch_multiplier "
                "/ max_gen_batches)"
            )
        out: list[str] = []
        while len(out) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._shuffled(self.epoch)
            uid = self._order[self.position]
            self.position += 1
            if uid not in self._in_step:
                self._in_step.add(uid)
                out.append(uid)
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._shuffled(self.epoch)


# --------------------------------------------------------------------------- one step's data
@dataclass
class Generated:
    """One rollout as a runner hands it over: its prompt, its payload and its size."""

    uid: str
    rollout: Any
    """The engine's :class:`~vigor_cli.rollout.base.Rollout` (`vigor train`; an
    :class:`~vigor_cli.episodes.base.Episode` under an environment) or a row key (TRL)."""
    tokens: int
    """Tokens the model generated (an episode's model tokens)."""
    truncated: bool
    episode: Any = None
    """The TRL path's episode behind a row key (None: not an episode, or ``rollout`` is it)."""


@dataclass
class Sample:
    """One rollout with everything the update and the logs need."""

    uid: str
    rollout: Any
    reward: float | None
    """None: the rollout could not be scored (not told, not in the update, counted)."""
    reason: str
    round: int
    advantage: float = 0.0
    index: int = 0
    """Among its prompt's rollouts of the step, in generation order (scored or not)."""
    in_update: bool = False
    """Loss mask: the allocator kept it for the update (unscored rollouts never are)."""
    components: dict = field(default_factory=dict)
    grading_error: str | None = None
    extra: dict = field(default_factory=dict)
    """Columns the reward functions logged for it (TRL's log_extra)."""
    tokens: int = -1
    """Completion tokens (-1: read from ``rollout.token_ids``)."""
    truncated: bool | None = None
    details: dict = field(default_factory=dict)
    """The score's details (a code task's: the isolation level, the signs of hard-coding)."""
    episode: Any = None
    """As :attr:`Generated.episode`."""

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = len(self.rollout.token_ids)
        if self.truncated is None:
            self.truncated = bool(self.rollout.truncated)


@dataclass
class RolloutBatch:
    """What a step's allocation rounds produced (:func:`run_rounds`)."""

    samples: list[Sample]
    """The groups the allocator kept for the update, advantages set."""
    generated: list[Sample]
    """Every rollout generated this step, grouped by prompt (all counted and logged)."""
    record: dict
    """The allocator's record of the step (a line of allocation.jsonl)."""
    generate_seconds: float = 0.0
    reward_seconds: float = 0.0
    round_sizes: list[int] = field(default_factory=list)
    """Rollouts generated per round."""

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.generated)


class RoundRunner(Protocol):
    """How one round's rollouts are made and graded (`vigor train`: its engine and task; the
    TRL path: TRL's generation and reward functions, shared over the ranks)."""

    def generate(self, requests: Sequence[Request], step: int, round_index: int) -> list[Generated]:
        """Every requested rollout, in request order (``r.n`` per request)."""

    def score(self, generated: Sequence[Generated]) -> list[Score]:
        """A score per rollout; ``reward`` None for a rollout that cannot be scored."""


def run_rounds(step: int, allocator: Allocator, data: DataOrder, runner: RoundRunner,
               scale_rewards: str, reward_range: tuple[float, float] = (0.0, 1.0)) -> RolloutBatch:
    """Ask the allocator for rollouts round by round, generate and score them, tell it the
    scored rewards (an unscored rollout is not told: the allocator's indices count scored
    ones), mapped from ``reward_range`` (allocation.reward_range) onto the [0, 1] its pass
    rates live in; then the advantages of the rollouts it keeps, over groups of any size."""
    low, high = reward_range
    data.new_step()
    allocator.start_step(step, data.draw)
    scored: dict[str, list[Sample]] = defaultdict(list)  # what each prompt told, in order
    every: dict[str, list[Sample]] = defaultdict(list)
    t_gen = t_reward = 0.0
    sizes: list[int] = []
    while requests := allocator.ask():
        t0 = time.time()
        rollouts = runner.generate(requests, step, len(sizes))
        t1 = time.time()
        scores = _score(runner, rollouts, step)
        t_reward += time.time() - t1
        t_gen += t1 - t0
        told: dict[str, list[float]] = defaultdict(list)
        for g, sc in zip(rollouts, scores, strict=True):
            reward = None if sc.reward is None else float(sc.reward)
            s = Sample(g.uid, g.rollout, reward, sc.reason, len(sizes), index=len(every[g.uid]),
                       components=sc.components, grading_error=sc.grading_error, extra=sc.extra,
                       tokens=g.tokens, truncated=g.truncated, details=sc.details, episode=g.episode)
            every[g.uid].append(s)
            if reward is not None:
                if not low <= reward <= high:
                    raise UserError(_out_of_range(step, len(sizes), reward, sc, reward_range))
                scored[g.uid].append(s)
                told[g.uid].append((reward - low) / (high - low))
        allocator.tell({r.uid: told[r.uid] for r in requests})
        sizes.append(len(rollouts))
    result = allocator.finish()
    if (low, high) != (0.0, 1.0):  # the record's rewards are what the allocator was told: say how to read them
        result.record["reward_range"] = [low, high]
    samples = [scored[uid][i] for uid, indices in result.groups.items() for i in indices]
    advantages = grpo.compute_advantages([s.reward for s in samples], [s.uid for s in samples], scale_rewards)
    for s, a in zip(samples, advantages.tolist()):
        s.advantage = a
        s.in_update = True
    generated = [s for group in every.values() for s in group]
    return RolloutBatch(samples, generated, result.record, t_gen, t_reward, sizes)


def _out_of_range(step: int, round_index: int, reward: float, score: Score, reward_range: tuple[float, float]) -> str:
    low, high = reward_range
    parts = ", ".join(f"{n} {'None' if v is None else f'{v:g}'}" for n, v in score.components.items())
    of = f" (the weighted sum of {parts})" if parts else ""
    return (f"step {step} round {round_index + 1}: reward {reward:g}{of} is outside allocation.reward_range "
            f"[{low:g}, {high:g}], the range the allocator reads as pass rates; set "
            f"allocation.reward_range to the rewards' real range (--set allocation.reward_range=[LOW,HIGH])")


def _score(runner: RoundRunner, rollouts: Sequence[Generated], step: int) -> list[Score]:
    """The runner's scores; a user's error from grading (a reward function that raised) is
    one line naming the step."""
    try:
        scores = runner.score(rollouts)
    except UserError as e:
        raise UserError(f"step {step}: {e}") from None
    if len(scores) != len(rollouts):
        raise AssertionError(f"step {step}: {len(scores)} scores for {len(rollouts)} rollouts")
    return scores


# --------------------------------------------------------------------------- metrics
def step_metrics(batch: RolloutBatch, rollouts_total: int, tokens_total: int,
                 pass_threshold: float = 1.0, max_turns: int | None = None) -> dict[str, Any]:
    """The rollout half of a step's metrics.jsonl line (both trainers): counts, rewards over
    the scored rollouts and the share of them that pass (reward >= ``pass_threshold``),
    unscored and grading-error counts, per-function means and unscored counts, group and
    completion statistics, and for episodes their turns (of ``max_turns``) and tool calls."""
    every = batch.generated
    values = [s.reward for s in every if s.reward is not None]
    rewards = torch.tensor(values, dtype=torch.float64)
    lengths = [s.tokens for s in every]
    tokens = sum(lengths)
    groups: dict[str, list[float]] = defaultdict(list)
    for s in batch.samples:
        groups[s.uid].append(s.reward)
    zero_var = sum(1 for r in groups.values() if max(r) == min(r))
    flat = zero_variance_rollouts(every)
    return {
        "rollouts/step": len(every),
        "rollouts/cumulative": rollouts_total,
        "rollouts/zero_variance": flat,
        "rollouts/zero_variance_share": flat / len(every) if every else 0.0,
        "tokens/step": tokens,
        "tokens/cumulative": tokens_total,
        "reward/mean": float(rewards.mean()) if values else 0.0,
        "reward/std": float(rewards.std(unbiased=False)) if values else 0.0,
        "reward/pass_rate": sum(v >= pass_threshold for v in values) / len(values) if values else 0.0,
        "reward/unscored": len(every) - len(values),
        "reward/grading_errors": sum(1 for s in every if s.grading_error),
        **component_means(every),
        "groups/count": len(groups),
        "groups/zero_var_frac": zero_var / len(groups) if groups else 0.0,
        "completions/mean_length": tokens / len(every) if every else 0.0,
        "completions/max_length": max(lengths, default=0),
        "completions/truncated_frac": sum(bool(s.truncated) for s in every) / len(every) if every else 0.0,
        **sandbox_metrics(every),
        **episode_metrics([s.episode if s.episode is not None else s.rollout for s in every], max_turns),
    }


def zero_variance_rollouts(generated: Sequence[Sample]) -> int:
    """Rollouts spent without signal: every rollout of a prompt whose scored rewards this step
    all came out equal (its advantage is 0 whatever the update uses; a group of one scored
    reward is equal to itself; a prompt with none scored gave nothing either). The same count
    for every strategy, the groups a strategy drops (DAPO's) included."""
    by_prompt: dict[str, list[Sample]] = defaultdict(list)
    for s in generated:
        by_prompt[s.uid].append(s)
    total = 0
    for group in by_prompt.values():
        rewards = [s.reward for s in group if s.reward is not None]
        if not rewards or max(rewards) == min(rewards):
            total += len(group)
    return total


def sandbox_metrics(samples: Sequence[Sample]) -> dict[str, Any]:
    """For rollouts graded in the sandbox (a code task's): ``sandbox/isolation``, the level
    the programs ran under (text, e.g. ``full`` or ``full, memory: rlimit only``), and
    ``sandbox/memory_cgroup``, 1 when a memory cgroup bounded each program, 0 when rlimits
    alone did. No keys for a step without one."""
    level = next((s.details["isolation"] for s in samples if s.details.get("isolation")), None)
    if level is None:
        return {}
    return {"sandbox/isolation": level, "sandbox/memory_cgroup": 0.0 if MEMORY_RLIMIT_ONLY in level else 1.0}


def component_means(samples: Sequence[Any]) -> dict[str, float | int]:
    """Each reward function's ``reward/<name>/mean`` and ``reward/<name>/unscored`` over the
    samples' components (vigor_cli/report/metrics.reward_components)."""
    return reward_components([s.components for s in samples])

"""Where the rollout budget went: per-step tables and an overview from allocation.jsonl.

Each line of allocation.jsonl is one step's allocator record (format in
vigor_cli/allocation/README.md) with ``step`` and each prompt's ``text``
added by the trainer. :func:`parse_step` turns a record into
:class:`StepAllocation`; the summaries below only use that shape.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import read_jsonl


@dataclass
class RoundInfo:
    round: int
    """1-based round number (for DAPO/GRESO: the generation batch)."""
    added: int
    """New rollouts generated for the prompt in this round."""
    rewards: list[float]
    """Their rewards, raw (as the task gave them, not the allocator's [0, 1] reading)."""
    pool_variance: float | None
    """Population variance of every (raw) reward of the prompt so far."""
    kept: bool | None
    """After this round: True continued, False dropped, None no choice made (last round)."""
    reason: str | None = None
    """Why dropped, when the allocator says (DAPO: 'zero_var', 'batch_full')."""


@dataclass
class PromptAllocation:
    uid: str
    text: str
    rounds: list[RoundInfo]
    total: int
    """Rollouts generated for the prompt this step."""
    used: int
    """Rollouts of it in the GRPO update."""
    status: str
    """'kept' (chosen in every selection), 'used' (no selection made), 'dropped@t (reason)',
    'resolved@t[, used k/n]' (reinforce-ada: stopped sampling with enough of both
    outcomes), 'used k/n' (PODS, reinforce-ada), 'not used', or 'skipped' (GRESO, before
    any rollout)."""
    in_update: bool = True
    notes: dict[str, Any] = field(default_factory=dict)
    """Fields the allocator added to the prompt's record beyond the format's (e.g. ``p_hat``)."""

    @property
    def rewards(self) -> list[float]:
        return [r for rnd in self.rounds for r in rnd.rewards]

    @property
    def zero_variance(self) -> bool:
        rewards = self.rewards
        return bool(rewards) and min(rewards) == max(rewards)

    @property
    def no_signal(self) -> bool:
        """Its rollouts were spent without signal: rolled out, and its rewards all equal (or
        none scored), as metrics.jsonl's ``rollouts/zero_variance`` counts them."""
        rewards = self.rewards
        return self.total > 0 and (not rewards or min(rewards) == max(rewards))


@dataclass
class StepAllocation:
    step: int
    strategy: str
    budget: int | None
    """The step's cap from the record; for strategies without one (DAPO, GRESO) GRPO's
    spend from the config (see :attr:`budget_is_cap`)."""
    prompts: list[PromptAllocation]
    rounds: int
    totals: dict[str, Any] = field(default_factory=dict)
    """The record's totals as written (zero_var_groups, used, in_update, cut, ...)."""
    budget_is_cap: bool = True
    """False when ``budget`` is GRPO's spend from the config, not a cap the allocator had."""
    reward_range: tuple[float, float] = (0.0, 1.0)
    """allocation.reward_range: the rounds' rewards are raw (as the reward functions gave them),
    mapped back from the [0, 1] the allocator was told; variances likewise."""

    @property
    def rollouts(self) -> int:
        return sum(p.total for p in self.prompts)

    @property
    def rolled(self) -> list[PromptAllocation]:
        """Prompts that got at least one rollout (GRESO skips some before rollout)."""
        return [p for p in self.prompts if p.total > 0]


def _status(rounds: list[RoundInfo], total: int, used: int, in_update: bool, skipped: bool) -> str:
    if skipped or total == 0:
        return "skipped"
    for r in rounds:
        if r.kept is False and r.reason == "resolved":  # reinforce-ada: stopped with enough
            return f"resolved@{r.round}" + (f", used {used}/{total}" if used < total else "")
        if r.kept is False:
            return f"dropped@{r.round}" + (f" ({r.reason})" if r.reason else "")
    if not in_update:
        return "not used"
    if used < total:
        return f"used {used}/{total}"
    return "kept" if any(r.kept for r in rounds) else "used"


PROMPT_KEYS = {"uid", "text", "rounds", "rollouts", "used", "in_update", "skipped", "used_idx"}
"""A prompt record's own fields (vigor_cli/allocation/README.md); others are shown as notes."""


def parse_step(record: dict, where: str) -> StepAllocation:
    """A StepAllocation from one allocation.jsonl record; ``where`` names it in errors."""
    try:
        step = int(record["step"])
        low, high = (float(x) for x in record.get("reward_range") or (0.0, 1.0))
        span = high - low  # the record holds what the allocator was told: rewards mapped from [low, high]
        prompts = []
        for p in record["prompts"]:
            rounds = [
                RoundInfo(
                    round=int(r["round"]),
                    added=int(r["added"]),
                    rewards=[low + span * float(x) for x in r["rewards"]],
                    pool_variance=None if r.get("var") is None else float(r["var"]) * span * span,
                    kept=r.get("kept"),
                    reason=r.get("reason"),
                )
                for r in p["rounds"]
            ]
            total = int(p.get("rollouts", sum(r.added for r in rounds)))
            used = int(p.get("used", total))
            in_update = bool(p.get("in_update", used > 0))
            prompts.append(
                PromptAllocation(
                    uid=str(p["uid"]),
                    text=str(p.get("text", "")),
                    rounds=rounds,
                    total=total,
                    used=used,
                    status=_status(rounds, total, used, in_update, bool(p.get("skipped"))),
                    in_update=in_update and total > 0,
                    notes={k: v for k, v in p.items() if k not in PROMPT_KEYS},
                )
            )
        totals = dict(record.get("totals") or {})
        n_rounds = int(totals.get("rounds") or max(
            (r.round for p in prompts for r in p.rounds), default=0))
        budget = totals.get("budget")
        budget = None if budget is None else int(budget)
    except (KeyError, TypeError, ValueError) as e:
        what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise UserError(f"{where}: not an allocation record ({what}; "
                        "format in vigor_cli/allocation/README.md)") from None
    return StepAllocation(
        step=step,
        strategy=str(record.get("strategy", "?")),
        budget=budget,
        prompts=prompts,
        rounds=n_rounds,
        totals=totals,
        reward_range=(low, high),
    )


def more_vs_none(sa: StepAllocation) -> tuple[list[float], list[float]]:
    """Pool variances after each round at which some of the round's prompts got more rollouts
    later: (those that got more, those that got none). From the rounds, for every strategy."""
    by_round: dict[int, list[tuple[float, bool]]] = {}
    for p in sa.prompts:
        for i, r in enumerate(p.rounds):
            if r.pool_variance is not None:
                later = any(x.added > 0 for x in p.rounds[i + 1:])
                by_round.setdefault(r.round, []).append((r.pool_variance, later))
    more: list[float] = []
    none: list[float] = []
    for entries in by_round.values():
        if any(later for _, later in entries):  # the allocator chose after this round
            more += [v for v, later in entries if later]
            none += [v for v, later in entries if not later]
    return more, none


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _pool_variance(rewards: list[float]) -> float:
    mean = sum(rewards) / len(rewards)
    return sum((r - mean) ** 2 for r in rewards) / len(rewards)


def decision_record(totals: dict[str, Any]) -> dict[str, Any]:
    """The totals entry where a strategy records a decision (``totals.auto``), as recorded."""
    for value in totals.values():
        if isinstance(value, dict) and "decision" in value:
            return value
    return {}


def strategy_rule(strategy: str) -> str | None:
    """How the strategy decides (its registry summary); None for a name not registered here."""
    from vigor_cli.allocation import registry

    try:
        return registry.get(strategy).summary or None
    except ValueError:
        return None


def summarize_step(sa: StepAllocation) -> dict[str, Any]:
    """The step summary shown under the per-prompt table (definitions in the module doc)."""
    rolled = sa.rolled
    n = len(rolled)
    budget = sa.budget if sa.budget is not None else sa.rollouts
    more, none = more_vs_none(sa)
    in_update = [_pool_variance(p.rewards) for p in rolled if p.in_update and p.rewards]
    left_out = [_pool_variance(p.rewards) for p in rolled if not p.in_update and p.rewards]
    totals = sorted((p.total for p in rolled), reverse=True)
    top = max(1, math.ceil(0.1 * n)) if n else 0
    decided = decision_record(sa.totals)
    return {
        "step": sa.step,
        "strategy": sa.strategy,
        "prompts": n,
        "skipped": len(sa.prompts) - n,
        "rounds": sa.rounds,
        "rollouts": sa.rollouts,
        "used": sum(p.used for p in sa.prompts),
        "budget": budget,
        "budget_is_cap": sa.budget_is_cap,
        "grpo_per_prompt": (sa.rollouts / n) if n else None,
        "min_per_prompt": min(totals, default=0),
        "max_per_prompt": max(totals, default=0),
        "zero_var_frac": (sum(p.zero_variance for p in rolled) / n) if n else None,
        "zero_var_rollouts": sum(p.total for p in rolled if p.no_signal),
        "zero_var_rollouts_share": (sum(p.total for p in rolled if p.no_signal) / sa.rollouts) if sa.rollouts else None,
        "mean_var_more": _mean(more),
        "mean_var_none": _mean(none),
        "given_more": len(more),
        "given_none": len(none),
        "mean_var_in_update": _mean(in_update),
        "mean_var_left_out": _mean(left_out),
        "left_out": len(left_out),
        "top10_share": (sum(totals[:top]) / sa.rollouts) if sa.rollouts else None,
        "rule": strategy_rule(sa.strategy),
        "decision": decided.get("decision"),
        "decision_reason": decided.get("reason"),
        "decision_record": {k: v for k, v in decided.items() if k not in ("decision", "reason")} or None,
    }


def config_budget(config: dict, prompts: int) -> int | None:
    """The step budget the run was configured with: allocation.budget, else
    allocation.rollouts_per_prompt x train.prompts_per_step (``registry.default_budget``; a
    config from before that key: group_size). ``prompts`` stands in for prompts_per_step
    when the config lacks it."""
    alloc = config.get("allocation") or {}
    if alloc.get("budget") is not None:
        return int(alloc["budget"])
    per_step = (config.get("train") or {}).get("prompts_per_step") or prompts
    per_prompt = alloc.get("rollouts_per_prompt", alloc.get("group_size"))
    return None if per_prompt is None else int(per_prompt) * int(per_step)


def load_allocation(run_path: Path, config: dict) -> tuple[list[StepAllocation], list[str]]:
    """Every step of the run's allocation.jsonl, in step order, and notes for the reader."""
    path = run_path / "allocation.jsonl"
    if not path.is_file():
        raise UserError(f"{run_path}: no allocation.jsonl yet (has the first step finished?)")
    content = read_jsonl(path)
    steps = []
    for line, rec in zip(content.lines, content.records):
        sa = parse_step(rec, f"{path} line {line}")
        if sa.budget is None:
            sa.budget = config_budget(config, len(sa.prompts))
            sa.budget_is_cap = False
        steps.append(sa)
    if not steps:
        raise UserError(f"{path}: no complete record yet (has the first step finished?)")
    steps.sort(key=lambda s: s.step)
    return steps, content.notes

"""The health checks' section (``health.*``): one rule (threshold, steps) per check of
vigor_cli/train/health.py, and the switches that run them or stop a run on them."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from vigor_cli.config.base import STEPS_MAX, _Section


class HealthRule(_Section):
    """A check on a share (of completions, groups, prompts): its threshold is a share too."""

    threshold: float = Field(0.5, ge=0, le=1, description="The check holds when its value (a share, "
                             "0 to 1) is at least this.")
    steps: int = Field(
        1, ge=0, le=STEPS_MAX,
        description="Consecutive steps the check must hold before it speaks (0: the check is off).",
    )


class JumpRule(HealthRule):
    """A check on a jump: the value over its recent median, so its threshold is a ratio of at least 1."""

    threshold: float = Field(10.0, ge=1, le=1e9, description="The check holds when the value is at least this "
                             "many times its recent median (a ratio, at least 1).")
    floor: float = Field(0.0, ge=0, le=1e9, description="Values below this never count as a jump.")


HEALTH_DEFAULTS: dict[str, dict[str, float]] = {
    "truncated": {"threshold": 0.5, "steps": 2},
    "zero_variance": {"threshold": 0.95, "steps": 3},
    "identical": {"threshold": 0.9, "steps": 3},
    "constant_reward": {"threshold": 1.0, "steps": 3},
    "empty": {"threshold": 0.5, "steps": 2},
    "prompt_cut": {"threshold": 0.1, "steps": 1},
    "chat_template": {"threshold": 0.5, "steps": 1},
    "unscored": {"threshold": 1.0, "steps": 1},
    "hard_coding": {"threshold": 0.3, "steps": 3},
    "no_tool_calls": {"threshold": 1.0, "steps": 2},
    "kl_jump": {"threshold": 10.0, "steps": 1, "floor": 0.01},
    "clip_jump": {"threshold": 5.0, "steps": 1, "floor": 0.05},
}
"""Each health check's default rule; ``--set health.<check>.threshold=...`` changes one value
and keeps the rest."""


def _rule(name: str, what: str) -> Any:
    kind = JumpRule if "floor" in HEALTH_DEFAULTS[name] else HealthRule
    return Field(default_factory=lambda: kind(**HEALTH_DEFAULTS[name]), description=what)


class HealthConfig(_Section):
    """Checks on every step for rollouts spent without learning signal (vigor_cli/train/health.py):
    each speaks once, one line naming the cause and the key to change, when its value reaches
    ``threshold`` for ``steps`` consecutive steps, and again only after it cleared."""

    enabled: bool = Field(True, description="Run the health checks (their numbers are logged as health/* either way).")
    strict: bool = Field(
        False,
        description="Stop the run (exit 2, after the step's checkpoint) when a check holds for its "
        "whole window, instead of only warning.",
    )
    truncated: HealthRule = _rule("truncated", "Share of completions cut at sampling.max_new_tokens.")
    zero_variance: HealthRule = _rule(
        "zero_variance", "Share of groups whose rollouts all got the same reward (no advantage, no gradient).")
    identical: HealthRule = _rule("identical", "Share of groups whose rollouts are all the same text.")
    constant_reward: HealthRule = _rule("constant_reward", "1 when every scored rollout of the step got the same reward.")
    empty: HealthRule = _rule("empty", "Share of completions that are empty or stop after one token.")
    prompt_cut: HealthRule = _rule(
        "prompt_cut", "Share of the step's prompts whose length plus sampling.max_new_tokens exceeds the context.")
    chat_template: HealthRule = _rule(
        "chat_template", "Share of the step's prompts not rendered by the tokenizer's chat template (it has one).")
    unscored: HealthRule = _rule(
        "unscored", "Share of the step's rollouts a reward function returned None for (the largest over "
        "the functions and their sum): no reward, no gradient.")
    hard_coding: HealthRule = _rule(
        "hard_coding", "Code tasks: share of the step's graded programs that look hard-coded: they pass "
        "every public test but fail most private ones, or their source holds the public tests' "
        "expected outputs (vigor_cli/verifiers/hard_coding.py).")
    no_tool_calls: HealthRule = _rule(
        "no_tool_calls", "Episodes of an environment with tools (task.env=FILE.py:Class): share of the step's "
        "episodes whose model called no tool and took one turn only (task.max_turns unused).")
    kl_jump: JumpRule = _rule("kl_jump", "losses/kl over the median of the previous (up to 10) steps' losses/kl.")
    clip_jump: JumpRule = _rule(
        "clip_jump", "The clipped share of tokens over the median of the previous (up to 10) steps'.")

    @model_validator(mode="after")
    def _strict_needs_checks(self) -> "HealthConfig":
        if self.strict and not self.enabled:
            raise ValueError("health.strict stops a run when a health check holds, but health.enabled=false "
                             "turns the checks off; drop --strict (health.strict) or set health.enabled=true")
        return self

    @model_validator(mode="before")
    @classmethod
    def _partial_rules(cls, data: Any) -> Any:
        """A rule given in part (``health.truncated.threshold`` alone) keeps its other defaults."""
        if isinstance(data, dict):
            data = dict(data)
            for name, default in HEALTH_DEFAULTS.items():
                if isinstance(data.get(name), dict):
                    data[name] = {**default, **data[name]}
        return data

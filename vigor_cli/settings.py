"""A run's settings: the typed config (:mod:`vigor_cli.config`) built from a file, flags and
``--set``, with every name in it checked against the registry that defines it.

The config package (vigor_cli/config/) sits at the bottom of the import graph and knows no
registry; the checks that need one live here, above the registries: ``task.name`` (the task
registry), ``allocation.strategy`` and that strategy's own rules (the strategy registry),
``engine.kind`` (the engine registry), ``grpo.loss_agg`` and ``grpo.scale_rewards``
(vigor_cli/grpo.py's registries). Build a run's config with :func:`build_config`; set one key
of a built config with :func:`set_key`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

import vigor_cli.allocation  # noqa: F401  (the strategies register their config sections)
from vigor_cli.config import ConfigError, RunConfig, assemble
from vigor_cli.errors import UserError


NAMED_KEYS = ("task.name", "allocation.strategy", "engine.kind", "grpo.loss_agg", "grpo.scale_rewards",
              "train.report_to", "task.env")
"""The keys whose values are names in a registry (checked by :func:`check_name`)."""


def check_name(key: str, name: Any) -> None:
    """ValueError naming ``key`` and the registered names when no registry holds ``name``."""
    if key == "allocation.strategy":
        from vigor_cli.allocation import registry

        registry.get(name)  # ValueError naming the registered strategies
        return
    if key == "task.name":
        from vigor_cli.tasks import TASKS

        if name not in TASKS:
            raise ValueError(f"task.name: unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
        return
    if key == "task.code_protocol":
        from vigor_cli.tasks.code_split import CODE_PROTOCOLS

        if name not in CODE_PROTOCOLS:
            raise ValueError(f"task.code_protocol: unknown protocol {name!r}; known: {', '.join(CODE_PROTOCOLS)}")
        return
    if key == "engine.kind":
        from vigor_cli.rollout import ENGINES

        if name != "auto" and name not in ENGINES:
            raise ValueError(f"engine.kind: unknown engine {name!r}; known: auto, {', '.join(ENGINES)}")
        return
    if key in ("grpo.loss_agg", "grpo.scale_rewards", "grpo.importance_sampling_level"):
        from vigor_cli import grpo

        known = {"grpo.loss_agg": grpo.LOSS_AGGREGATIONS, "grpo.scale_rewards": grpo.ADVANTAGE_SCALINGS,
                 "grpo.importance_sampling_level": grpo.RATIO_LEVELS}[key]
        if name not in known:
            raise ValueError(f"{key}: unknown name {name!r}; known: {', '.join(known)}")
        return
    if key == "task.env":
        from vigor_cli.episodes.registry import check_spec

        check_spec(name)  # ValueError naming the built-in environments
        return
    if key == "train.report_to":
        from vigor_cli.run import tracking

        if name not in tracking.BACKENDS:
            raise ValueError(f"unknown backend {name!r}; known: {', '.join([*tracking.BACKENDS, 'none'])}")
        return
    raise KeyError(f"{key} names no registry")  # a bug: the config asked about another key


def check_strategy_rules(cfg: RunConfig) -> None:
    """The rules of ``allocation.strategy`` across its keys (its registry entry's ``options``
    and ``check``, before the task's data is known); ValueError naming the keys."""
    from vigor_cli.allocation import registry

    strategy = registry.get(cfg.allocation.strategy)
    registry.options(cfg.allocation)
    if strategy.check is not None:
        strategy.check(cfg.allocation, cfg.train.prompts_per_step, None)


def build_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    sets: list[str] | None = None,
    strategy_rules: bool = True,
    flags: dict[str, str] | None = None,
    tree: dict | None = None,
) -> RunConfig:
    """Defaults <- YAML file <- ``overrides`` (dotted keys from named CLI flags) <- ``--set``,
    every name checked against its registry.

    An error (ConfigError) names where the bad value came from: ``--set key=value``, the flag
    (``flags`` maps an override's key to the flag that set it), or the file.
    ``strategy_rules=False`` leaves out the rules of ``allocation.strategy`` (for a caller that
    runs other strategies with these keys and checks each: `vigor simulate`). ``tree``: the
    keys to start from instead of a file (a run's saved config, an export's record)."""
    return assemble(path, overrides, sets, flags, checks(strategy_rules), tree)


class TaskRules:
    """The task keys' rules that need the task registry: a ``task.*`` key the chosen task does
    not read is refused (never silently ignored), and the custom task's own rules (its fields,
    template and reward specs, then data and a reward). ValueErrors name the key and task."""

    @staticmethod
    def check_key(name: str, key: str, value: Any, changed: bool, earlier: dict) -> None:
        from vigor_cli.tasks import task_reads

        reads = task_reads(name)
        if changed and reads is not None and key not in reads:
            own = ", ".join(f"task.{k}" for k in reads) or "no other task key"
            hint = "" if name == "custom" else "; your own data and rewards: --data PATH --reward ... (task 'custom')"
            raise ValueError(f"task.{key} is not read by task '{name}' (it reads {own}){hint}")
        if name == "custom":
            TaskRules._custom_key(key, value, earlier)

    @staticmethod
    def _custom_key(key: str, value: Any, earlier: dict) -> None:
        from vigor_cli.user import rewards
        from vigor_cli.tasks.custom import check_fields, check_template

        if key == "fields":
            check_fields(value)
        if key == "prompt_template" and value is not None:
            check_template(value)
            if "prompt" in earlier.get("fields", {}):
                raise ValueError("task.prompt_template and task.fields.prompt (--prompt-field) both "
                                 "say where the prompt comes from; give one")
        if key == "rewards":
            for spec in value:
                rewards.check_spec(spec)
        if key == "reward_weights" and value and len(value) != len(earlier.get("rewards", [])):
            raise ValueError(f"task.reward_weights has {len(value)} weights for "
                             f"{len(earlier.get('rewards', []))} rewards (task.rewards); give one per reward")

    @staticmethod
    def check_task(task: Any) -> None:
        if task.env is not None:
            from vigor_cli.episodes.registry import check_task

            check_task(task.env, task.name)
        if task.name != "custom":
            return
        if not task.data:
            raise ValueError("task 'custom' needs training data: --data PATH (task.data)")
        if not task.rewards:
            from vigor_cli.user.rewards import builtin_names

            raise ValueError("task 'custom' needs at least one reward: --reward NAME (built-in: "
                             f"{', '.join(builtin_names())}) or --reward FILE.py:FUNC (task.rewards)")


def checks(strategy_rules: bool = True) -> dict:
    """The validation context that checks names against their registries (and, with
    ``strategy_rules``, the strategy's own rules): ``RunConfig.model_validate(tree, context=checks())``."""
    context: dict = {"check_name": check_name, "task_rules": TaskRules}
    if strategy_rules:
        context["strategy_rules"] = check_strategy_rules
    return context


def check_against_data(cfg: RunConfig, n_train: int) -> None:
    """The rules that need the task's training-set size (known once its data is read):
    raises ConfigError naming the keys to change."""
    from vigor_cli.allocation import registry

    p = cfg.train.prompts_per_step
    if p > n_train:
        raise ConfigError(
            f"train.prompts_per_step ({p}) exceeds the {n_train} training prompts of task '{cfg.task.name}'; "
            f"lower it (--prompts-per-step {n_train} or less) or give more data"
        )
    try:
        registry.check(cfg.allocation, p, n_train)
    except UserError as e:
        raise ConfigError(str(e)) from None


def set_key(cfg: RunConfig, dotted: str, value: Any, flag: str) -> None:
    """Set one key of a built config from a command-line option, validated like the file's
    (its registry too); a bad value is a ConfigError naming the option:
    ``--engine nosuch: engine.kind: unknown engine ...``."""
    *sections, name = dotted.split(".")
    node: Any = cfg
    for part in sections:
        node = getattr(node, part)
    before = getattr(node, name)
    try:
        setattr(node, name, value)
        if dotted in NAMED_KEYS:
            check_name(dotted, value)
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ").removeprefix(f"{dotted}: ")
        raise ConfigError(f"{flag} {value}: {dotted}: {msg}") from None
    except ValueError as e:
        setattr(node, name, before)
        raise ConfigError(f"{flag} {value}: {dotted}: {str(e).removeprefix(f'{dotted}: ')}") from None


def known_names(what: Literal["strategy", "engine", "task", "benchmark", "tracker"]) -> str:
    """The registered names behind a key, comma-separated, for help texts and messages:
    strategies (allocation.strategy), engines (engine.kind, 'auto' first), tasks (task.name),
    benchmarks (`vigor eval --benchmarks`). Read from the registries, never listed here."""
    if what == "strategy":
        from vigor_cli.allocation import registry

        return ", ".join(registry.names())
    if what == "engine":
        from vigor_cli.rollout import ENGINES

        return ", ".join(["auto", *ENGINES])
    if what == "tracker":
        from vigor_cli.run import tracking

        return ", ".join([*tracking.BACKENDS, "none"])
    from vigor_cli.tasks import EVAL_SETS, TASKS

    return ", ".join(TASKS if what == "task" else EVAL_SETS)

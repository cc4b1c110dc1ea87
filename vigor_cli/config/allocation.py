"""The allocation section (``allocation.*``): the keys every strategy shares, and each
strategy's own section (``allocation.<name>``), whose models the strategy registry fills in
:data:`STRATEGY_SECTIONS`; the deprecated flat keys move into those sections."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
    model_validator,
)

from vigor_cli.config.base import ROLLOUTS_MAX, _check_name, _Section


STRATEGY_SECTIONS: dict[str, type[BaseModel]] = {}
"""Strategy name -> the model of its options section ``allocation.<name>``; filled by the
strategy registry (vigor_cli/allocation/registry.py) as strategies register, so that this
module, at the bottom of the import graph, knows the sections without importing a registry
(vigor_cli/settings.py imports the strategies before any config is built)."""
LEGACY_PREFIXES: dict[str, str] = {}
"""Built-in strategy -> the prefix of its flat keys of earlier releases (``knapsack`` ->
``knapsack``: ``allocation.knapsack_min``); kept for one release, filled like the sections."""


class StrategyOptions(_Section):
    """Base of a strategy's own keys (its registry entry's ``options``): unknown keys are
    errors, numbers are bounded and strict, like every section of the config."""


class AllocationConfig(_Section):
    """The keys every strategy shares; a strategy's own keys are its section
    ``allocation.<strategy name>`` (``allocation: {strategy: knapsack, knapsack: {min: 2}}``),
    one per registered strategy that has options, each validated by its options model."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, allow_inf_nan=False)
    _deprecated: list[str] = PrivateAttr(default_factory=list)

    strategy: str = Field(
        "auto",
        description="Rollout allocation strategy: auto (the default: a census round, then a wide or a deep "
        "plan), grpo (allocation.group_size rollouts for every prompt: no allocator), dapo (DAPO's "
        "dynamic sampling), vigor "
        "(VIGOR's rounds) with its ablations random and difficulty, greso, pods, knapsack (Knapsack-RL), "
        "reinforce-ada (Reinforce-Ada), pilot-commit (Pilot-Commit), or a strategy a plugin registers "
        "(vigor_cli/allocation/README.md; which to use: the README and BENCHMARKS.md).",
    )
    # VIGOR (and its ablations random, difficulty)
    rounds: int = Field(4, ge=1, le=64, description="VIGOR: number of allocation rounds T.")
    m0: int = Field(2, ge=1, le=ROLLOUTS_MAX, description="VIGOR: new rollouts per prompt in round 1.")
    gamma: float = Field(
        2.0, gt=0, le=64, description="VIGOR: growth of new rollouts per kept prompt per round."
    )
    alpha: float = Field(
        0.5, gt=0, le=1, description="VIGOR: fraction of active prompts kept each round (ceil)."
    )
    budget: Optional[int] = Field(
        None,
        ge=1,
        le=10**7,
        description="Budgeted strategies (vigor and its ablations, knapsack, reinforce-ada, pilot-commit, "
        "auto; `vigor simulate --help` lists them): cap on rollouts per step, never exceeded (see "
        "allocation/README.md). Default: allocation.rollouts_per_prompt x prompts per step.",
    )
    rollouts_per_prompt: int = Field(
        8,
        ge=1,
        le=ROLLOUTS_MAX,
        description="Budgeted strategies: the default budget is this many rollouts per prompt of "
        "the step (the spend of GRPO with group_size = this); allocation.budget overrides it. "
        "A config that sets allocation.group_size but not this key (written before the key "
        "existed) gets group_size here, so it spends what it did.",
    )
    # GRPO / DAPO / GRESO
    group_size: int = Field(
        8, ge=1, le=ROLLOUTS_MAX, description="Rollouts per prompt for grpo, dapo and greso (G)."
    )
    # DAPO and GRESO's filling
    gen_batch_multiplier: float = Field(
        3.0, ge=1, le=10_000, description="DAPO: generation batch = this x prompts per step."
    )
    max_gen_batches: int = Field(
        10, ge=1, le=1000, description="DAPO/GRESO: give up (clear error) after this many generation batches."
    )

    @classmethod
    def section_models(cls) -> dict[str, type[BaseModel]]:
        """Strategy name -> the model of its section ``allocation.<name>``: the strategy
        registry (vigor_cli/allocation/registry.py) fills :data:`STRATEGY_SECTIONS` as
        strategies register; this module imports no registry."""
        return dict(STRATEGY_SECTIONS)

    def section(self, name: str) -> Any:
        """The validated options of strategy ``name`` (its section ``allocation.<name>``)."""
        found = (self.__pydantic_extra__ or {}).get(name)
        if found is None:  # a strategy registered after this config was built: its defaults
            found = self.section_models()[name]()
        return found

    @model_validator(mode="wrap")
    @classmethod
    def _strategy_sections(cls, data: Any, handler: Any) -> "AllocationConfig":
        """Each strategy's section validated by its options model (missing: its defaults);
        the deprecated spellings (flat ``knapsack_min``, ``allocation.options``) moved into
        the sections first, with a note; any other unknown key is an error naming it."""
        if isinstance(data, AllocationConfig):
            return handler(data)
        tree = dict(data) if isinstance(data, dict) else data
        if not isinstance(tree, dict):
            return handler(data)
        tree, notes = _moved_legacy_keys(tree)
        models = cls.section_models()
        given = {name: tree.pop(name) for name in list(tree) if name in models}
        for key in tree:
            if key not in cls.model_fields:
                raise ValidationError.from_exception_data(
                    cls.__name__, [{"type": "extra_forbidden", "loc": (key,), "input": tree[key]}]
                )
        out = handler(tree)
        extra = out.__pydantic_extra__ if out.__pydantic_extra__ is not None else {}
        for name, model in models.items():
            value = given.get(name, {})
            if isinstance(value, model):
                extra[name] = value
                continue
            try:
                extra[name] = model.model_validate({} if value is None else value)
            except ValidationError as e:
                raise ValidationError.from_exception_data(
                    cls.__name__,
                    [{"type": x["type"], "loc": (name, *x["loc"]), "input": x["input"],
                      **({"ctx": x["ctx"]} if "ctx" in x else {})} for x in e.errors()],
                ) from None
        out.__pydantic_extra__ = extra
        out._deprecated = notes
        return out

    reward_range: Literal["auto"] | tuple[Annotated[float, Field(ge=-1e9, le=1e9)],
                                          Annotated[float, Field(ge=-1e9, le=1e9)]] = Field(
        "auto",
        description="The lowest and highest reward a rollout can get, [LOW, HIGH], or auto. Allocation "
        "strategies read rewards as pass rates in [0, 1]: each reward is told to the allocator as "
        "(reward - low) / (high - low); a reward outside the range stops the run in one line "
        "naming it. auto: [0, 1] for one reward, and for several --reward functions the range "
        "of their weighted sum when each gives 0 to 1 (--reward-weights 1,0.5: [0, 1.5]). A "
        "reward function with other values needs the range set (allocation.reward_range=[-1,1]). "
        "The GRPO update uses the rewards as they are.",
    )

    @field_validator("reward_range")
    @classmethod
    def _ordered_range(cls, value: Any) -> Any:
        if value != "auto" and not value[0] < value[1]:
            raise ValueError(f"the low end must be below the high end, got {list(value)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _budget_from_old_key(cls, data: Any) -> Any:
        """Configs written before allocation.rollouts_per_prompt set the budget through group_size."""
        if isinstance(data, dict) and "group_size" in data and "rollouts_per_prompt" not in data:
            data = {**data, "rollouts_per_prompt": data["group_size"]}
        return data

    @field_validator("strategy")
    @classmethod
    def _registered_strategy(cls, name: str, info: ValidationInfo) -> str:
        return _check_name(info, "allocation.strategy", name)

    def deprecated_keys(self) -> list[str]:
        """The deprecated spellings this config was written with (``knapsack_min`` ->
        ``knapsack.min``), for the one-line note `build_config` prints."""
        return list(self._deprecated)


def _moved_legacy_keys(tree: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Flat keys of earlier releases (``knapsack_min``) and ``options`` (the section of the
    chosen strategy) moved into their sections; returns the tree and 'old -> new' notes.
    A key given both ways is an error naming both. Kept for one release."""
    legacy = {f"{prefix}_{key}": (name, key) for name, prefix in LEGACY_PREFIXES.items()
              for key in STRATEGY_SECTIONS[name].model_fields}
    notes: list[str] = []
    out = dict(tree)

    def put(section: str, key: str, value: Any, old: str) -> None:
        current = out.get(section)
        node = dict(current) if isinstance(current, dict) else ({} if current is None else current)
        if not isinstance(node, dict):
            return  # the section itself is malformed: its own validation names it
        if key in node:
            raise ValueError(f"allocation.{old} and allocation.{section}.{key} set the same key; keep "
                             f"allocation.{section}.{key}")
        node[key] = value
        out[section] = node
        notes.append(f"allocation.{old} -> allocation.{section}.{key}")

    for old in [k for k in tree if k in legacy]:
        section, key = legacy[old]
        put(section, key, out.pop(old), old)
    if "options" in out and "options" not in AllocationConfig.model_fields:
        value = out.pop("options")
        name = out.get("strategy", AllocationConfig.model_fields["strategy"].default)
        if isinstance(value, dict) and value:
            if name not in STRATEGY_SECTIONS:
                raise ValueError(f"allocation.options: strategy {name!r} takes no options "
                                 f"(got {', '.join(sorted(map(str, value)))})")
            for key, v in value.items():
                put(name, str(key), v, f"options.{key}")
    return out, notes

"""Typed run configuration: the one place where defaults live.

Every key carries its documentation in ``Field(description=...)``; YAML files
under ``configs/`` and CLI flags only override keys. Unknown keys and wrong
types raise :class:`ConfigError` with a one-line message naming the key.

Override syntax on the command line: ``--set section.key=value`` (value parsed
as YAML, so ``--set allocation.alpha=0.25`` gives a float and
``--set model.lora.target_modules=[q_proj,v_proj]`` a list).

This module sits at the bottom of the import graph: it imports no registry. The keys that
name a registered thing (``task.name``, ``allocation.strategy`` and the strategy's own rules,
``engine.kind``, ``grpo.loss_agg``, ``grpo.scale_rewards``) are checked where the registries
are known, :mod:`vigor_cli.settings`, through the validation context (:func:`_check_name`);
a run's config is built with :func:`vigor_cli.settings.build_config`.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
    model_validator,
)

from vigor_cli.errors import UserError


class ConfigError(UserError, ValueError):
    """A bad configuration: the message names the key or file and what to change (exit 2)."""


SEED_MAX = 2**32 - 1
"""Largest seed: numpy's legacy seeding takes 32 bits."""
ROLLOUTS_MAX = 4096
"""Most rollouts of one prompt any per-prompt count may ask for."""
TOKENS_MAX = 2**24
"""Largest token count of any length or token budget (16M)."""
STEPS_MAX = 10**7
"""Largest step count, interval or step number."""
TOTAL_ROLLOUTS_MAX = 10**12
"""Largest count of rollouts over a whole run (a stop or evaluation schedule)."""


def _check_name(info: ValidationInfo, key: str, name: Any) -> Any:
    """A key that names a registered thing: the check comes from the caller that knows the
    registries (``check_name(key, name)`` in the validation context, from
    :mod:`vigor_cli.settings`); its ValueError names the registered names. Without that
    context (a default config, an assignment) only the key's type is checked here."""
    check = (info.context or {}).get("check_name")
    if check is not None:
        check(key, name)
    return name


def _scalar_types(annotation: Any) -> set:
    """The plain types a field accepts (through Optional, unions, Annotated and Literal)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _scalar_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_scalar_types(a) for a in typing.get_args(annotation)))
    if origin is Literal:
        return {type(v) for v in typing.get_args(annotation)}
    return {annotation}


def _item_types(annotation: Any) -> set:
    """The plain types the items of a list, tuple or mapping field accept (its values for a
    mapping), through Optional and unions; empty for a field that holds no items."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _item_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_item_types(a) for a in typing.get_args(annotation)))
    if origin in (list, tuple, dict):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _scalar_types(args[-1]) if args else set()
    return set()


class _Section(BaseModel):
    """Unknown keys are errors; floats must be finite; numbers and switches are strict:
    true is not a number (``--set train.steps=true`` used to run one step) and 1 is not a
    switch. Strings that read as numbers (``1e-5``, which YAML leaves a string) still work."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_kinds(cls, value: Any, info: ValidationInfo) -> Any:
        kinds = _scalar_types(cls.model_fields[info.field_name].annotation)
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
            raise ValueError(f"expected a number, not {str(value).lower()}")
        switch_only = bool in kinds and not kinds & {int, float}
        if switch_only and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            if not (isinstance(value, str) and str in kinds):  # 'auto' where a Literal allows it
                raise ValueError(f"expected true or false, not {value!r}")
        items = _item_types(cls.model_fields[info.field_name].annotation)
        if items & {int, float} and bool not in items and isinstance(value, (list, tuple, dict)):
            values = value.values() if isinstance(value, dict) else value
            for i, item in enumerate(values):  # [true] is not [1.0]: YAML's true is not a number
                if isinstance(item, bool):
                    raise ValueError(f"expected numbers, not {str(item).lower()} (item {i + 1})")
        return value


FALSE_WORDS = ("false", "no", "off")
TRUE_WORDS = ("true", "yes", "on")


def mode_word(value: Any, choices: tuple[str, ...], true: str | None = None) -> Any:
    """A mode as a YAML user writes it (``engine.weight_check: off``): any case, spaces around.
    YAML 1.1 reads off/no/false (any case) as the boolean false, which means 'off'; true
    (on/yes/true) means ``true`` where a mode stands for it, and is refused elsewhere."""
    word = value
    if isinstance(value, bool):
        word = "true" if value else "false"
    elif isinstance(value, str):
        word = value.strip().lower()
    else:
        return value  # a number or a list: the Literal's own error names the choices
    if word in FALSE_WORDS and "off" in choices:
        return "off"
    if word in TRUE_WORDS and word not in choices:
        if true is None:
            shown = "true (YAML reads on, yes and true as true)" if isinstance(value, bool) else repr(value)
            raise ValueError(f"expected one of {', '.join(choices)}, not {shown}: name the mode")
        return true
    return word if word in choices else value


# --------------------------------------------------------------------------- model
class LoraConfig(_Section):
    enabled: bool = Field(
        True,
        description="Train a LoRA adapter (peft) instead of all weights. The bundled tiny "
        "model's config turns this off and trains every weight.",
    )
    r: int = Field(16, ge=1, le=ROLLOUTS_MAX, description="LoRA rank.")
    alpha: int = Field(32, ge=1, le=65536, description="LoRA alpha; the update is scaled by alpha/r.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Modules that get adapters: 'all-linear' (peft's shorthand, every linear "
        "layer but the output head) or a list of module names.",
    )


class ModelConfig(_Section):
    name_or_path: str = Field(
        "tiny",
        description="Hub id (e.g. Qwen/Qwen2.5-1.5B) or local directory in Hugging Face format. "
        "'tiny' is the bundled tiny Qwen2 model in vigor_cli/assets/tiny.",
    )
    revision: Optional[str] = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Policy dtype. 'auto': bfloat16 on CUDA, float32 on CPU."
    )
    load_in_4bit: bool = Field(
        False,
        description="Load the frozen base in 4-bit NF4 with bitsandbytes (QLoRA). CUDA only; "
        "needs lora.enabled.",
    )
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        description="Where the policy runs. 'auto': CUDA when torch can use it, the CPU only when "
        "the machine has no CUDA at all; a machine with an NVIDIA device or driver that torch "
        "cannot use (driver too old for the torch build, a CPU-only torch) is an error naming "
        "the cause, never a silent CPU run. 'cpu' asks for the CPU (--device cpu).",
    )
    enable_thinking: Optional[bool] = Field(
        None,
        description="Passed to the chat template as enable_thinking (Qwen3 and other templates "
        "with a thinking switch); None leaves the template's default (Qwen3: thinking on).",
    )
    gradient_checkpointing: bool | Literal["auto"] = Field(
        "auto",
        description="Recompute each layer's activations in backward instead of keeping them "
        "(about 1/30 of the activation memory for a third more compute). 'auto': on when the "
        "policy trains on CUDA and is not the bundled tiny model, off otherwise.",
    )
    fp32_master_weights: bool = Field(
        True,
        description="Full fine-tuning (lora.enabled=false) with a 16-bit dtype: keep the trained "
        "weights and AdamW's states in float32 and run the forward under autocast in the 16-bit "
        "dtype, so small updates (lr 1e-5) are not rounded away. false: train the 16-bit "
        "weights directly (half the memory; most lr 1e-5 updates of bf16 weights round to "
        "nothing). LoRA adapters are float32 either way (peft).",
    )
    cpu_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="torch intra-op threads when the policy runs on CPU. 0 = auto: 1 for models "
        "under 50M parameters (their kernels are too small to share between threads, which "
        "would spin beside the reward workers), torch's default otherwise. Ignored on GPU.",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)


# --------------------------------------------------------------------------- task
EVERY_TASK_KEYS = ("name", "max_prompt_tokens", "pass_threshold")
"""The task.* keys every task reads (the others are each task's own: vigor_cli/tasks/__init__.py)."""
EPISODE_KEYS = ("env", "max_turns", "max_episode_tokens", "env_timeout_s")
"""task.* keys of episodes: every task reads them (an environment works on any task)."""


class TaskConfig(_Section):
    name: str = Field(
        "tiny-math",
        description="Task from the task registry (vigor_cli/tasks/__init__.py): tiny-math, "
        "tiny-code, tiny-facts, tiny-ladder, tiny-guess, math, code, and custom (your own data and rewards: "
        "task.data, task.rewards; `vigor train --data PATH` selects it). Each task reads only "
        "its own task.* keys; a key it does not read is refused, naming the key and the task.",
    )
    split_seed: int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="tiny-math/tiny-code: seed of the train/held-out split. The bundled tiny "
        "model was warmed on split 0's training part; another seed mixes its held-out set "
        "with what it was warmed on.",
    )
    train_path: Optional[str] = Field(
        None,
        description="math, code: local file or folder of training records (any format task.data "
        "reads); overrides the hub dataset.",
    )
    data_dir: Optional[str] = Field(
        None,
        description="Directory with evaluation files: <name>.jsonl for the math sets (default: "
        "the seven files shipped in vigor_cli/data/math-eval), code.jsonl (or a file) for "
        "LiveCodeBench (default: the hub).",
    )
    eval_sets: list[str] = Field(
        default_factory=list,
        description="Evaluation sets for periodic evaluation; empty means the task's default "
        "held-out set.",
    )
    max_prompt_tokens: int = Field(
        1024, ge=8, le=TOKENS_MAX, description="Prompts longer than this (in tokens) are dropped with a warning."
    )
    contest_date_start: Optional[str] = Field(
        None, description="Code task: keep problems with contest_date >= this ISO date (before the split)."
    )
    contest_date_end: Optional[str] = Field(
        None, description="Code task: keep problems with contest_date <= this ISO date (before the split)."
    )
    code_protocol: str = Field(
        "disjoint",
        description="Code task: which problems train and which evaluate (vigor_cli/tasks/code_split.py). "
        "'disjoint': problems with contest_date before task.contest_date_split train, rewarded on "
        "all their tests (public and private); evaluation is on the problems from that date on, "
        "all their tests, as LiveCodeBench intends against contamination. 'same-problem' (the "
        "paper's): the same problems train on their public tests and evaluate on their private "
        "tests. It risks rewarding hard-coding (the public tests are the statement's samples: a "
        "program that prints them from a table scores 1.0 in training and 0 on the private tests) "
        "and evaluates problems the model was trained on (contaminated by design); the hard_coding "
        "health check also grades the private tests of a training program that passes every "
        "public one (its reward stays the public tests').",
    )
    contest_date_split: str = Field(
        "2024-08-01",
        description="Code task, task.code_protocol=disjoint: problems with contest_date before this "
        "ISO date train, those from it on evaluate (LiveCodeBench release_v6 spans May 2023 to "
        "April 2025). `vigor train` prints the split.",
    )
    lcb_release: str = Field(
        "release_v6",
        description="Code task: LiveCodeBench release whose files are read (release_v1..release_v6 "
        "are cumulative: test.jsonl..test6.jsonl; v1..v6 one file each), from the hub repository "
        "livecodebench/code_generation_lite or from a local folder holding those files.",
    )
    allow_weak_sandbox: bool = Field(
        False,
        description="Code tasks: run generated programs even where the sandbox cannot give "
        "full isolation (no Landlock, not root, no namespaces). Off: such a run stops with an "
        "error naming what is missing.",
    )
    code_reward: Literal["full", "fraction"] = Field(
        "full",
        description="Code task reward: 'full' = 1 if every test passes (the paper's full pass "
        "rate), 'fraction' = share of tests passed.",
    )
    # ---- custom: your own data and rewards (vigor_cli/tasks/custom.py, README "Train on your own task")
    data: Optional[str] = Field(
        None,
        description="custom: training data (--data): a .jsonl/.json/.csv/.tsv/.parquet file, a "
        "folder written by datasets' save_to_disk, a folder datasets.load_dataset reads, or a hub "
        "dataset org/name; PATH:SPLIT or org/name:SPLIT picks a split (default train). A 'prompt' "
        "column (a string, or a list of system/user messages) is the prompt; every other column "
        "reaches the reward functions by name.",
    )
    eval_data: Optional[str] = Field(
        None,
        description="custom: held-out data (--eval-data), any form task.data takes (default split "
        "test, then validation), scored by the same rewards. Unset: the first 64 training rows "
        "are evaluated (set 'train-sample').",
    )
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="custom: column names the data uses instead of the ones expected, as "
        "{expected: column}: prompt (--prompt-field), answer (--answer-field, the gold the math "
        "verifier reads), or any column a reward function names.",
    )
    prompt_template: Optional[str] = Field(
        None,
        description="custom: the prompt built from a row's columns, e.g. 'Reverse {word}:' "
        "({{ and }} for literal braces); replaces the prompt column.",
    )
    system_prompt: Optional[str] = Field(
        None,
        description="custom: a system message put before each prompt (--system-prompt); the "
        "prompt becomes a message list, so a tokenizer with a chat template applies it.",
    )
    chat_template: bool | Literal["auto"] = Field(
        "auto",
        description="custom: 'auto' (TRL's rule) applies the tokenizer's chat template to "
        "message-list prompts (and to prompts given a system message) and uses string prompts "
        "as they are; true applies it to string prompts too (as one user message); false never "
        "(message contents joined by blank lines). Without a chat template, messages are joined.",
    )
    rewards: list[str] = Field(
        default_factory=list,
        description="custom: reward functions (--reward, repeatable): a built-in verifier by name "
        "(math, code, tiny-math, tiny-code, tiny-facts, tiny-ladder, tiny-guess) or FILE.py:FUNC, a function "
        "func(prompts, completions, **columns) -> list[float | None] (TRL's signature; None: "
        "cannot score). User code runs in the trainer's process.",
    )
    reward_weights: list[Annotated[float, Field(ge=-1e6, le=1e6)]] = Field(
        default_factory=list,
        description="custom: one weight per reward (--reward-weights 1,0.5); the reward is the "
        "weighted sum of the values that are not None (TRL's rule). Empty: every weight 1.",
    )
    reward_timeout: float = Field(
        600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="custom: seconds one call of a reward function FILE.py:FUNC may take (a call "
        "grades a round's completions); a call past it is stopped and the run ends in one line "
        "naming the function and step. Raise it for slow functions (an LLM judge).",
    )

    pass_threshold: float = Field(
        1.0,
        ge=-1e6,
        le=1e6,
        description="Every task: a sample passes when its reward is at least this (--pass-threshold). "
        "The pass rate (share of samples passing: reward/pass_rate, eval/pass_rate) and pass@k are "
        "counted with it, beside the mean reward; 1 is a correct answer or a full test pass for the "
        "built-in verifiers.",
    )

    # ---- episodes: an environment answers the model's turns (vigor_cli/episodes/, docs/episodes.md)
    env: Optional[str] = Field(
        None,
        description="An environment that answers the model's turns, so that each rollout is an "
        "episode (--env): a built-in by name (vigor_cli/episodes/registry.py: code-feedback on the "
        "code tasks, higher-lower on numeric answers, retry on any task) or FILE.py:Factory, an "
        "environment class in TRL's environment_factory convention (reset, public methods as "
        "tools, optional get_reward). Unset: one completion per rollout.",
    )
    max_turns: int = Field(
        3, ge=1, le=64, description="With task.env: the model's turns per episode at most (--max-turns)."
    )
    max_episode_tokens: Optional[int] = Field(
        None,
        ge=2,
        le=TOKENS_MAX,
        description="With task.env: tokens after the prompt per episode, the model's and the "
        "environment's together; unset: 2 x task.max_turns x sampling.max_new_tokens (each turn's "
        "tokens, and as many again for the answers).",
    )
    env_timeout_s: float = Field(
        30.0,
        gt=0,
        le=86400,
        description="With task.env FILE.py:Factory: seconds one call into the environment (making "
        "it, reset, a tool, get_reward) may take; past it that episode ends unscored (env_timeout).",
    )

    @field_validator("name")
    @classmethod
    def _registered_task(cls, name: str, info: ValidationInfo) -> str:
        return _check_name(info, "task.name", name)

    @field_validator("code_protocol")
    @classmethod
    def _registered_protocol(cls, name: str, info: ValidationInfo) -> str:
        return _check_name(info, "task.code_protocol", name)

    @field_validator("env")
    @classmethod
    def _known_env(cls, spec: Optional[str], info: ValidationInfo) -> Optional[str]:
        return spec if spec is None else _check_name(info, "task.env", spec)

    def episode_tokens(self, max_new_tokens: int) -> int:
        """Tokens after the prompt an episode may hold (task.max_episode_tokens or its default)."""
        return self.max_episode_tokens or 2 * self.max_turns * max_new_tokens

    @field_validator("*", mode="after")
    @classmethod
    def _read_by_the_task(cls, value: Any, info: ValidationInfo) -> Any:
        """A task.* key the chosen task does not read is refused (never silently ignored), then
        the task's own rules on the key: both come from the caller that knows the task registry
        (``task_rules`` in the validation context, from :mod:`vigor_cli.settings`)."""
        rules = (info.context or {}).get("task_rules")
        key, name = info.field_name, info.data.get("name")
        if rules is None or key in (*EVERY_TASK_KEYS, *EPISODE_KEYS) or name is None:
            return value
        changed = value != cls.model_fields[key].get_default(call_default_factory=True)
        try:
            rules.check_key(name, key, value, changed, info.data)
        except ValueError as e:
            raise _task_rule(str(e)) from None
        return value

    @model_validator(mode="after")
    def _task_needs(self, info: ValidationInfo) -> "TaskConfig":
        """What the task needs across its keys (the custom task: data and a reward)."""
        rules = (info.context or {}).get("task_rules")
        if rules is not None:
            try:
                rules.check_task(self)
            except ValueError as e:
                raise _task_rule(str(e)) from None
        return self


def _task_rule(message: str) -> Exception:
    """A task rule's error: printed as is after its source (see _format_validation_error)."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("task_rule", "{message}", {"message": message})


# --------------------------------------------------------------------------- allocation
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
        description="Rollout allocation strategy, a name in the strategy registry "
        "(vigor_cli/allocation/registry.py; `vigor train --help` lists them; "
        "vigor_cli/allocation/README.md, docs/algorithms.md). Default 'auto' (why: the README's "
        "'which strategy when' and BENCHMARKS.md). 'random' and "
        "'difficulty' are VIGOR's ablations; 'knapsack' is Knapsack-RL, 'reinforce-ada' "
        "Reinforce-Ada, 'pilot-commit' Pilot-Commit, 'auto' a census round then a wide or deep plan.",
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


# --------------------------------------------------------------------------- sampling
class SamplingConfig(_Section):
    temperature: float = Field(1.0, ge=0, le=10, description="Sampling temperature for rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling for rollouts.")
    max_new_tokens: int = Field(
        1024, ge=1, le=TOKENS_MAX, description="Longest completion; longer ones are cut and flagged truncated."
    )


# --------------------------------------------------------------------------- engine
class EngineConfig(_Section):
    kind: str = Field(
        "auto",
        description="Rollout engine: 'auto' or a name in the engine registry "
        "(vigor_cli/rollout/__init__.py: hf, vllm). 'auto': vLLM when the policy runs on CUDA and vllm "
        "imports; transformers ('hf') on the CPU or, with a printed warning, when vllm is not "
        "installed. A vllm that is installed but does not import is an error, as is CUDA "
        "present but unusable (see model.device).",
    )
    gen_batch_tokens: int = Field(
        16384,
        ge=64,
        le=2**30,
        description="hf engine: rows per generate call are bounded so that rows x "
        "(prompt + max_new_tokens) stays under this.",
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1)] | Literal["auto"] = Field(
        0.35,
        description="vllm: share of the GPU's memory the engine takes for its bf16 weights, "
        "working memory and KV cache (it sleeps, holding none of it, during the update). "
        "'auto': what is free once the policy is loaded, less AdamW's states and 1 GiB + 5% "
        "headroom, capped at 0.9 (vigor_cli/memory_plan.py; `vigor train --dry-run` shows it).",
    )
    max_model_len: Optional[int] = Field(
        None, ge=16, le=TOKENS_MAX, description="vllm: context length; default task.max_prompt_tokens + "
        "sampling.max_new_tokens, capped at the model's max_position_embeddings."
    )
    sleep_level: Literal[1, 2] = Field(
        2,
        description="vllm: sleep level between generation phases. 2 discards the engine's "
        "weights and KV cache (least memory; every phase pushes the policy again); 1 keeps "
        "the weights in CPU memory, so a phase whose policy did not change pushes nothing.",
    )
    enforce_eager: bool = Field(
        False,
        description="vllm: skip torch.compile and CUDA graph capture (faster start, slower "
        "decoding).",
    )
    weight_check: Literal["error", "warn", "off"] = Field(
        "error",
        description="After every step, check that the engine samples from the policy's weights: "
        "compare engine, policy and base-model log-probs on the same sampled tokens (rule in "
        "vigor_cli/rollout/weight_check.py). 'error' stops training when the engine tracks the "
        "base or stale weights, 'warn' prints and logs it, 'off' (or false) skips the check.",
    )
    weight_check_rows: int = Field(
        16,
        ge=1,
        le=4096,
        description="Completions per step the weight check scores with the base model (one "
        "no-grad forward over them; free when grpo.beta > 0, which computes it anyway).",
    )
    logprob_check_threshold: float = Field(
        0.1,
        ge=0,
        le=100,
        description="The weight check also fails when the mean |engine log-prob - policy "
        "log-prob| exceeds this plus ln(1/sampling.top_p) (the most a top-p engine's "
        "renormalised log-probs may differ), whatever the base says: garbage weights. bf16 "
        "numerics stay well below it.",
    )

    @field_validator("weight_check", mode="before")
    @classmethod
    def _weight_check_word(cls, value: Any) -> Any:
        return mode_word(value, ("error", "warn", "off"))

    @field_validator("kind")
    @classmethod
    def _registered_engine(cls, kind: str, info: ValidationInfo) -> str:
        return _check_name(info, "engine.kind", kind)


# --------------------------------------------------------------------------- GRPO
class GRPOConfig(_Section):
    loss_agg: str = Field(
        "dapo",
        description="Loss aggregation, a name in vigor_cli/grpo.py's LOSS_AGGREGATIONS: 'dapo' token sum / tokens in step; 'grpo' mean of "
        "per-sequence token means; 'dr_grpo' sum / (sequences x max_new_tokens); "
        "'prompt_mean' mean over prompts of each prompt's token mean over all its rollouts "
        "(every prompt weighs the same, however many rollouts it got).",
    )
    scale_rewards: str = Field(
        "group",
        description="Advantage scale, a name in vigor_cli/grpo.py's ADVANTAGE_SCALINGS: group std "
        "(GRPO), batch std, or none (Dr. GRPO).",
    )
    epsilon: float = Field(0.2, ge=0, lt=1, description="PPO clip: lower bound 1 - epsilon (below 1).")
    epsilon_high: float = Field(0.28, ge=0, le=10, description="PPO clip: upper bound 1 + epsilon_high (DAPO).")
    beta: float = Field(0.0, ge=0, le=100, description="KL coefficient to the reference (k3 estimator).")
    mu: int = Field(1, ge=1, le=64, description="Optimisation passes over each step's rollouts.")
    mask_truncated: bool = Field(
        False, description="Exclude truncated completions from the loss (DAPO overlong filtering)."
    )
    learning_rate: float = Field(1e-5, gt=0, le=1.0, description="AdamW learning rate (at most 1).")
    weight_decay: float = Field(0.0, ge=0, le=10, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, le=1e6, description="Gradient clipping norm.")
    warmup_steps: int = Field(0, ge=0, le=STEPS_MAX, description="Linear learning-rate warm-up steps.")
    micro_batch_tokens: int = Field(
        8192,
        ge=16,
        le=2**30,
        description="Token budget of one forward/backward micro-batch; gradients accumulate "
        "so the loss is the same as one big batch.",
    )
    logits_chunk_tokens: int = Field(
        512,
        ge=0,
        le=TOKENS_MAX,
        description="Completion positions per output-layer chunk: log-probs and entropies are "
        "computed on completion positions only, this many at a time under checkpointing, so "
        "no [tokens, vocabulary] float32 tensor exists (about 20 bytes x this x vocabulary at "
        "the chunk's peak). 0: the full logits at every position (the old path; about 10.6 "
        "bytes per token per vocabulary entry).",
    )

    importance_sampling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Correct the policy-gradient term for the gap between the engine that sampled "
        "(vLLM: bf16, its own kernels) and the policy that trains: each token's loss is weighted by "
        "min(pi_policy / pi_engine, grpo.importance_sampling_cap), the ratio of the policy's "
        "probability (before the update) to the engine's (TRL's and verl's token-level truncated "
        "importance sampling; vigor_cli/grpo.py). 'auto': on with an engine that holds its own "
        "copy of the weights (vllm), off with one that samples with the policy itself (hf). "
        "engine.weight_check stays the alarm for an engine on stale weights.",
    )
    importance_sampling_cap: float = Field(
        3.0, ge=1.0, le=1000.0,
        description="Upper bound of the importance-sampling ratio (its truncation, as TRL's "
        "vllm_importance_sampling_cap).",
    )
    importance_sampling_level: str = Field(
        "token",
        description="The PPO ratio pi / pi_old of the clipped loss, a name in vigor_cli/grpo.py's "
        "RATIO_LEVELS (TRL's importance_sampling_level, the same names): 'token' one ratio per "
        "token (GRPO, DAPO); 'sequence' one per completion, exp of the mean log-ratio over its "
        "tokens, clipped as a whole (GSPO). Not the engine correction (grpo.importance_sampling).",
    )

    @field_validator("importance_sampling", mode="before")
    @classmethod
    def _importance_sampling_word(cls, value: Any) -> Any:
        return mode_word(value, ("auto", "on", "off"), true="on")

    @field_validator("loss_agg", "scale_rewards", "importance_sampling_level")
    @classmethod
    def _registered_function(cls, name: str, info: ValidationInfo) -> str:
        return _check_name(info, f"grpo.{info.field_name}", name)


# --------------------------------------------------------------------------- loop
class TrainConfig(_Section):
    steps: int = Field(100, ge=1, le=STEPS_MAX, description="Optimizer steps (each one allocation + update).")
    max_rollouts: Optional[int] = Field(
        None, ge=1, le=TOTAL_ROLLOUTS_MAX, description="Also stop after the step at which this many "
        "rollouts were generated in all (an equal-rollout comparison of strategies); unset: stop "
        "by steps only."
    )
    prompts_per_step: int = Field(
        64, ge=1, le=10**6, description="Prompts per step (the batch P that allocation starts from)."
    )
    seed: int = Field(
        0, ge=0, le=SEED_MAX, description="Seeds data order, sampling, allocation and init (0 to 2^32 - 1)."
    )
    eval_every: int = Field(
        10, ge=0, le=STEPS_MAX, description="Held-out evaluation every N steps (0: only at start and end)."
    )
    eval_every_rollouts: Optional[int] = Field(
        None, ge=1, le=TOTAL_ROLLOUTS_MAX, description="Also evaluate after each step that takes the "
        "rollouts generated past a multiple of N; unset: by train.eval_every only."
    )
    eval_samples: int = Field(1, ge=1, le=1024, description="Samples per held-out problem (avg@n).")
    eval_limit: Optional[int] = Field(
        None, ge=1, le=10**7, description="Evaluate on at most this many held-out problems."
    )
    eval_temperature: float = Field(0.0, ge=0, le=10, description="Evaluation temperature (0 = greedy).")
    save_every: int = Field(
        25, ge=0, le=STEPS_MAX, description="Checkpoint every N steps (0: only at the end)."
    )
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="Checkpoints kept on disk (oldest removed).")
    log_completions_every: int = Field(
        10, ge=0, le=STEPS_MAX, description="Print a table of a few completions every N steps (0: never)."
    )
    output_dir: str = Field("runs", description="Parent directory of run directories.")
    report_to: list[str] = Field(
        default_factory=list, description="Dashboards that get every metrics.jsonl line and the "
        "completions sample, names in vigor_cli/tracking.py's registry (tensorboard, wandb, trackio; "
        "several allowed, comma-separated; empty or 'none': none). Each needs its extra, e.g. "
        "pip install 'vigor[tensorboard]'.",
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _known_backends(cls, v: Any, info: ValidationInfo) -> list[str]:
        """One name, comma-separated names or a list; 'none' alone is []; each name is checked
        against the tracker registry where it is known (vigor_cli/settings.py)."""
        if v is None:
            return []
        items = v if isinstance(v, (list, tuple)) else [v]
        if not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected backend names, not {v!r}")
        names = list(dict.fromkeys(n.strip() for i in items for n in i.split(",") if n.strip()))
        if not names and any(i.strip() for i in items):  # ',,': a list of nothing, not 'none'
            raise ValueError(f"no backend named in {v!r}; give names (comma-separated) or none")
        if "none" in names and len(names) > 1:
            raise ValueError("'none' turns dashboards off; it cannot be combined with other backends")
        names = [n for n in names if n != "none"]
        for name in names:
            _check_name(info, "train.report_to", name)
        return names

    run_name: Optional[str] = Field(
        None, description="Run directory name (a plain name, no '/'); default "
        "<date>-<task>-<strategy>-s<seed>."
    )

    @field_validator("run_name")
    @classmethod
    def _plain_run_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or "/" in v or "\\" in v or v in (".", "..") or "\0" in v):
            raise ValueError("a plain directory name is expected (no '/', not '.' or '..'); "
                             "put the parent folder in train.output_dir")
        return v
    gpu_memory_gib: Optional[float] = Field(
        None,
        gt=0,
        le=16384,
        description="GPU memory (GiB) the memory plan assumes instead of the visible GPU's free "
        "memory: plans a GPU run on any machine (`vigor train --dry-run --gpu-memory 24`), or "
        "keeps room for other processes. Unset: torch.cuda.mem_get_info at start.",
    )
    reward_workers: int = Field(
        0, ge=0, le=1024, description="Processes that compute rewards; 0 = number of CPU cores."
    )


# --------------------------------------------------------------------------- health checks
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
    "kl_jump": {"threshold": 10.0, "steps": 1, "floor": 0.01},
    "clip_jump": {"threshold": 5.0, "steps": 1, "floor": 0.05},
}
"""Each health check's default rule; ``--set health.<check>.threshold=...`` changes one value
and keeps the rest."""


def _rule(name: str, what: str) -> Any:
    kind = JumpRule if "floor" in HEALTH_DEFAULTS[name] else HealthRule
    return Field(default_factory=lambda: kind(**HEALTH_DEFAULTS[name]), description=what)


class HealthConfig(_Section):
    """Checks on every step for rollouts spent without learning signal (vigor_cli/health.py):
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


class RunConfig(_Section):
    """Everything one `vigor train` run needs; saved resolved as config.yaml in the run dir."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    allocation: AllocationConfig = Field(default_factory=AllocationConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)

    def completion_tokens(self) -> int:
        """Tokens a rollout may hold after its prompt: sampling.max_new_tokens, or with
        task.env an episode's (task.max_episode_tokens or its default)."""
        if self.task.env is None:
            return self.sampling.max_new_tokens
        return self.task.episode_tokens(self.sampling.max_new_tokens)

    def _completion_key(self) -> str:
        if self.task.env is None:
            return "sampling.max_new_tokens"
        return "task.max_episode_tokens" if self.task.max_episode_tokens else "the episode's tokens (task.max_episode_tokens)"

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> "RunConfig":
        """Rules across sections; the strategy's own rules come from its registry entry, through
        ``strategy_rules(cfg)`` in the validation context (:mod:`vigor_cli.settings`; left out
        by `vigor simulate`, which checks each strategy it compares instead of the config's)."""
        s, g, e, t = self.sampling, self.grpo, self.engine, self.task
        if self.model.load_in_4bit and not self.model.lora.enabled:
            raise ValueError("model.load_in_4bit needs model.lora.enabled=true (QLoRA)")
        if t.env is None:
            given = [k for k in EPISODE_KEYS[1:] if getattr(t, k) != TaskConfig.model_fields[k].default]
            if given:
                raise ValueError(f"task.{given[0]} is read only with task.env (--env NAME or FILE.py:Factory)")
        if g.micro_batch_tokens < s.max_new_tokens:
            raise ValueError(
                f"grpo.micro_batch_tokens ({g.micro_batch_tokens}) must be at least "
                f"sampling.max_new_tokens ({s.max_new_tokens})"
            )
        after, what = self.completion_tokens(), self._completion_key()
        row = t.max_prompt_tokens + after
        if e.gen_batch_tokens < row:
            raise ValueError(
                f"engine.gen_batch_tokens ({e.gen_batch_tokens}) must hold one row: "
                f"task.max_prompt_tokens + {what} ({t.max_prompt_tokens} + {after})"
            )
        if e.max_model_len is not None and e.max_model_len < row:
            raise ValueError(
                f"engine.max_model_len ({e.max_model_len}) must hold task.max_prompt_tokens + "
                f"{what} ({t.max_prompt_tokens} + {after})"
            )
        strategy_rules = (info.context or {}).get("strategy_rules")
        if strategy_rules is not None:
            strategy_rules(self)
        return self


# --------------------------------------------------------------------------- loading
def _format_validation_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{source}: unknown config key '{key}'"
    if kind == "task_rule":  # the message names the key and the task
        return f"{source}: {first['msg']}"
    msg = first["msg"].removeprefix("Value error, ").removeprefix(f"{key}: ")
    if kind == "value_error" and (not first["loc"] or msg.startswith(f"{key}.")):
        return f"{source}: {msg}"  # a rule across sections or keys: the message names its keys
    got = first.get("input")
    shown = repr(got) if not isinstance(got, dict) else "a mapping"
    return f"{source}: bad value for '{key}': {msg} (got {shown})"


_COPIED_FROM = {"allocation.rollouts_per_prompt": "allocation.group_size"}
"""Keys a validator fills from another key when only that one is given (AllocationConfig's
``_budget_from_old_key``): an error in the copy names the key the user set."""


def _source_of(err: ValidationError, given: dict[str, str], default: str) -> str:
    """Where the offending value came from: the ``--set`` (or flag) that set the key the error
    names (or, for a rule across keys, a key its message names); else the file, or 'config'."""
    first = err.errors()[0]
    loc, text = ".".join(str(p) for p in first["loc"]), first["msg"]
    if _COPIED_FROM.get(loc) in given and loc not in given:
        loc = _COPIED_FROM[loc]  # its value came from the key given (an older config's name)
    latest_first = list(reversed(given.items()))  # the last one given wins, as in the tree
    for key, source in latest_first:
        if loc and (loc == key or loc.startswith(key + ".")):
            return source
    for key, source in latest_first:
        if key in text and (not loc or key.startswith(loc + ".")):
            return source
    for key, source in latest_first:  # a key under the error's place (an unknown 'nosuch.key')
        if loc and key.startswith(loc + "."):
            return source
    for key, source in latest_first:  # the message names a section of the key given
        parts = key.split(".")
        if any(".".join(parts[:n]) in text for n in range(len(parts) - 1, 1, -1)):
            return source
    return default


def _refuse_nul(tree: Any, given: dict[str, str], default: str, prefix: str = "") -> None:
    """No key takes text with a NUL character (a path with one is no path: the OS refuses it,
    later, with a traceback); one line naming where it came from."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, str) and "\x00" in v:
            source = next((src for g, src in reversed(given.items()) if key == g or key.startswith(g + ".")), default)
            raise ConfigError(f"{source}: {key} holds a NUL character ({v[:60]!r}); no key takes one")
        _refuse_nul(v, given, default, f"{key}.")


def _set_dotted(tree: dict, dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: '{p}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key.path=value`` override; the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value, e.g. allocation.alpha=0.25")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    from vigor_cli.user_files import FormatError, parse_yaml

    try:
        value = parse_yaml(raw, f"--set {key}") if raw.strip() else ""
    except FormatError as e:
        reason = e.reason if e.reason.startswith("not valid YAML") else f"not valid YAML: {e.reason}"
        raise ConfigError(f"--set {key}={raw[:80]}: the value is {reason}") from None
    return key, value


def load_yaml(path: str | Path) -> dict:
    """A YAML config file as a dict, read by the one bounded reader (vigor_cli/user_files.py):
    not a regular file, too big, not UTF-8, not YAML, a duplicate key or deep nesting is
    one ConfigError line naming the file (and line)."""
    from vigor_cli.user_files import CONFIG_MAX_BYTES, parse_yaml, read_bytes

    p = Path(path)
    try:
        raw = read_bytes(p, limit=CONFIG_MAX_BYTES)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{p}: not a UTF-8 text file (a YAML run config is expected)") from None
        data = parse_yaml(text, str(p))
    except ConfigError:
        raise
    except UserError as e:
        raise ConfigError(str(e).replace(": no such file", ": config file not found", 1)) from None
    if data is None:  # an empty file, or only comments: a truncated or wrong file, not "defaults"
        raise ConfigError(f"{p}: empty (no keys); a run config is a YAML mapping of sections "
                          "(e.g. 'train: {steps: 10}')")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping of sections")
    return data


def assemble(
    path: str | Path | None,
    overrides: dict[str, Any] | None,
    sets: list[str] | None,
    flags: dict[str, str] | None,
    context: dict[str, Callable[..., None]],
    tree: dict | None = None,
) -> RunConfig:
    """Defaults <- YAML file <- ``overrides`` (dotted keys from named CLI flags) <- ``--set``,
    validated with ``context`` (the registry checks: ``check_name``, ``strategy_rules``).

    Use :func:`vigor_cli.settings.build_config`, which passes the registry checks. An error
    names where the bad value came from: ``--set key=value``, the flag's key, or the file.
    ``flags`` maps an override's key to the command-line flag that set it, for the message.
    ``tree``: the keys to start from instead of a file (a copy is changed)."""
    import copy

    tree = copy.deepcopy(tree) if tree is not None else load_yaml(path) if path else {}
    given: dict[str, str] = {}
    for k, v in (overrides or {}).items():
        if v is not None:
            flag = (flags or {}).get(k)
            shown = ",".join(map(str, v)) if isinstance(v, list) else v  # a repeated flag's values
            given[k] = f"{flag} {shown} ({k})" if flag else f"{k}={shown} (command-line flag)"
            _set_dotted(tree, k, v, given[k])
    for s in sets or []:
        k, v = parse_override(s)
        given.pop(k, None)
        given[k] = f"--set {s.strip()}"
        _set_dotted(tree, k, v, given[k])
    try:
        cfg = RunConfig.model_validate(tree, context=context)
    except ValidationError as e:
        source = _source_of(e, given, str(path) if path else "config")
        raise ConfigError(_format_validation_error(e, source)) from None
    _refuse_nul(cfg.model_dump(), given, str(path) if path else "config")
    old = cfg.allocation.deprecated_keys()
    if old:  # kept for one release: the flat keys of the built-in strategies, allocation.options
        print(f"note: deprecated allocation keys (removed in the next release): {'; '.join(old)}",
              file=sys.stderr)
    return cfg


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as YAML (what a run directory stores)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def _sections_of(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The nested sections of a config model: its model-typed fields, and for the allocation
    section each strategy's own section (``allocation.<strategy>``, from the registry)."""
    out = {name: f.annotation for name, f in model.model_fields.items()
           if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)}
    if model is AllocationConfig:
        out.update(AllocationConfig.section_models())
    return out


def field_info(dotted: str) -> Any:
    """The pydantic FieldInfo of a config key (``allocation.knapsack.min`` too); KeyError if none."""
    *sections, name = dotted.split(".")
    model: Any = RunConfig
    for part in sections:
        model = _sections_of(model)[part]
    return model.model_fields[name]


def describe(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, description) for every key: checked by the tests (every key documented)."""
    rows: list[tuple[str, Any, str]] = []
    nested = _sections_of(model)
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        if name in nested:
            rows.extend(describe(nested[name], key + "."))
        else:
            default = field.get_default(call_default_factory=True)
            rows.append((key, default, field.description or ""))
    for name, sub_model in nested.items():
        if name not in model.model_fields:  # a strategy's own section
            rows.extend(describe(sub_model, f"{prefix}{name}."))
    return rows


def field_bounds(dotted: str) -> dict[str, float]:
    """The bounds a key's Field declares, as {'ge'|'gt': low, 'le'|'lt': high} (absent: unbounded
    that side), for command-line options that set a config key: a flag and its key share bounds."""
    found: dict[str, float] = {}
    for meta in field_info(dotted).metadata:
        for side in ("ge", "gt", "le", "lt"):
            if getattr(meta, side, None) is not None:
                found[side] = getattr(meta, side)
    return found

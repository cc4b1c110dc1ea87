"""The task section (``task.*``): the task's data and evaluation sets, the code task's
protocol, the custom task's data and rewards, the pass threshold and episodes. Which keys a
task reads is checked through the validation context (the task registry's rules)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from vigor_cli.config.base import SEED_MAX, TOKENS_MAX, _check_name, _Section


EVERY_TASK_KEYS = ("name", "max_prompt_tokens", "pass_threshold")
"""The task.* keys every task reads (the others are each task's own: vigor_cli/tasks/__init__.py)."""
EPISODE_KEYS = ("env", "max_turns", "max_episode_tokens", "env_timeout_s")
"""task.* keys of episodes: every task reads them (an environment works on any task)."""


class TaskConfig(_Section):
    name: str = Field(
        "tiny-math",
        description="Task from the task registry (vigor_cli/tasks/__init__.py): tiny-math, "
        "tiny-code, tiny-facts, tiny-ladder, tiny-guess, tiny-products, math, code, and custom (your own data and rewards: "
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
        "(math, code, tiny-math, tiny-code, tiny-facts, tiny-ladder, tiny-guess, tiny-products) or FILE.py:FUNC, a function "
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
        "code tasks, higher-lower on numeric answers, retry on any task, calculator (a multiply tool) on "
        "math tasks) or FILE.py:Factory, an "
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
        "it, reset, a tool, str() of a result, get_reward) may take; past it the call is stopped and "
        "that episode ends unscored (env_timeout); a get_reward past it, or reset past it on each of "
        "the first two episodes, stops the run.",
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

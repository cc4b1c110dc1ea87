"""What `vigor train` reads before any weights load: the static checks, the memory plan, the
task's training and evaluation sets, the tokenizer and the encoded training prompts. Bad
input fails here, in one line, before a model is loaded or a run directory is made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vigor_cli.config import RunConfig
from vigor_cli.settings import check_against_data
from vigor_cli.errors import UserError
from vigor_cli.task_base import Example
from vigor_cli.evaluate.sets import keep_fitting, warn
from vigor_cli.evaluate.sets import make_env


def announce_memory_plan(cfg: RunConfig, out: Any) -> Any:
    """Print the memory plan (vigor_cli/model/memory_plan.py) and refuse, exit 2, when it cannot fit."""
    from vigor_cli.model import memory_plan

    plan = memory_plan.plan_run(cfg)
    out.print(memory_plan.render(plan))
    memory_plan.check(plan)
    return plan


@dataclass
class TrainData:
    """A run's task, tokenizer, training prompts (uid -> example, uid -> token ids, those over
    task.max_prompt_tokens dropped) and held-out sets (name -> examples)."""

    task: Any
    tokenizer: Any
    examples: dict[str, Example]
    prompt_ids: dict[str, list[int]]
    eval_sets: dict[str, list[Example]]
    memory_plan: Any
    dropped: int = 0
    """Training prompts left out for being longer than task.max_prompt_tokens."""
    prompt_texts: dict[str, str] = field(default_factory=dict)
    """uid -> the prompt as the model sees it (rendered): what the logs show."""
    env: Any = None
    """task.env's environment (vigor_cli/episodes/), None without one."""


def load_train_data(cfg: RunConfig, out: Any) -> TrainData:
    """Every check that needs no download (vigor_cli/train/preflight.py), the memory plan, the
    task's sets and the tokenizer; the task's reward workers are closed if any of it fails.
    Prompts the model cannot take are left out of training and evaluation alike
    (:func:`fit_prompts`), each set with one warning line."""
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.train.preflight import check_static, check_tokenizer
    from vigor_cli.tasks import get_task

    t = cfg.train
    check_static(cfg)
    # The plan reads the model's config.json (a small download for a hub id); it refuses a
    # run that cannot fit before any weights load.
    plan = announce_memory_plan(cfg, out)
    task = get_task(cfg.task, workers=t.reward_workers)
    try:
        train_examples = task.train_examples()
        check_against_data(cfg, len(train_examples))  # the rules that need the training-set size
        tokenizer = load_tokenizer(cfg.model)
        check_tokenizer(cfg, tokenizer, warn=lambda m: out.print(m))
        env = make_env(cfg, task, tokenizer)
        texts: dict[str, str] = {}
        examples, prompt_ids, eval_sets = fitted_sets(cfg, task, tokenizer, train_examples, texts=texts, env=env)
        for line in task.describe_data():  # the code task's split; what --data and --eval-data read
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    except BaseException:
        task.close()
        raise
    return TrainData(task, tokenizer, examples, prompt_ids, eval_sets, plan, len(train_examples) - len(examples),
                     prompt_texts=texts, env=env)


def encode_prompts(cfg: RunConfig, task: Any, tokenizer: Any, train_examples: list[Example],
                   enough: bool = True, texts: dict[str, str] | None = None, env: Any = None
                   ) -> tuple[dict[str, Example], dict[str, list[int]]]:
    """The training prompts' token ids; prompts the model cannot take (:func:`fit_prompts`)
    are dropped with one warning line (``enough``: refuse when fewer than a step's prompts
    remain). ``texts`` gets each kept prompt as rendered."""
    kept, prompt_ids = keep_fitting(cfg.task.max_prompt_tokens, task, tokenizer, train_examples, "training prompts",
                                    texts, env)
    examples = {ex.uid: ex for ex in kept}
    if enough and len(examples) < cfg.train.prompts_per_step:
        raise UserError(
            f"only {len(examples)} training prompts fit task.max_prompt_tokens="
            f"{cfg.task.max_prompt_tokens}; raise it or lower train.prompts_per_step ({cfg.train.prompts_per_step})"
        )
    return examples, prompt_ids


def fitted_sets(cfg: RunConfig, task: Any, tokenizer: Any, train_examples: list[Example], enough: bool = True,
                texts: dict[str, str] | None = None, env: Any = None
                ) -> tuple[dict[str, Example], dict[str, list[int]], dict[str, list[Example]]]:
    """The training prompts the model can take (:func:`encode_prompts`), then the held-out
    sets without the prompts it cannot (:func:`held_out_sets`; drawn from training, without
    those training left out)."""
    examples, prompt_ids = encode_prompts(cfg, task, tokenizer, train_examples, enough, texts, env)
    task.leave_out_of_training({ex.uid for ex in train_examples} - set(examples))
    return examples, prompt_ids, held_out_sets(cfg, task, tokenizer, model_context(cfg), env)


def model_context(cfg: RunConfig) -> int | None:
    """The longest prompt + completion the engine takes, before the weights load:
    engine.max_model_len, else the model's max_position_embeddings (None: not known)."""
    from vigor_cli.model.shape import model_shape

    if cfg.engine.max_model_len:
        return int(cfg.engine.max_model_len)
    try:
        return model_shape(cfg.model).max_positions
    except UserError:  # no config.json to read here (the memory plan said so already)
        return None


def held_out_sets(cfg: RunConfig, task: Any, tokenizer: Any, context: int | None = None,
                  env: Any = None) -> dict[str, list[Example]]:
    """The run's evaluation sets (train.eval_limit examples of each), without the prompts
    the model cannot take (:func:`fit_prompts`: an evaluation never spends time on a prompt
    training would drop), each set that loses some saying so in one warning line, as does
    each whose prompts with sampling.max_new_tokens pass the model's ``context``."""
    sets: dict[str, list[Example]] = {}
    for name in cfg.task.eval_sets or [None]:
        label = name or cfg.task.name
        exs = task.eval_examples(name)
        exs = exs[: cfg.train.eval_limit] if cfg.train.eval_limit else exs
        sets[label], kept = keep_fitting(cfg.task.max_prompt_tokens, task, tokenizer, exs,
                                         f"held-out prompts of set {label}", env=env)
        room = cfg.completion_tokens()  # under task.env, an episode's whole exchange
        key = "sampling.max_new_tokens" if cfg.task.env is None else "task.max_episode_tokens"
        over = sum(len(ids) + room > context for ids in kept.values()) if context else 0
        if over:
            fits = context - max(len(ids) for ids in kept.values())
            hint = f" (at most {fits} fits every one)" if fits > 0 else ""
            warn(f"{over} of {len(kept)} held-out prompts of set {label} plus {key}={room} exceed the model's "
                 f"context ({context} tokens): their completions will be cut; lower {key}{hint} or "
                 "task.max_prompt_tokens")
        if not sets[label]:
            raise UserError(f"evaluation set {label}: none of its {len(exs)} prompts fit task.max_prompt_tokens="
                            f"{cfg.task.max_prompt_tokens}; raise it, or give held-out data the model can take")
    return sets


def dry_run_health(cfg: RunConfig) -> list[str]:
    """`vigor train --dry-run`'s health lines: the training prompts read, rendered and encoded
    as a run would (the tokenizer, no weights), checked against the model's context and the
    reference answers' lengths (vigor_cli/train/health.py)."""
    from vigor_cli.train import health
    from vigor_cli.hub import HubUnavailable
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.tasks import get_task

    task = get_task(cfg.task, workers=1)
    try:
        try:
            train_examples = task.train_examples()
        except HubUnavailable as e:  # data only the hub has: the run reads it, a dry run says so
            return [f"the checks before the first step read the training data, which is not here: {e}"]
        try:
            tokenizer = load_tokenizer(cfg.model)
        except UserError as e:  # a folder holding a config.json alone: the plan was made, the prompts cannot be
            return [f"the checks before the first step encode the prompts, and there is no tokenizer here: {e}"]
        env = make_env(cfg, task, tokenizer)  # a bad environment file fails here
        if env is not None:
            from vigor_cli.console import console
            from vigor_cli.episodes.preview import preview_lines

            console.print(f"environment: {env.describe()}; at most {cfg.task.max_turns} model turns and "
                          f"{cfg.completion_tokens()} tokens per episode", markup=False, highlight=False,
                          soft_wrap=True)
            for line in preview_lines(task, tokenizer, env, train_examples, cfg.task.max_prompt_tokens):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        try:  # the prompts a run would leave out, said alike
            examples, prompt_ids, _ = fitted_sets(cfg, task, tokenizer, train_examples, enough=False, env=env)
        except HubUnavailable as e:  # a held-out set only the hub has
            return [f"the checks before the first step read the evaluation data, which is not here: {e}"]
        prompts = health.prompt_infos(task, tokenizer, examples, prompt_ids)
        return health.run_preflight(cfg, task, tokenizer, examples, prompts, model_context(cfg))
    finally:
        task.close()

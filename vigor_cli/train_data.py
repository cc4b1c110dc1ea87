"""What `vigor train` reads before any weights load: the static checks, the memory plan, the
task's training and evaluation sets, the tokenizer and the encoded training prompts. Bad
input fails here, in one line, before a model is loaded or a run directory is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vigor_cli.config import RunConfig
from vigor_cli.settings import check_against_data
from vigor_cli.errors import UserError
from vigor_cli.evaluation import encode_prompt
from vigor_cli.tasks.base import Example


def announce_memory_plan(cfg: RunConfig, out: Any) -> Any:
    """Print the memory plan (vigor_cli/memory_plan.py) and refuse, exit 2, when it cannot fit."""
    from vigor_cli import memory_plan

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
    env: Any = None
    """task.env's environment (vigor_cli/episodes/), None without one."""


def load_train_data(cfg: RunConfig, out: Any) -> TrainData:
    """Every check that needs no download (vigor_cli/preflight.py), the memory plan, the
    task's sets and the tokenizer; the task's reward workers are closed if any of it fails."""
    from vigor_cli.models import load_tokenizer
    from vigor_cli.preflight import check_static, check_tokenizer
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
        eval_sets: dict[str, list[Example]] = {}
        for name in cfg.task.eval_sets or [None]:
            exs = task.eval_examples(name)
            eval_sets[name or cfg.task.name] = exs[: t.eval_limit] if t.eval_limit else exs
        tokenizer = load_tokenizer(cfg.model)
        check_tokenizer(cfg, tokenizer, warn=lambda m: out.print(m))
        env = make_env(cfg, task, tokenizer)
        examples, prompt_ids = encode_prompts(cfg, task, tokenizer, train_examples, out, env=env)
    except BaseException:
        task.close()
        raise
    return TrainData(task, tokenizer, examples, prompt_ids, eval_sets, plan, len(train_examples) - len(examples), env)


def make_env(cfg: RunConfig, task: Any, tokenizer: Any) -> Any:
    """task.env's environment (None without one), made before any weights load: a bad
    environment file fails here."""
    if cfg.task.env is None:
        return None
    from vigor_cli.episodes.registry import make_environment

    return make_environment(cfg.task, task, tokenizer)


def encode_prompts(cfg: RunConfig, task: Any, tokenizer: Any, train_examples: list[Example],
                   out: Any, enough: bool = True, env: Any = None) -> tuple[dict[str, Example], dict[str, list[int]]]:
    """The training prompts' token ids (as ``env`` shows them: its tools); prompts over
    task.max_prompt_tokens are dropped (``enough``: refuse when fewer than a step's prompts remain)."""
    from vigor_cli.episodes.messages import render_prompt

    examples: dict[str, Example] = {}
    prompt_ids: dict[str, list[int]] = {}
    dropped = 0
    for ex in train_examples:
        text = task.render_prompt(ex, tokenizer) if env is None else render_prompt(task, ex, tokenizer, env)
        ids = encode_prompt(tokenizer, text)
        if len(ids) > cfg.task.max_prompt_tokens:
            dropped += 1
            continue
        examples[ex.uid] = ex
        prompt_ids[ex.uid] = ids
    if dropped:
        out.print(f"[yellow]dropped {dropped} training prompts longer than task.max_prompt_tokens={cfg.task.max_prompt_tokens}[/]")
    if enough and len(examples) < cfg.train.prompts_per_step:
        raise UserError(
            f"only {len(examples)} training prompts fit task.max_prompt_tokens="
            f"{cfg.task.max_prompt_tokens}; raise it or lower train.prompts_per_step ({cfg.train.prompts_per_step})"
        )
    return examples, prompt_ids


def dry_run_health(cfg: RunConfig, out: Any) -> list[str]:
    """`vigor train --dry-run`'s health lines: the training prompts read, rendered and encoded
    as a run would (the tokenizer, no weights), checked against the model's context and the
    reference answers' lengths (vigor_cli/health.py)."""
    from vigor_cli import health
    from vigor_cli.hub import HubUnavailable
    from vigor_cli.memory_plan import model_shape
    from vigor_cli.models import load_tokenizer
    from vigor_cli.tasks import get_task

    task = get_task(cfg.task, workers=1)
    try:
        try:
            train_examples = task.train_examples()
        except HubUnavailable as e:  # data only the hub has: the run reads it, a dry run says so
            return [f"the checks before the first step read the training data, which is not here: {e}"]
        tokenizer = load_tokenizer(cfg.model)
        env = make_env(cfg, task, tokenizer)  # a bad environment file fails here
        if env is not None:
            out.print(f"environment: {env.describe()}; at most {cfg.task.max_turns} model turns and "
                      f"{cfg.completion_tokens()} tokens per episode", markup=False, highlight=False, soft_wrap=True)
        examples, prompt_ids = encode_prompts(cfg, task, tokenizer, train_examples, out, enough=False, env=env)
        prompts = health.prompt_infos(task, tokenizer, examples, prompt_ids)
        context = cfg.engine.max_model_len or model_shape(cfg.model).max_positions
        return health.run_preflight(cfg, task, tokenizer, examples, prompts,
                                    len(train_examples) - len(examples), context)
    finally:
        task.close()

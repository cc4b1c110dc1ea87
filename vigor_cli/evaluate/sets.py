"""The prompts a model can take: the task's held-out sets as read, the prompts that fit
``task.max_prompt_tokens`` (rendered as the model sees them), and the one warning line for
those left out. Training, `vigor eval` and `vigor probe` share them."""

from __future__ import annotations
from typing import Any
from vigor_cli.config import RunConfig
from vigor_cli.task_base import Example
from vigor_cli.tasks.prompts import encode_prompt


def task_sets(cfg: RunConfig, task: Any, limit: int | None) -> dict[str, list[Example]]:
    """The task's held-out sets (``task.eval_sets``, or its default set, named after the
    task), each cut to its first ``limit`` examples, as read (`vigor eval` on a task's own
    sets; a run's evaluation leaves out what the model cannot take: :func:`held_out_sets`)."""
    sets: dict[str, list[Example]] = {}
    for name in cfg.task.eval_sets or [None]:
        exs = task.eval_examples(name)
        sets[name or cfg.task.name] = exs[:limit] if limit else exs
    return sets


def fit_prompts(limit: int, task: Any, tokenizer: Any, examples: list[Example],
                texts: dict[str, str] | None = None, env: Any = None) -> tuple[dict[str, list[int]], list[int], int]:
    """The token ids of the prompts the model can take, by uid (rendered as ``env`` shows
    them: with its tools); the lengths of those longer than ``limit`` (task.max_prompt_tokens),
    and how many encode to no token at all (both left out: an empty prompt gives the model
    nothing to continue). Under an environment the limit bounds the task's own prompt: the
    text the environment adds to every prompt (its tool descriptions) comes on top of it, so
    a limit that fits the task's prompts fits them with tools too. ``texts`` gets each kept
    prompt as rendered."""
    from vigor_cli.episodes.messages import render_prompt

    kept: dict[str, list[int]] = {}
    long: list[int] = []
    empty = 0
    for ex in examples:
        own = task.render_prompt(ex, tokenizer)
        text = own if env is None else render_prompt(task, ex, tokenizer, env)
        ids = encode_prompt(tokenizer, text)
        size = len(ids) if env is None or text == own else len(encode_prompt(tokenizer, own))
        if not ids:
            empty += 1
        elif size > limit:
            long.append(size)
        else:
            kept[ex.uid] = ids
            if texts is not None:
                texts[ex.uid] = text
    return kept, long, empty


def warn(line: str | None) -> None:
    """A warning line on stderr, as the health checks print theirs (nothing for None)."""
    from vigor_cli.console import err_console

    if line:
        err_console.print(f"warning: {line}", style="yellow", markup=False, highlight=False, soft_wrap=True)


def keep_fitting(limit: int, task: Any, tokenizer: Any, examples: list[Example], what: str,
                 texts: dict[str, str] | None = None, env: Any = None) -> tuple[list[Example], dict[str, list[int]]]:
    """``examples`` without the prompts :func:`fit_prompts` leaves out, those said in one
    warning line naming ``what`` (a caller refuses an empty result in its own words); and the
    kept prompts' token ids by uid."""
    kept, long, empty = fit_prompts(limit, task, tokenizer, examples, texts, env)
    warn(left_out_line(what, len(examples), long, empty, limit))
    return [ex for ex in examples if ex.uid in kept], kept


def left_out_line(what: str, total: int, long: list[int], empty: int, limit: int) -> str | None:
    """The one warning line for the prompts of a set :func:`fit_prompts` left out (None: none)."""
    parts = []
    if long:
        parts.append(f"{len(long)} longer than task.max_prompt_tokens={limit} (the longest {max(long):,} "
                     "tokens; raise the key to keep them)")
    if empty:
        parts.append(f"{empty} that encode to no token")
    return f"left out {len(long) + empty} of {total} {what}: {' and '.join(parts)}" if parts else None


def make_env(cfg: RunConfig, task: Any, tokenizer: Any) -> Any:
    """task.env's environment (None without one), made before any weights load: a bad
    environment file fails here."""
    if cfg.task.env is None:
        return None
    from vigor_cli.episodes.registry import make_environment

    return make_environment(cfg.task, task, tokenizer)

"""`vigor train --dry-run` on your own task: what was read, what the model will see, and what
each reward function will be given, before any model loads.

The data is read (every row checked), the reward functions imported and their signatures
read; the first rows' prompts are shown in full as the model's tokenizer renders them
(wrapped, never cut), so a prompt that is not what was meant (a CSV cell of JSON text is a
string, not messages) shows here. Each reward's line says what it will really be passed.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import vigor_cli.tasks.loading as loading
from vigor_cli.errors import UserError
from vigor_cli.tasks.custom import TRAIN_SAMPLE, CustomTask

PREVIEW_ROWS = 3
"""Rows `vigor train --dry-run` prints."""
WRAP = 100
"""Characters per line of a shown prompt (longer lines continue on the next, marked)."""
TRL_ARG_WORDS = {
    "completion_ids": "completion_ids (token ids)",
    "trainer_state": "trainer_state (global_step, max_steps)",
    "log_metric": "log_metric",
    "log_extra": "log_extra",
}


def preview(cfg: Any, tokenizer: Any = None) -> list[str]:
    """The dry run's lines about the custom task (module docstring); ``tokenizer`` renders the
    prompts as the run will (None: without the model's tokenizer, said so)."""
    task = CustomTask(cfg, workers=1)
    try:
        train = task.train_examples()
        held = task.eval_examples()
        lines = [_source_line("data", task.tables["train"])]
        prompt_from = (f"task.prompt_template {cfg.prompt_template!r}" if cfg.prompt_template
                       else f"column '{task.fields.get('prompt', 'prompt')}'")
        kinds = {"messages" if isinstance(ex.meta["prompt"], list) else "text" for ex in train}
        system = f", system message {cfg.system_prompt!r}" if cfg.system_prompt is not None else ""
        lines.append(f"prompt: from {prompt_from} ({' and '.join(sorted(kinds))}{system}); chat template: "
                     f"{_template_rule(cfg.chat_template, kinds)}")
        lines += _looks_like_messages(train, task.fields.get("prompt", "prompt"))
        if cfg.env is not None:
            lines.append(f"the task's prompts below are before the environment's (task.env={cfg.env}) tools and "
                         "reset text; the prompts as the model receives them follow the memory plan")
        for ex in train[:PREVIEW_ROWS]:
            lines += rendered_lines(task, ex, tokenizer)
        for reward, weight in zip(task.rewards, task.weights):
            lines.append(f"reward {reward.name} ({reward.spec}), weight {weight:g}: {reward_gets(reward)}")
        if "eval" in task.tables:
            table = task.tables["eval"]
            lines.append(_source_line("eval data", table) + ("" if cfg.eval_data else
                         f" (the data's {table.split} split; --eval-data names another set)"))
        else:
            lines.append(f"eval data: none (--eval-data); the first {min(len(held), TRAIN_SAMPLE)} training rows "
                         "are evaluated (not held out)")
        lines.append(f"pass: a sample passes at reward >= {cfg.pass_threshold:g} (task.pass_threshold): the pass "
                     "rate and pass@k, beside the mean reward")
        return lines
    finally:
        task.close()


def rendered_lines(task: CustomTask, ex: Any, tokenizer: Any) -> list[str]:
    """One row: the prompt exactly as the model will see it (every line, wrapped), its columns."""
    how = "as the model's tokenizer renders it" if tokenizer is not None else "without the model's tokenizer"
    try:
        text = task.render_prompt(ex, tokenizer)
    except UserError as e:  # chat_template=true without a tokenizer here
        return [f"  {ex.meta['where']}: prompt not rendered here ({e})"]
    from vigor_cli.console import visible

    out = [f"  {ex.meta['where']}: the model sees ({how}, {len(text)} characters):"]
    for line in text.split("\n"):
        pieces = textwrap.wrap(visible(line), WRAP, drop_whitespace=False, replace_whitespace=False) or [""]
        out += [f"    | {pieces[0]}"] + [f"    + {p}" for p in pieces[1:]]
    cols = ", ".join(f"{k}={v!r}" for k, v in ex.meta["columns"].items())
    out.append(f"    columns: {cols or 'none'}")
    return out


def reward_gets(reward: Any) -> str:
    """What a reward function will be passed: the columns it needs and TRL's arguments it takes."""
    needs = f"needs column {', '.join(reward.needs)}" if reward.needs else "needs no column"
    if reward.optional:
        needs += f" (and {', '.join(reward.optional)} when a row has it)"
    if reward.builtin:
        return f"{needs}; the built-in verifier grades each completion against it"
    args = [TRL_ARG_WORDS.get(a, a) for a in reward.gets]
    if reward.all_columns:
        args.append("every column")
    return f"{needs}; gets {', '.join(args)}"


def _looks_like_messages(train: list, column: str) -> list[str]:
    """A warning when text prompts hold JSON chat messages (a CSV cell is always text)."""
    for ex in train:
        prompt = ex.question  # the text, or a message list's user message (a system prompt may be added)
        if prompt.lstrip().startswith("[{"):
            try:
                parsed = json.loads(prompt)
            except ValueError:
                continue
            if isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed):
                return [f"warning: {ex.meta['where']}: the prompt ('{column}') is text holding JSON chat messages; it "
                        "is used as that text, not as messages (CSV and TSV cells are text: give message prompts "
                        "in JSONL, JSON or Parquet)"]
    return []


def _template_rule(setting: Any, kinds: set[str]) -> str:
    if setting is False:
        return "never (message contents joined)"
    if setting is True:
        return "applied to every prompt"
    return ("applied to message-list prompts when the tokenizer has one; text prompts as they are"
            if "messages" in kinds else "not applied (text prompts are used as they are)")


def _source_line(label: str, table: loading.Table) -> str:
    split = f", split {table.split}" if table.split else ""
    return f"{label}: {table.source} ({table.kind}{split}, {len(table.rows)} rows): columns {', '.join(table.columns)}"

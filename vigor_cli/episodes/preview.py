"""What `vigor train --dry-run` shows of an environment run: the first rows as the model receives them.

Each row's prompt is rendered as an episode starts it: the task's prompt, the environment's
tool descriptions (the chat template's ``tools``, or the plain tool list), the text its
``reset`` returns for that row, through the chat template when the tokenizer has one. Its
token count is split into the task's prompt and what the environment adds, so a prompt that
grew says why (task.max_prompt_tokens bounds the task's part: vigor_cli/train/data.py).
"""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

PREVIEW_ROWS = 3
"""Rows shown."""
WRAP = 100
"""Characters per shown line (longer lines continue on the next, marked)."""


def preview_lines(task: Any, tokenizer: Any, env: Any, examples: Sequence[Any], limit: int,
                  rows: int = PREVIEW_ROWS) -> list[str]:
    """The first ``rows`` examples as the model receives them, with their token counts."""
    from vigor_cli.console import visible
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.tasks.prompts import encode_prompt
    from vigor_cli.tasks.prompts import has_chat_template

    form = "the chat template" if has_chat_template(tokenizer) else "plain text (no chat template renders prompts)"
    out = [f"the first {min(rows, len(examples))} prompts as the model receives them under the environment "
           f"(rendered as {form}; task.max_prompt_tokens={limit} bounds the task's part):"]
    for ex in examples[:rows]:
        own = encode_prompt(tokenizer, task.render_prompt(ex, tokenizer))
        tools = encode_prompt(tokenizer, render_prompt(task, ex, tokenizer, env))
        observation = env.observation(ex)
        text = render_prompt(task, ex, tokenizer, env, observation)
        ids = encode_prompt(tokenizer, text)
        parts = [f"{len(own)} of the task's prompt"]
        if len(tools) != len(own):
            parts.append(f"{len(tools) - len(own)} of the tool descriptions")
        if observation:
            parts.append(f"{len(ids) - len(tools)} of the reset text")
        over = f"; over task.max_prompt_tokens={limit}: left out" if len(own) > limit else ""
        out.append(f"  {ex.uid}: {len(ids)} tokens ({', '.join(parts)}){over}:")
        for line in text.split("\n"):
            pieces = textwrap.wrap(visible(line), WRAP, drop_whitespace=False, replace_whitespace=False) or [""]
            out += [f"    | {pieces[0]}"] + [f"    + {p}" for p in pieces[1:]]
    return out

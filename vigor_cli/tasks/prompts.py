"""Prompt rendering and answer extraction shared by the tasks.

A tokenizer with a chat template (instruct models) gets the problem as one
user message with the generation prompt appended; one without (base models)
or with a plain-text one (the bundled tiny model) gets plain text.
"""

from __future__ import annotations

from typing import Any


def has_chat_template(tokenizer: Any) -> bool:
    """A chat template prompts are rendered with (a plain-text template, the bundled tiny
    model's, renders tool conversations for other libraries only:
    vigor_cli/tasks/plain_template.py)."""
    from vigor_cli.tasks.plain_template import is_plain

    template = getattr(tokenizer, "chat_template", None)
    return bool(template) and not is_plain(template)


def template_kwargs(tokenizer: Any) -> dict:
    """Extra chat-template variables set at load time (``model.enable_thinking``)."""
    return dict(getattr(tokenizer, "vigor_chat_template_kwargs", None) or {})


def render(tokenizer: Any, chat_text: str, plain_text: str) -> str:
    """``chat_text`` as a user turn when ``tokenizer`` has a chat template, else ``plain_text``."""
    if tokenizer is not None and has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": chat_text}], tokenize=False, add_generation_prompt=True,
            **template_kwargs(tokenizer),
        )
    return plain_text


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt; BOS is added only when the template has not already."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = bool(bos) and not text.startswith(bos)
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])

"""An environment's messages as tokens, and an episode's prompt as the environment shows it.

With a chat template, messages after a model turn are the template's own rendering of them:
the tokens the template puts after an assistant turn's end (the stop token the model
sampled) up to the next assistant turn's start, found by rendering a short conversation
with and without them (the way TRL appends tool results). A tokenizer without a chat
template (the bundled tiny model) gets plain text: a user message as the task writes a
follow-up question (``Task.follow_up``), a tool result as ``<tool_response>...</tool_response>``.

:func:`render_prompt` renders a task's prompt with what an environment adds: its tools
(``apply_chat_template(tools=...)``, or a plain list) and the observation its ``reset``
returned, appended to the last user message as TRL does.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from vigor_cli.tasks.prompts import has_chat_template, template_kwargs

PLAIN_TOOL_RESULT = "<tool_response>\n{content}\n</tool_response>\n"
"""A tool's result in plain text (no chat template): Qwen's and Hermes' tool-response block."""


class MessageFormat:
    """Messages -> the token ids that follow a finished model turn."""

    def __init__(self, tokenizer: Any, stop_ids: Sequence[int], follow_up: Callable[[str], str]):
        self.tokenizer = tokenizer
        self.stop_ids = set(int(t) for t in stop_ids)
        self.follow_up = follow_up
        self.templated = has_chat_template(tokenizer)

    def encode(self, messages: Sequence[dict]) -> list[int]:
        """The tokens of ``messages`` after a model turn, ending where the model's next turn
        starts (the template's generation prompt)."""
        if not messages:
            return []
        if self.templated:
            return self._template_suffix(messages)
        text = "".join(PLAIN_TOOL_RESULT.format(content=m["content"]) if m.get("role") == "tool"
                       else self.follow_up(str(m["content"])) for m in messages)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _template_suffix(self, messages: Sequence[dict]) -> list[int]:
        tok = self.tokenizer
        assistant: dict = {"role": "assistant", "content": "x"}
        if messages[0].get("role") == "tool":  # some templates name the tool from the call
            assistant["tool_calls"] = [{"type": "function", "function": {"name": messages[0].get("name", "tool"),
                                                                         "arguments": {}}}]
        head = [{"role": "user", "content": "x"}, assistant]
        kwargs = template_kwargs(tok)
        before = token_ids(tok.apply_chat_template(head, tokenize=True, add_generation_prompt=False, **kwargs))
        after = token_ids(tok.apply_chat_template([*head, *messages], tokenize=True, add_generation_prompt=True, **kwargs))
        ends = [i for i, t in enumerate(before) if t in self.stop_ids]
        if ends:
            before = before[: ends[-1] + 1]  # the turn ends at its stop token (what the model sampled)
        if after[: len(before)] != before:
            raise ValueError("the chat template does not render a conversation as a prefix of its continuation; "
                             "it cannot take an environment's messages")
        return after[len(before):]


def token_ids(rendered: Any) -> list[int]:
    """``apply_chat_template(tokenize=True)``'s ids, whichever form it returns."""
    if hasattr(rendered, "keys") and "input_ids" in rendered:
        rendered = rendered["input_ids"]
    if rendered and isinstance(rendered[0], list):
        rendered = rendered[0]
    return [int(t) for t in rendered]


class EnvironmentTokenizer:
    """The tokenizer as a task's ``render_prompt`` sees it under an environment: its chat
    template gets the environment's extra arguments (tools), and the last user message gets
    ``observation`` appended; everything else is the tokenizer's."""

    def __init__(self, tokenizer: Any, extra: dict, observation: str | None = None):
        self._tokenizer, self._extra, self._observation = tokenizer, extra, observation

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        if self._observation:
            conversation = with_observation(conversation, self._observation)
        return self._tokenizer.apply_chat_template(conversation, **{**self._extra, **kwargs})


def with_observation(messages: Sequence[dict], observation: str) -> list[dict]:
    """``messages`` with ``observation`` appended to the last user message (a new list)."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            m["content"] = f"{m.get('content', '')}{observation}"
            return out
    return [*out, {"role": "user", "content": observation}]


def render_prompt(task: Any, example: Any, tokenizer: Any, env: Any, observation: str | None = None) -> str:
    """``task``'s prompt for ``example`` as ``env`` shows it (see the module docstring)."""
    if has_chat_template(tokenizer):
        return task.render_prompt(example, EnvironmentTokenizer(tokenizer, env.template_kwargs(), observation))
    return env.prompt_text(task.render_prompt(example, tokenizer)) + (observation or "")

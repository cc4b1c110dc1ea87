"""Which tokens end a completion, for every engine and for evaluation.

A completion ends at the first of:

- the tokenizer's EOS token;
- every id in the model's ``generation_config.eos_token_id`` (an int or a list);
- the chat template's end-of-turn token, when the tokenizer has a template:
  the special token the template writes right after an assistant message's
  content (``<|im_end|>`` for Qwen, ``<|eot_id|>`` for Llama 3,
  ``<end_of_turn>`` for Gemma).

The third matters for base models. Qwen2.5-1.5B (base) ships the Qwen chat
template, so its prompts are rendered as chat turns, but its EOS and its
generation config name only ``<|endoftext|>``: without ``<|im_end|>`` as a
stop, a completion runs on into invented user and assistant turns, and the
reward reads the last ``\\boxed{}`` of that continuation. Instruct models
list the end-of-turn token already; adding it again changes nothing.

:func:`cut_at_stop` applies the same rule to token ids an engine returned, so
whatever an engine does, the text that reaches the reward ends at the first
stop token.
"""

from __future__ import annotations

from typing import Any, Sequence

_PROBE = "VIGOR_END_OF_TURN_PROBE"
"""Assistant content used to find what a chat template writes after it."""


def _special_ids(tokenizer: Any) -> set[int]:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, tok in decoder.items() if getattr(tok, "special", False))
    return ids


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """The special token a chat template writes right after an assistant turn's content.

    Renders ``[user, assistant=<probe>]`` with the template and tokenizes what
    follows the probe; the first token that is not whitespace is the
    end-of-turn token if it is a special token (a template that closes a turn
    with ordinary text, e.g. a newline, gives no stop: stopping there would cut
    every multi-line answer). No template, or a template that refuses this
    conversation: [].
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return []
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "1"}, {"role": "assistant", "content": _PROBE}],
            tokenize=False,
            **dict(getattr(tokenizer, "vigor_chat_template_kwargs", None) or {}),
        )
    except Exception:  # templates raise on conversations they do not accept; no stop from them
        return []
    at = text.rfind(_PROBE) if isinstance(text, str) else -1
    if at < 0:
        return []
    suffix = text[at + len(_PROBE):]
    if not suffix.strip():
        return []
    ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
    special = _special_ids(tokenizer)
    for token in ids:
        if tokenizer.decode([token]).strip() == "":
            continue  # leading whitespace before the end-of-turn marker
        return [int(token)] if int(token) in special else []
    return []


def generation_eos_ids(model: Any) -> list[int]:
    """``model.generation_config.eos_token_id`` as a list (peft wrappers pass it through)."""
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if extra is None:
        return []
    if isinstance(extra, int):
        return [extra]
    return [int(i) for i in extra]


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every token id that ends a completion (sorted): EOS, generation-config EOS, end of turn."""
    ids: set[int] = set(generation_eos_ids(model))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    ids.update(end_of_turn_ids(tokenizer))
    return sorted(ids)


def cut_at_stop(token_ids: Sequence[int], stops: Sequence[int] | set[int]) -> int | None:
    """Length of ``token_ids`` up to and including its first stop token; None when it has none."""
    stop_set = set(stops)
    for i, token in enumerate(token_ids):
        if token in stop_set:
            return i + 1
    return None

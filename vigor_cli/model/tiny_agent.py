"""`vigor make-tiny --recipe tools`: the bundled tiny model warmed on the tool-call format.

Supervised steps on tiny-products conversations rendered by the tiny chat template: the
tool list (the calculator's ``multiply``), the question, then either a tool call, its
result and the ``\\boxed{}`` answer copied from it, or (the other rows) a ``\\boxed{}``
answer written without the tool. The loss covers the model's turns only. The share of
tool-calling rows (:data:`TOOLS_RECIPE`) sets how often the warmed model calls the tool,
so GRPO starts with room either way. Deterministic in the seed on one thread.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

TOOLS_RECIPE = dict(format_steps=200, steps=300, batch_size=32, lr=2e-3, tool_share=0.3)
"""Supervised steps (the first ``format_steps`` on tool-calling rows only: the format and the
copying of numbers; then ``tool_share`` of the rows call the tool), rows per step and AdamW's
learning rate."""


def tool_schema() -> dict:
    """The calculator's tool as a chat template gets it (transformers' ``get_json_schema``,
    as the environment describes it)."""
    from transformers.utils import get_json_schema

    from vigor_cli.tasks.tiny_products import multiply

    return get_json_schema(multiply)


def conversation(question: str, answer: str, use_tool: bool, guess: str | None = None) -> list[dict]:
    """One warm-up conversation: the question, then the tool call, its result and the answer
    (``use_tool``), or an answer without the tool (``guess``, default the right one)."""
    from vigor_cli.tasks.tiny_products import multiply, operands, plain_prompt

    user = {"role": "user", "content": plain_prompt(question)}
    if not use_tool:
        return [user, {"role": "assistant", "content": f"\\boxed{{{guess or answer}}}"}]
    a, b = operands(question)
    call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": a, "b": b}}}
    return [user, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "multiply", "content": multiply(a, b)},
            {"role": "assistant", "content": f"\\boxed{{{answer}}}"}]


def encode_conversation(tokenizer: Any, messages: Sequence[dict], tools: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of a conversation as the tiny chat template renders it, each message's part
    tokenized apart (as the episode loop appends them), and the loss mask: 1 on the model's turns."""
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for k in range(1, len(messages) + 1):
        text = tokenizer.apply_chat_template(list(messages[:k]), tools=tools, tokenize=False)
        part = tokenizer(text[len(done):], add_special_tokens=False)["input_ids"]
        ids += part
        mask += [1 if messages[k - 1]["role"] == "assistant" else 0] * len(part)
        done = text
    return ids, mask


def warm_tools(out: str | Path, *, seed: int = 0, split_seed: int = 0, base: str | Path | None = None,
               steps: int | None = None, log: Callable[[str], None] = print) -> dict:
    """Warm ``base`` (default: the bundled tiny model) on tool-calling conversations and save
    it in ``out`` with recipe.json (the settings and the loss curve); ``steps`` overrides the
    recipe's (a shorter warm-up for tests)."""
    import torch

    from vigor_cli.model.tiny import TINY_DIR, load, pad_batch, save
    from vigor_cli.tasks import tiny_products

    settings = dict(TOOLS_RECIPE)
    if steps is not None:  # a shorter (or longer) warm-up keeps the two phases' proportions
        settings["steps"], settings["format_steps"] = steps, TOOLS_RECIPE["format_steps"] * steps // TOOLS_RECIPE["steps"]
    base = TINY_DIR if base is None else base
    torch.manual_seed(seed)
    model, tokenizer = load(base)
    tools = [tool_schema()]
    train, _ = tiny_products.split(split_seed)
    rng = random.Random(f"tools/{seed}")
    started, cpu = time.time(), time.process_time()
    opt = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    model.train()
    losses = []
    for step in range(settings["steps"]):
        share = 1.0 if step < settings["format_steps"] else settings["tool_share"]
        rows = []
        for ex in rng.sample(train, settings["batch_size"]):
            use_tool = rng.random() < share
            rows.append(encode_conversation(tokenizer, conversation(ex.question, ex.answer, use_tool), tools))
        input_ids, attention, labels = pad_batch(tokenizer, rows)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if len(losses) % 50 == 0:
            log(f"tools: step {len(losses)}: loss {losses[-1]:.3f} ({time.time() - started:.0f} s)")
    model.eval()
    seconds = time.time() - started
    save(model, tokenizer, out)
    result = {
        "recipe": "tools", "seed": seed, "split_seed": split_seed,
        "base": "tiny" if Path(base) == TINY_DIR else str(base), **settings,
        "warmup_seconds": round(seconds, 1), "warmup_cpu_seconds": round(time.process_time() - cpu, 1),
        "torch_threads": torch.get_num_threads(),
        "loss_every_25": [round(x, 4) for x in losses[::25]], "final_loss": round(losses[-1], 4),
    }  # fmt: skip
    (Path(out) / "recipe.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"tools: saved {out} after {settings['steps']} steps in {seconds:.0f} s")
    return result

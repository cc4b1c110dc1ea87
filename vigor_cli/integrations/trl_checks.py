"""What the TRL path refuses, prepares and guards so that it trains what `vigor train` trains.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

QUANTIZED = ("is_loaded_in_4bit", "is_loaded_in_8bit")


def is_quantized(model: Any) -> bool:
    """A transformers model loaded in 4 or 8 bits (bitsandbytes), plain or peft-wrapped."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return any(getattr(base, flag, False) for flag in QUANTIZED)


def four_bit_requested(model: Any, args: Any) -> bool:
    """A 4/8-bit model, or a hub id TRL will load with a bitsandbytes quantization_config."""
    if not isinstance(model, str):
        return is_quantized(model)
    config = (getattr(args, "model_init_kwargs", None) or {}).get("quantization_config")
    if config is None:
        return False
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    return bool(get("load_in_4bit", False) or get("load_in_8bit", False))


FOUR_BIT_VLLM = (
    "{key}: TRL's vLLM weight sync merges the LoRA into the 4-bit layers and unmerges it at every sync, "
    "re-quantising the frozen NF4 base each time; generate with TRL's transformers path (no --vllm-mode, "
    "use_vllm=False), or train with vigor train, which pushes a dequantised bf16 copy")
CONTINUOUS_FP32 = (
    "{key} with float32 trained weights under bf16/fp16: TRL casts the model to 16 bits in place before "
    "generating, so the float32 master weights or LoRA adapters would train in 16 bits from then on; turn "
    "continuous batching off, or train in one dtype (model.fp32_master_weights=false, no LoRA)")


def refusals(model: Any, args: Any, peft_config: Any = None) -> list[str]:
    """Why this model, LoRA config and these TRL keys cannot train as `vigor train` would
    (module doc); empty when they can. Read before TRL builds its generation and optimizer."""
    problems = []
    if args.use_vllm and four_bit_requested(model, args):
        problems.append(FOUR_BIT_VLLM.format(key="a 4-bit (or 8-bit) base with use_vllm=True"))
    if getattr(args, "use_transformers_continuous_batching", False) and (args.bf16 or args.fp16) \
            and (peft_config is not None or trains_float32(model)):  # peft makes float32 adapters
        problems.append(CONTINUOUS_FP32.format(key="use_transformers_continuous_batching=True"))
    return problems


def trains_float32(model: Any) -> bool:
    """Some trained parameter is float32 (master weights, LoRA adapters); a hub id: unknown, so
    TRL's default (float32 weights loaded for a full fine-tune) is assumed."""
    if isinstance(model, str):
        return True
    import torch

    return any(p.requires_grad and p.dtype == torch.float32 for p in model.parameters())


def prepare_kbit(model: Any, peft_config: Any, gradient_checkpointing: bool) -> Any:
    """peft's ``prepare_model_for_kbit_training`` for a quantised base about to get LoRA, as
    `vigor train` does it (vigor_cli/model/loading.py); any other model unchanged."""
    if isinstance(model, str) or peft_config is None or not is_quantized(model) or hasattr(model, "get_base_model"):
        return model
    if getattr(model, "vigor_kbit_prepared", False):
        return model
    from peft import prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    model.vigor_kbit_prepared = True
    return model


def float32_adapters(model: Any) -> None:
    """After TRL's init: the trained parameters of a quantised base back in float32, as `vigor
    train` trains them (TRL casts QLoRA adapters to bf16; the optimizer does not exist yet)."""
    import torch

    if not is_quantized(model):
        return
    for p in model.parameters():
        if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()


def nonfinite_to_nan(logprobs: Sequence[Sequence[Any]] | None) -> tuple[list[list[float]] | None, int]:
    """Per-row engine log-probs with every NaN, infinite or missing value as NaN (left out of
    TRL's importance correction), and how many there were."""
    if logprobs is None:
        return None, 0
    bad = 0
    out = []
    for row in logprobs:
        clean = []
        for x in row:
            if x is None or not math.isfinite(float(x)):
                bad += 1
                clean.append(float("nan"))
            else:
                clean.append(float(x))
        out.append(clean)
    return out, bad


def report_nonfinite(trainer: Any, count: int) -> dict[str, int]:
    """The step's non-finite engine log-probs over every rank: in TRL's metrics, a warning line
    on the main process when there are any, and the metrics.jsonl key (returned)."""
    import torch

    acc = trainer.accelerator
    total = int(acc.gather(torch.tensor([count], device=acc.device)).sum())
    trainer._metrics["train"]["sampling/nonfinite_engine_logprobs"].append(total)
    if total and acc.is_main_process:
        from vigor_cli.console import err_console

        err_console.print(f"warning: step {trainer.vigor_step}: the engine returned {total} NaN or infinite log-probs "
                          "for tokens it sampled; they are left out of the importance correction",
                          style="yellow", markup=False, highlight=False, soft_wrap=True)
    return {"sampling/nonfinite_engine_logprobs": total}


TOOLS_WITH_ENV = ("tools= with an environment (environment_factory, task.env): the environment's episode loop "
                  "runs the tool calls there; give the tools to the environment, or drop the environment")
TOOLS_PLAIN_PROMPTS = ("tools= with plain-text prompts (row {row} of train_dataset): TRL's tool loop reads each "
                       "completion as a message list; give conversational prompts (a list of messages per row)")


def tool_refusals(trainer: Any, tools: Any, has_env: bool) -> list[str]:
    """Why TRL's own ``tools=`` cannot pass through here (one line each; empty when it can)."""
    if not tools:
        return []
    if has_env:
        return [TOOLS_WITH_ENV]
    data = trainer.train_dataset
    prompts = data["prompt"] if "prompt" in data.column_names else []
    plain = next((i for i, p in enumerate(prompts) if isinstance(p, str)), None)
    return [TOOLS_PLAIN_PROMPTS.format(row=plain)] if plain is not None else []


def set_tool_dicts(trainer: Any, rows: int) -> None:
    """TRL's per-row tool tables (``_sync_tool_dicts``, ``_async_tool_dicts``) for a round of
    ``rows``: TRL builds them in ``_generate_and_score_completions``, which the rounds bypass
    (they call ``_generate``), and its tool loop reads them when a completion calls a tool. The
    standalone tools only: an environment's tools are its episode loop's."""
    import inspect

    tools = list(getattr(trainer, "_standalone_tools", None) or getattr(trainer, "tools", None) or [])
    if not tools:
        return
    sync = {t.__name__: t for t in tools if not inspect.iscoroutinefunction(t)}
    asynchronous = {t.__name__: t for t in tools if inspect.iscoroutinefunction(t)}
    trainer._sync_tool_dicts = [dict(sync) for _ in range(rows)]
    trainer._async_tool_dicts = [dict(asynchronous) for _ in range(rows)]


def hard_coding_signs(trainer: Any, rows: Sequence[dict], texts: Sequence[str]) -> Any:
    """Per row of this rank's round: (graded as a program, hard_coded, quotes_outputs), read
    from the reward functions that keep them (a code task's: trl_rewards) and gathered from
    every rank [ranks * rows, 3]: TRL grades the rollouts, so the samples carry no verdict of
    their own and the ``hard_coding`` health check saw none."""
    import torch

    found: dict = {}
    for func in getattr(trainer, "reward_funcs", None) or []:
        found.update(getattr(func, "vigor_signs", None) or {})
    column = getattr(trainer, "vigor_uid_column", "uid")
    flags = []
    for row, text in zip(rows, texts):
        sign = found.get((str(row.get(column)), text))
        flags.append([1, int(sign["hard_coded"]), int(sign["quotes_outputs"])] if sign else [0, 0, 0])
    acc = trainer.accelerator
    local = torch.tensor(flags, dtype=torch.int64, device=acc.device).view(len(flags), 3)
    return acc.gather(local).cpu()


def every_rank_texts(trainer: Any, texts: dict) -> dict:
    """This rank's completion texts by row key merged with every other rank's (the health
    checks that read text, ``empty`` and ``identical``, see the whole step on every rank)."""
    acc = trainer.accelerator
    if acc.num_processes == 1:
        return dict(texts)
    from accelerate.utils import gather_object

    merged: dict = {}
    for part in gather_object([list(texts.items())]):
        merged.update(dict((tuple(k), v) for k, v in part))
    return merged

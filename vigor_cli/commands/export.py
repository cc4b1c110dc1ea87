"""`vigor export RUN --out DIR`: a run's checkpoint as a plain Hugging Face folder to ship
(full weights, a LoRA adapter, or LoRA merged into its base); see :mod:`vigor_cli.export.folder`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console, err_console, shown
from vigor_cli.export.folder import DTYPES  # light: heavy imports are inside its functions


def export(
    run: Annotated[Path, typer.Argument(help="Run directory (written by `vigor train`).")],
    out: Annotated[Path, opt.output_dir("--out", help="New (or empty) directory for the model folder.")],
    step: Annotated[Optional[int], opt.count("--step", low=0, help="Export checkpoint step-N (default: the newest intact one).")] = None,
    merge_lora: Annotated[bool, typer.Option("--merge-lora", help="LoRA runs: merge the adapter into the base (4-bit bases dequantised first) and write one full model, instead of the adapter folder.")] = False,
    dtype: Annotated[str, opt.choice("--dtype", choices=DTYPES, help="Weights' dtype of a full or merged export; auto: the dtype the base model's config.json declares.")] = "auto",
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="Also upload the folder to this Hugging Face model repo (created private when missing); refused offline.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Export a run's checkpoint: config, safetensors, tokenizer and a generation_config.json with the run's stop tokens."""
    from vigor_cli.export import folder as exporter

    if push_to_hub is not None:
        exporter.push_to_hub_check(push_to_hub)  # offline: one line before any work

    def warn(message: str) -> None:
        err_console.print(f"[yellow]warning:[/] {shown(message)}", highlight=False, soft_wrap=True)

    from vigor_cli.interrupt import TrainingInterrupted

    try:
        result = exporter.export(run, out, step=step, merge_lora=merge_lora, dtype=dtype, warn=warn)
    except TrainingInterrupted as stop:  # SIGINT/SIGTERM: one line, and no partial folder left
        err_console.print(stop.status, markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(stop.exit_code) from None
    if push_to_hub is not None:
        result["pushed"] = exporter.push_to_hub(out, push_to_hub)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    what = {"full": "full model", "merged": "LoRA merged into its base", "adapter": "LoRA adapter"}[result["kind"]]
    # soft_wrap: each line whole at any width (in a log file the load command was cut in three)
    console.print(f"[bold]exported[/] {shown(result['checkpoint'])} of {shown(result['run'])} ({what}"
                  + (f", {result['dtype']}" if result["dtype"] else "") + f") to {shown(result['out'])}", highlight=False,
                  soft_wrap=True)
    console.print(f"stop token ids in generation_config.json: {result['stop_token_ids']}", highlight=False)
    if result["kind"] == "adapter":
        console.print(f"load: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained('{shown(result['base'])}'), "
                      f"'{shown(result['out'])}'); one merged folder: add --merge-lora", highlight=False, soft_wrap=True)
    else:
        console.print(f"load: AutoModelForCausalLM.from_pretrained('{shown(result['out'])}') or vllm serve "
                      f"{shown(result['out'])}", highlight=False, soft_wrap=True)
    if result.get("pushed"):
        console.print(f"pushed: {shown(result['pushed'])}", highlight=False, soft_wrap=True)

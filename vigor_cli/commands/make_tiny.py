"""`vigor make-tiny`: rebuild the bundled tiny model from its seeded recipe."""

from __future__ import annotations

from pathlib import Path

from typing import Annotated

import typer

from vigor_cli.commands import options as opt
from vigor_cli.errors import UserError
from vigor_cli.model.tiny import MAX_STEPS, TARGET


def make_tiny(
    out: Annotated[Path, opt.output_dir("--out", help="Directory to write the model and tokenizer to (Hugging Face format).")],
    seed: Annotated[int, opt.seed(help="Seeds the initialisation, batch order and probes.")] = 0,
    split_seed: Annotated[int, opt.seed("--split-seed", help="tiny-math/tiny-code train/held-out split (task.split_seed).")] = 0,
    max_steps: Annotated[int, opt.count("--max-steps", help="Upper bound on warm-up steps (--recipe tools: its steps, when given).")] = MAX_STEPS,
    target: Annotated[float, opt.number("--target", low=0, low_open=True, high=1, integer=False, help="Stop once sampled accuracy on the training probe reaches this.")] = TARGET,
    threads: Annotated[int, opt.count("--threads", help="torch CPU threads (1 keeps the run bit-reproducible).")] = 1,
    measure: Annotated[bool, typer.Option("--measure/--no-measure", help="Then measure held-out pass rates (16 samples) with the real verifiers.")] = True,
    recipe: Annotated[str, typer.Option("--recipe", help="tiny: the bundled model from its seed; facts / ladder: the bundled model warmed further on tiny-facts / tiny-ladder (the study's low-transfer and ladder regimes); tools: the bundled model warmed on the tool-call format (tiny-products with the calculator: a tiny agent).")] = "tiny",
) -> None:
    """Build the tiny Qwen2 model and warm it on the tiny tasks' training split (a few CPU minutes)."""
    import torch

    from vigor_cli.console import console, shown
    from vigor_cli.model.tiny import RECIPES, make_tiny as build, measure_asset, warm_task

    if recipe not in RECIPES:
        raise UserError(f"--recipe: unknown recipe {recipe!r}; choose from {', '.join(RECIPES)}")
    if out.is_dir() and any(out.iterdir()):  # its files would end up beside the model's
        raise UserError(f"--out {out}: the folder is not empty; give a new or empty folder")
    torch.set_num_threads(threads)
    log = lambda line: console.print(line, highlight=False)  # noqa: E731
    if recipe == "tools":
        from vigor_cli.model.tiny_agent import warm_tools

        warm_tools(out, seed=seed, split_seed=split_seed, steps=max_steps if max_steps != MAX_STEPS else None, log=log)
        return
    if recipe != "tiny":
        warm_task(recipe, out, seed=seed, split_seed=split_seed, log=log)
        return
    made = build(out, seed=seed, split_seed=split_seed, max_steps=max_steps, target=target, log=log)
    console.print(f"saved {shown(out)} ({made['parameters']:,} parameters, {made['steps']} steps, "
                  f"{made['warmup_seconds']:.0f} s)")
    if measure:
        measure_asset(out, split_seed=split_seed, seed=seed, console=console)

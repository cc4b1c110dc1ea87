"""`vigor make-tiny`: rebuild the bundled tiny model from its seeded recipe."""

from __future__ import annotations

from pathlib import Path

import typer

from vigor_cli.errors import UserError
from vigor_cli.tiny_model import MAX_STEPS, TARGET


def make_tiny(
    out: Path = typer.Option(..., "--out", help="Directory to write the model and tokenizer to (Hugging Face format)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the initialisation, batch order and probes."),
    split_seed: int = typer.Option(0, "--split-seed", help="tiny-math/tiny-code train/held-out split (task.split_seed)."),
    max_steps: int = typer.Option(MAX_STEPS, "--max-steps", help="Upper bound on warm-up steps."),
    target: float = typer.Option(TARGET, "--target", help="Stop once sampled accuracy on the training probe reaches this."),
    threads: int = typer.Option(1, "--threads", help="torch CPU threads (1 keeps the run bit-reproducible)."),
    measure: bool = typer.Option(True, "--measure/--no-measure", help="Then measure held-out pass rates (16 samples) with the real verifiers."),
    recipe: str = typer.Option("tiny", "--recipe", help="tiny: the bundled model from its seed; facts / ladder: the bundled model warmed further on tiny-facts / tiny-ladder (the study's low-transfer and ladder regimes)."),
) -> None:
    """Build the tiny Qwen2 model and warm it on the tiny tasks' training split (a few CPU minutes)."""
    import torch

    from vigor_cli.console import console
    from vigor_cli.tiny_model import RECIPES, make_tiny as build, measure_asset, warm_task

    if recipe not in RECIPES:
        raise UserError(f"--recipe: unknown recipe {recipe!r}; choose from {', '.join(RECIPES)}")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if recipe != "tiny":
        torch.set_num_threads(threads)
        warm_task(recipe, out, seed=seed, split_seed=split_seed, log=lambda line: console.print(line, highlight=False))
        return
    if not 0 < target <= 1:
        raise UserError(f"--target must be in (0, 1], got {target}")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    torch.set_num_threads(threads)
    recipe = build(out, seed=seed, split_seed=split_seed, max_steps=max_steps, target=target,
                   log=lambda line: console.print(line, highlight=False))
    console.print(f"saved {out} ({recipe['parameters']:,} parameters, {recipe['steps']} steps, "
                  f"{recipe['warmup_seconds']:.0f} s)")
    if measure:
        measure_asset(out, split_seed=split_seed, seed=seed, console=console)

"""`vigor train`: GRPO with rollout allocation; with no arguments, the bundled tiny default."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from vigor_cli.errors import UserError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEFAULT_CONFIG = CONFIGS / "tiny-math.yaml"
"""The bundled default (tiny model, tiny-math, VIGOR): what `vigor train` runs with no arguments."""


def default_config_file(model: str | None, task: str | None) -> Path | None:
    """Without --config, the tiny model gets its tuned settings, configs/<task>.yaml for the
    tiny tasks (tiny-math.yaml otherwise); any other model starts from the config classes'
    defaults (LoRA, GPU-sized batches)."""
    if model not in (None, "tiny"):
        return None
    path = CONFIGS / f"{task}.yaml" if task in ("tiny-math", "tiny-code") else DEFAULT_CONFIG
    return path if path.is_file() else None


def train(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML run config (keys of vigor_cli/config.py). Default: configs/tiny-math.yaml (or tiny-code.yaml) for the tiny model, the built-in defaults for any other."),
    model: Optional[str] = typer.Option(None, "--model", help="model.name_or_path: hub id, local dir or 'tiny'."),
    task: Optional[str] = typer.Option(None, "--task", help="task.name: tiny-math, tiny-code, tiny-facts, tiny-ladder, math, code."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="allocation.strategy: vigor, grpo, dapo, greso, pods, random, difficulty, knapsack, reinforce-ada, auto."),
    steps: Optional[int] = typer.Option(None, "--steps", help="train.steps."),
    prompts_per_step: Optional[int] = typer.Option(None, "--prompts-per-step", help="train.prompts_per_step."),
    seed: Optional[int] = typer.Option(None, "--seed", help="train.seed."),
    engine: Optional[str] = typer.Option(None, "--engine", help="engine.kind: auto, hf, vllm."),
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit", help="model.load_in_4bit (QLoRA, CUDA only)."),
    output_dir: Optional[str] = typer.Option(None, "--output-dir", help="train.output_dir."),
    run_name: Optional[str] = typer.Option(None, "--run-name", help="train.run_name."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory from its last checkpoint (--steps may extend it)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override any key: --set grpo.beta=0.01 (repeatable)."),
) -> None:
    """Train a policy with GRPO, spending rollouts where the reward variance is (VIGOR)."""
    from vigor_cli.config import build_config
    from vigor_cli.console import console
    from vigor_cli.trainer import train as run_training

    if resume is not None:
        others = {
            "--config": config, "--model": model, "--task": task, "--strategy": strategy,
            "--prompts-per-step": prompts_per_step, "--seed": seed, "--engine": engine,
            "--output-dir": output_dir, "--run-name": run_name, "--set": set_ or None,
            "--load-in-4bit": load_in_4bit or None,
        }
        given = [flag for flag, value in others.items() if value is not None]
        if given:
            raise UserError(f"--resume continues the saved config; drop {', '.join(given)} (only --steps may change)")
        summary = run_training(resume=resume, steps=steps, out=console)
    else:
        overrides = {
            "model.name_or_path": model,
            "task.name": task,
            "allocation.strategy": strategy,
            "train.steps": steps,
            "train.prompts_per_step": prompts_per_step,
            "train.seed": seed,
            "engine.kind": engine,
            "model.load_in_4bit": True if load_in_4bit else None,
            "train.output_dir": output_dir,
            "train.run_name": run_name,
        }
        path = config if config is not None else default_config_file(model, task)
        cfg = build_config(path, overrides=overrides, sets=set_)
        summary = run_training(cfg, out=console)

    start, final = summary["start_accuracy"], summary["final_accuracy"]
    console.print(
        f"[bold]held-out accuracy[/] {start:.3f} -> {final:.3f} ({(final - start) * 100:+.1f} points)  "
        f"in {summary['wall_time']:.0f}s, {summary['rollouts']} rollouts",
        highlight=False,
    )
    console.print(f"[bold]run directory[/] {summary['run_dir']}", highlight=False)

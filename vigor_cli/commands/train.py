"""`vigor train`: GRPO with rollout allocation; with no arguments, the bundled tiny default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.errors import UserError
from vigor_cli.config import known_names
from vigor_cli.package_data import CONFIGS_DIR

CONFIGS = CONFIGS_DIR
"""The bundled configs (``vigor_cli/configs``: the repository's ``configs/``, shipped in the wheel)."""
DEFAULT_CONFIG = CONFIGS / "tiny-math.yaml"
"""The bundled default (tiny model, tiny-math, auto allocation): what `vigor train` runs with no arguments."""


def bundled_configs() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.yaml"))


def default_config_file(model: str | None, task: str | None) -> Path | None:
    """Without --config, the tiny model gets its tuned settings, configs/<task>.yaml for the
    tiny tasks (tiny-math.yaml otherwise); any other model starts from the config classes'
    defaults (LoRA, GPU-sized batches). A missing bundled file is a broken install: an error,
    never a silent run on the built-in (GPU-sized) defaults."""
    if model not in (None, "tiny"):
        return None
    path = CONFIGS / f"{task}.yaml" if task in ("tiny-math", "tiny-code") else DEFAULT_CONFIG
    if not path.is_file():
        raise UserError(f"bundled config {path} is missing: reinstall vigor (the package ships configs/)")
    return path


def resolve_config(path: Path) -> Path:
    """``--config`` as given when that file exists; otherwise the bundled config of that name,
    so ``configs/qwen2.5-1.5b-math-vigor.yaml``, ``qwen2.5-1.5b-math-vigor.yaml`` and
    ``qwen2.5-1.5b-math-vigor`` work from any folder and from a wheel install."""
    if path.is_file():
        return path
    if os.path.lexists(path):  # a FIFO, a device, a folder: said as such, never 'no such file'
        from vigor_cli.user_files import regular_file

        regular_file(path, "--config ")
    if path.parent in (Path("."), Path("configs")):
        bundled = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else path.name + ".yaml")
        if bundled.is_file():
            return bundled
    raise UserError(f"--config {path}: no such file, and no bundled config of that name "
                    f"(bundled: {', '.join(bundled_configs())})")


FLAG_OF_KEY = {
    "model.name_or_path": "--model", "task.name": "--task", "allocation.strategy": "--strategy",
    "train.steps": "--steps", "train.prompts_per_step": "--prompts-per-step", "train.seed": "--seed",
    "engine.kind": "--engine", "model.load_in_4bit": "--load-in-4bit", "model.device": "--device",
    "train.output_dir": "--output-dir", "train.run_name": "--run-name", "train.gpu_memory_gib": "--gpu-memory",
}
"""The flag that sets each key (an error names the flag the user typed)."""


def train(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config (keys of vigor_cli/config.py), or the name of a bundled one (e.g. qwen2.5-1.5b-math-vigor). Default: configs/tiny-math.yaml (or tiny-code.yaml) for the tiny model, the built-in defaults for any other.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model.name_or_path: hub id, local dir or 'tiny'.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help=f"task.name: {known_names('task')}.")] = None,
    strategy: Annotated[Optional[str], typer.Option("--strategy", help=f"allocation.strategy: {known_names('strategy')}.")] = None,
    steps: Annotated[Optional[int], opt.for_key("train.steps", "--steps", help="train.steps.")] = None,
    prompts_per_step: Annotated[Optional[int], opt.for_key("train.prompts_per_step", "--prompts-per-step", help="train.prompts_per_step.")] = None,
    seed: Annotated[Optional[int], opt.seed(help="train.seed.")] = None,
    engine: Annotated[Optional[str], opt.engine()] = None,
    load_in_4bit: Annotated[bool, typer.Option("--load-in-4bit", help="model.load_in_4bit (QLoRA, CUDA only).")] = False,
    device: Annotated[Optional[str], opt.device(help="model.device: auto, cuda, cpu (auto never falls back to the CPU on a machine with an unusable GPU).")] = None,
    output_dir: Annotated[Optional[str], opt.output_dir("--output-dir", help="train.output_dir.", as_path=False)] = None,
    run_name: Annotated[Optional[str], typer.Option("--run-name", help="train.run_name.")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="Continue the run in this directory from its last checkpoint (--steps may extend it).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set grpo.beta=0.01 (repeatable).")] = None,
    gpu_memory: Annotated[Optional[float], opt.for_key("train.gpu_memory_gib", "--gpu-memory", help="train.gpu_memory_gib: plan against this many GiB instead of the visible GPU (plans a GPU run on any machine).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the memory plan (from the model's config.json, no weights) and exit: 0 if it fits, 2 naming the keys to change if not.")] = False,
) -> None:
    """Train a policy with GRPO, spending rollouts where the reward variance is (auto, VIGOR and peers)."""
    from vigor_cli.config import build_config
    from vigor_cli.console import console
    from vigor_cli.report.train_summary import print_summary

    if resume is not None:
        others = {
            "--config": config, "--model": model, "--task": task, "--strategy": strategy,
            "--prompts-per-step": prompts_per_step, "--seed": seed, "--engine": engine,
            "--output-dir": output_dir, "--run-name": run_name, "--set": set_ or None,
            "--load-in-4bit": load_in_4bit or None, "--device": device,
            "--gpu-memory": gpu_memory,
        }
        given = [flag for flag, value in others.items() if value is not None]
        if given:
            raise UserError(f"--resume continues the saved config; drop {', '.join(given)} (only --steps may change)")
        if dry_run:
            return _dry_run(build_config(Path(resume) / "config.yaml"), console)
        print_summary(_run_training(resume=resume, steps=steps, out=console), console)
        return
    overrides = {
        "model.name_or_path": model,
        "task.name": task,
        "allocation.strategy": strategy,
        "train.steps": steps,
        "train.prompts_per_step": prompts_per_step,
        "train.seed": seed,
        "engine.kind": engine,
        "model.load_in_4bit": True if load_in_4bit else None,
        "model.device": device,
        "train.output_dir": output_dir,
        "train.run_name": run_name,
        "train.gpu_memory_gib": gpu_memory,
    }
    path = resolve_config(config) if config is not None else default_config_file(model, task)
    cfg = build_config(path, overrides=overrides, sets=set_, flags=FLAG_OF_KEY)
    if dry_run:
        return _dry_run(cfg, console)
    print_summary(_run_training(cfg, out=console), console)


def _run_training(*args, **kwargs):
    """vigor_cli.trainer.train; a run stopped by SIGINT/SIGTERM prints one line (where it stands,
    the command that resumes it) and exits 130/143, never 0."""
    from vigor_cli.console import err_console
    from vigor_cli.interrupt import TrainingInterrupted
    from vigor_cli.trainer import train as run_training

    try:
        return run_training(*args, **kwargs)
    except TrainingInterrupted as stop:
        err_console.print(stop.status, markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(stop.exit_code) from None


def _dry_run(cfg, console) -> None:
    """`--dry-run`: the memory plan and the verdict; nothing is loaded or written."""
    from vigor_cli import memory_plan

    plan = memory_plan.plan_run(cfg)
    console.print(memory_plan.render(plan))
    for note in plan.notes:
        console.print(f"[yellow]{note}[/]")
    memory_plan.check(plan)  # exit 2 with the keys to change
    if plan.available is not None:
        verdict = "fits" if plan.device == "cuda" else "CPU run (not refused)"
        console.print(f"[bold]{verdict}[/]: peak {plan.peak / memory_plan.GIB:.1f} GiB of "
                      f"{plan.available / memory_plan.GIB:.1f} GiB ({plan.source})", highlight=False)

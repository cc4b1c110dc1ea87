"""`vigor train`: GRPO with rollout allocation; with no arguments, the bundled tiny default."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.commands.flags import (  # noqa: F401  (Flag, value_type, default_text: this table's, for tests)
    EPISODE_FLAGS, EPISODES, TASK_FLAGS, Flag, command, default_text, flag_value, given, task_overrides, value_type,
)
from vigor_cli.package_data import DEFAULT_CONFIG
from vigor_cli.errors import UserError
from vigor_cli.package_data import CONFIGS_DIR

CONFIGS = CONFIGS_DIR
"""The bundled configs (``vigor_cli.configs``: the repository's ``configs/``, installed by the build)."""


def bundled_configs() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.yaml"))


def default_config_file(model: str | None, task: str | None) -> Path | None:
    """Without --config, the tiny model gets its tuned settings, configs/<task>.yaml for the
    tiny tasks (tiny-math.yaml otherwise); any other model starts from the config classes'
    defaults (LoRA, GPU-sized batches). A missing bundled file is a broken install: an error,
    never a silent run on the built-in (GPU-sized) defaults."""
    if model not in (None, "tiny"):
        return None
    path = CONFIGS / f"{task}.yaml" if task in ("tiny-math", "tiny-code", "tiny-guess") else DEFAULT_CONFIG
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
        from vigor_cli.user.files import regular_file

        regular_file(path, "--config ")
    if path.parent in (Path("."), Path("configs")):
        bundled = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else path.name + ".yaml")
        if bundled.is_file():
            return bundled
    raise UserError(f"--config {path}: no such file, and no bundled config of that name "
                    f"(bundled: {', '.join(bundled_configs())})")


FLAGS: tuple[Flag, ...] = (
    Flag("--model", "model.name_or_path"),
    Flag("--device", "model.device", option=opt.device),
    Flag("--load-in-4bit", "model.load_in_4bit"),
    Flag("--task", "task.name", names="task"),
    Flag("--strategy", "allocation.strategy", names="strategy"),
    Flag("--engine", "engine.kind", names="engine", option=opt.engine),
    Flag("--max-new-tokens", "sampling.max_new_tokens"),
    Flag("--learning-rate", "grpo.learning_rate"),
    Flag("--steps", "train.steps", note="With --resume: the new total, to extend a finished run.",
         with_resume=True),
    Flag("--max-rollouts", "train.max_rollouts"),
    Flag("--prompts-per-step", "train.prompts_per_step"),
    Flag("--seed", "train.seed", option=opt.seed),  # the same bounds and message as every --seed
    Flag("--gpu-memory", "train.gpu_memory_gib"),
    Flag("--eval-every", "train.eval_every", panel="Logging and checkpoints"),
    Flag("--save-every", "train.save_every", panel="Logging and checkpoints"),
    Flag("--log-completions-every", "train.log_completions_every", panel="Logging and checkpoints"),
    Flag("--output-dir", "train.output_dir", option=functools.partial(opt.output_dir, as_path=False), panel="Logging and checkpoints"),
    Flag("--run-name", "train.run_name", panel="Logging and checkpoints"),
    Flag("--report-to", "train.report_to", names="tracker", panel="Logging and checkpoints",
         parse=lambda text: text),  # names as typed, comma-separated (not YAML: ',,' is no value)
    Flag("--strict", "health.strict", panel="Logging and checkpoints"),
    *TASK_FLAGS,  # your own task (task 'custom'; README "Train on your own task"): shared, commands/flags.py
    *EPISODE_FLAGS,  # an environment that answers the model's turns (docs/episodes.md)
)
"""Every option of `vigor train` that sets a config key, in help order (the other options,
--config, --set, --resume and --dry-run, are in ``train``'s own signature below)."""

FLAG_OF_KEY = {f.key: f.name for f in FLAGS}
"""The flag that sets each key (an error names the flag the user typed)."""

def _train(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config (keys of vigor_cli/config/), or the name of a bundled one (e.g. qwen2.5-1.5b-math-vigor).", show_default="configs/tiny-math.yaml (or tiny-code.yaml) for the tiny model, the built-in defaults for any other")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="Continue the run in this directory from its last checkpoint (--steps may extend it).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set grpo.beta=0.01 (repeatable; the value is read as YAML).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read the task's data and import its reward functions (--data: schema, first rows rendered, the columns and arguments each reward gets), print the memory plan (from the model's config.json, no weights) and exit: 0 if it fits, 2 naming what to change if not.")] = False,
    rerun: Annotated[Optional[Path], typer.Option("--rerun", help="Repeat this run from its config and record into a new directory (RUN-rerun beside it; --output-dir, --run-name) and compare: 'identical' (exit 0), or the first step and key that differ (exit 3), naming any recorded version or file that differs here. --steps N repeats the first N steps.")] = None,
    allow_changed_files: Annotated[bool, typer.Option("--allow-changed-files", help="With --resume: continue although a data, reward or model file changed since the run started (its provenance.json records the change).")] = False,
    **values: Any,
) -> None:
    """Train a policy with GRPO, spending rollouts where the reward variance is (auto, VIGOR and peers)."""
    from vigor_cli.console import console
    from vigor_cli.report.train_summary import print_summary
    from vigor_cli.settings import build_config

    if allow_changed_files and resume is None:
        raise UserError("--allow-changed-files goes with --resume (a new run records its files as they are)")
    if rerun is not None:
        return _rerun(rerun, resume, config, set_, dry_run, values)
    if resume is not None:
        named = [name for name in given(FLAGS, values) if not next(f for f in FLAGS if f.name == name).with_resume]
        named = (["--config"] if config is not None else []) + named + (["--set"] if set_ else [])
        if named:
            allowed = ", ".join(f.name for f in FLAGS if f.with_resume)
            raise UserError(f"--resume continues the saved config; drop {', '.join(named)} (only {allowed} may change)")
        if dry_run:  # planned where the run started, as training resumes (vigor_cli.train.trainer.train)
            from vigor_cli.run.directory import RunDir

            run = RunDir.open_existing(resume)
            with run.in_launch_dir(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)):
                return _dry_run(build_config(run.path.absolute() / "config.yaml"), console)
        print_summary(_run_training(resume=resume, steps=values.get("steps"), out=console,
                                    allow_changed_files=allow_changed_files), console)
        return
    overrides = {f.key: flag_value(f, values.get(f.param)) for f in FLAGS}
    overrides.update(task_overrides(values))
    model, task = overrides.get("model.name_or_path"), overrides.get("task.name")
    path = resolve_config(config) if config is not None else default_config_file(model, task)
    cfg = build_config(path, overrides=overrides, sets=set_, flags=FLAG_OF_KEY)
    if dry_run:
        return _dry_run(cfg, console)
    print_summary(_run_training(cfg, out=console), console)


RERUN_FLAGS = ("--steps", "--output-dir", "--run-name")
"""The flags --rerun takes (how many steps to repeat, where the repeat goes)."""


def _rerun(run: Path, resume: Optional[Path], config: Optional[Path], set_: Optional[List[str]], dry_run: bool,
           values: dict[str, Any]) -> None:
    """`--rerun RUN` (vigor_cli/train/rerun.py): exit 0 when the repeat is identical, 3 when it differs."""
    from vigor_cli.train import rerun as repeat
    from vigor_cli.console import console

    named = [name for name in given(FLAGS, values) if name not in RERUN_FLAGS]
    named = (["--resume"] if resume else []) + (["--config"] if config else []) + named
    named += (["--set"] if set_ else []) + (["--dry-run"] if dry_run else [])
    if named:
        raise UserError(f"--rerun repeats the run's saved config; drop {', '.join(named)} (only "
                        f"{', '.join(RERUN_FLAGS)} may be given)")
    same = repeat.rerun(run, console, steps=values.get("steps"), output_dir=values.get("output_dir"),
                        run_name=values.get("run_name"))
    if not same:
        raise SystemExit(repeat.EXIT_DIFFERS)


train = command(_train, FLAGS, at=1)
"""`vigor train`: --config, then one option per FLAGS entry, then --resume, --set, --dry-run, --rerun,
--allow-changed-files."""
train.__name__ = "train"

_value_type, _default_text, _flag_value = value_type, default_text, flag_value  # the names tests and callers used


def _run_training(*args, **kwargs):
    """vigor_cli.train.trainer.train; a run stopped by SIGINT/SIGTERM prints one line (where it stands,
    the command that resumes it) and exits 130/143, never 0."""
    from vigor_cli.console import err_console
    from vigor_cli.interrupt import TrainingInterrupted
    from vigor_cli.train.trainer import train as run_training

    try:
        return run_training(*args, **kwargs)
    except TrainingInterrupted as stop:
        err_console.print(stop.status, markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(stop.exit_code) from None


def _dry_run(cfg, console) -> None:
    """`--dry-run`: the task's data and rewards (read and checked: a bad file or function fails
    here), the memory plan and the verdict, then what the health checks can tell before
    generating; no model is loaded, nothing is written."""
    from vigor_cli.model import memory_plan
    from vigor_cli.console import err_console
    from vigor_cli.tasks import preview_task
    from vigor_cli.train.data import dry_run_health

    from vigor_cli.run.tracking import require

    require(cfg.train.report_to)  # a dashboard's missing package or bad setting, as the run refuses it
    for line in preview_task(cfg.task, _preview_tokenizer(cfg)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    plan = memory_plan.plan_run(cfg)
    console.print(memory_plan.render(plan))
    for note in plan.notes:
        console.print(f"[yellow]{note}[/]")
    memory_plan.check(plan)  # exit 2 with the keys to change
    for line in dry_run_health(cfg):  # what the health checks can tell before generating
        err_console.print(f"warning: {line}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    if plan.available is not None:
        verdict = "fits" if plan.device == "cuda" else "CPU run (not refused)"
        console.print(f"[bold]{verdict}[/]: peak {plan.peak / memory_plan.GIB:.1f} GiB of "
                      f"{plan.available / memory_plan.GIB:.1f} GiB ({plan.source})", highlight=False)


def _preview_tokenizer(cfg: Any) -> Any:
    """The model's tokenizer for the dry run's rendered prompts (None for a task that shows
    none, or when it cannot be had here: the preview says it rendered without it)."""
    from vigor_cli.tasks import PREVIEWS

    if cfg.task.name not in PREVIEWS:
        return None
    from vigor_cli.model.loading import load_tokenizer

    try:
        return load_tokenizer(cfg.model)
    except UserError:
        return None

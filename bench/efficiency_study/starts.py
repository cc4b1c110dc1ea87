"""The starting models of the study's regimes: the bundled tiny model, a task warm-up or a
probe-accuracy warm-up built by `vigor make-tiny`, and plateau starts (grpo trained until
held-out accuracy stops rising); each built once in a child process and cached."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from .design import REGIMES, TASK_SETS, TASK_SIZES
from .paths import PUBLISHED, ROOT, child_command, child_env, rel_path, study_child

def recipe_digest(recipe: str) -> str:
    """Short hash of a warm-up recipe's settings and its task's data, naming the cached model."""
    import hashlib

    from vigor_cli.model import tiny as tiny_model
    from vigor_cli.tasks import tiny_facts, tiny_ladder

    parts = {"facts": [tiny_model.FACTS_RECIPE, tiny_facts.FACTS, tiny_facts.CODE_RANGE],
             "ladder": [tiny_model.LADDER_RECIPE, tiny_ladder.RUNGS, tiny_ladder.TRAIN_PER_RUNG, tiny_ladder.HELD_PER_RUNG]}
    return hashlib.sha256(json.dumps(parts[recipe], sort_keys=True).encode()).hexdigest()[:8]


def build_once(path: Path, marker: str, command: list[str], about: str) -> str:
    """``path`` when a finished build is there (``marker``, written last, beside config.json),
    else built by ``command`` (a child process; its output in <path>.log), an interrupted build
    removed first."""
    if (path / "config.json").is_file() and (path / marker).is_file():
        return str(path)
    if path.exists():
        shutil.rmtree(path)  # a build that was interrupted
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.parent / f"{path.name}.log"
    print(f"building {about}", flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=child_env())
    if proc.returncode != 0:
        raise SystemExit(f"building {about} failed; see {log}")
    return str(path)


def recipe_model(recipe: str, models_dir: Path) -> str:
    """The bundled model warmed by `vigor make-tiny --recipe RECIPE` (seed 0), built once and cached."""
    path = models_dir / f"{recipe}-s0-{recipe_digest(recipe)}"
    command = child_command("-m", "vigor_cli", "make-tiny", "--recipe", recipe, "--out", str(path))
    return build_once(path, "recipe.json", command,
                      f"the '{recipe}' starting model: vigor make-tiny --recipe {recipe} (a few CPU minutes)")


PLATEAU = dict(seed=1000, eval_every_steps=20, patience=3, max_steps=600)
"""How a plateau start is made: grpo (the task's study settings, 32 prompts x 8 rollouts per
step, seed 1000: not a study seed) evaluated every 20 steps until ``patience`` evaluations in a
row bring no gain over the best before them (at most ``max_steps``); the model after the last
step is the start. Every 5 steps was too often: tiny-math 'plateaued' after 25 steps at 0.566
(best 0.598, evaluation noise about 3 points) where the 150-step default run reaches 0.75."""

PLATEAU_KEEP = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")


def plateau_reached(accuracies: Sequence[float], patience: int) -> bool:
    """True when the last ``patience`` evaluations are none above the best one before them."""
    if len(accuracies) <= patience:
        return False
    return max(accuracies[-patience:]) <= max(accuracies[:-patience])


def plateau_config(regime: str, base_model: str, run_dir: Path, steps: int) -> Any:
    """The grpo run that makes a plateau start: the task's study settings at 32 prompts per step."""
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    task = REGIMES[regime].task
    p = PLATEAU
    sets = [
        f"model.name_or_path={base_model}", f"train.seed={p['seed']}", f"train.output_dir={run_dir.parent}",
        f"train.run_name={run_dir.name}", f"train.steps={steps}", f"train.eval_every={p['eval_every_steps']}",
        f"train.save_every={p['eval_every_steps']}", "train.log_completions_every=0", "train.reward_workers=1",
        f"train.prompts_per_step={TASK_SIZES[task]['prompts_per_step']}",
        f"sampling.temperature={REGIMES[regime].temperature}", *TASK_SETS[task], "allocation.strategy=grpo",
    ]
    return build_config(default_config_file(None, task), overrides={"task.name": task}, sets=sets)


def make_plateau(regime: str, base_model: str, out: Path) -> dict:
    """Train ``base_model`` with grpo until held-out accuracy stops rising (PLATEAU), then copy
    the final weights to ``out`` with plateau.json (how it was made). Child process."""
    import torch
    from rich.console import Console

    from vigor_cli.run.directory import load_run
    from vigor_cli.train.trainer import train

    torch.set_num_threads(1)
    run_dir = out.parent / f"{out.name}-run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    quiet = Console(file=sys.stdout, width=160, force_terminal=False)
    step, every = 0, PLATEAU["eval_every_steps"]
    while True:
        step += every
        if step == every:
            train(plateau_config(regime, base_model, run_dir, step), out=quiet)
        else:
            train(resume=run_dir, steps=step, out=quiet)
        evals = sorted((int(r["step"]), float(r["eval/accuracy"])) for r in load_run(run_dir).metrics()
                       if r.get("eval/accuracy") is not None)
        accs = [a for _, a in evals]
        if plateau_reached(accs, PLATEAU["patience"]) or step >= PLATEAU["max_steps"]:
            break
    ckpt = run_dir / "checkpoints" / f"step-{step}"
    tmp = out.parent / f"{out.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name in PLATEAU_KEEP:
        if (ckpt / name).is_file():
            shutil.copy2(ckpt / name, tmp / name)
    info = {
        "regime": regime, "task": REGIMES[regime].task, "base_model": rel_path(model_dir(base_model)) if base_model != "tiny" else "tiny",
        "base_model_sha256": model_digest(base_model), "rule": PLATEAU, "steps": step,
        "rollouts": step * TASK_SIZES[REGIMES[regime].task]["prompts_per_step"] * 8,
        "plateaued": plateau_reached(accs, PLATEAU["patience"]), "evaluations": [{"step": s, "accuracy": a} for s, a in evals],
        "command": f"python bench/efficiency.py --make-plateau {regime}",
    }
    (tmp / "plateau.json").write_text(json.dumps(info, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the run's logs stay beside the model
    return info


def plateau_digest(regime: str) -> str:
    """Short hash of how a plateau start is made (the rule, the run's config keys, the base)."""
    import hashlib

    r = REGIMES[regime]
    parts = [PLATEAU, r.task, r.plateau_of, r.temperature, TASK_SETS[r.task], TASK_SIZES[r.task]["prompts_per_step"]]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8]


def plateau_model(regime: str, models_dir: Path) -> str:
    """The plateau start of ``regime``, built once (a child process) and cached."""
    base = regime_model(REGIMES[regime].plateau_of, models_dir)
    path = models_dir / f"{regime}-{plateau_digest(regime)}"
    job = {"plateau": {"regime": regime, "base": base, "out": str(path)}}
    return build_once(path, "plateau.json", study_child(job),
                      f"the '{regime}' start: grpo from {base} until held-out accuracy stops rising")


def published_differs(path: str) -> str | None:
    """A warning when the committed results used a start model of this name with other weights
    (a model built by make-tiny or a plateau run on another kind of machine differs: the
    warm-up's float kernels follow the CPU's instruction set, BENCHMARKS.md), else None."""
    if not PUBLISHED.is_file() or path == "tiny":
        return None
    mine = model_digest(path)
    for cell in json.loads(PUBLISHED.read_text()).get("cells", {}).values():
        theirs = cell.get("model_sha256")
        if Path(str(cell.get("model"))).name == Path(path).name and theirs and mine and theirs != mine:
            return (f"warning: {rel_path(path)} (sha256 {mine[:12]}) is not the model the committed results used "
                    f"(sha256 {theirs[:12]}): runs on it will not reproduce those results")
    return None


def regime_model(regime: str, models_dir: Path) -> str:
    """The starting model of ``regime``: 'tiny' (bundled), a make-tiny directory or a plateau
    start (each built once); a warning when it is not the one the committed results used."""
    path = _regime_model(regime, models_dir)
    warning = published_differs(path)
    if warning:
        print(warning, flush=True)
    return path


def _regime_model(regime: str, models_dir: Path) -> str:
    """'tiny', or the path of the regime's start (plateau, task warm-up or probe-accuracy warm-up)."""
    if REGIMES[regime].plateau_of:
        return plateau_model(regime, models_dir)
    if REGIMES[regime].recipe:
        return recipe_model(REGIMES[regime].recipe, models_dir)
    target = REGIMES[regime].warmup_target
    if target is None:
        return "tiny"
    path = models_dir / f"warm-{target}"
    command = child_command("-m", "vigor_cli", "make-tiny", "--out", str(path), "--target", str(target))
    return build_once(path, "recipe.json", command,
                      f"the '{regime}' starting model: vigor make-tiny --target {target} (a few minutes)")


def model_dir(model: str) -> Path:
    if model == "tiny":
        from vigor_cli.model.loading import TINY_DIR

        return TINY_DIR
    return Path(model)


def model_digest(model: str) -> str | None:
    """sha256 of the starting model's weights, so a result names the exact model."""
    import hashlib

    path = model_dir(model) / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None

"""The training loop's section (``train.*``): steps and stops, batch, seed, evaluation and
checkpoint schedules, the run directory, dashboards, the GPU memory assumed, reward workers."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, ValidationInfo, field_validator

from vigor_cli.config.base import SEED_MAX, STEPS_MAX, TOTAL_ROLLOUTS_MAX, _check_name, _Section


class TrainConfig(_Section):
    steps: int = Field(100, ge=1, le=STEPS_MAX, description="Optimizer steps (each one allocation + update).")
    max_rollouts: Optional[int] = Field(
        None, ge=1, le=TOTAL_ROLLOUTS_MAX, description="Also stop after the step at which this many "
        "rollouts were generated in all (an equal-rollout comparison of strategies); unset: stop "
        "by steps only."
    )
    prompts_per_step: int = Field(
        64, ge=1, le=10**6, description="Prompts per step (the batch P that allocation starts from)."
    )
    seed: int = Field(
        0, ge=0, le=SEED_MAX, description="Seeds data order, sampling, allocation and init (0 to 2^32 - 1)."
    )
    eval_every: int = Field(
        10, ge=0, le=STEPS_MAX, description="Held-out evaluation every N steps (0: only at start and end)."
    )
    eval_every_rollouts: Optional[int] = Field(
        None, ge=1, le=TOTAL_ROLLOUTS_MAX, description="Also evaluate after each step that takes the "
        "rollouts generated past a multiple of N; unset: by train.eval_every only."
    )
    eval_samples: int = Field(1, ge=1, le=1024, description="Samples per held-out problem (avg@n).")
    eval_limit: Optional[int] = Field(
        None, ge=1, le=10**7, description="Evaluate on at most this many held-out problems."
    )
    eval_temperature: float = Field(0.0, ge=0, le=10, description="Evaluation temperature (0 = greedy).")
    save_every: int = Field(
        25, ge=0, le=STEPS_MAX, description="Checkpoint every N steps (0: only at the end)."
    )
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="Checkpoints kept on disk (oldest removed).")
    log_completions_every: int = Field(
        10, ge=0, le=STEPS_MAX, description="Print a table of a few completions every N steps (0: never)."
    )
    output_dir: str = Field("runs", description="Parent directory of run directories.")
    report_to: list[str] = Field(
        default_factory=list, description="Dashboards that get every metrics.jsonl line and the "
        "completions sample, names in vigor_cli/run/tracking.py's registry (tensorboard, wandb, trackio; "
        "several allowed, comma-separated; empty or 'none': none). Each needs its extra, e.g. "
        "pip install 'vigor[tensorboard]'.",
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _known_backends(cls, v: Any, info: ValidationInfo) -> list[str]:
        """One name, comma-separated names or a list; 'none' alone is []; each name is checked
        against the tracker registry where it is known (vigor_cli/settings.py)."""
        if v is None:
            return []
        items = v if isinstance(v, (list, tuple)) else [v]
        if not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected backend names, not {v!r}")
        names = list(dict.fromkeys(n.strip() for i in items for n in i.split(",") if n.strip()))
        if not names and any(i.strip() for i in items):  # ',,': a list of nothing, not 'none'
            raise ValueError(f"no backend named in {v!r}; give names (comma-separated) or none")
        if "none" in names and len(names) > 1:
            raise ValueError("'none' turns dashboards off; it cannot be combined with other backends")
        names = [n for n in names if n != "none"]
        for name in names:
            _check_name(info, "train.report_to", name)
        return names

    run_name: Optional[str] = Field(
        None, description="Run directory name (a plain name, no '/'); default "
        "<date>-<task>-<strategy>-s<seed>."
    )

    @field_validator("run_name")
    @classmethod
    def _plain_run_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or "/" in v or "\\" in v or v in (".", "..") or "\0" in v):
            raise ValueError("a plain directory name is expected (no '/', not '.' or '..'); "
                             "put the parent folder in train.output_dir")
        return v
    gpu_memory_gib: Optional[float] = Field(
        None,
        gt=0,
        le=16384,
        description="GPU memory (GiB) the memory plan assumes instead of the visible GPU's free "
        "memory: plans a GPU run on any machine (`vigor train --dry-run --gpu-memory 24`), or "
        "keeps room for other processes. Unset: torch.cuda.mem_get_info at start.",
    )
    reward_workers: int = Field(
        0, ge=0, le=1024, description="Processes that compute rewards; 0 = number of CPU cores."
    )

"""`vigor probe`'s short real run: a few grpo steps of your model on your task, and how far the
probed prompts the run did not sample moved (the transfer the simulation is fitted to).

Details: docs/modules.md.
"""

from __future__ import annotations

import io
import math
import statistics
import tempfile
from typing import Any, Callable, Sequence


def short_run(cfg: Any, steps: int, examples: Sequence[Any], before: Sequence[int], samples: int,
              count: Callable[..., list[int]], quiet: bool = False, train_prompts: int | None = None) -> dict:
    """Train ``steps`` grpo steps of the config's model (its trainer, in a temporary run
    directory, nothing kept), then sample the probed ``examples`` again exactly as before
    (``count``: the probe's sampler, same seeds). Returns the held-out gain: the mean change of
    the pass rate of the probed prompts the run never drew, its standard error (paired over
    those prompts), and the prompts counted."""
    from rich.console import Console

    from vigor_cli.console import err_console
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import Trainer

    train_prompts = train_prompts or 2 * cfg.train.prompts_per_step  # a small set: half of it per step at most
    with tempfile.TemporaryDirectory(prefix="vigor-probe-fit-") as tmp:
        fit_cfg = cfg.model_copy(update={
            "train": cfg.train.model_copy(update={"output_dir": tmp, "steps": steps, "run_name": "fit",
                                                  "report_to": [], "save_every": 0,
                                                  "prompts_per_step": min(cfg.train.prompts_per_step,
                                                                          max(1, train_prompts // 2))}),
            "allocation": cfg.allocation.model_copy(update={"strategy": "grpo"}),
        })
        sink = Console(file=io.StringIO())
        run = RunDir.planned(fit_cfg)
        try:
            run.make(fit_cfg)
            trainer = Trainer(fit_cfg, run, None, sink)
            drawn: set[str] = set()
            try:
                for step in range(1, steps + 1):
                    if not quiet:
                        err_console.print(f"probe: transfer fit, grpo step {step} of {steps}", highlight=False)
                    log = trainer.train_step(step)
                    drawn.update(entry["uid"] for entry in log.record.get("prompts", []))
                # the engine holds the updated weights (the trainer syncs them after each update)
                after = count(fit_cfg, trainer.task, trainer.tokenizer, trainer.engine, list(examples), samples, quiet)
            finally:
                trainer.close()
        finally:
            run.release(remove=True)
    kept = [i for i, ex in enumerate(examples) if ex.uid not in drawn]
    diffs = [(after[i] - before[i]) / samples for i in kept]
    if not diffs:
        return {"gain": 0.0, "se": None, "held_out_prompts": 0, "steps": steps}
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
    return {"gain": statistics.fmean(diffs), "se": se, "held_out_prompts": len(diffs), "steps": steps,
            "before": statistics.fmean(before[i] / samples for i in kept),
            "after": statistics.fmean(after[i] / samples for i in kept)}

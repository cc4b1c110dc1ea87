"""How steady auto's wide/deep decision is: recorded runs' censuses decided again under each hold.

Each run's allocation.jsonl is replayed (vigor_cli.allocation.auto.replay: every step's census
planned on the state the run had) with allocation.auto.hold at each value asked for; per run and
hold: deep steps, switches between plans, switches back within three steps, and the ratio's own
noise (sd over resampled censuses). Prints a table, writes JSON.

    python bench/auto_stability.py RUN_DIR [RUN_DIR ...] [--holds 0,1,2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vigor_cli.allocation.auto import AutoAllocator, AutoOptions, replay  # noqa: E402
from vigor_cli.allocation.registry import default_budget  # noqa: E402
from vigor_cli.config import AllocationConfig  # noqa: E402
from vigor_cli.run.directory import read_config  # noqa: E402


def allocator(run: Path, hold: float, resamples: int | None, recency: float | None = None) -> AutoAllocator:
    """The run's auto allocator (its config.yaml), with ``hold`` (and ``resamples``,
    ``recency``) set; a config written before ``allocation.auto.recency`` gets the default."""
    cfg = read_config(run)
    alloc = AllocationConfig(**cfg["allocation"])
    o = AutoOptions(**(cfg["allocation"].get("auto") or {}))
    p = int(cfg["train"]["prompts_per_step"])
    return AutoAllocator(p, int(cfg["train"]["seed"]), budget=default_budget(alloc, p), width=o.width, census=o.census,
                         margin=o.margin, max_rollouts=o.max_rollouts, history=o.history, saturated=o.saturated,
                         warmup=o.warmup, hold=hold, resamples=o.resamples if resamples is None else resamples,
                         recency=o.recency if recency is None else recency)


def stability(decisions: list[dict]) -> dict:
    """Deep steps, switches, switches back within three steps, and the ratio's noise."""
    plans = [d["decision"] for d in decisions]
    switches = [i for i in range(1, len(plans)) if plans[i] != plans[i - 1]]
    back = sum(1 for i in switches if any(plans[j] == plans[i - 1] for j in range(i + 1, min(i + 4, len(plans)))))
    sds = [d["signal"]["ratio_sd"] for d in decisions if d["signal"].get("ratio_sd") is not None]
    near = [d for d in decisions if d.get("margin_sds") is not None and abs(d["margin_sds"]) < 1]
    return {"steps": len(plans), "deep": plans.count("deep"), "switches": len(switches), "switches_back_within_3": back,
            "held": sum(1 for d in decisions if d.get("held")), "within_1_sd_of_margin": len(near),
            "ratio_sd_median": statistics.median(sds) if sds else None,
            "first_deep": next((i + 1 for i, p in enumerate(plans) if p == "deep"), None)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of auto runs (allocation.jsonl, config.yaml)")
    ap.add_argument("--holds", default="0,1,2", help="allocation.auto.hold values to replay with (comma-separated)")
    ap.add_argument("--resamples", type=int, default=None, help="allocation.auto.resamples (default: the run's)")
    ap.add_argument("--recency", type=float, default=None,
                    help="allocation.auto.recency (default: the run's; 1 replays the rule before recency)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "auto_stability_results.json")
    args = ap.parse_args(argv)
    holds = [float(h) for h in args.holds.split(",")]
    rows = []
    for run in args.runs:
        path = run / "allocation.jsonl"
        if not path.is_file():
            print(f"{run}: no allocation.jsonl", file=sys.stderr)
            return 2
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for hold in holds:
            rows.append({"run": run.name, "hold": hold,
                         **stability(replay(allocator(run, hold, args.resamples, args.recency), records))})
    head = ["run", "hold", "steps", "deep", "switches", "switches_back_within_3", "held", "within_1_sd_of_margin",
            "ratio_sd_median", "first_deep"]
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(f"{r[k]:.4f}" if isinstance(r[k], float) and k == "ratio_sd_median" else str(r[k]) for k in head))
    def shown(path: Path) -> str:  # no machine paths in the results: the run's path in the repository
        absolute = Path(path).absolute()
        return str(absolute.relative_to(ROOT)) if absolute.is_relative_to(ROOT) else path.name

    args.out.write_text(json.dumps({"command": "python bench/auto_stability.py " + " ".join(
        [*(shown(r) for r in args.runs), "--holds", args.holds,
         *(["--recency", str(args.recency)] if args.recency is not None else [])]), "rows": rows}, indent=1) + "\n")
    print(f"written: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

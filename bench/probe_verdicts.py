"""Does `vigor probe` predict the study's verdicts? Per regime of the efficiency study, the probe's
model (vigor_cli/study/transfer.py) fitted and run on that regime, its predicted verdict for
`auto` and `vigor` against grpo beside the real one from bench/efficiency_results.json.

Per regime: the start is the recorded start distribution (`start_distribution.pass_counts`; the
start models of facts, ladder and the plateaus are costly to rebuild); the shared step is fitted
to the grpo and grpo-wide arms' recorded early evaluations (the first EARLY after the start: short
runs at 8 and 4 rollouts per prompt); the
run's shape (batch, length, pool, evaluation steps and noise) is the cell's. One thread.

    python bench/probe_verdicts.py            # prints the table, writes bench/probe_verdicts_results.json
    python bench/probe_verdicts.py --results other.json --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.efficiency_study.design import TASK_SIZES  # noqa: E402
from vigor_cli.study.transfer import VERDICTS, RunShape, fit_transfer, predict_verdicts  # noqa: E402

ARMS = ("auto", "vigor")
"""The strategies whose verdicts are held against the study's."""
EARLY = 2
"""Recorded evaluations after the start the fit reads (4 steps of a 10-step run, 6 of a plateau's)."""
SEED = 0


def regime_cells(results: dict) -> dict[str, dict]:
    """The regime study's cells: not the compute axis, not a cell of its own study (default-150)."""
    return {name: c for name, c in results["cells"].items()
            if "compute_axis" not in c and "study" not in c and "vs_grpo" in c["arms"].get("auto", {})}


def task_of(cell_name: str) -> str:
    return next(t for t in sorted(TASK_SIZES, key=len, reverse=True) if cell_name == t or cell_name.startswith(t + "-"))


def auto_rule(cell: dict) -> list[str]:
    """The ``auto`` the cell's runs measured: ``auto_recency`` records the rule its runs ran
    (1: every prompt seen before counted in full, as before allocation.auto.recency existed);
    a cell without it ran the current default."""
    return [f"allocation.auto.recency={cell['auto_recency']}"] if "auto_recency" in cell else []


def task_facts(task: str, sets: tuple[str, ...] = ()) -> tuple[int, bool, object]:
    """(training prompts, whether its evaluation set is its training set, allocation config
    with ``sets`` applied: the rule the cell's ``auto`` ran)."""
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config
    from vigor_cli.tasks import get_task

    cfg = build_config(default_config_file("tiny", task), overrides={"task.name": task}, sets=list(sets))
    t = get_task(cfg.task, workers=1)
    try:
        train = t.train_examples()
        seen = {repr(getattr(e, "prompt", e)) for e in train}
        held = t.eval_examples()
        on_pool = bool(held) and all(repr(getattr(e, "prompt", e)) in seen for e in held)
        return len(train), on_pool, cfg.allocation
    finally:
        t.close()


def regime_inputs(name: str, cell: dict) -> dict:
    """What the probe would have measured on this regime, read from the recorded cell."""
    task = task_of(name)
    prompts = TASK_SIZES[task]["prompts_per_step"]
    per_step = 8 * prompts
    grpo = [r for r in cell["runs"]["grpo"] if r.get("kept", True)]
    steps = grpo[0]["steps"]
    eval_steps = [round(x / per_step) for x in grpo[0]["curve"]["rollouts"]]
    early = eval_steps[1:1 + EARLY]
    early_gain = lambda r: statistics.fmean(r["curve"]["accuracy"][i] - r["curve"]["accuracy"][0]  # noqa: E731
                                            for i in range(1, 1 + EARLY))
    gains = {8: [early_gain(r) for r in grpo],
             4: [early_gain(r) for r in cell["runs"]["grpo-wide"] if r.get("kept", True)]}
    sd = cell["start_distribution"]
    rates = [c / sd["samples_per_problem"] for c in sd["pass_counts"]]
    return dict(task=task, prompts=prompts, steps=steps, eval_steps=eval_steps, early=early, gains=gains,
                rates=rates, eval_se=cell["eval_se"], start=cell["start_accuracy"])


def real_verdict(cell: dict, arm: str) -> dict:
    v = cell["arms"][arm]["vs_grpo"]
    return {"verdict": VERDICTS[v["accuracy_verdict"]], "label": v["accuracy_label"], "seeds": v["seeds"],
            "delta": v["mean_accuracy_delta"], "interval": v["mean_accuracy_delta_ci"]}


def bundled_start(cell: dict) -> bool:
    """The regime starts from the bundled tiny model (no warm-up, no recipe, no plateau): a
    real short run of it costs a minute."""
    r = cell.get("regime") or {}
    return not (r.get("recipe") or r.get("plateau_of") or r.get("warmup_target"))


def real_short_run(name: str, cell: dict, cached: dict | None) -> dict:
    """The probe's own measurement on a regime whose start model is the bundled one: 256
    prompts x 8 rollouts at the regime's temperature, then FIT_STEPS grpo steps of its batch
    and the probed prompts again (vigor_cli/commands/probe.py); cached in the results file."""
    from vigor_cli.commands.probe import sample_pass_counts
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    task = task_of(name)
    temperature = (cell.get("regime") or {}).get("temperature", 1.0)
    key = {"task": task, "temperature": temperature, "prompts_per_step": TASK_SIZES[task]["prompts_per_step"],
           "fit_steps": FIT_STEPS, "prompts": 256, "samples": 8, "seed": SEED}
    if cached and cached.get("key") == key:
        return cached
    import torch

    torch.set_num_threads(1)
    cfg = build_config(default_config_file("tiny", task), overrides={"task.name": task, "train.seed": SEED},
                       sets=[f"sampling.temperature={temperature}", f"train.prompts_per_step={key['prompts_per_step']}"])
    t0 = time.process_time()
    counts, info = sample_pass_counts(cfg, key["prompts"], key["samples"], quiet=True, fit_steps=FIT_STEPS)
    return {"key": key, "short_run": info["short_run"], "mean_pass_rate": sum(counts) / (8 * len(counts)),
            "cpu_seconds": round(time.process_time() - t0, 1)}


FIT_STEPS = 4
"""grpo steps of a real short run (the steps of the recorded fit's first two evaluations)."""


def run(results_path: Path, only: list[str] | None = None, real: bool = False, cache: dict | None = None) -> dict:
    """The validation: the probe's rule (a fit to grpo's early evaluations), then the same with
    the two-width fit (grpo and grpo-wide: transfer and disruption) beside it; with ``real``,
    the regimes on the bundled model fitted to a real short run too."""
    results = json.loads(results_path.read_text())
    cpu0, wall0 = time.process_time(), time.time()
    out = validate(results, only, (8,))
    if real:
        measured = out["real_short_runs"] = validate_real(results, only, (cache or {}).get("real_short_runs", {}))
        # the rule the issue sets: a real short run where the start model is cheap to rebuild, the
        # recorded early evaluations where it is not
        out["agreement_probe_rule"] = {a: sum(measured["regimes"][n][a]["agree"] if n in measured["regimes"]
                                              else r["arms"][a]["agree"] for n, r in out["regimes"].items())
                                       for a in ARMS}
    two = validate(results, only, (8, 4))
    out["two_widths"] = {"agreement": two["agreement"], "about": TWO_WIDTHS,
                         "regimes": {n: {"fit": r["fit"], **{a: {k: r["arms"][a][k] for k in (
                             "predicted", "predicted_delta", "predicted_interval", "agree")} for a in ARMS}}
                                     for n, r in two["regimes"].items()}}
    out.update(results=results_path.name, cpu_seconds=round(time.process_time() - cpu0, 1),
               wall_seconds=round(time.time() - wall0, 1))
    return out


TWO_WIDTHS = ("the transfer from how much more grpo-wide (4 rollouts per prompt on twice the prompts) gained early "
              "than grpo, and a disruption every update costs whatever its breadth (vigor_cli/study/transfer.py): a "
              "variant, not the probe's rule")


def validate_real(results: dict, only: list[str] | None, cached: dict) -> dict:
    """The bundled-model regimes with the transfer fitted to a real short run of the model (the
    probe's own fit); the other regimes keep the recorded fit, in the combined count."""
    rows = {}
    for name, cell in regime_cells(results).items():
        if (only and name not in only) or not bundled_start(cell):
            continue
        x = regime_inputs(name, cell)
        pool, on_pool, alloc = task_facts(x["task"], tuple(auto_rule(cell)))
        measured = real_short_run(name, cell, (cached.get("regimes") or {}).get(name, {}).get("measured"))
        run = measured["short_run"]
        shape = RunShape(prompts=x["prompts"], steps=x["steps"], pool=pool, eval_steps=x["eval_steps"],
                         eval_se=x["eval_se"], held_out_start=x["start"], eval_on_pool=on_pool)
        fit_shape = RunShape(**{**shape.__dict__, "held_out_start": run["before"], "eval_on_pool": False})
        fit = fit_transfer(alloc, fit_shape, x["rates"], [run["steps"]], {8: [run["gain"]]},
                           source=f"real short run: {run['steps']} grpo steps of the bundled model, "
                                  f"{run['held_out_prompts']} probed prompts it did not draw "
                                  f"{run['before']:.3f} -> {run['after']:.3f}", seed=SEED, se={8: run["se"]})
        seeds = max(real_verdict(cell, a)["seeds"] for a in ARMS)
        predicted = predict_verdicts(alloc, shape, x["rates"], fit.value, repeats=seeds, seed=SEED + 1)
        rows[name] = {"measured": measured, "fit": fit.to_dict(), **{a: {
            "predicted": predicted[a]["verdict"], "predicted_delta": predicted[a]["delta"],
            "predicted_interval": predicted[a]["interval"], "real": real_verdict(cell, a)["verdict"],
            "agree": predicted[a]["verdict"] == real_verdict(cell, a)["verdict"]} for a in ARMS}}
        print(f"{name} (real short run): transfer {fit.value:.4f} [{fit.low:.4f}, {fit.high:.4f}]  "
              + "  ".join(f"{a} {rows[name][a]['predicted']}/{rows[name][a]['real']}" for a in ARMS), flush=True)
    return {"regimes": rows, "agreement": {a: sum(r[a]["agree"] for r in rows.values()) for a in ARMS},
            "regime_count": len(rows)}


def validate(results: dict, only: list[str] | None, widths: tuple[int, ...]) -> dict:
    """Per regime: fit (to the early evaluations of grpo at ``widths`` rollouts per prompt),
    predict, and hold the prediction against the study's verdict."""
    facts_of: dict[str, tuple] = {}
    rows = {}
    for name, cell in regime_cells(results).items():
        if only and name not in only:
            continue
        x = regime_inputs(name, cell)
        rule = (x["task"], *auto_rule(cell))
        if rule not in facts_of:
            facts_of[rule] = task_facts(rule[0], rule[1:])
        pool, on_pool, alloc = facts_of[rule]
        shape = RunShape(prompts=x["prompts"], steps=x["steps"], pool=pool, eval_steps=x["eval_steps"],
                         eval_se=x["eval_se"], held_out_start=x["start"], eval_on_pool=on_pool)
        arms = " and ".join({8: "grpo", 4: "grpo-wide"}[w] for w in widths)
        fit = fit_transfer(alloc, shape, x["rates"], x["early"], {w: x["gains"][w] for w in widths},
                           source=f"recorded early evaluations of the {arms} arm{'s' if len(widths) > 1 else ''} "
                                  f"(steps {x['early']}, {' and '.join(str(len(x['gains'][w])) for w in widths)} seeds)",
                           seed=SEED)
        seeds = max(real_verdict(cell, a)["seeds"] for a in ARMS)
        predicted = predict_verdicts(alloc, shape, x["rates"], fit.value, repeats=seeds, seed=SEED + 1,
                                     disruption=fit.disruption)
        row = {"task": x["task"], "pool": pool, "eval_on_training_prompts": on_pool, "prompts_per_step": x["prompts"],
               "steps": x["steps"], "eval_steps": x["eval_steps"], "eval_se": x["eval_se"],
               "start": "recorded start_distribution.pass_counts", "fit": fit.to_dict(), "repeats": seeds, "arms": {}}
        for arm in ARMS:
            real = real_verdict(cell, arm)
            p = predicted[arm]
            row["arms"][arm] = {"predicted": p["verdict"], "predicted_delta": p["delta"], "predicted_interval": p["interval"],
                                "real": real["verdict"], "real_label": real["label"], "real_delta": real["delta"],
                                "real_interval": real["interval"], "agree": p["verdict"] == real["verdict"]}
        rows[name] = row
        print(f"{name}: transfer {fit.value:.4f} [{fit.low:.4f}, {fit.high:.4f}] disruption {fit.disruption:+.4f}  "
              + "  ".join(f"{a} {row['arms'][a]['predicted']}/{row['arms'][a]['real']}" for a in ARMS), flush=True)
    agree = {a: sum(r["arms"][a]["agree"] for r in rows.values()) for a in ARMS}
    # a real win or loss the study calls unsettled (on the line, fewer than 12 seeds): a predicted tie agrees too
    lenient = {a: sum(r["arms"][a]["agree"] or (r["arms"][a]["real_label"] == "unsettled"
                                                and r["arms"][a]["predicted"] == "tie") for r in rows.values())
               for a in ARMS}
    all_tie = {a: sum(r["arms"][a]["real"] == "tie" for r in rows.values()) for a in ARMS}
    return {"regimes": rows, "agreement": agree, "agreement_unsettled_as_tie": lenient,
            "agreement_if_every_verdict_were_tie": all_tie, "regime_count": len(rows), "widths": list(widths),
            "verdict_rule": "real: the study's accuracy_verdict (95 % paired t interval of mean held-out accuracy over "
                            "the run: win = ahead, loss = behind, tie); predicted: the same interval on the simulation",
            "parameters_chosen_by_looking_at_verdicts": 0,
            "early_evaluations": EARLY}


def print_table(out: dict) -> None:
    print()
    print("| regime | transfer [95 %] | auto: predicted | auto: real | vigor: predicted | vigor: real |")
    print("|---|---|---|---|---|---|")
    cell = lambda a, kind: (f"{a[kind + '_delta'] * 100:+.1f} [{a[kind + '_interval'][0] * 100:+.1f}, "  # noqa: E731
                            f"{a[kind + '_interval'][1] * 100:+.1f}] {a[kind]}")
    for name, r in out["regimes"].items():
        f = r["fit"]
        parts = [f"{f['transfer']:.4f} [{f['interval'][0]:.4f}, {f['interval'][1]:.4f}]"]
        for a in ARMS:
            arm = r["arms"][a]
            real = arm["real"] + ("" if arm["real_label"] in ("win", "loss", "tie") else f" ({arm['real_label']})")
            parts += [cell(arm, "predicted") + ("" if arm["agree"] else " ✗"),
                      cell(arm, "real").rsplit(" ", 1)[0] + " " + real]
        print(f"| {name} | " + " | ".join(parts) + " |")
    n = out["regime_count"]
    if "real_short_runs" in out:
        r = out["real_short_runs"]
        print("\n| regime (real short run) | transfer [95 %] | auto: predicted | vigor: predicted |")
        print("|---|---|---|---|")
        for name, row in r["regimes"].items():
            f = row["fit"]
            print(f"| {name} | {f['transfer']:.4f} [{f['interval'][0]:.4f}, {f['interval'][1]:.4f}] | "
                  + " | ".join(f"{row[a]['predicted_delta'] * 100:+.1f} [{row[a]['predicted_interval'][0] * 100:+.1f}, "
                               f"{row[a]['predicted_interval'][1] * 100:+.1f}] {row[a]['predicted']}"
                               + ("" if row[a]["agree"] else " ✗") for a in ARMS) + " |")
        rule = out["agreement_probe_rule"]
        print(f"\nreal short runs ({r['regime_count']} regimes on the bundled model): agreement auto "
              f"{r['agreement']['auto']}, vigor {r['agreement']['vigor']}; with the recorded fit elsewhere "
              f"(the probe's rule): auto {rule['auto']} of {n}, vigor {rule['vigor']} of {n}")
    two = out["two_widths"]["agreement"]
    print(f"\nrecorded fits everywhere: agreement auto {out['agreement']['auto']} of {n}, vigor {out['agreement']['vigor']} of {n} "
          f"(the two-width variant: auto {two['auto']}, vigor {two['vigor']}; {out['cpu_seconds']} CPU-s, "
          f"{out['wall_seconds']} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "efficiency_results.json")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "probe_verdicts_results.json")
    ap.add_argument("--cells", help="Comma-separated regimes to run (default: all nine).")
    ap.add_argument("--real", action="store_true", help="Also fit the bundled-model regimes to a real short run "
                    "(about a CPU-minute each; reused from --out when its settings match).")
    args = ap.parse_args(argv)
    cache = json.loads(args.out.read_text()) if args.real and args.out.is_file() else None
    out = run(args.results, args.cells.split(",") if args.cells else None, real=args.real, cache=cache)
    print_table(out)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

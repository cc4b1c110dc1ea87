"""The efficiency study's tables: markdown for bench/results/efficiency.md (per cell, the
summaries by interval, auto, the compute axis, the variance laws, timing) and the terminal's."""

from __future__ import annotations

import math
from typing import Any

from .design import BASELINE
from .stats import accuracy_label, cell_checks

def _count(x: float | None, unit: str = "") -> str:
    if x is None:
        return "not reached"
    if unit == "s":
        return f"{x:.1f} s" if x < 10 else f"{x:.0f} s"
    return f"{x / 1000:.1f}k" if x >= 10000 else f"{x:.0f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pts(d: float | None) -> str:
    return "-" if d is None else f"{d * 100:+.1f} pts"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def markdown_table(cell: dict) -> str:
    learned = cell.get("learned", True)
    lines = [
        "| strategy | reached | rollouts to target: median [min-max] | speed-up | tokens to target | speed-up | "
        "train seconds to target | speed-up | final accuracy: median [min-max] | vs grpo | mean accuracy over the run | vs grpo "
        "| s/rollout vs grpo |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in cell["arms"].items():
        lines.append(
            f"| {arm} | {a['reached']}/{a['seeds']} "
            f"| {_count(a['rollouts_to_target_median'])} [{_count(a['rollouts_to_target_min'])}-{_count(a['rollouts_to_target_max'])}] "
            f"| {_x(a['rollouts_speedup']) if learned else 'no learning'} "
            f"| {_count(a['tokens_to_target_median'])} | {_x(a['tokens_speedup']) if learned else '-'} "
            f"| {_count(a['seconds_to_target_median'], 's')} | {_x(a['seconds_speedup']) if learned else '-'} "
            f"| {a['final_accuracy_median']:.3f} [{a['final_accuracy_min']:.3f}-{a['final_accuracy_max']:.3f}] "
            f"| {_pts(a['final_accuracy_delta'])} "  # None: the cell ran without grpo (--arms)
            f"| {_num(a.get('mean_accuracy_median'), 3)} | {_pts(a.get('mean_accuracy_delta'))} "
            f"| {_x(a['seconds_per_rollout_ratio'])} |"
        )
    return "\n".join(lines)


def mechanism_table(cell: dict) -> str:
    """Where each arm's rollouts went (medians over seeds of per-step means)."""
    lines = [
        "| strategy | zero-variance groups in update | prompts with signal / step | rollouts with signal / step "
        "| largest prompt's share of them | kept prompts with zero variance so far | generate s/rollout vs grpo "
        "| rollouts without signal (auto: deep / wide steps) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = cell["arms"].get(BASELINE, {}).get("generate_seconds_per_rollout_median")
    for arm, a in cell["arms"].items():
        gen = a["generate_seconds_per_rollout_median"]
        lines.append(
            f"| {arm} | {_num(a['zero_var_frac_median'], 2)} | {_num(a['signal_prompts_median'])} "
            f"| {_num(a['signal_rollouts_median'])} | {_num(a['top_prompt_share_median'], 2)} "
            f"| {_num(a['kept_zero_var_share_median'], 2)} | {_x(gen / base if gen and base else None)} "
            f"| {_no_signal(a)} |"
        )
    return "\n".join(lines)


def timing_table(t: dict) -> str:
    lines = [
        f"Interleaved timing, {t['steps']} steps each after a warm-up step, {t['prompts_per_step']} prompts per step, "
        "one process (medians of per-step seconds per rollout):\n",
        "| strategy | wall ms/rollout | vs grpo | CPU ms/rollout | vs grpo | generate ms/rollout | vs grpo | update ms/rollout | vs grpo |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in t["arms"].items():
        lines.append(
            f"| {arm} | {a['wall'] * 1e3:.2f} | {_x(a.get('wall_ratio'))} | {a['cpu'] * 1e3:.2f} | {_x(a.get('cpu_ratio'))} "
            f"| {a['generate'] * 1e3:.2f} | {_x(a.get('generate_ratio'))} | {a['update'] * 1e3:.2f} | {_x(a.get('update_ratio'))} |"
        )
    return "\n".join(lines)


def _cell_label(key: str) -> str:
    return key


def summary_table(results: dict) -> str:
    """Regime x strategy: median speed-up in rollouts to target over grpo (seeds reaching it)."""
    cells = results["cells"]
    arms = list(dict.fromkeys(a for c in cells.values() for a in c["arms"]))
    lines = ["| regime | " + " | ".join(arms) + " | best arm | auto >= 1.0x | auto within 10 % of best |",
             "|---|" + "---|" * (len(arms) + 3)]
    for key, cell in cells.items():
        row = []
        for a in arms:
            x = cell["arms"].get(a)
            if x is None:
                row.append("-")
            elif x["rollouts_speedup"] is None:
                row.append(f"not reached ({x['reached']}/{x['seeds']})")
            else:
                row.append(f"{x['rollouts_speedup']:.2f}x ({x['reached']}/{x['seeds']})")
        ch = cell_checks(cell)
        if not ch["baseline_reached"]:
            tail = ["grpo missed its own target", "-", "-"]
        else:
            yes = lambda b: "-" if b is None else ("yes" if b else "**no**")
            tail = [f"{ch['best_arm']} {ch['best_speedup']:.2f}x", yes(ch.get("auto_at_least_grpo")),
                    yes(ch.get("auto_within_10pct_of_best"))]
        lines.append(f"| {_cell_label(key)} | " + " | ".join(row + tail) + " |")
    return "\n".join(lines)


def mean_accuracy_table(results: dict) -> str:
    """Regime x strategy: mean accuracy over the run minus grpo's, in points (median of seeds)."""
    cells = results["cells"]
    arms = list(dict.fromkeys(a for c in cells.values() for a in c["arms"]))
    lines = ["| regime | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key, cell in cells.items():
        row = [_pts(cell["arms"][a].get("mean_accuracy_delta")) if a in cell["arms"] else "-" for a in arms]
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def law_table(results: dict) -> str:
    """Per regime: the starting variance law (vigor_cli/study/variance_law.py)."""
    lines = ["| regime | prompts x samples | pass counts 0 / 1-3 / 4-7 / 8-11 / 12-15 / 16 | mean pass rate "
             "| zero-variance groups of 8 | top-eighth / mean variance | Pareto k (concentration) | k (Hill, top 25 %) "
             "| closed-form eta | eta^(1/3) | empirical eta |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, cell in results["cells"].items():
        d = cell["start_distribution"]
        law = d.get("variance_law")
        if not law:
            continue
        fmt = lambda k: k if isinstance(k, str) else ("-" if k is None else f"{k:.2f}")
        lines.append(
            f"| {key} | {law['prompts']} x {law['samples']} | {' / '.join(str(v) for v in law['histogram'].values())} "
            f"| {law['mean_pass_rate']:.3f} | {law['zero_variance_share_8']:.2f} | {law['concentration']['0.125']:.2f} "
            f"| {fmt(law['k'])} | {fmt(law['k_hill'])} | {law['eta']:.2f} | {law['speedup']:.2f} | {law['eta_empirical']:.2f} |"
        )
    return "\n".join(lines)


def _ci(d: dict, key: str, scale: float = 1.0, fmt: str = "{:+.1f}") -> str:
    lo, hi = d[f"{key}_ci"]
    show = lambda v: "inf" if math.isinf(v) else fmt.format(v * scale)  # noqa: E731
    return f"{fmt.format(d[key] * scale) if not math.isinf(d[key]) else 'inf'} [{show(lo)}, {show(hi)}]"


VERDICT_MARK = {"win": "**win**", "tie": "tie", "loss": "*loss*", "unsettled": "unsettled", None: "-"}


def _accuracy_mark(vs: dict, seeds: int) -> str:
    """The label, with the comparison's seeds when they are not the regime's."""
    more = f" ({vs['seeds']} seeds)" if vs.get("seeds") != seeds else ""
    return VERDICT_MARK[accuracy_label(vs)] + more


def _regime_cells(results: dict) -> dict[str, dict]:
    """The regime study's cells: not the compute axis, nor a cell another study merged in."""
    return {k: c for k, c in results["cells"].items() if "compute_axis" not in c and "study" not in c}


def settled_verdict(vs: dict) -> str:
    """A mean-accuracy comparison's verdict at its seeds: its label, or where it is still on
    the line (unsettled), a tie with the 95 % interval's width in points."""
    label = accuracy_label(vs)
    if label != "unsettled":
        return VERDICT_MARK[label]
    lo, hi = vs["mean_accuracy_delta_ci"]
    return f"tie, on the line ({(hi - lo) * 100:.1f} points wide)"


def verdict_table(results: dict, arms: tuple[str, ...] = ("auto", "vigor")) -> str:
    """Per regime, each of ``arms`` against grpo in mean accuracy over the run: the paired
    seeds, the 95 % interval and the verdict at those seeds (settled_verdict)."""
    lines = ["| regime | " + " | ".join(f"{a} vs grpo: paired seeds, points [95 %], verdict" for a in arms) + " |",
             "|---|" + "---|" * len(arms)]
    for key, cell in _regime_cells(results).items():
        row = []
        for arm in arms:
            vs = cell["arms"].get(arm, {}).get("vs_grpo")
            row.append(f"{vs['seeds']}: {_ci(vs, 'mean_accuracy_delta', 100)} {settled_verdict(vs)}" if vs and vs.get("seeds") else "-")
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def interval_tables(results: dict) -> str:
    """Issue 25's summary: each arm against grpo by 95 % interval (paired seeds), mean accuracy
    over the run and rollouts to target, win / tie / loss by whether the interval clears 0 (1x);
    cells where grpo did not learn beyond the evaluation's noise get no speed-ups."""
    cells = _regime_cells(results)
    arms = [a for a in dict.fromkeys(a for c in cells.values() for a in c["arms"]) if a != BASELINE]
    head = "| regime | seeds | grpo gain / eval SE | " + " | ".join(arms) + " |"
    sep = "|---|---|---|" + "---|" * len(arms)
    acc_rows, speed_rows = [head, sep], [head, sep]
    for key, cell in cells.items():
        seeds = cell["arms"].get(BASELINE, {}).get("seeds", 0)
        gain = cell.get("grpo_gain")
        se = cell.get("eval_se")
        g = "-" if gain is None else f"{gain * 100:+.1f} / {se * 100:.1f} pts" if se else f"{gain * 100:+.1f} pts"
        acc, speed = [], []
        for arm in arms:
            vs = cell["arms"].get(arm, {}).get("vs_grpo")
            if not vs or not vs.get("seeds"):
                acc.append("-")
                speed.append("-")
                continue
            acc.append(f"{_ci(vs, 'mean_accuracy_delta', 100)} {_accuracy_mark(vs, seeds)}")
            if cell.get("learned", True):
                speed.append(f"{_ci(vs, 'speedup', 1.0, '{:.2f}x')} {VERDICT_MARK[vs['speedup_verdict']]}")
            else:
                speed.append("no learning")
        acc_rows.append(f"| {key} | {seeds} | {g} | " + " | ".join(acc) + " |")
        speed_rows.append(f"| {key} | {seeds} | {g} | " + " | ".join(speed) + " |")
    return ("#### mean accuracy over the run, points above grpo [95 % interval], paired seeds\n\n" + "\n".join(acc_rows)
            + "\n\n#### rollouts to target, speed-up over grpo [95 % interval] (no learning: grpo's median gain is "
            "below one standard error of the evaluation, so a target would measure the start)\n\n" + "\n".join(speed_rows))


def auto_table(results: dict) -> str:
    """Per regime: auto's share of deep steps, its speed-up and accuracy against grpo, and any
    arm that beats it by more than the noise (interval above 0 or 1x)."""
    lines = ["| regime | auto deep steps | auto vs grpo: mean accuracy | auto vs grpo: speed-up (median) | arms above auto beyond the noise |",
             "|---|---|---|---|---|"]
    for key, cell in _regime_cells(results).items():
        a = cell["arms"].get("auto")
        if not a or "vs_grpo" not in a:
            continue
        vs = a["vs_grpo"]
        deep = a.get("deep_share_median")
        beaten = cell.get("auto_beaten_by", {})
        who = ", ".join(f"{arm} ({'accuracy' if v['accuracy'] == 'win' else 'speed-up'})" for arm, v in beaten.items()) or "none"
        speed = f"{vs['speedup']:.2f}x {VERDICT_MARK[vs['speedup_verdict']]}" if cell.get("learned", True) else "no learning"
        seeds = cell["arms"].get(BASELINE, {}).get("seeds", 0)
        lines.append(f"| {key} | {'-' if deep is None else f'{deep:.0%}'} | {_ci(vs, 'mean_accuracy_delta', 100)} "
                     f"{_accuracy_mark(vs, seeds)} | {speed} | {who} |")
    return "\n".join(lines)


def compute_table(cell: dict) -> str:
    """The compute axis: accuracy at each run length per rollouts per prompt, the best marked."""
    ax = cell["compute_axis"]
    levels = [str(c) for c in ax["levels"]]
    lines = ["| rollouts per prompt (prompts per step) | " + " | ".join(f"accuracy at {int(c):,} rollouts" for c in levels) + " |",
             "|---|" + "---|" * len(levels)]
    for arm, d in sorted(ax["arms"].items(), key=lambda kv: kv[1]["rollouts_per_prompt"]):
        n = d["rollouts_per_prompt"]
        cells = []
        for c in levels:
            row = d["levels"].get(c)
            if not row:
                cells.append("-")
                continue
            best = ax["best"].get(c, {})
            mark = " **best**" if best.get("arm") == arm else (" (tie)" if arm in best.get("tied_with", []) else "")
            cells.append(f"{row['accuracy_mean']:.3f} [{row['accuracy_ci'][0]:.3f}, {row['accuracy_ci'][1]:.3f}]{mark}")
        lines.append(f"| {n} ({256 // n} of 256) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _no_signal(a: dict) -> str:
    """The arm's share of rollouts spent without signal (median over seeds), auto's deep and
    wide steps' beside it."""
    share = a.get("zero_variance_share_median")
    deep, wide = a.get("deep_zero_variance_share_median"), a.get("wide_zero_variance_share_median")
    split = f" ({_num(deep, 3)} / {_num(wide, 3)})" if deep is not None or wide is not None else ""
    return _num(share, 3) + split


def render_markdown(results: dict) -> str:
    parts = []
    if any("vs_grpo" in a for c in results["cells"].values() for a in c["arms"].values()):
        parts.append("### summary by interval (issues 25, 33: paired t intervals)\n\n" + interval_tables(results) + "\n\n#### auto\n\n"
                     + auto_table(results) + "\n\n#### the verdicts on auto and vigor at their seeds\n\n" + verdict_table(results) + "\n")
    for key, cell in results["cells"].items():
        if "compute_axis" in cell:
            parts.append(f"### compute axis: {key}\n\n" + compute_table(cell) + "\n")
    if results["cells"] and not parts:  # issue 11's summary (the interval tables above replace it)
        parts.append("### summary: speed-up in rollouts to target over grpo (median of seeds; seeds reaching the target)\n\n"
                     + summary_table(results) + "\n")
    if results["cells"]:
        parts.append("### mean accuracy over the run, points above grpo (median of seeds)\n\n" + mean_accuracy_table(results) + "\n")
        parts.append("### starting variance laws\n\n" + law_table(results) + "\n")
    if results.get("timing"):
        parts.append("### wall time per rollout\n\n" + timing_table(results["timing"]) + "\n")
    for key, cell in results["cells"].items():
        dist = cell["start_distribution"]
        parts.append(
            f"### {key}\n\n{cell['regime']['about']}. Held-out accuracy at start {cell['start_accuracy']:.3f}; "
            f"target {cell['target']:.3f} (start + {cell['target_gain']} x grpo's median gain). Starting pass counts "
            f"out of {dist['samples_per_problem']} on {dist['problems']} training prompts at temperature "
            f"{dist['temperature']}: {dist['pass_count_histogram']} (mean pass rate {dist['mean_pass_rate']:.3f}; "
            f"expected zero-variance share of groups of 8: {dist['zero_variance_at_8']:.2f}; reward variance p(1-p): "
            f"mean {dist['mean_variance']:.3f}, top eighth of prompts {dist['top_eighth_variance']:.3f})"
            + (f". Variance law: {_law_line(dist['variance_law'])}" if dist.get("variance_law") else "") + "\n\n"
            + markdown_table(cell) + "\n\n" + mechanism_table(cell) + "\n"
        )
    return "\n".join(parts)


def _law_line(law: dict) -> str:
    fmt = lambda k: k if isinstance(k, str) else ("-" if k is None else f"{k:.2f}")
    return (f"Pareto k {fmt(law['k'])} (Hill {fmt(law['k_hill'])}), closed-form eta {law['eta']:.2f}, "
            f"eta^(1/3) {law['speedup']:.2f}, empirical eta {law['eta_empirical']:.2f}")


def print_tables(results: dict, console: Any) -> None:
    from rich.table import Table

    for key, cell in results["cells"].items():
        t = Table(title=f"{key}: target {cell['target']:.3f} (start {cell['start_accuracy']:.3f}); speed-up = grpo / strategy", title_justify="left")
        for col in ("strategy", "reached", "rollouts to target", "x", "tokens", "x", "train s", "x", "final acc", "vs grpo", "s/rollout", "zero-var"):
            t.add_column(col, justify="left" if col == "strategy" else "right")
        for arm, a in cell["arms"].items():
            t.add_row(
                arm, f"{a['reached']}/{a['seeds']}",
                f"{_count(a['rollouts_to_target_median'])} [{_count(a['rollouts_to_target_min'])}-{_count(a['rollouts_to_target_max'])}]",
                _x(a["rollouts_speedup"]), _count(a["tokens_to_target_median"]), _x(a["tokens_speedup"]),
                _count(a["seconds_to_target_median"], "s"), _x(a["seconds_speedup"]),
                f"{a['final_accuracy_median']:.3f}", f"{a['final_accuracy_delta'] * 100:+.1f}",
                _x(a["seconds_per_rollout_ratio"]), f"{a['zero_var_frac_median']:.2f}",
            )
        console.print(t)
        if cell.get("start_distribution", {}).get("variance_law"):
            console.print(f"  starting variance law: {_law_line(cell['start_distribution']['variance_law'])}", highlight=False)
    if results["cells"]:
        console.print(summary_table(results), highlight=False)

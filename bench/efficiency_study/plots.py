"""The efficiency study's figures: per cell accuracy against rollouts in panels of at most six
arms, the compute axis, and the summary over regimes; the finding in each title."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from .design import COMPUTE_LENGTHS, rollouts_per_prompt
from .stats import VIGOR_VARIANTS, accuracy_label, cell_checks

ARM_COLORS = {
    "grpo": "#000000", "grpo-wide": "#7f7f7f", "vigor": "#1f77b4", "vigor-prompt-mean": "#17becf",
    "vigor-scale-none": "#9467bd", "knapsack": "#2ca02c", "reinforce-ada": "#ff7f0e", "auto": "#d62728",
    "pilot-commit": "#8c564b", "grpo-n2": "#e377c2", "grpo-n4": "#bcbd22", "grpo-n16": "#1f77b4",
    "auto-wide": "#ff9896", "auto-plain": "#9467bd", "auto-revisit": "#ff7f0e",
}
"""One colour per arm, the same in every panel."""

PANELS = [("grpo and VIGOR variants", ["grpo", "grpo-wide", "vigor", "vigor-prompt-mean", "vigor-scale-none"]),
          ("peers and auto", ["grpo", "grpo-wide", "knapsack", "reinforce-ada", "pilot-commit", "auto"])]
"""Small multiples: at most 6 curves per panel."""

LEVEL_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c"]
"""The compute axis's run lengths, one colour each."""


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """The figure laid out and written to ``path`` as PNG, then closed."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    pyplot().close(fig)
    return path


def _mean_curve(measures: list[dict]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Mean, min and max accuracy over seeds on the union of their evaluation points (interpolated)."""
    import numpy as np

    xs = sorted({x for m in measures for x in m["curve"]["rollouts"]})
    top = min(max(m["curve"]["rollouts"]) for m in measures)
    xs = [x for x in xs if x <= top]
    ys = np.array([np.interp(xs, m["curve"]["rollouts"], m["curve"]["accuracy"]) for m in measures])
    return xs, ys.mean(0).tolist(), ys.min(0).tolist(), ys.max(0).tolist()


def _finding(key: str, cell: dict) -> str:
    """The cell's finding for a plot title: by mean accuracy over the run against grpo (95 %
    intervals, win/tie/loss) where the intervals exist, else by rollouts to target."""
    arms = cell["arms"]
    if any("vs_grpo" in a for a in arms.values()):
        scored = {a: x["vs_grpo"] for a, x in arms.items() if x.get("vs_grpo", {}).get("seeds")}
        best = max(scored, key=lambda a: scored[a]["mean_accuracy_delta"])
        parts = [f"best {best} {scored[best]['mean_accuracy_delta'] * 100:+.1f} pts ({accuracy_label(scored[best])})"]
        if "auto" in scored and best != "auto":
            parts.append(f"auto {scored['auto']['mean_accuracy_delta'] * 100:+.1f} ({accuracy_label(scored['auto'])})")
        variants = [a for a in VIGOR_VARIANTS if a in scored]
        if variants:
            v = max(variants, key=lambda a: scored[a]["mean_accuracy_delta"])
            parts.append(f"{v} {scored[v]['mean_accuracy_delta'] * 100:+.1f} ({accuracy_label(scored[v])})")
        learned = "" if cell.get("learned", True) else "; grpo did not learn beyond the noise"
        return f"{key}: " + ", ".join(parts) + f" (mean accuracy vs grpo{learned})"
    ch = cell_checks(cell)
    if not ch["baseline_reached"]:
        return f"{key}: grpo misses its own target"
    parts = [f"best {ch['best_arm']} {ch['best_speedup']:.2f}x"]
    if "auto_speedup" in ch:
        parts.append(f"auto {ch['auto_speedup']:.2f}x" if ch["auto_speedup"] else "auto misses")
    if "best_vigor" in ch:
        parts.append(f"{ch['best_vigor']} {ch['best_vigor_speedup']:.2f}x" if ch["best_vigor_speedup"] else "VIGOR misses")
    return f"{key}: " + ", ".join(parts) + " (rollouts to target vs grpo)"


def plot_cell(key: str, cell: dict, path: Path) -> Path:
    """Accuracy vs cumulative rollouts, mean over seeds with a min-max band, two panels of
    at most 6 curves, one colour per arm; the finding in the title."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 4.2), dpi=110, sharey=True)
    for ax, (title, arms) in zip(axes, PANELS):
        for arm in arms:
            runs = cell["runs"].get(arm)
            if not runs:
                continue
            x, mean, lo, hi = _mean_curve(runs)
            color = ARM_COLORS.get(arm, "#bcbd22")
            ax.plot(x, mean, marker="o", markersize=3, color=color, label=arm)
            ax.fill_between(x, lo, hi, color=color, alpha=0.12, linewidth=0)
        ax.axhline(cell["target"], color="grey", linestyle="--", linewidth=1, label=f"target {cell['target']:.3f}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("cumulative rollouts")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("held-out accuracy" if not key.startswith("tiny-facts") else "recall of the facts (sampled)")
    fig.suptitle(_finding(key, cell), fontsize=11)
    return save(fig, path)


def plot_no_signal(key: str, cell: dict, path: Path) -> Path:
    """Per arm, against cumulative rollouts: held-out accuracy (mean over seeds, min-max band)
    and the rollouts spent without signal so far (mean over seeds), with the seed count."""
    import numpy as np

    plt = pyplot()
    fig, (acc, flat) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=110)
    for arm, runs in cell["runs"].items():
        color = ARM_COLORS.get(arm, "#bcbd22")
        x, mean, lo, hi = _mean_curve(runs)
        acc.plot(x, mean, marker="o", markersize=3, color=color, label=f"{arm} ({len(runs)} seeds)")
        acc.fill_between(x, lo, hi, color=color, alpha=0.12, linewidth=0)
        with_flat = [m for m in runs if m["curve"].get("no_signal")]
        if with_flat:
            xs = with_flat[0]["curve"]["rollouts"]
            ys = np.mean([np.interp(xs, m["curve"]["rollouts"], m["curve"]["no_signal"]) for m in with_flat], axis=0)
            flat.plot(xs, ys, marker="o", markersize=3, color=color, label=arm)
    acc.axhline(cell["target"], color="grey", linestyle="--", linewidth=1, label=f"target {cell['target']:.3f}")
    acc.set_ylabel("held-out accuracy")
    flat.set_ylabel("rollouts spent without signal (all rewards equal)")
    for ax in (acc, flat):
        ax.set_xlabel("cumulative rollouts")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left" if ax is flat else "lower right")
    fig.suptitle(_finding(key, cell), fontsize=11)
    return save(fig, path)


def plot_compute(key: str, cell: dict, path: Path) -> Path:
    """The compute axis in two panels: held-out accuracy at each run length against rollouts
    per prompt (one colour per length, 95 % intervals), and accuracy against cumulative
    rollouts per arm; the finding (the best rollouts per prompt per length) in the title."""
    plt = pyplot()
    ax_data = cell["compute_axis"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    arms = sorted(ax_data["arms"], key=lambda a: ax_data["arms"][a]["rollouts_per_prompt"])
    ns = [ax_data["arms"][a]["rollouts_per_prompt"] for a in arms]
    for color, c in zip(LEVEL_COLORS, ax_data["levels"]):
        rows = [ax_data["arms"][a]["levels"].get(str(c)) for a in arms]
        xs = [n for n, r in zip(ns, rows) if r]
        ys = [r["accuracy_mean"] for r in rows if r]
        err = [[r["accuracy_mean"] - r["accuracy_ci"][0] for r in rows if r], [r["accuracy_ci"][1] - r["accuracy_mean"] for r in rows if r]]
        steps = round(c / (ax_data["levels"][-1] / max(COMPUTE_LENGTHS)))
        left.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=color, label=f"{c:,} rollouts ({steps} grpo steps)")
        best = ax_data["best"].get(str(c))
        if best:
            r = ax_data["arms"][best["arm"]]["levels"][str(c)]
            left.scatter([best["rollouts_per_prompt"]], [r["accuracy_mean"]], s=140, facecolors="none", edgecolors=color, linewidths=2)
    left.set_xscale("log", base=2)
    left.set_xticks(ns, [str(n) for n in ns])
    left.set_xlabel("rollouts per prompt (same 256 rollouts per step)")
    left.set_ylabel("held-out accuracy at that length (mean of seeds)")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    left.set_title("accuracy at each run length (circle: best)", fontsize=10)
    for arm in arms:
        runs = cell["runs"][arm]
        x, mean, lo, hi = _mean_curve(runs)
        color = ARM_COLORS.get(arm, "#333333")
        right.plot(x, mean, marker="o", markersize=2, color=color, label=f"{rollouts_per_prompt(arm)} per prompt ({arm})")
        right.fill_between(x, lo, hi, color=color, alpha=0.1, linewidth=0)
    for c in ax_data["levels"]:
        right.axvline(c, color="grey", linestyle=":", linewidth=1)
    right.set_xlabel("cumulative rollouts")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    right.set_title("accuracy vs rollouts (mean of seeds, band min-max)", fontsize=10)
    finding = "; ".join(
        f"{int(c):,}: {b['rollouts_per_prompt']}" + (f" (ties {', '.join(str(rollouts_per_prompt(a)) for a in b['tied_with'])})" if b["tied_with"] else "")
        for c, b in ax_data["best"].items())
    fig.suptitle(f"{key}: best rollouts per prompt by run length (rollouts): {finding}", fontsize=10)
    return save(fig, path)


def plot_summary(results: dict, path: Path) -> Path:
    """One panel per regime: grpo, grpo-wide, the best VIGOR variant and auto (mean over seeds)."""
    plt = pyplot()
    cells = {k: c for k, c in results["cells"].items() if "compute_axis" not in c}
    n = len(cells)
    cols = 3
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 3.4 * rows), dpi=100, squeeze=False)
    wins = {}
    for ax, (key, cell) in zip(axes.flat, cells.items()):
        ch = cell_checks(cell)
        arms = ["grpo", "grpo-wide", ch.get("best_vigor") or "vigor", "auto"]
        if ch.get("best_arm") and ch["best_arm"] not in arms:
            arms.append(ch["best_arm"])
        for arm in dict.fromkeys(arms):
            runs = cell["runs"].get(arm)
            if not runs:
                continue
            x, mean, _, _ = _mean_curve(runs)
            ax.plot(x, mean, marker="o", markersize=2, color=ARM_COLORS.get(arm, "#bcbd22"), label=arm)
        ax.axhline(cell["target"], color="grey", linestyle="--", linewidth=1)
        title = _finding(key, cell).replace(" (rollouts to target vs grpo)", "")
        ax.set_title("\n".join(textwrap.wrap(title, 58)), fontsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
        ax.tick_params(labelsize=7)
        ax.set_xlabel("rollouts", fontsize=7)
        if ch.get("baseline_reached"):
            wins[key] = ch["best_arm"]
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    per_arm = sorted({len(r) for c in cells.values() for r in c["runs"].values()}) or [0]
    seeds = str(per_arm[0]) if len(per_arm) == 1 else f"{per_arm[0]}-{per_arm[-1]}"
    verdicts: dict[str, dict[str, int]] = {}  # arm -> win/tie/loss counts by interval (issue 25)
    for cell in cells.values():
        for arm, a in cell["arms"].items():
            v = accuracy_label(a.get("vs_grpo", {}))
            if v:
                verdicts.setdefault(arm, {}).setdefault(v, 0)
                verdicts[arm][v] += 1
    if verdicts:
        said = [f"{arm} " + "/".join(f"{verdicts[arm].get(v, 0)} {v}" for v in ("win", "tie", "loss", "unsettled")
                                     if v != "unsettled" or verdicts[arm].get(v))
                for arm in ("auto", "grpo-wide", "vigor") if arm in verdicts]
        finding = "Against grpo by 95 % t interval (mean accuracy over the run): " + ", ".join(said)
    else:
        counts: dict[str, int] = {}
        for v in wins.values():
            counts[v] = counts.get(v, 0) + 1
        finding = "Best arm: " + ", ".join(f"{v} in {n}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])) + f" of {len(wins)} regimes"
    fig.suptitle(f"{finding}\nheld-out accuracy vs cumulative rollouts, mean of {seeds} seeds; dashed: target", fontsize=10)
    return save(fig, path)

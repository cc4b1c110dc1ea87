"""PNG plots of accuracy against cumulative rollouts and tokens (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from vigor_cli.report.curves import Axis, Curve


def _human(x: float, _pos: object = None) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:g}{suffix}"
    return f"{x:g}"


def plot_lines(curves: list[Curve], axis: str) -> list[dict]:
    """What :func:`plot_accuracy` draws for each curve on ``axis``: the curve (a seed group's
    mean, with its band), then each of a group's runs, thin, to its own last point."""
    out = []
    for i, curve in enumerate(curves):
        line: Axis = curve.by_rollouts if axis == "rollouts" else curve.by_tokens
        out.append({"curve": i, "label": curve.label, "x": line.x, "y": line.y, "low": line.low,
                    "high": line.high, "member": False, "health": _marks(curve, axis)})
        for member in curve.members:
            own: Axis = member.by_rollouts if axis == "rollouts" else member.by_tokens
            out.append({"curve": i, "label": member.label, "x": own.x, "y": own.y, "low": None,
                        "high": None, "member": True, "health": _marks(member, axis)})
    return out


def _marks(curve: Curve, axis: str) -> list[float]:
    """The x of each step where a health check held (vigor_cli/train/health.py)."""
    return [m.rollouts if axis == "rollouts" else m.tokens for m in curve.health]


def plot_accuracy(
    curves: list[Curve],
    axis: str,
    path: Path,
    target: float | None = None,
    crossings: list[float | None] | None = None,
    metric: str = "eval/accuracy",
) -> Path:
    """One line per curve (seed groups: mean line and min-max band over the range every seed
    reached, each seed thin to its own end) on ``axis`` ('rollouts' or 'tokens'); a dashed
    line at ``target`` and a mark at each crossing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    flagged = False
    for line in plot_lines(curves, axis):
        i = line["curve"]
        color = f"C{i % 10}"
        if line["health"]:  # a rug of triangles along the bottom: steps where a health check held
            ax.plot(line["health"], [0.02] * len(line["health"]), marker="^", linestyle="none", markersize=4,
                    color=color, alpha=0.8, transform=ax.get_xaxis_transform(),
                    label=None if flagged else "health check held (metrics.jsonl health/*)")
            flagged = True
        if line["member"]:
            ax.plot(line["x"], line["y"], color=color, linewidth=0.8, alpha=0.5)
            continue
        ax.plot(line["x"], line["y"], marker="o", markersize=3, color=color, label=line["label"])
        if line["low"] is not None and line["high"] is not None:
            ax.fill_between(line["x"], line["low"], line["high"], color=color, alpha=0.2, linewidth=0)
        if target is not None and crossings and crossings[i] is not None:
            ax.plot([crossings[i]], [target], marker="x", markersize=8, color=color)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:.3f}")
    ax.set_xlabel("cumulative rollouts" if axis == "rollouts" else "cumulative generated tokens")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_formatter(FuncFormatter(_human))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"{metric} vs {'rollouts' if axis == 'rollouts' else 'generated tokens'}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path

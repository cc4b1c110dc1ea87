"""The rich table of `vigor eval`: one row per benchmark, then the averages."""

from __future__ import annotations

from rich.table import Table

from vigor_cli.console import literal


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def results_table(results: dict, title: str) -> Table:
    """avg@n, pass@k for every k reported, and the code test pass rate, in percent (the title
    and benchmark names, which come from paths and files, printed literally)."""
    benches = results["sets"]
    ks: list[str] = []
    for b in benches.values():
        for k in b["metrics"].get("pass@k", {}):
            if k != "1" and k not in ks:
                ks.append(k)
    ks.sort(key=int)
    has_code = any(b.get("kind") == "code" for b in benches.values())
    caption = "pass@k: unbiased estimator over n samples"
    if has_code:
        caption += "; code: avg@n is the full pass rate, test pass the mean share of tests passed"
    t = Table(title=literal(title), title_justify="left", caption=caption, caption_justify="left")
    t.add_column("benchmark")
    t.add_column("problems", justify="right")
    t.add_column("n", justify="right")
    t.add_column("avg@n %", justify="right")
    for k in ks:
        t.add_column(f"pass@{k} %", justify="right")
    if has_code:
        t.add_column("test pass %", justify="right")
    for name, b in benches.items():
        m = b["metrics"]
        row = [literal(name), str(m["problems"]), str(m["n"]), _pct(m["avg@n"])]
        row += [_pct(m["pass@k"].get(k)) for k in ks]
        if has_code:
            row.append(_pct(m.get("test_pass_rate")))
        t.add_row(*row)
    ov = results.get("overall", {})
    blanks = [""] * (len(ks) + int(has_code))
    if "math6_avg@n" in ov:
        t.add_row("[bold]six-math average[/]", "", "", f"[bold]{_pct(ov['math6_avg@n'])}[/]", *blanks)
    if len(benches) > 1 and "mean_avg@n" in ov:
        t.add_row("[bold]mean of benchmarks[/]", "", "", f"[bold]{_pct(ov['mean_avg@n'])}[/]", *blanks)
    return t


def task_results_table(results: dict, title: str) -> Table:
    """A task's own sets: mean reward (avg@n), the pass rate (pass@1 at the task's threshold)
    and pass@k, unscored samples, and each reward function's mean where the task has several."""
    sets = results["sets"]
    ks = sorted({k for s in sets.values() for k in s["metrics"].get("pass@k", {}) if k != "1"}, key=int)
    parts = list(dict.fromkeys(key[len("reward/"):-len("/mean")] for s in sets.values()
                               for key in (s["metrics"].get("rewards") or {}) if key.endswith("/mean")))
    threshold = next(iter(sets.values()), {}).get("pass_threshold", 1.0)
    t = Table(title=literal(title), title_justify="left", caption_justify="left",
              caption=f"pass: reward >= {threshold:g} (task.pass_threshold); pass@k: unbiased estimator over n samples")
    episodes = any(s["metrics"].get("episodes") for s in sets.values())
    extra = ("turns", "tool calls", "failed calls") if episodes else ()
    for column in ("set", "problems", "n", "mean reward", "pass rate", *[f"pass@{k}" for k in ks], "unscored",
                   *[f"{p} mean" for p in parts], *extra):
        t.add_column(literal(column), justify="left" if column == "set" else "right")
    if episodes:
        t.caption += "; turns, tool calls and failed calls: per episode"
    for name, s in sets.items():
        m = s["metrics"]
        rewards = m.get("rewards") or {}
        ep = m.get("episodes") or {}
        t.add_row(literal(name), str(m["problems"]), str(m["n"]), _num(s["accuracy"]), _num(m["pass@k"].get("1")),
                  *[_num(m["pass@k"].get(k)) for k in ks], str(m.get("unscored", 0)),
                  *[_num(rewards.get(f"reward/{p}/mean")) for p in parts],
                  *([_num(ep.get("turns/mean")), _num(ep.get("tool_calls/mean")), _num(ep.get("tool_calls/failed"))]
                    if episodes else []))
    return t


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"

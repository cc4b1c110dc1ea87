"""What `vigor probe` prints: the measured variance law, the simulated strategies, and the
recommendation."""

from __future__ import annotations


def print_result(result: dict) -> None:
    from rich.table import Table

    from vigor_cli.console import console, literal

    law = result["variance_law"]
    fmt = lambda k: k if isinstance(k, str) else ("-" if k is None else f"{k:.2f}")
    t = Table(title=literal(f"variance law: {result['model']} on {result['task']}, {result['prompts']} prompts x "
                            f"{result['samples']} rollouts, temperature {result['temperature']}"), title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row(f"pass counts ({' / '.join(law['histogram'])})", " / ".join(str(v) for v in law["histogram"].values()))
    t.add_row("mean pass rate", f"{law['mean_pass_rate']:.3f}")
    t.add_row("zero-variance groups of 8", f"{law['zero_variance_share_8']:.2f}" + ("" if law["zero_variance_exact"] else " (plug-in)"))
    t.add_row("top-eighth / mean reward variance", f"{law['concentration']['0.125']:.2f}")
    t.add_row("Pareto k (concentration fit; Hill)", f"{fmt(law['k'])}; {fmt(law['k_hill'])}")
    t.add_row("closed-form eta, speed-up eta^(1/3)", f"{law['eta']:.2f}, {law['speedup']:.2f}x")
    t.add_row("empirical eta (perfect ranking)", f"{law['eta_empirical']:.2f}")
    console.print(t)
    sim = result["simulated"]
    s = Table(title=literal(f"simulated ({sim['model']}), {sim['prompts_per_step']} prompts/step, "
                            f"target mean pass rate {sim['target_mean_pass_rate']}, {sim['repeats']} simulations"),
              title_justify="left")
    s.add_column("strategy")
    s.add_column("rollouts to target (mean)", justify="right")
    s.add_column("reached", justify="right")
    s.add_column("speed-up vs grpo [95 % interval]", justify="right")
    for name, row in sim["strategies"].items():
        ci = row.get("speedup_ci")
        s.add_row(name, f"{row['rollouts_to_target']:,}" if row["rollouts_to_target"] else "not reached",
                  f"{row['reached']} of {sim['repeats']}",
                  f"{row['speedup_vs_grpo']:.2f}x [{ci[0]:.2f}x, {ci[1]:.2f}x]" if row["speedup_vs_grpo"] else "-")
    console.print(s)
    print_verdicts(result)
    if not result["binary_rewards"]:
        console.print(f"rewards are not all 0/1: a rollout counts as passed when its reward is at least "
                      f"{result.get('pass_threshold', 1.0):g} (task.pass_threshold)", style="dim", highlight=False)
    if result.get("unscored"):
        console.print(f"{result['unscored']} rollouts could not be scored (reward None): counted as not passed",
                      style="dim")
    console.print(f"[bold]recommended strategy:[/] {result['recommended']} ({result['why']})", highlight=False)


def print_transfer(fit: dict) -> str:
    """The transfer line: the value, its 95 % interval and where it came from."""
    lo, hi = fit["interval"]
    return f"transfer between prompts {fit['transfer']:.4f} [95 %: {lo:.4f}, {hi:.4f}] ({fit['source']})"


def print_verdicts(result: dict) -> None:
    """Each strategy against grpo: predicted verdict, the difference and its interval."""
    from rich.table import Table

    from vigor_cli.console import console, literal

    if "transfer" not in result:
        return
    fit, v = result["transfer"], result.get("verdicts")
    console.print(literal(print_transfer(fit)), highlight=False)
    for note in fit.get("notes", []):
        console.print(literal(note), style="dim", highlight=False)
    if not v:
        console.print("no predicted verdicts: without transfer the held-out pass rate never moves in the "
                      "simulation (fit it: --fit-steps N, or give it: --transfer X)", style="dim", highlight=False)
        return
    t = Table(title=literal(f"predicted verdict against grpo: {v['metric']}, {v['steps']} steps of "
                            f"{v['prompts_per_step']} prompts, 95 % interval of {v['strategies']['grpo']['repeats']} "
                            f"paired simulations with the evaluation's noise ({v['eval_se'] * 100:.1f} points each)"),
              title_justify="left")
    t.add_column("strategy")
    t.add_column("verdict")
    t.add_column("points vs grpo [95 % interval]", justify="right")
    for name, row in v["strategies"].items():
        if name == "grpo":
            continue
        lo, hi = row["interval"]
        t.add_row(name, row["verdict"], f"{row['delta'] * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]")
    console.print(t)

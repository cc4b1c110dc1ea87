"""Drive the real allocators with simulated rewards: behaviour without a model.

Each prompt of a fixed pool has a latent pass rate drawn from a named law; a
rollout's reward is Binomial(tests, p) / tests (Bernoulli when tests = 1, so
fractional rewards like a code task's share of passed tests are covered too).
A sampler hands out the pool in shuffled epochs, as a trainer's data loader
would, so prompt uids recur across steps (GRESO's history needs that).

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from vigor_cli.allocation import make_allocator, registry
from vigor_cli.allocation.estimate import pareto_eta
from vigor_cli.allocation.rounds import ceil_fraction
from vigor_cli.config import AllocationConfig
from vigor_cli.errors import UserError

DEFAULT_LAW = "mix:0.3,0.2,1,1"
POOL_PER_PROMPT = 16  # default pool size = this x prompts per step
TARGET_GAIN = 0.1  # learning mode's default target = initial mean pass rate + this (<= 0.95)


# --------------------------------------------------------------------------- laws
@dataclass
class PassRateLaw:
    """A named law of per-prompt pass rates; ``pareto_k`` is set for the Pareto law."""

    text: str
    sample: Callable[[np.random.Generator, int], np.ndarray]
    pareto_k: float | None = None
    fixed: np.ndarray | None = None  # a file's pass rates, used as the pool itself


def _numbers(kind: str, args: str, spec: str, count: tuple[int, ...]) -> list[float]:
    """The comma-separated numbers of a law string, or a UserError that shows the syntax."""
    try:
        values = [float(p) for p in args.split(",")] if args else []
    except ValueError:
        values = []
    if len(values) not in count or any(not math.isfinite(v) for v in values):
        raise UserError(f"--pass-rates {spec!r}: expected {_LAW_HELP[kind]}")
    return values


_LAW_HELP = {
    "beta": "beta:A,B with A, B > 0 (pass rates ~ Beta(A, B))",
    "mix": "mix:P0,P1[,A,B]: mass P0 at 0, P1 at 1, the rest Beta(A, B) (default 1,1); "
    "P0, P1 >= 0, P0 + P1 <= 1",
    "pareto": "pareto:K[,XM] with K > 1: reward variances p(1-p) ~ Pareto(K, XM) "
    "truncated at 1/4 (default XM puts 1% of the untruncated mass above 1/4)",
    "file": "file:PATH, a text file of pass rates in [0, 1] (whitespace or comma separated, "
    "'#' comments)",
}


def parse_law(spec: str) -> PassRateLaw:
    """Parse a ``--pass-rates`` law string; a bad one raises a one-line UserError."""
    kind, _, args = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in _LAW_HELP:
        raise UserError(
            f"--pass-rates {spec!r}: unknown law {kind!r}; use one of "
            + "; ".join(_LAW_HELP.values())
        )
    if kind == "beta":
        a, b = _numbers(kind, args, spec, (2,))
        if a <= 0 or b <= 0:
            raise UserError(f"--pass-rates {spec!r}: expected {_LAW_HELP['beta']}")
        return PassRateLaw(spec, lambda rng, n: rng.beta(a, b, n))
    if kind == "mix":
        values = _numbers(kind, args, spec, (2, 4))
        p0, p1 = values[0], values[1]
        a, b = (values[2], values[3]) if len(values) == 4 else (1.0, 1.0)
        if p0 < 0 or p1 < 0 or p0 + p1 > 1 + 1e-12 or a <= 0 or b <= 0:
            raise UserError(f"--pass-rates {spec!r}: expected {_LAW_HELP['mix']}")

        def sample_mix(rng: np.random.Generator, n: int) -> np.ndarray:
            u = rng.random(n)
            middle = rng.beta(a, b, n)
            return np.where(u < p0, 0.0, np.where(u < p0 + p1, 1.0, middle))

        return PassRateLaw(spec, sample_mix)
    if kind == "pareto":
        values = _numbers(kind, args, spec, (1, 2))
        k = values[0]
        xm = values[1] if len(values) == 2 else 0.25 * 0.01 ** (1 / k) if k > 0 else 0
        if k <= 1 or not 0 < xm < 0.25:
            raise UserError(f"--pass-rates {spec!r}: expected {_LAW_HELP['pareto']}")

        def sample_pareto(rng: np.random.Generator, n: int) -> np.ndarray:
            # Inverse-CDF sampling of Pareto(k, xm) truncated at 1/4 (exact, no rejection).
            top = 1 - (xm / 0.25) ** k
            v = xm * (1 - rng.random(n) * top) ** (-1 / k)
            v = np.minimum(v, 0.25)
            half = np.sqrt(np.maximum(0.0, 1 - 4 * v)) / 2
            sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
            return 0.5 + sign * half

        return PassRateLaw(spec, sample_pareto, pareto_k=k)
    return _file_law(spec, args)


def _file_law(spec: str, path_text: str) -> PassRateLaw:
    from vigor_cli.user.files import read_text

    path = Path(path_text)
    if not path_text or not os.path.lexists(path):
        raise UserError(f"--pass-rates {spec!r}: file not found: {path_text or '(empty)'}")
    values: list[float] = []
    for lineno, line in enumerate(read_text(path, "--pass-rates file:").splitlines(), 1):
        for token in re.split(r"[,\s]+", line.split("#", 1)[0].strip()):
            if not token:
                continue
            try:
                v = float(token)
            except ValueError:
                raise UserError(f"{path}:{lineno}: {token!r} is not a number") from None
            if not 0 <= v <= 1:
                raise UserError(f"{path}:{lineno}: pass rate {token} is not in [0, 1]")
            values.append(v)
    if not values:
        raise UserError(f"{path}: no pass rates in the file")
    rates = np.array(values)
    return PassRateLaw(spec, lambda rng, n: rng.choice(rates, n), fixed=rates)


# --------------------------------------------------------------------------- runs
@dataclass
class SimSettings:
    """What one `vigor simulate` run compares; allocation parameters come from AllocationConfig."""

    law: str = DEFAULT_LAW
    """Pass-rate law (see parse_law)."""
    strategies: tuple[str, ...] = field(default_factory=registry.names)
    """Strategies to compare, each driven on the same pool, sampler order and seed."""
    steps: int = 50
    """Steps per strategy (in learning mode: at most this many, stopping at the target)."""
    prompts: int = 64
    """Prompts per step (the batch the allocator starts from)."""
    pool: int | None = None
    """Prompts in the pool; default POOL_PER_PROMPT x prompts (a file law: the file's rates)."""
    tests: int = 1
    """Reward = passed / tests with tests ~ Binomial(tests, p); 1 = binary rewards."""
    seed: int = 0
    """Seeds the pool, the sampler order, the rewards and the allocators."""
    learn: bool = False
    """Learning mode: the toy model in this module's docstring."""
    lr: float = 0.2
    """Learning mode: pass-rate step per unit of own signal."""
    transfer: float = 0.0
    """Learning mode: the shared step every prompt takes per unit of the step's breadth
    (transfer between prompts; 0: each prompt learns from its own signal only)."""
    target: float | None = None
    """Learning mode: target mean pass rate; default initial mean + TARGET_GAIN (at most 0.95)."""
    disruption: float = 0.0
    """Learning mode: the step every prompt loses per update whatever its breadth (what an update
    of fixed length disturbs; negative: a gain every update gives)."""
    held_out: float | None = None
    """Learning mode: start of a held-out set's mean pass rate (prompts never sampled, moved by
    the shared step alone); default the pool's initial mean."""
    until_target: bool = True
    """Learning mode: stop a strategy at the target (False: run every step, for curves)."""
    curves: bool = False
    """Learning mode: record each step's rollouts, pool mean and held-out mean."""


@dataclass
class StrategyOutcome:
    strategy: str
    steps: int = 0
    rollouts: int = 0
    used: int = 0
    per_round: list[int] = field(default_factory=list)
    zero_var_rollouts: int = 0
    groups: int = 0
    zero_var_groups: int = 0
    signal: float = 0.0
    # Pareto diagnostics (vigor family): true-variance-weighted rollouts vs uniform spend.
    weighted: float = 0.0
    weighted_uniform: float = 0.0
    weighted_oracle: float = 0.0
    decisions: dict[str, int] = field(default_factory=dict)  # auto: steps per decision
    rollouts_to_target: int | None = None
    steps_to_target: int | None = None
    crossing: float | None = None
    """Rollouts at which the mean pass rate crossed the target, interpolated within the step
    that crossed it (a step's rollouts make rollouts_to_target move in whole steps)."""
    final_mean_pass_rate: float | None = None
    held_out: float | None = None
    """Learning mode: the held-out set's mean pass rate after the last step."""
    curve: dict[str, list[float]] | None = None
    """Learning mode with curves: per step (the start first) rollouts, pool and held-out means."""
    error: str | None = None


class _Sampler:
    """Shuffled epochs over the pool, as a data loader would; uids 'q<index>' recur across epochs.

    A prompt is never handed out twice within one step (the allocator keys groups by
    uid): one already drawn this step is deferred to the next step.
    """

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self.size, self.rng = size, rng
        self.order: list[int] = []  # next prompt at the end
        self.this_step: set[int] = set()

    def new_step(self) -> None:
        self.this_step.clear()

    def draw(self, n: int) -> list[str]:
        out, deferred = [], []
        while len(out) < n:
            if len(self.this_step) >= self.size:
                raise UserError(
                    f"the pool of {self.size} prompts ran out within one step; use a larger --pool"
                )
            if not self.order:
                self.order = self.rng.permutation(self.size).tolist()[::-1]
            i = self.order.pop()
            if i in self.this_step:
                deferred.append(i)
                continue
            self.this_step.add(i)
            out.append(f"q{i}")
        self.order.extend(reversed(deferred))
        return out


def initial_pool(settings: SimSettings, law: PassRateLaw) -> np.ndarray:
    """The pool's starting pass rates: the file's, or POOL_PER_PROMPT x prompts draws of the law."""
    if law.fixed is not None and settings.pool is None:
        return law.fixed.astype(float).copy()
    size = settings.pool if settings.pool is not None else POOL_PER_PROMPT * settings.prompts
    return law.sample(np.random.default_rng(settings.seed), size).astype(float)


def run_strategy(
    strategy: str, cfg: AllocationConfig, settings: SimSettings, pass_rates: np.ndarray, target: float | None
) -> StrategyOutcome:
    """Run one strategy for settings.steps steps on a private copy of the pool."""
    p = pass_rates.copy()
    out = StrategyOutcome(strategy)
    alloc = make_allocator(cfg.model_copy(update={"strategy": strategy}), settings.prompts, settings.seed)
    sampler = _Sampler(len(p), np.random.default_rng([settings.seed, 1]))
    reward_rng = np.random.default_rng([settings.seed, 2])
    vigor_family = registry.get(strategy).family == "vigor"
    index = {}
    out.held_out = float(p.mean()) if settings.held_out is None else settings.held_out
    if settings.curves:
        out.curve = {"rollouts": [0.0], "pool": [float(p.mean())], "held_out": [out.held_out], "breadth": [0.0]}

    def draw(n: int) -> list[str]:
        uids = sampler.draw(n)
        for uid in uids:
            index.setdefault(uid, int(uid[1:]))
        return uids

    for step in range(settings.steps):
        sampler.new_step()
        alloc.start_step(step, draw)
        rewards: dict[str, list[float]] = {}
        try:
            while requests := alloc.ask():
                told = {}
                for r in requests:
                    got = reward_rng.binomial(settings.tests, p[index[r.uid]], r.n) / settings.tests
                    told[r.uid] = got.tolist()
                    rewards.setdefault(r.uid, []).extend(told[r.uid])
                alloc.tell(told)
        except UserError as e:  # DAPO/GRESO gave up: the step's rollouts were still spent
            out.error = str(e)
            out.rollouts += sum(len(v) for v in rewards.values())
            break
        result = alloc.finish()
        rec = result.record
        out.steps += 1
        out.rollouts += rec["totals"]["rollouts"]
        decision = (rec["totals"].get("auto") or {}).get("decision")
        if decision:
            out.decisions[decision] = out.decisions.get(decision, 0) + 1
        out.used += rec["totals"]["used"]
        for i, rnd in enumerate(rec["rounds"]):
            if i == len(out.per_round):
                out.per_round.append(0)
            out.per_round[i] += rnd["rollouts"]
        own: dict[str, float] = {}
        for entry in rec["prompts"]:
            pool = rewards.get(entry["uid"], [])
            if pool and min(pool) == max(pool):
                out.zero_var_rollouts += len(pool)
        for uid, used in result.groups.items():
            vals = np.array([rewards[uid][i] for i in used])
            s = len(vals) * float(vals.std())
            out.groups += 1
            out.zero_var_groups += s == 0
            out.signal += s
            own[uid] = s
        if vigor_family:
            _pareto_diagnostics(out, rec, rewards, p, index, cfg)
        if settings.learn:
            before = float(p.mean())
            shared = _learn(p, own, index, cfg.group_size, settings)
            out.held_out += settings.lr * shared * (1 - out.held_out)
            if out.curve is not None:
                for key, value in (("rollouts", out.rollouts), ("pool", p.mean()), ("held_out", out.held_out),
                                   ("breadth", breadth(list(own.values())))):
                    out.curve[key].append(float(value))
            if target is not None and out.rollouts_to_target is None and p.mean() >= target:
                out.rollouts_to_target, out.steps_to_target = out.rollouts, out.steps
                step_rollouts = rec["totals"]["rollouts"]
                share = (target - before) / (p.mean() - before) if p.mean() > before else 1.0
                out.crossing = out.rollouts - step_rollouts + min(1.0, max(0.0, share)) * step_rollouts
                if settings.until_target:
                    break
    out.final_mean_pass_rate = float(p.mean())
    return out


def _pareto_diagnostics(out, rec, rewards, p, index, cfg) -> None:
    """Variance-weighted rollouts: measured, uniform at the same spend, oracle ranking."""
    true_var = {e["uid"]: p[index[e["uid"]]] * (1 - p[index[e["uid"]]]) for e in rec["prompts"]}
    spent = rec["totals"]["rollouts"]
    n = len(true_var)
    out.weighted += sum(len(rewards.get(u, [])) * v for u, v in true_var.items())
    out.weighted_uniform += spent / n * sum(true_var.values())
    # Oracle: the same schedule, ranking on the true variance instead of the estimate.
    ranked = sorted(true_var.values(), reverse=True)
    active = n
    for rnd in rec["rounds"]:
        out.weighted_oracle += rnd["rollouts"] / active * sum(ranked[:active])
        active = ceil_fraction(cfg.alpha, active)


def breadth(signals: list[float] | np.ndarray) -> float:
    """sum(g) / sqrt(sum(g^2)) of the groups' signals: the square root of how many prompts the
    step's signal is spread over (n equal signals: sqrt(n); all on one prompt: 1; none: 0)."""
    g = np.asarray(signals, dtype=float)
    norm = float(np.sqrt((g * g).sum()))
    return float(g.sum()) / norm if norm > 0 else 0.0


def _learn(p: np.ndarray, own: dict[str, float], index: dict, group_size: int, s: SimSettings) -> float:
    """One step of the learning model (docs/modules.md); returns the shared step."""
    shared = s.transfer * breadth(list(own.values())) - s.disruption if s.transfer or s.disruption else 0.0
    gain = np.full(len(p), shared)
    for uid, sig in own.items():
        gain[index[uid]] += sig / group_size
    p += s.lr * gain * (1 - p)
    np.clip(p, 0.0, 1.0, out=p)
    return shared


SETTING_BOUNDS = {"steps": (1, 10**6), "prompts": (1, 10**6), "tests": (1, 10**4), "pool": (1, 10**7),
                  "lr": (1e-9, 10.0), "transfer": (0.0, 1.0), "target": (1e-9, 1.0),
                  "held_out": (0.0, 1.0), "disruption": (-1.0, 1.0)}
"""Inclusive bounds of the numeric settings (the option of the same name)."""


def check_settings(settings: SimSettings, cfg: AllocationConfig) -> None:
    """Every strategy is registered and its own rules (the ones `vigor train` applies) hold at
    these prompts per step; every numeric setting is finite and within SETTING_BOUNDS."""
    for name in settings.strategies:
        if name not in registry.REGISTRY:
            raise UserError(f"--strategy: unknown strategy {name!r}; use {', '.join(registry.names())} or all")
        try:
            registry.check(cfg.model_copy(update={"strategy": name}), settings.prompts)
        except UserError as e:
            raise UserError(f"--strategy {name}: {e}".replace("train.prompts_per_step", "--prompts")) from None
    for key, (low, high) in SETTING_BOUNDS.items():
        value = getattr(settings, key)
        if value is not None and not (isinstance(value, (int, float)) and low <= value <= high):
            raise UserError(f"--{key} must be between {low:g} and {high:g} (got {value})")


def simulate(settings: SimSettings, cfg: AllocationConfig) -> dict[str, Any]:
    """Run every requested strategy on the same pool; return the JSON-able summary."""
    check_settings(settings, cfg)
    law = parse_law(settings.law)
    pass_rates = initial_pool(settings, law)
    if len(pass_rates) < settings.prompts:
        raise UserError(
            f"the pool has {len(pass_rates)} prompts, fewer than --prompts {settings.prompts}"
        )
    target = None
    if settings.learn:
        target = settings.target if settings.target is not None else min(0.95, pass_rates.mean() + TARGET_GAIN)
    summary: dict[str, Any] = {
        "mode": "learning model (toy pass-rate dynamics, not a trained policy)"
        if settings.learn
        else "static pass rates",
        "law": law.text,
        "pool": len(pass_rates),
        "pool_mean_pass_rate": round(float(pass_rates.mean()), 4),
        "steps": settings.steps,
        "prompts": settings.prompts,
        "tests": settings.tests,
        "seed": settings.seed,
        "allocation": cfg.model_dump(mode="json"),
        "strategies": {},
    }
    if settings.learn:
        summary["learning"] = {"lr": settings.lr, "transfer": settings.transfer, "disruption": settings.disruption,
                               "target": round(float(target), 4),
                               "held_out_start": round(float(pass_rates.mean() if settings.held_out is None
                                                             else settings.held_out), 4)}
    for name in settings.strategies:
        o = run_strategy(name, cfg, settings, pass_rates, target)
        summary["strategies"][name] = _summarise(o, law, cfg, settings)
    return summary


def _summarise(o: StrategyOutcome, law: PassRateLaw, cfg: AllocationConfig, s: SimSettings) -> dict[str, Any]:
    steps = max(o.steps, 1)
    row: dict[str, Any] = {
        "steps_run": o.steps,
        "rollouts": o.rollouts,
        "rollouts_per_step": round(o.rollouts / steps, 2),
        "rollouts_per_round": [round(r / steps, 2) for r in o.per_round],
        "used_per_step": round(o.used / steps, 2),
        "zero_var_rollout_share": round(o.zero_var_rollouts / o.rollouts, 4) if o.rollouts else None,
        "zero_var_group_share": round(o.zero_var_groups / o.groups, 4) if o.groups else None,
        "signal_total": round(o.signal, 3),
        "signal_per_step": round(o.signal / steps, 3),
        "signal_per_rollout": round(o.signal / o.rollouts, 4) if o.rollouts else None,
    }
    if law.pareto_k is not None and registry.get(o.strategy).family == "vigor" and o.weighted_uniform:
        row["pareto"] = {
            "k": law.pareto_k,
            "eta_measured": round(float(o.weighted / o.weighted_uniform), 4),
        }
        if o.strategy == "vigor":
            row["pareto"]["eta_oracle_ranking"] = round(float(o.weighted_oracle / o.weighted_uniform), 4)
            eta = pareto_eta(law.pareto_k, cfg.rounds, cfg.alpha, cfg.gamma)
            row["pareto"].update(eta_closed_form=round(eta, 4), speedup_closed_form=round(eta ** (1 / 3), 4))
    if o.decisions:
        row["decisions"] = dict(sorted(o.decisions.items()))
    if s.learn:
        row["rollouts_to_target"] = o.rollouts_to_target
        row["rollouts_to_target_interpolated"] = None if o.crossing is None else round(float(o.crossing), 1)
        row["steps_to_target"] = o.steps_to_target
        row["final_mean_pass_rate"] = round(o.final_mean_pass_rate, 4)
        row["final_held_out_pass_rate"] = round(float(o.held_out), 4)
        if o.curve is not None:
            row["curve"] = {k: [round(v, 4) for v in vals] for k, vals in o.curve.items()}
    if o.error:
        row["error"] = o.error
    return row

"""The evaluation core: n samples per held-out example, scored by the task, avg@n and pass@k.

The trainer's periodic evaluation and `vigor eval` both call
:func:`evaluate_examples`; the CLI and tables live with `vigor eval`. The JSON form
(:meth:`EvalResult.to_json`) is what ``eval/step-<N>.json`` holds, with the same avg@n and
pass@k (vigor_cli/report/metrics.py) `vigor eval` reports, for any set (a user's
``--eval-data`` included). A set is generated in one engine call (its draws are those of its
seed, however large the set) and graded in chunks of :data:`CHUNK_SAMPLES` samples; an
evaluation that runs longer than :data:`PROGRESS_EVERY_S` prints a progress line on stderr
that often, whatever the set's size, so none runs silent for minutes (a quick one prints
nothing). A reward of None (a completion the reward function cannot score) is left out of
the means and counted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from vigor_cli.errors import UserError
from vigor_cli.rollout.base import RolloutEngine, SamplingParams
from vigor_cli.task_base import Example, Task, grade
from vigor_cli.report.metrics import pass_rate_of
from vigor_cli.tasks.prompts import encode_prompt

CHUNK_SAMPLES = 256
"""Samples graded per task call (at least one example's n)."""

PROGRESS_EVERY_S = 15.0
"""Seconds between progress lines of a running evaluation (none before the first)."""

Progress = Callable[[int, int, float], None]
"""``progress(problems_done, problems_total, seconds)`` after each chunk."""


@dataclass
class SampleResult:
    uid: str
    sample: int
    """Index of this sample among the example's n."""
    completion: str
    reward: float | None
    """None: the reward function could not score it (left out of the means)."""
    reason: str
    truncated: bool
    tokens: int
    rewards: dict[str, float | None] = field(default_factory=dict)
    """Each reward function's own value, when the task combines several (None: it could not score)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Columns a reward function logged for it (TRL's log_extra)."""
    first_reward: float | None = None
    """An episode under an environment whose turns are attempts: its first attempt's reward."""
    episode: dict | None = None
    """An episode: its turns, how it ended and its messages (episodes.base.episode_record)."""

    def to_json(self) -> dict:
        """As a sample of ``eval/step-<N>.json``: per-function values and logged columns only
        where a task has them, the episode keys only for an episode."""
        out = asdict(self)
        for key in ("rewards", "extra"):
            if not out[key]:
                del out[key]
        for key in ("first_reward", "episode"):
            if out[key] is None:
                del out[key]
        return out


EPISODE_TEXT_CHARS = 2000
"""Characters kept of each message of an episode in an evaluation's samples."""


@dataclass
class EvalResult:
    set_name: str
    n: int
    accuracy: float
    """avg@n: mean over examples of the mean reward of their n samples."""
    per_example: dict[str, float]
    """uid -> mean reward of its scored samples (examples with none scored are left out)."""
    samples: list[SampleResult] = field(default_factory=list)
    pass_threshold: float = 1.0
    """A sample passes at reward >= this (task.pass_threshold): pass@k and the pass rate."""

    @property
    def unscored(self) -> int:
        """Samples whose reward is None."""
        return sum(s.reward is None for s in self.samples)

    @property
    def pass_rate(self) -> float:
        """pass@1: mean over examples of the share of their scored samples that pass."""
        return float(self.metrics()["pass@k"].get("1") or 0.0)

    def metrics(self) -> dict:
        """avg@n and unbiased pass@k (a sample passes at reward >= pass_threshold) over the
        scored samples, as `vigor eval` computes them (vigor_cli/report/metrics.py), the
        unscored count and, per reward function of a task that combines several, its mean
        and unscored count."""
        from vigor_cli.report.metrics import reward_components, summarize_problems

        by_uid: dict[str, list[float]] = {}
        for s in self.samples:
            by_uid.setdefault(s.uid, [])
            if s.reward is not None:
                by_uid[s.uid].append(s.reward)
        out = summarize_problems(list(by_uid.values()), threshold=self.pass_threshold)
        out["unscored"] = self.unscored
        parts = reward_components(s.rewards for s in self.samples)
        if parts:
            out["rewards"] = parts
        records = [s.episode for s in self.samples if s.episode is not None]
        if records:  # episodes: turns, tool calls (all, failed, per tool), how they ended, per episode
            from vigor_cli.episodes.base import record_metrics

            out["episodes"] = record_metrics(records)
        firsts = [s.first_reward for s in self.samples if s.first_reward is not None]
        if firsts:  # an environment of attempts: the first attempt alone, beside after its answers
            first_by_uid: dict[str, list[float]] = {}
            for s in self.samples:
                if s.first_reward is not None:
                    first_by_uid.setdefault(s.uid, []).append(s.first_reward)
            out["first_attempt"] = summarize_problems(list(first_by_uid.values()), threshold=self.pass_threshold)
        return out

    def first_attempt_accuracy(self) -> float | None:
        """As :attr:`accuracy`, of the episodes' first attempts alone (None: not episodes of
        attempts)."""
        by_uid: dict[str, list[float]] = {}
        for s in self.samples:
            if s.first_reward is not None:
                by_uid.setdefault(s.uid, []).append(s.first_reward)
        if not by_uid:
            return None
        return sum(sum(r) / len(r) for r in by_uid.values()) / len(by_uid)

    def to_json(self) -> dict:
        return {
            "set": self.set_name,
            "n": self.n,
            "accuracy": self.accuracy,
            "pass_threshold": self.pass_threshold,
            "examples": len(self.per_example),
            "per_example": self.per_example,
            "metrics": self.metrics(),
            "samples": [s.to_json() for s in self.samples],
        }


class ProgressLines:
    """The default progress report: while an evaluation runs, a line on stderr every
    :data:`PROGRESS_EVERY_S` seconds (problems done, seconds), from a timer thread so that
    one long chunk is not silent either, and a last line when it ends if any was printed.
    No live bar: the trainer's own bar may be on screen, and rich allows one at a time."""

    def __init__(self, set_name: str, total: int, samples: int, every: float | None = None):
        self.set_name, self.total, self.samples = set_name, total, samples
        self.every = PROGRESS_EVERY_S if every is None else every
        self.done, self.printed, self.start = 0, False, time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="vigor-eval-progress", daemon=True)

    def __enter__(self) -> "ProgressLines":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        if self.printed and exc[0] is None:
            self._line()

    def __call__(self, done: int, total: int, seconds: float) -> None:
        self.done = done

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self._line()

    def _line(self) -> None:
        from vigor_cli.console import err_console, shown

        self.printed = True
        err_console.print(f"eval {shown(self.set_name)}: {self.done}/{self.total} problems x {self.samples} samples "
                          f"({time.time() - self.start:.0f} s)", highlight=False)


def evaluate_examples(
    engine: RolloutEngine,
    task: Task,
    tokenizer: Any,
    examples: Sequence[Example],
    n: int,
    sampling: SamplingParams,
    set_name: str = "default",
    progress: Progress | bool = True,
    pass_threshold: float = 1.0,
    episodes: Any = None,
) -> EvalResult:
    """Generate ``n`` completions per example with ``engine``, score them with ``task``.

    ``progress``: True prints a line on stderr every :data:`PROGRESS_EVERY_S` seconds while
    it runs (:class:`ProgressLines`); a callable gets (problems generated, total, seconds) as
    the engine reports them and once all are generated instead; False is silent (a caller
    with its own bar). ``episodes`` (a run's episode loop, vigor_cli/episodes/loop.py) makes
    each sample an episode."""
    if not examples:
        return EvalResult(set_name, n, 0.0, {}, [], pass_threshold)
    per_sample = sample_and_score(engine, task, tokenizer, examples, n, sampling, set_name, progress, episodes)
    return result_of(set_name, n, [(ex.uid, results) for ex, results in zip(examples, per_sample)], pass_threshold)


def result_of(set_name: str, n: int, per_example: Sequence[tuple[str, list[SampleResult]]],
              pass_threshold: float = 1.0) -> EvalResult:
    """The EvalResult of each example's samples, in order: avg@n over the examples with a
    scored sample."""
    samples: list[SampleResult] = []
    means: dict[str, float] = {}
    for uid, results in per_example:
        samples += results
        rewards = [s.reward for s in results if s.reward is not None]
        if rewards:
            means[uid] = sum(rewards) / len(rewards)
    accuracy = sum(means.values()) / len(means) if means else 0.0
    return EvalResult(set_name, n, accuracy, means, samples, pass_threshold)


def sample_and_score(engine: RolloutEngine, task: Task, tokenizer: Any, examples: Sequence[Example], n: int,
                     sampling: SamplingParams, set_name: str, progress: Progress | bool = True,
                     episodes: Any = None) -> list[list[SampleResult]]:
    """Each example's n scored samples. One engine call generates them all, so what a seed
    draws does not depend on how the set would be split (the engine reports the completions
    it finished as it goes: :attr:`RolloutEngine.progress`); the task grades them in chunks
    of :data:`CHUNK_SAMPLES` samples. ``progress`` is told the problems generated (see
    :func:`evaluate_examples`). With ``episodes`` each sample is an episode, run and graded
    chunk by chunk (chunk c samples with ``seed + c``)."""
    if progress is True:
        with ProgressLines(set_name, len(examples), n) as lines:
            return sample_and_score(engine, task, tokenizer, examples, n, sampling, set_name, lines, episodes)
    if episodes is not None:
        return _episode_chunks(episodes, task, examples, n, sampling, set_name, progress)
    start = time.time()
    report = progress or None
    prompts = [encode_prompt(tokenizer, task.render_prompt(ex, tokenizer)) for ex in examples]
    engine.progress = None if report is None else (
        lambda rows: report(min(rows // max(1, n), len(examples)), len(examples), time.time() - start))
    try:
        outs = engine.generate(prompts, [n] * len(examples), sampling)
    finally:
        engine.progress = None
    if report is not None:
        report(len(examples), len(examples), time.time() - start)
    per_chunk = max(1, CHUNK_SAMPLES // max(1, n))
    out: list[list[SampleResult]] = []
    for i in range(0, len(examples), per_chunk):
        out += _score_chunk(task, examples[i:i + per_chunk], outs[i:i + per_chunk], set_name)
    return out


def _score_chunk(task: Task, examples: Sequence[Example], outs: Sequence[Sequence[Any]],
                 set_name: str) -> list[list[SampleResult]]:
    flat_examples = [ex for ex, rollouts in zip(examples, outs) for _ in rollouts]
    flat_rollouts = [r for rollouts in outs for r in rollouts]
    try:
        scores = grade(task, flat_examples, [r.text for r in flat_rollouts], [r.token_ids for r in flat_rollouts])
    except UserError as e:  # a user's reward function that failed: say it was the evaluation
        raise UserError(f"evaluation of {set_name}: {e}") from None
    found = iter(scores)
    out = []
    for ex, rollouts in zip(examples, outs):
        results = []
        for i, r in enumerate(rollouts):
            s = next(found)
            reward = None if s.reward is None else float(s.reward)
            results.append(SampleResult(ex.uid, i, r.text, reward, s.reason, r.truncated, len(r.token_ids),
                                        dict(s.components), dict(s.extra)))
        out.append(results)
    return out


def _episode_chunks(runner: Any, task: Task, examples: Sequence[Example], n: int, sampling: SamplingParams,
                    set_name: str, progress: Any) -> list[list[SampleResult]]:
    """Episodes of every example, run and graded in chunks of :data:`CHUNK_SAMPLES` samples
    (chunk c samples with ``seed + c``), ``progress`` told after each."""
    start = time.time()
    per_chunk = max(1, CHUNK_SAMPLES // max(1, n))
    out: list[list[SampleResult]] = []
    for c, i in enumerate(range(0, len(examples), per_chunk)):
        params = sampling if c == 0 or sampling.seed is None else SamplingParams(
            sampling.temperature, sampling.top_p, sampling.max_new_tokens, sampling.seed + c)
        out += _evaluate_episodes(runner, task, examples[i:i + per_chunk], n, params, set_name)
        if progress:
            progress(len(out), len(examples), time.time() - start)
    return out


def _evaluate_episodes(runner: Any, task: Task, examples: Sequence[Example], n: int, sampling: SamplingParams,
                       set_name: str) -> list[list[SampleResult]]:
    """:func:`_score_chunk` with episodes: each sample an episode of ``runner``, scored once
    it ended; an environment of attempts also has each episode's first attempt graded alone."""
    from vigor_cli.episodes.base import episode_record
    from vigor_cli.episodes.scoring import EpisodeScorer

    outs = runner.run(list(examples), [n] * len(examples), sampling)
    flat_examples = [ex for ex, eps in zip(examples, outs) for _ in eps]
    flat = [ep for eps in outs for ep in eps]
    scorer = EpisodeScorer(task, runner.env)
    try:
        firsts = scorer.first_attempts(flat_examples, flat) if runner.env.attempts else [None] * len(flat)
        scores = scorer.score(flat_examples, flat)
    except UserError as e:
        raise UserError(f"evaluation of {set_name}: {e}") from None
    found = iter(zip(scores, firsts))
    out = []
    for ex, eps in zip(examples, outs):
        results = []
        for i, ep in enumerate(eps):
            s, first = next(found)
            reward = None if s.reward is None else float(s.reward)
            results.append(SampleResult(ex.uid, i, ep.text, reward, s.reason, ep.truncated, ep.model_tokens,
                                        dict(s.components), dict(s.extra), first_reward=first,
                                        episode=episode_record(ep, EPISODE_TEXT_CHARS)))
        out.append(results)
    return out


# --------------------------------------------------------------------------- over several processes
@dataclass(frozen=True)
class Shard:
    """This process's share of an evaluation over several: examples ``rank::world``, and
    ``gather`` (every rank's list, concatenated in rank order; accelerate's gather_object)."""

    rank: int
    world: int
    gather: Callable[[list], list]


def evaluate_shard(engine: RolloutEngine, task: Task, tokenizer: Any, examples: Sequence[Example], n: int,
                   sampling: SamplingParams, set_name: str, shard: Shard, pass_threshold: float = 1.0,
                   episodes: Any = None) -> EvalResult:
    """:func:`evaluate_examples` on this process's share, every share gathered: each process
    gets the whole result. Every process generates for the same number of prompts (a short
    share repeats an example and drops the copy): engines that shard their weights (ZeRO-3,
    FSDP) or gather prompts (TRL's vLLM server) need every rank in each call, equally sized."""
    indices = list(range(len(examples)))[shard.rank::shard.world]
    slots = -(-len(examples) // shard.world)
    padded = [examples[i] for i in indices]
    padded += [examples[indices[0] if indices else 0]] * (slots - len(padded))
    local = evaluate_examples(engine, task, tokenizer, padded, n, sampling, set_name, pass_threshold=pass_threshold,
                              episodes=episodes).samples
    done = sorted(shard.gather([(i, local[k * n:(k + 1) * n]) for k, i in enumerate(indices)]), key=lambda p: p[0])
    return result_of(set_name, n, [(examples[i].uid, results) for i, results in done], pass_threshold)


# --------------------------------------------------------------------------- held-out sets
@dataclass
class HeldOut:
    """A training run's evaluation at one step: every held-out set, and their mean."""

    step: int
    results: dict[str, EvalResult]

    @property
    def accuracy(self) -> float:
        return sum(r.accuracy for r in self.results.values()) / len(self.results)

    @property
    def pass_rate(self) -> float:
        """The mean over the sets of pass@1 (a sample passes at reward >= task.pass_threshold)."""
        return sum(r.pass_rate for r in self.results.values()) / len(self.results)

    def to_json(self) -> dict:
        """What ``eval/step-<N>.json`` holds."""
        return {"step": self.step, "accuracy": self.accuracy,
                "sets": {name: r.to_json() for name, r in self.results.items()}}

    def line(self, rollouts: int, tokens: int, no_signal: tuple[int, float] = (0, 0.0)) -> dict:
        line = eval_line_of(self.to_json(), rollouts, tokens, no_signal)
        for name, first in self.first_attempts().items():  # episodes of attempts: before the answers
            line[f"eval/{name}/first_attempt"] = first
        return line

    def first_attempts(self) -> dict[str, float]:
        """Set -> accuracy of the first attempts alone (sets of episodes of attempts only)."""
        found = {n: r.first_attempt_accuracy() for n, r in self.results.items()}
        return {n: a for n, a in found.items() if a is not None}

    def describe(self) -> str:
        firsts = self.first_attempts()
        sets = "  ".join(f"{n} {r.accuracy:.3f}" + (f" (first attempt {firsts[n]:.3f})" if n in firsts else "")
                         for n, r in self.results.items())
        if "custom" in self.results:  # your own rewards: a mean reward (weighted, partial credit), not a pass rate
            r = self.results["custom"]
            at = "" if r.pass_threshold == 1 else f" (reward >= {r.pass_threshold:g})"
            return f"[bold]eval[/] step {self.step}: reward {self.accuracy:.3f}, pass@1 {r.pass_rate:.3f}{at} ({sets})"
        return f"[bold]eval[/] step {self.step}: accuracy {self.accuracy:.3f} ({sets})"


def held_out_sampling(seed: int, step: int, temperature: float, top_p: float, max_new_tokens: int) -> SamplingParams:
    """A training run's evaluation sampling: greedy at temperature 0 (top_p then unused),
    seeded by the run's seed and the step."""
    from vigor_cli.run.seeding import derive_seed

    return SamplingParams(temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                          max_new_tokens=max_new_tokens, seed=derive_seed(seed, "eval", step))


def evaluate_sets(engine: RolloutEngine, task: Task, tokenizer: Any, sets: Mapping[str, Sequence[Example]],
                  n: int, sampling: SamplingParams, step: int, shard: Shard | None = None,
                  pass_threshold: float = 1.0, episodes: Any = None) -> HeldOut:
    """Every held-out set of a training run at ``step`` (both trainers and `vigor eval --run`
    call this); a user's error (a reward function that failed) names the step; with
    ``episodes`` (task.env's loop) each sample is an episode."""
    try:
        if shard is None:
            return HeldOut(step, {name: evaluate_examples(engine, task, tokenizer, exs, n, sampling, name,
                                                          pass_threshold=pass_threshold, episodes=episodes)
                                  for name, exs in sets.items()})
        return HeldOut(step, {name: evaluate_shard(engine, task, tokenizer, exs, n, sampling, name, shard,
                                                   pass_threshold, episodes)
                              for name, exs in sets.items()})
    except UserError as e:
        raise UserError(f"step {step}: {e}") from None


def eval_line_of(held: Mapping[str, Any], rollouts: int, tokens: int, no_signal: tuple[int, float] = (0, 0.0)) -> dict:
    """An evaluation's metrics.jsonl line from what ``eval/step-<N>.json`` holds (the loop adds
    ``time/elapsed``): the mean reward (``eval/accuracy``, avg@n) and the pass rate (pass@1 at
    task.pass_threshold) overall and per set, each reward function's mean per set, samples; and
    ``no_signal``, its step's ``rollouts/zero_variance`` and share (0 before training), so every
    line of metrics.jsonl says them."""
    sets = held["sets"]
    passed = {name: float(s["metrics"]["pass@k"].get("1") or 0.0) for name, s in sets.items()}
    line = {
        "step": held["step"],
        "eval/accuracy": held["accuracy"],
        **{f"eval/{name}/accuracy": s["accuracy"] for name, s in sets.items()},
        "eval/pass_rate": pass_rate_of(held),
        **{f"eval/{name}/pass_rate": p for name, p in passed.items()},
        "eval/samples": sum(len(s["samples"]) for s in sets.values()),
        "rollouts/cumulative": rollouts,
        "rollouts/zero_variance": no_signal[0],
        "rollouts/zero_variance_share": no_signal[1],
        "tokens/cumulative": tokens,
    }
    for name, s in sets.items():
        line.update({f"eval/{name}/{key}": v for key, v in (s["metrics"].get("rewards") or {}).items()})
        episodes = s["metrics"].get("episodes") or {}
        line.update({f"eval/{name}/{key}": episodes[key] for key in EPISODE_EVAL_KEYS if key in episodes})
    return line


EPISODE_EVAL_KEYS = ("turns/mean", "tool_calls/mean", "tool_calls/failed")
"""An evaluation's episode numbers its metrics.jsonl line carries per set (``eval/<set>/turns/mean``...)."""

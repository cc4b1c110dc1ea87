"""The evaluation core: n samples per held-out example, scored by the task, avg@n.

The trainer's periodic evaluation and `vigor eval` both call
:func:`evaluate_examples`; the CLI, pass@k and tables live with `vigor eval`.
The JSON form (:meth:`EvalResult.to_json`) is what ``eval/step-<N>.json`` holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from vigor_cli.rollout.base import RolloutEngine, SamplingParams
from vigor_cli.tasks.base import Example, Task


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt; BOS is added only when the template has not already."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = bool(bos) and not text.startswith(bos)
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


@dataclass
class SampleResult:
    uid: str
    sample: int
    """Index of this sample among the example's n."""
    completion: str
    reward: float
    reason: str
    truncated: bool
    tokens: int


@dataclass
class EvalResult:
    set_name: str
    n: int
    accuracy: float
    """avg@n: mean over examples of the mean reward of their n samples."""
    per_example: dict[str, float]
    """uid -> mean reward of its n samples."""
    samples: list[SampleResult] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "set": self.set_name,
            "n": self.n,
            "accuracy": self.accuracy,
            "examples": len(self.per_example),
            "per_example": self.per_example,
            "samples": [asdict(s) for s in self.samples],
        }


def evaluate_examples(
    engine: RolloutEngine,
    task: Task,
    tokenizer: Any,
    examples: Sequence[Example],
    n: int,
    sampling: SamplingParams,
    set_name: str = "default",
) -> EvalResult:
    """Generate ``n`` completions per example with ``engine``, score them with ``task``."""
    if not examples:
        return EvalResult(set_name, n, 0.0, {}, [])
    prompts = [encode_prompt(tokenizer, task.render_prompt(ex, tokenizer)) for ex in examples]
    outs = engine.generate(prompts, [n] * len(examples), sampling)
    flat_examples = [ex for ex, rollouts in zip(examples, outs) for _ in rollouts]
    flat_rollouts = [r for rollouts in outs for r in rollouts]
    scores = task.score(flat_examples, [r.text for r in flat_rollouts])
    samples: list[SampleResult] = []
    per_example: dict[str, float] = {}
    k = 0
    for ex, rollouts in zip(examples, outs):
        rewards = []
        for i, r in enumerate(rollouts):
            s = scores[k]
            k += 1
            rewards.append(float(s.reward))
            samples.append(
                SampleResult(ex.uid, i, r.text, float(s.reward), s.reason, r.truncated, len(r.token_ids))
            )
        per_example[ex.uid] = sum(rewards) / len(rewards)
    accuracy = sum(per_example.values()) / len(per_example)
    return EvalResult(set_name, n, accuracy, per_example, samples)


# --------------------------------------------------------------------------- over several processes
@dataclass(frozen=True)
class Shard:
    """This process's share of an evaluation over several: examples ``rank::world``, and
    ``gather`` (every rank's list, concatenated in rank order; accelerate's gather_object)."""

    rank: int
    world: int
    gather: Callable[[list], list]


def evaluate_shard(engine: RolloutEngine, task: Task, tokenizer: Any, examples: Sequence[Example], n: int,
                   sampling: SamplingParams, set_name: str, shard: Shard) -> EvalResult:
    """:func:`evaluate_examples` on this process's share, every share gathered: each process
    gets the whole result. Every process generates for the same number of prompts (a short
    share repeats an example and drops the copy): engines that shard their weights (ZeRO-3,
    FSDP) or gather prompts (TRL's vLLM server) need every rank in each call, equally sized."""
    indices = list(range(len(examples)))[shard.rank::shard.world]
    slots = -(-len(examples) // shard.world)
    padded = [examples[i] for i in indices]
    padded += [examples[indices[0] if indices else 0]] * (slots - len(padded))
    local = evaluate_examples(engine, task, tokenizer, padded, n, sampling, set_name).samples
    done = sorted(shard.gather([(i, local[k * n:(k + 1) * n]) for k, i in enumerate(indices)]), key=lambda p: p[0])
    samples = [s for _, results in done for s in results]
    per_example: dict[str, float] = {}
    for i, results in done:
        rewards = [s.reward for s in results if s.reward is not None]
        if rewards:
            per_example[examples[i].uid] = sum(rewards) / len(rewards)
    accuracy = sum(per_example.values()) / len(per_example) if per_example else 0.0
    return EvalResult(set_name, n, accuracy, per_example, samples)


# --------------------------------------------------------------------------- held-out sets
@dataclass
class HeldOut:
    """A training run's evaluation at one step: every held-out set, and their mean."""

    step: int
    results: dict[str, EvalResult]

    @property
    def accuracy(self) -> float:
        return sum(r.accuracy for r in self.results.values()) / len(self.results)

    def to_json(self) -> dict:
        """What ``eval/step-<N>.json`` holds."""
        return {"step": self.step, "accuracy": self.accuracy,
                "sets": {name: r.to_json() for name, r in self.results.items()}}

    def line(self, rollouts: int, tokens: int) -> dict:
        return eval_line(self.step, self.accuracy, {n: r.accuracy for n, r in self.results.items()},
                         sum(len(r.samples) for r in self.results.values()), rollouts, tokens)

    def describe(self) -> str:
        sets = "  ".join(f"{n} {r.accuracy:.3f}" for n, r in self.results.items())
        return f"[bold]eval[/] step {self.step}: accuracy {self.accuracy:.3f} ({sets})"


def held_out_sampling(seed: int, step: int, temperature: float, top_p: float, max_new_tokens: int) -> SamplingParams:
    """A training run's evaluation sampling: greedy at temperature 0 (top_p then unused),
    seeded by the run's seed and the step."""
    from vigor_cli.rollout_core import derive_seed

    return SamplingParams(temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                          max_new_tokens=max_new_tokens, seed=derive_seed(seed, "eval", step))


def evaluate_sets(engine: RolloutEngine, task: Task, tokenizer: Any, sets: Mapping[str, Sequence[Example]],
                  n: int, sampling: SamplingParams, step: int, shard: Shard | None = None) -> HeldOut:
    """Every held-out set of a training run at ``step`` (both trainers call this)."""
    if shard is None:
        return HeldOut(step, {name: evaluate_examples(engine, task, tokenizer, exs, n, sampling, name)
                              for name, exs in sets.items()})
    return HeldOut(step, {name: evaluate_shard(engine, task, tokenizer, exs, n, sampling, name, shard)
                          for name, exs in sets.items()})


def eval_line(step: int, accuracy: float, sets: Mapping[str, float], samples: int, rollouts: int,
              tokens: int) -> dict:
    """An evaluation's metrics.jsonl line (the loop adds ``time/elapsed``)."""
    return {
        "step": step,
        "eval/accuracy": accuracy,
        **{f"eval/{name}/accuracy": a for name, a in sets.items()},
        "eval/samples": samples,
        "rollouts/cumulative": rollouts,
        "tokens/cumulative": tokens,
    }

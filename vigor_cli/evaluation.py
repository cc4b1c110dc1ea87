"""The evaluation core: n samples per held-out example, scored by the task, avg@n.

`vigor eval` calls :func:`evaluate_examples`; both trainers' periodic evaluations call
:func:`evaluate_sets` (the TRL path on every rank, each on its shard of the examples,
results gathered). The CLI, pass@k and tables live with `vigor eval`. The JSON form
(:meth:`HeldOut.to_json`) is what ``eval/step-<N>.json`` holds; :func:`eval_line` is the
metrics.jsonl line of an evaluation.
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
    reward: float | None
    """None: the task could not score it (left out of the example's mean)."""
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


@dataclass(frozen=True)
class Shard:
    """This process's share of an evaluation over several: examples ``rank::world``, and
    ``gather`` (every rank's list, concatenated in rank order; accelerate's gather_object)."""

    rank: int
    world: int
    gather: Callable[[list], list]


def evaluate_examples(
    engine: RolloutEngine,
    task: Task,
    tokenizer: Any,
    examples: Sequence[Example],
    n: int,
    sampling: SamplingParams,
    set_name: str = "default",
    shard: Shard | None = None,
) -> EvalResult:
    """Generate ``n`` completions per example with ``engine``, score them with ``task``.

    With ``shard``, this process does its share and every process gets the whole result.
    Every process then generates for the same number of prompts (a short share repeats its
    first example and drops the copy): engines that shard their weights (ZeRO-3, FSDP) or
    gather prompts (TRL's vLLM server) need every rank in each generate call, equally sized."""
    if not examples:
        return EvalResult(set_name, n, 0.0, {}, [])
    indices = list(range(len(examples)))
    slots = len(indices)
    if shard is not None:
        indices = indices[shard.rank::shard.world]
        slots = -(-len(examples) // shard.world)
    mine = [examples[i] for i in indices]
    done: list[tuple[int, list[SampleResult]]] = []
    if mine or shard is not None:
        padded = mine + [examples[indices[0] if indices else 0]] * (slots - len(mine))
        prompts = [encode_prompt(tokenizer, task.render_prompt(ex, tokenizer)) for ex in padded]
        outs = engine.generate(prompts, [n] * len(padded), sampling)[: len(mine)]
        flat_examples = [ex for ex, rollouts in zip(mine, outs) for _ in rollouts]
        flat_rollouts = [r for rollouts in outs for r in rollouts]
        scores = iter(task.score(flat_examples, [r.text for r in flat_rollouts]) if flat_rollouts else [])
        for i, ex, rollouts in zip(indices, mine, outs):
            results = []
            for j, r in enumerate(rollouts):
                s = next(scores)
                reward = None if s.reward is None else float(s.reward)
                results.append(SampleResult(ex.uid, j, r.text, reward, s.reason, r.truncated, len(r.token_ids)))
            done.append((i, results))
    if shard is not None:
        done = sorted(shard.gather(done), key=lambda pair: pair[0])
    samples: list[SampleResult] = []
    per_example: dict[str, float] = {}
    for i, results in done:
        samples += results
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
    return HeldOut(step, {name: evaluate_examples(engine, task, tokenizer, exs, n, sampling, name, shard)
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

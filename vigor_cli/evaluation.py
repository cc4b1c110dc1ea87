"""The evaluation core: n samples per held-out example, scored by the task, avg@n.

The trainer's periodic evaluation and `vigor eval` both call
:func:`evaluate_examples`; the CLI, pass@k and tables live with `vigor eval`.
The JSON form (:meth:`EvalResult.to_json`) is what ``eval/step-<N>.json`` holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

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

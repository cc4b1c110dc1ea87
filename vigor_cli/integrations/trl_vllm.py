"""TRL's colocated vLLM on the TRL path: the policy's weights reach the engine once per rollout
phase (so at most once per optimizer step), not once per round.

TRL's colocated engine in sleep mode sleeps at level 2 after every generate call (the
weights are discarded) and pushes every weight again before the next one; a vigor step makes
one generate call per round, so a four-round step pushed the same weights four times. During
the rounds the engine stays awake (its KV cache too: nothing trains between rounds), and it
sleeps once, at level 2, when the rounds end: the next phase's first generate pushes the
updated weights, once.

Details: docs/scaling.md.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _colocated_sleeper(trainer: Any) -> Any:
    """TRL's vLLM generation object when it is colocated in sleep mode; else None."""
    if not getattr(trainer, "use_vllm", False):
        return None
    g = getattr(trainer, "vllm_generation", None)
    if g is None or getattr(g, "mode", None) != "colocate" or not getattr(g, "enable_sleep_mode", False):
        return None
    return g


@contextlib.contextmanager
def one_push_per_phase(trainer: Any) -> Iterator[None]:
    """A rollout phase's rounds with TRL's colocated engine kept awake between them (module
    doc); a no-op for a vLLM server, transformers generation or an engine without sleep mode."""
    g = _colocated_sleeper(trainer)
    if g is None:
        yield
        return
    llm = g.llm
    slept: list[int] = []

    def sleep(level: int = 1, *args: Any, **kwargs: Any) -> None:
        slept.append(level)  # TRL's sleep after a round: deferred to the phase's end

    def generate(*args: Any, **kwargs: Any) -> Any:
        out = real_generate(*args, **kwargs)
        if slept:  # TRL marked the weights discarded after its sleep; they stay: no push before the next round
            g._llm_weights_sleeping = False
        return out

    def wake_up(tags: Any = None) -> Any:
        if slept:  # awake since the deferred sleep: nothing to wake
            return True
        return real_wake_up(tags=tags)

    real_sleep, real_wake_up, real_generate = llm.sleep, llm.wake_up, g.generate
    own = {(obj, name): vars(obj).get(name) for obj, name in ((llm, "sleep"), (llm, "wake_up"), (g, "generate"))}
    llm.sleep, llm.wake_up, g.generate = sleep, wake_up, generate
    try:
        yield
    finally:
        for (obj, name), value in own.items():  # the instances' own attributes back, if any
            if value is None:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, value)
        if slept:
            real_sleep(level=max(slept))
            g._llm_weights_sleeping = max(slept) >= 2

"""Rollout engines behind one interface (``rollout/base.py``) and the factory that picks one.

Details: docs/modules.md.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams

__all__ = ["ENGINES", "Engine", "Rollout", "RolloutEngine", "SamplingParams", "make_engine", "register_engine"]

EngineBuilder = Callable[[Any, Any, Any], RolloutEngine]
"""``build(cfg, model, tokenizer)``: the engine for the policy ``model``."""


@dataclass(frozen=True)
class Engine:
    name: str
    build: EngineBuilder
    unavailable: Callable[[], "str | None"] | None = None
    """Why the engine cannot run here, one line (None: it can); None when it always can."""
    for_cuda: bool = False
    """'auto' takes it when the policy runs on CUDA and it is available."""


ENGINES: dict[str, Engine] = {}
"""Engine name -> entry; ``engine.kind`` is 'auto' or one of these names."""


def register_engine(name: str, *, unavailable: Callable[[], "str | None"] | None = None,
                    for_cuda: bool = False) -> Callable[[EngineBuilder], EngineBuilder]:
    """Decorator on ``build(cfg, model, tokenizer)``; the builder imports its engine module
    itself, so listing engines (the config's validation, help) imports no engine."""

    def add(build: EngineBuilder) -> EngineBuilder:
        ENGINES[name] = Engine(name, build, unavailable, for_cuda)
        return build

    return add


def _vllm_reason() -> str | None:
    """Why vLLM cannot run here (None when it can)."""
    try:
        from vigor_cli.rollout.vllm import vllm_unavailable_reason
    except ImportError as e:
        return f"the vLLM engine is not available ({e})"
    return vllm_unavailable_reason()


def _vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


@register_engine("hf")
def _build_hf(cfg: Any, model: Any, tokenizer: Any) -> RolloutEngine:
    from vigor_cli.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, gen_batch_tokens=cfg.engine.gen_batch_tokens)


@register_engine("vllm", unavailable=lambda: _vllm_reason(), for_cuda=True)
def _build_vllm(cfg: Any, model: Any, tokenizer: Any) -> RolloutEngine:
    from vigor_cli.rollout.vllm import VLLMEngine

    return VLLMEngine(cfg, model, tokenizer)


def _policy_device_type(model: Any) -> str:
    try:
        return next(model.parameters()).device.type
    except (StopIteration, AttributeError):
        return "cpu"


def _auto_choice(model: Any, say: Callable[[str], None]) -> str:
    """engine.kind=auto: the CUDA engine when the policy is on CUDA and it runs here, else hf."""
    if _policy_device_type(model) != "cuda":
        say("engine: transformers (hf): the policy runs on the CPU")
        return "hf"
    cuda_engine = next(e for e in ENGINES.values() if e.for_cuda)
    reason = cuda_engine.unavailable() if cuda_engine.unavailable else None
    if reason is None:
        return cuda_engine.name
    if _vllm_installed():  # installed but broken: never a quiet fallback
        raise UserError(f"engine.kind=auto: {reason}; repair the install (pip install -e "
                        "'.[gpu]') or choose --engine hf")
    say("[yellow]engine: transformers (hf) on CUDA, slow: vllm is not installed "
        "(pip install -e '.[gpu]'); --engine hf silences this[/]")
    return "hf"


def make_engine(cfg: Any, model: Any, tokenizer: Any, announce: Any = None) -> RolloutEngine:
    """The engine ``cfg.engine.kind`` asks for; ``announce(text)`` prints the 'auto' choice."""
    say = announce or (lambda text: None)
    kind = cfg.engine.kind
    if kind == "auto":
        kind = _auto_choice(model, say)
    elif kind not in ENGINES:  # the config's validation rules this out
        raise UserError(f"engine.kind: unknown engine {kind!r}; known: auto, {', '.join(ENGINES)}")
    else:
        entry = ENGINES[kind]
        reason = entry.unavailable() if entry.unavailable else None
        if reason is not None:
            raise UserError(f"engine.kind={kind}: {reason}; use --engine hf")
    return ENGINES[kind].build(cfg, model, tokenizer)

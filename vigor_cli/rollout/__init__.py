"""Rollout engines behind one interface (``rollout/base.py``) and the factory that picks one.

``engine.kind``: 'hf' samples with the transformers policy itself; 'vllm' uses
the colocated vLLM engine (``rollout/vllm.py``, imported only when asked for);
'auto' takes vLLM when CUDA and vllm are both present and transformers
otherwise, saying which it chose.
"""

from __future__ import annotations

from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams

__all__ = ["Rollout", "RolloutEngine", "SamplingParams", "make_engine"]


def _vllm_reason() -> str | None:
    """Why vLLM cannot run here (None when it can)."""
    try:
        from vigor_cli.rollout.vllm import vllm_unavailable_reason
    except ImportError as e:
        return f"the vLLM engine is not available ({e})"
    return vllm_unavailable_reason()


def make_engine(cfg: Any, model: Any, tokenizer: Any, announce: Any = None) -> RolloutEngine:
    """The engine ``cfg.engine.kind`` asks for; ``announce(text)`` prints the 'auto' choice."""
    kind = cfg.engine.kind
    if kind in ("vllm", "auto"):
        reason = _vllm_reason()
        if reason is None:
            from vigor_cli.rollout.vllm import VLLMEngine

            return VLLMEngine(cfg, model, tokenizer)
        if kind == "vllm":
            raise UserError(f"engine.kind=vllm: {reason}; use --engine hf")
        if announce is not None:
            announce(f"engine: transformers (hf); vLLM not used: {reason}")
    from vigor_cli.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, gen_batch_tokens=cfg.engine.gen_batch_tokens)

"""Rollout engines behind one interface (``rollout/base.py``) and the factory that picks one.

``engine.kind``: 'hf' samples with the transformers policy itself; 'vllm' uses
the colocated vLLM engine (``rollout/vllm.py``, imported only when asked for);
'auto' follows the policy's device, which ``model.device`` chose loudly
(``models.pick_device``): on CUDA it takes vLLM when vllm imports, says so
and takes transformers when vllm is not installed, and stops with one line
when vllm is installed but broken (a torch/CUDA mismatch would otherwise
fall back in silence); on the CPU (asked for, or no CUDA at all) it takes
transformers and says why.
"""

from __future__ import annotations

import importlib.util
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


def _vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _policy_device_type(model: Any) -> str:
    try:
        return next(model.parameters()).device.type
    except (StopIteration, AttributeError):
        return "cpu"


def make_engine(cfg: Any, model: Any, tokenizer: Any, announce: Any = None) -> RolloutEngine:
    """The engine ``cfg.engine.kind`` asks for; ``announce(text)`` prints the 'auto' choice."""
    say = announce or (lambda text: None)
    kind = cfg.engine.kind
    if kind == "vllm" or (kind == "auto" and _policy_device_type(model) == "cuda"):
        reason = _vllm_reason()
        if reason is None:
            from vigor_cli.rollout.vllm import VLLMEngine

            return VLLMEngine(cfg, model, tokenizer)
        if kind == "vllm":
            raise UserError(f"engine.kind=vllm: {reason}; use --engine hf")
        if _vllm_installed():  # installed but broken: never a quiet fallback
            raise UserError(f"engine.kind=auto: {reason}; repair the install (pip install -e "
                            "'.[gpu]') or choose --engine hf")
        say("[yellow]engine: transformers (hf) on CUDA, slow: vllm is not installed "
            "(pip install -e '.[gpu]'); --engine hf silences this[/]")
    elif kind == "auto":
        say("engine: transformers (hf): the policy runs on the CPU")
    from vigor_cli.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, gen_batch_tokens=cfg.engine.gen_batch_tokens)

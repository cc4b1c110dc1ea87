"""A recording stand-in for ``vllm.LLM`` with the pinned release's signatures (shared by tests).

``tests/fixtures/vllm_signatures.json`` was extracted from the vLLM 0.33.0
wheel by ``scripts/extract_vllm_signatures.py``; ``tests/test_vllm_engine.py``
checks the stand-in against it. It enforces what the real engine does and the
engine relies on: keyword arguments must exist on ``LLM``/``EngineArgs``,
``SamplingParams`` takes only its real fields and refuses ``n > 1`` when
greedy, ``wake_up`` only wakes sleeping tags, generation needs every tag
awake, and after a level-2 sleep the weights are garbage until pushed.

:class:`StandInLLM` returns random tokens with made-up log-probs (for call
order and plumbing). :class:`WeightedStandInLLM` holds a real transformers
model loaded from the checkpoint, writes every pushed tensor into it, samples
from it and reports the log-probs of what it sampled, stopping as vLLM's
``check_stop`` does (at ``stop_token_ids``, the token kept): it is what the
weight check and the stop-token tests run against.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[1]
SIGNATURES = json.loads((REPO / "tests" / "fixtures" / "vllm_signatures.json").read_text())
VOCAB = 96
EOS = 1


def _real_params(key: str) -> list[tuple[str, str, str | None]]:
    return [(p["name"], p["kind"], p["default"]) for p in SIGNATURES["methods"][key]["params"]]


def _params(fn) -> list[tuple[str, str, str | None]]:
    return [
        (p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default))
        for p in inspect.signature(fn).parameters.values()
    ]


def _fields(cls_name: str) -> set[str]:
    return {k for k in SIGNATURES["fields"][cls_name]["fields"] if not k.startswith("_")}


def _constant(name: str) -> set[str]:
    return set(SIGNATURES["constants"][name]["values"])


# --------------------------------------------------------------------------- the stand-in
class StandInSamplingParams:
    """``vllm.SamplingParams``: only its real fields, and its greedy rule (sampling_params.py)."""

    def __init__(self, **kwargs):
        unknown = set(kwargs) - _fields("SamplingParams")
        if unknown:
            raise TypeError(f"SamplingParams has no field(s) {sorted(unknown)}")
        self.n = 1
        self.temperature = 1.0
        self.top_p = 1.0
        self.max_tokens = 16
        self.seed = None
        self.logprobs = None
        self.stop_token_ids = None
        self.__dict__.update(kwargs)
        if self.temperature < 1e-5 and self.n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")


class StandInVLLMModel:
    """The model inside vLLM's worker: ``load_weights`` takes checkpoint (HF) names only."""

    def __init__(self, names: set[str]):
        self.names = names
        self.loads: list[dict[str, torch.Tensor]] = []

    def load_weights(self, weights):
        got = {}
        for name, tensor in weights:
            if name not in self.names:
                raise KeyError(name)  # vLLM's AutoWeightsLoader fails on unknown names too
            got[name] = tensor.detach().clone()
        self.loads.append(got)
        return set(got)


class StandInLLM:
    """Records every call; methods carry the pinned release's signatures."""

    checkpoint_names: set[str] = set()

    def __init__(self, model, **kwargs):
        allowed = {p[0] for p in _real_params("LLM.__init__")} | _fields("EngineArgs")
        unknown = set(kwargs) - allowed
        if unknown:
            raise TypeError(f"LLM() got unexpected keyword(s) {sorted(unknown)}")
        assert kwargs.get("distributed_executor_backend") in _constant("DistributedExecutorBackend")
        assert kwargs.get("logprobs_mode") in _constant("LogprobsMode")
        self.init_kwargs = dict(kwargs, model=model)
        self.calls: list[tuple] = []
        self.sleeping: set[str] = set()
        self.weights_valid = True  # the checkpoint, as loaded at build
        self.vllm_model = StandInVLLMModel(self.checkpoint_names)
        self.rng = torch.Generator().manual_seed(0)

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None,
                 priority=None, tokenization_kwargs=None, mm_processor_kwargs=None):
        assert not self.sleeping, f"generate while {self.sleeping} sleep: the scheduler is paused"
        assert self.weights_valid, "generate from discarded weights"
        assert len(prompts) == len(sampling_params)
        self.calls.append(("generate", [p.n for p in sampling_params]))
        self.last_generate = (prompts, sampling_params)
        return [self._request(p, sp) for p, sp in zip(prompts, sampling_params)]

    def _request(self, prompt, sp):
        outputs = []
        for index in range(sp.n):
            length = int(torch.randint(1, sp.max_tokens + 1, (1,), generator=self.rng))
            tokens = torch.randint(2, VOCAB, (length,), generator=self.rng).tolist()
            if length < sp.max_tokens:
                tokens[-1] = EOS
            logprob = SimpleNamespace(**{f: None for f in _fields("Logprob")})
            steps = [{t: SimpleNamespace(**dict(vars(logprob), logprob=-0.5 - k))}
                     for k, t in enumerate(tokens)]
            values = dict(index=index, text="", token_ids=tokens, logprobs=steps,
                          finish_reason="stop" if length < sp.max_tokens else "length")
            assert set(values) <= _fields("CompletionOutput")
            outputs.append(SimpleNamespace(**values))
        outputs.reverse()  # the engine must order by .index, not trust list order
        return SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=outputs)

    def sleep(self, level=1, mode="abort"):
        self.calls.append(("sleep", level))
        self.sleeping = set(_constant("SLEEP_TAGS"))
        if level == 2:
            self.weights_valid = False

    def wake_up(self, tags=None):
        for tag in tags or list(self.sleeping):
            assert tag in self.sleeping, f"wake_up({tag!r}) while awake"
            self.sleeping.discard(tag)
        self.calls.append(("wake_up", tuple(tags or ())))
        return not self.sleeping

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.calls.append(("reset_prefix_cache",))
        return True

    def apply_model(self, func):
        assert "weights" not in self.sleeping, "writing weights into sleeping memory"
        before = len(self.vllm_model.loads)
        result = [func(self.vllm_model)]
        if len(self.vllm_model.loads) > before:
            self.calls.append(("push",))
            self.weights_valid = True
        return result

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append(("collective_rpc", method))
        if method == "reload_weights":
            self.weights_valid = "checkpoint"
        return [None]

    def __getattr__(self, name):
        raise AttributeError(f"vllm.LLM has no attribute {name!r}")


class WeightedVLLMModel(StandInVLLMModel):
    """``load_weights`` writes the pushed tensors into the stand-in's real model."""

    def __init__(self, hf_model):
        super().__init__({n for n, _ in hf_model.named_parameters()})
        self.hf_model = hf_model

    def load_weights(self, weights):
        loaded = super().load_weights(weights)
        params = dict(self.hf_model.named_parameters())
        with torch.no_grad():
            for name, tensor in self.loads[-1].items():
                params[name].copy_(tensor.to(params[name].dtype))  # bf16 values, as vLLM holds them
        return loaded

    def get_parameter(self, name):
        """The engine's copy of a weight (vLLM's model is an nn.Module; unfused names agree)."""
        return self.hf_model.get_parameter(name)


class WeightedStandInLLM(StandInLLM):
    """Samples from the weights it holds: the checkpoint at build, then what pushes wrote.

    A level-2 sleep scrambles the weights (real vLLM forgets them; what a wake-up
    without a push leaves is garbage), and ``collective_rpc("reload_weights")``
    reads the checkpoint back from disk, as vLLM's reload does.
    """

    scramble_on_sleep = True

    def __init__(self, model, **kwargs):
        super().__init__(model, **kwargs)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.checkpoint = model
        self.hf_model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.hf_tokenizer = AutoTokenizer.from_pretrained(model)
        self.vllm_model = WeightedVLLMModel(self.hf_model)

    def sleep(self, level=1, mode="abort"):
        super().sleep(level, mode)
        if level == 2 and self.scramble_on_sleep:
            with torch.no_grad():
                for p in self.hf_model.parameters():
                    p.copy_(torch.randn(p.shape, generator=self.rng) * 0.05)
            self.weights_valid = True  # garbage, but vLLM would run on it

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        result = super().collective_rpc(method, timeout, args, kwargs)
        if method == "reload_weights":
            from transformers import AutoModelForCausalLM

            fresh = AutoModelForCausalLM.from_pretrained(self.checkpoint, dtype=torch.float32)
            self.hf_model.load_state_dict(fresh.state_dict())
            self.weights_valid = True
        return result

    def _request(self, prompt, sp):
        from vigor_cli.rollout.base import SamplingParams
        from vigor_cli.rollout.hf import HFEngine

        sampler = HFEngine(self.hf_model, self.hf_tokenizer)
        sampler.eos_ids = list(sp.stop_token_ids or [])
        seed = sp.seed if sp.seed is not None else int(torch.randint(0, 2**31, (1,), generator=self.rng))
        rollouts = sampler.generate([prompt["prompt_token_ids"]], [sp.n],
                                    SamplingParams(temperature=sp.temperature or 1.0, top_p=sp.top_p,
                                                   max_new_tokens=sp.max_tokens, seed=seed))[0]
        outputs = []
        for index, r in enumerate(rollouts):
            steps = [{t: SimpleNamespace(logprob=lp, rank=None, decoded_token=None)}
                     for t, lp in zip(r.token_ids, r.logprobs)]
            outputs.append(SimpleNamespace(index=index, text="", token_ids=list(r.token_ids), logprobs=steps,
                                           finish_reason="length" if r.truncated else "stop"))
        return SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=outputs)


class ScriptedStandInLLM(StandInLLM):
    """Every completion is ``script``, cut as vLLM's ``check_stop`` cuts it: at the first token
    in ``stop_token_ids`` (kept), or at ``max_tokens``. ``honour_stops=False`` returns the whole
    script, as an engine that ignored the stops would."""

    script: list[int] = []
    honour_stops = True

    def _request(self, prompt, sp):
        tokens, reason = list(self.script[: sp.max_tokens]), "length"
        if self.honour_stops:
            for i, t in enumerate(tokens):
                if t in (sp.stop_token_ids or ()):
                    tokens, reason = tokens[: i + 1], "stop"
                    break
        elif len(tokens) < sp.max_tokens:
            reason = "stop"
        outputs = []
        for index in range(sp.n):
            steps = [{t: SimpleNamespace(logprob=-0.1, rank=None, decoded_token=None)} for t in tokens]
            outputs.append(SimpleNamespace(index=index, text="", token_ids=list(tokens), logprobs=steps,
                                           finish_reason=reason))
        return SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=outputs)


class LauncherStandInLLM(StandInLLM):
    """Starts its process group as vLLM 0.33's ``ExecutorWithExternalLauncher`` does at build:
    rank and local rank from RANK and LOCAL_RANK, ``torch.distributed`` initialised with
    ``env://`` (MASTER_ADDR, MASTER_PORT, and TORCHELASTIC_USE_AGENT_STORE under torchrun) for
    the engine's world of one (tensor parallel 1). gloo and a short timeout stand in for NCCL and
    vLLM's default, so a wrong environment fails in seconds instead of hanging. Records the
    variables it saw; :meth:`close_group` ends the group."""

    timeout_s = 5.0

    def __init__(self, model, **kwargs):
        import datetime
        import os

        import torch.distributed as dist

        super().__init__(model, **kwargs)
        self.seen_env = dict(os.environ)
        rank, self.local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        dist.init_process_group("gloo", init_method="env://", world_size=1, rank=rank,
                                timeout=datetime.timedelta(seconds=self.timeout_s))

    @staticmethod
    def close_group():
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def stand_in_api(checkpoint_names: set[str] | None = None, llm: type = StandInLLM, **attrs):
    """A ``vllm``-like namespace whose ``LLM`` is ``llm`` (with class attributes ``attrs``)."""
    llm_class = type("LLM", (llm,), {"checkpoint_names": checkpoint_names or set(), **attrs})
    return SimpleNamespace(LLM=llm_class, SamplingParams=StandInSamplingParams)

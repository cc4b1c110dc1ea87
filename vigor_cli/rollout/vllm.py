"""The vLLM rollout engine, colocated with the trainer on one GPU in sleep mode.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
from dataclasses import replace
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from vigor_cli.console import console
from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams
from vigor_cli.rollout.weights import cut_at_stop, stop_token_ids
from vigor_cli.rollout.weights import policy_version, policy_weights

ENGINE_DTYPE = torch.bfloat16
"""The vLLM copy of the policy is always bf16, whatever the trainer holds (fp32, 4-bit)."""

GIB = float(1 << 30)


def vllm_unavailable_reason() -> str | None:
    """Why the vLLM engine cannot run here, as one line; None when CUDA and vllm are present."""
    missing = []
    if not torch.cuda.is_available():
        missing.append("no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("vllm") is None:
        missing.append("vllm is not installed (pip install 'vigor[gpu]')")
    if missing:
        return "the vLLM engine needs CUDA + vllm: " + "; ".join(missing)
    try:
        import vllm  # noqa: F401  (a CUDA/torch mismatch shows up here, not mid-run)
    except Exception as e:  # any import failure means the engine cannot run here
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"vllm is installed but does not import ({first})"
    return None


# --------------------------------------------------------------------------- engine
LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
)
"""What torchrun (and schedulers that mimic it) set for a process of a group; with
``TORCHELASTIC_*`` they are hidden while the engine starts (:func:`own_process_group`)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def own_process_group() -> Iterator[dict[str, str]]:
    """The environment vLLM's external launcher reads, for a group of this one process.

    vLLM's ``ExecutorWithExternalLauncher`` (0.33, 0.34) takes RANK and LOCAL_RANK from the environment
    and starts ``torch.distributed`` with ``env://`` (MASTER_ADDR, MASTER_PORT; under torchrun
    TORCHELASTIC_USE_AGENT_STORE makes it a client of the launcher's store). Inherited from a
    torchrun or a cluster scheduler they make the engine wait for ranks that never come or join
    the launcher's group. For the engine's start the launcher's variables are hidden and this
    process's own set (rank 0 of 1, loopback, a free port, the policy's CUDA device) replaces
    them; the launcher's come back afterwards (the group, once made, reads them no more).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise UserError(
            f"engine.kind=vllm: this process is already in a torch.distributed group of "
            f"{dist.get_world_size()} ranks; vigor train's colocated engine needs a group of its "
            "own: run vigor train as one plain process (several GPUs: the TRL path, docs/scaling.md)"
        )
    hidden = {k: v for k, v in os.environ.items() if k in LAUNCHER_VARIABLES or k.startswith("TORCHELASTIC_")}
    device = torch.cuda.current_device() if torch.cuda.is_available() else 0
    ours = {"RANK": "0", "LOCAL_RANK": str(device), "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    for k in hidden:
        del os.environ[k]
    os.environ.update(ours)
    try:
        yield ours
    finally:
        for k in ours:
            os.environ.pop(k, None)
        os.environ.update(hidden)


def _cuda_free_bytes() -> int | None:
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def _checkpoint_of(model: Any) -> str:
    """Where the policy was loaded from (hub id or directory): vLLM reads config and tokenizer there."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    path = getattr(base.config, "_name_or_path", "") or getattr(base, "name_or_path", "")
    if not path:
        raise UserError("vllm engine: the policy does not say which checkpoint it came from "
                        "(config._name_or_path is empty); load it with from_pretrained")
    return str(path)


def _context_length(cfg: Any, model: Any) -> int:
    """Default ``max_model_len``: prompt limit + what a rollout may add (max_new_tokens, or an
    episode's tokens under task.env: its later turns' prompts hold the earlier turns), capped
    by the model's positions."""
    wanted = cfg.task.max_prompt_tokens + cfg.completion_tokens()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    limit = getattr(base.config, "max_position_embeddings", None)
    return min(wanted, limit) if limit else wanted


class VLLMEngine(RolloutEngine):
    """Colocated vLLM in sleep mode; pushes the policy's weights in memory before generating.

    ``vllm_api`` is the ``vllm`` module by default; tests pass an object with
    the same ``LLM`` and ``SamplingParams`` (a recording stand-in built from
    the pinned release's signatures), since vLLM cannot run without a GPU.
    """

    name = "vllm"

    def __init__(self, cfg: Any, model: Any, tokenizer: Any, vllm_api: Any = None):
        if vllm_api is None:
            reason = vllm_unavailable_reason()
            if reason is not None:
                raise UserError(f"engine.kind=vllm: {reason}; use --engine hf")
            import vllm as vllm_api
        self._vllm = vllm_api
        self.tokenizer = tokenizer
        self._policy = model
        self._stop_ids = stop_token_ids(model, tokenizer)
        self._sleep_level = cfg.engine.sleep_level
        self._awake = False
        self._engine_version: tuple | None = None  # policy version the engine's weights hold
        self.pushes = 0  # weight pushes so far (each one sends every weight)

        if cfg.sampling.top_p < 1.0:
            console.print(
                "[yellow]vllm engine: sampling.top_p < 1, so the engine's log-probs are those of "
                "the truncated distribution it samples from; the policy's recomputed ones are "
                "not truncated: engine/logprob_diff includes that gap (at most ln(1/top_p) per "
                "token, which the weight check allows for)[/yellow]"
            )
        max_len = cfg.engine.max_model_len or _context_length(cfg, model)
        from vigor_cli.model.memory_plan import engine_utilization

        utilization = engine_utilization(cfg, model)  # 'auto' sized from the memory free now
        trainer_bytes = torch.cuda.memory_reserved() if torch.cuda.is_available() else 0
        free_before = _cuda_free_bytes()
        with own_process_group():
            self.llm = self._build(vllm_api, model, tokenizer, cfg, utilization, max_len)
        free_awake = _cuda_free_bytes()
        # The checkpoint's weights are discarded here; every phase starts with a push.
        self.llm.sleep(level=2)
        free_asleep = _cuda_free_bytes()
        self._memory: dict[str, float] = {"trainer_gib": trainer_bytes / GIB}
        if free_before is not None:
            self._memory["engine_awake_gib"] = (free_before - free_awake) / GIB
            self._memory["engine_asleep_gib"] = max(0, free_before - free_asleep) / GIB
            self._memory["gpu_total_gib"] = torch.cuda.mem_get_info()[1] / GIB
        console.print("vllm engine memory: " + ", ".join(
            f"{k.removesuffix('_gib')} {v:.2f} GiB" for k, v in self._memory.items()
        ) + f" (engine.gpu_memory_utilization={utilization})")

    def _build(self, vllm_api: Any, model: Any, tokenizer: Any, cfg: Any, utilization: float, max_len: int) -> Any:
        """``vllm.LLM`` in this process (external launcher), bf16, sleep mode, processed log-probs."""
        return vllm_api.LLM(
            model=_checkpoint_of(model),
            tokenizer=getattr(tokenizer, "name_or_path", None) or None,
            revision=cfg.model.revision,
            dtype="bfloat16",
            seed=cfg.train.seed,
            gpu_memory_utilization=utilization,
            max_model_len=max_len,
            enable_sleep_mode=True,
            enable_prefix_caching=True,
            enforce_eager=cfg.engine.enforce_eager,
            distributed_executor_backend="external_launcher",
            logprobs_mode="processed_logprobs",
        )

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any) -> None:
        """Sample from ``model`` from now on; pushes only if its weights changed since the last push.

        While the engine sleeps the push waits for the next generation phase
        (after a level-2 sleep the engine holds no weights, so that phase
        always pushes); while it is awake a changed policy is pushed now.
        """
        self._policy = model
        if self._awake and policy_version(model) != self._engine_version:
            self._push()
            self.llm.reset_prefix_cache()

    def _push(self) -> None:
        version = policy_version(self._policy)
        weights = policy_weights(self._policy, ENGINE_DTYPE)
        self.llm.apply_model(lambda vllm_model: vllm_model.load_weights(weights))
        self._engine_version = version
        self.pushes += 1

    # ------------------------------------------------------------------ phases
    def _begin_generation(self) -> None:
        if self._awake:
            return
        self.llm.wake_up(tags=["weights"])
        if policy_version(self._policy) != self._engine_version:
            self._push()
        self.llm.wake_up(tags=["kv_cache"])
        self.llm.reset_prefix_cache()
        self._awake = True

    def end_generation(self) -> None:
        """Free the GPU for the update: sleep at ``engine.sleep_level`` (2 discards the weights)."""
        if not self._awake:
            return
        self.llm.sleep(level=self._sleep_level)
        self._awake = False
        if self._sleep_level == 2:
            self._engine_version = None

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        counts: Sequence[int],
        sampling: SamplingParams,
    ) -> list[list[Rollout]]:
        """One ``LLM.generate`` call: prompt i gets ``SamplingParams(n=counts[i])``.

        With ``sampling.seed`` set, prompt i's request seed is derived from
        (seed, i), and vLLM gives its j-th sample seed + j; callers vary the
        seed between rounds, as with the hf engine.
        """
        if len(prompts) != len(counts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        asked = [i for i, c in enumerate(counts) if c > 0]
        results: list[list[Rollout]] = [[] for _ in prompts]
        if not asked:
            return results
        # vLLM refuses n > 1 with greedy decoding; every greedy sample is the same, so ask once.
        greedy = sampling.temperature == 0
        self._begin_generation()
        params = [self._sampling_params(sampling, i, 1 if greedy else counts[i]) for i in asked]
        outputs = self.llm.generate(
            [{"prompt_token_ids": [int(t) for t in prompts[i]]} for i in asked],
            params,
            use_tqdm=False,
        )
        for i, p, request in zip(asked, params, outputs, strict=True):
            completions = sorted(request.outputs, key=lambda c: c.index)
            if len(completions) != p.n:
                raise RuntimeError(f"vLLM returned {len(completions)} completions, asked {p.n}")
            rollouts = [self._rollout(c) for c in completions]
            results[i] = [replace(r) for r in rollouts * counts[i]] if greedy else rollouts
        return results

    def _sampling_params(self, sampling: SamplingParams, index: int, n: int) -> Any:
        seed = None
        if sampling.seed is not None:
            seed = int(np.random.SeedSequence([int(sampling.seed) % 2**32, index]).generate_state(1)[0] >> 1)
        return self._vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
            logprobs=0,  # the sampled token's log-prob only (processed: after temperature)
            stop_token_ids=self._stop_ids,  # EOS ids and the template's end of turn
            detokenize=False,  # decoded below with the trainer's tokenizer, as the hf engine does
        )

    def _rollout(self, completion: Any) -> Rollout:
        token_ids = [int(t) for t in completion.token_ids]
        if completion.logprobs is None or len(completion.logprobs) != len(token_ids):
            raise RuntimeError("vLLM returned no log-prob for some sampled tokens")
        logprobs = [float(step[t].logprob) for t, step in zip(token_ids, completion.logprobs)]
        truncated = completion.finish_reason == "length"
        # vLLM stops at the first stop id and keeps it; cut here too, so the reward never
        # reads past an end of turn whatever the engine did.
        end = cut_at_stop(token_ids, self._stop_ids)
        if end is not None:
            token_ids, logprobs, truncated = token_ids[:end], logprobs[:end], False
        return Rollout(
            token_ids=token_ids,
            logprobs=logprobs,
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            truncated=truncated,
        )

    # ------------------------------------------------------------------ misc
    def memory_report(self) -> dict[str, float]:
        """GiB measured at start: the trainer's CUDA memory, the engine's awake and asleep."""
        return dict(self._memory)

    def close(self) -> None:
        self.end_generation()

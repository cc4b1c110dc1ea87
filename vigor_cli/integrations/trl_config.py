"""A vigor run config as TRL's: :class:`VigorGRPOConfig` (TRL's ``GRPOConfig`` plus the
allocation, the health checks and the update's token budget) and :func:`trl_args`, which maps
a vigor ``RunConfig`` onto it as `vigor train` would train it (refusing, in one line, what the
TRL path cannot train the same way); the ``model`` section's load keys (:func:`model_load_kwargs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

try:
    from trl import GRPOConfig
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(f"vigor_cli.integrations.trl_config needs TRL: pip install 'vigor[trl]' ({e})") from None

from vigor_cli.config import AllocationConfig, ConfigError
from vigor_cli.integrations import trl_checks
from vigor_cli.settings import build_config


# --------------------------------------------------------------------------- config
def allocation_config(section: Mapping[str, Any] | AllocationConfig | None,
                      prompts_per_step: int | None = None) -> AllocationConfig:
    """The ``vigor`` section (keys of vigor's ``allocation`` config) validated exactly as
    ``vigor train`` validates it: a bad key or value raises ``ConfigError`` naming
    ``allocation.<key>``. With ``prompts_per_step``, also the strategy's own rules (its first
    round must fit the budget), which need the number of prompts a step starts from."""
    from vigor_cli.allocation import registry
    from vigor_cli.errors import UserError

    if isinstance(section, AllocationConfig):
        alloc = section
    else:
        tree = {f"allocation.{key}": value for key, value in dict(section or {}).items()}
        alloc = build_config(overrides=tree, strategy_rules=False).allocation
    if prompts_per_step is not None:
        try:
            registry.check(alloc, prompts_per_step)
        except UserError as e:
            raise ConfigError(str(e)) from None
    return alloc


@dataclass
class VigorGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus the allocation: ``vigor`` holds the keys of vigor's
    ``allocation`` section (``{"strategy": "vigor", "budget": 512}``)."""

    vigor: dict = field(
        default_factory=dict,
        metadata={"help": "vigor's allocation keys (vigor_cli/config/allocation.py AllocationConfig)."},
    )
    prompts_per_step: int | None = field(
        default=None,
        metadata={"help": "Prompts the allocator starts a step from (vigor's train.prompts_per_step). "
                  "Default: generation_batch_size // num_generations."},
    )
    vigor_run_dir: str | None = field(
        default=None,
        metadata={"help": "Where allocation.jsonl and metrics.jsonl go. Default: output_dir."},
    )
    vigor_health: dict = field(
        default_factory=dict,
        metadata={"help": "vigor's health-check keys (vigor_cli/config/health.py HealthConfig): thresholds, "
                  "windows, strict."},
    )
    pass_threshold: float = field(
        default=1.0,
        metadata={"help": "A rollout passes at reward >= this (vigor's task.pass_threshold): reward/pass_rate."},
    )
    vigor_optimizer: bool = field(
        default=False,
        metadata={"help": "vigor train's optimizer rules: warmup_steps counts rollout phases and the warm-up "
                  "starts at 1/warmup_steps (Transformers' starts at 0), every num_iterations optimizer step of a "
                  "phase at its phase's rate, constant after; weight decay on every trained parameter "
                  "(Transformers exempts biases and norms). Set by build_trainer."},
    )
    vigor_config: dict | None = field(
        default=None,
        metadata={"help": "The vigor run config (a RunConfig as a dict) this run trains: written as the run's "
                  "config.yaml and into each checkpoint, so vigor export, eval --run and report read the run as "
                  "a vigor train run. Set by build_trainer."},
    )
    micro_batch_tokens: int = field(
        default_factory=lambda: _grpo_default("micro_batch_tokens"),
        metadata={"help": "Token budget of one forward/backward of the update (vigor's "
                  "grpo.micro_batch_tokens): a rank's rows are cut into micro-batches of at most this many "
                  "padded tokens (vigor_cli/integrations/trl_update.py)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gradient_accumulation_steps != 1 or self.steps_per_generation != 1:
            raise ValueError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}, steps_per_generation="
                f"{self.steps_per_generation}: VigorGRPOTrainer needs 1 and 1 (a step's rollouts are one "
                "variable-size batch of TRL's loss, generated once per optimizer step)"
            )
        if self.prompts_per_step is None:
            self.prompts_per_step = self.generation_batch_size // self.num_generations
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1 (got {self.prompts_per_step})")
        if self.save_strategy == "steps" and self.save_steps and self.save_steps % self.num_iterations:
            raise ValueError(f"save_steps={self.save_steps}: a checkpoint is taken between rollout phases, so "
                             f"save_steps must be a multiple of num_iterations={self.num_iterations}")
        if self.micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1 (got {self.micro_batch_tokens})")
        self.allocation = allocation_config(self.vigor, self.prompts_per_step)
        self.health_view = health_view(self)


def _grpo_default(key: str) -> Any:
    """A default of vigor's ``grpo`` section (the defaults live in the config classes only)."""
    from vigor_cli.config import GRPOConfig as VigorGRPOSection

    return VigorGRPOSection.model_fields[key].default


def health_view(a: Any) -> Any:
    """The config the health checks read (vigor_cli/train/health.py), from TRL's keys: the health
    section, sampling (temperature, top_p, max_completion_length as max_new_tokens), the
    learning rate and passes (num_iterations as grpo.mu)."""
    from pydantic import ValidationError

    from vigor_cli import config as vc

    try:
        return vc.RunConfig(
            health=vc.HealthConfig.model_validate(a.vigor_health),
            sampling=vc.SamplingConfig(temperature=a.temperature, top_p=a.top_p,
                                       max_new_tokens=a.max_completion_length),
            grpo=vc.GRPOConfig(learning_rate=a.learning_rate, mu=a.num_iterations,
                               micro_batch_tokens=max(16384, a.max_completion_length)),
        )
    except ValidationError as e:
        raise ConfigError(f"vigor_health: {str(e).splitlines()[0]}: {e.errors()[0]['msg']}") from None


# --------------------------------------------------------------------------- from a vigor config
LOSS_TYPES = {"dapo": "dapo", "grpo": "grpo", "dr_grpo": "dr_grpo"}
"""vigor's grpo.loss_agg -> TRL's loss_type (prompt_mean has no TRL counterpart)."""


def trl_args(cfg: Any, output_dir: str | Path, **overrides: Any) -> VigorGRPOConfig:
    """A :class:`VigorGRPOConfig` with a vigor ``RunConfig``'s allocation, prompts per step,
    seed, steps, optimiser, clip range, KL, sampling and loss aggregation; ``overrides`` are
    TRL keys set last (``use_vllm=True``, ``vllm_mode="server"``)."""
    g, s, t = cfg.grpo, cfg.sampling, cfg.train
    if g.loss_agg not in LOSS_TYPES:
        raise ValueError(f"grpo.loss_agg={g.loss_agg!r} has no TRL loss_type; use one of {sorted(LOSS_TYPES)}")
    from vigor_cli.model.loading import gradient_checkpointing_on
    from vigor_cli.run.tracking import require

    require(t.report_to)  # a missing dashboard package: one line, before anything loads
    from vigor_cli.model.loading import master_weights_dtype, pick_dtype

    group = cfg.allocation.group_size
    device = _trl_device(overrides)
    checkpointing = gradient_checkpointing_on(cfg.model, device)  # as vigor train decides it
    dtype = pick_dtype(cfg.model, device)  # autocast to the 16-bit compute dtype, none in float32
    keys = dict(
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        # TRL's optimizer steps per rollout phase are num_iterations (vigor's grpo.mu passes)
        gradient_checkpointing=checkpointing, output_dir=str(output_dir), max_steps=t.steps * g.mu, seed=t.seed,
        prompts_per_step=t.prompts_per_step,
        vigor=cfg.allocation.model_dump(), vigor_health=cfg.health.model_dump(),
        per_device_train_batch_size=group, num_generations=group,
        learning_rate=g.learning_rate, lr_scheduler_type="constant_with_warmup", warmup_steps=g.warmup_steps,
        weight_decay=g.weight_decay, max_grad_norm=g.max_grad_norm, epsilon=g.epsilon,
        epsilon_high=g.epsilon_high, beta=g.beta, loss_type=LOSS_TYPES[g.loss_agg],
        scale_rewards=g.scale_rewards, num_iterations=g.mu, mask_truncated_completions=g.mask_truncated,
        pass_threshold=cfg.task.pass_threshold,
        # an episode (task.env): the whole exchange, as TRL bounds a tool-calling completion
        temperature=s.temperature or 1.0, top_p=s.top_p, max_completion_length=cfg.completion_tokens(),
        logging_steps=1, disable_tqdm=True,
        # checkpoints as vigor train's: every train.save_every rollout phases and at the end
        # (trl_save.py), keeping train.keep_checkpoints of them
        save_strategy="steps", save_steps=(t.save_every or t.steps) * g.mu, save_total_limit=t.keep_checkpoints,
        vigor_config=cfg.model_dump(mode="json"),
        report_to=list(t.report_to) or "none",  # train.report_to: TRL's own dashboard callbacks
        # grpo.importance_sampling: vigor's token-level truncated ratio (the Learner's), which
        # TRL applies on its vLLM path; 'auto' is on there (TRL's own default mode masks sequences)
        vllm_importance_sampling_correction=g.importance_sampling != "off",
        vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=g.importance_sampling_cap,
        vllm_importance_sampling_clip_min=None,
        # set, not left to TRL's defaults: a release that changes one (1.19 made sequence-level
        # ratios its default) must not change what this config trains
        importance_sampling_level=g.importance_sampling_level, multi_objective_aggregation="sum_then_normalize",
        micro_batch_tokens=g.micro_batch_tokens, vigor_optimizer=True,
    )
    keys.update(overrides)
    if g.importance_sampling == "on" and not keys.get("use_vllm"):
        raise ConfigError(
            "grpo.importance_sampling=on without TRL's vLLM (--vllm-mode): TRL's transformers generation returns "
            "no log-probs to correct with; use auto (off there, as vigor train with the hf engine) or off")
    if cfg.model.load_in_4bit and keys.get("use_vllm"):
        raise ConfigError(trl_checks.FOUR_BIT_VLLM.format(key="model.load_in_4bit with --vllm-mode"))
    if keys.get("use_transformers_continuous_batching") and (keys["bf16"] or keys["fp16"]) and (
            cfg.model.lora.enabled or master_weights_dtype(cfg.model, dtype) is not None):
        raise ConfigError(trl_checks.CONTINUOUS_FP32.format(key="--trl use_transformers_continuous_batching=true"))
    return VigorGRPOConfig(**keys)


def _trl_device(overrides: dict) -> torch.device:
    """Where TRL will train: the CPU when asked (``use_cpu``) or without CUDA, else the GPU."""
    cpu = overrides.get("use_cpu", False) or not torch.cuda.is_available()
    return torch.device("cpu" if cpu else "cuda")


def model_load_kwargs(m: Any, device: torch.device) -> dict[str, Any]:
    """``from_pretrained`` keys for a vigor ``model`` section, as `vigor train` loads it:
    float32 master weights for a full fine-tune in a 16-bit dtype (trained under TRL's
    autocast, :func:`trl_args`), the 16-bit dtype otherwise, and the base in 4-bit NF4 for
    ``model.load_in_4bit`` (CUDA and bitsandbytes, else one line naming the key)."""
    from accelerate import PartialState

    from vigor_cli.model.loading import _four_bit_config, master_weights_dtype, pick_dtype

    dtype = pick_dtype(m, device)
    kwargs: dict[str, Any] = {"revision": m.revision,
                              "dtype": torch.float32 if master_weights_dtype(m, dtype) is not None else dtype}
    if m.load_in_4bit:
        kwargs["quantization_config"] = _four_bit_config(dtype)
        kwargs["device_map"] = {"": PartialState().local_process_index}
    return kwargs

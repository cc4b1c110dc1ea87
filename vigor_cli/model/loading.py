"""Policy loading: a local path or hub id, the bundled tiny model, LoRA or full weights, 4-bit.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import glob
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from vigor_cli.config import ModelConfig
from vigor_cli.errors import UserError

TINY_DIR = Path(__file__).resolve().parents[1] / "assets" / "tiny"


def resolve_model_path(name_or_path: str, *, to_load: bool = False) -> str:
    """'tiny' -> the bundled asset directory; an existing directory -> itself; else a hub id
    (with ``to_load``: one that is cached or that the reachable hub can serve)."""
    if name_or_path == "tiny":
        if not (TINY_DIR / "config.json").is_file():
            raise UserError(
                f"model.name_or_path=tiny: the bundled model is missing at {TINY_DIR} "
                "(rebuild it with `vigor make-tiny`)"
            )
        return str(TINY_DIR)
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise UserError(f"model.name_or_path={name_or_path}: directory has no config.json")
        return str(p)
    if looks_local(name_or_path):
        raise UserError(f"model.name_or_path={name_or_path}: no such directory (a local model folder, moved or "
                        "deleted since; a hub id is ORG/NAME)")
    if to_load:
        _check_hub_reachable(name_or_path)
    return name_or_path


def looks_local(name: str) -> bool:
    """A path a hub id cannot be: absolute, from '.', '~' or a drive, or more than ORG/NAME deep."""
    return name.startswith(("/", ".", "~", "\\")) or name.count("/") > 1 or (len(name) > 1 and name[1] == ":")


def _check_hub_reachable(repo_id: str) -> None:
    """A hub id that is not in the local cache needs the hub: when the hub cannot be reached
    (offline, HF_HUB_OFFLINE=1), one clear error now instead of the hub client's minute of
    retries and a warning per retry (vigor_cli/hub.py)."""
    from huggingface_hub import try_to_load_from_cache

    from vigor_cli import hub

    hub.quiet()
    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return
    except Exception:  # an id the cache cannot even look up (bad characters): the loader says why
        return
    reason = hub.unreachable()
    if reason is not None:
        hint = "download it first, or give a local directory"
        raise UserError(f"model.name_or_path={repo_id}: not a local directory and not in the Hugging Face "
                        f"cache, and {reason} ({hint})")


# --------------------------------------------------------------------------- device choice
CUDA_DRIVER_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
"""Oldest Linux driver each CUDA major release runs on (NVIDIA's minor-version compatibility)."""


@dataclass
class CudaProbe:
    """What the machine says about CUDA: usable by this torch, present but unusable, or absent."""

    usable: bool
    evidence: list[str] = field(default_factory=list)
    """Signs of an NVIDIA GPU or driver (device files, nvidia-smi, torch's own warning)."""
    cause: str = ""
    """Why torch cannot use it (one line), when present but unusable."""

    @property
    def present(self) -> bool:
        return self.usable or bool(self.evidence)


def _torch_cuda_available() -> tuple[bool, list[str]]:
    """torch.cuda.is_available() and the warnings it raised (an old driver warns here)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(torch.cuda.is_available())
    return ok, [str(w.message) for w in caught]


def _nvidia_device_files() -> list[str]:
    return sorted(glob.glob("/dev/nvidia[0-9]*"))


def _nvidia_smi() -> str | None:
    return shutil.which("nvidia-smi")


def _driver_version() -> str | None:
    """The loaded NVIDIA kernel driver's version, from /proc (None when no driver is loaded)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def _cuda_init_error() -> str | None:
    """The error torch raises when asked to initialise CUDA (None when it initialises)."""
    try:
        torch.cuda.init()
    except Exception as e:  # AssertionError (CPU build), RuntimeError (driver), others
        return _first_line(e)
    return None


def probe_cuda() -> CudaProbe:
    """Can this torch use a CUDA GPU here, and if not, is there one it should have used?"""
    ok, messages = _torch_cuda_available()
    if ok:
        return CudaProbe(usable=True)
    evidence: list[str] = []
    devices = _nvidia_device_files()
    if devices:
        evidence.append(", ".join(devices[:4]) + (" …" if len(devices) > 4 else ""))
    if _nvidia_smi():
        evidence.append("nvidia-smi")
    driver = _driver_version()
    if driver:
        evidence.append(f"driver {driver}")
    cuda_warnings = [m.splitlines()[0] for m in messages if "CUDA" in m or "NVIDIA" in m]
    if cuda_warnings:
        evidence.append("torch warned")
    if not evidence:
        return CudaProbe(usable=False)
    build = torch.version.cuda
    if cuda_warnings:
        cause = cuda_warnings[0]
    elif build is None:
        cause = f"torch {torch.__version__} is a CPU-only build"
    else:
        cause = _cuda_init_error() or "torch.cuda.is_available() is False"
    if build is not None:
        major = int(str(build).split(".")[0])
        floor = CUDA_DRIVER_FLOOR.get(major)
        need = f" (needs driver >= {floor})" if floor else ""
        cause += f"; torch {torch.__version__} is a CUDA {build} build{need}"
    return CudaProbe(usable=False, evidence=evidence, cause=cause)


def pick_device(requested: str = "auto") -> torch.device:
    """The policy's device for ``model.device``; CUDA present but unusable is a UserError.

    'cpu' always gives the CPU. 'auto' gives CUDA when torch can use it and the
    CPU only when the machine shows no sign of an NVIDIA GPU; 'cuda' needs a
    usable GPU. The error names the evidence, the cause and both ways out.
    """
    if requested == "cpu":
        return torch.device("cpu")
    probe = probe_cuda()
    if probe.usable:
        return torch.device("cuda")
    if probe.present:
        raise UserError(
            f"model.device={requested}: an NVIDIA GPU is present ({'; '.join(probe.evidence)}) "
            f"but torch cannot use it: {probe.cause}. Install a torch build for this driver (or "
            "update the driver), or run on the CPU on purpose with --device cpu"
        )
    if requested == "cuda":
        raise UserError("model.device=cuda: no CUDA GPU here (no NVIDIA device, driver or "
                        "nvidia-smi); use --device cpu or auto")
    return torch.device("cpu")


def pick_dtype(cfg: ModelConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.dtype)


def gradient_checkpointing_on(cfg: ModelConfig, device: torch.device) -> bool:
    """model.gradient_checkpointing resolved: 'auto' is on for a CUDA policy that is not the
    bundled tiny model (activations of a hub model's micro-batch are tens of GB without it)."""
    if cfg.gradient_checkpointing != "auto":
        return bool(cfg.gradient_checkpointing)
    return device.type == "cuda" and cfg.name_or_path != "tiny"


def master_weights_dtype(cfg: ModelConfig, dtype: torch.dtype) -> torch.dtype | None:
    """The 16-bit compute dtype to autocast to when full fine-tuning keeps float32 master
    weights (model.fp32_master_weights); None when the weights train in ``dtype`` itself."""
    if cfg.lora.enabled or cfg.load_in_4bit or not cfg.fp32_master_weights:
        return None
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


def load_tokenizer(cfg: ModelConfig, path: str | None = None) -> Any:
    from transformers import AutoTokenizer

    source = path or resolve_model_path(cfg.name_or_path, to_load=True)
    try:
        tok = AutoTokenizer.from_pretrained(source, revision=cfg.revision)
    except OSError as e:
        raise UserError(f"model.name_or_path={cfg.name_or_path}: cannot load tokenizer ({_first_line(e)})") from None
    if not tok("a 1", add_special_tokens=False)["input_ids"]:  # transformers builds an empty one from config.json alone
        raise UserError(f"model.name_or_path={cfg.name_or_path}: its tokenizer encodes text to no tokens "
                        f"(no tokenizer files beside config.json?)")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if cfg.enable_thinking is not None:  # read by tasks/prompts.render and rollout/weights
        tok.vigor_chat_template_kwargs = {"enable_thinking": cfg.enable_thinking}
    return tok


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def quiet_transformers() -> None:
    """No per-file progress bars from transformers: the trainer has its own console."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_policy(cfg: ModelConfig, adapter_or_weights: str | None = None) -> tuple[Any, Any, torch.device]:
    """(model, tokenizer, device) ready to train.

    ``adapter_or_weights`` resumes from a checkpoint directory: a saved LoRA
    adapter (loaded on top of the base) or full weights (loaded instead of it).
    """
    from transformers import AutoModelForCausalLM

    quiet_transformers()

    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg, device)
    base_path = resolve_model_path(cfg.name_or_path, to_load=True)
    autocast_dtype = master_weights_dtype(cfg, dtype)
    if autocast_dtype is not None:
        dtype = torch.float32  # the trained copy; the forward autocasts to autocast_dtype
    kwargs: dict[str, Any] = {"dtype": dtype, "revision": cfg.revision}
    if cfg.load_in_4bit:
        kwargs["quantization_config"] = _four_bit_config(dtype)
        kwargs["device_map"] = {"": 0}
    full_weights = adapter_or_weights is not None and not cfg.lora.enabled
    try:
        model = AutoModelForCausalLM.from_pretrained(
            adapter_or_weights if full_weights else base_path, **kwargs
        )
    except OSError as e:
        raise UserError(f"model.name_or_path={cfg.name_or_path}: cannot load ({_first_line(e)})") from None
    if not cfg.load_in_4bit:
        model.to(device)
    tokenizer = load_tokenizer(cfg, base_path)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.vigor_autocast_dtype = autocast_dtype  # read by vigor_cli.train.logprobs.autocast_for

    checkpointing = gradient_checkpointing_on(cfg, device)
    if cfg.lora.enabled:
        model = _wrap_lora(model, cfg, adapter_or_weights, checkpointing)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    set_cpu_threads(model, cfg.cpu_threads, device)
    model.train()
    return model, tokenizer, device


SMALL_MODEL_PARAMS = 50_000_000
"""Below this size a CPU model runs on one thread (model.cpu_threads=0)."""


def set_cpu_threads(model: Any, requested: int, device: torch.device) -> None:
    """Apply model.cpu_threads (see its description) for a policy on the CPU."""
    if device.type != "cpu":
        return
    if requested > 0:
        torch.set_num_threads(requested)
    elif sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)


def _four_bit_config(compute_dtype: torch.dtype) -> Any:
    if not torch.cuda.is_available():
        raise UserError("model.load_in_4bit (--load-in-4bit) needs a CUDA GPU; none is visible here")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise UserError(
            "model.load_in_4bit needs bitsandbytes: pip install 'vigor[gpu]' (or bitsandbytes)"
        ) from None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def _wrap_lora(model: Any, cfg: ModelConfig, adapter_dir: str | None, checkpointing: bool) -> Any:
    from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training

    if cfg.load_in_4bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing)
    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


class Reference:
    """The KL reference policy: the policy with its adapter disabled (LoRA), or a frozen
    copy of the starting weights (full fine-tuning; loaded fresh, so a resumed run gets
    the starting model and not the checkpoint)."""

    def __init__(self, policy: Any, frozen: Any | None = None):
        self.policy = policy
        self.frozen = frozen
        if frozen is not None:
            compute = getattr(frozen, "vigor_autocast_dtype", None)
            if compute is not None:  # a frozen copy needs no float32 master weights
                frozen.to(compute)
            frozen.eval()
            for p in frozen.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def model(self) -> Iterator[Any]:
        if self.frozen is not None:
            yield self.frozen
        else:
            with self.policy.disable_adapter():
                yield self.policy


def save_policy(model: Any, tokenizer: Any, directory: Path) -> None:
    """HF format: a PEFT adapter for LoRA, the full model otherwise, plus the tokenizer."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]

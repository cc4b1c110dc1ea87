"""`vigor export`: a run's checkpoint as a plain Hugging Face folder to ship.

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from vigor_cli.export import card
from vigor_cli.errors import UserError

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Choices of ``--dtype``."""


def pick_checkpoint(run: Any, step: int | None, warn: Callable[[str], Any]) -> Path:
    """Checkpoint ``step-N`` of the run (``--step``), else its newest intact one; verified
    against its manifest (vigor_cli/run/directory.py), refused in one line when damaged or absent."""
    from vigor_cli.run.directory import verify_checkpoint

    steps = run.checkpoint_steps()
    if not steps:
        raise UserError(f"{run.path}: no checkpoint yet (checkpoints/step-N/COMPLETE); export needs one")
    if step is None:
        return run.store.pick(None, warn)
    if step not in steps:
        raise UserError(f"--step {step}: {run.path} has no complete checkpoint of that step "
                        f"(has: {', '.join(f'step-{s}' for s in steps)})")
    path = run.checkpoints / f"step-{step}"
    problem = verify_checkpoint(path)
    if problem is not None:
        raise UserError(f"--step {step}: checkpoint {path} is damaged ({problem})")
    return path


def run_config(run_path: Path) -> Any:
    from vigor_cli.config import RunConfig
    from vigor_cli.run.directory import read_config
    from vigor_cli.settings import checks

    try:  # the registries' checks too, as eval --run and resume read a run's config
        return RunConfig.model_validate(read_config(run_path), context=checks())
    except ValueError as e:
        raise UserError(f"{run_path / 'config.yaml'}: does not validate ({str(e).splitlines()[0]})") from None


def export_dtype(cfg: Any, requested: str) -> str:
    """``--dtype``: as asked, or (auto) the dtype the base model's config.json declares."""
    if requested != "auto":
        return requested
    from vigor_cli.model.loading import resolve_model_path

    base = resolve_model_path(cfg.model.name_or_path, to_load=True)
    declared = None
    if Path(base, "config.json").is_file():
        text = json.loads(Path(base, "config.json").read_text())
        declared = text.get("dtype") or text.get("torch_dtype")
    else:  # a hub id: its config.json from the cache or the hub
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(base, revision=cfg.model.revision)
        declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    declared = str(declared).removeprefix("torch.") if declared is not None else None
    return declared if declared in DTYPES[1:] else "float32"


def check_out(out: Path, run: Any = None) -> None:
    """``--out`` must be a new or empty directory: an export never mixes with other files;
    and not inside the run's checkpoints, which the run rotates and a resume cleans (the
    export would be deleted by them, or be taken for a damaged checkpoint)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory; give a new one")
    if run is not None:
        checkpoints = run.checkpoints.resolve()
        target = out.resolve()
        if target == checkpoints or target.is_relative_to(checkpoints):
            raise UserError(f"--out {out}: inside the run's checkpoints ({run.checkpoints}), which training "
                            "rotates and a resume cleans; give a folder outside them (e.g. "
                            f"{run.path / 'export'})")


def load_checkpoint_policy(cfg: Any, checkpoint: Path, dtype: str) -> Any:
    """The checkpoint's policy as the run trained it (a 4-bit base on CUDA, as the run did;
    everything else on the CPU), in ``dtype``, frozen."""
    from vigor_cli.model.loading import load_policy

    m = cfg.model.model_copy(update={
        "device": "cuda" if cfg.model.load_in_4bit else "cpu",
        "dtype": dtype if not cfg.model.load_in_4bit else cfg.model.dtype,
        "fp32_master_weights": False, "gradient_checkpointing": False,
    })
    model, _, _ = load_policy(m, str(checkpoint))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def generation_config(cfg: Any, checkpoint: Path, tokenizer: Any) -> Any:
    """The generation config the run's policy had (its checkpoint's copy for full weights,
    else the base's; transformers' default from the model config when there is none), with
    every stop token of the run (:func:`stop_token_ids`) as ``eos_token_id``."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    from vigor_cli.model.loading import resolve_model_path
    from vigor_cli.rollout.weights import stop_token_ids

    if (checkpoint / "generation_config.json").is_file():
        source, revision = str(checkpoint), None
    else:
        source, revision = resolve_model_path(cfg.model.name_or_path, to_load=True), cfg.model.revision
    try:
        gen = GenerationConfig.from_pretrained(source, revision=revision)
    except OSError:  # no generation_config.json: what from_pretrained derives for the model
        gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(source, revision=revision))
    stops = stop_token_ids(SimpleNamespace(generation_config=gen), tokenizer)
    gen.eos_token_id = stops[0] if len(stops) == 1 else stops
    if tokenizer.pad_token_id is not None:
        gen.pad_token_id = int(tokenizer.pad_token_id)
    return gen


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
"""The PEFT adapter's files in a LoRA checkpoint (save_policy wrote them with peft)."""


def copy_adapter(checkpoint: Path, folder: Path, base: dict[str, Any]) -> None:
    """The checkpoint's adapter as saved (no weights loaded), its config naming the base
    portably (vigor_cli/export_card.portable_base)."""
    from vigor_cli.export.card import set_adapter_base

    copied = [n for n in ADAPTER_FILES if (checkpoint / n).is_file()]
    if "adapter_config.json" not in copied or len(copied) < 2:
        raise UserError(f"{checkpoint}: no PEFT adapter in this checkpoint (adapter_config.json and "
                        "adapter_model.safetensors), though the run's config says model.lora.enabled")
    for name in copied:
        shutil.copyfile(checkpoint / name, folder / name)
    set_adapter_base(folder, base)


def merged_model(model: Any, dtype: str) -> Any:
    """A plain transformers model holding :func:`policy_weights` of ``model`` (LoRA merged,
    4-bit dequantised) in ``dtype``, built from the base's config on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    from vigor_cli.rollout.weights import policy_weights

    root = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = copy_config(root.config, dtype)
    torch_dtype = getattr(torch, dtype)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    params = dict(plain.named_parameters())
    filled: set[str] = set()
    with torch.no_grad():
        for name, tensor in policy_weights(model, torch_dtype):
            if name not in params:
                raise RuntimeError(f"export: the policy's weight {name} has no place in {type(plain).__name__}")
            params[name].copy_(tensor.to(params[name].device))
            filled.add(name)
    missing = sorted(set(params) - filled)
    if missing:
        raise RuntimeError(f"export: no weight for {', '.join(missing[:5])} in the policy")
    return plain.eval()


def copy_config(config: Any, dtype: str) -> Any:
    import copy

    out = copy.deepcopy(config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):  # the merged weights are dense
        if attr in vars(out):
            delattr(out, attr)
    out.dtype = dtype
    return out


def export(run_path: Path, out: Path, step: int | None = None, merge_lora: bool = False,
           dtype: str = "auto", warn: Callable[[str], Any] = lambda m: None) -> dict[str, Any]:
    """Write the checkpoint's model to ``out`` (module docstring); returns what was written."""
    from vigor_cli.model.loading import load_tokenizer, quiet_transformers, resolve_model_path
    from vigor_cli.run.directory import RunDir, check_run_dir

    run = RunDir(check_run_dir(run_path))
    cfg = run_config(run.path)
    lora = cfg.model.lora.enabled
    if merge_lora and not lora:
        raise UserError(f"--merge-lora: {run.path} trained full weights (model.lora.enabled=false); "
                        "there is no adapter to merge, drop the flag")
    checkpoint = pick_checkpoint(run, step, warn)
    check_out(out, run)
    kind = "adapter" if lora and not merge_lora else "merged" if lora else "full"
    if kind == "merged" and cfg.model.load_in_4bit:
        import torch

        if not torch.cuda.is_available():
            raise UserError("--merge-lora: the run's base is 4-bit (model.load_in_4bit), and merging dequantises "
                            "it on a CUDA GPU as the run did; none is visible here. Export the adapter (drop "
                            "--merge-lora) here, or merge on a GPU machine")
    dtype = export_dtype(cfg, dtype)
    quiet_transformers()
    tokenizer = load_tokenizer(cfg.model)  # the run's: its base's, with enable_thinking
    gen = generation_config(cfg, checkpoint, tokenizer)
    tools = card.run_tools(cfg, run.launch_dir(), warn)  # the environment's, rendered by default
    how = card.set_run_template(cfg, tokenizer, tools)  # after the stop tokens: those are the run's own
    base = card.portable_base(cfg, out)
    record = card.run_record(cfg, run, checkpoint, kind, how, base, out)
    _write(out, lambda tmp: _fill(tmp, kind, cfg, checkpoint, dtype, tokenizer, gen, base, record, out.name))
    stops = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    return {"run": str(run.path), "checkpoint": checkpoint.name, "out": str(out), "kind": kind,
            "dtype": dtype if kind != "adapter" else None, "stop_token_ids": stops,
            "base": resolve_model_path(cfg.model.name_or_path), "adapter_base": base["name_or_path"],
            "rendering": how, "files": sorted(p.name for p in out.iterdir())}


def _fill(folder: Path, kind: str, cfg: Any, checkpoint: Path, dtype: str, tokenizer: Any, gen: Any,
          base: dict[str, Any], record: dict[str, Any], name: str) -> None:
    """The export's files, written into ``folder``: the weights (or the adapter naming its
    portable base), tokenizer, generation config, vigor_run.json and a model card."""
    if kind == "adapter":
        copy_adapter(checkpoint, folder, base)
    else:
        plain = merged_model(load_checkpoint_policy(cfg, checkpoint, dtype), dtype)
        plain.generation_config = gen
        plain.save_pretrained(folder)
        del plain
    tokenizer.save_pretrained(folder)
    gen.save_pretrained(folder)  # the adapter folder gets it too
    (folder / card.RUN_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(card.model_card(record, name), encoding="utf-8")


def _write(out: Path, fill: Callable[[Path], Any]) -> None:
    """``fill`` a hidden folder beside ``out``, then rename it to ``out``: ``out`` appears whole
    or not at all. A full disk is one line naming the disk; SIGINT/SIGTERM stop the export
    with one line (:class:`~vigor_cli.interrupt.TrainingInterrupted`, its status saying
    nothing was written); either way the hidden folder is removed."""
    from vigor_cli.atomic import disk_full, is_disk_full
    from vigor_cli.interrupt import StopSignals, TrainingInterrupted

    tmp = out.with_name(f".{out.name}.tmp-export")
    with StopSignals():
        try:
            shutil.rmtree(tmp, ignore_errors=True)  # a copy a killed export left
            tmp.mkdir(parents=True)
            fill(tmp)
            _readable(tmp)
            if out.exists():
                out.rmdir()  # empty (check_out)
            os.replace(tmp, out)
        except BaseException as e:
            _remove(tmp)
            if isinstance(e, TrainingInterrupted):
                e.status = f"export stopped by {e.signal_name}: nothing was written to --out {out}"
                raise
            if isinstance(e, Exception) and not isinstance(e, UserError) and is_disk_full(e, out.parent):
                raise disk_full(out, then="export again (nothing was written to --out)") from None
            raise


def _readable(folder: Path) -> None:
    """Files 0644 and folders 0755, as a hub download has them: an export is made to be shared,
    and the checkpoint files it copies were written private (0600) by the atomic writer."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _remove(folder: Path) -> None:
    """Remove ``folder`` whole: a second SIGINT/SIGTERM waits until it is gone."""
    import signal

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def push_to_hub_check(repo: str) -> None:
    """Refuse ``--push-to-hub`` in one line before any work when the hub cannot be reached."""
    from vigor_cli import hub

    reason = hub.unreachable()
    if reason is not None:
        raise UserError(f"--push-to-hub {repo}: {reason}; export without it and upload the folder later "
                        "(huggingface-cli upload)")


def push_to_hub(folder: Path, repo: str) -> str:
    """Upload the exported folder to the model repo ``repo`` (created when missing, private)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message="vigor export")
    except (HfHubHTTPError, ValueError, OSError) as e:
        raise UserError(f"--push-to-hub {repo}: {str(e).strip().splitlines()[0]} (the export in {folder} is kept)") from None
    return str(getattr(info, "commit_url", None) or f"https://huggingface.co/{repo}")

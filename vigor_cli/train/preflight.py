"""Checks that run before anything downloads, loads or starts: a bad run fails in seconds.

Details: docs/modules.md.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from vigor_cli.errors import UserError

THINKING_MIN_NEW_TOKENS = 8192
"""Below this, a thinking template with grpo.mask_truncated is refused (see check_tokenizer)."""
THINKING_RECOMMENDED_NEW_TOKENS = 32768
"""Qwen3's model card: 32,768 output tokens for most queries in thinking mode."""


# --------------------------------------------------------------------------- data sources
def _missing_file(path: str, key: str, folder_ok: bool = False) -> None:
    """A data path that is missing, or (a folder aside, where allowed) not a regular file: a
    FIFO or a device would block the loader or never end."""
    from vigor_cli.user.files import regular_file

    p = Path(path).expanduser()
    if not p.exists() and not p.is_symlink():
        raise UserError(f"{key}={path}: file not found")
    if not (folder_ok and p.is_dir()):
        regular_file(p, f"{key}=")


def _tiny_sources(cfg: Any) -> None:
    t = cfg.task
    for key in ("data_dir", "train_path"):  # set but never read: refused, not ignored
        if getattr(t, key, None) is not None:
            raise UserError(f"task.{key}={getattr(t, key)}: {t.name} ships its own problems and reads "
                            "no files (data files are for the math and code tasks)")
    allowed = (None, t.name, "test")
    bad = [name for name in t.eval_sets if name not in allowed]
    if bad:
        raise UserError(f"task.eval_sets: {t.name} has one evaluation set, '{t.name}'; got {bad[0]!r}")


def _math_sources(cfg: Any) -> None:
    from vigor_cli.verifiers.math_answers import DEFAULT_DATA_DIR, KNOWN

    t = cfg.task
    if t.train_path:
        _missing_file(t.train_path, "task.train_path")
    if t.data_dir is not None and not Path(t.data_dir).expanduser().is_dir():
        raise UserError(f"task.data_dir={t.data_dir}: not a directory")
    unknown = [n for n in t.eval_sets if n not in KNOWN]
    if unknown:
        raise UserError(f"task.eval_sets: unknown math evaluation set {unknown[0]!r}; valid: {', '.join(KNOWN)}")
    where = Path(t.data_dir).expanduser() if t.data_dir is not None else Path(DEFAULT_DATA_DIR)
    missing = [n for n in (t.eval_sets or ["math500"]) if not (where / f"{n}.jsonl").exists()]  # (a FIFO: refused when read)
    if missing:
        files = ", ".join(f"{n}.jsonl" for n in missing)
        if t.data_dir is None:  # the package ships all seven files: an install lost them
            raise UserError(f"task.eval_sets: {files} missing from the files shipped in {where}; "
                            "reinstall vigor or pass --set task.data_dir=DIR")
        raise UserError(f"task.data_dir={t.data_dir}: missing {files} for task.eval_sets")


def _code_sources(cfg: Any) -> None:
    from vigor_cli.tasks.code_task import EVAL_SET_NAMES, lcb_local_files, lcb_release_files

    t = cfg.task
    lcb_release_files(t.lcb_release)  # a known release name
    if t.train_path:
        _missing_file(t.train_path, "task.train_path", folder_ok=True)
    if t.data_dir is not None:
        lcb_local_files(Path(t.data_dir).expanduser(), t.lcb_release)
    bad = [n for n in t.eval_sets if n not in EVAL_SET_NAMES]
    if bad:
        raise UserError(f"task.eval_sets: code has one evaluation set, 'livecodebench'; got {bad[0]!r}")


def check_task_sources(task_cfg: Any) -> None:
    """The static data check of one TaskConfig (what `vigor eval` builds per benchmark)."""
    check = DATA_CHECKS.get(task_cfg.name)
    if check is not None:
        check(SimpleNamespace(task=task_cfg))


DATA_CHECKS: dict[str, Callable[[Any], None]] = {
    "tiny-math": _tiny_sources,
    "tiny-code": _tiny_sources,
    "math": _math_sources,
    "code": _code_sources,
}
"""Task name -> static check of its data sources (a task without an entry is not checked)."""


# --------------------------------------------------------------------------- the machine
def check_engine(cfg: Any, device_type: str) -> None:
    """The engine the config asks for can start on this device (for 'auto' see rollout/)."""
    kind = cfg.engine.kind
    if kind == "vllm":
        if device_type != "cuda":
            raise UserError("engine.kind=vllm needs the policy on CUDA; model.device chose the "
                            "CPU (use --engine hf, or --device auto/cuda on a GPU machine)")
        from vigor_cli.rollout import _vllm_reason

        reason = _vllm_reason()
        if reason is not None:
            raise UserError(f"engine.kind=vllm: {reason}; use --engine hf")
    elif kind == "auto" and device_type == "cuda" and importlib.util.find_spec("vllm") is not None:
        from vigor_cli.rollout import _vllm_reason

        reason = _vllm_reason()
        if reason is not None:
            raise UserError(f"engine.kind=auto: {reason}; repair the install (pip install -e "
                            "'.[gpu]') or choose --engine hf")


def check_four_bit(cfg: Any, device_type: str) -> None:
    if not cfg.model.load_in_4bit:
        return
    if device_type != "cuda":
        raise UserError("model.load_in_4bit (--load-in-4bit) needs a CUDA GPU; the policy would run "
                        "on the CPU here")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError("model.load_in_4bit needs bitsandbytes: pip install -e '.[gpu]' (or bitsandbytes)")


def check_static(cfg: Any) -> str:
    """Every check that needs neither data nor model; returns the device type chosen."""
    from vigor_cli.model.loading import pick_device
    from vigor_cli.tasks import TASKS

    if cfg.task.name not in TASKS:
        raise UserError(f"unknown task {cfg.task.name!r}; valid tasks: {', '.join(TASKS)}")
    check = DATA_CHECKS.get(cfg.task.name)
    if check is not None:
        check(cfg)
    device_type = pick_device(cfg.model.device).type
    check_four_bit(cfg, device_type)
    check_engine(cfg, device_type)
    return device_type


# --------------------------------------------------------------------------- the tokenizer
def thinking_template(tokenizer: Any) -> bool:
    """True when the chat template opens a thinking block the model must close itself.

    A template with ``<think>`` whose generation prompt does not already close
    the block (Qwen3 with thinking on writes ``<|im_start|>assistant\\n``; with
    ``enable_thinking=False`` it writes an empty ``<think>\\n\\n</think>``).
    """
    template = getattr(tokenizer, "chat_template", None)
    if not template or "<think>" not in str(template):
        return False
    from vigor_cli.tasks.prompts import template_kwargs

    try:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "1"}], tokenize=False, add_generation_prompt=True,
            **template_kwargs(tokenizer),
        )
    except Exception:
        return False
    tail = prompt[prompt.rfind("<|im_start|>") :] if "<|im_start|>" in prompt else prompt[-200:]
    return "</think>" not in tail


def check_tokenizer(cfg: Any, tokenizer: Any, warn: Callable[[str], None] | None = None) -> None:
    """Refuse a thinking template whose truncated completions would be masked out wholesale.

    With thinking on, a completion is the whole reasoning trace plus the answer;
    Qwen3's model card asks for 32,768 output tokens in thinking mode. Under
    ``grpo.mask_truncated`` every completion cut at ``sampling.max_new_tokens``
    is dropped from the loss, so a budget of a few thousand tokens trains on
    almost nothing. Below :data:`THINKING_MIN_NEW_TOKENS` this is an error
    naming the three ways out; below the card's figure, a warning.
    """
    if not cfg.grpo.mask_truncated or not thinking_template(tokenizer):
        return
    n = cfg.sampling.max_new_tokens
    if n < THINKING_MIN_NEW_TOKENS:
        raise UserError(
            f"sampling.max_new_tokens={n} with a thinking chat template and grpo.mask_truncated="
            "true would mask most rollouts (thinking traces run far longer; the model card asks "
            f"for {THINKING_RECOMMENDED_NEW_TOKENS}): set model.enable_thinking=false, or raise "
            f"sampling.max_new_tokens to at least {THINKING_MIN_NEW_TOKENS}, or set "
            "grpo.mask_truncated=false"
        )
    if n < THINKING_RECOMMENDED_NEW_TOKENS and warn is not None:
        warn(f"[yellow]thinking template, grpo.mask_truncated and sampling.max_new_tokens={n} "
             f"(< {THINKING_RECOMMENDED_NEW_TOKENS}, the model card's figure): watch "
             "completions/truncated_frac[/]")

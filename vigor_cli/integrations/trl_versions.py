"""Which TRL releases the TRL path runs on: the seams it depends on, read from TRL's source.

:class:`~vigor_cli.integrations.trl.VigorGRPOTrainer` overrides and calls private
``GRPOTrainer`` hooks that move between releases. :func:`seams` reads, from a TRL source tree
(the installed one, or an unpacked release: no import), what vigor depends on: the parameters
of each hook, the shape of ``_generate``'s result, the attributes ``__init__`` sets, the
``GRPOConfig`` fields vigor sets and their defaults, the loss types ``_compute_loss`` knows and
whether the fused output layer exists. :func:`problems` compares such a record with
:data:`REQUIRED`; :func:`check_installed` runs both on the installed TRL when a trainer is
built, so a release whose hooks moved stops in one line naming the hook instead of training
wrong. tests/fixtures/trl_signatures.json holds the records of the releases checked
(scripts/trl_signatures.py writes it).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any, Mapping

from vigor_cli.errors import UserError

EXTRA = "trl>=1.16,<1.20"
"""The ``trl`` extra's range (pyproject.toml; a test keeps the two equal)."""

OLDEST = "1.16.0"
"""The oldest release the range admits: .ci/run runs the TRL path's tests again on it."""

TRL_TESTS = ("tests/test_trl_versions.py", "tests/test_trl_core.py", "tests/test_trl_update.py",
             "tests/test_trl_checks.py", "tests/test_trl_integration.py", "tests/test_trl_cli.py")
"""The TRL path's test files (.ci/run runs their fast tests on :data:`OLDEST` too)."""

HOOKS: dict[str, tuple[str, ...]] = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate": ("self", "prompts"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_compute_loss": ("self", "model", "inputs"),
    "compute_loss": ("self", "model", "inputs", "return_outputs", "num_items_in_batch"),
    "_get_per_token_logps_and_entropies": ("self", "model", "input_ids", "attention_mask", "logits_to_keep",
                                           "batch_size", "compute_entropy", "compute_aux_loss"),
    "_generate_single_turn": ("self", "prompt_ids", "images", "multimodal_fields", "num_generations"),
    "log": ("self", "logs", "start_time"),
}
"""GRPOTrainer methods vigor overrides or calls, with the leading parameters it passes."""

GENERATE_RESULT = 8
"""``_generate`` returns (prompt_ids, completion_ids, tool_mask, completions, logprobs,
extra_fields, images, tool_images): the replay builds that tuple."""

ATTRIBUTES = ("_metrics", "_logs", "eos_token_ids", "generation_kwargs", "generation_config", "reward_func_names",
              "reward_weights", "_tokenizer", "num_generations", "use_vllm", "beta", "loss_type",
              "importance_sampling_level", "num_iterations", "max_completion_length", "_entropy_bonus_enabled",
              "aux_loss_enabled", "vllm_importance_sampling_correction")
"""Attributes ``GRPOTrainer.__init__`` sets that vigor reads or sets."""

CONFIG_FIELDS = ("importance_sampling_level", "loss_type", "scale_rewards", "epsilon", "epsilon_high", "beta",
                 "num_iterations", "mask_truncated_completions", "vllm_importance_sampling_correction",
                 "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max", "multi_objective_aggregation",
                 "steps_per_generation", "use_transformers_continuous_batching", "num_generations",
                 "max_completion_length", "temperature", "top_p", "vllm_max_model_length")
"""GRPOConfig fields vigor sets or reads (trl_args sets every default that matters explicitly:
a release that changes one, as importance_sampling_level's, does not change the training)."""

LOSS_KINDS = {"grpo": "row mean", "sapo": "row mean", "dr_grpo": "row mean", "luspo": "row mean",
              "bnpo": "rank token mean", "dapo": "token mean", "cispo": "token mean", "vespo": "token mean"}
"""How each TRL loss type is normalised (vigor_cli/integrations/trl_update.py rescales by it):
every loss type of a supported release must be here."""

SOURCES = ("trainer/grpo_trainer.py", "trainer/grpo_config.py", "trainer/utils.py", "kernels/chunked_logprob.py")


class TRLVersionError(UserError):
    """The installed TRL's hooks are not the ones the TRL path is built on (one line, exit 2)."""


def _function(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return item
    return None


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in [*a.posonlyargs, *a.args]]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def _result_width(fn: ast.FunctionDef) -> int | None:
    """Elements of the tuple the function's last return statement returns."""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
    return len(returns[-1].value.elts) if returns else None


def _self_attributes(fn: ast.FunctionDef) -> list[str]:
    found = set()
    for node in ast.walk(fn):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    found.add(sub.attr)
    return sorted(found)


def _config_defaults(tree: ast.Module) -> dict[str, Any]:
    """GRPOConfig's own fields and their literal defaults (None where not a literal)."""
    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "GRPOConfig":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    out[item.target.id] = _literal_default(item.value)
    return out


def _literal_default(value: ast.expr | None) -> Any:
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "default":
                value = kw.value
                break
        else:
            return None
    try:
        return ast.literal_eval(value) if value is not None else None
    except ValueError:
        return None


def _loss_types(fn: ast.FunctionDef) -> list[str]:
    """The names ``self.loss_type`` is compared with in ``_compute_loss``."""
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and any(
                isinstance(n, ast.Attribute) and n.attr == "loss_type" for n in [node.left, *node.comparators]):
            for part in [node.left, *node.comparators]:
                for sub in ast.walk(part):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        names.add(sub.value)
    return sorted(names)


def _reader(root: str | Path) -> Any:
    """file -> text of a TRL package directory (the folder holding ``trainer/``) or a wheel."""
    root = Path(root)
    if root.is_file():
        import zipfile

        wheel = zipfile.ZipFile(root)
        return lambda name: wheel.read(f"trl/{name}").decode()
    return lambda name: (root / name).read_text()


def _imports_triton_unconditionally(source: str | None) -> bool:
    """The fused head's kernel module imports Triton at its top level (no torch fallback: it
    cannot run where Triton is missing, a CPU build of torch)."""
    if source is None:
        return True
    for node in ast.parse(source).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n.split(".")[0] == "triton" for n in names):
            return True
    return False


def seams(root: str | Path) -> dict[str, Any]:
    """What vigor depends on, read (parsed, never imported) from a TRL package directory or a
    TRL wheel ``root``."""
    read = _reader(root)
    trainer = ast.parse(read(SOURCES[0]))
    config = ast.parse(read(SOURCES[1]))
    utils = read(SOURCES[2])
    try:
        kernel = read(SOURCES[3])
    except (OSError, KeyError):
        kernel = None
    hooks = {}
    for name in HOOKS:
        fn = _function(trainer, "GRPOTrainer", name)
        hooks[name] = None if fn is None else _params(fn)
    generate = _function(trainer, "GRPOTrainer", "_generate")
    init = _function(trainer, "GRPOTrainer", "__init__")
    loss = _function(trainer, "GRPOTrainer", "_compute_loss")
    defaults = _config_defaults(config)
    return {
        "hooks": hooks,
        "generate_result": None if generate is None else _result_width(generate),
        "attributes": [a for a in ATTRIBUTES if init is not None and a in _self_attributes(init)],
        "config": {k: defaults[k] for k in CONFIG_FIELDS if k in defaults},
        "loss_types": [] if loss is None else _loss_types(loss),
        "fused_head": "def add_fused_lm_head(" in utils,
        "fused_head_without_triton": not _imports_triton_unconditionally(kernel),
    }


def problems(record: Mapping[str, Any]) -> list[str]:
    """Where a TRL release's seams (:func:`seams`) differ from what vigor relies on."""
    out = []
    for name, wanted in HOOKS.items():
        got = (record.get("hooks") or {}).get(name)
        if got is None:
            out.append(f"GRPOTrainer.{name} is gone")
        elif tuple(got[: len(wanted)]) != wanted:
            out.append(f"GRPOTrainer.{name} takes ({', '.join(got)}), vigor passes ({', '.join(wanted)})")
    if record.get("generate_result") != GENERATE_RESULT:
        out.append(f"GRPOTrainer._generate returns {record.get('generate_result')} values, vigor replays {GENERATE_RESULT}")
    missing = [a for a in ATTRIBUTES if a not in record.get("attributes", [])]
    if missing:
        out.append(f"GRPOTrainer.__init__ no longer sets {', '.join(missing)}")
    absent = [k for k in CONFIG_FIELDS if k not in record.get("config", {})]
    if absent:
        out.append(f"GRPOConfig has no {', '.join(absent)}")
    unknown = [t for t in record.get("loss_types", []) if t not in LOSS_KINDS]
    if unknown:
        out.append(f"loss types vigor does not know how TRL normalises: {', '.join(unknown)}")
    if not record.get("fused_head"):
        out.append("no fused output layer (trl.trainer.utils.add_fused_lm_head), which the micro-batched update uses")
    elif not record.get("fused_head_without_triton"):
        out.append("its fused output layer needs Triton (no torch fallback before 1.16): it cannot train on a "
                   "torch build without Triton, a CPU one")
    return out


@functools.lru_cache(maxsize=1)
def installed() -> tuple[str, dict[str, Any]]:
    """The installed TRL's version and seams."""
    import trl

    return trl.__version__, seams(Path(trl.__file__).parent)


def check_installed() -> None:
    """Refuse, in one line, an installed TRL whose seams moved (:func:`problems`)."""
    version, record = installed()
    found = problems(record)
    if found:
        raise TRLVersionError(f"trl {version}: {found[0]}; VigorGRPOTrainer is built on {EXTRA} "
                              f"(pip install 'vigor[trl]')")

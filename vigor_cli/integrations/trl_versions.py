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

EXTRA = "trl>=1.16,<1.17"
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

METRICS_READ = ("completions/mean_length", "completions/min_length", "completions/max_length",
                "completions/clipped_ratio", "completions/mean_terminated_length", "completions/min_terminated_length",
                "completions/max_terminated_length", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/low_mean",
                "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio", "vespo/phi_seq_mean",
                "clip_ratio/low_min", "clip_ratio/high_max")
"""Names in GRPOTrainer's ``_metrics`` that vigor reads, merges or rewrites (trl_metrics,
trl_update): a release that renames one would leave vigor reading nothing."""

_ROW = "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean(); " \
       "normalizer = self.current_gradient_accumulation_steps if mode == 'train' else 1.0; loss = loss / normalizer"
_TOKENS = "normalizer = inputs['num_items_in_batch'].clamp(min=1.0) / self.accelerator.num_processes; " \
          "loss = (per_token_loss * mask).sum() / normalizer"
_ACCUM = "normalizer = self.current_gradient_accumulation_steps if mode == 'train' else 1.0; loss = loss / normalizer"
NORMALISERS = {
    "grpo": _ROW, "sapo": _ROW,
    "bnpo": "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0); " + _ACCUM,
    "dr_grpo": "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length); " + _ACCUM,
    "cispo": _TOKENS, "dapo": _TOKENS, "vespo": _TOKENS,
    "luspo": "loss = (per_token_loss * mask).sum(-1).mean(); " + _ACCUM,
}
"""Each loss type's normalisation in ``_compute_loss`` (its branch's assignments to ``loss`` and
``normalizer``, as ``ast.unparse`` writes them), as read from TRL 1.16.0: what LOSS_KINDS and
trl_update's rescaling assume. A release that normalises otherwise is refused."""

METRIC_MEAN = ("def global_masked_mean(x):\n    if x.shape[1] == 1:\n        local_sum, local_count = (x.sum(), "
               "torch.tensor(float(x.shape[0]), device=x.device))\n    else:\n        local_sum, local_count = ((x * "
               "mask).sum(), mask.sum().float())\n    totals = self.accelerator.reduce(torch.stack([local_sum, "
               "local_count]), reduction='sum')\n    return (totals[0] / totals[1].clamp(min=1.0)).item()")
"""How ``_compute_loss`` averages its metrics over the ranks (1.16.0): at the sequence level
over every row forwarded, which trl_update.real_rows_only corrects for the filler rows."""

RECORDED = ("1.16.0",)
"""The releases whose source was read and recorded (tests/fixtures/trl_signatures.json) that
the path runs on: a trainer refuses any other release in one line."""

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


def _metric_names(tree: ast.Module) -> list[str]:
    """The literal names GRPOTrainer writes into ``self._metrics[mode][NAME]``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript):
            inner = node.value.value
            if isinstance(inner, ast.Attribute) and inner.attr == "_metrics" and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, str):
                names.add(node.slice.value)
    return sorted(names)


def _normalisers(fn: ast.FunctionDef) -> dict[str, str]:
    """Per loss type, the assignments to ``loss`` and ``normalizer`` in the first branch on
    ``self.loss_type`` that makes them (``_compute_loss``), unparsed."""
    out: dict[str, str] = {}
    for node in ast.walk(fn):
        if not isinstance(node, ast.If) or not any(
                isinstance(n, ast.Attribute) and n.attr == "loss_type" for n in ast.walk(node.test)):
            continue
        text = "; ".join(ast.unparse(st) for st in node.body if isinstance(st, (ast.Assign, ast.AugAssign)) and any(
            isinstance(t, ast.Name) and t.id in ("loss", "normalizer")
            for t in (st.targets if isinstance(st, ast.Assign) else [st.target])))
        if text:
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    out.setdefault(sub.value, text)
    return dict(sorted(out.items()))


def _nested(fn: ast.FunctionDef | None, name: str) -> str | None:
    """A function defined inside ``fn``, unparsed (comments dropped)."""
    for node in ast.walk(fn) if fn is not None else []:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.unparse(node)
    return None


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
        "metrics": _metric_names(trainer),
        "normalisers": {} if loss is None else _normalisers(loss),
        "metric_mean": _nested(loss, "global_masked_mean"),
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
    return out + meaning_problems(record)


def meaning_problems(record: Mapping[str, Any]) -> list[str]:
    """Where a release's meaning differs from what the path relies on: a metric vigor reads
    that it no longer writes, a loss type normalised otherwise, metrics averaged otherwise."""
    out = []
    gone = [m for m in METRICS_READ if m not in record.get("metrics", [])]
    if gone:
        out.append(f"GRPOTrainer no longer logs {', '.join(gone)}, which vigor reads")
    normalisers = record.get("normalisers") or {}
    moved = [t for t in record.get("loss_types", []) if normalisers.get(t) != NORMALISERS.get(t)]
    if moved:
        out.append(f"_compute_loss normalises {', '.join(moved)} otherwise than the micro-batched update assumes")
    if record.get("metric_mean") != METRIC_MEAN:
        out.append("_compute_loss averages its metrics over the ranks otherwise than vigor corrects them")
    return out


@functools.lru_cache(maxsize=1)
def installed() -> tuple[str, dict[str, Any]]:
    """The installed TRL's version and seams."""
    import trl

    return trl.__version__, seams(Path(trl.__file__).parent)


def check_installed() -> None:
    """Refuse, in one line, an installed TRL whose seams moved (:func:`problems`)."""
    version, record = installed()
    if version not in RECORDED:
        raise TRLVersionError(f"trl {version}: a release vigor has not read and recorded (recorded: "
                              f"{', '.join(RECORDED)}); pip install 'vigor[trl]' ({EXTRA})")
    found = problems(record)
    if found:
        raise TRLVersionError(f"trl {version}: {found[0]}; VigorGRPOTrainer is built on {EXTRA} "
                              f"(pip install 'vigor[trl]')")

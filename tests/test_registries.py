"""One decorator registry per extension point (strategies, engines, tasks, losses, advantage
scalings), and every list of names read from them: none is spelled out anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vigor_cli import grpo
from vigor_cli.allocation import registry
from vigor_cli.config import AllocationConfig, ConfigError
from vigor_cli.settings import build_config, known_names
from vigor_cli.rollout import ENGINES, make_engine, register_engine
from vigor_cli.tasks import EVAL_SETS, TASKS, get_task, register_task
from vigor_cli.verifiers.math_answers import BENCHMARKS as MATH_SIX
from vigor_cli.verifiers.math_answers import KNOWN as MATH_SETS

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for top in ("vigor_cli", "verifiers", "sandbox") for p in (REPO / top).rglob("*.py")]


def test_builtin_entries():
    assert registry.names() == ("vigor", "random", "difficulty", "grpo", "dapo", "greso", "pods",
                                "knapsack", "reinforce-ada", "pilot-commit", "auto")
    assert registry.budgeted() == ("vigor", "random", "difficulty", "knapsack", "reinforce-ada", "pilot-commit", "auto")
    assert set(AllocationConfig.section_models()) == {"greso", "pods", "knapsack", "reinforce-ada", "pilot-commit", "auto"}
    assert registry.in_family("vigor") == ("vigor", "random", "difficulty")
    assert all(s.summary for s in registry.REGISTRY.values())
    assert list(ENGINES) == ["hf", "vllm"] and ENGINES["vllm"].for_cuda
    assert list(TASKS) == ["tiny-math", "tiny-code", "tiny-facts", "tiny-ladder", "tiny-guess", "tiny-products", "math",
                           "code", "custom"]
    # every task that grades is a built-in reward (--reward NAME); the user's task is not one
    from vigor_cli.user.rewards import builtin_names

    assert builtin_names() == ["tiny-math", "tiny-code", "tiny-facts", "tiny-ladder", "tiny-guess", "tiny-products",
                               "math", "code"]
    assert list(EVAL_SETS) == ["tiny-math", "tiny-code", "tiny-guess", "tiny-products", *MATH_SETS, "lcb-v6"]
    from vigor_cli.episodes.registry import ENVIRONMENTS

    assert list(ENVIRONMENTS) == ["code-feedback", "higher-lower", "retry", "calculator"]
    assert all(e.summary for e in ENVIRONMENTS.values())
    assert {n: s.kind for n, s in EVAL_SETS.items() if s.kind == "code"} == {"tiny-code": "code", "lcb-v6": "code"}
    assert list(grpo.LOSS_AGGREGATIONS) == ["dapo", "grpo", "dr_grpo", "prompt_mean"]
    assert list(grpo.ADVANTAGE_SCALINGS) == ["group", "batch", "none"]


def test_a_strategy_registered_twice_under_one_name_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("grpo")(lambda cfg, p, seed: None)


def test_an_engine_registered_outside_is_accepted_and_built():
    built = []

    @register_engine("echo")
    def build(cfg, model, tokenizer):
        built.append(cfg.engine.kind)
        return "an engine"

    try:
        assert "echo" in known_names("engine")
        cfg = build_config(sets=["engine.kind=echo"])
        assert make_engine(cfg, None, None) == "an engine" and built == ["echo"]
    finally:
        ENGINES.pop("echo")
    with pytest.raises(ConfigError, match="unknown engine 'echo'"):
        build_config(sets=["engine.kind=echo"])


def test_a_task_registered_outside_is_accepted_with_its_benchmark():
    from vigor_cli.commands.eval import task_config_for
    from vigor_cli.tasks.tiny_math import TinyMathTask

    @register_task("tiny-sums", eval_sets={"sums": None})
    def build(cfg, workers):
        return TinyMathTask(split_seed=cfg.split_seed)

    try:
        cfg = build_config(sets=["task.name=tiny-sums"])
        assert isinstance(get_task(cfg.task), TinyMathTask)
        task_cfg, set_name = task_config_for("sums", None, None, None)  # what `vigor eval` asks
        assert (task_cfg.name, set_name) == ("tiny-sums", None)
    finally:
        TASKS.pop("tiny-sums")
        EVAL_SETS.pop("sums")


def test_a_scaling_and_a_loss_registered_outside_are_accepted():
    grpo.register_scaling("double")(lambda rewards, groups: 2 * rewards)
    grpo.register_aggregation("first")(lambda loss, mask, totals, rows: loss[0, 0])
    try:
        cfg = build_config(sets=["grpo.scale_rewards=double", "grpo.loss_agg=first"])
        assert grpo.compute_advantages([0.0, 1.0], ["a", "a"], cfg.grpo.scale_rewards).tolist() == [0.0, 2.0]
    finally:
        grpo.ADVANTAGE_SCALINGS.pop("double")
        grpo.LOSS_AGGREGATIONS.pop("first")


def _string_lists(path: Path):
    """(line, strings) of every tuple/list/set literal of two or more strings in a file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                yield node.lineno, {e.value for e in node.elts}


CHOSEN = {
    "vigor_cli/commands/probe.py": "the three arms `vigor probe` simulates: a choice, not the list",
    "vigor_cli/commands/train.py": "the tiny tasks that ship a tuned config file of their name",
    "vigor_cli/study/transfer.py": "the strategies whose verdicts against grpo the probe predicts: a choice",
}
"""Files whose literals are deliberate subsets (a study's arms), not lists of every name."""


@pytest.mark.parametrize("what, names, home", [
    ("strategies", set(registry.names()), tuple(CHOSEN)),
    ("math benchmarks", set(MATH_SETS), ("verifiers/math_answers.py",)),
    ("tasks", set(TASKS) - {"math", "code"}, tuple(CHOSEN)),
])
@pytest.mark.slow
def test_no_list_of_names_outside_its_registry(what, names, home):
    """A literal naming two or more strategies (or math benchmarks, or tiny tasks) outside
    the registries: a list that drifts when one is added."""
    found = []
    for path in SOURCES:
        rel = path.relative_to(REPO).as_posix()
        if rel in home:
            continue
        for line, strings in _string_lists(path):
            if len(strings & names) >= 2 and strings <= names | {"all"}:
                found.append(f"{rel}:{line}")
    assert found == [], f"{what} listed by hand"


def test_docs_tables_cover_every_registered_name():
    table = (REPO / "vigor_cli" / "allocation" / "README.md").read_text()
    for name in registry.names():
        assert f"`{name}`" in table
    assert set(MATH_SIX) <= set(MATH_SETS)
    from vigor_cli.config import RunConfig

    described = RunConfig.model_fields["task"].annotation.model_fields["name"].description
    assert all(name in described for name in TASKS)

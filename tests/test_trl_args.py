"""TRL's own arguments and checks on the TRL path: ``tools=`` passes through TRL's tool loop
(or is refused in one line where it cannot), the health checks that read completions see
every rank's, a code task's hard-coding signs reach the ``hard_coding`` check, and GSPO's
clip fractions count the rows that carry loss tokens only. CPU, the bundled tiny model and
TRL's real GRPOTrainer; the two-process checks are in tests/test_trl_integration.py (slow)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from test_trl_core import keyed_reward  # noqa: E402
from vigor_cli.config import TaskConfig  # noqa: E402
from vigor_cli.integrations.trl import VigorGRPOConfig, VigorGRPOTrainer, task_dataset  # noqa: E402
from vigor_cli.model.loading import TINY_DIR  # noqa: E402
from vigor_cli.tasks import get_task  # noqa: E402

CALLS: list[tuple[int, int]] = []


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    CALLS.append((a, b))
    return a * b


def _tool_tokenizer():
    """The tiny model's tokenizer under TRL's own Qwen2.5 chat template (which renders tools)."""
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    tok.chat_template = (Path(os.path.dirname(trl.__file__)) / "chat_templates" / "qwen2_5.jinja").read_text()
    return tok


def _tools_trainer(tmp_path: Path, conversational: bool = True, **kw) -> VigorGRPOTrainer:
    from transformers import AutoModelForCausalLM

    tok = _tool_tokenizer()
    data = task_dataset(get_task(TaskConfig(name="tiny-math")), tok).select(range(8))
    if conversational:
        data = data.map(lambda r: {"prompt": [{"role": "user", "content": r["prompt"][:40]}]})
    args = VigorGRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4,
                           num_generations=4, max_completion_length=224, logging_steps=1, report_to=[],
                           save_strategy="no", use_cpu=True, seed=0, bf16=False, prompts_per_step=1, beta=0.0,
                           vigor={"strategy": "grpo", "budget": 4})
    # Qwen2.5's template with a tool schema makes ~900-token prompts (a character per token): past the tiny model's nominal 256
    # positions (rotary: it runs past them), where TRL's tool loop drops every tool result
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, max_position_embeddings=2048)
    tr = VigorGRPOTrainer(model=model, reward_funcs=[keyed_reward],
                          args=args, train_dataset=data, processing_class=tok, tools=[multiply], **kw)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    return tr


@pytest.mark.slow
def test_tools_pass_through_trls_tool_loop(tmp_path):
    """The model's first turn calls the tool (a fixed completion stands in for the tiny
    model's sampling, which never writes a tool call); TRL's loop runs the real tool on every
    row's call, appends its result (masked out of the loss) and generates on: before, the
    rounds bypassed the hook that builds TRL's tool tables (AttributeError _sync_tool_dicts)."""
    tr = _tools_trainer(tmp_path)
    call = '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call><|im_end|>'
    ids = tr.processing_class(call, add_special_tokens=False)["input_ids"]
    real = tr._generate_single_turn
    turns = []

    def first_turn_calls(prompt_ids, *rest, **kw):
        turns.append(len(prompt_ids))
        if len(turns) == 1:
            return [list(ids) for _ in prompt_ids], None
        return real(prompt_ids, *rest, **kw)

    tr._generate_single_turn = first_turn_calls
    CALLS.clear()
    out = tr._generate_and_score_completions([])
    assert len(turns) >= 2 and CALLS == [(6, 7)] * turns[0]  # every row's call ran, once
    rows = tr.last_rounds.outputs[0]
    assert all("42" in str(c) for c in rows[3])  # the tool's result is in each completion
    assert (out["tool_mask"] == 0).any() and (out["tool_mask"][:, : len(ids)] == 1).all()
    assert tr._metrics["train"]["tools/call_frequency"][-1] > 0


@pytest.mark.slow
def test_tools_with_plain_text_prompts_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^tools= with plain-text prompts \(row 0 of train_dataset\)") as e:
        _tools_trainer(tmp_path, conversational=False)
    assert "\n" not in str(e.value)


class Counter:
    """An environment in TRL's convention: reset, and one tool."""

    def reset(self, **kwargs):
        return None

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first integer
            b: the second integer
        """
        return a + b


@pytest.mark.slow
def test_tools_with_an_environment_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^tools= with an environment") as e:
        _tools_trainer(tmp_path, environment_factory=Counter)
    assert "\n" not in str(e.value)


HARD_CODED = "```python\nn = int(input())\nprint({-45: -32, 11: 24}[n])\n```"
"""tiny-code/train/0 (print n+13) answered from its public tests' table: passes both public
tests, fails every private one, and quotes the public outputs."""


@pytest.mark.slow
def test_hard_coding_reaches_the_health_check_on_the_trl_path(tmp_path):
    """The code task's real verifier and sandbox grade a hard-coded program: its signs reach
    the step's samples and the ``hard_coding`` check reads 1 (it read 0 whatever TRL graded)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.integrations import trl_metrics
    from vigor_cli.integrations.trl import task_reward

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    task = get_task(TaskConfig(name="tiny-code"))
    data = task_dataset(task, tok).select([0])
    args = VigorGRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4,
                           num_generations=4, max_completion_length=96, logging_steps=1, report_to=[],
                           save_strategy="no", use_cpu=True, seed=0, bf16=False, prompts_per_step=1, beta=0.0,
                           vigor={"strategy": "grpo", "budget": 4})
    try:
        tr = VigorGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[task_reward(task)],
                              args=args, train_dataset=data, processing_class=tok)
        tr.model.train()
        ids = tok(HARD_CODED, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        tr._generate_single_turn = lambda prompt_ids, *a, **k: ([list(ids) for _ in prompt_ids], None)
        tr._generate_and_score_completions([])
        samples = tr.last_batch.generated
        assert samples and all(s.details == {"hard_coded": True, "quotes_outputs": True} for s in samples)
        assert all(s.reward == 0.0 for s in samples)  # it fails the private tests
        _, checks = trl_metrics.step_health(tr, tr.last_batch, {})
        assert checks["health/hard_coding"] == 1.0 and checks["health/hard_coded"] == 1.0
    finally:
        task.close()


def test_a_graded_programs_signs_are_read_per_row_and_others_carry_none():
    """trl_checks.hard_coding_signs: a reward function's signs by (uid, completion text) become
    one row of flags each; a row no function graded as a program gets (0, 0, 0)."""
    from types import SimpleNamespace

    from vigor_cli.integrations import trl_checks

    def reward(prompts, completions, **kw):
        return [0.0] * len(completions)

    reward.vigor_signs = {("a", "x"): {"hard_coded": True, "quotes_outputs": False},
                          ("b", "y"): {"hard_coded": False, "quotes_outputs": True}}
    acc = SimpleNamespace(device="cpu", gather=lambda t: t, num_processes=1)
    tr = SimpleNamespace(reward_funcs=[reward], vigor_uid_column="uid", accelerator=acc)
    flags = trl_checks.hard_coding_signs(tr, [{"uid": "a"}, {"uid": "b"}, {"uid": "a"}], ["x", "y", "other"])
    assert flags.tolist() == [[1, 1, 0], [1, 0, 1], [0, 0, 0]]
    assert trl_checks.every_rank_texts(tr, {("a", 0): "x"}) == {("a", 0): "x"}


def test_tool_refusals_read_the_dataset_and_the_environment():
    """trl_checks.tool_refusals without a model: the first plain-text row is named; message
    lists pass; an environment is refused whatever the rows; no tools, nothing."""
    from types import SimpleNamespace

    from datasets import Dataset

    from vigor_cli.integrations import trl_checks

    chat = [{"role": "user", "content": "2+2?"}]
    mixed = SimpleNamespace(train_dataset=Dataset.from_dict({"prompt": [chat, chat]}))
    assert trl_checks.tool_refusals(mixed, [multiply], False) == []
    plain = SimpleNamespace(train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}))
    (line,) = trl_checks.tool_refusals(plain, [multiply], False)
    assert line.startswith("tools= with plain-text prompts (row 0 of train_dataset)") and "\n" not in line
    assert trl_checks.tool_refusals(mixed, [multiply], True)[0].startswith("tools= with an environment")
    assert trl_checks.tool_refusals(plain, [], False) == trl_checks.tool_refusals(plain, None, True) == []

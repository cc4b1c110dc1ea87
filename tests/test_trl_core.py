"""The TRL path over the shared rollout core (issue 23): each bug that came from the step
existing twice, on CPU with the bundled tiny model and TRL 1.16's real GRPOTrainer. The
two-process checks (rank agreement, token balance, evaluation on every rank) are in
tests/test_trl_integration.py (slow)."""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from vigor_cli.allocation.base import Request  # noqa: E402
from vigor_cli.commands.train import DEFAULT_CONFIG  # noqa: E402
from vigor_cli.config import TaskConfig  # noqa: E402
from vigor_cli.settings import build_config  # noqa: E402
from vigor_cli.errors import UserError  # noqa: E402
from vigor_cli.integrations.trl import (  # noqa: E402
    ROLLOUT_INDEX, RankDisagreement, StepLayout, VigorGRPOConfig, VigorGRPOTrainer, check_agreement,
    model_load_kwargs, round_digest, task_dataset, trl_args,
)
from vigor_cli.model.loading import TINY_DIR  # noqa: E402
from vigor_cli.tasks import get_task  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def keyed_reward(prompts, completions, uid, rollout_index, **kwargs):
    """1 with probability p(uid) in {1/4, 1/2, 3/4}, by a hash of (uid, index): groups vary."""
    out = []
    for u, i in zip(uid, rollout_index):
        p = (int(hashlib.sha256(u.encode()).hexdigest(), 16) % 3 + 1) / 4
        draw = int(hashlib.sha256(f"{u}:{i}".encode()).hexdigest(), 16) % 1000 / 1000
        out.append(1.0 if draw < p else 0.0)
    return out


def _trainer(tmp_path: Path, reward=keyed_reward, tokenizer=None, model=None, **kw) -> VigorGRPOTrainer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = tokenizer or AutoTokenizer.from_pretrained(TINY_DIR)
    args = dict(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=8, num_generations=8,
                max_completion_length=8, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                bf16=False, lr_scheduler_type="constant", prompts_per_step=2, beta=0.0)
    peft_config = kw.pop("peft_config", None)
    args.update(kw)
    data = task_dataset(get_task(TaskConfig(name="tiny-math")), tok)
    trainer = VigorGRPOTrainer(model=model or AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[reward],
                               args=VigorGRPOConfig(**args), train_dataset=data, processing_class=tok,
                               peft_config=peft_config)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop; the tests call TRL's hooks
    return trainer


# --------------------------------------------------------------------------- loss mask
@pytest.mark.slow
def test_rows_outside_the_update_have_a_zero_loss_mask_and_leave_the_normaliser(tmp_path):
    """PODS, 8 generated and 2 kept per prompt: TRL's token normaliser counts the kept rows'
    tokens only, and the rows outside the update carry a zero loss mask and advantage (the
    micro-batched update's gradient: tests/test_trl_update.py)."""
    tr = _trainer(tmp_path, vigor={"strategy": "pods", "pods_n": 8, "pods_m": 2})
    out = tr._generate_and_score_completions([])
    batch = tr.last_batch
    kept = [s for s in batch.generated if s.in_update]
    assert len(batch.generated) == 16 and len(kept) == 4 == len(batch.samples)
    loss_mask = out["completion_mask"] * out["tool_mask"]
    assert int(out["num_items_in_batch"]) == sum(s.tokens for s in kept) == int(loss_mask.sum())
    used = [i for i in range(len(loss_mask)) if loss_mask[i].any()]
    assert len(used) == 4
    assert all(out["advantages"][i] == 0 for i in range(len(loss_mask)) if i not in used)
    assert any(out["advantages"][i] != 0 for i in used)


# --------------------------------------------------------------------------- None rewards
@pytest.mark.slow
def test_a_reward_of_none_is_unscored_not_zero(tmp_path):
    def sometimes_none(prompts, completions, uid, rollout_index, **kw):
        rewards = keyed_reward(prompts, completions, uid, rollout_index)
        return [None if i % 4 == 3 else r for r, i in zip(rewards, rollout_index)]

    tr = _trainer(tmp_path, reward=sometimes_none, vigor={"strategy": "grpo", "group_size": 4},
                  per_device_train_batch_size=4, num_generations=4)
    out = tr._generate_and_score_completions([])
    batch = tr.last_batch
    unscored = [s for s in batch.generated if s.reward is None]
    assert [s.index for s in unscored] == [3, 3]  # one per prompt, not a 0
    assert not any(s.in_update for s in unscored)
    mask = (out["completion_mask"] * out["tool_mask"]).sum(1)
    assert int((mask > 0).sum()) == 6 and int(out["num_items_in_batch"]) == sum(s.tokens for s in batch.samples)
    record = json.loads((tmp_path / "run" / "allocation.jsonl").read_text().splitlines()[0])
    assert record["totals"]["unscored"] == 2 and record["totals"]["rollouts"] == 8
    assert all(len(rd["rewards"]) == 3 for p in record["prompts"] for rd in p["rounds"])
    from vigor_cli.integrations import trl_metrics

    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # the step's line waits for its update
    trl_metrics.finish_step(tr, {})
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    scored = [s.reward for s in batch.generated if s.reward is not None]
    assert metrics["reward/unscored"] == 2 and metrics["reward/mean"] == pytest.approx(sum(scored) / 6)


# --------------------------------------------------------------------------- stop ids
@pytest.mark.slow
def test_vigor_stop_ids_reach_trls_generation(tmp_path):
    """A base model under a Qwen2.5-style chat template (tests/test_stop_tokens.py's): TRL's
    generation stops at <|im_end|>, as `vigor train` does, instead of writing past it."""
    from test_stop_tokens import QWEN25_TEMPLATE, ids, qwen_style_tokenizer  # noqa: F401
    from transformers import AutoModelForCausalLM

    tok = qwen_style_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.float32)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    end, text_end = ids(tok, "<|im_end|>", "<|endoftext|>")
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight[end] = weight[2] * 1.5
        weight[text_end] = 0.0
    model.generation_config.eos_token_id = text_end
    tr = _trainer(tmp_path, tokenizer=tok, model=model, max_completion_length=24,
                  generation_kwargs={"do_sample": False}, vigor={"strategy": "grpo", "group_size": 2},
                  per_device_train_batch_size=2, num_generations=2)
    assert end in tr.eos_token_ids and end in tr.generation_config.eos_token_id
    rows = [{**tr.train_dataset[i], ROLLOUT_INDEX: 0} for i in range(4)]
    out, _ = tr._generate_round(rows)
    completions = out[1]
    assert any(end in c for c in completions)
    assert all(c.index(end) == len(c) - 1 for c in completions if end in c)  # nothing after the end of turn
    # TRL's vLLM path takes them as SamplingParams.stop_token_ids (vLLM 0.33's field, tests/fixtures)
    fields = json.loads((REPO / "tests" / "fixtures" / "vllm_signatures.json").read_text())["fields"]
    assert "stop_token_ids" in fields["SamplingParams"]["fields"]
    tr.use_vllm, tr.vllm_generation = True, SimpleNamespace(generation_kwargs={"stop_token_ids": [7]})
    tr._use_vigor_stops()
    assert tr.vllm_generation.generation_kwargs["stop_token_ids"][0] == 7 and end in tr.vllm_generation.generation_kwargs["stop_token_ids"]


# --------------------------------------------------------------------------- settings refused or honoured
def test_gradient_accumulation_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=2, steps_per_generation=1: VigorGRPOTrainer needs 1"):
        VigorGRPOConfig(output_dir=str(tmp_path), gradient_accumulation_steps=2, steps_per_generation=1,
                        per_device_train_batch_size=2, num_generations=2, use_cpu=True, report_to=[])
    from vigor_cli.integrations.trl import main

    assert main(["--cpu", "--output-dir", str(tmp_path / "out"), "--trl", "gradient_accumulation_steps=2",
                 "--trl", "steps_per_generation=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gradient_accumulation_steps=2" in err
    assert not (tmp_path / "out").exists()


def test_precision_and_4bit_follow_the_model_section(tmp_path, capsys):
    cpu = torch.device("cpu")
    cfg = build_config(DEFAULT_CONFIG)
    args = trl_args(cfg, tmp_path, use_cpu=True)
    assert (args.bf16, args.fp16) == (False, False)  # float32 on CPU, as vigor train: no autocast
    assert model_load_kwargs(cfg.model, cpu)["dtype"] == torch.float32
    full = build_config(DEFAULT_CONFIG, sets=["model.dtype=bfloat16", "model.lora.enabled=false"])
    assert trl_args(full, tmp_path, use_cpu=True).bf16 is True  # the 16-bit compute under autocast...
    kwargs = model_load_kwargs(full.model, cpu)
    assert kwargs["dtype"] == torch.float32  # ... of float32 master weights
    from transformers import AutoModelForCausalLM

    assert next(AutoModelForCausalLM.from_pretrained(TINY_DIR, **kwargs).parameters()).dtype == torch.float32
    plain = build_config(DEFAULT_CONFIG, sets=["model.dtype=bfloat16", "model.lora.enabled=false",
                                               "model.fp32_master_weights=false"])
    assert model_load_kwargs(plain.model, cpu)["dtype"] == torch.bfloat16
    four = build_config(DEFAULT_CONFIG, sets=["model.load_in_4bit=true", "model.lora.enabled=true"])
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="model.load_in_4bit .* needs a CUDA GPU"):
            model_load_kwargs(four.model, cpu)
        from vigor_cli.integrations.trl import main

        capsys.readouterr()
        assert main(["--cpu", "--output-dir", str(tmp_path / "q"), "--set", "model.load_in_4bit=true",
                     "--set", "model.lora.enabled=true"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: model.load_in_4bit") and err.count("\n") == 1


@pytest.mark.slow
def test_build_trainer_runs_the_tiny_model_on_one_thread_as_vigor_train(tmp_path):
    """model.cpu_threads (0: one thread for a model this small) applies on the TRL path too:
    without it the CPU run spent most of its time in OpenMP threads (bench/trl_path.py)."""
    from vigor_cli.integrations.trl import build_trainer

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = build_config(DEFAULT_CONFIG, sets=["train.steps=1", "train.eval_limit=2"])
        trainer, held_out, task = build_trainer(cfg, tmp_path / "out", use_cpu=True)
        task.close()
        assert torch.get_num_threads() == 1
        assert next(trainer.model.parameters()).dtype == torch.float32 and trainer.args.bf16 is False
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- ranks
def test_the_ranks_compare_a_hash_of_each_rounds_requests():
    a = [Request("q1", 2), Request("q2", 4)]
    assert round_digest(3, 0, a) == round_digest(3, 0, list(a))
    assert len({round_digest(3, 0, a), round_digest(3, 1, a), round_digest(4, 0, a),
                round_digest(3, 0, [Request("q1", 2), Request("q2", 3)])}) == 4
    check_agreement([round_digest(3, 0, a)] * 4, 3, 0)
    with pytest.raises(RankDisagreement, match=r"step 3 round 1: rank\(s\) \[2\] asked for other rollouts"):
        check_agreement([1, 1, 2, 1], 3, 0)


def test_rows_are_balanced_across_ranks_by_tokens():
    """All 16 last-round rollouts of one hard prompt no longer land on one rank: a round is dealt
    by estimated tokens, and over random rounds the ranks' tokens stay within two rollouts'
    cost (one, were it not for keeping their rollout counts within one)."""
    layout = StepLayout(2)
    cost = {"hard": 100.0, "easy": 10.0}
    keys, chunks = layout.add_round(["hard"] * 16 + ["easy"] * 16, cost.get)
    assert [sum(1 for (uid, _), real in c if uid == "hard" and real) for c in chunks] == [8, 8]
    rng = random.Random(0)
    for _ in range(200):
        ranks = rng.randint(2, 6)
        layout = StepLayout(ranks)
        costs = {f"q{i}": rng.choice([5.0, 20.0, 300.0]) for i in range(8)}
        loads = [0.0] * ranks
        for _ in range(rng.randint(1, 4)):
            flat = [u for u in rng.sample(sorted(costs), rng.randint(1, 8)) for _ in range(rng.randint(1, 16))]
            keys, chunks = layout.add_round(flat, costs.get)
            for r, chunk in enumerate(chunks):
                loads[r] += sum(costs[k[0]] for k, real in chunk if real)
            layout.tokens = [int(x) for x in loads]  # as if measured exactly
            assert max(layout.spent) - min(layout.spent) <= 1
        assert max(loads) - min(loads) <= 2 * max(costs.values())


# --------------------------------------------------------------------------- seams of TRL's private API
def test_the_trl_hooks_used_have_the_signatures_of_trl_1_16():
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    sig = list(inspect.signature(GRPOTrainer._generate_single_turn).parameters)
    assert sig == ["self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"]
    assert list(inspect.signature(GRPOTrainer._calculate_rewards).parameters) == [
        "self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]
    source = inspect.getsource(VLLMGeneration.generate)  # what evaluation's settings override
    for attribute in ("self.temperature", "self.top_p", "self.max_completion_length", "self.generation_kwargs"):
        assert attribute in source


def test_importance_sampling_settings_reach_trl():
    """grpo.importance_sampling and its cap become TRL's vLLM correction in token-truncate mode
    (TRL's own default masks whole sequences); off turns it off."""
    from vigor_cli.integrations.trl import trl_args

    on = trl_args(build_config(sets=["grpo.importance_sampling_cap=2.5"]), "unused", use_cpu=True)
    assert (on.vllm_importance_sampling_correction, on.vllm_importance_sampling_mode,
            on.vllm_importance_sampling_clip_max) == (True, "token_truncate", 2.5)
    off = trl_args(build_config(sets=["grpo.importance_sampling=off"]), "unused", use_cpu=True)
    assert off.vllm_importance_sampling_correction is False

"""The training loop end to end on the bundled tiny model, the real tasks and verifiers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vigor_cli import cli
from vigor_cli.settings import build_config
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import Trainer, train

ROOT = Path(__file__).resolve().parents[1]
TRAIN_KEYS = [
    "rollouts/step", "rollouts/cumulative", "tokens/step", "tokens/cumulative", "reward/mean",
    "reward/std", "reward/unscored", "reward/grading_errors", "groups/count", "groups/zero_var_frac",
    "rollouts/zero_variance", "rollouts/zero_variance_share", "completions/mean_length",
    "completions/max_length", "completions/truncated_frac", "losses/loss", "losses/clipfrac_low",
    "losses/clipfrac_high", "losses/kl", "losses/entropy", "losses/grad_norm", "time/generate",
    "time/reward", "time/update", "time/step", "time/elapsed", "engine/logprob_diff",
]
STRATEGIES = ["vigor", "grpo", "dapo", "greso", "pods", "random", "difficulty"]


def tiny_sets(tmp_path: Path, name: str, *extra: str) -> list[str]:
    """Small, quick settings for the tiny model on tiny-math."""
    return [
        "model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-math",
        "train.prompts_per_step=4", "train.steps=2", "train.eval_limit=8", "train.eval_every=0",
        "train.save_every=0", "train.log_completions_every=1", "sampling.max_new_tokens=8",
        "allocation.group_size=4", "allocation.rollouts_per_prompt=4",
        "allocation.pods.n=4", "allocation.pods.m=2",
        "allocation.gen_batch_multiplier=2", "allocation.max_gen_batches=50",
        "grpo.learning_rate=1e-3", "task.max_prompt_tokens=32", "engine.kind=hf",
        "engine.gen_batch_tokens=2048", "train.reward_workers=1",
        f"train.output_dir={tmp_path}", f"train.run_name={name}", *extra,
    ]


def quiet():
    from rich.console import Console

    return Console(file=open(os.devnull, "w"))


def strip_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_two_steps_each_strategy(tmp_path, strategy):
    cfg = build_config(sets=tiny_sets(tmp_path, strategy, f"allocation.strategy={strategy}"))
    summary = train(cfg, out=quiet())
    run = RunDir(tmp_path / strategy)
    rows = run.metrics()
    train_rows = [r for r in rows if "reward/mean" in r]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    assert [r["step"] for r in evals] == [0, 2]
    for r in train_rows:
        missing = [k for k in TRAIN_KEYS if k not in r]
        assert missing == []
    # every generated rollout is counted, and matches the allocator's own record
    records = [json.loads(line) for line in (run.path / "allocation.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert [r["rollouts/step"] for r in train_rows] == [r["totals"]["rollouts"] for r in records]
    assert train_rows[1]["rollouts/cumulative"] == sum(r["rollouts/step"] for r in train_rows)
    assert all("text" in p for r in records for p in r["prompts"])
    assert summary["rollouts"] == train_rows[-1]["rollouts/cumulative"]
    ckpt = run.latest_checkpoint()
    assert ckpt.name == "step-2"
    for f in ("config.json", "trainer_state.pt", "allocator.json", "data_state.json", "tokenizer.json"):
        assert (ckpt / f).exists(), f
    assert (run.path / "eval" / "step-2.json").exists() and (run.path / "summary.json").exists()
    comps = (run.path / "completions.jsonl").read_text().splitlines()
    assert comps and {"step", "uid", "text", "reward", "advantage"} <= set(json.loads(comps[0]))


@pytest.mark.slow
def test_vigor_budget_and_logprob_check(tmp_path):
    # beta > 0 sends every row through the update's forward pass (with beta = 0, rows with
    # zero advantage are skipped), so the log-prob check always has tokens to compare
    cfg = build_config(sets=tiny_sets(tmp_path, "v", "train.steps=1", "grpo.beta=0.01"))
    train(cfg, out=quiet())
    row = [r for r in RunDir(tmp_path / "v").metrics() if "reward/mean" in r][0]
    # T=4 rounds at m0=2, gamma=2, alpha=0.5 spend group_size x prompts = 4 x 4
    assert row["rollouts/step"] == 16
    # the engine samples from the policy itself: its log-probs match the update's recompute
    assert row["engine/logprob_diff"] is not None
    assert row["engine/logprob_diff"] < 1e-4


@pytest.mark.slow
def test_micro_batches_leave_the_update_unchanged(tmp_path):
    def build(budget: int) -> Trainer:
        cfg = build_config(sets=tiny_sets(tmp_path, f"mb{budget}", f"grpo.micro_batch_tokens={budget}",
                                          "allocation.strategy=grpo", "grpo.beta=0.05"))
        return Trainer(cfg, RunDir(tmp_path / f"mb{budget}"), None, quiet())

    big, small = build(4096), build(16)
    samples = big.rollout_phase(1).samples
    assert any(s.advantage != 0 for s in samples), "needs a group with reward variance"
    m_big = big.learner.update(samples)
    m_small = small.learner.update(samples)
    assert m_small["losses/loss"] == pytest.approx(m_big["losses/loss"], rel=1e-5, abs=1e-7)
    # gradients of the step (left on the parameters after the optimizer step) agree
    for p, q in zip(big.learner.model.parameters(), small.learner.model.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("lora", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tmp_path, monkeypatch, lora):
    sets = tiny_sets(tmp_path, "x", "train.steps=4", "train.save_every=2", "train.eval_every=2",
                     f"model.lora.enabled={str(lora).lower()}", "grpo.mu=2", "grpo.beta=0.01")
    train(build_config(sets=sets + ["train.run_name=whole"]), out=quiet())

    original = Trainer.train_step

    def crash_at_three(self, step):
        if step == 3:
            raise KeyboardInterrupt  # killed after the step-2 checkpoint
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", crash_at_three)
    with pytest.raises(KeyboardInterrupt):
        train(build_config(sets=sets + ["train.run_name=cut"]), out=quiet())
    monkeypatch.setattr(Trainer, "train_step", original)
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')  # a line torn by the kill
    train(resume=tmp_path / "cut", out=quiet())

    whole = strip_times(RunDir(tmp_path / "whole").metrics())
    resumed = strip_times(RunDir(tmp_path / "cut").metrics())
    assert [r["step"] for r in resumed] == [0, 1, 2, 2, 3, 4, 4]
    assert resumed == whole


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--prompts-per-step", "100000"], "train.prompts_per_step"),
        (["--set", "grpo.epsilon=-1"], "grpo.epsilon"),
        (["--set", "train.stepz=3"], "unknown config key 'train.stepz'"),
        (["--set", "allocation.budget=3"], "allocation.budget"),
        (["--strategy", "best"], "allocation.strategy"),
        (["--set", "grpo.micro_batch_tokens=16", "--set", "sampling.max_new_tokens=64"], "grpo.micro_batch_tokens"),
        (["--load-in-4bit", "--set", "model.lora.enabled=true"], "CUDA"),
    ],
)
def test_bad_config_exits_2_and_names_the_key(tmp_path, capsys, args, needle):
    if "--load-in-4bit" in args and torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--output-dir", str(tmp_path), "--run-name", "bad", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert not (tmp_path / "bad").exists()  # nothing written for a rejected config


def test_resume_refuses_other_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--resume", str(tmp_path), "--seed", "3"])
    assert e.value.code == 2 and "--seed" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path):
    """A real SIGKILL after the first checkpoint; the resumed run's metrics equal a whole run's."""
    base = [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(tmp_path)]
    sets = []
    for s in tiny_sets(tmp_path, "unused", "train.steps=6", "train.save_every=2", "train.eval_every=3"):
        if not s.startswith(("train.output_dir", "train.run_name")):
            sets += ["--set", s]
    subprocess.run(base + ["--run-name", "whole", *sets], check=True, capture_output=True, cwd=ROOT)
    proc = subprocess.Popen(base + ["--run-name", "killed", *sets], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 300
    while time.time() < deadline and not (ckpts / "step-2" / "COMPLETE").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(base[:4] + ["--resume", str(tmp_path / "killed")], check=True, capture_output=True, cwd=ROOT)
    whole = strip_times(RunDir(tmp_path / "whole").metrics())
    resumed = strip_times(RunDir(tmp_path / "killed").metrics())
    assert resumed == whole


@pytest.mark.slow
def test_tiny_code_end_to_end_through_the_sandbox(tmp_path):
    sets = [s for s in tiny_sets(tmp_path, "code") if not s.startswith(("task.name", "sampling.max_new_tokens", "task.max_prompt_tokens"))]
    cfg = build_config(sets=sets + ["task.name=tiny-code", "sampling.max_new_tokens=48", "task.max_prompt_tokens=128"])
    train(cfg, out=quiet())
    rows = [r for r in RunDir(tmp_path / "code").metrics() if "reward/mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    # the sandbox's isolation level and the hard-coding check's numbers, every step
    assert all(r["sandbox/isolation"] == "full" and r["sandbox/memory_cgroup"] == 1.0 for r in rows)
    assert all(0.0 <= r["health/hard_coding"] <= 1.0 for r in rows)
    comps = [json.loads(x) for x in (tmp_path / "code" / "completions.jsonl").read_text().splitlines()]
    # the sandboxed verifier's verdicts come back as reasons
    assert comps and all(c["reason"] for c in comps)

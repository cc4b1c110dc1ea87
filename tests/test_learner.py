"""The Learner on its own (the real tiny model, no loop), and the loop's stops by steps or
rollouts, its evaluation schedule by rollouts and its cleanup, through the real trainer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from test_trainer import quiet, strip_times, tiny_sets
from vigor_cli.settings import build_config
from vigor_cli.train.learner import Learner
from vigor_cli.model.loading import load_tokenizer, save_policy
from vigor_cli.rollout.base import Rollout
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import RolloutBatch, Sample, Trainer, train


# --------------------------------------------------------------------------- the Learner alone
def _learner_cfg(tmp_path: Path, *extra: str):
    return build_config(sets=tiny_sets(tmp_path, "learner", "grpo.beta=0.02", "grpo.mu=2", *extra))


def _samples(tokenizer) -> tuple[dict[str, list[int]], list[Sample]]:
    """Two prompts, two completions each, rewards 1/0 so every advantage is +-1."""
    prompts = {"a": tokenizer.encode("What is 2 + 3?"), "b": tokenizer.encode("What is 7 - 4?")}
    texts = {"a": ["\\boxed{5}", "\\boxed{6}"], "b": ["\\boxed{3}", "\\boxed{9}"]}
    samples = []
    for uid, pair in texts.items():
        for k, text in enumerate(pair):
            ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
            ro = Rollout(token_ids=ids, logprobs=[-1.0] * len(ids), text=text, truncated=False)
            samples.append(Sample(uid, ro, reward=1.0 - k, reason="", round=0, advantage=1.0 - 2 * k))
    return prompts, samples


def _params(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.model.parameters()]


@pytest.mark.slow
def test_learner_state_round_trip_continues_the_update_exactly(tmp_path):
    """A learner saved after one update (weights + state_dict) and loaded into a fresh one
    makes the same second update as the learner that never stopped: the optimizer's moments
    and the schedule's position travel with state_dict."""
    cfg = _learner_cfg(tmp_path, "grpo.warmup_steps=3")
    tokenizer = load_tokenizer(cfg.model)
    prompt_ids, samples = _samples(tokenizer)
    torch.manual_seed(0)
    whole = Learner(cfg, tokenizer.pad_token_id, prompt_ids)
    start = _params(whole)
    first = whole.update(samples)
    assert first["losses/grad_norm"] > 0 and first["losses/kl"] == pytest.approx(0.0, abs=1e-6)
    assert any(not torch.equal(a, p) for a, p in zip(start, whole.model.parameters()))
    whole.release_gradients()
    assert all(p.grad is None for p in whole.model.parameters())
    save_policy(whole.model, tokenizer, tmp_path / "ckpt")
    state = whole.state_dict()
    torch.save(state, tmp_path / "ckpt" / "learner.pt")
    second = whole.update(samples)

    resumed = Learner(cfg, tokenizer.pad_token_id, prompt_ids, resume_from=tmp_path / "ckpt")
    resumed.load_state_dict(torch.load(tmp_path / "ckpt" / "learner.pt", weights_only=True))
    again = resumed.update(samples)
    assert again["lr"] == second["lr"] > first["lr"]  # warm-up continued, not restarted
    assert again["losses/loss"] == pytest.approx(second["losses/loss"], rel=1e-6)
    for p, q in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-7)

    # without the state (fresh AdamW moments, schedule at 0) the same weights step elsewhere
    fresh = Learner(cfg, tokenizer.pad_token_id, prompt_ids, resume_from=tmp_path / "ckpt")
    assert fresh.update(samples)["lr"] == first["lr"]
    assert any(not torch.allclose(p, q, atol=1e-7) for p, q in zip(whole.model.parameters(), fresh.model.parameters()))


def test_learner_logprobs_match_the_weight_check(tmp_path):
    """The update's weight check scores the engine's log-probs against the learner's own:
    engine log-probs taken from the learner itself pass, wrong ones fail."""
    cfg = _learner_cfg(tmp_path, "engine.weight_check=warn")
    tokenizer = load_tokenizer(cfg.model)
    prompt_ids, samples = _samples(tokenizer)
    learner = Learner(cfg, tokenizer.pad_token_id, prompt_ids)
    learner.watch_engine(object())  # an engine with its own weights: base = the KL reference
    assert learner.weight_base is learner.reference
    lp, _, mask = learner.logprobs(learner.model, samples, list(range(len(samples))), 1.0)
    assert lp.shape == mask.shape and float(mask.sum()) == sum(len(s.rollout.token_ids) for s in samples)
    for k, s in enumerate(samples):
        s.rollout.logprobs = lp[k, : len(s.rollout.token_ids)].tolist()
    assert not learner.check_engine_weights(samples, 1.0).failed
    for s in samples:
        s.rollout.logprobs = [x - 3.0 for x in s.rollout.logprobs]
    assert learner.check_engine_weights(samples, 1.0).failed


# --------------------------------------------------------------------------- the loop
@pytest.mark.slow
def test_rollout_phase_returns_a_named_batch(tmp_path):
    cfg = build_config(sets=tiny_sets(tmp_path, "b", "allocation.strategy=grpo"))
    tr = Trainer(cfg, RunDir(tmp_path / "b"), None, quiet())
    try:
        batch = tr.rollout_phase(1)
    finally:
        tr.close()
    assert isinstance(batch, RolloutBatch)
    assert len(batch.samples) == len(batch.generated) == 16  # grpo keeps every rollout: 4 x 4
    assert batch.record["totals"]["rollouts"] == 16
    assert batch.generate_seconds > 0 and batch.reward_seconds >= 0


def _rows(run: Path) -> tuple[list[dict], list[dict]]:
    rows = RunDir(run).metrics()
    return [r for r in rows if "reward/mean" in r], [r for r in rows if "eval/accuracy" in r]


@pytest.mark.slow
def test_stop_by_rollouts_and_evaluate_on_a_rollout_schedule(tmp_path):
    # grpo at 4 prompts x 4: 16 rollouts a step. Stop once 40 are generated (after step 3,
    # at 48), evaluate each time the total passes a multiple of 20 (step 2, at 32; step 3,
    # the final one, at 48) besides the start; train.steps (100) is only a bound.
    sets = tiny_sets(tmp_path, "r", "allocation.strategy=grpo", "train.steps=100", "train.max_rollouts=40",
                     "train.eval_every_rollouts=20")
    summary = train(build_config(sets=sets), out=quiet())
    steps, evals = _rows(tmp_path / "r")
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["rollouts/cumulative"] for r in steps] == [16, 32, 48]
    assert [r["step"] for r in evals] == [0, 2, 3]
    assert summary["rollouts"] == 48 and summary["steps"] == 3
    assert RunDir(tmp_path / "r").latest_checkpoint().name == "step-3"

    # train.steps still bounds a run whose rollout budget is larger
    train(build_config(sets=tiny_sets(tmp_path, "s", "allocation.strategy=grpo", "train.steps=2",
                                      "train.max_rollouts=1000", "train.eval_every_rollouts=20")), out=quiet())
    steps, evals = _rows(tmp_path / "s")
    assert [r["step"] for r in steps] == [1, 2] and [r["step"] for r in evals] == [0, 2]


@pytest.mark.slow
def test_resume_by_rollouts_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    """The rollout counter is checkpointed: a run killed after its step-2 checkpoint stops
    at the same step and evaluates at the same steps when resumed."""
    sets = tiny_sets(tmp_path, "x", "allocation.strategy=grpo", "train.steps=100", "train.max_rollouts=56",
                     "train.eval_every_rollouts=24", "train.save_every=2")
    train(build_config(sets=sets + ["train.run_name=whole"]), out=quiet())
    original = Trainer.train_step

    def killed_at_three(self, step):
        if step == 3:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", killed_at_three)
    with pytest.raises(KeyboardInterrupt):
        train(build_config(sets=sets + ["train.run_name=cut"]), out=quiet())
    monkeypatch.setattr(Trainer, "train_step", original)
    train(resume=tmp_path / "cut", out=quiet())
    whole = strip_times(RunDir(tmp_path / "whole").metrics())
    assert [r["step"] for r in whole if "eval/accuracy" in r] == [0, 2, 3, 4]  # 32, 48, 64 (final)
    assert strip_times(RunDir(tmp_path / "cut").metrics()) == whole


def _processes() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    return parents


def _grandchildren(pid: int) -> set[int]:
    """Processes whose parent is a child of ``pid``: the math verifier's workers (forked by
    the multiprocessing forkserver, which lives as long as the test process)."""
    parents = _processes()
    children = {p for p, pp in parents.items() if pp == pid}
    return {p for p, pp in parents.items() if pp in children}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.slow
def test_run_closes_engine_and_reward_workers_when_a_step_fails(tmp_path, monkeypatch):
    import time

    before = _grandchildren(os.getpid())
    cfg = build_config(sets=tiny_sets(tmp_path, "f", "train.reward_workers=2"))
    tr = Trainer(cfg, RunDir(tmp_path / "f").make(cfg), None, quiet())
    closed = []
    real_close = tr.engine.close
    monkeypatch.setattr(tr.engine, "close", lambda: (closed.append("engine"), real_close()))
    original = Trainer.train_step

    def fails_at_two(self, step):
        if step == 2:
            workers.update(_grandchildren(os.getpid()) - before)
            raise RuntimeError("boom")
        return original(self, step)

    workers: set[int] = set()
    monkeypatch.setattr(Trainer, "train_step", fails_at_two)
    with pytest.raises(RuntimeError, match="boom"):
        tr.run()
    assert len(workers) == 2, "the reward workers were running during the step"
    assert closed == ["engine"]
    deadline = time.time() + 5
    while workers & _grandchildren(os.getpid()) and time.time() < deadline:
        time.sleep(0.05)
    assert not workers & _grandchildren(os.getpid())
    assert [r["step"] for r in _rows(tmp_path / "f")[0]] == [1]
    assert not (tmp_path / "f" / "summary.json").exists()


def test_no_function_over_80_lines_in_the_trainer_and_learner():
    import ast

    root = Path(__file__).resolve().parents[1]
    for name in ("vigor_cli/train/trainer.py", "vigor_cli/train/learner.py", "vigor_cli/interrupt.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 < 80, f"{name}:{node.name}"


@pytest.mark.slow
def test_bench_study_run_is_a_train_run(tmp_path):
    """bench/efficiency.py's run_one is `vigor train` with the rollout keys: same stop,
    same evaluation schedule, and the run is marked finished for the study."""
    import importlib.util
    import sys

    spec_file = Path(__file__).resolve().parents[1] / "bench" / "efficiency.py"
    spec = importlib.util.spec_from_file_location("bench_efficiency_learner", spec_file)
    eff = importlib.util.module_from_spec(spec)
    sys.modules["bench_efficiency_learner"] = eff
    spec.loader.exec_module(eff)
    run = eff.RunSpec(task="tiny-math", regime="default", arm="grpo", seed=0, model="tiny",
                      sets=["train.prompts_per_step=4", "allocation.group_size=4", "sampling.max_new_tokens=8",
                            "train.eval_limit=8", "allocation.strategy=grpo"],
                      total_rollouts=40, eval_every_rollouts=20, run_dir=str(tmp_path / "runs" / "grpo-s0"))
    threads = torch.get_num_threads()
    try:
        summary = eff.run_one(run)  # sets one torch thread, as a study's child process does
    finally:
        torch.set_num_threads(threads)
    steps, evals = _rows(tmp_path / "runs" / "grpo-s0")
    assert [r["rollouts/cumulative"] for r in steps] == [16, 32, 48]
    assert [r["step"] for r in evals] == [0, 2, 3]
    assert summary["final_accuracy"] == evals[-1]["eval/accuracy"]
    assert eff.finished(run)
    assert json.loads((tmp_path / "runs" / "grpo-s0" / "spec.json").read_text())["total_rollouts"] == 40


def test_update_with_nothing_to_learn_is_a_zero_step(tmp_path):
    """Every group tied (all advantages 0) and no KL term: no forward pass, zero loss and
    gradient, the weights unchanged, and the schedule still advances."""
    cfg = build_config(sets=tiny_sets(tmp_path, "zero", "grpo.beta=0", "grpo.warmup_steps=2"))
    tokenizer = load_tokenizer(cfg.model)
    prompt_ids, samples = _samples(tokenizer)
    for s in samples:
        s.advantage = 0.0
    learner = Learner(cfg, tokenizer.pad_token_id, prompt_ids)
    start = _params(learner)
    metrics = learner.update(samples)
    assert metrics["losses/loss"] == 0.0 and metrics["losses/grad_norm"] == 0.0
    assert all(torch.equal(a, p) for a, p in zip(start, learner.model.parameters()))
    assert learner.update(samples)["lr"] > metrics["lr"]

"""VIGOR's allocation inside TRL's GRPOTrainer (vigor_cli/integrations/trl.py), on CPU with the
bundled tiny model, the real math and code verifiers and TRL installed (the `trl` extra)."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vigor_cli.errors import UserError

pytest.importorskip("trl")

from vigor_cli import grpo  # noqa: E402
from vigor_cli.allocation import make_allocator  # noqa: E402
from vigor_cli.config import ConfigError, TaskConfig  # noqa: E402
from vigor_cli.integrations.trl import (  # noqa: E402
    HeldOutEval, StepLayout, VigorGRPOConfig, VigorGRPOTrainer, split_requests, task_dataset, task_reward,
)
from vigor_cli.model.loading import TINY_DIR  # noqa: E402
from vigor_cli.tasks import get_task  # noqa: E402
from vigor_cli.train.trainer import DataOrder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "trl_ranks_script.py"


def _args(tmp_path: Path, **kw) -> VigorGRPOConfig:
    base = dict(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=8,
                num_generations=8, max_completion_length=16, logging_steps=1, report_to=[],
                save_strategy="no", use_cpu=True, seed=0, learning_rate=5e-4,
                lr_scheduler_type="constant", prompts_per_step=8, bf16=False)
    base.update(kw)
    return VigorGRPOConfig(**base)


# --------------------------------------------------------------------------- config
def test_vigor_section_is_validated_like_vigor_trains_allocation(tmp_path):
    args = _args(tmp_path, vigor={"strategy": "vigor", "alpha": 0.25, "budget": 40})
    assert (args.allocation.strategy, args.allocation.alpha, args.allocation.budget) == ("vigor", 0.25, 40)
    assert args.allocation.m0 == 2  # vigor's defaults fill the rest
    assert _args(tmp_path).allocation.strategy == "auto"  # the config default
    assert _args(tmp_path, prompts_per_step=None).prompts_per_step == 1  # 8 // 8
    with pytest.raises(ConfigError, match="unknown config key 'allocation.alpah'"):
        _args(tmp_path, vigor={"alpah": 0.5})
    with pytest.raises(ConfigError, match="'allocation.strategy'"):
        _args(tmp_path, vigor={"strategy": "nope"})
    with pytest.raises(ConfigError, match="'allocation.alpha'"):
        _args(tmp_path, vigor={"alpha": 1.5})
    with pytest.raises(ConfigError, match=r"pods\.m \(9\) must be <= allocation.pods\.n \(4\)"):
        _args(tmp_path, vigor={"strategy": "pods", "pods": {"n": 4, "m": 9}})


# --------------------------------------------------------------------------- balancing
def test_split_requests_keeps_ranks_within_one_rollout_over_a_step():
    rng = random.Random(0)
    for _ in range(300):
        ranks = rng.randint(1, 8)
        layout = StepLayout(ranks)
        total = 0
        for _ in range(rng.randint(1, 6)):
            n = rng.randint(1, 40)
            flat = [f"q{rng.randint(0, 9)}" for _ in range(n)]
            before = list(layout.spent)
            sizes = split_requests(n, before)
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
            keys, chunks = layout.add_round(flat)
            assert [k[0] for k in keys] == flat
            total += n
            assert [sum(real for _, real in c) for c in chunks] == sizes
            assert len({len(c) for c in chunks}) == 1  # every rank generates the same number of rows
            assert max(layout.spent) - min(layout.spent) <= 1
        assert sum(layout.spent) == total
        real = [key for rows in layout.rows for key, is_real in rows if is_real]
        assert len(real) == len(set(real)) == total  # each (uid, index) generated once
        for uid in {k[0] for k in real}:
            assert sorted(i for u, i in real if u == uid) == list(range(layout.counts[uid]))


def test_split_requests_gives_the_remainder_to_the_ranks_behind():
    assert split_requests(5, [0, 0]) == [3, 2]
    assert split_requests(5, [3, 2]) == [2, 3]
    assert split_requests(1, [4, 4, 3]) == [0, 0, 1]
    assert split_requests(2, [0, 0, 0, 0]) == [1, 1, 0, 0]


# --------------------------------------------------------------------------- verifiers adapter
@pytest.mark.slow
def test_task_reward_scores_through_the_math_and_code_verifiers():
    from vigor_cli.tasks import tiny_code

    math_task = get_task(TaskConfig(name="tiny-math"))
    code_task = get_task(TaskConfig(name="tiny-code"), workers=2)
    try:
        ex = math_task.train_examples()[0]
        reward = task_reward(math_task)
        assert reward.__name__ == "tiny-math_verifier"
        got = reward(prompts=["p"] * 3, completions=[f"\\boxed{{{ex.answer}}}", "\\boxed{-1}", "no"],
                     uid=[ex.uid] * 3)
        assert got == [1.0, 0.0, 0.0]
        # each distinct (uid, completion) of a step is graded once, as vigor train does
        from types import SimpleNamespace

        graded: list[int] = []
        real_score = math_task.score
        math_task.score = lambda exs, texts: graded.append(len(texts)) or real_score(exs, texts)
        counting = task_reward(math_task)
        right = f"\\boxed{{{ex.answer}}}"
        for step, texts, expect in [(0, [right, right, "x"], [1.0, 1.0, 0.0]), (0, [right, "x"], [1.0, 0.0]),
                                    (1, [right], [1.0])]:
            state = SimpleNamespace(global_step=step)
            assert counting(prompts=["p"] * len(texts), completions=texts, uid=[ex.uid] * len(texts),
                            trainer_state=state) == expect
        assert graded == [2, 1]  # step 0: two distinct, then nothing new; step 1 grades again
        math_task.score = real_score
        code = code_task.train_examples()[0]
        good = tiny_code.target_completion(code.meta["solution"])
        chat = [[{"role": "assistant", "content": good}], [{"role": "assistant", "content": "```python\nprint(input())\n```"}]]
        code_reward = task_reward(code_task)
        assert code_reward(prompts=["p", "p"], completions=chat, uid=[code.uid] * 2) == [1.0, 0.0]
        # the level the programs ran under, kept for the TRL path's step line (trl_metrics.reward_sandbox)
        level = code_task.score([code], [good])[0].details["isolation"]
        assert level.startswith("full")
        assert code_reward.vigor_sandbox == {"sandbox/isolation": level,
                                             "sandbox/memory_cgroup": 0.0 if "rlimit only" in level else 1.0}
        code_reward(prompts=["p"], completions=["no code"], uid=[code.uid], trainer_state=SimpleNamespace(global_step=3))
        assert code_reward.vigor_sandbox == {}  # a new step whose rollouts never reached the sandbox
        assert reward.vigor_sandbox == {}  # the math verifier runs no program
    finally:
        math_task.close()
        code_task.close()


# --------------------------------------------------------------------------- training through TRL
class Recording(VigorGRPOTrainer):
    """Records what each round generated and the advantages handed to TRL's loss."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.round_rows: list[int] = []
        self.handed: list[tuple[list, list[float]]] = []

    def _generate_round(self, rows):
        self.round_rows.append(len(rows))
        return super()._generate_round(rows)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            keys = [row_key for row_key, _ in self.last_rounds.layout.rows[0]]
            self.handed.append((keys, out["advantages"].tolist()))
        return out


def _train(tmp_path: Path, strategy: str, eval_examples: int = 0) -> tuple[Recording, Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    task = get_task(TaskConfig(name="tiny-math"))
    args = _args(tmp_path, vigor={"strategy": strategy})
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[task_reward(task)],
                        args=args, train_dataset=task_dataset(task, tok), processing_class=tok)
    if eval_examples:
        trainer.add_callback(HeldOutEval(trainer, task, task.eval_examples()[:eval_examples], max_new_tokens=16))
    try:
        trainer.train()
    finally:
        task.close()
    return trainer, Path(args.output_dir)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "allocation.jsonl").read_text().splitlines()]


def _replay_plan(trainer: VigorGRPOTrainer, records: list[dict]) -> list[list[int]]:
    """A fresh allocator, same config, seed and data order, told the recorded rewards: the
    rollouts it asks for per round of each step."""
    alloc = make_allocator(trainer.args.allocation, trainer.args.prompts_per_step, trainer.args.seed)
    data = DataOrder(list(trainer.vigor_index), trainer.args.seed)
    plans = []
    for rec in records:
        rewards = {p["uid"]: [r for rd in p["rounds"] for r in rd["rewards"]] for p in rec["prompts"]}
        given = {uid: 0 for uid in rewards}
        data.new_step()
        alloc.start_step(rec["step"], data.draw)
        plan = []
        while requests := alloc.ask():
            plan.append(sum(r.n for r in requests))
            told = {r.uid: rewards[r.uid][given[r.uid]:given[r.uid] + r.n] for r in requests}
            for r in requests:
                given[r.uid] += r.n
            alloc.tell(told)
        alloc.finish()
        plans.append(plan)
    return plans


@pytest.mark.parametrize("strategy,per_round", [("vigor", [16, 16, 16, 16]), ("grpo", [64])])
@pytest.mark.slow
def test_two_steps_through_grpotrainer(tmp_path, vigor, strategy, per_round):
    trainer, run = _train(tmp_path, strategy, eval_examples=8 if strategy == "vigor" else 0)
    records = _records(run)
    assert [r["step"] for r in records] == [1, 2]
    # rollouts per step: what was generated is what the allocator planned, round by round
    plans = _replay_plan(trainer, records)
    assert plans == [per_round, per_round]
    assert trainer.round_rows == per_round * 2
    assert [r["totals"]["rollouts"] for r in records] == [sum(per_round)] * 2
    logged = [h for h in trainer.state.log_history if "vigor/rollouts_per_step" in h]
    assert [h["vigor/rollouts_per_step"] for h in logged] == [sum(per_round)] * 2
    assert [h["vigor/round_1_rollouts"] for h in logged] == [per_round[0]] * 2
    assert all(0.0 <= h["vigor/zero_var_frac"] <= 1.0 for h in logged)
    # rollouts spent in all-equal groups: TRL's logs and every step line, from the record
    flat = [sum(p["rollouts"] for p in rec["prompts"] if len({r for rd in p["rounds"] for r in rd["rewards"]}) <= 1)
            for rec in records]
    assert [h["vigor/zero_variance_rollouts"] for h in logged] == flat
    assert [h["vigor/zero_variance_share"] for h in logged] == pytest.approx([f / sum(per_round) for f in flat])
    assert trainer.vigor_totals["zero_variance"] == sum(flat)
    # advantages handed to TRL's loss = vigor_cli.grpo's over the recorded rewards, by uid group
    for rec, (keys, handed) in zip(records, trainer.handed):
        pairs = [((p["uid"], i), r) for p in rec["prompts"]
                 for i, r in enumerate(r for rd in p["rounds"] for r in rd["rewards"])]
        expected = grpo.compute_advantages([r for _, r in pairs], [k[0] for k, _ in pairs], "group")
        by_key = dict(zip([k for k, _ in pairs], expected.tolist()))
        assert len(keys) == sum(per_round)
        assert handed == pytest.approx([by_key[k] for k in keys], abs=1e-6)
    # TRL's completions table shows our advantages, not its zeros (its deque keeps the newest)
    shown = list(trainer._logs["advantages"])
    assert shown and shown == pytest.approx(trainer.handed[-1][1][-len(shown):], abs=1e-6)
    # the record is vigor's: `vigor inspect-allocation` reads it (the real CLI)
    code, out, err = vigor("inspect-allocation", str(run), "--json")
    assert code == 0, err
    assert "rounds" in out and str(records[-1]["prompts"][0]["uid"]) in out
    # the step lines are `vigor train`'s (the same rollout core), plus the ranks' shares
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "rollouts/per_rank" in m]
    assert {"reward/mean", "reward/unscored", "groups/zero_var_frac", "completions/mean_length",
            "tokens/per_rank"} <= set(steps[0])
    assert [m["rollouts/zero_variance"] for m in steps] == flat
    assert [m["rollouts/zero_variance_share"] for m in steps] == pytest.approx([f / sum(per_round) for f in flat])
    if strategy == "vigor":  # held-out accuracy lines and files: `vigor report` reads the run
        assert sorted(p.name for p in (run / "eval").iterdir()) == ["step-0.json", "step-2.json"]
        code, out, err = vigor("report", str(run), "--out", str(tmp_path / "report"), "--json")
        assert code == 0, err
        assert json.loads(out)["runs"][0]["final_accuracy"] == pytest.approx(
            [m for m in lines if "eval/accuracy" in m][-1]["eval/accuracy"])


@pytest.mark.slow
def test_rewards_outside_unit_interval_stop_with_a_clear_error(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    task = get_task(TaskConfig(name="tiny-math"))

    def two(prompts, completions, **kw):
        return [2.0] * len(prompts)

    trainer = VigorGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[two],
                               args=_args(tmp_path, max_steps=1, vigor={"strategy": "grpo", "group_size": 2}),
                               train_dataset=task_dataset(task, tok), processing_class=tok)
    with pytest.raises(UserError, match=r"step 1 round 1: reward 2 \(the weighted sum of two 2\) is outside "
                                        r"allocation.reward_range \[0, 1\]"):
        trainer.train()
    # the range the rewards really have: told to the allocator as pass rates, trained on as they are
    wide = VigorGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[two],
                            args=_args(tmp_path / "wide", max_steps=1,
                                       vigor={"strategy": "grpo", "group_size": 2, "reward_range": [0, 2]}),
                            train_dataset=task_dataset(task, tok), processing_class=tok)
    wide.train()


@pytest.mark.slow
def test_trl_batch_shapes_it_cannot_honour_are_refused(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    task = get_task(TaskConfig(name="tiny-math"))
    kw = dict(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[task_reward(task)],
              train_dataset=task_dataset(task, tok), processing_class=tok)
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run" / "allocation.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="already holds allocation.jsonl"):
        VigorGRPOTrainer(args=_args(tmp_path), **kw)
    assert (tmp_path / "run" / "allocation.jsonl").read_text() == "{}\n"  # nothing overwritten


# --------------------------------------------------------------------------- two processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_script(out: Path, ranks: int, *extra: str) -> subprocess.CompletedProcess:
    # The in-process tests above leave torch.distributed's variables in os.environ (and their
    # store on MASTER_PORT): a child must not inherit them, or it joins that dead group's port.
    leaked = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
              "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")
    env = {k: v for k, v in os.environ.items() if k not in leaked and not k.startswith("ACCELERATE_")}
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    cmd = [sys.executable, str(SCRIPT), str(out), *extra]
    if ranks > 1:  # --standalone: torchrun's rendezvous picks a free port itself
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
               str(SCRIPT), str(out), *extra]
    for _ in range(3):  # torchrun's store port can be taken between its pick and its bind
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode == 0 or "EADDRINUSE" not in done.stderr:
            break
    return done


@pytest.mark.slow
def test_two_processes_select_globally_like_one(tmp_path):
    """About 70 s on 2 CPU cores: two torchrun processes and one plain one, two steps each."""
    one, two = tmp_path / "one", tmp_path / "two"
    for out, ranks in ((one, 1), (two, 2)):
        done = _run_script(out, ranks)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the global selection (every prompt's rounds, rewards, kept flags) is one process's
    assert _records(two / "run") == _records(one / "run")
    ranks = [json.loads((two / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["ranks"] for r in ranks] == [2, 2]
    # every rank ran the same allocator to the same state (decided identically, no broadcast;
    # each round's request hash was compared on every rank)
    assert ranks[0]["allocator"] == ranks[1]["allocator"] == json.loads((one / "rank-0.json").read_text())["allocator"]
    # balanced: each round the ranks generate equally many rows; real rollouts differ by <= 1
    assert ranks[0]["generated"] == ranks[1]["generated"]
    rounds = [rd["rollouts"] for rec in _records(one / "run") for rd in rec["rounds"]]
    assert [g * 2 - r for g, r in zip(ranks[0]["generated"], rounds)] == [r % 2 for r in rounds]
    assert any(r % 2 for r in rounds)  # the schedule has odd rounds, so balancing was exercised
    metrics = [json.loads(x) for x in (two / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rollouts/per_rank" in m]
    one_rollout = ranks[0]["max_prompt_tokens"] + 8  # the longest prompt plus max_completion_length
    for m, rec, layout in zip(steps, _records(one / "run"), ranks[0]["steps"]):
        spent, tokens = m["rollouts/per_rank"], m["tokens/per_rank"]
        assert sum(spent) == rec["totals"]["rollouts"] and max(spent) - min(spent) <= 1
        assert tokens == layout["tokens"] and max(tokens) - min(tokens) <= 2 * one_rollout  # by tokens
    assert ranks[0]["steps"] == ranks[1]["steps"]  # every rank laid the step out the same way
    # the health checks that read completions (empty, identical) see every rank's, not their own only
    own = [r["texts_own"] for r in ranks]
    assert own[0] and own[1] and not set(map(tuple, own[0])) & set(map(tuple, own[1]))
    assert ranks[0]["texts_seen"] == ranks[1]["texts_seen"] == sorted(own[0] + own[1])
    assert len(ranks[0]["texts_seen"]) == sum(steps[-1]["rollouts/per_rank"])
    # evaluation ran on every rank, each on its share, and both hold the gathered result
    assert ranks[0]["held_out"] == ranks[1]["held_out"] and sorted(ranks[0]["held_out"]) == ["0", "2"]
    evals = [m for m in metrics if "eval/accuracy" in m]
    assert [m["step"] for m in evals] == [0, 2] and [m["eval/samples"] for m in evals] == [7, 7]
    # the micro-batched update: every rank ran as many micro-batches, some rank padded with
    # fillers, the ranks forwarded their own rows; TRL's completion metric is one value per step
    # over the real rollouts (no balancing copy), the update's KL reached metrics.jsonl
    updates = [r["updates"] for r in ranks]
    assert [u["micro_batches"] for u in updates[0]] == [u["micro_batches"] for u in updates[1]]
    # a rank with fewer micro-batches ran filler ones, or one with fewer rows in a micro-batch
    # padded it (TRL gathers one value per row of each forward: the counts must match)
    assert any(u["fillers"] or u["filler_rows"] for rank in updates for u in rank)
    assert all(u["micro_batches"] > 1 for u in updates[0])
    for u, m in zip(updates[0], steps):
        assert u["completions/mean_length"] == [pytest.approx(m["completions/mean_length"])]
    assert steps[0]["losses/kl"] == 0.0 < steps[1]["losses/kl"]  # the policy is its reference at step 1


@pytest.mark.slow
def test_two_processes_run_episodes_in_step_and_select_like_one(tmp_path):
    """Episodes (tiny-guess, higher-lower) over two torchrun processes: each rank's episodes
    end at their own turns, yet every rank generates each turn together (none is left waiting),
    and the selection is one process's (the reward depends on (uid, rollout index) only)."""
    one, two = tmp_path / "one", tmp_path / "two"
    for out, ranks in ((one, 1), (two, 2)):
        done = _run_script(out, ranks, "episodes")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _records(two / "run") == _records(one / "run")
    ranks = [json.loads((two / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["held_out"] == ranks[1]["held_out"]
    episodes = [json.loads(x) for x in (two / "run" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == sum(rec["totals"]["rollouts"] for rec in _records(two / "run"))
    metrics = [json.loads(x) for x in (two / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("episodes/turns/mean" in m for m in metrics if "rollouts/per_rank" in m)


@pytest.mark.slow
def test_ranks_whose_allocators_disagree_stop_loudly(tmp_path):
    """Rank 1 draws its prompts in another order: the first round's request hashes differ and
    every rank stops with RankDisagreement (none is left waiting in a collective)."""
    done = _run_script(tmp_path / "bad", 2, "diverge")
    assert done.returncode != 0
    assert done.stderr.count("RankDisagreement: step 1 round 1: rank(s) [1] asked for other rollouts") == 2, \
        done.stderr[-3000:]
    assert not (tmp_path / "bad" / "rank-0.json").exists()


# --------------------------------------------------------------------------- the command line
def test_cli_bad_keys_exit_2_naming_the_key_before_anything_is_written(tmp_path, capsys):
    from vigor_cli.integrations.trl import main

    for flag, says in [("--set=allocation.alpah=3", "unknown config key 'allocation.alpah'"),
                       ("--set=grpo.loss_agg=prompt_mean", "grpo.loss_agg='prompt_mean' has no TRL loss_type"),
                       ("--trl=nope=3", "unexpected keyword argument 'nope'")]:
        capsys.readouterr()
        assert main(["--output-dir", str(tmp_path / "out"), flag]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("error:") == 1
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_accelerate_launch_two_processes_on_cpu(tmp_path):
    """The documented command, on CPU: accelerate's multi-process launcher (torchrun), gloo."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for _attempt in range(3):  # a free port can be taken by another process before torchrun binds it
        cmd = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               "-m", "vigor_cli.integrations.trl", "--cpu", "--output-dir", str(out),
               "--set", "train.steps=2", "--set", "train.prompts_per_step=8", "--set", "train.eval_limit=8",
               "--set", "allocation.strategy=vigor"]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if "EADDRINUSE" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rollouts/per_rank" in m]
    assert [m["rollouts/per_rank"] for m in steps] == [[32, 32], [32, 32]]
    assert [m["step"] for m in metrics if "eval/accuracy" in m] == [0, 2]


def test_trl_args_carry_the_vigor_config_into_grpoconfig(tmp_path):
    from vigor_cli.commands.train import DEFAULT_CONFIG
    from vigor_cli.settings import build_config
    from vigor_cli.integrations.trl import trl_args

    cfg = build_config(DEFAULT_CONFIG, sets=["allocation.strategy=knapsack", "grpo.beta=0.01", "train.seed=7",
                                             "grpo.loss_agg=dr_grpo", "train.steps=3"])
    args = trl_args(cfg, tmp_path, use_cpu=True)
    assert (args.allocation.strategy, args.beta, args.seed, args.max_steps) == ("knapsack", 0.01, 7, 3)
    assert (args.loss_type, args.epsilon, args.epsilon_high) == ("dr_grpo", 0.2, 0.28)
    assert (args.prompts_per_step, args.learning_rate, args.max_completion_length) == (64, 5e-4, 16)
    assert args.gradient_checkpointing is False  # auto: off for the tiny model, as vigor train
    assert trl_args(cfg, tmp_path, use_cpu=True, gradient_checkpointing=True).gradient_checkpointing is True
    assert trl_args(build_config(DEFAULT_CONFIG, sets=["model.gradient_checkpointing=true"]), tmp_path,
                    use_cpu=True).gradient_checkpointing is True

"""TRL's whole reward-function contract (its GRPOTrainer docs: prompts, completions,
completion_ids, trainer_state, log_extra, log_metric, environments, the dataset's columns;
sync or async) as vigor keeps it: each argument passed, with TRL's meaning, to a function
that takes it; what it logs kept per completion and per step; the dry run saying only
what is passed. Run in this process on real files; the TRL path's forwarding through TRL's
own callables is checked against TRL's signature."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from vigor_cli.user import rewards
from vigor_cli.config import TaskConfig
from vigor_cli.errors import UserError
from vigor_cli.user.reward_log import RewardLog, add_logged, trainer_state
from vigor_cli.tasks import get_task

FUNCS = '''
import asyncio

CALLS = []


def everything(prompts, completions, completion_ids, trainer_state, log_metric, log_extra, word):
    CALLS.append({"ids": completion_ids, "step": trainer_state.global_step, "max": trainer_state.max_steps})
    log_metric("mean_len", sum(len(c) for c in completions) / len(completions))
    log_extra("first_id", [ids[0] for ids in completion_ids])
    return [float(len(c) == len(w)) for c, w in zip(completions, word)]


def kwargs_only(completions, **kwargs):
    CALLS.append(sorted(k for k in kwargs))
    return [0.5] * len(completions)


async def later(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0 for _ in completions]


def wants_env(completions, environments, **kwargs):
    return [0.0] * len(completions)


def env_optional(completions, environments=None, **kwargs):
    return [0.0 if environments is None else 1.0] * len(completions)


def bad_extra(completions, log_extra, **kwargs):
    log_extra("x", [1])
    return [0.0] * len(completions)


def bad_metric(completions, log_metric, **kwargs):
    log_metric("x", "high")
    return [0.0] * len(completions)
'''


@pytest.fixture
def funcs(tmp_path) -> Path:
    path = tmp_path / "funcs.py"
    path.write_text(FUNCS)
    return path


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{w}=", "word": w}) + "\n" for w in ("ab", "abc", "x")))
    return path


def task_of(data: Path, *specs: str):
    return get_task(TaskConfig(name="custom", data=str(data), rewards=list(specs)))


def module_calls(funcs: Path) -> list:
    import sys

    return next(m for name, m in sys.modules.items() if name.startswith("vigor_user_reward_")
                and getattr(m, "__file__", "") == str(funcs.resolve())).CALLS


def test_each_trl_argument_reaches_a_function_that_takes_it(funcs, data):
    task = task_of(data, f"{funcs}:everything", f"{funcs}:kwargs_only")
    try:
        examples = task.train_examples()
        task.trainer_state = trainer_state(3, 10, 1.5)
        scores = task.score(examples[:2], ["ab", "abcd"], completion_ids=[[7, 8], [9]])
    finally:
        task.close()
    everything, kwargs_only = module_calls(funcs)
    assert everything == {"ids": [[7, 8], [9]], "step": 3, "max": 10}  # TRL's meaning: updates done, the run's total
    assert kwargs_only == ["completion_ids", "log_extra", "log_metric", "prompts", "trainer_state", "word"]
    assert [s.components["everything"] for s in scores] == [1.0, 0.0]
    assert [s.extra for s in scores] == [{"first_id": 7}, {"first_id": 9}]  # log_extra, per completion
    assert task.logged_metrics() == {"mean_len": 3.0} and task.logged_metrics() == {}  # drained per step


def test_trainer_state_is_transformers_own():
    from transformers import TrainerState

    state = trainer_state(4, 20, 0.25)
    assert isinstance(state, TrainerState) and (state.global_step, state.max_steps, state.epoch) == (4, 20, 0.25)


def test_an_async_reward_is_awaited_and_environments_is_never_passed(funcs, data):
    task = task_of(data, f"{funcs}:later", f"{funcs}:env_optional")
    try:
        scores = task.score(task.train_examples()[:2], ["a", "b"])
    finally:
        task.close()
    assert [s.components for s in scores] == [{"later": 1.0, "env_optional": 0.0}] * 2
    with pytest.raises(UserError, match="requires 'environments', which TRL passes only with its environment_factory"):
        rewards.load_reward(f"{funcs}:wants_env")


@pytest.mark.parametrize("name, message", [
    ("bad_extra", "log_extra('x', ...) got 1 values for 2 completions"),
    ("bad_metric", "log_metric('x', ...) got str; it logs a number"),
])
def test_what_a_function_logs_is_checked_naming_it(funcs, data, name, message):
    task = task_of(data, f"{funcs}:{name}")
    try:
        with pytest.raises(UserError, match=rf"reward function {funcs}:{name}: .*{message.split('(')[0]}") as e:
            task.score(task.train_examples()[:2], ["a", "b"])
    finally:
        task.close()
    assert message in str(e.value)


def test_a_logged_name_vigor_uses_is_refused():
    log = RewardLog()
    context, _ = log.call("r.py:f", 1, None, None)
    context.log_metric("reward/mean", 0.5)
    with pytest.raises(UserError, match="reward function r.py:f logged 'reward/mean' through log_metric, a key vigor logs"):
        add_logged({"reward/mean": 0.1}, log.drain(), log.by)
    assert add_logged({"step": 1}, {"acc": 0.5}, {}, "eval/logged/") == {"step": 1, "eval/logged/acc": 0.5}


def test_a_reward_object_called_by_trl_passes_trls_arguments_on(funcs):
    """Handed to TRL's GRPOTrainer itself, a Reward gets TRL's keyword arguments and gives them
    to the function as TRL would."""
    reward = rewards.load_reward(f"{funcs}:everything")
    assert reward.gets == ("prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra")
    logged, extra = [], []
    out = reward(prompts=["ab=", "x="], completions=["ab", "xy"], word=["ab", "x"], completion_ids=[[1], [2]],
                 trainer_state=trainer_state(0, 1), log_metric=lambda n, v: logged.append((n, v)),
                 log_extra=lambda c, v: extra.append((c, v)))
    assert out == [1.0, 0.0] and logged == [("mean_len", 2.0)] and extra == [("first_id", [1, 2])]


def test_the_trl_path_forwards_the_logs_to_trls_own_callables_once_per_call(funcs, data):
    """TRL's log_extra takes one value per completion of its call, log_metric a scalar; with two
    functions TRL calls each, but the task grades them together: forwarded once."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from vigor_cli.integrations.trl import task_reward_funcs

    for method in ("_log_metric", "_log_completion_extra"):  # the callables TRL hands out
        assert list(inspect.signature(getattr(GRPOTrainer, method)).parameters)[1:] in (["name", "value"],
                                                                                       ["column", "values"])
    task = task_of(data, f"{funcs}:everything", f"{funcs}:kwargs_only")
    try:
        (first, second), weights = task_reward_funcs(task)
        examples = task.train_examples()
        metrics, extras = [], []
        kwargs = dict(uid=[examples[0].uid, examples[1].uid], word=["ab", "abc"], completion_ids=[[5], [6, 6]],
                      trainer_state=trainer_state(2, 9), log_metric=lambda n, v: metrics.append((n, v)),
                      log_extra=lambda c, v: extras.append((c, v)))
        assert first(["ab=", "abc="], ["ab", "abc"], **kwargs) == [1.0, 1.0]
        assert second(["ab=", "abc="], ["ab", "abc"], **kwargs) == [0.5, 0.5]
    finally:
        task.close()
    assert weights == [1.0, 1.0]
    assert metrics == [("mean_len", 2.5)] and extras == [("first_id", [5, 6])]
    assert module_calls(funcs)[0]["step"] == 2  # TRL's own trainer_state


def test_the_dry_run_says_what_each_function_will_get(funcs, data, vigor, monkeypatch):
    code, out, err = vigor("train", "--data", str(data), "--reward", f"{funcs}:kwargs_only", "--reward",
                           f"{funcs}:everything", "--reward", "tiny-math", "--answer-field", "word", "--dry-run")
    assert code == 0, err
    assert (f"reward kwargs_only ({funcs}:kwargs_only), weight 1: needs no column; gets prompts, completions, "
            "completion_ids (token ids), trainer_state (global_step, max_steps), log_metric, log_extra, every column") in out
    assert (f"reward everything ({funcs}:everything), weight 1: needs column word; gets prompts, completions, completion_ids "
            "(token ids), trainer_state (global_step, max_steps), log_metric, log_extra") in out
    assert "if present" not in out  # it said 'uses trainer_state if present' of what it never passed


@pytest.mark.slow
def test_the_trl_path_trains_with_trls_own_arguments_and_logs(funcs, tmp_path):
    """One step of VigorGRPOTrainer (TRL's GRPOTrainer): a function that requires trainer_state and
    completion_ids trains; what it logs reaches TRL's metrics and completions log, and vigor's
    metrics.jsonl in the output directory."""
    pytest.importorskip("trl")
    from test_trainer import tiny_sets
    from vigor_cli.integrations.trl import build_trainer
    from vigor_cli.settings import build_config

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{w}=", "word": w}) + "\n" for w in ("ab", "abc", "x", "yz") * 4))
    cfg = build_config(sets=tiny_sets(tmp_path, "trl", "task.name=custom", f"task.data={data}", "task.eval_sets=[]",
                                      f"task.rewards=[{funcs}:everything, {funcs}:kwargs_only]",
                                      "allocation.strategy=grpo", "train.steps=1"))
    trainer, _, task = build_trainer(cfg, tmp_path / "out", use_cpu=True)
    try:
        trainer.train()
    finally:
        task.close()
    [line] = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() if "reward/mean" in x]
    assert line["mean_len"] > 0 and "reward/everything/unscored" in line
    assert trainer.state.log_history[0]["mean_len"] == pytest.approx(line["mean_len"])  # TRL's own log
    assert len(trainer._logs["extra"]["first_id"]) == len(trainer._logs["completion"])
    # TRL's own state: global_step 0 at the evaluation before training and step 1's rollouts, 1 after
    assert {c["step"] for c in module_calls(funcs) if isinstance(c, dict)} == {0, 1}

"""A user's environment behind the boundary a reward function has (vigor_cli/episodes/calls.py,
vigor_cli/user/code.py): every call bounded in time with the process's state put back, its
faults an episode's env_error, its text bounded before it is rendered, get_reward's faults
and non-numbers stopping the run as a --reward function's, a reset that never starts
stopping the run after two time limits, and the second stop signal.

The environment classes are written here, into a file the run imports as ``--env FILE.py:Cls``;
the tokenizer, the loop and the scorer are the real ones on the bundled tiny model (the tiny
model never writes a tool call: tool calls are scripted through the real tokenizer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vigor_cli.episodes.base import ENV_ERROR, ENV_TIMEOUT, TOKEN_BUDGET
from vigor_cli.episodes.calls import CUT_MARK, ENV_TEXT_CHARS, bounded_call, bounded_text
from vigor_cli.episodes.loop import make_runner
from vigor_cli.episodes.registry import make_environment
from vigor_cli.episodes.scoring import EpisodeScorer
from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams
from vigor_cli.settings import build_config
from vigor_cli.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]

ENVS = '''
import os, signal, sys, threading, time

class Base:
    """A game with a guess tool."""
    won, guesses = False, 0

    def reset(self, **kwargs) -> str | None:
        return None

    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: The number.
        """
        return "higher"

    def get_reward(self) -> float:
        return 1.0

class Moves(Base):
    def reset(self, **kwargs):
        os.chdir("/")
        return None

class Prints(Base):
    def reset(self, **kwargs):
        sys.stdout = open(os.devnull, "w")
        sys.stderr = open(os.devnull, "w")
        return None

class Handles(Base):
    def reset(self, **kwargs):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return None

class Alarms(Base):
    def reset(self, **kwargs):
        signal.signal(signal.SIGALRM, lambda *a: None)
        signal.alarm(2)  # due after the call, when its handler is gone: it would end the process
        return None

class Surrogate(Base):
    def reset(self, **kwargs):
        return " \\ud800 x" if kwargs["answer"] == 3 else " fine"

class Huge(Base):
    SIZE = 4_000_000
    def reset(self, **kwargs):
        return " " + "word " * (self.SIZE // 5)

class Mega(Huge):
    SIZE = 1_000_000

class TenThousand(Huge):
    SIZE = 10_000

class Blocks(Base):
    made = []
    def reset(self, **kwargs):
        Blocks.made.append(1)
        if os.environ.get("RESETS_LOG"):
            with open(os.environ["RESETS_LOG"], "a") as f:
                print("reset", file=f)
        time.sleep(60)

class Exits(Base):
    def reset(self, **kwargs):
        os._exit(3)

class Shy:
    def __str__(self):
        raise RuntimeError("no words")

class Slow:
    def __str__(self):
        time.sleep(60)
        return "late"

class BadResult(Base):
    def reset(self, **kwargs):
        self.bad = kwargs["answer"] == 3

    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: The number.
        """
        if not self.bad:
            return "lower"
        return Shy() if number == 1 else Slow() if number == 2 else ("\\ud800" if number == 3 else "x" * 5_000_000)

class Fragile(Base):
    count = 0
    def __init__(self):
        Fragile.count += 1
        if Fragile.count > 1:
            raise RuntimeError("only one game")
    def reset(self, **kwargs):
        if kwargs.get("answer") == 6:
            raise KeyError("no six")
        return None

class Rewards(Base):
    VALUE = None
    def get_reward(self):
        value = type(self).VALUE
        if value == "raise":
            raise ValueError("no score")
        if value == "exit":
            sys.exit(4)
        return value
'''


@pytest.fixture(scope="module")
def tokenizer():
    from vigor_cli.config import ModelConfig
    from vigor_cli.model.loading import load_tokenizer

    return load_tokenizer(ModelConfig())


class Scripted(RolloutEngine):
    def __init__(self, tokenizer, script):
        self.tok, self.script = tokenizer, script

    def generate(self, prompts, counts, sampling):
        out = []
        for p, c in zip(prompts, counts):
            text = self.script(self.tok.decode(p))
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Rollout(ids, [0.0] * len(ids), text, False) for _ in range(c)])
        return out


def setup(tmp_path, tokenizer, cls, *extra, rows=2):
    (tmp_path / "envs.py").write_text(ENVS)
    data = tmp_path / "games.jsonl"
    data.write_text("".join(f'{{"prompt": "Guess my number.", "answer": {3 + 3 * (k % 2)}}}\n' for k in range(rows)))
    cfg = build_config(sets=["model.name_or_path=tiny", "task.name=custom", f"task.data={data}",
                             f"task.rewards=[{ROOT}/examples/number-game/reward.py:few_guesses]",
                             f"task.env={tmp_path}/envs.py:{cls}", "sampling.max_new_tokens=48",
                             "task.max_prompt_tokens=192", *extra])
    task = get_task(cfg.task, workers=1)
    return cfg, task, make_environment(cfg.task, task, tokenizer)


def run(tmp_path, tokenizer, cls, script=lambda text: "done", *extra, rows=2):
    cfg, task, env = setup(tmp_path, tokenizer, cls, *extra, rows=rows)
    runner = make_runner(cfg, task, tokenizer, Scripted(tokenizer, script), env, [tokenizer.eos_token_id])
    examples = task.train_examples()
    episodes = [g[0] for g in runner.run(examples, [1] * len(examples), SamplingParams(max_new_tokens=48, seed=1))]
    return cfg, task, env, examples, episodes


def call_guess(number):
    return lambda text: (f'<tool_call>{{"name": "guess", "arguments": {{"number": {number}}}}}</tool_call>'
                         if "<tool_response>" not in text else "done")


# --------------------------------------------------------------------------- process state put back
def test_a_reset_that_changes_the_working_directory_has_it_put_back(tmp_path, tokenizer):
    before = os.getcwd()
    *_, episodes = run(tmp_path, tokenizer, "Moves")
    assert os.getcwd() == before and all(ep.error is None for ep in episodes)


def test_a_reset_that_replaces_stdout_and_stderr_has_them_put_back(tmp_path, tokenizer, capsys):
    out, err = sys.stdout, sys.stderr
    run(tmp_path, tokenizer, "Prints")
    assert sys.stdout is out and sys.stderr is err
    print("still seen")
    assert "still seen" in capsys.readouterr().out


def test_a_reset_that_installs_signal_handlers_has_them_put_back(tmp_path, tokenizer):
    usr1, term = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
    run(tmp_path, tokenizer, "Handles")
    assert signal.getsignal(signal.SIGUSR1) == usr1 and signal.getsignal(signal.SIGTERM) == term


def test_an_alarm_a_reset_set_is_cancelled_with_its_handler(tmp_path, tokenizer):
    alarm = signal.getsignal(signal.SIGALRM)
    run(tmp_path, tokenizer, "Alarms")
    assert signal.getsignal(signal.SIGALRM) == alarm and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


# --------------------------------------------------------------------------- faults: one episode's
def test_a_lone_surrogate_from_reset_is_that_episodes_env_error(tmp_path, tokenizer):
    *_, episodes = run(tmp_path, tokenizer, "Surrogate")
    assert episodes[0].ended == ENV_ERROR and "not valid text" in episodes[0].error
    assert "reset" in episodes[0].error and episodes[0].turns == 0
    assert episodes[1].error is None and episodes[1].turns == 1


def test_os_exit_in_reset_is_an_env_error_not_the_end_of_the_process(tmp_path, tokenizer):
    cfg, task, env = setup(tmp_path, tokenizer, "Exits")
    [start] = env.start(task.train_examples()[:1])
    assert start.ended == ENV_ERROR and "os._exit(3) called" in start.error


def test_making_an_environment_that_fails_later_is_an_episodes_error_and_reset_raising_too(tmp_path, tokenizer):
    cfg, task, env = setup(tmp_path, tokenizer, "Fragile", rows=3)
    starts = env.start(task.train_examples())  # the probe instance serves the first; a second cannot be made
    assert starts[0].error is None
    assert starts[1].ended == ENV_ERROR and "making an environment: RuntimeError: only one game" in starts[1].error


@pytest.mark.parametrize("number,ended,words", [
    (1, ENV_ERROR, "str() of guess()'s result: RuntimeError: no words"),
    (2, ENV_TIMEOUT, "did not return within 0.3 s (task.env_timeout_s)"),
    (3, ENV_ERROR, "guess()'s result is not valid text"),
])
def test_a_tool_result_whose_str_fails_is_an_episodes_error(tmp_path, tokenizer, number, ended, words):
    t0 = time.monotonic()
    *_, episodes = run(tmp_path, tokenizer, "BadResult", call_guess(number), "task.env_timeout_s=0.3")
    assert episodes[0].ended == ended and words in episodes[0].error
    assert episodes[1].error is None and episodes[1].messages[1]["content"] == "lower"
    assert time.monotonic() - t0 < 30  # each str() stopped at its limit, not after its 60 s


def test_a_huge_tool_result_is_cut_before_it_is_rendered_then_to_the_token_budget(tmp_path, tokenizer):
    *_, episodes = run(tmp_path, tokenizer, "BadResult", call_guess(4))
    assert episodes[0].ended == TOKEN_BUDGET  # 20,000 characters do not fit either
    out = bounded_text("x" * 5_000_000, 5, "a result")
    assert out.value == "x" * ENV_TEXT_CHARS + CUT_MARK.format(n=ENV_TEXT_CHARS)


@pytest.mark.parametrize("cls", ["Huge", "Mega", "TenThousand"])
def test_a_long_observation_is_cut_to_the_prompt_budget(tmp_path, tokenizer, cls):
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.tasks.prompts import encode_prompt

    cfg, task, env, examples, episodes = run(tmp_path, tokenizer, cls)
    for ex, ep in zip(examples, episodes):
        assert ep.error is None and ep.prompt_ids is not None
        # task.max_prompt_tokens bounds the task's part with the observation; the tools' text comes on top
        own = len(encode_prompt(tokenizer, task.render_prompt(ex, tokenizer)))
        tools = len(encode_prompt(tokenizer, render_prompt(task, ex, tokenizer, env))) - own
        assert len(ep.prompt_ids) <= cfg.task.max_prompt_tokens + tools
        assert len(ep.prompt_ids) > cfg.task.max_prompt_tokens // 2  # cut to the budget, not emptied
        assert "word word" in tokenizer.decode(ep.prompt_ids)  # the observation's head kept


def test_bounded_call_puts_back_what_a_call_changed_and_names_os_exit():
    def change():
        os.chdir("/")
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        os._exit(5)

    before, usr2 = os.getcwd(), signal.getsignal(signal.SIGUSR2)
    out = bounded_call(change, 5)
    assert out.error.startswith("os._exit(5) called") and not out.timed_out
    assert os.getcwd() == before and signal.getsignal(signal.SIGUSR2) == usr2


# --------------------------------------------------------------------------- a reset that never starts
def test_a_reset_that_blocks_on_the_first_episodes_stops_the_run_after_two_limits(tmp_path, tokenizer):
    cfg, task, env = setup(tmp_path, tokenizer, "Blocks", "task.env_timeout_s=0.3", rows=8)
    made = sys.modules[type(env.pool[0]).__module__].Blocks.made
    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"reset timed out on each of the first 2 episodes \(first: reset\(\) did "
                                        r"not return within 0.3 s .*task.env_timeout_s=SECONDS"):
        env.start(task.train_examples())
    assert len(made) == 2 and time.monotonic() - t0 < 10


# --------------------------------------------------------------------------- get_reward, as a --reward function
@pytest.mark.parametrize("value,words", [
    ("yes", "returned 'yes' (str)"), (float("nan"), "returned nan"), (float("inf"), "returned inf"),
    ([1.0], "returned [1.0] (list)"), (True, "returned True (bool)"),
    ("raise", "raised ValueError: no score (envs.py, line"), ("exit", "raised SystemExit: sys.exit(4) called"),
])
def test_get_reward_faults_and_non_numbers_stop_the_run_naming_it(tmp_path, tokenizer, value, words):
    cfg, task, env, examples, episodes = run(tmp_path, tokenizer, "Rewards")
    rewards = type(episodes[0].session)
    rewards.VALUE = value
    with pytest.raises(UserError) as caught:
        EpisodeScorer(task, env).score(examples, episodes)
    assert "environment Rewards.get_reward" in str(caught.value) and words in str(caught.value)
    rewards.VALUE = 0.5
    cfg, task, env, examples, episodes = run(tmp_path, tokenizer, "Rewards")
    scores = EpisodeScorer(task, env).score(examples, episodes)  # a number is fine
    assert scores[0].components["Rewards"] == 0.5
    rewards.VALUE = None


@pytest.mark.slow
def test_vigor_train_exits_2_on_a_get_reward_that_returns_a_string(tmp_path):
    (tmp_path / "envs.py").write_text(ENVS + "\nclass Yes(Base):\n    def get_reward(self):\n        return 'yes'\n")
    data = tmp_path / "games.jsonl"
    data.write_text("".join(f'{{"prompt": "Guess my number=", "answer": {k}}}\n' for k in range(1, 9)))
    result = subprocess.run(
        [sys.executable, "-m", "vigor_cli", "train", "--data", str(data), "--env", f"{tmp_path}/envs.py:Yes",
         "--reward", f"{ROOT}/examples/number-game/reward.py:few_guesses", "--steps", "1", "--output-dir",
         str(tmp_path / "runs"), "--set", "train.prompts_per_step=4", "--set", "allocation.strategy=grpo",
         "--set", "allocation.group_size=2", "--set", "train.eval_limit=2", "--set", "sampling.max_new_tokens=8",
         "--set", "task.max_prompt_tokens=192"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "environment Yes.get_reward returned 'yes' (str)" in result.stderr


# --------------------------------------------------------------------------- stop signals
def test_a_second_signal_raises_at_once_and_says_where_the_run_was(capfd):
    from vigor_cli.interrupt import StopSignals, TrainingInterrupted

    with StopSignals() as signals, signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert signals.requested
        with pytest.raises(TrainingInterrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert "SIGTERM again: stopping now; the run was waiting for" in capfd.readouterr().err


FORCED = """
import hashlib, os, signal, threading, time
from vigor_cli.interrupt import StopSignals
with StopSignals() as s, s.deferred():
    def send():
        time.sleep(1); os.kill(os.getpid(), signal.{sig}); time.sleep(0.3); os.kill(os.getpid(), signal.{sig})
    threading.Thread(target=send, daemon=True).start()
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 200_000_000)  # a C call: no Python handler runs until it returns
print("not stopped")
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_second_signal_stops_a_run_stuck_in_a_c_call_naming_it(sig):
    result = subprocess.run([sys.executable, "-c", FORCED.format(sig=sig)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 128 + getattr(signal, sig) and "not stopped" not in result.stdout
    assert f"{sig} again, and the run could not stop within 5 s: it was waiting for <module>()" in result.stderr


@pytest.mark.slow
def test_os_exit_from_a_thread_the_users_code_started_is_named_on_the_way_out(tmp_path):
    script = tmp_path / "game.py"
    script.write_text(textwrap.dedent("""
        import os, threading, time
        from vigor_cli.episodes.calls import bounded_call
        def reset():
            t = threading.Thread(target=lambda: os._exit(7)); t.start(); t.join()
        bounded_call(reset, 5)
        print("not ended")
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 7 and "not ended" not in result.stdout
    assert "the user's code called os._exit(7) (game.py, line 5)" in result.stderr


def _train(tmp_path, cls, *extra, env=None):
    (tmp_path / "envs.py").write_text(ENVS)
    data = tmp_path / "games.jsonl"
    data.write_text("".join(f'{{"prompt": "Guess my number=", "answer": {k}}}\n' for k in range(1, 9)))
    return subprocess.run(
        [sys.executable, "-m", "vigor_cli", "train", "--data", str(data), "--env", f"{tmp_path}/envs.py:{cls}",
         "--reward", f"{ROOT}/examples/number-game/reward.py:few_guesses", "--steps", "1", "--output-dir",
         str(tmp_path / "runs"), "--set", "train.prompts_per_step=4", "--set", "allocation.strategy=grpo",
         "--set", "allocation.group_size=2", "--set", "train.eval_limit=2", "--set", "sampling.max_new_tokens=8",
         "--set", "task.max_prompt_tokens=192", *extra], capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_vigor_train_with_a_4_mb_observation_trains_on_prompts_cut_to_the_budget(tmp_path):
    result = _train(tmp_path, "Huge")
    assert result.returncode == 0, result.stderr[-2000:]
    [run] = (tmp_path / "runs").iterdir()
    lines = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and all(line["error"] is None for line in lines)


@pytest.mark.slow
def test_vigor_train_with_a_reset_that_blocks_stops_after_two_limits(tmp_path):
    log = tmp_path / "resets.txt"
    result = _train(tmp_path, "Blocks", "--set", "task.env_timeout_s=2", env={"RESETS_LOG": str(log)})
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "reset timed out on each of the first 2 episodes" in line and "envs.py, line" in line
    assert log.read_text().count("reset") == 2  # two limits, not one per episode


@pytest.mark.slow
@pytest.mark.parametrize("cls", ["Moves", "Prints", "Handles"])
def test_vigor_train_with_an_environment_that_changes_the_process_finishes(tmp_path, cls):
    result = _train(tmp_path, cls)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "run directory" in result.stdout and "held-out reward" in result.stdout  # lines after reset still seen


@pytest.mark.slow
def test_os_exit_from_a_thread_left_running_after_the_call_is_named_too(tmp_path):
    script = tmp_path / "game.py"
    script.write_text(textwrap.dedent("""
        import os, threading, time
        from vigor_cli.episodes.calls import bounded_call
        def later():
            time.sleep(0.5); os._exit(9)
        def reset():
            threading.Thread(target=later, daemon=True).start()
        bounded_call(reset, 5)
        time.sleep(30)
        print("not ended")
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 9 and "not ended" not in result.stdout
    assert "the user's code called os._exit(9) (game.py, line 5)" in result.stderr


def test_class_and_module_state_is_read_cheaply_and_changes_are_seen():
    from vigor_cli.episodes.tools import shared_state

    class Counter:
        seen: list = []
        big = list(range(5000))

        def reset(self, **kwargs):
            return None

    before = shared_state(Counter)
    assert before["Counter.seen"] == "[]" and before["Counter.big"].startswith("<list of 5000 at ")
    Counter.seen.append(1)
    Counter.big.append(1)
    after = shared_state(Counter)
    assert [k for k in before if before[k] != after[k]] == ["Counter.seen", "Counter.big"]

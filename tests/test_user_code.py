"""The boundary around the user's reward functions (vigor_cli/user/code.py, issue 36 part 1):
whatever a function raises is one line, it gets its own copies of the arguments and is held
to the count it was given, a time limit stops it, what it changes of the process (stdout,
stderr, the working directory, the signal handlers) is put back, and its threads never keep
the process alive. Real reward files, imported as `vigor train --reward FILE.py:FUNC` does."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from vigor_cli.user import rewards, code as user_code
from vigor_cli.errors import UserError
from vigor_cli.interrupt import StopSignals, TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]

FUNCTIONS = '''
import os
import sys
import threading
import time


class Halt(BaseException):
    pass


def halts(prompts, completions, **kwargs):
    raise Halt("no more")


def exits(prompts, completions, **kwargs):
    sys.exit()


def exits_with_text(prompts, completions, **kwargs):
    sys.exit("done grading")


def interrupts(prompts, completions, **kwargs):
    raise KeyboardInterrupt("mine")


def generator_exit(prompts, completions, **kwargs):
    raise GeneratorExit


def rewrites(prompts, completions, **kwargs):
    for i in range(len(completions)):
        completions[i] = "rewritten"
    prompts[0][0]["content"] = "changed"
    kwargs["word"].append("extra")
    return [1.0] * len(completions)


def reads(prompts, completions, word, **kwargs):
    assert "rewritten" not in completions and prompts[0][0]["content"] == "2+2?" and len(word) == 2
    return [0.5] * len(completions)


def pops(prompts, completions, **kwargs):
    completions.pop()
    return [0.0] * len(completions)


def closes_stdout(prompts, completions, **kwargs):
    sys.stdout.close()
    sys.stderr = open(os.devnull, "w")
    return [0.0] * len(completions)


def closes_fd(prompts, completions, **kwargs):
    os.close(2)
    return [0.0] * len(completions)


def moves(prompts, completions, **kwargs):
    os.chdir("/")
    return [0.0] * len(completions)


def sleeps(prompts, completions, **kwargs):
    time.sleep(600)


def swallows(prompts, completions, **kwargs):
    while True:
        try:
            time.sleep(0.05)
        except Exception:
            continue


def starts_a_thread(prompts, completions, **kwargs):
    threading.Thread(target=time.sleep, args=(60,), name="left-default").start()
    return [0.0] * len(completions)


def starts_a_non_daemon_thread(prompts, completions, **kwargs):
    threading.Thread(target=time.sleep, args=(1.5,), name="left-on-purpose", daemon=False).start()
    return [0.0] * len(completions)


def leaves_a_pool_busy(prompts, completions, **kwargs):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(2, thread_name_prefix="busy-pool")
    pool.submit(time.sleep, 60)
    return [0.0] * len(completions)


def leaves_a_pool_idle(prompts, completions, **kwargs):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix="idle-pool")
    pool.submit(len, completions).result()
    return [0.0] * len(completions)


def ctrl_c(prompts, completions, **kwargs):
    os.kill(os.getpid(), signal_number("SIGINT"))
    time.sleep(5)
    return [0.0] * len(completions)


def sigterm(prompts, completions, **kwargs):
    os.kill(os.getpid(), signal_number("SIGTERM"))
    time.sleep(5)
    return [0.0] * len(completions)


def signal_number(name):
    import signal

    return getattr(signal, name)


def exits_hard(prompts, completions, **kwargs):
    os._exit(0)


def changes_settings(prompts, completions, **kwargs):
    import warnings

    import torch

    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    warnings.simplefilter("error")
    return [0.0] * len(completions)


def takes_the_handlers(prompts, completions, **kwargs):
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return [0.0] * len(completions)
'''

PROMPTS = [[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "3+3?"}]]
COMPLETIONS = [[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "6"}]]


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "functions.py"
    path.write_text(FUNCTIONS)
    return lambda name, **k: rewards.load_reward(f"{path}:{name}", **k)


def score(reward, **columns):
    return reward(PROMPTS, COMPLETIONS, word=["ab", "cd"], **columns)


@pytest.mark.parametrize("name, said", [
    ("halts", "raised Halt: no more (functions.py, line 13)"),
    ("exits", "raised SystemExit: sys.exit() called (functions.py, line 17)"),
    ("exits_with_text", "raised SystemExit: sys.exit('done grading') called (functions.py, line 21)"),
    ("interrupts", "raised KeyboardInterrupt (raised by the code itself, not a Ctrl-C) (functions.py, line 25)"),
    ("generator_exit", "raised GeneratorExit (functions.py, line 29)"),
    ("pops", "returned 1 values for 2 completions"),
    ("exits_hard", "raised os._exit(0) called (it would have ended the process) (functions.py, line"),
])
def test_whatever_a_reward_raises_is_one_line_naming_it(spec, name, said):
    with pytest.raises(UserError) as e:
        score(spec(name))
    assert str(e.value).startswith(f"reward function {spec(name).spec} ") and said in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_each_reward_gets_its_own_copies(spec):
    """One function rewriting completions, a prompt's message and a column in place changes
    nothing another function (or the trainer) sees."""
    columns = {"word": ["ab", "cd"]}
    prompts = [[dict(m) for m in p] for p in PROMPTS]
    assert spec("rewrites")(prompts, COMPLETIONS, **columns) == [1.0, 1.0]
    assert spec("reads")(prompts, COMPLETIONS, **columns) == [0.5, 0.5]
    assert prompts == PROMPTS and columns == {"word": ["ab", "cd"]}
    marker = object()  # not data: passed as it is (a callback, a state object)
    assert user_code.private_copy(marker) is marker


def test_a_custom_task_grades_each_function_on_what_the_data_said(tmp_path):
    import json

    from vigor_cli.config import TaskConfig
    from vigor_cli.tasks import get_task

    (tmp_path / "f.py").write_text(FUNCTIONS)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": "2+2?"}], "word": w}) + "\n"
                            for w in ("ab", "cd")))
    task = get_task(TaskConfig(name="custom", data=str(data), rewards=[f"{tmp_path}/f.py:rewrites",
                                                                        f"{tmp_path}/f.py:reads"]))
    examples = task.train_examples()
    scores = task.score(examples, ["4", "5"])
    assert [s.components for s in scores] == [{"rewrites": 1.0, "reads": 0.5}] * 2
    assert examples[0].meta["prompt"] == [{"role": "user", "content": "2+2?"}]


def test_stdout_stderr_and_their_descriptors_are_put_back(spec, monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    score(spec("closes_stdout"))  # closes stdout, replaces stderr
    assert sys.stderr is err
    assert sys.stdout is not out and not sys.stdout.closed  # a working stream in the closed one's place
    before = os.fstat(2)
    score(spec("closes_fd"))
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)


def test_a_closed_real_stdout_is_reopened_on_its_descriptor():
    """The process's own stdout (what `vigor train` prints to) closed by the code: a new
    stream on the same descriptor takes its place."""
    script = textwrap.dedent("""
        import sys
        from vigor_cli.user import code as user_code
        user_code.call(lambda: sys.stdout.close(), describe=str)
        print("after", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "after\n", proc.stderr[-2000:]


def test_settings_a_script_would_change_are_put_back(spec):
    """What a reward file written as a script changes of the process (no gradients, float64,
    warnings as errors) would break the update after it: put back."""
    import warnings

    import torch

    filters = list(warnings.filters)
    score(spec("changes_settings"))
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert warnings.filters == filters
    assert os._exit is user_code._REAL_EXIT


def test_the_working_directory_and_signal_handlers_are_put_back(spec):
    here = os.getcwd()
    score(spec("moves"))
    assert os.getcwd() == here
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    score(spec("takes_the_handlers"))
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["sleeps", "swallows"])
def test_a_call_past_its_time_limit_is_stopped_in_one_line(spec, name):
    reward = spec(name, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(UserError) as e:
        score(reward)
    assert time.monotonic() - t0 < 10
    assert str(e.value).startswith(f"reward function {reward.spec} did not return within task.reward_timeout=0.3 s "
                                   "and was stopped (functions.py, line")
    assert "--set task.reward_timeout=SECONDS" in str(e.value)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # pytest's, put back
    time.sleep(0.2)  # no stop of the watchdog arrives late


def test_a_call_within_its_limit_is_not_touched(spec):
    reward = spec("reads", timeout=5)
    for _ in range(20):
        assert score(reward) == [0.5, 0.5]
    assert not any(t.name == "vigor-call-limit" and t.is_alive() for t in threading.enumerate())


def test_the_users_ctrl_c_and_the_trainers_stop_pass_through(spec):
    """A real SIGINT during the call is the user's Ctrl-C (not the function's error); under the
    trainer's handlers a SIGTERM is its stop (TrainingInterrupted), as a Ctrl-C is."""
    with pytest.raises(KeyboardInterrupt) as e:
        score(spec("ctrl_c"))
    assert not isinstance(e.value, UserError)
    with StopSignals(), pytest.raises(TrainingInterrupted) as stop:
        score(spec("sigterm"))
    assert stop.value.signum == signal.SIGTERM


def test_threads_a_reward_starts_are_daemons_and_non_daemons_are_named(spec, capsys):
    score(spec("starts_a_thread"))
    left = next(t for t in threading.enumerate() if t.name == "left-default")
    assert left.daemon  # inherited: it never keeps the process alive
    assert not threading.current_thread().daemon
    assert user_code.left_running() == []
    score(spec("starts_a_non_daemon_thread"))
    score(spec("starts_a_non_daemon_thread"))
    lines = user_code.left_running()
    assert lines == [f"reward function {spec('starts_a_non_daemon_thread').spec} left 2 threads running "
                     "('left-on-purpose', started with daemon=False): the process ends only when they do; join "
                     "them before returning, or make them daemon threads"]
    assert user_code.left_running() == []  # said once


def test_a_thread_pool_left_working_is_let_go_and_named(spec):
    """The interpreter joins thread-pool workers at exit, daemon or not: a job a reward left
    running would hold the process after the run; it is let go and named, an idle pool is not."""
    from concurrent.futures import thread as pool_threads

    score(spec("leaves_a_pool_idle"))
    score(spec("leaves_a_pool_busy"))
    busy = [t for t in threading.enumerate() if t.name.startswith("busy-pool")]
    assert busy and all(t in pool_threads._threads_queues for t in busy)
    lines = user_code.left_running()
    assert lines == [f"reward function {spec('leaves_a_pool_busy').spec} left work running in a thread pool "
                     "('busy-pool_0'): it is not waited for at exit; shut the pool down (shutdown(wait=True)) "
                     "before returning"]
    assert not any(t.name.startswith(("busy-pool", "idle-pool")) for t in pool_threads._threads_queues)
    assert user_code.left_running() == []


def test_an_import_that_exits_or_interrupts_is_one_line(tmp_path):
    for body, said in [("import sys\nsys.exit(4)\n", "(f.py, line 2): SystemExit: sys.exit(4) called"),
                       ("raise KeyboardInterrupt\n", "(f.py, line 1): KeyboardInterrupt (raised by the code itself"),
                       ("import os\nos.chdir('/')\ndef g(completions):\n    return []\n", None)]:
        path = tmp_path / "f.py"
        path.write_text(body)
        here = os.getcwd()
        for name in [n for n in sys.modules if n.startswith("vigor_user_reward_")]:
            del sys.modules[name]
        if said is None:
            rewards.load_reward(f"{path}:g")
            assert os.getcwd() == here  # the import's chdir put back
            continue
        with pytest.raises(UserError) as e:
            rewards.load_reward(f"{path}:g")
        assert str(e.value).startswith(f"--reward {path}:g: importing {path} failed") and said in str(e.value)


def test_a_coroutine_left_unawaited_is_closed_without_a_warning(tmp_path, recwarn):
    async def later():
        return [1.0]

    coroutine = later()
    with pytest.raises(UserError, match="returned a coroutine"):
        rewards.check_values(coroutine, 1, "reward function f.py:g")
    assert coroutine.cr_frame is None  # closed: Python has nothing to warn about
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


@pytest.mark.slow
def test_a_call_that_ignores_every_stop_ends_the_process_in_one_line(tmp_path):
    script = textwrap.dedent("""
        import time
        from vigor_cli.user import code as user_code
        user_code.STOP_GRACE_S = 1.0

        def stubborn():
            while True:
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass

        user_code.call(stubborn, describe=str, timeout=0.5, timeout_line=lambda s, w: f"f did not return within {s:g} s")
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and time.monotonic() - t0 < 60
    assert proc.stderr.strip().splitlines() == [
        "error: f did not return within 0.5 s, and ignored being stopped for 1 s; exiting"], proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_run_outlives_what_its_rewards_do_to_the_process(tmp_path):
    """`vigor train` in its own process, with rewards that start a thread (of a default kind,
    sleeping 10 minutes), start a short non-daemon one, leave a 10-minute job in a thread pool
    and close stdout: the run prints its summary, names the non-daemon thread and the pool,
    and exits 0 without waiting for the long ones."""
    import json

    (tmp_path / "r.py").write_text(textwrap.dedent('''
        import sys, threading, time

        def background(prompts, completions, **kwargs):
            threading.Thread(target=time.sleep, args=(600,), name="forever").start()
            return [0.0] * len(completions)

        def on_purpose(prompts, completions, **kwargs):
            threading.Thread(target=time.sleep, args=(2,), name="two-seconds", daemon=False).start()
            return [0.0] * len(completions)

        def closes(prompts, completions, **kwargs):
            sys.stdout.close()
            return [0.0] * len(completions)

        def pooled(prompts, completions, **kwargs):
            from concurrent.futures import ThreadPoolExecutor

            ThreadPoolExecutor(1, thread_name_prefix="pool").submit(time.sleep, 600)
            return [0.0] * len(completions)
    '''))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{w}=", "word": w}) + "\n" for w in ("ab", "abc", "a", "b", "cd")))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vigor_cli", "train", "--data", str(data), "--steps", "1",
                           "--prompts-per-step", "2", "--output-dir", str(tmp_path / "runs"),
                           "--set", "train.eval_limit=2", "--set", "sampling.max_new_tokens=2",
                           *(a for f in ("background", "on_purpose", "closes", "pooled") for a in ("--reward", f"{tmp_path}/r.py:{f}"))],
                          capture_output=True, text=True, cwd=ROOT, timeout=500)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 400
    assert "held-out reward" in proc.stdout  # printed after the reward closed stdout
    import re

    assert re.search(rf"warning: reward function {re.escape(str(tmp_path))}/r.py:on_purpose left \d+ threads running "
                     r"\('two-seconds', started with daemon=False\)", proc.stderr), proc.stderr
    assert "forever" not in proc.stderr
    assert re.search(rf"r.py:pooled left work running in a thread pool \('pool_\d+'(, 'pool_\d+')*\): it is not waited "
                     "for at exit", proc.stderr), proc.stderr

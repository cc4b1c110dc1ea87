"""Workers die with their parent, whatever killed it (issues 17 and 24: leftovers).

The parent is SIGKILLed (no cleanup code of its own runs), and every process it had started
(sandbox fork servers, their zygotes and the program under test; math verifier workers and
the process they are forked from) must be gone within 1 s, although the program under test
had a 60 s limit to run out, and nothing may be left in the temp directory (multiprocessing's
forkserver left a ``pymp-*`` folder there, and took up to 2.9 s to exit).
"""

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

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "lcb"


def _children() -> dict[int, list[int]]:
    """ppid -> pids, for every live (non-zombie) process."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if state[state.rfind(")") + 2] != "Z":
            alive.add(pid)
    return alive


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


GRACE_S = 1.0
"""How long a child may outlive its SIGKILLed parent."""


KEPT_CACHES = ("torchinductor_",)
"""Caches a library keeps in the temp directory across runs on purpose (torch's compile cache,
there after a clean exit too): not leftovers of a killed run."""


def _kill_and_check(proc: subprocess.Popen, started: set[int], temp_dir: Path | None = None) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + GRACE_S
    while _alive(started) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = _alive(started)
    for pid in left:  # do not leave them to the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"{len(left)} process(es) outlived their killed parent by {GRACE_S} s"
    if temp_dir is not None:
        left = sorted(p.name for p in temp_dir.iterdir() if not p.name.startswith(KEPT_CACHES))
        assert left == [], "left in the temp directory"


def _private_temp(tmp_path: Path) -> Path:
    """A temp directory of the test's own (TMPDIR for the parent), so leftovers are its own."""
    folder = tmp_path / "temp"
    folder.mkdir()
    return folder


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
@pytest.mark.slow
def test_verify_code_killed_mid_test_leaves_no_process(tmp_path):
    problem = FIXTURES / "stdin_problem.json"
    solution = tmp_path / "slow.py"
    solution.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    temp = _private_temp(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vigor_cli", "verify", "code", "--problem", str(problem),
         "--solution", str(solution), "--timeout", "60", "--allow-weak-sandbox"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        # The program under test runs once the tree is three deep: the CLI, a fork server,
        # its zygote and the program (plus the probe's helpers, which come and go).
        def deep_enough():
            found = _descendants(proc.pid)
            depth_three = any(_descendants(c) for c in _children().get(proc.pid, [])
                              for c in _children().get(c, []))
            return found if depth_three else set()

        started = _wait_for(deep_enough, 60, "the program under test to start")
        time.sleep(0.5)
        started |= _descendants(proc.pid)
    except BaseException:
        proc.kill()
        raise
    _kill_and_check(proc, started, temp)


MATH_PARENT = textwrap.dedent(
    """
    import threading, time
    from vigor_cli.verifiers.math import MathVerifier

    if __name__ == "__main__":
        verifier = MathVerifier(timeout_s=60, workers=2)
        verifier.score_many([("2", "\\\\boxed{2}", None), ("x^2", "\\\\boxed{x*x}", None)])
        # Several seconds of sympy in a worker (expanding a power of a sum), so that the
        # worker is busy, not waiting on its pipe, when the parent dies.
        slow = ("x^2+1", "\\\\boxed{(x+y+z+1)^{40}}", None)
        threading.Thread(target=verifier.score_many, args=([slow],), daemon=True).start()
        time.sleep(1.0)
        print("ready", flush=True)
        time.sleep(120)
    """
)


def _kill_math_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(MATH_PARENT)
    temp = _private_temp(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
        started = _descendants(proc.pid)
        assert len(started) >= 3  # the process workers are forked from, and two workers
    except BaseException:
        proc.kill()
        raise
    _kill_and_check(proc, started, temp)


def test_math_workers_die_with_a_killed_parent(tmp_path):
    _kill_math_parent(tmp_path)


STARTING_PARENT = textwrap.dedent(
    """
    import threading, time
    from vigor_cli.verifiers.math import MathVerifier

    if __name__ == "__main__":
        verifier = MathVerifier(timeout_s=60, workers=1)
        threading.Thread(target=verifier.score_many, args=([("x^2", "\\\\boxed{x*x}", None)],),
                         daemon=True).start()
        time.sleep(120)
    """
)


def test_a_verifier_starting_up_dies_with_a_killed_parent(tmp_path):
    """Killed while the process workers are forked from is still importing Math-Verify."""
    script = tmp_path / "parent.py"
    script.write_text(STARTING_PARENT)
    temp = _private_temp(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = _wait_for(lambda: _descendants(proc.pid), 60, "the verifier's first process")
    except BaseException:
        proc.kill()
        raise
    _kill_and_check(proc, started, temp)


@pytest.mark.slow
def test_math_workers_die_with_a_killed_parent_every_time(tmp_path):
    """The issue's measure: 8 of 40 kills left a child alive for more than 2 s. Ten in a row,
    each within 1 s. (Slow: ten verifier starts.)"""
    for attempt in range(10):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        _kill_math_parent(folder)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
@pytest.mark.parametrize("task", ["tiny-code", "tiny-math"])
def test_a_killed_training_leaves_no_reward_worker(tmp_path, task):
    """tiny-code's rewards run in the sandbox pool, tiny-math's in the math verifier's
    workers: SIGKILL the training after its first logged step (workers busy or idle between
    steps) and nothing it started survives 1 s, nothing is left in its temp directory.
    (Slow: a real training. The busy-worker case is the tests above.)"""
    temp = _private_temp(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vigor_cli", "train", "--task", task, "--steps", "50",
         "--output-dir", str(tmp_path), "--run-name", "killed"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    metrics = tmp_path / "killed" / "metrics.jsonl"
    try:
        _wait_for(lambda: metrics.exists() and metrics.read_text().strip(), 240,
                  "the first training step")
        started = _descendants(proc.pid)
        assert started, "the training started no reward worker"
    except BaseException:
        proc.kill()
        raise
    _kill_and_check(proc, started, temp)


@pytest.mark.slow
def test_math_workers_ride_out_a_group_sigterm(tmp_path):
    """`kill -TERM -<pgid>` reaches the workers too; the trainer finishes its step on SIGTERM,
    which needs them, so they ignore it (and still die with the parent, above)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(
        """
        import os, signal, time
        from vigor_cli.verifiers.math import MathVerifier

        if __name__ == "__main__":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            verifier = MathVerifier(timeout_s=60, workers=2)
            verifier.score_many([("2", "\\\\\\\\boxed{2}", None), ("3", "\\\\\\\\boxed{3}", None)])
            os.killpg(os.getpgid(0), signal.SIGTERM)
            time.sleep(0.5)
            v = verifier.score_many([("2", "\\\\\\\\boxed{2}", None), ("x^2", "\\\\\\\\boxed{x*x}", None)])
            print([r.reward for r in v], verifier.restarts, flush=True)
            verifier.close()
        """))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[1.0,", "1.0]", "0"]

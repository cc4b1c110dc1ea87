"""The sandbox review's open items (issue 12): a broken sandbox stops training, the pool never
waits forever, a hanging reference solution is paid for once, zlib bombs are refused,
evaluation uses private tests, a weak sandbox needs an explicit opt-in, and the Landlock
allow-list keeps the project unreadable wherever it is installed."""

from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest

from vigor_cli.errors import UserError
from vigor_cli.sandbox import Job, Limits, SandboxPool, WeakSandboxError
from vigor_cli.sandbox import pool as pool_module
from vigor_cli.verifiers import lcb
from vigor_cli.verifiers.code import CodeVerifier, load_problem

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(timeout_s=3.0, memory_mb=256)


def _record(qid: str, public, private=(), metadata: dict | None = None) -> dict:
    as_json = lambda pairs: json.dumps([{"input": i, "output": o, "testtype": "stdin"}  # noqa: E731
                                        for i, o in pairs])
    return {"question_id": qid, "question_title": qid, "question_content": "Echo n.",
            "platform": "atcoder", "contest_id": "x", "contest_date": "2026-01-01T00:00:00",
            "difficulty": "easy", "starter_code": "", "metadata": json.dumps(metadata or {}),
            "public_test_cases": as_json(public), "private_test_cases": as_json(private)}


# --------------------------------------------------------------------------- sandbox errors
@pytest.mark.slow  # a whole tiny-code training
def test_a_broken_sandbox_stops_training_instead_of_scoring_zero():
    """A worker killed mid-run is a sandbox error, never a runtime error scored 0 and trained
    on; when it is most of the batch (here the whole batch) the code task raises one clear
    error."""
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    task = TinyCodeTask(workers=1)
    example = task.train[0]
    warm = task.score([example], [f"```python\n{example.meta['solution']}\n```"])
    assert warm[0].reward == 1.0 and warm[0].details["isolation"] == "full"
    worker = task._verifier.pool._workers[0]
    raised: list[BaseException] = []

    def score_a_sleeper():
        try:
            task.score([example], ["```python\nimport time\ntime.sleep(3)\n```"])
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            raised.append(exc)

    runner = threading.Thread(target=score_a_sleeper)
    runner.start()
    time.sleep(1.0)
    os.kill(worker.process.pid, signal.SIGKILL)
    runner.join(timeout=30)
    task.close()
    assert raised and isinstance(raised[0], UserError), raised
    # One program of one: "most of the batch" (issue 24 keeps a lone failure per completion).
    assert "could not grade 1 of 1" in str(raised[0]) and "sandbox worker died" in str(raised[0])


@pytest.mark.slow
def test_the_pool_does_not_wait_forever_for_a_stuck_worker(monkeypatch):
    monkeypatch.setattr(pool_module, "REPLY_GRACE_S", 1.0)
    with SandboxPool(workers=1) as pool:
        stuck = pool._workers[0]
        os.kill(stuck.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        run = pool.run_one(Job("print(1)", b"", Limits(timeout_s=1.0)))
        assert run.outcome == "sandbox_error" and "no answer" in run.detail
        assert time.monotonic() - started < 10
        assert pool._workers[0] is not stuck
        again = pool.run_one(Job("print(2)", b"", Limits(timeout_s=1.0)))
        assert again.outcome == "ok" and again.stdout == b"2\n"


# --------------------------------------------------------------------------- reference solutions
HANGS_ON_2 = "import time\nn = int(input())\nif n == 2:\n    time.sleep(100)\nprint(n)\n"


@pytest.mark.slow
def test_a_hanging_reference_solution_is_reported_once_and_not_paid_per_rollout(capfd):
    broken = load_problem(_record("hangs", [("1\n", "1\n"), ("2\n", "2\n")],
                                  metadata={"reference_solution": HANGS_ON_2}))
    fine = load_problem(_record("fine", [("1\n", "1\n")],
                                metadata={"reference_solution": "print(input())"}))
    echo = "print(input())"
    with CodeVerifier(workers=2, timeout_s=1.0, memory_mb=256) as verifier:
        started = time.monotonic()
        first = verifier.grade_many([(broken, echo, "public")] * 4 + [(fine, echo, "public")])
        second = verifier.grade_many([(broken, echo, "public")] * 4)
        elapsed = time.monotonic() - started
    reports = capfd.readouterr().err.count("problem hangs: its reference solution")
    assert reports == 1, "the broken problem must be reported exactly once"
    for verdict in first[:4] + second:
        assert verdict.full == 0.0 and verdict.reason.startswith("not run")
        assert verdict.flag and "reference solution fails" in verdict.flag
        assert {t.status for t in verdict.tests} == {"skipped"}
    assert first[4].full == 1.0 and first[4].flag is None
    # One time limit for the reference; eight rollouts would have cost eight.
    assert elapsed < 4.0, elapsed


# --------------------------------------------------------------------------- zlib bombs
def test_private_tests_that_decompress_past_the_cap_are_refused(monkeypatch):
    monkeypatch.setattr(lcb, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    bomb = base64.b64encode(zlib.compress(b"[" + b" " * (8 << 20) + b"]", 9)).decode()
    record = _record("bomb", [("1\n", "1\n")])
    record["private_test_cases"] = bomb
    with pytest.raises(lcb.ProblemError, match=r"bomb: field private_test_cases decompresses "
                                               r"to more than 1 MiB"):
        load_problem(record)
    assert lcb.MAX_DECOMPRESSED_BYTES == 1 << 20
    small = _record("small", [("1\n", "1\n")])
    # The release format: base64(zlib(pickle(<JSON text>))).
    tests_json = json.dumps([{"input": "2\n", "output": "2\n", "testtype": "stdin"}])
    small["private_test_cases"] = base64.b64encode(zlib.compress(pickle.dumps(tests_json))).decode()
    assert load_problem(small).private_tests[0].output == "2\n"
    truncated = _record("cut", [("1\n", "1\n")])
    truncated["private_test_cases"] = base64.b64encode(zlib.compress(b"x" * 1000)[:-6]).decode()
    with pytest.raises(lcb.ProblemError, match="cut: field private_test_cases"):
        load_problem(truncated)


# --------------------------------------------------------------------------- private tests
@pytest.mark.slow
def test_evaluation_uses_private_tests_and_training_public_ones():
    """A program that hard-codes the public answers earns the training reward but nothing
    in evaluation, which grades the private tests (the paper's protocol)."""
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    task = TinyCodeTask(workers=2)
    try:
        held = task.held_out[0]
        assert held.meta["tests"] == "private"
        public = json.loads(held.answer["public_test_cases"])
        cheat = "answers = {%s}\nprint(answers[input() + '\\n'], end='')\n" % ", ".join(
            f"{t['input']!r}: {t['output']!r}" for t in public)
        train_view = type(held)(uid=held.uid + "/as-train", question=held.question,
                                answer=held.answer, meta={**held.meta, "tests": "public"})
        as_train, as_eval = task.score([train_view, held], [f"```python\n{cheat}```"] * 2)
        assert as_train.reward == 1.0, as_train.reason
        assert as_eval.reward == 0.0, as_eval.reason
        problem = load_problem(held.answer)
        assert len(as_eval.details["tests"]) == len(problem.private_tests) == 4
    finally:
        task.close()


def test_private_falls_back_to_public_when_a_record_has_none():
    problem = load_problem(_record("p", [("1\n", "1\n")]))
    assert problem.tests("private") == problem.tests("public")
    with pytest.raises(ValueError, match="public', 'private' or 'all"):
        problem.tests("hidden")


# --------------------------------------------------------------------------- weak sandbox
def test_a_weak_sandbox_is_refused_unless_opted_in():
    with SandboxPool(workers=1, disable=("landlock",)) as weak:
        assert weak.isolation == "weak (no landlock)" and not weak.isolated
        with pytest.raises(WeakSandboxError, match=r"weak \(no landlock\).*allow-weak-sandbox"):
            CodeVerifier(pool=weak)
        verifier = CodeVerifier(pool=weak, allow_weak_sandbox=True)
        verdict = verifier.grade(load_problem(_record("w", [("3\n", "3\n")])), "print(input())")
        assert verdict.full == 1.0 and verdict.isolation == "weak (no landlock)"
        # Without Landlock a program reads the project again: the layer is what stops it.
        leak = weak.run_one(Job(f"print(open({str(ROOT / 'README.md')!r}).read()[:6])", b"",
                                LIMITS))
        assert leak.outcome == "ok" and leak.stdout.startswith(b"# ")


@pytest.fixture
def problem_files(tmp_path):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(_record("cli", [("3\n", "3\n")])))
    solution = tmp_path / "s.py"
    solution.write_text("print(input())\n")
    return problem, solution


@pytest.mark.slow
def test_cli_prints_the_isolation_level(vigor, problem_files):
    problem, solution = problem_files
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution))
    assert code == 0, err
    assert "isolation: full" in out
    code, out, _ = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution),
                         "--json")
    assert json.loads(out)["isolation"] == "full"


@pytest.mark.slow
def test_cli_refuses_a_weak_sandbox_without_the_flag(vigor, problem_files, monkeypatch):
    from vigor_cli.verifiers import code as code_module

    monkeypatch.setattr(code_module, "SandboxPool",
                        functools.partial(SandboxPool, disable=("landlock", "pid_namespace")))
    problem, solution = problem_files
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution))
    assert code == 2
    assert "weak (no landlock, no pid_namespace)" in err and "--allow-weak-sandbox" in err
    assert len(err.strip().splitlines()) <= 3  # one error line (wrapped at most)
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution),
                           "--allow-weak-sandbox")
    assert code == 0, err
    assert "isolation: weak (no landlock, no pid_namespace)" in out


@pytest.mark.slow
def test_training_config_key_opts_in(monkeypatch):
    from vigor_cli.config import TaskConfig
    from vigor_cli.tasks import get_task
    from vigor_cli.verifiers import code as code_module

    monkeypatch.setattr(code_module, "SandboxPool",
                        functools.partial(SandboxPool, disable=("landlock",)))
    strict = get_task(TaskConfig(name="tiny-code"), workers=1)
    example = strict.train[0]
    answer = f"```python\n{example.meta['solution']}\n```"
    with pytest.raises(UserError, match="tiny-code: .*weak \\(no landlock\\).*task.allow_weak_sandbox"):
        strict.score([example], [answer])
    lenient = get_task(TaskConfig(name="tiny-code", allow_weak_sandbox=True), workers=1)
    try:
        score = lenient.score([example], [answer])[0]
        assert score.reward == 1.0 and score.details["isolation"] == "weak (no landlock)"
    finally:
        lenient.close()


# --------------------------------------------------------------------------- where the project lives
def test_allow_list_never_covers_site_packages_or_the_project():
    """The rules read by the zygote: the standard library entry by entry (its site-packages
    excluded even where it sits inside it, as in a pyenv or a wheel install), numpy and
    sortedcontainers only, and never the project."""
    import numpy  # noqa: F401
    import sortedcontainers  # noqa: F401
    import sysconfig

    from vigor_cli.sandbox import landlock

    project = str(ROOT)
    rules = landlock.allow_list("/nonexistent/jobs", forbidden=(project,))
    site = os.path.realpath(sysconfig.get_path("purelib"))
    allowed = [os.path.dirname(os.path.realpath(m.__file__)) for m in (numpy, sortedcontainers)]
    for path, access in rules:
        real = os.path.realpath(path)
        if real == site or real.startswith(site + os.sep):  # (a venv may sit in the project: README's .venv)
            assert any(real == a or real.startswith(a) for a in allowed), path
        else:
            assert not (real == project or real.startswith(project + os.sep)), path
        if site.startswith(real + os.sep):  # an ancestor (the stdlib folder of a pyenv)
            assert access == landlock.READ_DIR, (path, access)


def _copy_checkout(target: Path) -> None:
    for folder in ("sandbox", "verifiers", "configs"):
        shutil.copytree(ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "vigor_cli", target / "vigor_cli", ignore=shutil.ignore_patterns("__pycache__", "assets"))
    shutil.copy(ROOT / "pyproject.toml", target)
    shutil.copy(ROOT / "README.md", target)


PROBE = textwrap.dedent("""
    import sys
    from vigor_cli.sandbox import Job, Limits, SandboxPool
    import vigor_cli
    root = sys.argv[1]
    attack = "import vigor_cli.tasks.tiny_code as t; print(len(t.all_records()))"
    reading = f"print(open({root!r} + '/vigor_cli/tasks/tiny_code.py').read()[:20])"
    with SandboxPool(workers=1) as pool:
        runs = [pool.run_one(Job(s, b"", Limits(timeout_s=5, memory_mb=256)))
                for s in (attack, reading, "import numpy; print(numpy.arange(3).sum())")]
        print(vigor_cli.__file__.startswith(root), pool.isolation,
              [r.outcome for r in runs], runs[2].stdout.decode().strip())
""")


@pytest.mark.parametrize("layout", ["checkout_under_tmp", "wheel_like_site_packages"])
@pytest.mark.slow
def test_isolation_holds_wherever_the_project_lives(layout):
    """A checkout under /tmp installed editable (as CI's clone; covered by the worker's private
    tmpfs, bound back), and a copy installed as plain folders in a site-packages (as a wheel
    lays it out): full isolation, the task code unreadable."""
    from venvs import clean_env, make_venv, pip_install

    base = Path("/tmp") / f"vigor-{layout}-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    root = base if layout == "checkout_under_tmp" else base / "lib" / "python3.11" / "site-packages"
    root.mkdir(parents=True)
    try:
        _copy_checkout(root)
        if layout == "wheel_like_site_packages":  # the wheel's layout: vigor_cli/sandbox, ...
            for name in ("sandbox", "verifiers", "configs"):
                shutil.move(str(root / name), str(root / "vigor_cli" / name))
            python, env = sys.executable, {**os.environ, "PYTHONPATH": str(root)}
        else:  # pyproject.toml maps sandbox/ and verifiers/ into vigor_cli
            python = make_venv(base / "env")
            pip_install(python, "--no-build-isolation", "-e", str(root), cwd=base)
            env = clean_env()
        out = subprocess.run([str(python), "-c", PROBE, str(root)], capture_output=True,
                             text=True, timeout=120, cwd="/", env=env)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() [:2] == ["True", "full"], out.stdout + out.stderr[-1000:]
    assert "['exit', 'exit', 'ok'] 3" in out.stdout, out.stdout


def test_remove_tree_handles_a_chain_deeper_than_recursion_and_path_limits():
    from vigor_cli.sandbox.namespace import remove_tree

    top = Path("/dev/shm" if os.path.isdir("/dev/shm") else "/tmp") / f"vigor-deep-{os.getpid()}"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for level in range(3000):  # 9000 characters of path: past PATH_MAX and the recursion limit
        os.mkdir("ddd", dir_fd=fd)
        if level % 500 == 0:
            with open(os.open("file", os.O_CREAT | os.O_WRONLY, dir_fd=fd), "w") as f:
                f.write("x")
            os.symlink("/etc", "link", dir_fd=fd)
        inner = os.open("ddd", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    started = time.monotonic()
    remove_tree(str(top))
    assert not top.exists()
    assert time.monotonic() - started < 5
    assert os.path.isdir("/etc")


@pytest.mark.slow
def test_deep_tree_without_a_job_tmpfs_is_removed_too():
    """Where no tmpfs can be mounted per job, the descriptor walk removes the program's tree."""
    program = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    with SandboxPool(workers=1, disable=("job_tmpfs",)) as pool:
        assert pool.isolation == "weak (no job_tmpfs)"
        run = pool.run_one(Job(program, b"", LIMITS))
        assert run.outcome == "ok" and run.stdout == b"deep\n", run.stderr_head
        after = pool.run_one(Job("print(1)", b"", LIMITS))
        assert after.outcome == "ok"
        worker = pool._workers[0]
        base = f"/proc/{worker.process.pid}/root{worker.capabilities['base_dir']}"
        assert os.listdir(base) == ["job"] and os.listdir(base + "/job") == []


@pytest.mark.slow
def test_two_pools_running_at_once_never_share_a_uid():
    """Each pool claims its own block of uids (a lock held while it lives): programs of two
    pools (two trainings, a test run beside a benchmark) share no uid-scoped limit."""
    with SandboxPool(workers=2) as first, SandboxPool(workers=1) as second:
        assert not set(first.capabilities["uids"]) & set(second.capabilities["uids"])
        runs = [p.run_one(Job("import os; print(os.getuid())", b"", LIMITS)) for p in (first, second)]
        assert int(runs[0].stdout) in first.capabilities["uids"]
        assert int(runs[1].stdout) == second.capabilities["uids"][0]
        held = second.capabilities["uids"][0]
    with SandboxPool(workers=1) as third:  # blocks are released on close
        assert third.capabilities["uids"][0] <= held

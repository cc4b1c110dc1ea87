"""Issue 24, a second hostile round: fresh inputs and programs from each class, each of which
broke something before its fix (one fix per class, at its root).

1. One completion never stops training: a completion holding rich markup stopped `vigor train`
   at its completions table (MarkupError), and a program's terminal escape sequences reached
   the terminal through `vigor verify code` (now shown as ``\\x1b``: vigor_cli/console.py).
2. No memory outside the limit, no grader path in a verdict: ``memfd_secret`` (800 MiB held
   at a 64 MiB limit), Landlock rulesets (300 MiB of kernel memory) and POSIX timers
   (RLIMIT_SIGPENDING) are bounded now; a program that prints its working directory, its
   ``__file__`` or the worker's command line no longer shows the grader's folders in the
   verdict.
3. Honest programs pass: threads beyond 7 (each took a 64 MiB malloc arena of the address
   space, so ``ThreadPool(8)`` failed at 512 MiB), ``open('/dev/stdout', 'w')`` (its pipe was
   root's), a UTF-8 BOM or a coding line (CPython accepts both in a file).
4. Checkpoints: a ``COMPLETE`` or manifest for another step, a manifest that no longer lists
   every file, a file added, a name outside the checkpoint, a duplicate key, a renamed
   directory, ``data_state.json`` edited and the manifest resealed, a checkpoint copied in
   from another run: each verified before, and is damaged now.
5. Bad input: a duplicate key in a JSON/JSONL file (kept the last silently), ``--output`` onto
   a FIFO, a device or a symlink loop (replaced it: as root, ``--output /dev/null`` replaced the
   system's /dev/null), an LCB record whose test input is a number or whose func_name is not
   a name.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from vigor_cli.errors import UserError
from vigor_cli.sandbox import Job, Limits, SandboxPool

ROOT = Path(__file__).resolve().parents[1]
LCB = ROOT / "tests" / "fixtures" / "lcb" / "stdin_problem.json"
LIMITS = Limits(timeout_s=10.0, memory_mb=512)


def _plain_console(width: int = 200):
    """A console writing plain text (no colours of its own): every ESC in what it wrote
    would have come from the text printed."""
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


# =========================================================================== 1. literal text
HOSTILE_TEXT = ["[/]", "[/x] [bold]b[/bold]", "runs/[exp1]/x", "\x1b[2J\x1b[H", "\x1b]52;c;aGk=\x07",
                "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "a\rb\x08c", "\x9b31m", "\ud800"]


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_a_completion_with_markup_or_escapes_never_stops_the_completions_table(text):
    """The table `vigor train` prints every `train.log_completions_every` steps: a completion
    holding ``[/]`` raised MarkupError there and stopped the run."""
    from vigor_cli.console import visible
    from vigor_cli.train.log import completions_table

    sample = SimpleNamespace(uid="u", rollout=SimpleNamespace(text=f"answer {text} end"), reward=0.0,
                             advantage=0.5)
    examples = {"u": SimpleNamespace(question=f"question {text}")}
    console = _plain_console()
    console.print(completions_table(3, [sample], examples))
    out = console.file.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    cells = re.sub(r"[\s│┃─━┏┓┗┛┡┩╇┼┳┻┣┫┠┨╈╋┯┷┿├┤┬┴┌┐└┘]", "", out)
    assert visible(text).replace(" ", "") in cells, out


def test_verify_code_shows_a_programs_escape_sequences_instead_of_sending_them():
    from vigor_cli.report.verify_view import print_code_verdict
    from vigor_cli.verifiers.code import CodeVerdict, TestVerdict, load_problem

    problem = load_problem(json.loads(LCB.read_text()))
    stderr = "A\x1b[31mRED\x1b[0m \x1b]52;c;aGVsbG8=\x07 \x1b[2J [/] [bold]b"
    verdict = CodeVerdict(0.0, 0.0, [TestVerdict("runtime_error", stderr_head=stderr,
                                                 detail="exit code 1: \x1b[2J[/]")],
                          reason="passed 0/1; test 1: runtime_error (\x1b]8;;http://x\x1b\\)",
                          isolation="full")
    console = _plain_console()
    print_code_verdict(console, problem, "public", verdict)
    out = console.file.getvalue()
    assert "\x1b" not in out and "\x07" not in out
    for shown in ("\\x1b[31mRED", "\\x1b]52;c;aGVsbG8=\\x07", "\\x1b[2J", "[/] [bold]b",
                  "\\x1b]8;;http://x\\x1b\\"):
        assert shown in out, shown


def test_an_error_line_shows_control_characters_of_a_path(vigor, tmp_path):
    code, out, err = vigor("verify", "math", "--input", str(tmp_path / "a\x1b[2Jb[/]c.jsonl"))
    assert code == 2 and "\x1b" not in err and "a\\x1b[2Jb[/]c.jsonl" in err, err


def test_names_from_paths_and_files_are_printed_literally():
    from vigor_cli.report.eval_table import results_table

    results = {"sets": {"set[/]x": {"metrics": {"problems": 1, "n": 1, "avg@n": 0.5, "pass@k": {}}}}}
    console = _plain_console()
    console.print(results_table(results, "re-scored runs/[exp1]/r.json"))
    out = console.file.getvalue()
    assert "runs/[exp1]/r.json" in out and "set[/]x" in out


# =========================================================================== 2. memory, paths
OUTSIDE_THE_LIMIT = r"""
import ctypes, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = {}
for name, number, args in (("memfd_secret", 447, (0,)), ("landlock_create_ruleset", 444, (0, 0, 1)),
                           ("fsopen", 430, (0, 0)), ("open_tree", 428, (-100, 0, 0))):
    rc = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    found[name] = "refused" if rc == -1 and ctypes.get_errno() == 1 else f"allowed ({rc}, {ctypes.get_errno()})"
class SigEvent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_int * 12)]
event, timer, timers = SigEvent(None, 10, 1, (ctypes.c_int * 12)()), ctypes.c_void_p(), 0
while timers < 100000 and libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0:
    timers += 1
found["timers"] = timers
print(json.dumps(found))
"""


def test_kernel_memory_no_rlimit_counts_is_refused_or_bounded(pool):
    """memfd_secret held 800 MiB at a 64 MiB limit (its pages outlive every mapping), 58
    Landlock rulesets of 65536 port rules 300 MiB, and 96 000 POSIX timers 32 MiB."""
    run = pool.run_one(Job(OUTSIDE_THE_LIMIT, b"", Limits(timeout_s=10.0, memory_mb=64)))
    assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
    found = json.loads(run.stdout)
    assert found.pop("timers") <= 1024
    assert found == {name: "refused" for name in found}, found


PATH_SHOWING = {
    "cwd": "import os\nprint(os.getcwd())",
    "file": "print(__file__)",
    "tempdir": "import tempfile\nprint(tempfile.gettempdir())",
    "argv_on_stderr": "import sys\nprint(sys.orig_argv, sys.path, file=sys.stderr)\nsys.exit(1)",
    "argv_line": "import sys\nprint(sys.orig_argv[4] if len(sys.orig_argv) > 4 else 'x')",
    "functional_value": "class Solution:\n    def f(self, n):\n        import os\n        return os.getcwd()",
    "unserialisable_status": "import os\nos.write(3, ('{\"unserialisable\": \"' + os.getcwd() + '\"}\\n').encode())\n"
                             "class Solution:\n    def f(self, n):\n        return set()",
}


def _record(func: bool) -> dict:
    tests = [{"input": "1" if func else "1\n", "output": "2" if func else "2\n",
              "testtype": "functional" if func else "stdin"}]
    return {"question_id": "paths", "question_title": "paths", "question_content": "Print.",
            "platform": "leetcode" if func else "atcoder", "contest_id": "x",
            "contest_date": "2026-01-01T00:00:00", "difficulty": "easy", "starter_code": "",
            "metadata": json.dumps({"func_name": "f"} if func else {}),
            "public_test_cases": json.dumps(tests), "private_test_cases": "[]"}


def test_no_verdict_quotes_the_graders_folders(pool):
    """The job's folder (the worker's run folder under /tmp) and the checkout holding vigor
    reached verdicts through a program's stdout (a wrong answer quotes its line) and through
    the worker's command line (``sys.orig_argv``)."""
    import vigor_cli
    from vigor_cli.verifiers.code import CodeVerifier, load_problem

    verifier = CodeVerifier(pool=pool)
    names = sorted(PATH_SHOWING)
    items = [(load_problem(_record(n.startswith(("functional", "unserialisable")))), PATH_SHOWING[n], "public")
             for n in names]
    verdicts = verifier.grade_many(items)
    secrets = {w.capabilities["base_dir"] for w in pool._workers}
    secrets |= {os.path.dirname(vigor_cli.__file__), str(ROOT), "vigor-sandbox"}
    for name, verdict in zip(names, verdicts):
        text = json.dumps(verdict.to_dict())
        assert verdict.full == 0.0 and not verdict.grading_errors, (name, verdict.reason)
        assert not [s for s in secrets if s in text], (name, text)


# =========================================================================== 3. honest programs
HONEST = {
    "thread_pool_16": ("""
        from multiprocessing.pool import ThreadPool
        with ThreadPool(16) as pool:
            print(sum(pool.map(lambda x: x * x, range(100))))
        """, "", "328350\n"),
    "thread_pool_default_size": ("""
        from multiprocessing.pool import ThreadPool
        with ThreadPool() as pool:
            print(sum(pool.imap_unordered(abs, range(-50, 50))))
        """, "", "2500\n"),
    "threads_32_allocating": ("""
        import threading
        out, all_started = [], threading.Barrier(32)
        def work(i):
            block = bytearray(100_000)  # from the thread's malloc arena (under mmap's threshold)
            all_started.wait()
            out.append(len(block) + i)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(len(out))
        """, "", "32\n"),
    "reopen_dev_stdout_and_stderr": ("""
        import sys
        with open('/dev/stderr', 'w') as err:
            err.write('note\\n')
        sys.stdout = open('/dev/stdout', 'w')
        print(int(input()) * 2)
        sys.stdout.flush()
        """, "21\n", "42\n"),
    "utf8_bom": ("\ufeffprint(input()[::-1])\n", "abc\n", "cba\n"),
    "coding_line": ("# -*- coding: utf-8 -*-\nprint('ok')\n", "", "ok\n"),
    "deep_recursion_in_a_big_thread": ("""
        import sys, threading
        sys.setrecursionlimit(1 << 20)
        threading.stack_size(1 << 27)
        def depth(n):
            return 0 if n == 0 else depth(n - 1) + 1
        t = threading.Thread(target=lambda: print(depth(int(input()))))
        t.start()
        t.join()
        """, "200000\n", "200000\n"),
}


@pytest.fixture(scope="module")
def honest_runs(pool):
    names = sorted(HONEST)
    jobs = [Job(textwrap.dedent(HONEST[n][0]), HONEST[n][1].encode(), LIMITS) for n in names]
    return dict(zip(names, pool.run(jobs)))


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_program_passes(honest_runs, name):
    run = honest_runs[name]
    assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
    assert run.stdout.decode() == HONEST[name][2], run.stderr_head


# =========================================================================== 4. checkpoints
def _checkpoint(run, step: int, keep: int = 3) -> Path:
    tmp = run.begin_checkpoint(step)
    (tmp / "model.safetensors").write_bytes(os.urandom(1024))
    (tmp / "data_state.json").write_text(json.dumps({"step": step}))
    return run.commit_checkpoint(tmp, step, keep)


def _run(path: Path):
    from vigor_cli.config import RunConfig
    from vigor_cli.run.directory import RunDir

    run = RunDir(path)
    run.path.mkdir(parents=True)
    run.make(RunConfig())
    return run


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _reseal(ckpt: Path) -> None:
    from vigor_cli.run.checkpoints import _sha256

    def seal(manifest: dict) -> None:
        for name in manifest["files"]:
            f = ckpt / name
            manifest["files"][name] = {"size": f.stat().st_size, "sha256": _sha256(f)}

    _edit(ckpt / "manifest.json", seal)


DAMAGE = {
    "COMPLETE for another step": (lambda c, o: _edit(c / "COMPLETE", lambda d: d.update(step=9)),
                                  "its COMPLETE is for step 9, not step-4"),
    "COMPLETE without its step": (lambda c, o: (c / "COMPLETE").write_text('{"written_by": "me"}'),
                                  "COMPLETE marker is not the one"),
    "COMPLETE a bare step beside a manifest": (lambda c, o: (c / "COMPLETE").write_text("4"),
                                               "COMPLETE marker is not the one"),
    "manifest for another step": (lambda c, o: _edit(c / "manifest.json", lambda d: d.update(step=2)),
                                  "its manifest.json is for step 2"),
    "manifest entry removed": (lambda c, o: _edit(c / "manifest.json", lambda d: d["files"].pop("model.safetensors")),
                               "model.safetensors is not in the manifest"),
    "manifest emptied": (lambda c, o: _edit(c / "manifest.json", lambda d: d.update(files={})),
                         "is not in the manifest"),
    "file added": (lambda c, o: (c / "extra.bin").write_bytes(b"x"), "extra.bin is not in the manifest"),
    "name outside the checkpoint": (lambda c, o: _edit(c / "manifest.json", lambda d: d["files"].update(
        {"../../run-id": {"size": 33, "sha256": "0" * 64}})), "../../run-id is missing"),
    "duplicate key in the manifest": (lambda c, o: (c / "manifest.json").write_text(
        (c / "manifest.json").read_text()[:-1] + ', "files": {}}'), "manifest.json is unreadable"),
    "data_state edited, manifest resealed": (lambda c, o: (_edit(c / "data_state.json", lambda d: d.update(step=3)),
                                                           _reseal(c)), "data_state.json is for step 3"),
    "directory renamed": (lambda c, o: os.rename(c, c.with_name("step-6")), "COMPLETE is for step 4, not step-6"),
    "copied from another run": (lambda c, o: (shutil.rmtree(c), shutil.copytree(o, c)),
                                "its COMPLETE was written for another run"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_checkpoint_that_used_to_verify_is_damaged(tmp_path, case):
    """Resume then warns and takes the checkpoint before (as for every damaged one), and with
    none intact refuses in one line naming the damage."""
    damage, needle = DAMAGE[case]
    run, other = _run(tmp_path / "run"), _run(tmp_path / "other")
    _checkpoint(run, 2)
    newest = _checkpoint(run, 4)
    damage(newest, _checkpoint(other, 4))
    warnings: list[str] = []
    assert run.store.newest_intact(warnings.append).name == "step-2"
    assert len(warnings) == 1 and needle in warnings[0], warnings
    shutil.rmtree(run.checkpoints / "step-2")
    with pytest.raises(UserError, match="no intact checkpoint") as refused:
        run.store.newest_intact(warnings.append)
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_a_run_has_an_id_its_checkpoints_record_and_a_copy_keeps(tmp_path):
    from vigor_cli.run.checkpoints import read_run_id, verify_checkpoint
    from vigor_cli.run.directory import RunDir, never_started

    run = _run(tmp_path / "r")
    (run.path / "run.lock").touch()
    assert never_started(run.path)  # the id is part of what a run writes before its first step
    ckpt = _checkpoint(run, 1)
    assert json.loads((ckpt / "COMPLETE").read_text())["run"] == read_run_id(run.path)
    copy = RunDir(shutil.copytree(run.path, tmp_path / "copy"))  # a whole run copied: still its own
    assert verify_checkpoint(copy.checkpoints / "step-1") is None
    assert read_run_id(_run(tmp_path / "r2").path) != read_run_id(run.path)


# =========================================================================== 5. bad input
def _lcb(**change) -> dict:
    return {**json.loads(LCB.read_text()), **change}


@pytest.mark.parametrize("argv, text, needle", [
    (["verify", "code", "--problem", "{f}.json", "--solution", "{sol}"],
     json.dumps(_lcb())[:-1] + ', "question_id": "other"}', "duplicate key 'question_id'"),
    (["verify", "code", "--problem", "{f}.jsonl", "--solution", "{sol}"],
     json.dumps(_lcb())[:-1] + ', "question_id": "other"}\n', ":1: duplicate key 'question_id'"),
    (["verify", "code", "--problem", "{f}.json", "--solution", "{sol}"],
     json.dumps(_lcb(public_test_cases='[{"input": "1", "input": "2", "output": "3"}]')), "duplicate key 'input'"),
    (["verify", "math", "--input", "{f}.jsonl"], '{"gold": "1", "pred": "1", "gold": "2"}\n', ":1: duplicate key 'gold'"),
    (["eval", "--rescore", "{f}.json"], '{"sets": {}, "sets": {}}', "duplicate key 'sets'"),
])
def test_a_duplicate_json_key_is_refused_naming_it(vigor, tmp_path, argv, text, needle):
    sol = tmp_path / "sol.py"
    sol.write_text("print(1)\n")
    name = next(a for a in argv if a.startswith("{f}"))
    path = tmp_path / name.replace("{f}", "input")
    path.write_text(text)
    args = [str(path) if a == name else str(sol) if a == "{sol}" else a for a in argv]
    code, out, err = vigor(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(path) in err and needle in err, err


def test_a_json_array_data_file_with_a_duplicate_key_is_refused(tmp_path):
    from vigor_cli.tasks.loading import read_records

    path = tmp_path / "data.json"
    path.write_text('[{"prompt": "a", "answer": "1", "answer": "2"}]')
    with pytest.raises(UserError, match="duplicate key 'answer'"):
        read_records(path)


def _special_outputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    found = {"fifo": fifo, "symlink loop": loop}
    if os.geteuid() == 0:
        device = tmp_path / "null"
        os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))
        found["device"] = device
    return found


@pytest.mark.parametrize("kind", ["fifo", "symlink loop", "device"])
def test_output_onto_a_fifo_a_device_or_a_symlink_loop_is_refused(vigor, tmp_path, kind):
    """Results are written to a temporary file renamed over the path: a FIFO or a device node
    there was replaced (as root, ``--output /dev/null`` replaced the system's /dev/null)."""
    paths = _special_outputs(tmp_path)
    if kind not in paths:
        pytest.skip("making a device node needs root")
    path = paths[kind]
    before = os.lstat(path)
    code, out, err = vigor("eval", "tiny", "--output", str(path), "--limit", "1", "--max-new-tokens", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--output" in err and str(path) in err, err
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


@pytest.mark.parametrize("change, needle", [
    ({"public_test_cases": json.dumps([{"input": 5, "output": "6", "testtype": "stdin"}])}, "input of type int"),
    ({"public_test_cases": json.dumps([{"input": "5", "output": None, "testtype": "stdin"}])}, "output of type NoneType"),
    ({"metadata": json.dumps({"func_name": 5})}, "func_name is 5"),
    ({"question_id": float("nan")}, "question_id is nan"),
])
def test_an_lcb_record_of_the_wrong_kinds_is_refused(vigor, tmp_path, change, needle):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(_lcb(**change)))
    sol = tmp_path / "sol.py"
    sol.write_text("print(1)\n")
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(sol))
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_config_file_is_refused_not_read_as_defaults(vigor, tmp_path, text):
    """An empty (truncated) config ran every default; a run directory's empty config.yaml made
    `eval --run` and `export` raise."""
    config = tmp_path / "c.yaml"
    config.write_text(text)
    code, out, err = vigor("simulate", "--config", str(config), "--steps", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{config}: empty (no keys)" in err, err


@pytest.mark.parametrize("value", [".nan", "inf", "1e999"])
def test_a_bad_value_of_an_older_keys_name_names_the_key_given(value):
    """``allocation.group_size`` fills ``allocation.rollouts_per_prompt`` in an older config: its
    error said ``config:``, naming neither the --set nor the key given."""
    from vigor_cli.settings import build_config

    with pytest.raises(UserError, match=f"--set allocation.group_size={value}"):
        build_config(sets=[f"allocation.group_size={value}"])


BIG = "9" * 5000


@pytest.mark.parametrize("name, text, argv, needle", [
    ("c.yaml", "train:\n  seed: 1\x01\n", ["simulate", "--config", "{f}", "--steps", "1"], "not valid YAML"),
    ("c.yaml", f"train:\n  seed: {BIG}\n", ["simulate", "--config", "{f}", "--steps", "1"], "more than 4300 digits"),
    ("c.yaml", 'train:\n  output_dir: "/tmp/a\\0b"\n', ["simulate", "--config", "{f}", "--steps", "1"],
     "train.output_dir holds a NUL character"),
    ("cases.jsonl", f'{{"gold": "1", "pred": "1", "n": {BIG}}}\n', ["verify", "math", "--input", "{f}"],
     ":1: not data this tool reads (an integer of more than 4300 digits)"),
    ("r.json", f'{{"sets": {BIG}}}', ["eval", "--rescore", "{f}"], "more than 4300 digits"),
    (None, None, ["simulate", "--set", "train.seed=1\x01", "--steps", "1"], "--set train.seed"),
    (None, None, ["simulate", "--set", f"train.seed={BIG}", "--steps", "1"], "more than 4300 digits"),
    (None, None, ["train", "--output-dir", "/tmp/a\x00b", "--steps", "1"], "--output-dir"),
    (None, None, ["eval", "tiny", "--output", "/tmp/a\x00b.json", "--limit", "1"], "--output"),
])
def test_control_characters_huge_integers_and_nul_paths_are_one_line(vigor, tmp_path, name, text, argv, needle):
    """Each raised a traceback: PyYAML's reader refuses a control character before parsing
    started (outside the error handling), an integer past Python's 4300-digit limit is a plain
    ValueError in both parsers, and the OS refuses a path holding NUL with a ValueError."""
    path = tmp_path / (name or "unused")
    if text is not None:
        path.write_text(text)
    code, out, err = vigor(*[str(path) if a == "{f}" else a for a in argv])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize("answer, kind", [("NaN", "NaN"), ("Infinity", "infinite"), ('{"a": 1}', "an object")])
def test_a_custom_tasks_gold_of_the_wrong_kind_is_refused(tmp_path, answer, kind):
    """A built-in verifier graded a NaN, infinite or object gold as its repr ("nan")."""
    from vigor_cli.settings import build_config
    from vigor_cli.tasks import get_task

    data = tmp_path / "d.jsonl"
    data.write_text(f'{{"prompt": "1 + 1?", "answer": "2"}}\n{{"prompt": "2 + 2?", "answer": {answer}}}\n')
    cfg = build_config(sets=["task.name=custom", f"task.data={data}", "task.rewards=[math]"])
    task = get_task(cfg.task)
    with pytest.raises(UserError, match=f"d.jsonl:2 \\(reward math\\): field 'answer' is {kind}"):
        task.train_examples()
    task.close()

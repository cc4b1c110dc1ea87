"""Every command x every class of bad input (issue 17): exit code 2, exactly one line on stderr
that names the flag, key or file, no traceback, and nothing already on disk changed or added.

Classes: a usage error (unknown command or flag, a value of the wrong type, a missing option),
an undecodable file (binary or non-UTF-8 given as config, cases, pass rates, results or logs),
an out-of-range number or unknown name (checked when the command line is parsed, with the same
bounds in every command that takes the flag), and an output path under a regular file.
Commands run in this process (vigor_cli.cli.main), which is what the `vigor` script calls.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import shutil
import signal
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LCB = ROOT / "tests" / "fixtures" / "lcb" / "stdin_problem.json"
SUM_PROGRAM = "n = int(input())\nprint(sum(int(x) for x in input().split()))\n"
BIG = str(10**23)

# (command, class, args with {placeholders}, what the message must name)
CASES = [
    # usage errors
    ("cli", "usage", ["frobnicate"], "frobnicate"),
    ("train", "usage", ["train", "--steps", "abc"], "--steps"),
    ("train", "usage", ["train", "--bogus"], "--bogus"),
    ("eval", "usage", ["eval", "tiny", "--n", "abc"], "--n"),
    ("inspect-allocation", "usage", ["inspect-allocation"], "'run'"),
    ("report", "usage", ["report", "{run}", "--bogus"], "--bogus"),
    ("simulate", "usage", ["simulate", "--steps", "x"], "--steps"),
    ("verify math", "usage", ["verify", "math", "--frobnicate"], "--frobnicate"),
    ("verify code", "usage", ["verify", "code", "--solution", "{sol}"], "--problem"),
    ("make-tiny", "usage", ["make-tiny"], "--out"),
    ("probe", "usage", ["probe", "--samples", "many"], "--samples"),
    ("export", "usage", ["export", "{run}"], "--out"),
    # undecodable files
    ("train", "decode", ["train", "--config", "{latin1}", "--dry-run"], "{latin1}"),
    ("probe", "decode", ["probe", "--config", "{latin1}"], "{latin1}"),
    ("simulate", "decode", ["simulate", "--config", "{latin1}"], "{latin1}"),
    ("simulate", "decode", ["simulate", "--pass-rates", "file:{bin}", "--steps", "1"], "{bin}"),
    ("verify math", "decode", ["verify", "math", "--input", "{bin}"], "{bin}"),
    ("verify code", "decode", ["verify", "code", "--problem", "{bin}", "--solution", "{sol}"], "{bin}"),
    ("eval", "decode", ["eval", "--rescore", "{bin}"], "{bin}"),
    ("report", "decode", ["report", "{binrun}", "--out", "{tmp}/rep"], "metrics.jsonl"),
    ("inspect-allocation", "decode", ["inspect-allocation", "{binrun}"], "allocation.jsonl"),
    # out-of-range numbers and unknown names
    ("train", "range", ["train", "--seed", BIG, "--dry-run"], "--seed"),
    ("train", "range", ["train", "--engine", "nosuch", "--dry-run"], "--engine"),
    ("train", "range", ["train", "--gpu-memory", "nan", "--dry-run"], "--gpu-memory"),
    ("eval", "range", ["eval", "tiny", "--seed", BIG, "--limit", "1", "--max-new-tokens", "4"], "--seed"),
    ("eval", "range", ["eval", "tiny", "--engine", "nosuch", "--limit", "1", "--max-new-tokens", "4"], "--engine"),
    ("eval", "range", ["eval", "tiny", "--temperature", "inf", "--limit", "1", "--max-new-tokens", "4"], "--temperature"),
    ("inspect-allocation", "range", ["inspect-allocation", "{run}", "--last", "0"], "--last"),
    ("report", "range", ["report", "{run}", "--target", "2", "--out", "{tmp}/rep"], "--target"),
    ("simulate", "range", ["simulate", "--seed", BIG, "--steps", "1"], "--seed"),
    ("simulate", "range", ["simulate", "--lr", "-1", "--learn", "--steps", "1"], "--lr"),
    ("simulate", "range", ["simulate", "--strategy", "vigor", "--budget", "1", "--steps", "1"], "allocation.budget"),
    ("simulate", "range", ["simulate", "--gamma", "inf", "--steps", "1"], "--gamma"),
    ("verify math", "range", ["verify", "math", "--gold", "1", "--pred", "1", "--timeout", "inf"], "--timeout"),
    ("verify code", "range", ["verify", "code", "--problem", "{lcb}", "--solution", "{sol}", "--timeout", "0"], "--timeout"),
    ("verify code", "range", ["verify", "code", "--problem", "{lcb}", "--solution", "{sol}", "--timeout", "-1"], "--timeout"),
    ("verify code", "range", ["verify", "code", "--problem", "{lcb}", "--solution", "{sol}", "--memory-mb", "-5"], "--memory-mb"),
    ("make-tiny", "range", ["make-tiny", "--out", "{tmp}/tiny", "--max-steps", "0", "--no-measure"], "--max-steps"),
    ("make-tiny", "range", ["make-tiny", "--out", "{tmp}/tiny", "--seed", BIG, "--max-steps", "1", "--no-measure"], "--seed"),
    ("probe", "range", ["probe", "--seed", BIG, "--prompts", "2", "--samples", "2"], "--seed"),
    ("probe", "range", ["probe", "--engine", "nosuch", "--prompts", "2", "--samples", "2"], "--engine"),
    ("export", "range", ["export", "{run}", "--out", "{tmp}/m", "--step", "-1"], "--step"),
    ("export", "range", ["export", "{run}", "--out", "{tmp}/m", "--dtype", "int8"], "--dtype"),
    # output paths under a regular file
    ("train", "output", ["train", "--output-dir", "{file}/runs", "--steps", "1"], "--output-dir"),
    ("eval", "output", ["eval", "tiny", "--output", "{file}/o.json", "--limit", "1", "--max-new-tokens", "4"], "--output"),
    ("report", "output", ["report", "{run}", "--out", "{file}"], "--out"),
    ("report", "output", ["report", "{run}", "--out", "{file}/sub"], "--out"),
    ("make-tiny", "output", ["make-tiny", "--out", "{file}", "--no-measure"], "--out"),
    ("export", "output", ["export", "{run}", "--out", "{file}/model"], "--out"),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small finished run: `vigor train` on the tiny model for two steps."""
    from vigor_cli.cli import main

    out = tmp_path_factory.mktemp("runs")
    try:
        main(["train", "--steps", "2", "--prompts-per-step", "4", "--output-dir", str(out),
              "--run-name", "r", "--set", "train.eval_limit=4", "--set", "sampling.max_new_tokens=16"])
    except SystemExit as e:
        assert e.code in (0, None)
    return out / "r"


@pytest.fixture
def place(tmp_path, request) -> dict:
    """The files a case's arguments name, in the test's folder. The run copies (10 MB each,
    hashed twice by the test) are made only for the cases that name them."""
    args = " ".join(request.node.callspec.params["args"]) if hasattr(request.node, "callspec") else "{run} {binrun}"
    binary = tmp_path / "binary.dat"
    binary.write_bytes(bytes(range(256)) * 4)
    latin1 = tmp_path / "config.yaml"
    latin1.write_bytes("train:\n  run_name: caf\xe9\n".encode("latin-1"))
    regular = tmp_path / "f"
    regular.write_text("a file the user already had\n")
    sol = tmp_path / "sol.py"
    sol.write_text(SUM_PROGRAM)
    binrun = tmp_path / "binrun"
    if "{binrun}" in args:
        shutil.copytree(request.getfixturevalue("run_dir"), binrun)
        (binrun / "metrics.jsonl").write_bytes(binary.read_bytes())
        (binrun / "allocation.jsonl").write_bytes(binary.read_bytes())
    run = tmp_path / "run"
    if "{run}" in args:
        shutil.copytree(request.getfixturevalue("run_dir"), run)
    return {"tmp": str(tmp_path), "bin": str(binary), "latin1": str(latin1), "file": str(regular),
            "sol": str(sol), "lcb": str(LCB), "run": str(run), "binrun": str(binrun)}


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command, kind, args, needle", CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_nothing_changes(vigor, place, tmp_path, monkeypatch, command,
                                                          kind, args, needle):
    argv = [a.format(**place) for a in args]
    needle = needle.format(**place)
    if kind in ("range", "output"):  # refused when parsed: loading a model would be work started
        from transformers import AutoModelForCausalLM

        def no_model(*a, **k):
            raise AssertionError("a model loaded before the bad input was refused")

        monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_model)
    before = _snapshot(tmp_path)
    code, out, err = vigor(*argv)
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]
    assert _snapshot(tmp_path) == before  # nothing written, nothing lost


def test_every_command_is_in_the_matrix():
    from vigor_cli.cli import app

    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    covered = {c[0].split()[0] for c in CASES}
    assert names <= covered, names - covered
    for kind in ("usage", "range"):
        assert {c[0] for c in CASES if c[1] == kind} >= {"train", "eval", "inspect-allocation", "report",
                                                            "simulate", "verify math", "verify code",
                                                            "make-tiny", "probe", "export"}


def test_the_same_flag_has_the_same_bounds_in_every_command(vigor):
    """--seed is one option definition: the same bound and message wherever it appears."""
    messages = set()
    for argv in (["train", "--seed", BIG], ["eval", "tiny", "--seed", BIG], ["simulate", "--seed", BIG],
                 ["probe", "--seed", BIG], ["make-tiny", "--out", "x", "--seed", BIG]):
        code, _, err = vigor(*argv)
        assert code == 2
        messages.add(err.split("(see")[0])
    assert len(messages) == 1, messages
    for argv in (["verify", "math", "--gold", "1", "--pred", "1", "--timeout", "0"],
                 ["verify", "code", "--problem", "p", "--solution", "s", "--timeout", "0"]):
        code, _, err = vigor(*argv)
        assert code == 2 and "must be > 0" in err


def test_bugs_keep_their_traceback(monkeypatch):
    """An error that is not the user's (here a RuntimeError from inside a command) is not
    turned into a one-line message: it propagates (exit 1 with a traceback from Python)."""
    import vigor_cli.study.simulate as sim
    from vigor_cli.cli import main

    def broken(*a, **k):
        raise RuntimeError("a real bug")

    monkeypatch.setattr(sim, "simulate", broken)
    with pytest.raises(RuntimeError, match="a real bug"):
        main(["simulate", "--steps", "1"])


def test_full_disk_names_the_path_and_the_disk(tmp_path):
    from vigor_cli.errors import user_message

    target = tmp_path / "runs" / "step-3" / "model.safetensors"
    msg = user_message(OSError(errno.ENOSPC, "No space left on device", str(target)))
    assert str(target) in msg and "no space left" in msg and "MiB free" in msg and str(tmp_path) in msg
    assert user_message(OSError(errno.ENOSPC, "No space left on device")) is not None
    assert user_message(ValueError("bug")) is None and user_message(KeyError("k")) is None


def test_os_error_on_a_user_path_is_one_line(vigor, place):
    """A path the parse-time checks cannot judge (a device, not a regular file, in the way)
    still ends in one line naming it, through the entry point's OSError rule."""
    code, _, err = vigor("report", place["run"], "--out", "/dev/null/report")
    assert code == 2 and "/dev/null/report" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_group_without_command_prints_help_not_an_empty_error(vigor):
    code, out, err = vigor("verify")
    assert code == 2 and "math" in out and "code" in out
    assert "error:" not in err


@contextlib.contextmanager
def python_handles_sigint():
    """Python's own SIGINT handler for the block. A shell starts a background job (`cmd &` in a
    script) with SIGINT ignored, Python then leaves it ignored, and so would every process it
    starts: Ctrl-C checks would hang (an ignored disposition survives exec; a handled one is
    reset to the default, where a new interpreter installs its handler)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_outside_training_says_so_and_exits_130(vigor, monkeypatch):
    """A real SIGINT while a command runs (here a simulation, in this process): one line, exit
    130, not the exit 0 Typer reports when it is not in standalone mode."""
    import os

    import vigor_cli.study.simulate

    real = vigor_cli.study.simulate.simulate

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt at the next bytecode
        return real(*args, **kwargs)

    monkeypatch.setattr(vigor_cli.study.simulate, "simulate", interrupted)
    try:
        with python_handles_sigint():
            code, out, err = vigor("simulate", "--steps", "5", "--strategy", "grpo")  # (a lost signal: exit 0)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C went through vigor's entry point")
    assert code == 130 and err.strip() == "interrupted", (code, err[-500:])


@pytest.mark.slow
def test_ctrl_c_to_the_command_in_a_new_process_exits_130():
    """The same through the real entry point (SIGINT every 2 s until it stops; the process never
    outlives the test)."""
    import subprocess
    import sys

    with python_handles_sigint():  # the child starts with SIGINT's default, so Python's handler
        proc = subprocess.Popen([sys.executable, "-m", "vigor_cli", "simulate", "--steps", "100000",
                                 "--strategy", "grpo"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        for _ in range(30):
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            raise AssertionError("vigor simulate ignored 30 SIGINTs")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130 and err.strip() == "interrupted", (proc.returncode, err[-500:])


@pytest.mark.parametrize("how", ["unreachable", "HF_HUB_OFFLINE"])
def test_unknown_model_offline_is_one_line_at_once(vigor, monkeypatch, how):
    """A hub id that is not cached, with no hub to ask: one line naming the key, without the
    hub client's minute of retries and its warning per retry."""
    import socket

    from huggingface_hub import constants

    if how == "unreachable":
        def no_network(*a, **k):
            raise OSError("network is unreachable")

        monkeypatch.setattr(socket, "create_connection", no_network)
    else:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, _, err = vigor("eval", "no-such-org/no-such-model-x", "--limit", "1")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "model.name_or_path=no-such-org/no-such-model-x" in lines[0], err
    assert "cannot be reached" in lines[0] or "HF_HUB_OFFLINE" in lines[0]  # the probe's line, before any retry


def _parse_flag(path: list[str], flag: str, value: str):
    """The error parsing ``flag value`` gives in command ``path`` (None when accepted), from
    the real command the entry point runs, without running it."""
    import typer.main

    from vigor_cli.cli import app

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    param = next(p for p in cmd.params if flag in p.opts)
    ctx = cmd.make_context(" ".join(path), [], resilient_parsing=True)
    try:
        param.process_value(ctx, value)
    except Exception as e:  # click's BadParameter (Typer's vendored click)
        return e.format_message()
    return None


@pytest.mark.parametrize("path, flag, key, value", [
    (["simulate"], "--alpha", "allocation.alpha", "0"),
    (["simulate"], "--alpha", "allocation.alpha", "1"),
    (["simulate"], "--alpha", "allocation.alpha", "1.5"),
    (["simulate"], "--gamma", "allocation.gamma", "0"),
    (["simulate"], "--gamma", "allocation.gamma", "1e308"),
    (["simulate"], "--pods-n", "allocation.pods.n", "1"),
    (["simulate"], "--budget", "allocation.budget", "0"),
    (["simulate"], "--prompts", "train.prompts_per_step", "0"),
    (["eval"], "--top-p", "sampling.top_p", "0"),
    (["eval"], "--top-p", "sampling.top_p", "1.01"),
    (["eval"], "--top-p", "sampling.top_p", "1"),
    (["eval"], "--temperature", "train.eval_temperature", "-0.5"),
    (["eval"], "--n", "train.eval_samples", "0"),
    (["train"], "--steps", "train.steps", "0"),
    (["train"], "--steps", "train.steps", "3"),
    (["train"], "--prompts-per-step", "train.prompts_per_step", "0"),
    (["train"], "--gpu-memory", "train.gpu_memory_gib", "0"),
    (["train"], "--engine", "engine.kind", "nosuch"),
    (["train"], "--engine", "engine.kind", "hf"),
    (["eval"], "--device", "model.device", "gpu"),
])
def test_a_flag_that_sets_a_key_has_that_keys_bounds(path, flag, key, value):
    """The flag is refused when parsed exactly when the config refuses the key's value, and
    the message names both."""
    from vigor_cli.config import ConfigError
    from vigor_cli.settings import build_config

    try:
        build_config(None, sets=[f"{key}={value}"])
        key_ok = True
    except ConfigError:
        key_ok = False
    error = _parse_flag(path, flag, value)
    assert (error is None) == key_ok, (key, value, error)
    if error is not None:
        assert key in error


# --------------------------------------------------------------------------- your own task (issue 36)
OWN_REWARDS = '''
import os
import sys
import time


class Halt(BaseException):
    """Not an Exception: what except Exception does not catch."""


def halts(prompts, completions, **kwargs):
    raise Halt("stop here")


def exits0(prompts, completions, **kwargs):
    sys.exit(0)


def exits3(prompts, completions, **kwargs):
    sys.exit(3)


def interrupts(prompts, completions, **kwargs):
    raise KeyboardInterrupt


def pops(prompts, completions, **kwargs):
    completions.pop()
    return [0.0] * len(completions)


def sleeps(prompts, completions, **kwargs):
    time.sleep(600)


def spins(prompts, completions, **kwargs):
    while True:
        try:
            time.sleep(0.05)
        except Exception:  # what a careless function does: it cannot swallow the time limit
            pass


def length(prompts, completions, word, **kwargs):
    return [float(str(len(w)) in c) for c, w in zip(completions, word)]
'''

TRAIN = ["train", "--steps", "1", "--prompts-per-step", "2", "--output-dir", "{tmp}/runs", "--run-name", "r",
         "--set", "train.eval_limit=2", "--set", "sampling.max_new_tokens=4"]

# (class, args, what the line must hold); the reward functions fail at their first call (the
# evaluation at step 0), the data and values before any model loads
OWN_CASES = [
    ("reward", ["--data", "{data}", "--reward", "{rewards}:halts"],
     "step 0: evaluation of custom: reward function {rewards}:halts raised Halt: stop here (rewards.py, line"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:exits0"], "reward function {rewards}:exits0 raised "
     "SystemExit: sys.exit(0) called (rewards.py, line"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:exits3"], "raised SystemExit: sys.exit(3) called"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:interrupts"],
     "raised KeyboardInterrupt (raised by the code itself, not a Ctrl-C)"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:pops"], "reward function {rewards}:pops returned 1 "
     "values for 2 completions"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:sleeps", "--set", "task.reward_timeout=0.5"],
     "reward function {rewards}:sleeps did not return within task.reward_timeout=0.5 s and was stopped "
     "(rewards.py, line"),
    ("reward", ["--data", "{data}", "--reward", "{rewards}:spins", "--set", "task.reward_timeout=0.5"],
     "{rewards}:spins did not return within task.reward_timeout=0.5 s"),
    ("import", ["--data", "{data}", "--reward", "{tmp}/exits_at_import.py:f", "--dry-run"],
     "--reward {tmp}/exits_at_import.py:f: importing {tmp}/exits_at_import.py failed (exits_at_import.py, "
     "line 2): SystemExit: sys.exit(0) called"),
    ("import", ["--data", "{data}", "--reward", "{tmp}/halts_at_import.py:f"],
     "importing {tmp}/halts_at_import.py failed (halts_at_import.py, line 3): Halt"),
    ("name", ["--data", "{data}", "--reward", "{tmp}/:ok:.py:nosuch", "--dry-run"],
     "{tmp}/:ok:.py has no function 'nosuch'"),
    ("name", ["--data", "{tmp}/:train:[b].jsonl", "--reward", "{rewards}:nosuch", "--dry-run"],
     "has no function 'nosuch'"),
    ("data", ["--data", "{tmp}/header.csv", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/header.csv: no rows (only the header line: prompt, word)"),
    ("data", ["--data", "{tmp}/header.tsv", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/header.tsv: no rows (only the header line: prompt, word)"),
    ("data", ["--data", "{tmp}/empty.parquet", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/empty.parquet: no rows (a Parquet file of 0 rows; columns: prompt, word)"),
    ("data", ["--data", "{tmp}/ragged.csv", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/ragged.csv:5: 3 fields, but the header names 2 (prompt, word)"),
    ("data", ["--data", "{tmp}/pretty.json", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/pretty.json: one JSON object written over 4 lines (keys: prompt, word), not rows"),
    ("data", ["--data", "{tmp}/nested.json", "--reward", "{rewards}:length", "--dry-run"],
     "its key 'rows' holds a list of 2 objects: save that list as the file"),
    ("data", ["--data", "{tmp}/damaged", "--reward", "{rewards}:length", "--dry-run"],
     "--data {tmp}/damaged: cannot read its rows (row 2)"),
    ("prompt", ["--data", "{tmp}/empty-content.jsonl", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/empty-content.jsonl:2: the prompt ('prompt') is empty: every message's content is empty"),
    ("prompt", ["--data", "{tmp}/empty-user.jsonl", "--reward", "{rewards}:length"],
     "{tmp}/empty-user.jsonl:1: the prompt ('prompt') has an empty user message (message 2)"),
    ("prompt", ["--data", "{tmp}/surrogate.jsonl", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/surrogate.jsonl:2: the prompt ('prompt') is text holding a lone surrogate \\ud800 at character 4"),
    ("data", ["--data", "{tmp}/latin1.csv", "--reward", "{rewards}:length", "--dry-run"],
     "{tmp}/latin1.csv:4: not UTF-8 text (byte 0xe9); save it as UTF-8"),
    ("prompt", ["--data", "{data}", "--reward", "{rewards}:length", "--system-prompt", "Count\udc80.", "--dry-run"],
     "--system-prompt (task.system_prompt): text holding a lone surrogate \\udc80 at character 6"),
    ("prompt", ["--data", "{data}", "--reward", "{rewards}:length", "--prompt-template", "\ud800{{word}}=", "--dry-run"],
     "--prompt-template (task.prompt_template): text holding a lone surrogate \\ud800 at character 1"),
    ("prompt", ["--data", "{data}", "--reward", "{rewards}:length", "--prompt-template", " {{blank}} ", "--dry-run"],
     "{data}:1: the prompt task.prompt_template builds is empty"),
    ("value", ["--data", "{data}", "--reward", "{rewards}:length", "--set", "task.reward_weights=[true]", "--dry-run"],
     "'task.reward_weights': expected numbers, not true (item 1)"),
    ("value", ["--data", "{data}", "--reward", "{rewards}:length", "--report-to", ",,", "--dry-run"],
     "--report-to ,, (train.report_to): bad value for 'train.report_to': no backend named in ',,'"),
    ("value", ["--data", "{data}", "--reward", "{rewards}:length", "--strict", "--set", "health.enabled=false",
               "--dry-run"], "health.strict stops a run when a health check holds, but health.enabled=false"),
    ("value", ["--data", "{data}", "--reward", "{rewards}:length", "--set", "health.empty.threshold=5", "--dry-run"],
     "'health.empty.threshold': Input should be less than or equal to 1 (got 5)"),
    ("value", ["--data", "{data}", "--reward", "{rewards}:length", "--set", "task.reward_timeout=0", "--dry-run"],
     "'task.reward_timeout': Input should be greater than 0"),
]


@pytest.fixture
def own(tmp_path) -> dict:
    """The user's files of the own-task cases: good data, reward functions, and bad files."""
    import json

    from datasets import Dataset

    rows = [{"prompt": f"letters in {w}=", "word": w, "blank": ""} for w in ("ab", "abc", "x", "wxyz")]
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rewards = tmp_path / "rewards.py"
    rewards.write_text(OWN_REWARDS)
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "halts_at_import.py").write_text("class Halt(BaseException):\n    pass\nraise Halt()\n")
    (tmp_path / ":ok:.py").write_text("def f(prompts, completions):\n    return [0.0] * len(completions)\n")
    shutil.copyfile(data, tmp_path / ":train:[b].jsonl")
    (tmp_path / "header.csv").write_text("prompt,word\n")
    (tmp_path / "header.tsv").write_text("prompt\tword\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "word": pa.array([], pa.string())}),
                   tmp_path / "empty.parquet")
    (tmp_path / "ragged.csv").write_text('prompt,word\na=,a\n"b\n=",b\nc=,c,extra\n')  # line 5: a quoted field spans 3-4
    (tmp_path / "latin1.csv").write_bytes("prompt,word\na=,a\nb=,b\ncaf\u00e9=,c\n".encode("latin-1"))  # line 4
    (tmp_path / "pretty.json").write_text('{\n  "prompt": "ab=",\n  "word": "ab"\n}\n')
    (tmp_path / "nested.json").write_text(json.dumps({"version": 1, "rows": rows[:2]}, indent=2))
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "damaged"))
    arrow = next((tmp_path / "damaged").glob("*.arrow"))
    blob = bytearray(arrow.read_bytes())
    blob[blob.find(b"letters in abc=")] = 0xFF  # row 2's prompt: no longer UTF-8
    arrow.write_bytes(bytes(blob))
    (tmp_path / "empty-content.jsonl").write_text(
        json.dumps(rows[0]) + "\n" + json.dumps({"prompt": [{"role": "user", "content": ""}], "word": "a"}) + "\n")
    (tmp_path / "empty-user.jsonl").write_text(json.dumps(
        {"prompt": [{"role": "system", "content": "Count."}, {"role": "user", "content": " "}], "word": "a"}) + "\n")
    (tmp_path / "surrogate.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"prompt": "abc\\ud800=", "word": "abc"}\n')
    return {"tmp": str(tmp_path), "data": str(data), "rewards": str(rewards)}


SLOW_OWN = {"exits3", "interrupts", "pops", "spins"}
"""Reward cases that load the model as the others do (a second or so each): in the slow suite."""


def _own_params() -> list:
    params = []
    for i, (kind, args, needle) in enumerate(OWN_CASES):
        slow = any(a.endswith(tuple(f":{f}" for f in SLOW_OWN)) for a in args)
        params.append(pytest.param(kind, args, needle, id=f"own-{kind}-{i}",
                                   marks=[pytest.mark.slow] if slow else []))
    return params


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, args, needle", _own_params())
def test_own_task_bad_input_is_one_line_exit_2(vigor, own, tmp_path, kind, args, needle):
    """The user's data, reward functions and values (issue 36): one line naming the file, row,
    flag or function (and step), exit 2, no traceback; the user's files unchanged, and a run
    stopped by its reward left resumable (its directory kept, nothing else written)."""
    argv = [a.format(**own) for a in [*TRAIN, *args]]
    before = _snapshot(tmp_path)
    code, out, err = vigor(*argv)
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err and "never awaited" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert needle.format(**own) in lines[0], lines[0]
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("runs/")} == before
    if kind != "reward":
        assert not (tmp_path / "runs").exists()  # refused before the run started
    assert "🆗" not in out + err and "🚋" not in out + err


def test_every_own_task_class_is_in_the_matrix():
    assert {c[0] for c in OWN_CASES} == {"reward", "import", "name", "data", "prompt", "value"}


def test_a_bad_wandb_mode_is_refused_before_the_run(vigor, own, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "bogus")
    for extra in (["--dry-run"], []):
        code, _, err = vigor(*[a.format(**own) for a in [*TRAIN, "--data", "{data}", "--reward", "{rewards}:length",
                                                          "--report-to", "wandb", *extra]])
        assert code == 2 and err.strip().splitlines() == [
            "error: train.report_to=wandb: WANDB_MODE='bogus' is not a mode wandb takes (online, offline, disabled, "
            "shared, dryrun, run); set one of them, or unset it"], err
        assert not (tmp_path / "runs").exists()

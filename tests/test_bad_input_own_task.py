"""Bad input from your own task (data, rewards, names, prompts) and around vigor export: one line, exit 2, nothing lost."""

from __future__ import annotations
import hashlib
import io
import json
import os
import subprocess
import time
from pathlib import Path
import pytest
from test_rundir import _small_tmpfs
from vigor_cli.errors import UserError

from test_bad_input_classes import ROOT, no_model, one_line, snapshot  # noqa: F401  (helpers and fixtures shared with test_bad_input_classes.py)


# --------------------------------------------------------------------------- your own task, round 4 (issue 36)
LETTERS = "def letters(prompts, completions, word, **kwargs):\n    return [float(str(len(w)) in c) for c, w in zip(completions, word)]\n"


def own_files(tmp_path: Path, rows: list[dict], eval_rows: list[dict] | None = None) -> dict[str, str]:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(LETTERS)
    files = {"data": str(data), "reward": f"{tmp_path / 'reward.py'}:letters"}
    if eval_rows is not None:
        (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eval_rows))
        files["eval"] = str(tmp_path / "eval.jsonl")
    return files


def own_config(files: dict[str, str], *sets: str):
    from vigor_cli.settings import build_config

    keys = [f"task.data={files['data']}", f"task.rewards=[{files['reward']}]", "train.prompts_per_step=2"]
    if "eval" in files:
        keys.append(f"task.eval_data={files['eval']}")
    return build_config(None, sets=["task.name=custom", "model.name_or_path=tiny", "sampling.max_new_tokens=16",
                                     *keys, *sets])


def word_rows(n: int, long_at: tuple[int, ...] = ()) -> list[dict]:
    words = [f"w{i}" + "ab" * (i % 3) for i in range(n)]
    return [{"prompt": ("letters in " + "x" * 400 if i in long_at else f"letters in {w}="), "word": w}
            for i, w in enumerate(words)]


def test_prompts_too_long_are_left_out_of_training_and_evaluation_alike(tmp_path, capsys):
    """A prompt over task.max_prompt_tokens: left out of training, of --eval-data and of the
    training sample evaluated without it, each set saying so in one warning line."""
    from rich.console import Console

    from vigor_cli.train.data import load_train_data

    files = own_files(tmp_path, word_rows(6, long_at=(0, 3)), eval_rows=word_rows(4, long_at=(1,)))
    data = load_train_data(own_config(files, "task.max_prompt_tokens=64"), Console(file=io.StringIO()))
    data.task.close()
    assert sorted(data.examples) == ["custom/train/1", "custom/train/2", "custom/train/4", "custom/train/5"]
    assert [ex.uid for ex in data.eval_sets["custom"]] == ["custom/eval/0", "custom/eval/2", "custom/eval/3"]
    err = capsys.readouterr().err
    assert "warning: left out 2 of 6 training prompts: 2 longer than task.max_prompt_tokens=64" in err
    assert "warning: left out 1 of 4 held-out prompts of set custom: 1 longer than task.max_prompt_tokens" in err
    # without --eval-data: the first training rows evaluated are those training keeps
    del files["eval"]
    data = load_train_data(own_config(files, "task.max_prompt_tokens=64"), Console(file=io.StringIO()))
    data.task.close()
    assert [ex.uid for ex in data.eval_sets["custom"]] == sorted(data.examples)
    err = capsys.readouterr().err
    assert "left out 2 of 6 training prompts" in err and "held-out prompts of set custom:" not in err


def test_vigor_eval_leaves_out_the_problems_the_model_cannot_take(tmp_path, capsys):
    """A benchmark problem of 100,000 characters sat at 0/N for minutes in `vigor eval`: it is
    left out as training leaves it out, in one warning line; a benchmark left with none is refused."""
    from vigor_cli.commands.eval import fit_problems, load_tasks
    from vigor_cli.config import RunConfig
    from vigor_cli.model.loading import load_tokenizer

    shipped = ROOT / "vigor_cli" / "data" / "math-eval" / "gsm8k.jsonl"
    rows = [json.loads(line) for line in shipped.read_text().splitlines()[:3]]
    rows[1]["question"] = "x " * 50_000
    (tmp_path / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RunConfig()
    cfg.model.name_or_path = "tiny"
    tokenizer = load_tokenizer(cfg.model)
    tasks = load_tasks(["gsm8k"], tmp_path, None, None, None)
    fitted = fit_problems(cfg, tasks, tokenizer)
    assert [ex.uid for ex in fitted["gsm8k"][1]] == [tasks["gsm8k"][1][i].uid for i in (0, 2)]
    assert ("warning: left out 1 of 3 problems of gsm8k: 1 longer than task.max_prompt_tokens=1024"
            in capsys.readouterr().err)
    with pytest.raises(UserError, match="--benchmarks gsm8k: none of its 1 problems fit task.max_prompt_tokens"):
        fit_problems(cfg, {"gsm8k": (tasks["gsm8k"][0], tasks["gsm8k"][1][1:2])}, tokenizer)
    tasks["gsm8k"][0].close()


def test_dry_run_says_what_the_run_would_leave_out(vigor, tmp_path, no_model):
    files = own_files(tmp_path, word_rows(4, long_at=(2,)), eval_rows=word_rows(3, long_at=(0, 1)))
    code, out, err = vigor("train", "--data", files["data"], "--eval-data", files["eval"], "--reward", files["reward"],
                           "--prompts-per-step", "2", "--set", "task.max_prompt_tokens=64", "--dry-run")
    assert code == 0, err
    assert "warning: left out 1 of 4 training prompts: 1 longer than task.max_prompt_tokens=64" in err
    assert "warning: left out 2 of 3 held-out prompts of set custom: 2 longer than task.max_prompt_tokens=64" in err
    # kept, but too long for the model's 256 positions: said as the training prompts' are
    code, out, err = vigor("train", "--data", files["data"], "--eval-data", files["eval"], "--reward", files["reward"],
                           "--prompts-per-step", "2", "--set", "task.max_prompt_tokens=1000", "--dry-run")
    assert code == 0, err
    assert ("warning: 2 of 3 held-out prompts of set custom plus sampling.max_new_tokens=16 exceed the model's "
            "context (256 tokens): their completions will be cut") in err


def test_a_prompt_that_encodes_to_no_token_is_left_out():
    """The last guard, for any task: an empty prompt gives the model nothing to continue (it
    failed in the model: 'cannot reshape tensor of 0 elements')."""
    from types import SimpleNamespace

    from vigor_cli.config import ModelConfig
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.tasks.base import Example
    from vigor_cli.evaluate.sets import fit_prompts, left_out_line

    tokenizer = load_tokenizer(ModelConfig(name_or_path="tiny"))
    task = SimpleNamespace(render_prompt=lambda ex, tok: ex.question)
    kept, long, empty = fit_prompts(8, task, tokenizer, [Example("a", "", None), Example("b", "1+1=", None),
                                                         Example("c", "1+" * 40, None)])
    assert list(kept) == ["b"] and long == [80] and empty == 1
    assert left_out_line("held-out prompts of set s", 3, long, empty, 8) == (
        "left out 2 of 3 held-out prompts of set s: 1 longer than task.max_prompt_tokens=8 (the longest 80 tokens; "
        "raise the key to keep them) and 1 that encode to no token")


@pytest.mark.parametrize("prompt, said", [
    ([{"role": "user", "content": ""}], "the prompt ('prompt') is empty: every message's content is empty"),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "\n"}],
     "the prompt ('prompt') has an empty user message (message 2)"),
    ("2+2=\ud800", "the prompt ('prompt') is text holding a lone surrogate \\ud800 at character 5"),
    ([{"role": "user", "content": "a\udfffb"}], "the prompt ('prompt') is text holding a lone surrogate \\udfff at "
                                                "character 2"),
])
def test_prompts_no_tokenizer_can_take_are_refused_naming_the_row(tmp_path, prompt, said):
    from vigor_cli.config import TaskConfig
    from vigor_cli.tasks import get_task

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "word": "a"}) + "\n" + json.dumps({"prompt": prompt, "word": "b"}) + "\n")
    (tmp_path / "r.py").write_text(LETTERS)
    task = get_task(TaskConfig(name="custom", data=str(data), rewards=[f"{tmp_path}/r.py:letters"]))
    with pytest.raises(UserError) as e:
        task.train_examples()
    assert str(e.value) == f"{data}:2: {said}" or str(e.value).startswith(f"{data}:2: {said}"), str(e.value)


def test_a_lone_surrogate_in_a_math_record_is_named(tmp_path):
    from vigor_cli.user.records import check_record

    with pytest.raises(UserError, match=r"f.jsonl:3: field 'problem' is text holding a lone surrogate \\ud83d"):
        check_record({"problem": "smile \ud83d"}, "f.jsonl:3", text=("problem",))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_during_the_first_evaluation_stops_within_seconds(tmp_path):
    """Rows of 100k characters in the data (the training sample evaluated at step 0 held one,
    for 120 s, deaf to SIGTERM): left out, and a SIGTERM stops the run in seconds."""
    import signal
    import sys

    rows = word_rows(40)
    for i in (0, 5):
        rows[i]["prompt"] = "letters in " + "ab" * 50_000 + "="
    files = own_files(tmp_path, rows)
    proc = subprocess.Popen([sys.executable, "-m", "vigor_cli", "train", "--data", files["data"], "--reward",
                             files["reward"], "--steps", "50", "--prompts-per-step", "4", "--output-dir",
                             str(tmp_path / "runs"), "--set", "train.eval_samples=4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        for line in proc.stdout:
            if line.startswith("run directory:"):
                break
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stopped = time.monotonic() - t0
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert stopped < 10, stopped
    assert "left out 2 of 40 training prompts" in err and "Traceback" not in err


def test_data_read_through_datasets_or_pyarrow_is_named_in_our_words(tmp_path):
    """Files the libraries read now read here, with the project's messages: a byte-order mark
    is read through, a folder says which of its files it read."""
    from vigor_cli.tasks.loading import read_table

    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfprompt,word\r\nab=,ab\r\n")
    assert read_table(bom, key="--data").rows == [{"prompt": "ab=", "word": "ab"}]
    bom_jsonl = tmp_path / "bom.jsonl"
    bom_jsonl.write_bytes(b'\xef\xbb\xbf{"prompt": "ab=", "word": "ab"}\n')
    assert read_table(bom_jsonl, key="--data").rows == [{"prompt": "ab=", "word": "ab"}]
    quoted = tmp_path / "quoted.csv"  # a quoted field over two lines: the ragged row is named by its own line
    quoted.write_text('prompt,word\n"two\nlines",a\nb=,b,c\n')
    with pytest.raises(UserError, match=r"quoted.csv:4: 3 fields, but the header names 2"):
        read_table(quoted, key="--data")
    folder = tmp_path / "folder"
    (folder / "nested").mkdir(parents=True)
    (folder / "nested" / "train.jsonl").write_text('{"prompt": "a=", "word": "a"}\n')
    (folder / "extra.jsonl").write_text('{"prompt": "b=", "word": "b"}\n')
    (folder / "notes.txt").write_text("mine\n")
    table = read_table(folder, key="--data")
    assert (table.files, table.unread) == (["nested/train.jsonl"], ["extra.jsonl", "notes.txt"])
    assert table.describe() == (f"{folder} (folder, split train, 1 rows; read 1 file (nested/train.jsonl); not "
                                "read: 2 files (extra.jsonl, notes.txt)): columns prompt, word")


@pytest.mark.slow
def test_training_says_what_a_folder_of_data_read(vigor, tmp_path):
    folder = tmp_path / "data"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "part-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in word_rows(6)))
    (folder / "old.csv").write_text("prompt,word\nz=,z\n")
    (tmp_path / "reward.py").write_text(LETTERS)
    code, out, err = vigor("train", "--data", str(folder), "--reward", f"{tmp_path / 'reward.py'}:letters",
                           "--steps", "1", "--prompts-per-step", "2", "--output-dir", str(tmp_path / "runs"),
                           "--set", "train.eval_limit=1", "--set", "sampling.max_new_tokens=2")
    assert code == 0, err[-2000:]
    assert (f"data: {folder} (folder, split train, 6 rows; read 1 file (train/part-1.jsonl); not read: 1 file "
            "(old.csv)): columns prompt, word") in out


def test_a_decode_error_never_names_a_bundled_file(tmp_path):
    """A failed decode names the file it was reading, found in the traceback's frames; a
    bundled config an outer frame held is not that file (it was named before)."""
    from vigor_cli.errors import user_message
    from vigor_cli.package_data import CONFIGS_DIR

    def outer(config_path):
        return inner()

    def inner():
        return b"\xff".decode("utf-8")

    try:
        outer(CONFIGS_DIR / "tiny-math.yaml")
    except UnicodeDecodeError as e:
        message = user_message(e)
    assert "tiny-math.yaml" not in message and message.startswith("not UTF-8 text"), message
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"\xff")
    try:
        outer(mine)
    except UnicodeDecodeError as e:
        assert user_message(e).startswith(f"{mine}: not UTF-8 text")


@pytest.mark.parametrize("name", [":ok:.jsonl", ":train:[bold]x.jsonl", "[red]data.jsonl"])
def test_user_names_are_printed_as_they_are(vigor, tmp_path, no_model, name):
    files = own_files(tmp_path, word_rows(3))
    data = tmp_path / name
    Path(files["data"]).rename(data)
    code, out, err = vigor("train", "--data", str(data), "--reward", files["reward"], "--prompts-per-step", "2",
                           "--dry-run")
    assert code == 0, err
    assert f"data: {data} (jsonl, 3 rows)" in out and f"{data}:1: the model sees" in out


@pytest.mark.slow
def test_an_all_none_reward_is_a_health_alert_and_a_stop_under_strict(vigor, tmp_path):
    (tmp_path / "none.py").write_text("def nothing(prompts, completions, **kwargs):\n    return [None] * len(completions)\n")
    files = own_files(tmp_path, word_rows(4))
    base = ["train", "--data", files["data"], "--reward", f"{tmp_path / 'none.py'}:nothing", "--steps", "1",
            "--prompts-per-step", "2", "--output-dir", str(tmp_path / "runs"), "--set", "train.eval_limit=1",
            "--set", "sampling.max_new_tokens=2"]
    code, _, err = vigor(*base, "--run-name", "warned")
    assert code == 0
    assert ("warning: step 1: reward function nothing returned None for 100 % of rollouts (None: 'cannot score "
            "this one'): they carry no reward and no gradient") in err
    code, _, err = vigor(*base, "--run-name", "strict", "--strict")
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "error: step 1: reward function nothing returned None for 100 % of rollouts"), err
    assert "(health.strict: stopped after step 1; checkpoint saved" in err


@pytest.mark.slow
def test_eval_of_an_own_task_run_with_benchmarks_says_they_are_not_its_data(vigor, finished_run, tmp_path,
                                                                             monkeypatch):
    """Without --benchmarks, eval --run scores the run's own sets (issue 31's tests); asked for
    by name, a bundled benchmark is scored with a note that it is not the run's data."""
    import yaml

    files = own_files(tmp_path, word_rows(4))
    cfg = yaml.safe_load((finished_run / "config.yaml").read_text())
    cfg["task"] = {"name": "custom", "data": files["data"], "rewards": [files["reward"]]}
    (finished_run / "config.yaml").write_text(yaml.safe_dump(cfg))
    from vigor_cli.commands import eval as eval_command

    monkeypatch.setattr(eval_command, "generate_all", lambda *a, **k: None)
    code, _, err = vigor("eval", "--run", str(finished_run), "--benchmarks", "tiny-math", "--limit", "1")
    assert code == 0, err
    assert f"note: --run {finished_run} trained on your own task; --benchmarks scores bundled benchmarks" in err


# --------------------------------------------------------------------------- vigor export
@pytest.fixture
def finished_run(trained, tmp_path):
    from test_trainer import tiny_sets

    return trained.copy(tiny_sets(tmp_path, "unused"), tmp_path / "run")


def test_export_into_the_runs_checkpoints_is_refused(vigor, finished_run):
    checkpoints = finished_run / "checkpoints"
    before = snapshot(finished_run)
    for out in (checkpoints / "mine", checkpoints / "step-2" / "model", checkpoints):
        line = one_line(vigor, "export", str(finished_run), "--out", str(out))
        assert f"--out {out}" in line and ("inside the run's checkpoints" in line or "not an empty directory" in line)
    assert snapshot(finished_run) == before


@pytest.mark.timeout(300)
def test_export_onto_a_full_disk_is_one_line_naming_the_disk(vigor, finished_run, tmp_path):
    disk = tmp_path / "disk"
    if not _small_tmpfs(disk, "256k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        line = one_line(vigor, "export", str(finished_run), "--out", str(disk / "model"))
        assert line.startswith(f"error: {disk / 'model'}: no space left on the disk mounted at {disk} (")
        assert "export again (nothing was written to --out)" in line
        assert list(disk.iterdir()) == []  # no partial folder, hidden or not
    finally:
        subprocess.run(["umount", str(disk)])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_export_stopped_by_sigterm_is_one_line_and_leaves_no_folder(finished_run, tmp_path):
    import signal
    import sys

    out = tmp_path / "exports" / "model"
    out.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "vigor_cli", "export", str(finished_run), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        while not (out.parent / f".{out.name}.tmp-export").exists() and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines() == [f"export stopped by SIGTERM: nothing was written to --out {out}"]
    assert list(out.parent.iterdir()) == []

"""One line naming the real cause when `--run`, `--resume` or `--rerun` is given something that
is not a run (missing, a file, a checkpoint folder), when a run's local model folder moved,
and the number-game example's own command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_checkpoints import copied
from vigor_cli.errors import UserError
from vigor_cli.model.loading import looks_local, resolve_model_path
from vigor_cli.run.directory import check_run_path

ROOT = Path(__file__).resolve().parents[1]


def test_a_path_that_is_not_a_run_is_named_for_what_it_is(trained, tmp_path):
    run = copied(trained, tmp_path, "r", 6).path
    with pytest.raises(UserError, match=r"^--run .*/nope: no such directory$"):
        check_run_path(tmp_path / "nope", "--run")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UserError, match=r"file.txt: a file, not a run directory$"):
        check_run_path(tmp_path / "file.txt", "--resume")
    with pytest.raises(UserError) as e:
        check_run_path(run / "checkpoints" / "step-4", "--run")
    assert str(e.value) == (f"--run {run}/checkpoints/step-4: a checkpoint folder, not a run directory; give its "
                            f"run: --run {run} --checkpoint step-4")
    with pytest.raises(UserError, match=r"^--rerun .*step-4: a checkpoint folder.*: --rerun .*/r$"):
        check_run_path(run / "checkpoints" / "step-4", "--rerun")
    with pytest.raises(UserError, match=r"checkpoints: the checkpoints folder of a run, not a run directory; give "
                                        r"the run: --run .*/r$"):
        check_run_path(run / "checkpoints", "--run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty: not a run directory \(no config.yaml\)"):
        check_run_path(tmp_path / "empty", "--run")
    check_run_path(run, "--run")  # a run: no refusal


def test_the_commands_say_it_in_one_line(vigor, trained, tmp_path):
    run = copied(trained, tmp_path, "r", 6).path
    code, out, err = vigor("eval", "--run", str(run / "checkpoints" / "step-4"))
    assert code == 2 and "a checkpoint folder, not a run directory" in err and len(err.strip().splitlines()) == 1
    assert "no intact checkpoint" not in err
    code, out, err = vigor("eval", "--run", str(tmp_path / "nope"))
    assert code == 2 and err.strip() == f"error: --run {tmp_path / 'nope'}: no such directory"
    code, out, err = vigor("train", "--rerun", str(tmp_path / "nope"))
    assert code == 2 and f"--rerun {tmp_path / 'nope'}: no such directory" in err and "--resume" not in err
    code, out, err = vigor("train", "--resume", str(tmp_path / "nope"))
    assert code == 2 and f"--resume {tmp_path / 'nope'}: no such directory" in err


def test_a_run_whose_local_model_folder_moved_names_the_folder(vigor, trained, tmp_path):
    run = copied(trained, tmp_path, "r", 6).path
    moved = tmp_path / "models" / "mine"
    config = run / "config.yaml"
    config.write_text(re.sub(r"name_or_path: .*", f"name_or_path: {moved}", config.read_text(), count=1))
    code, out, err = vigor("eval", "--run", str(run))
    assert code == 2 and f"model.name_or_path={moved}: no such directory" in err
    assert "repo id" not in err.lower() and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name,local", [("/a/b", True), ("./m", True), ("~/m", True), ("a/b/c", True),
                                        ("org/name", False), ("gpt2", False), ("C:/m", True)])
def test_what_looks_like_a_local_path(name, local):
    assert looks_local(name) is local
    if local and not Path(name).expanduser().exists():
        with pytest.raises(UserError, match="no such directory"):
            resolve_model_path(name)


def example_command() -> list[str]:
    """The command examples/number-game/env.py's docstring gives."""
    doc = (ROOT / "examples" / "number-game" / "env.py").read_text()
    [text] = [" ".join(part.split()) for part in doc.split('"""')[1].split("``") if part.startswith("vigor train ")]
    return shlex.split(text)[2:]


def test_the_number_game_command_fits_the_tiny_models_defaults():
    """Its prompts (the tool list included) need more than the default 64 prompt tokens and
    its 64 rows fewer prompts per step than auto's census of the default 64: the command says so."""
    args = example_command()
    assert "task.max_prompt_tokens=200" in args and "--prompts-per-step" in args
    assert int(args[args.index("--prompts-per-step") + 1]) * 2 <= 64  # auto's census: width 2
    docs = (ROOT / "docs" / "own-task.md").read_text()
    assert " ".join(["vigor train", *args]) in " ".join(docs.replace("\\\n", " ").split())


@pytest.mark.slow
def test_the_number_game_examples_own_command_trains(tmp_path):
    result = subprocess.run([sys.executable, "-m", "vigor_cli", "train", *example_command(), "--steps", "1",
                             "--output-dir", str(tmp_path), "--set", "train.eval_limit=4"],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]

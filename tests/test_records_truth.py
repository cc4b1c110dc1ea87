"""Records that tell the truth: the environment's file in provenance.json and checked on
resume, torch threads compared once vigor has set them, `--rerun --steps N` comparing only
the steps it repeats, episodes.jsonl under resume's completeness checks, and a stop signal
during the last step's evaluation keeping the checkpoint that was due. Fast checks use real
files and copies of the session's tiny runs; the trainings and resumes are slow."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from test_checkpoints import copied
from test_trainer import quiet
from vigor_cli.run import provenance
from vigor_cli.config import RunConfig, TaskConfig
from vigor_cli.errors import UserError
from vigor_cli.train.rerun import compare_runs
from vigor_cli.train.resume import check_episodes
from vigor_cli.run.directory import RunDir

ROOT = Path(__file__).resolve().parents[1]
GAME = '''
class Game:
    """A game whose reset says nothing and whose reward is fixed."""
    won, guesses = False, 0

    def reset(self, **kwargs):
        return None

    def get_reward(self) -> float:
        return 0.5
'''


def env_files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "games.jsonl"
    data.write_text("".join(f'{{"prompt": "Guess my number=", "answer": {k}}}\n' for k in range(1, 9)))
    env = folder / "game.py"
    env.write_text(GAME)
    return data, env


# --------------------------------------------------------------------------- the environment's file
def test_the_env_file_is_recorded_and_an_edit_refuses_a_resume(tmp_path):
    data, env = env_files(tmp_path / "files")
    cfg = RunConfig(task=TaskConfig(name="custom", data=str(data), env=f"{env}:Game",
                                    rewards=[f"{ROOT}/examples/number-game/reward.py:few_guesses"]))
    files = {f["key"]: f for f in provenance.named_files(cfg)}
    assert files["task.env"]["given"] == f"{env}:Game" and files["task.env"]["kind"] == "file"
    assert files["task.env"]["sha256"] == provenance.describe_path(env)["sha256"]
    run = tmp_path / "run"
    provenance.write(run, {**provenance.environment("cpu"), "files": provenance.named_files(cfg), "resumes": []})
    assert provenance.check_resume(run, False, lambda m: pytest.fail(m)) == {"versions": {}, "files": []}
    env.write_text(GAME.replace("0.5", "0.7"))
    with pytest.raises(UserError) as e:
        provenance.check_resume(run, False, print)
    assert str(e.value).startswith(f"--resume: {env}:Game (task.env) changed since the run started")
    warned = []
    changes = provenance.check_resume(run, True, warned.append)
    assert changes["files"][0]["key"] == "task.env" and any("--allow-changed-files" in w for w in warned)
    env.unlink()
    assert "(task.env) is gone" in str(pytest.raises(UserError, provenance.check_resume, run, False, print).value)


def test_a_built_in_environment_names_no_file(tmp_path):
    cfg = RunConfig(task=TaskConfig(name="tiny-guess", env="higher-lower"))
    assert "task.env" not in {f["key"] for f in provenance.named_files(cfg)}


# --------------------------------------------------------------------------- threads
def test_torch_threads_are_compared_once_vigor_has_set_them(tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # what vigor sets for the tiny model: the run's record says 1
        record = {**provenance.environment("cpu"), "files": [], "resumes": []}
        provenance.write(tmp_path, record)
        torch.set_num_threads(2)  # before the model loads, here: the default
        warned = []
        changes = provenance.check_resume(tmp_path, False, warned.append)
        assert changes["versions"] == {} and not warned  # no 'recorded 1, here 2' before vigor sets them
        assert not any(line.startswith("torch threads") for line in provenance.differences(record, threads=False))
        assert provenance.thread_change(record) == (1, 2)  # a real difference, once they are set, is named
        torch.set_num_threads(1)
        assert provenance.thread_change(record) is None
        assert provenance.differences(record) == []
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- --rerun --steps N
def _cut_to(run: Path, step: int) -> None:
    for name in ("metrics.jsonl", "allocation.jsonl", "completions.jsonl"):
        lines = [x for x in (run / name).read_text().splitlines() if json.loads(x)["step"] <= step]
        (run / name).write_text("".join(x + "\n" for x in lines))
    for p in (run / "eval").iterdir():
        if int(p.stem.split("-")[1]) > step:
            p.unlink()


def test_a_rerun_cut_short_compares_only_the_steps_it_repeats(trained, tmp_path):
    a = copied(trained, tmp_path, "a", 6).path  # evaluations at 0, 2, 4, 6
    b = copied(trained, tmp_path, "b", 6).path
    _cut_to(b, 3)  # a rerun with --steps 3 ...
    rows = [json.loads(x) for x in (b / "metrics.jsonl").read_text().splitlines()]
    end = {**next(r for r in rows if r["step"] == 2 and "eval/accuracy" in r), "step": 3}
    with (b / "metrics.jsonl").open("a") as f:  # ... ends with an evaluation of step 3, which a never ran
        f.write(json.dumps(end) + "\n")
    shutil.copy(b / "eval" / "step-2.json", b / "eval" / "step-3.json")
    assert compare_runs(a, b, 3, cut_short=True) is None
    found = compare_runs(a, b, 3)
    assert found is not None and found.step == 3
    ev = json.loads((b / "eval" / "step-2.json").read_text())  # a repeated step still counts
    ev["sets"]["tiny-math"]["samples"][0]["completion"] += "!"
    (b / "eval" / "step-2.json").write_text(json.dumps(ev))
    assert compare_runs(a, b, 3, cut_short=True).file == "eval/step-2.json"


# --------------------------------------------------------------------------- episodes.jsonl on resume
def _episode_run(tmp_path: Path) -> RunDir:
    """The logs of a two-step run with an environment, as the trainer writes them (two
    episodes per step), read by the resume's check."""
    run = tmp_path / "run"
    run.mkdir()
    metrics = [{"step": s, "reward/mean": 0.5, "episodes/ended/answered": 1, "episodes/ended/max_turns": 1}
               for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run / "episodes.jsonl").write_text("".join(json.dumps({"step": s, "uid": f"u{k}", "turns": 1}) + "\n"
                                                for s in (1, 2) for k in range(2)))
    return RunDir(run)


def _check(run: RunDir, step: int = 2) -> None:
    check_episodes(run, step, run.log.steps("metrics.jsonl"))


def test_resume_refuses_lost_episode_lines_a_checkpoint_covers(tmp_path):
    run = _episode_run(tmp_path)
    _check(run)  # complete: no refusal
    path = run.path / "episodes.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("".join(x + "\n" for x in lines[:1] + lines[2:]))  # one of step 1's lines removed
    with pytest.raises(UserError, match=r"episodes.jsonl: step 1 has 1 of its 2 episode lines, and the checkpoint "
                                        r"\(step 2\) covers it"):
        _check(run)
    _check(run, step=0)  # a checkpoint that covers no step: nothing to refuse
    path.write_text("".join(x + "\n" for x in lines[:2]))  # step 2's lines gone
    with pytest.raises(UserError, match="step 2 has 0 of its 2"):
        _check(run)
    path.write_text("".join(x + "\n" for x in lines[:3]) + lines[3][:12])  # a torn last line of step 2
    with pytest.raises(UserError, match=r"the last line, of step 2, is cut short"):
        _check(run)
    path.unlink()
    with pytest.raises(UserError, match=r"episodes.jsonl: no such file, and the checkpoint \(step 2\) covers"):
        _check(run)


# --------------------------------------------------------------------------- whole runs (slow)
def _env_train(vigor, folder: Path, data: Path, env: Path, name: str, *extra: str) -> tuple[int, str, str]:
    return vigor("train", "--data", str(data), "--env", f"{env}:Game",
                 "--reward", f"{ROOT}/examples/number-game/reward.py:few_guesses", "--output-dir", str(folder),
                 "--run-name", name, "--set", "train.prompts_per_step=4", "--set", "allocation.strategy=grpo",
                 "--set", "allocation.group_size=2", "--set", "train.eval_limit=2", "--max-new-tokens", "6",
                 "--set", "task.max_prompt_tokens=192", "--set", "train.save_every=1", *extra)


@pytest.mark.slow
def test_resume_of_an_environment_run_refuses_an_edited_env_file_and_lost_episodes(tmp_path, vigor):
    data, env = env_files(tmp_path / "files")
    code, _, err = _env_train(vigor, tmp_path, data, env, "r", "--steps", "2")
    assert code == 0, err
    record = provenance.read(tmp_path / "r")
    assert any(f["key"] == "task.env" and f["given"] == f"{env}:Game" for f in record["files"])
    shutil.copytree(tmp_path / "r", tmp_path / "lost")
    env.write_text(GAME.replace("0.5", "0.7"))
    code, out, err = vigor("train", "--resume", str(tmp_path / "r"), "--steps", "3")
    assert code == 2 and f"--resume: {env}:Game (task.env) changed since the run started" in err
    env.write_text(GAME)
    lines = (tmp_path / "lost" / "episodes.jsonl").read_text().splitlines()
    (tmp_path / "lost" / "episodes.jsonl").write_text("".join(x + "\n" for x in lines if json.loads(x)["step"] != 1))
    code, out, err = vigor("train", "--resume", str(tmp_path / "lost"), "--steps", "3")
    assert code == 2 and "episodes.jsonl: step 1 has 0 of its 8 episode lines" in err
    code, out, err = vigor("train", "--resume", str(tmp_path / "r"), "--steps", "3")  # intact: resumes
    assert code == 0, err
    assert "torch threads was" not in out + err


@pytest.mark.slow
def test_rerun_steps_short_of_an_evaluation_step_is_identical_and_names_no_threads(tmp_path, vigor):
    data, env = env_files(tmp_path / "files")
    code, _, err = _env_train(vigor, tmp_path, data, env, "orig", "--steps", "3", "--set", "train.eval_every=2")
    assert code == 0, err
    code, out, err = vigor("train", "--rerun", str(tmp_path / "orig"), "--steps", "1")
    assert code == 0, out + err
    assert "identical:" in out and "steps 0-1" in out and "torch threads: recorded" not in out


@pytest.mark.slow
@pytest.mark.parametrize("where", ["evaluation", "between"])
def test_a_signal_during_the_last_steps_evaluation_keeps_its_checkpoint(tmp_path, monkeypatch, where):
    from test_tracking import tiny_sets
    from vigor_cli.train import trainer as trainer_module
    from vigor_cli.settings import build_config
    from vigor_cli.train.trainer import Trainer, train

    if where == "evaluation":
        original = Trainer.evaluate

        def evaluate(self, step):
            if step == 4:
                os.kill(os.getpid(), signal.SIGTERM)
            return original(self, step)

        monkeypatch.setattr(Trainer, "evaluate", evaluate)
    else:  # after the last step, before the final evaluation (the progress bar closing)
        bars = trainer_module.progress

        @contextlib.contextmanager
        def progress(out):
            with bars(out) as b:
                yield b
            os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(trainer_module, "progress", progress)
    sets = tiny_sets(tmp_path, "x", "train.steps=4", "train.save_every=3", "train.eval_every=2")
    summary = train(build_config(sets=sets), out=quiet())
    assert summary["steps"] == 4 and RunDir(tmp_path / "x").latest_checkpoint().name == "step-4"


@pytest.mark.slow
def test_an_environment_with_class_level_state_is_warned_about(tmp_path, vigor):
    data, env = env_files(tmp_path / "files")
    env.write_text(GAME.replace("        return None", "        Game.played = getattr(Game, 'played', 0) + 1\n"
                                "        return None"))
    code, out, err = _env_train(vigor, tmp_path, data, env, "s", "--steps", "1")
    assert code == 0, err
    assert "Game.played" in out + err and "resume" in out + err

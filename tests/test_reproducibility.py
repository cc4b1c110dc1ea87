"""Reproducible by construction (issue 33; issue 36's user RNGs): a run's record of what made it
(vigor_cli/run/provenance.py), the global generators a reward file draws from (vigor_cli/run/seeding.py),
a resume that refuses changed files, `vigor train --rerun` and its comparison, evaluation draws
that do not depend on how a set is graded. The fast checks read a shared tiny run or real files;
the trainings twice, the resumes and the reruns are slow."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from test_checkpoints import copied, shared
from test_trainer import quiet
from vigor_cli.run import provenance, seeding
from vigor_cli.config import RunConfig, TaskConfig
from vigor_cli.errors import UserError
from vigor_cli.train.rerun import TIMING_PREFIX, compare_runs, first_difference

REWARD = """
import random
import numpy as np

random.seed(1234)          # a reward that seeds at import, as many do
np.random.seed(99)
NOISE = random.random()     # and draws at import

def noisy(prompts, completions, word, **kwargs):
    # a reward that draws from both global generators each call
    return [float(len(c) % 3 == len(w) % 3) * 0.9 + 0.1 * random.random() * np.random.rand() for c, w in zip(completions, word)]
"""


def own_task_files(folder: Path, words=("ab", "abc", "abcd", "xy", "xyz", "k", "mn", "pqr")) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{w}=", "word": w}) + "\n" for w in words))
    reward = folder / "noisy.py"
    reward.write_text(REWARD)
    return data, reward


def own_task_cfg(data: Path, reward: Path) -> RunConfig:
    return RunConfig(task=TaskConfig(name="custom", data=str(data), rewards=[f"{reward}:noisy"]))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- the record
def test_a_run_records_what_made_it(trained, tmp_path):
    run = shared(trained, tmp_path, 6)
    record = provenance.read(run.path)
    import transformers

    assert record["vigor"]["version"] and record["python"]["version"]
    libs = record["libraries"]
    assert libs["torch"] == torch.__version__ and libs["transformers"] == transformers.__version__
    assert {"peft", "trl", "vllm", "datasets", "numpy", "tokenizers", "safetensors"} <= set(libs)
    m = record["machine"]
    assert m["device"] == "cpu" and m["device_name"] and m["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["threads"]["torch_intra_op"] >= 1 and "OMP_NUM_THREADS" in record["threads"]
    assert record["seeds"]["train.seed"] == 0
    assert set(record["seeds"]["rules"]) >= {"data_order", "rollouts", "evaluation", "python_random", "numpy", "checkpoint"}
    assert record["task"]["train"]["examples"] > 0 and len(record["task"]["train"]["sha256"]) == 64
    assert record["task"]["eval"]["tiny-math"]["examples"] == 8  # train.eval_limit
    [model] = [f for f in record["files"] if f["key"] == "model.name_or_path"]
    from vigor_cli.model.loading import TINY_DIR

    assert model["given"] == "tiny" and model["kind"] == "folder"
    assert model["size"] == sum(p.stat().st_size for p in TINY_DIR.rglob("*") if p.is_file())
    assert record["resumes"] == []


def test_the_seed_rules_are_the_code_s():
    """The rules the record states are what the code draws with."""
    from vigor_cli.train.rollout_core import DataOrder

    uids = [f"u{i}" for i in range(20)]
    order = list(uids)
    random.Random(seeding.derive_seed(7, "data", 0)).shuffle(order)
    assert DataOrder(uids, 7).draw(20) == order
    digest = hashlib.sha256(b"7:rollout:3:1").digest()
    assert seeding.derive_seed(7, "rollout", 3, 1) == int.from_bytes(digest[:8], "little") >> 1


def test_the_files_a_config_names_are_recorded_with_size_rows_and_sha256(tmp_path):
    from vigor_cli.tasks import get_task

    data, reward = own_task_files(tmp_path)
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"prompt": "q=", "word": "q"}) + "\n")
    cfg = own_task_cfg(data, reward)
    cfg.task.eval_data = str(held)
    task = get_task(cfg.task)
    try:
        train, evals = task.train_examples(), {"custom": task.eval_examples()}
        record = provenance.build(cfg, "cpu", train, evals, 0, provenance.rows_read(cfg, task, len(train)))
    finally:
        task.close()
    files = {f["key"]: f for f in record["files"]}
    assert files["task.data"] == {"key": "task.data", "given": str(data), "kind": "file", "size": data.stat().st_size,
                                  "sha256": sha(data), "rows": 8}
    assert files["task.eval_data"]["rows"] == 1 and files["task.eval_data"]["sha256"] == sha(held)
    assert files["task.rewards"]["given"] == f"{reward}:noisy" and files["task.rewards"]["sha256"] == sha(reward)
    assert record["task"]["train"]["examples"] == 8 and record["task"]["eval"]["custom"]["examples"] == 1


def test_a_data_folder_is_hashed_by_its_files_names_and_contents(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.jsonl").write_text("{}\n")
    (folder / "b.jsonl").write_text("{}\n{}\n")
    first = provenance.describe_path(folder)
    assert first["kind"] == "folder" and first["size"] == 9 and first["files"] == 2
    (folder / "b.jsonl").rename(folder / "c.jsonl")  # same bytes, another name
    assert provenance.describe_path(folder)["sha256"] != first["sha256"]
    assert provenance.describe_path(folder, hash_limit=1)["sha256"] is None  # too big to hash: sizes only
    assert provenance.describe_path(tmp_path / "gone")["kind"] == "missing"


# --------------------------------------------------------------------------- resume's checks
def _recorded_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    data, reward = own_task_files(tmp_path / "files")
    run = tmp_path / "run"
    run.mkdir()
    cfg = own_task_cfg(data, reward)
    provenance.write(run, {**provenance.environment("cpu"), "files": provenance.named_files(cfg), "resumes": []})
    return run, data, reward


def test_a_resume_refuses_a_changed_data_or_reward_file_in_one_line(tmp_path):
    run, data, reward = _recorded_run(tmp_path)
    assert provenance.check_resume(run, False, lambda m: pytest.fail(m)) == {"versions": {}, "files": []}
    with data.open("a") as f:
        f.write(json.dumps({"prompt": "new=", "word": "new"}) + "\n")  # appended rows
    with pytest.raises(UserError) as e:
        provenance.check_resume(run, False, print)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"--resume: {data} (task.data) changed since the run started")
    assert "--allow-changed-files" in line
    reward.write_text(reward.read_text().replace("0.9", "0.8"))  # an edited reward
    assert "(and 1 more)" in str(pytest.raises(UserError, provenance.check_resume, run, False, print).value)
    data.unlink()
    assert "is gone" in str(pytest.raises(UserError, provenance.check_resume, run, False, print).value)


def test_allowed_changes_and_new_versions_are_warned_and_recorded(tmp_path):
    run, data, reward = _recorded_run(tmp_path)
    record = provenance.read(run)
    record["libraries"]["transformers"] = "0.0.1"
    provenance.write(run, record)
    data.write_text(data.read_text()[::-1])
    warned = []
    changes = provenance.check_resume(run, True, warned.append)
    assert any(w.startswith("transformers was 0.0.1 when the run started") for w in warned)
    assert any(str(data) in w and "--allow-changed-files" in w for w in warned)
    provenance.add_resume(run, 4, changes)
    [resumed] = provenance.read(run)["resumes"]
    assert resumed["from_step"] == 4 and resumed["versions"]["transformers"]["recorded"] == "0.0.1"
    assert resumed["files"][0]["key"] == "task.data" and resumed["files"][0]["sha256"] == sha(data)
    assert any("transformers 0.0.1 ->" in line for line in provenance.summary_lines(provenance.read(run)))


def test_a_run_without_a_record_resumes_as_before(tmp_path):
    assert provenance.check_resume(tmp_path, False, print) is None
    (tmp_path / provenance.RECORD).write_text("{not json")
    with pytest.raises(UserError, match="provenance.json"):
        provenance.read(tmp_path)


def test_allow_changed_files_goes_with_resume_and_rerun_with_few_flags(vigor, tmp_path):
    code, _, err = vigor("train", "--allow-changed-files", "--steps", "1")
    assert code == 2 and err.strip().splitlines() == ["error: --allow-changed-files goes with --resume (a new run "
                                                      "records its files as they are)"]
    code, _, err = vigor("train", "--rerun", str(tmp_path), "--strategy", "grpo", "--set", "train.seed=1")
    assert code == 2 and "--rerun repeats the run's saved config; drop --strategy, --set" in err
    code, _, err = vigor("train", "--rerun", str(tmp_path / "nothing"))
    assert code == 2 and f"--rerun {tmp_path / 'nothing'}: no such directory" in err


# --------------------------------------------------------------------------- the generators
def test_the_global_generators_follow_the_seed_and_the_step():
    seeding.seed_run(5)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    seeding.seed_run(5)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
    seeding.seed_step(5, 3)
    step3 = (random.random(), np.random.rand())
    random.seed(42)  # whatever the user's code did in between
    np.random.seed(42)
    seeding.seed_step(5, 3)
    assert (random.random(), np.random.rand()) == step3
    seeding.seed_step(5, 4)
    assert (random.random(), np.random.rand()) != step3


def test_every_generator_state_survives_a_checkpoint_round_trip():
    seeding.seed_run(1)
    random.random(), np.random.normal(), torch.rand(3)  # mid-stream, numpy holding a cached gauss
    buf = io.BytesIO()
    torch.save(seeding.rng_state(), buf)
    expected = (random.random(), np.random.normal(), np.random.rand(), torch.rand(2).tolist())
    seeding.seed_run(999)
    buf.seek(0)
    seeding.set_rng_state(torch.load(buf, weights_only=True))  # what a resume reads
    assert (random.random(), np.random.normal(), np.random.rand(), torch.rand(2).tolist()) == expected
    seeding.set_rng_state({"torch_rng": torch.get_rng_state(), "cuda_rng": []})  # an older checkpoint: torch only


# --------------------------------------------------------------------------- comparing two runs
def test_two_copies_of_a_run_compare_identical_and_an_edit_is_named(trained, tmp_path):
    a = copied(trained, tmp_path, "a", 6)
    b = copied(trained, tmp_path, "b", 6)
    assert compare_runs(a.path, b.path, 6) is None
    lines = (b.path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    i = next(k for k, r in enumerate(rows) if r["step"] == 3 and "reward/mean" in r)
    rows[i]["time/step"] = 123.0  # timing fields are not compared
    (b.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert compare_runs(a.path, b.path, 6) is None
    rows[i]["reward/mean"] += 0.5
    (b.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = compare_runs(a.path, b.path, 6)
    assert (found.step, found.file, found.key) == (3, "metrics.jsonl", "[0].reward/mean")
    assert compare_runs(a.path, b.path, 2) is None  # only the steps asked for
    ev = json.loads((b.path / "eval" / "step-2.json").read_text())
    ev["sets"]["tiny-math"]["samples"][1]["completion"] += "!"
    (b.path / "eval" / "step-2.json").write_text(json.dumps(ev))
    found = compare_runs(a.path, b.path, 6)
    assert (found.step, found.file, found.key) == (2, "eval/step-2.json", "sets.tiny-math.samples[1].completion")


def test_first_difference_names_the_path():
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ("a[1].b", 2, 3)
    assert first_difference([1, 2], [1, 2, 3]) == ("(length)", 2, 3)
    assert first_difference({"x": 1}, {"x": 1, "y": 2}) == ("y", "<missing>", 2)
    assert first_difference({"x": float("nan")}, {"x": float("nan")}) is None
    assert first_difference(1, 1.0) == ("(value)", 1, 1.0) and TIMING_PREFIX == "time/"


@pytest.mark.slow
def test_report_and_inspect_allocation_show_the_record(trained, tmp_path, vigor):
    run = shared(trained, tmp_path, 6)
    record = provenance.read(run.path)
    code, out, err = vigor("inspect-allocation", str(run.path))
    assert code == 0, err
    assert f"torch {record['libraries']['torch']}" in out and "seed 0" in out
    code, out, err = vigor("report", str(run.path), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    assert f"transformers {record['libraries']['transformers']}" in out
    code, out, err = vigor("inspect-allocation", str(run.path), "--json")
    assert json.loads(out)["provenance"]["libraries"]["torch"] == record["libraries"]["torch"]


# --------------------------------------------------------------------------- evaluation draws
@pytest.mark.slow
def test_an_evaluation_draws_the_same_however_it_is_graded(monkeypatch):
    """The set is generated in one engine call: the grading chunk size changes no sample."""
    from vigor_cli.evaluate import evaluation
    from vigor_cli.model.loading import load_policy
    from vigor_cli.config import ModelConfig
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine
    from vigor_cli.tasks.tiny_facts import TinyFactsTask

    policy, tokenizer, _ = load_policy(ModelConfig(name_or_path="tiny", lora={"enabled": False}))
    engine, task = HFEngine(policy, tokenizer), TinyFactsTask()
    examples = task.eval_examples()[:6]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)
    runs = []
    for chunk in (4, 256):
        monkeypatch.setattr(evaluation, "CHUNK_SAMPLES", chunk)
        seen = []
        result = evaluation.evaluate_examples(engine, task, tokenizer, examples, 3, params, "f",
                                              progress=lambda d, t, s: seen.append(d))
        runs.append([(s.uid, s.sample, s.completion) for s in result.samples])
        assert seen[-1] == 6 and seen == sorted(seen)  # problems generated, told by the engine as it goes
    assert runs[0] == runs[1] and len(runs[0]) == 18


# --------------------------------------------------------------------------- whole runs (slow)
def _strip(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")} for x in path.read_text().splitlines()]


def assert_same_run(a: Path, b: Path) -> None:
    """Byte-identical logs (metrics.jsonl but for its timing fields), eval files and final weights."""
    assert _strip(a / "metrics.jsonl") == _strip(b / "metrics.jsonl")
    for name in ("allocation.jsonl", "completions.jsonl"):
        assert (a / name).is_file() and (a / name).read_bytes() == (b / name).read_bytes(), name
    evals = sorted(p.name for p in (a / "eval").iterdir())
    assert evals and evals == sorted(p.name for p in (b / "eval").iterdir())
    for name in evals:
        assert (a / "eval" / name).read_bytes() == (b / "eval" / name).read_bytes(), name
    final = max(int(p.name.split("-")[1]) for p in (a / "checkpoints").iterdir())
    weights = list((a / "checkpoints" / f"step-{final}").glob("*.safetensors"))
    assert weights
    for w in weights:
        assert w.read_bytes() == (b / "checkpoints" / f"step-{final}" / w.name).read_bytes(), w.name


@pytest.mark.slow
def test_the_default_config_twice_is_the_same_run(tmp_path, vigor):
    """The bundled default (configs/tiny-math.yaml: auto, 64 prompts x 8), three steps, twice."""
    for name in ("a", "b"):
        code, _, err = vigor("train", "--steps", "3", "--eval-every", "2", "--log-completions-every", "1",
                             "--output-dir", str(tmp_path), "--run-name", name, "--set", "train.eval_limit=64")
        assert code == 0, err
    assert_same_run(tmp_path / "a", tmp_path / "b")


def _own_task_run(vigor, folder: Path, data: Path, reward: Path, name: str, *extra: str) -> tuple[int, str, str]:
    return vigor("train", "--data", str(data), "--reward", f"{reward}:noisy", "--prompts-per-step", "4",
                 "--max-new-tokens", "6", "--output-dir", str(folder), "--run-name", name,
                 "--set", "train.eval_every=1", "--set", "train.save_every=1", "--log-completions-every", "1", *extra)


@pytest.mark.slow
def test_an_own_task_run_whose_reward_draws_random_numbers_repeats_and_resumes_exactly(tmp_path, vigor):
    """Issue 36: a reward that seeds random and numpy at import and draws from both every call
    gives the same run twice, and a run stopped at step 2 and resumed equals the uninterrupted one."""
    data, reward = own_task_files(tmp_path / "files")
    for name in ("a", "b"):
        code, _, err = _own_task_run(vigor, tmp_path, data, reward, name, "--steps", "3")
        assert code == 0, err
    assert_same_run(tmp_path / "a", tmp_path / "b")
    code, _, err = _own_task_run(vigor, tmp_path, data, reward, "c", "--steps", "2")
    assert code == 0, err
    code, out, err = vigor("train", "--resume", str(tmp_path / "c"), "--steps", "3")
    assert code == 0, err
    assert_same_run(tmp_path / "a", tmp_path / "c")
    assert provenance.read(tmp_path / "c")["resumes"][0]["from_step"] == 2


@pytest.mark.slow
def test_a_resume_after_the_data_changed_stops_in_one_line_unless_allowed(tmp_path, vigor):
    data, reward = own_task_files(tmp_path / "files")
    code, _, err = _own_task_run(vigor, tmp_path, data, reward, "r", "--steps", "1")
    assert code == 0, err
    before = {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()}
    lines = data.read_text().splitlines()
    data.write_text("\n".join(reversed(lines)) + "\n")  # the same rows, shuffled
    code, out, err = vigor("train", "--resume", str(tmp_path / "r"), "--steps", "2")
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: --resume: {data} (task.data) changed since the run started"), line
    assert {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == before  # nothing changed
    code, out, err = vigor("train", "--resume", str(tmp_path / "r"), "--steps", "2", "--allow-changed-files")
    assert code == 0, err
    assert "resuming with it (--allow-changed-files" in out
    [resumed] = provenance.read(tmp_path / "r")["resumes"]
    assert resumed["files"][0]["given"] == str(data) and resumed["files"][0]["sha256"] == sha(data)


@pytest.mark.slow
def test_rerun_says_identical_and_names_a_version_the_record_differs_in(tmp_path, vigor):
    data, reward = own_task_files(tmp_path / "files")
    code, _, err = _own_task_run(vigor, tmp_path, data, reward, "orig", "--steps", "2")
    assert code == 0, err
    code, out, err = vigor("train", "--rerun", str(tmp_path / "orig"))
    assert code == 0, err
    assert "identical: metrics.jsonl (timing fields aside), allocation.jsonl, completions.jsonl and eval/ of steps 0-2" in out
    assert "and the weights of step 2" in out and "differs from the record" not in out
    assert provenance.read(tmp_path / "orig-rerun")["rerun_of"]["run"] == "orig"
    record = provenance.read(tmp_path / "orig")
    record["libraries"]["transformers"] = "0.0.1"
    provenance.write(tmp_path / "orig", record)
    code, out, err = vigor("train", "--rerun", str(tmp_path / "orig"), "--steps", "1", "--run-name", "again")
    assert code == 0, err
    import transformers

    assert f"differs from the record: transformers: recorded 0.0.1, here {transformers.__version__}" in out
    assert "identical:" in out and "steps 0-1" in out
    shutil.rmtree(tmp_path / "again")
    rows = _strip(tmp_path / "orig" / "metrics.jsonl")
    next(r for r in rows if r["step"] == 1 and "reward/mean" in r)["reward/mean"] = -1.0  # the record says otherwise
    (tmp_path / "orig" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = vigor("train", "--rerun", str(tmp_path / "orig"), "--steps", "1", "--run-name", "again")
    assert code == 3
    assert "differs: first at step 1, metrics.jsonl [0].reward/mean: -1.0 in" in out
    assert "recorded versions or files that differ here (a likely cause): transformers: recorded 0.0.1" in out

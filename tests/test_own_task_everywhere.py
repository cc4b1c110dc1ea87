"""Your run, everywhere (issue 31): a TRL-style task of one's own (a question/gold JSONL with
chat-message prompts, two reward functions in TRL's signature, one returning None, weights, a
system prompt, an eval file) trained once on the bundled tiny model, then evaluated, reported,
inspected and exported through vigor's commands, which all speak that task: its rewards, its
pass rate, its rendering, its base."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_trainer import tiny_sets
from test_tracking import tb_scalars, tb_texts

REWARDS = r'''
import re

SEEN = []


def exact(prompts, completions, gold, trainer_state, completion_ids, log_metric, log_extra, **kwargs):
    """1 for the right sum in \boxed{}, 0 for a wrong one, None without one. It needs TRL's
    trainer_state and completion_ids (no defaults) and logs through log_metric and log_extra."""
    out = []
    for c, g in zip(completions, gold):
        m = re.search(r"\\boxed\{(\d+)\}", c[0]["content"])
        out.append(None if m is None else float(m.group(1) == g))
    log_metric("exact_share", sum(v or 0.0 for v in out) / len(out))
    log_metric("seen_global_step", float(trainer_state.global_step))
    log_extra("completion_tokens", [len(ids) for ids in completion_ids])
    return out


def boxed(completions, **kwargs):
    return [float("\\boxed{" in c[0]["content"]) for c in completions]
'''

SYSTEM = "Add the two numbers."


def _rows(pairs):
    return "".join(json.dumps({"question": [{"role": "user", "content": f"{a}+{b}="}], "gold": str(a + b)}) + "\n"
                   for a, b in pairs)


@pytest.fixture(scope="session")
def task_files(tmp_path_factory) -> Path:
    """train.jsonl (64 sums), eval.jsonl (12 others), rewards.py."""
    root = tmp_path_factory.mktemp("own-task")
    pairs = [(a, b) for a in range(10) for b in range(10)]
    (root / "train.jsonl").write_text(_rows(pairs[:64]))
    (root / "eval.jsonl").write_text(_rows(pairs[64:76]))
    (root / "rewards.py").write_text(REWARDS)
    return root


def own_sets(files: Path, *extra: str) -> list[str]:
    return [*tiny_sets(files, "own", "task.name=custom", f"task.data={files / 'train.jsonl'}",
                       f"task.eval_data={files / 'eval.jsonl'}", "task.fields.prompt=question",
                       f"task.rewards=[{files / 'rewards.py'}:exact, {files / 'rewards.py'}:boxed]",
                       "task.reward_weights=[1, 0.5]", f"task.system_prompt={SYSTEM}", "train.eval_every=1",
                       "train.save_every=2", "train.prompts_per_step=8", "allocation.strategy=grpo",
                       "sampling.max_new_tokens=8", "task.max_prompt_tokens=48"), *extra]


@pytest.fixture(scope="session")
def own_run(trained, task_files) -> Path:
    """The task trained for 2 steps (full fine-tuning), with TensorBoard."""
    return trained.get(own_sets(task_files, "train.report_to=[tensorboard]"))


@pytest.fixture(scope="session")
def own_lora_run(trained, task_files) -> Path:
    return trained.get(own_sets(task_files, "model.lora.enabled=true"))


def lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def last_eval(run: Path) -> dict:
    steps = sorted(int(p.stem.split("-")[1]) for p in (run / "eval").glob("step-*.json"))
    return json.loads((run / "eval" / f"step-{steps[-1]}.json").read_text())


def task_flags(files: Path) -> list[str]:
    return ["--eval-data", str(files / "eval.jsonl"), "--reward", f"{files / 'rewards.py'}:exact",
            "--reward", f"{files / 'rewards.py'}:boxed"]


# --------------------------------------------------------------------------- 1. evaluate the user's task
@pytest.mark.slow
def test_eval_run_reproduces_the_runs_last_evaluation_file_exactly(own_run, vigor, tmp_path):
    code, out, err = vigor("eval", "--run", str(own_run), "--output", str(tmp_path / "r.json"))
    assert code == 0, err
    assert f"evaluating run {own_run} (step-2) on task custom (the run's own settings" in err
    assert f"system prompt '{SYSTEM}'" in err and "set custom: 8 problems of" in err  # the run's train.eval_limit
    ours, theirs = json.loads((tmp_path / "r.json").read_text()), last_eval(own_run)
    assert ours["sets"] == theirs["sets"] and ours["accuracy"] == theirs["accuracy"] and ours["step"] == 2
    assert ours["task"]["name"] == "custom" and ours["sampling"]["temperature"] == 0.0
    assert "tiny-math" not in out + err  # never another set
    assert "pass rate" in out and "exact mean" in out and "boxed mean" in out


def test_eval_of_the_exported_folder_on_the_users_set_gives_the_same_numbers(own_run, task_files, vigor, tmp_path):
    code, _, err = vigor("export", str(own_run), "--out", str(tmp_path / "model"))
    assert code == 0, err
    code, out, err = vigor("eval", str(tmp_path / "model"), *task_flags(task_files), "--output", str(tmp_path / "e.json"))
    assert code == 0, err
    assert "vigor_run.json" in err  # the run's settings, said
    ours, theirs = json.loads((tmp_path / "e.json").read_text())["sets"]["custom"], last_eval(own_run)["sets"]["custom"]
    assert ours["metrics"] == theirs["metrics"] and ours["accuracy"] == theirs["accuracy"]
    assert [s["completion"] for s in ours["samples"]] == [s["completion"] for s in theirs["samples"]]
    assert ours["metrics"]["rewards"]["reward/exact/unscored"] == theirs["metrics"]["rewards"]["reward/exact/unscored"]
    # another set of rewards, no weights given: not the run's weights (two for one), every weight 1
    code, _, err = vigor("eval", str(tmp_path / "model"), "--eval-data", str(task_files / "eval.jsonl"), "--reward",
                         f"{task_files / 'rewards.py'}:boxed", "--output", str(tmp_path / "b.json"))
    assert code == 0, err
    boxed = json.loads((tmp_path / "b.json").read_text())["sets"]["custom"]
    assert boxed["accuracy"] == theirs["metrics"]["rewards"]["reward/boxed/mean"]


def test_eval_of_any_model_on_the_users_set_with_trains_flags(task_files, vigor, tmp_path):
    """The bundled tiny model (no run) on the eval file: every row, the same avg@n, pass@k and
    per-reward means as training's evaluation; the benchmarks and your set are not mixed."""
    code, out, err = vigor("eval", "tiny", "--data", str(task_files / "eval.jsonl"), "--prompt-field", "question",
                           "--system-prompt", SYSTEM, "--reward", f"{task_files / 'rewards.py'}:exact",
                           "--reward", f"{task_files / 'rewards.py'}:boxed", "--reward-weights", "1,0.5",
                           "--max-new-tokens", "8", "--output", str(tmp_path / "t.json"))
    assert code == 0, err
    results = json.loads((tmp_path / "t.json").read_text())
    custom = results["sets"]["custom"]
    assert custom["examples"] == 12 and custom["pass_threshold"] == 1.0
    assert {"reward/exact/unscored", "reward/boxed/mean", "reward/boxed/unscored"} <= set(custom["metrics"]["rewards"])
    assert all("completion_tokens" in s["extra"] for s in custom["samples"])  # log_extra in the results
    code, _, err = vigor("eval", "tiny", "--benchmarks", "tiny-math", "--data", str(task_files / "eval.jsonl"))
    assert code == 2 and "give one" in err


@pytest.mark.slow
def test_an_adapter_folder_finds_its_base_or_says_how_to_give_it(own_lora_run, task_files, vigor, tmp_path):
    code, _, err = vigor("export", str(own_lora_run), "--out", str(tmp_path / "adapter"))
    assert code == 0, err
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"  # vigor's name for its bundled model, not a path
    code, out, err = vigor("eval", str(tmp_path / "adapter"), *task_flags(task_files), "--output", str(tmp_path / "a.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "a.json").read_text())["sets"]["custom"]["metrics"] == \
        last_eval(own_lora_run)["sets"]["custom"]["metrics"]
    config["base_model_name_or_path"] = "../somewhere/else/base"
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    code, _, err = vigor("eval", str(tmp_path / "adapter"), *task_flags(task_files))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "base '../somewhere/else/base'" in err and "--base PATH" in err
    code, _, err = vigor("eval", str(tmp_path / "adapter"), "--base", "tiny", *task_flags(task_files))
    assert code == 0, err


# --------------------------------------------------------------------------- 3. TRL's reward contract
def test_a_reward_requiring_trainer_state_and_completion_ids_trains(own_run):
    """exact() has trainer_state and completion_ids without defaults: it trained, and saw TRL's
    global_step: the updates done before the step (0 at step 1), the step's own at its evaluation."""
    metrics = lines(own_run)
    steps = [m for m in metrics if "reward/mean" in m]
    evals = [m for m in metrics if "eval/accuracy" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert [m["seen_global_step"] for m in steps] == [0.0, 1.0]
    assert [(m["step"], m["eval/logged/seen_global_step"]) for m in evals] == [(0, 0.0), (1, 1.0), (2, 2.0)]


def test_log_metric_and_log_extra_reach_metrics_completions_and_tensorboard(own_run):
    steps = [m for m in lines(own_run) if "reward/mean" in m]
    assert all(0.0 <= m["exact_share"] <= 1.0 for m in steps)
    scalars = tb_scalars(own_run / "tensorboard")
    assert [s for s, _ in scalars["exact_share"]] == [1, 2]
    assert [v for _, v in scalars["exact_share"]] == pytest.approx([m["exact_share"] for m in steps])
    rows = [json.loads(x) for x in (own_run / "completions.jsonl").read_text().splitlines()]
    assert rows and all(r["extra"]["completion_tokens"] >= 1 for r in rows)
    table = tb_texts(own_run / "tensorboard", "completions")
    assert "completion_tokens" in table[1]


def test_the_logged_prompt_is_the_text_the_model_saw(own_run):
    rows = [json.loads(x) for x in (own_run / "completions.jsonl").read_text().splitlines()]
    assert all(r["prompt"].startswith(SYSTEM + "\n\n") and r["prompt"].endswith("=") for r in rows)
    records = [json.loads(x) for x in (own_run / "allocation.jsonl").read_text().splitlines()]
    assert all(p["text"].startswith(SYSTEM) for r in records for p in r["prompts"])


# --------------------------------------------------------------------------- 4. the numbers a user reads
def test_the_pass_rate_beside_the_mean_reward(own_run):
    metrics = lines(own_run)
    held = last_eval(own_run)
    last = [m for m in metrics if "eval/accuracy" in m][-1]
    assert last["eval/pass_rate"] == held["sets"]["custom"]["metrics"]["pass@k"]["1"] == last["eval/custom/pass_rate"]
    assert last["eval/custom/reward/exact/mean"] == held["sets"]["custom"]["metrics"]["rewards"]["reward/exact/mean"]
    for m in (m for m in metrics if "reward/mean" in m):
        assert 0.0 <= m["reward/pass_rate"] <= 1.0
        assert m["reward/exact/unscored"] >= m["reward/unscored"] == 0  # boxed scored every one
        assert m["reward/boxed/unscored"] == 0
    summary = json.loads((own_run / "summary.json").read_text())
    assert summary["final_pass_rate"] == held["sets"]["custom"]["metrics"]["pass@k"]["1"]
    scalars = tb_scalars(own_run / "tensorboard")
    assert "eval/pass_rate" in scalars and "reward/pass_rate" in scalars


def test_one_time_elapsed_per_step(own_run):
    by_step: dict[int, set] = {}
    for m in lines(own_run):
        if "time/elapsed" in m:
            by_step.setdefault(m["step"], set()).add(m["time/elapsed"])
    assert all(len(v) == 1 for v in by_step.values()), by_step
    steps = [s for s, _ in tb_scalars(own_run / "tensorboard")["time/elapsed"]]
    assert steps == sorted(set(steps)) == [0, 1, 2]


@pytest.mark.slow
def test_report_takes_the_metric_and_a_target_in_its_range(own_run, vigor, tmp_path):
    code, out, err = vigor("report", str(own_run), "--target", "1.2", "--out", str(tmp_path / "r"))
    assert code == 0, err  # rewards weighted 1 and 0.5: a mean reward in [0, 1.5]
    for metric, target in (("eval/accuracy", "1.6"), ("eval/pass_rate", "1.2")):
        code, _, err = vigor("report", str(own_run), "--metric", metric, "--target", target, "--out", str(tmp_path / "x"))
        assert code == 2 and f"--target {target}: {metric} of these runs lies in [0, " in err
    assert "final eval/accuracy" in out and "final pass rate" in out and "--metric eval/pass_rate" in out
    code, out, err = vigor("report", str(own_run), "--metric", "eval/pass_rate", "--out", str(tmp_path / "p"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["metric"] == "eval/pass_rate" and report["runs"][0]["final_accuracy"] == lines(own_run)[-1]["eval/pass_rate"]
    # the plots are named after the metric they plot
    assert sorted(p.name for p in (tmp_path / "p").glob("*.png")) == ["pass_rate_vs_rollouts.png",
                                                                      "pass_rate_vs_tokens.png"]


def test_inspect_allocation_shows_raw_rewards(own_run, vigor):
    """Rewards weighted 1 and 0.5 reach 1.5: the allocator is told reward / 1.5; the cells show the
    rewards themselves, and the legend says how the allocator read them."""
    from vigor_cli.report.allocation import parse_step

    record = json.loads((own_run / "allocation.jsonl").read_text().splitlines()[0])
    assert record["reward_range"] == [0.0, 1.5]
    raw = {round(r, 3) for p in parse_step(record, "x").prompts for rd in p.rounds for r in rd.rewards}
    assert raw <= {0.0, 0.5, 1.0, 1.5} and raw & {0.5, 1.5}
    code, out, err = vigor("inspect-allocation", str(own_run), "--step", "1")
    assert code == 0, err
    assert "raw rewards" in out and "allocation.reward_range [0, 1.5]" in out


# --------------------------------------------------------------------------- 5. an export that carries the run
def test_the_exported_tokenizer_renders_messages_as_the_run_did(own_run, vigor, tmp_path):
    from transformers import AutoTokenizer

    code, _, err = vigor("export", str(own_run), "--out", str(tmp_path / "m"))
    assert code == 0, err
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    row = json.loads((own_run / "completions.jsonl").read_text().splitlines()[0])
    question = row["prompt"].removeprefix(SYSTEM + "\n\n")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == row["prompt"]
    record = json.loads((tmp_path / "m" / "vigor_run.json").read_text())
    assert record["task"]["system_prompt"] == SYSTEM and record["rendering"] == "join"
    assert record["sampling"]["max_new_tokens"] == 8 and record["evaluation"]["last"]["step"] == 2
    card = (tmp_path / "m" / "README.md").read_text()
    assert SYSTEM in card and "apply_chat_template" in card and "at most 8 new tokens" in card


@pytest.mark.slow
def test_an_adapter_names_a_local_base_relative_never_absolute(tmp_path, vigor):
    """A LoRA run on a local base (a copy of the tiny model): the adapter config holds its path
    relative to the adapter folder; no file of the export holds an absolute path of this machine;
    `vigor eval` finds the base from there, and names --base when it is not there."""
    import shutil

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.run.directory import RunDir
    from vigor_cli.settings import build_config
    from vigor_cli.model.tiny import TINY_DIR

    base = shutil.copytree(TINY_DIR, tmp_path / "models" / "my-base")
    cfg = build_config(sets=tiny_sets(tmp_path, "run", f"model.name_or_path={base}", "model.lora.enabled=true"))
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_config(cfg)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules=["q_proj"]))
    ckpt = run.begin_checkpoint(1)
    model.save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(base).save_pretrained(ckpt)
    run.commit_checkpoint(ckpt, 1, keep=2)
    run.append("metrics.jsonl", {"step": 1, "reward/mean": 0.5, "rollouts/cumulative": 16})
    out = tmp_path / "exports" / "adapter"
    code, _, err = vigor("export", str(run.path), "--out", str(out))
    assert code == 0, err
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == os.path.join("..", "..", "models", "my-base")
    for f in out.iterdir():
        if f.suffix in (".json", ".md", ".jinja"):
            assert str(tmp_path) not in f.read_text(), f.name
    code, out_text, err = vigor("eval", str(out), "--limit", "2", "--benchmarks", "tiny-math")
    assert code == 0, err
    shutil.move(base, tmp_path / "moved")
    code, _, err = vigor("eval", str(out), "--limit", "2", "--benchmarks", "tiny-math")
    assert code == 2 and "--base PATH" in err and len(err.strip().splitlines()) == 1
    code, _, err = vigor("eval", str(out), "--base", str(tmp_path / "moved"), "--limit", "2", "--benchmarks", "tiny-math")
    assert code == 0, err


# --------------------------------------------------------------------------- 2. probe and every command take the task flags
def test_every_command_that_builds_a_task_takes_the_same_task_flags(vigor):
    """One table (commands/flags.py TASK_FLAGS) for train, probe, eval and the TRL entry point."""
    from vigor_cli.commands.flags import TASK_FLAGS
    from vigor_cli.integrations.trl import _parser

    trl_options = {a.option_strings[0] for a in _parser()._actions if a.option_strings}
    for command in ("train", "probe", "eval"):
        code, out, _ = vigor(command, "--help")
        assert code == 0
        for flag in TASK_FLAGS:
            assert f"{flag.name} " in out, (command, flag.name)
    assert {f.name for f in TASK_FLAGS} <= trl_options


def test_probe_refuses_a_bad_task_flag_as_train_does(vigor, task_files):
    code, _, err = vigor("probe", "--data", str(task_files / "train.jsonl"), "--prompts", "4")
    assert code == 2 and "task 'custom' needs at least one reward" in err and len(err.strip().splitlines()) == 1
    code, _, err = vigor("probe", "--data", str(task_files / "train.jsonl"), "--reward", "math", "--reward-weights", "1,x")
    assert code == 2 and "--reward-weights 1,x: expected numbers" in err


@pytest.mark.slow
def test_probe_samples_the_users_task(vigor, task_files):
    code, out, err = vigor("probe", "--data", str(task_files / "train.jsonl"), "--prompt-field", "question",
                           "--system-prompt", SYSTEM, "--reward", f"{task_files / 'rewards.py'}:exact",
                           "--reward", f"{task_files / 'rewards.py'}:boxed", "--reward-weights", "1,0.5",
                           "--pass-threshold", "1.5", "--prompts", "8", "--samples", "2", "--json",
                           "--set", "sampling.max_new_tokens=8")
    assert code == 0, err
    result = json.loads(out)
    assert result["task"] == "custom" and result["pass_threshold"] == 1.5 and result["prompts"] == 8
    assert all(0 <= c <= 2 for c in result["pass_counts"])


# --------------------------------------------------------------------------- 6. readouts that tell the truth
def test_the_dry_run_shows_the_rendered_prompt_in_full(vigor, tmp_path, task_files):
    long = "Count the letters of every word in this sentence and give the total " * 3 + "="
    data = tmp_path / "d.csv"
    data.write_text('prompt,gold\n"[{""role"": ""user"", ""content"": ""1+1=""}]",2\n' + f'"{long}",3\n')
    code, out, err = vigor("train", "--data", str(data), "--reward", f"{task_files / 'rewards.py'}:boxed",
                           "--system-prompt", SYSTEM, "--dry-run")
    assert code == 0, err
    assert f"{data} row 1: the model sees (as the model's tokenizer renders it" in out
    assert '    | [{"role": "user", "content": "1+1="}]' in out  # the CSV cell is text, shown as it is
    assert "is text holding JSON chat messages" in out  # and said
    shown = "".join(line[6:] for line in out.splitlines() if line.startswith(("    | ", "    + ")))
    assert long in shown  # wrapped, never cut
    assert max(len(line) for line in out.splitlines() if line.startswith(("    | ", "    + "))) <= 106


def test_a_datasetdict_test_split_is_evaluated(tmp_path, task_files):
    from datasets import Dataset, DatasetDict

    from vigor_cli.config import TaskConfig
    from vigor_cli.tasks import get_task

    rows = [json.loads(x) for x in (task_files / "train.jsonl").read_text().splitlines()]
    DatasetDict({"train": Dataset.from_list(rows[:10]), "validation": Dataset.from_list(rows[10:13])}).save_to_disk(
        str(tmp_path / "dd"))
    task = get_task(TaskConfig(name="custom", data=str(tmp_path / "dd"), fields={"prompt": "question"},
                               rewards=[f"{task_files / 'rewards.py'}:boxed"]))
    try:
        assert len(task.train_examples()) == 10
        held = task.eval_examples()
        assert len(held) == 3 and task.tables["eval"].split == "validation"
        assert [e.meta["columns"]["gold"] for e in held] == [r["gold"] for r in rows[10:13]]
    finally:
        task.close()
    DatasetDict({"train": Dataset.from_list(rows[:10]), "validation": Dataset.from_list(rows[10:13]),
                 "test": Dataset.from_list(rows[13:15])}).save_to_disk(str(tmp_path / "dd3"))
    task = get_task(TaskConfig(name="custom", data=str(tmp_path / "dd3"), fields={"prompt": "question"},
                               rewards=[f"{task_files / 'rewards.py'}:boxed"]))
    try:  # test before validation
        assert [e.meta["columns"]["gold"] for e in task.eval_examples()] == [r["gold"] for r in rows[13:15]]
        assert task.tables["eval"].split == "test" and len(task.train_examples()) == 10
    finally:
        task.close()
    Dataset.from_list(rows[:70]).save_to_disk(str(tmp_path / "one"))  # one split: the first 64 rows, as before
    task = get_task(TaskConfig(name="custom", data=str(tmp_path / "one"), fields={"prompt": "question"},
                               rewards=[f"{task_files / 'rewards.py'}:boxed"]))
    try:
        assert len(task.eval_examples()) == 64 and "eval" not in task.tables
    finally:
        task.close()


def test_output_to_a_pipe_is_not_cut_at_80_columns(monkeypatch):
    import io

    from vigor_cli.console import PIPE_WIDTH, _Console

    monkeypatch.delenv("COLUMNS", raising=False)
    buffer = io.StringIO()
    console = _Console(file=buffer)
    assert not console.is_terminal and console.width == PIPE_WIDTH
    line = "tensorboard: event files in " + "/very/long/path" * 10 + " (tensorboard --logdir runs)"
    console.print(line, highlight=False)
    assert buffer.getvalue() == line + "\n"
    monkeypatch.setenv("COLUMNS", "100")
    assert _Console(file=io.StringIO()).width == 100  # a width asked for is kept


@pytest.mark.slow
def test_no_switch_shows_a_value_type(vigor):
    from vigor_cli.cli import app

    names = [c.name for c in app.registered_commands] + ["verify math", "verify code"]
    for name in ["", *names]:
        code, out, _ = vigor(*name.split(), "--help")
        assert code == 0 and "<bool>" not in out, name


def test_eval_says_when_it_evaluates_the_default_benchmark(vigor):
    """A MODEL without --benchmarks or a set of one's own gets tiny-math, said on stderr."""
    code, out, err = vigor("eval", "tiny", "--limit", "1")
    assert code == 0 and "tiny-math" in out and "note: evaluated tiny-math, the default benchmark" in err


def test_rescore_grades_your_own_tasks_completions_again(own_run, vigor, tmp_path, task_files):
    code, _, err = vigor("eval", "--run", str(own_run), "--output", str(tmp_path / "r.json"))
    assert code == 0, err
    results = json.loads((tmp_path / "r.json").read_text())
    for s in results["sets"]["custom"]["samples"]:
        s["completion"] = "\\boxed{0}"
    (tmp_path / "r.json").write_text(json.dumps(results))
    code, out, err = vigor("eval", "--rescore", str(tmp_path / "r.json"))
    assert code != 0 and "completion_ids" in err  # exact() needs the token ids, which a results file has not
    results["task"]["rewards"] = [f"{task_files / 'rewards.py'}:boxed"]
    results["task"]["reward_weights"] = []
    (tmp_path / "r.json").write_text(json.dumps(results))
    code, out, err = vigor("eval", "--rescore", str(tmp_path / "r.json"))
    assert code == 0, err
    again = json.loads((tmp_path / "r.rescored.json").read_text())["sets"]["custom"]
    assert again["accuracy"] == 1.0 and again["metrics"]["pass@k"]["1"] == 1.0


def _long_rows(n: int) -> str:
    """Sums asked at length: over task.max_prompt_tokens=48 with the bundled tokenizer."""
    return "".join(json.dumps({"question": [{"role": "user", "content": "please add " * 40 + f"{i}+{i}="}],
                               "gold": str(2 * i)}) + "\n" for i in range(n))


def test_eval_leaves_out_the_prompts_a_run_would_leave_out(task_files, vigor, tmp_path):
    """Held-out prompts longer than task.max_prompt_tokens are left out as training leaves them
    out, in one warning line; a set none of whose prompts fit is refused in one line."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text((task_files / "eval.jsonl").read_text() + _long_rows(2))
    flags = ["--prompt-field", "question", "--reward", f"{task_files / 'rewards.py'}:boxed", "--max-new-tokens", "4",
             "--set", "task.max_prompt_tokens=48"]
    code, _, err = vigor("eval", "tiny", "--data", str(mixed), *flags, "--output", str(tmp_path / "m.json"))
    assert code == 0, err
    assert "left out 2 of 14 held-out prompts of set custom: 2 longer than task.max_prompt_tokens=48" in err
    assert json.loads((tmp_path / "m.json").read_text())["sets"]["custom"]["examples"] == 12
    only_long = tmp_path / "long.jsonl"
    only_long.write_text(_long_rows(3))
    code, _, err = vigor("eval", "tiny", "--data", str(only_long), *flags, "--output", str(tmp_path / "l.json"))
    assert code == 2 and "set custom: none of its 3 prompts fit task.max_prompt_tokens=48" in err
    assert not (tmp_path / "l.json").exists()


@pytest.mark.slow
def test_eval_run_scores_the_prompts_the_run_scored(trained, task_files, vigor, tmp_path):
    """A run whose held-out file holds prompts it could not take: `vigor eval --run` leaves
    out the same ones and reproduces the run's last evaluation."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(_long_rows(2) + (task_files / "eval.jsonl").read_text())
    run = trained.get(own_sets(task_files, f"task.eval_data={mixed}", "train.eval_limit=10"))
    code, _, err = vigor("eval", "--run", str(run), "--output", str(tmp_path / "r.json"))
    assert code == 0, err
    assert "left out 2 of 10 held-out prompts of set custom" in err
    ours, theirs = json.loads((tmp_path / "r.json").read_text()), last_eval(run)
    assert ours["sets"] == theirs["sets"] and theirs["sets"]["custom"]["examples"] == 8

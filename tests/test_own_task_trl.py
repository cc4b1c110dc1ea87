"""Your own task, continued: the same task through the TRL path, and a new user's audit of the whole journey."""

from __future__ import annotations
import json
from pathlib import Path
import pytest
from vigor_cli.user import rewards
from vigor_cli.config import EPISODE_KEYS, EVERY_TASK_KEYS, ConfigError, TaskConfig
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.tasks import TASK_READS, get_task, task_reads
from vigor_cli.tasks.custom import CustomTask
from vigor_cli.tasks.loading import read_table
from vigor_cli.model.tiny import TINY_DIR

from test_own_task import LENGTH_REWARD, custom, reward_file  # noqa: F401  (helpers and fixtures shared with test_own_task.py)


# --------------------------------------------------------------------------- the TRL path
def test_the_own_task_flags_reach_the_trl_path(tmp_path, reward_file, capfd):
    """python -m vigor_cli.integrations.trl takes the same flags: a reward needing a column the
    data lacks is the same one line, exit 2, before the model loads (its main, in this process)."""
    pytest.importorskip("trl")
    from vigor_cli.integrations import trl

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "ab="}) + "\n")
    capfd.readouterr()
    code = trl.main(["--cpu", "--output-dir", str(tmp_path / "out"), "--data", str(data),
                     "--reward", f"{reward_file}:length"])
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err
    # (transformers may warn about a GRPOConfig key first: TRL's, not this error's)
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"reward {reward_file}:length needs column 'word'" in line, line
    assert "Loading weights" not in err  # refused before the model loads
    assert not (tmp_path / "out").exists()


TWO_REWARDS = """
def short(prompts, completions, **columns):
    return [1.0 if len(c) < 6 else 0.0 for c in completions]


def never(prompts, completions, **columns):
    return [None] * len(completions)
"""


@pytest.mark.slow
def test_several_rewards_reach_trl_as_several_functions_with_their_weights(tmp_path):
    """On the TRL path each --reward is its own TRL reward function (TRL logs each one's mean)
    with --reward-weights as TRL's reward_weights; vigor's metrics.jsonl has each one's mean."""
    pytest.importorskip("trl")
    from test_trainer import tiny_sets
    from vigor_cli.integrations.trl import build_trainer

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                            for a in range(4) for b in range(4)))
    rewards = tmp_path / "two.py"
    rewards.write_text(TWO_REWARDS)
    cfg = build_config(sets=tiny_sets(tmp_path, "trl", "task.name=custom", f"task.data={data}", "task.eval_sets=[]",
                                      f"task.rewards=[tiny-math, {rewards}:short, {rewards}:never]",
                                      "task.reward_weights=[1, 0.5, 2]", "allocation.strategy=grpo", "train.steps=1"))
    trainer, _, task = build_trainer(cfg, tmp_path / "out", use_cpu=True)
    try:
        assert trainer.reward_func_names == ["tiny-math", "short", "never"]
        assert trainer.reward_weights.tolist() == [1.0, 0.5, 2.0]
        trainer.train()
    finally:
        task.close()
    [line] = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
              if "reward/mean" in x]
    assert {"reward/tiny-math/mean", "reward/short/mean"} <= set(line) and "reward/never/mean" not in line
    batch = trainer.last_batch
    for s in batch.generated:  # TRL's weighted sum over the functions that scored: vigor's combine
        assert s.reward == pytest.approx(s.components["tiny-math"] + 0.5 * s.components["short"])


# --------------------------------------------------------------------------- a new user's audit
FORMAT_AND_ANSWER = """
import re


def boxed(prompts, completions, **kwargs):
    return [float("\\\\boxed{" in c) for c in completions]


def always(prompts, completions, **kwargs):
    return [1.0] * len(completions)
"""


def _sum_data(tmp_path: Path) -> Path:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                            for a in range(6) for b in range(6)))
    return data


def test_weighted_rewards_over_one_train_by_default(tmp_path):
    """Two 0/1 rewards with --reward-weights 1,0.5 (the README's shape) sum to 1.5: the default
    allocation.reward_range (auto) is the weights' range, so the step runs and the allocator is
    told reward / 1.5 (it stopped at step 1 with 'outside allocation.reward_range [0, 1]')."""
    from test_trainer import quiet, tiny_sets
    from vigor_cli.allocation.base import reward_range
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import Trainer

    assert reward_range("auto") == (0.0, 1.0) and reward_range("auto", [1.0, 0.5]) == (0.0, 1.5)
    assert reward_range("auto", [1.0, -0.5]) == (-0.5, 1.0) and reward_range([0, 3], [1.0, 1.0]) == (0.0, 3.0)
    funcs = tmp_path / "two.py"
    funcs.write_text(FORMAT_AND_ANSWER)
    cfg = build_config(sets=tiny_sets(tmp_path, "weighted", "task.name=custom", f"task.data={_sum_data(tmp_path)}",
                                      "task.eval_sets=[]", f"task.rewards=[{funcs}:always, {funcs}:boxed]",
                                      "task.reward_weights=[1, 0.5]", "allocation.strategy=grpo"))
    assert cfg.allocation.reward_range == "auto"
    tr = Trainer(cfg, RunDir(tmp_path / "weighted"), None, quiet())
    try:
        batch = tr.rollout_phase(1)
    finally:
        tr.close()
    rewards = {s.reward for s in batch.generated}
    assert 1.5 in rewards and rewards <= {1.0, 1.5}
    told = {round(r, 4) for p in batch.record["prompts"] for rd in p["rounds"] for r in rd["rewards"]}
    assert told <= {0.6667, 1.0} and 1.0 in told  # the record rounds what it was told


def test_the_step_line_is_one_line_in_a_log_file(tmp_path):
    """Piped to a file (rich's 80 columns), a step line with each reward's mean stays one
    line: it was wrapped mid-field ('loss' at the end of one line, its value on the next)."""
    import io

    from rich.console import Console

    from vigor_cli.rollout.weight_check import WeightCheck
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.log import StepLog, TrainLog

    (tmp_path / "run").mkdir()
    buffer = io.StringIO()
    log = TrainLog(build_config(), RunDir(tmp_path / "run"), Console(file=buffer, width=80), {})
    metrics = {"step": 1, "reward/mean": 0.5, "reward/parity/mean": 0.25, "reward/boxed/mean": 1.0,
               "groups/zero_var_frac": 0.5, "rollouts/step": 512, "rollouts/cumulative": 512,
               "completions/mean_length": 4.8, "losses/loss": 0.001, "losses/clipfrac_low": 0.0,
               "losses/clipfrac_high": 0.0, "time/generate": 0.4, "time/reward": 0.0, "time/update": 0.6}
    log.step(StepLog(metrics=metrics), WeightCheck("unchecked", 0, 0.0, 0.0, 0.0, 0.0))
    [line] = buffer.getvalue().splitlines()
    assert line.startswith("step    1  reward 0.500 (parity 0.250, boxed 1.000)") and line.endswith("upd 0.6s")


TRL_STYLE = '''
import re


def accuracy(completions, solution, **kwargs):
    """TRL's own trl.rewards shape: no prompts parameter, a column, **kwargs."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [float(re.search(r"\\\\boxed\\{(\\d+)\\}", t) is not None and t.count(s) > 0) for t, s in zip(texts, solution)]


def letters(completions, **kwargs):
    return [min(1.0, len(c) / 10) for c in completions]


def positional(p, c, **kwargs):
    return [0.0] * len(c)
'''


def test_trl_reward_functions_without_a_prompts_parameter(tmp_path):
    """TRL calls a reward function by keyword (prompts=, completions=, completion_ids=, the
    columns), so its own rewards take (completions, solution, **kwargs) or (completions,
    **kwargs). vigor refused them ('a reward function takes (prompts, completions, ...)') and
    called functions positionally, which would bind the prompts to `completions`."""
    (tmp_path / "trl_style.py").write_text(TRL_STYLE)
    spec = tmp_path / "trl_style.py"
    accuracy = rewards.load_reward(f"{spec}:accuracy")
    assert (accuracy.needs, accuracy.all_columns) == (("solution",), True)
    assert accuracy(prompts=["1+1="], completions=["\\boxed{2}", "\\boxed{3}"], solution=["2", "2"],
                    completion_ids=[[1], [2]], trainer_state=None) == [1.0, 0.0]
    assert rewards.load_reward(f"{spec}:letters")(["p"], ["abcde"]) == [0.5]
    with pytest.raises(UserError, match=r"takes \(p, c, \*\*kwargs\); TRL and vigor pass prompts= and completions= by name"):
        rewards.load_reward(f"{spec}:positional")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "solution": str(a + 1)}) + "\n" for a in range(3)))
    task = custom(data, f"{spec}:accuracy", f"{spec}:letters")
    try:
        [ex] = task.train_examples()[:1]
        [score] = task.score([ex], ["\\boxed{1}"])
    finally:
        task.close()
    assert score.components == {"accuracy": 1.0, "letters": 0.9} and score.reward == pytest.approx(1.9)


def test_the_readouts_of_your_own_rewards_say_reward_not_accuracy(tmp_path):
    """Two rewards weighted 1 and 0.5 average 1.42 on the held-out set: the eval line and the
    end-of-run line said 'accuracy 1.420' and '(+92.0 points)'. For your own rewards they say
    'reward' and add pass@1 (a sample passes at reward >= 1); the bundled tasks keep accuracy."""
    import io

    from rich.console import Console

    from vigor_cli.evaluate.evaluation import EvalResult, HeldOut, SampleResult
    from vigor_cli.report.train_summary import print_summary
    from vigor_cli.run.directory import RunDir

    def held(step: int, rewards: list[float], name: str = "custom") -> HeldOut:
        samples = [SampleResult(f"u{i}", 0, "\\boxed{1}", r, "", False, 5) for i, r in enumerate(rewards)]
        mean = sum(rewards) / len(rewards)
        return HeldOut(step, {name: EvalResult(name, 1, mean, {s.uid: s.reward for s in samples}, samples)})

    start, end = held(0, [0.5, 0.5, 0.5, 0.5]), held(40, [1.5, 1.5, 1.0, 0.5])
    assert end.describe() == "[bold]eval[/] step 40: reward 1.125, pass@1 0.750 (custom 1.125)"
    assert held(3, [1.0, 0.0], "tiny-math").describe() == "[bold]eval[/] step 3: accuracy 0.500 (tiny-math 0.500)"
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_config(build_config(sets=["task.name=custom", "task.data=d.jsonl", "task.rewards=[math]",
                                        "task.eval_sets=[]"]))
    for h in (start, end):
        run.write_eval(h.step, h.to_json())
    out = io.StringIO()
    print_summary({"run_dir": str(run.path), "start_accuracy": 0.5, "final_accuracy": 1.125, "wall_time": 44,
                   "rollouts": 20480}, Console(file=out, width=80))
    first = out.getvalue().splitlines()[0]
    assert first == ("held-out reward 0.500 -> 1.125 (+0.625); pass@1 (reward >= 1) 0.000 -> 0.750  "
                     "in 44s, 20480 rollouts")


@pytest.mark.slow
def test_a_run_with_relative_paths_resumes_from_another_folder(vigor, tmp_path, monkeypatch):
    """--data and --reward given relative to the folder a run starts in: a resume from another
    folder reads them from the run's launch folder (launch-dir), says so in one line, and
    gives the current folder back; a run without launch-dir stays where it is and names the file."""
    start, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    start.mkdir(), elsewhere.mkdir()
    (start / "rewards.py").write_text(LENGTH_REWARD)
    (start / "data.jsonl").write_text("".join(json.dumps({"prompt": f"say {w}", "word": w}) + "\n"
                                              for w in ["cat", "dog", "owl", "bee", "ant", "elk", "yak", "emu"]))
    monkeypatch.chdir(start)
    code, out, err = vigor("train", "--data", "data.jsonl", "--reward", "rewards.py:length", "--steps", "1",
                           "--prompts-per-step", "2", "--strategy", "grpo", "--set", "allocation.group_size=2",
                           "--max-new-tokens", "4", "--eval-every", "0", "--save-every", "1",
                           "--output-dir", str(tmp_path / "runs"))
    assert code == 0, err
    run = next((tmp_path / "runs").iterdir())
    assert (run / "launch-dir").read_text().strip() == str(start)
    monkeypatch.chdir(elsewhere)
    code, out, err = vigor("train", "--resume", str(run), "--steps", "2")
    assert code == 0, err
    assert f"resuming in {start}, the folder the run was started in" in " ".join(out.split())
    assert Path.cwd() == elsewhere
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 2
    # a run from before launch-dir existed: its relative files are looked up here, and the error names one
    (run / "launch-dir").unlink()
    code, out, err = vigor("train", "--resume", str(run), "--steps", "3")
    # (the run's record sees its relative files gone from here first; without one, the import would)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "data.jsonl (task.data) is gone" in err or "rewards.py not found" in err
    assert "resuming in" not in out + err

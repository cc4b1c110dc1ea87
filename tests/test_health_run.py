"""Health checks driven for real on the tiny model (issue 27): each condition produces its one
line on stderr and its health/* keys in metrics.jsonl; --strict stops after a checkpoint that
resumes; --dry-run says what it can before generating; the TRL path logs the same checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_trainer import quiet, tiny_sets
from vigor_cli.train import health
from vigor_cli.errors import UserError
from vigor_cli.settings import build_config
from vigor_cli.model.tiny import TINY_DIR
from vigor_cli.train.trainer import train


@pytest.fixture
def run(capsys):
    """A short real training: its step metrics lines and what it printed on stderr."""

    def go(tmp_path: Path, name: str, *extra: str, steps: int = 3) -> tuple[list[dict], str]:
        capsys.readouterr()
        summary = train(build_config(sets=tiny_sets(tmp_path, name, f"train.steps={steps}", *extra)), out=quiet())
        lines = [json.loads(x) for x in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        return [m for m in lines if "reward/mean" in m], capsys.readouterr().err

    return go


def warnings(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("warning: ")]


@pytest.mark.slow
def test_a_tiny_length_limit_speaks_once_naming_the_key(tmp_path, run):
    steps, err = run(tmp_path, "short", "sampling.max_new_tokens=1", "health.truncated.steps=2",
                     "health.empty.steps=2", steps=4)
    lines = warnings(err)
    truncated = [x for x in lines if "hit sampling.max_new_tokens=1" in x]
    assert truncated == ["warning: steps 1\u20132: 100 % of completions hit sampling.max_new_tokens=1 (raise it, "
                         "or set grpo.mask_truncated=true so cut completions carry no gradient)"]
    assert len([x for x in lines if "empty or stop after one token" in x]) == 1
    assert [m["health/truncated"] for m in steps] == [1.0] * 4
    assert [m["health/truncated/alert"] for m in steps] == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.slow
def test_a_near_zero_temperature_says_no_gradient_and_names_the_temperature(tmp_path, run):
    steps, err = run(tmp_path, "cold", "sampling.temperature=0.01", "health.zero_variance.steps=2",
                     "health.identical.steps=2", steps=3)
    lines = warnings(err)
    assert any(x.startswith("warning: steps 1\u20132: every group has zero reward variance, 100 % of rollouts "
                            "carry no gradient: at sampling.temperature=0.01; raise the temperature")
               for x in lines), lines
    assert any(x.startswith("warning: steps 1–2: every prompt's rollouts are all the same text at "
                            "sampling.temperature=0.01") for x in lines), lines
    assert all(m["health/zero_variance"] == 1.0 and m["health/identical"] == 1.0 for m in steps)


REWARD = "def same(prompts, completions, **columns):\n    return [0.5] * len(completions)\n"


@pytest.mark.slow
def test_a_constant_reward_is_named(tmp_path, run):
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                            for a in range(4) for b in range(4)))
    (tmp_path / "reward.py").write_text(REWARD)
    steps, err = run(tmp_path, "const", "task.name=custom", f"task.data={data}",
                     f"task.rewards=[{tmp_path / 'reward.py'}:same]", "health.constant_reward.steps=2",
                     "task.eval_sets=[]", steps=2)
    assert [x for x in warnings(err) if "every rollout got reward" in x] == [
        "warning: steps 1\u20132: every rollout got reward 0.5: the reward never varies; check the reward "
        "function (does the completion ever meet its format?) and task.name/--reward"]
    assert [m["health/constant_reward"] for m in steps] == [1.0, 1.0]


@pytest.fixture
def chat_model(tmp_path) -> Path:
    """The tiny model with a chat template of its own (the shipped one is a plain-text template
    vigor's own prompts never use)."""
    path = tmp_path / "tiny-chat"
    shutil.copytree(TINY_DIR, path)
    # chat_template.jinja is where transformers reads a template first (the shipped one is plain text)
    (path / "chat_template.jinja").write_text("{% for m in messages %}<bos>{{ m['content'] }}{% endfor %}"
                                              "{% if add_generation_prompt %}={% endif %}")
    return path


@pytest.mark.slow
def test_plain_string_prompts_to_a_model_with_a_chat_template_are_named(tmp_path, run, chat_model):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                            for a in range(4) for b in range(4)))
    steps, err = run(tmp_path, "plain", f"model.name_or_path={chat_model}", "task.name=custom",
                     f"task.data={data}", "task.rewards=[tiny-math]", "task.eval_sets=[]", steps=1)
    assert [x for x in warnings(err) if "chat template" in x] == [
        "warning: step 1: 100 % of prompts were not rendered with the tokenizer's chat template (plain-string "
        "prompts are passed as they are): give the prompts as message lists (`prompt: [{role: user, "
        "content: ...}]`) or use a base model"]
    assert steps[0]["health/chat_template"] == 1.0 and steps[0]["health/chat_template/alert"] == 1.0
    # message-list prompts go through the template: nothing to say
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"{a}+{b}"}], "answer": str(a + b)})
                            + "\n" for a in range(4) for b in range(4)))
    steps, err = run(tmp_path, "chat", f"model.name_or_path={chat_model}", "task.name=custom",
                     f"task.data={data}", "task.rewards=[tiny-math]", "task.eval_sets=[]", steps=1)
    assert not [x for x in warnings(err) if "chat template" in x]
    assert steps[0]["health/chat_template"] == 0.0


@pytest.mark.slow
def test_completions_cut_by_the_context_are_named(tmp_path, run):
    # the tiny model's context is 256 positions: prompts of 4-6 tokens plus 254 new ones overflow it
    steps, err = run(tmp_path, "long", "sampling.max_new_tokens=254", "grpo.micro_batch_tokens=4096",
                     "task.max_prompt_tokens=32", steps=1)
    assert any("exceed the context" in x and "sampling.max_new_tokens=254" in x for x in warnings(err))
    assert any(x.startswith("warning: 16 of 16") or "exceed the model's context (256 tokens)" in x
               for x in warnings(err))  # also said before the first step
    assert steps[0]["health/prompt_cut"] == 1.0


@pytest.mark.slow
def test_a_healthy_short_run_prints_nothing(tmp_path, run):
    steps, err = run(tmp_path, "fine", "sampling.max_new_tokens=16", "sampling.temperature=1.0", steps=3)
    assert warnings(err) == []
    assert all(m[f"health/{name}/alert"] == 0.0 for m in steps
               for name in ("truncated", "zero_variance", "identical", "constant_reward", "empty",
                            "prompt_cut", "chat_template", "kl_jump", "clip_jump"))


@pytest.mark.slow
def test_strict_stops_with_exit_2_after_a_checkpoint_that_resumes(tmp_path, vigor):
    out = tmp_path / "runs"
    code, _, err = vigor("train", "--strict", "--steps", "4", "--output-dir", str(out), "--run-name", "strict",
                         "--max-new-tokens", "1", "--set", "train.prompts_per_step=4",
                         "--set", "allocation.rollouts_per_prompt=4", "--set", "train.eval_limit=8",
                         "--set", "health.truncated.steps=2", "--set", "health.empty.steps=0",
                         "--set", "health.zero_variance.steps=0", "--set", "health.identical.steps=0",
                         "--set", "health.constant_reward.steps=0")
    assert code == 2, err
    [line] = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert line == err.strip().splitlines()[-1]  # the last line said
    assert line.startswith("error: steps 1\u20132: 100 % of completions hit sampling.max_new_tokens=1")
    assert "health.strict: stopped after step 2; checkpoint saved; resume with: vigor train --resume" in line
    run_dir = out / "strict"
    assert (run_dir / "checkpoints" / "step-2" / "COMPLETE").exists()
    assert not (run_dir / "summary.json").exists()
    code, _, err = vigor("train", "--resume", str(run_dir))
    assert code == 0, err  # the condition already spoke: the resumed run goes on to step 4
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if a model starts loading: --dry-run reads the tokenizer, not the weights."""
    from transformers import AutoModelForCausalLM

    def refuse(*a, **k):
        raise AssertionError("--dry-run loaded a model")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


@pytest.mark.slow
def test_dry_run_says_what_it_can_before_generating(tmp_path, vigor, no_model_load):
    code, out, err = vigor("train", "--dry-run", "--max-new-tokens", "1")
    assert code == 0, err
    assert ("warning: sampling.max_new_tokens=1 is below the 95th percentile of the reference answers' "
            "length (2 tokens): most long answers cannot be written; raise it") in err


def test_dry_run_plans_a_hub_task_offline_with_a_note(tmp_path, vigor, no_model_load, monkeypatch):
    """`--dry-run` plans a hub task (README: from config.json alone) on a machine that cannot
    reach the hub: the checks that need the training prompts are skipped with one line naming
    why. They used to stop it, exit 2 ('cannot load MATH training problems from the hub').
    The hub is unreachable for real: its endpoint is a closed local port."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    code, out, err = vigor("train", "--dry-run", "--task", "math", "--output-dir", str(tmp_path))
    assert code == 0, err
    [line] = err.strip().splitlines()
    assert line.startswith("warning: the checks before the first step read the training data, which is not "
                           "here: cannot load MATH training problems from the hub"), line
    assert "memory plan" in out and not any(tmp_path.iterdir())
    bad = tmp_path / "bad.jsonl"  # a local file is read and checked as the run would
    bad.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": \n')
    code, _, err = vigor("train", "--dry-run", "--task", "math", "--set", f"task.train_path={bad}")
    assert code == 2 and f"{bad}:2: not valid JSON" in err


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.slow
def test_the_trl_path_logs_the_same_checks(tmp_path, strict):
    """The TRL path's checks and metrics keys are vigor train's; with health.strict a check that
    held stops training with the same one line (every rank stops together: the flag is gathered)."""
    from vigor_cli.integrations.trl import build_trainer

    cfg = build_config(sets=tiny_sets(tmp_path, "trl", "sampling.max_new_tokens=1", "allocation.strategy=grpo",
                                      "train.steps=1", "health.truncated.steps=1", f"health.strict={str(strict).lower()}"))
    trainer, _, task = build_trainer(cfg, tmp_path / "trl", use_cpu=True)
    try:
        if strict:
            with pytest.raises(health.HealthError, match=r"truncated.*\(health.strict: stopped after step 1; "
                               r"checkpoint saved; resume with: python -m vigor_cli.integrations.trl --resume "):
                trainer.train()
            assert (tmp_path / "trl" / "checkpoints" / "step-1" / "COMPLETE").is_file()  # as vigor train stops
            return
        trainer.train()
    finally:
        task.close()
    [line] = [json.loads(x) for x in (tmp_path / "trl" / "metrics.jsonl").read_text().splitlines()
              if "reward/mean" in x]
    assert line["health/truncated"] == 1.0 and line["health/truncated/alert"] == 1.0
    assert "health/zero_variance" in line and "health/chat_template" in line


@pytest.mark.slow
def test_the_default_run_is_healthy_and_says_nothing(tmp_path):
    """The bundled default (`vigor train`, 150 steps) learns; no health check speaks on it."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=root, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning:" not in proc.stderr, proc.stderr
    [run_dir] = tmp_path.iterdir()
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"reward/mean"' in x]
    assert len(steps) == 150 and not any(v for m in steps for k, v in m.items() if k.endswith("/alert"))


@pytest.mark.slow
def test_inspect_allocation_and_report_show_where_a_check_held(tmp_path, run, vigor):
    steps, _ = run(tmp_path, "cut", "sampling.max_new_tokens=1", "health.truncated.steps=2",
                   "train.eval_every=1", steps=3)
    run_dir = tmp_path / "cut"
    code, out, err = vigor("inspect-allocation", str(run_dir), "--step", "2")
    assert code == 0, err
    assert "health checks that held at step 2: truncated 1.00" in " ".join(out.split())
    code, out, err = vigor("inspect-allocation", str(run_dir), "--json")
    view = json.loads(out)
    assert view["overview"][0]["health"] == {} and view["overview"][1]["health"]["truncated"] == 1.0
    code, out, err = vigor("report", str(run_dir), "--out", str(tmp_path / "report"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert any("health check 'truncated' held at steps 2\u20133" in n for n in report["notes"]), report["notes"]
    from vigor_cli.report.curves import run_curve
    from vigor_cli.report.plots import plot_lines
    from vigor_cli.run.directory import RunDir

    [line] = plot_lines([run_curve(RunDir(run_dir))], "rollouts")
    rollouts = [m["rollouts/cumulative"] for m in steps if m["health/truncated/alert"]]
    assert line["health"] == rollouts and len(rollouts) == 2
    assert (tmp_path / "report" / "accuracy_vs_rollouts.png").stat().st_size > 0

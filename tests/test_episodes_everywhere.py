"""Episodes everywhere: `vigor eval` plays a run's episodes (and any model's on any
environment), the dry-run shows the prompts as the model receives them, tool calls are counted
and watched, inspect-allocation shows each episode's turns, the tiny model's chat template
speaks tools (TRL's own GRPOTrainer takes it with environment_factory), and an export renders
the run's tools. The environment is a class written here, not a built-in."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from vigor_cli.episodes.base import Episode, episode_metrics, tool_calls

CALCULATOR = textwrap.dedent('''
    class Calculator:
        def __init__(self):
            self.used = 0

        def reset(self, **row):
            self.used = 0
            return " Use the multiply tool."

        def multiply(self, a: int, b: int) -> int:
            """Multiply two integers.

            Args:
                a: The first factor.
                b: The second factor.
            """
            self.used += 1
            return a * b
''')
REWARD = textwrap.dedent('''
    import re

    def right(completions, environments, answer, **kwargs):
        out = []
        for c, env, a in zip(completions, environments, answer):
            text = c if isinstance(c, str) else " ".join(str(m.get("content", "")) for m in c)
            found = re.search(r"\\\\boxed\\{(-?\\d+)\\}", text)
            out.append(1.0 if found and int(found.group(1)) == int(a) else 0.0)
        return out
''')


@pytest.fixture
def calc(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "calc.py").write_text(CALCULATOR)
    (tmp_path / "reward.py").write_text(REWARD)
    rows = [{"prompt": f"{a}*{b}=", "answer": a * b} for a, b in [(3, 4), (7, 8), (12, 13), (6, 9), (5, 11), (14, 3),
                                                                  (9, 9), (4, 17)]]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"dir": tmp_path, "env": tmp_path / "calc.py", "reward": tmp_path / "reward.py",
            "data": tmp_path / "data.jsonl"}


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------- tool calls counted
def test_tool_calls_are_counted_per_tool_with_failed_calls_apart():
    ran = [{"role": "assistant", "content": "", "tool_calls": [_call("multiply", a=3, b=4)]},
           {"role": "tool", "name": "multiply", "content": "12"},
           {"role": "assistant", "content": "\\boxed{12}"}]
    counted = tool_calls(ran, "answered")
    assert (counted.ran, counted.failed, counted.written, counted.by_tool) == (1, 0, 1, {"multiply": 1})
    unknown = [{"role": "assistant", "content": "", "tool_calls": [_call("divide", a=1)]}]
    assert tool_calls(unknown, "bad_tool_call").failed == 1
    unreadable = [{"role": "assistant", "content": "<tool_call>{oops</tool_call>"}]
    assert (tool_calls(unreadable, "bad_tool_call").failed, tool_calls(unreadable, "bad_tool_call").written) == (1, 1)
    last = [{"role": "assistant", "content": "", "tool_calls": [_call("multiply", a=1, b=2)]}]
    assert (tool_calls(last, "max_turns").ran, tool_calls(last, "max_turns").failed) == (0, 0)
    assert tool_calls(last, "max_turns").written == 1  # written, never run: the last turn
    assert tool_calls([{"role": "assistant", "content": "42"}], "answered").written == 0


def test_step_metrics_count_tool_calls_and_turns_against_max_turns():
    def ep(messages, ended):
        e = Episode([1, 2], [0.0, 0.0], "", False, mask=[1, 1], messages=messages, ended=ended)
        return e

    eps = [ep([{"role": "assistant", "content": "", "tool_calls": [_call("multiply", a=3, b=4)]},
               {"role": "tool", "name": "multiply", "content": "12"}, {"role": "assistant", "content": "12"}],
              "answered"),
           ep([{"role": "assistant", "content": "<tool_call>{bad"}], "bad_tool_call"),
           ep([{"role": "assistant", "content": "12"}], "answered"),
           ep([{"role": "assistant", "content": "12"}], "answered")]
    m = episode_metrics(eps, max_turns=3)
    assert m["episodes/tool_calls/mean"] == 0.5 and m["episodes/tool_calls/failed"] == 0.25
    assert m["episodes/tool_calls/tool/multiply"] == 0.25 and m["episodes/tool_calls/none"] == 0.5
    assert m["episodes/turns/limit"] == 3 and m["episodes/turns/used"] == pytest.approx(5 / 12)


# --------------------------------------------------------------------------- health and inspect
def test_health_names_a_run_whose_episodes_call_no_tool_and_strict_stops_it():
    from types import SimpleNamespace

    from vigor_cli.train import health
    from vigor_cli.settings import build_config

    cfg = build_config(sets=["task.env=calc.py:Calculator", "task.max_turns=3"], strategy_rules=False)
    strict_cfg = cfg.model_copy(deep=True)
    strict_cfg.health.strict = True
    plain_cfg = cfg.model_copy(deep=True)
    plain_cfg.task.env = "retry"
    idle = [SimpleNamespace(uid=f"u{i % 2}", reward=0.0, tokens=5, truncated=False, components={}, details={},
                            episode=None, rollout=Episode([1], [0.0], "12", False, mask=[1], ended="answered",
                                                          messages=[{"role": "assistant", "content": "12"}]))
            for i in range(4)]
    run = health.RunHealth(cfg, {}, None)
    alerts1, m1 = run.step(1, idle, {})
    alerts2, m2 = run.step(2, idle, {})
    assert m1["health/no_tool_calls"] == 1.0 and not [a for a in alerts1 if a.check == "no_tool_calls"]
    [alert] = [a for a in alerts2 if a.check == "no_tool_calls"]
    assert "steps 1–2: no episode's model called a tool" in alert.line and "task.max_turns=3" in alert.line
    assert "\n" not in alert.line and not alert.fatal
    strict = health.RunHealth(strict_cfg, {}, None)
    strict.step(1, idle, {})
    assert [a.fatal for a in strict.step(2, idle, {})[0] if a.check == "no_tool_calls"] == [True]
    # a run without tools (a built-in environment, or none) is never named
    plain = health.RunHealth(plain_cfg, {}, None)
    assert all(plain.step(s, idle, {})[1]["health/no_tool_calls"] == 0.0 for s in (1, 2, 3))


def test_inspect_shows_each_episodes_turns_not_the_shared_tool_text():
    from vigor_cli.report.allocation import PromptAllocation, StepAllocation
    from vigor_cli.report.episodes_view import with_episode_text

    tools = "Tools (call one as ...):\nmultiply(a: integer, b: integer): Multiply two integers.\n"
    step = StepAllocation(1, "grpo", 4, [PromptAllocation("a", tools + "3*4=", [], 2, 2, "used"),
                                         PromptAllocation("b", tools + "7*8=", [], 2, 2, "used")], 1)
    episodes = [{"uid": "a", "messages": [{"role": "assistant", "content": "", "tool_calls": [_call("multiply", a=3, b=4)]},
                                          {"role": "tool", "name": "multiply", "content": "12"},
                                          {"role": "assistant", "content": "\\boxed{12}"}]},
                {"uid": "b", "messages": [{"role": "assistant", "content": "\\boxed{54}"}]}]
    shown = {p.uid: p.text for p in with_episode_text(step, episodes).prompts}
    assert shown == {"a": "model: [calls multiply] | tool: 12 | model: \\boxed{12}", "b": "model: \\boxed{54}"}
    assert with_episode_text(step, []) is step


# --------------------------------------------------------------------------- the tiny model speaks tools
def test_tiny_template_renders_tool_conversations_and_keeps_plain_prompts_plain():
    from transformers import AutoTokenizer

    from vigor_cli.episodes.tools import PLAIN_TOOLS, tool_line
    from vigor_cli.tasks.prompts import has_chat_template
    from vigor_cli.model.tiny import TINY_DIR, build_tokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    assert not has_chat_template(tok)  # vigor's prompts stay plain text: the numbers of every run stay
    assert build_tokenizer().chat_template == tok.chat_template  # make-tiny writes the same template
    schema = {"type": "function", "function": {"name": "multiply", "description": "Multiply two integers.",
                                               "parameters": {"type": "object", "properties": {
                                                   "a": {"type": "integer"}, "b": {"type": "integer"}}}}}
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3*4="},
                {"role": "assistant", "content": "", "tool_calls": [_call("multiply", a=3, b=4)]},
                {"role": "tool", "name": "multiply", "content": "12"}, {"role": "assistant", "content": "\\boxed{12}"}]
    text = tok.apply_chat_template(messages, tools=[schema], tokenize=False)
    assert text == (PLAIN_TOOLS.format(tools=tool_line(schema)) + "Be brief.\n\n3*4="
                    '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call><eos>'
                    "<tool_response>\n12\n</tool_response>\n\\boxed{12}<eos>")
    ids = tok('<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call><eos>',
              add_special_tokens=False)["input_ids"]
    assert tok.parse_response(ids, prefix="")["tool_calls"] == [_call("multiply", a=3, b=4)]


@pytest.mark.slow
def test_trls_own_grpo_trainer_takes_the_tiny_model_with_an_environment(calc, tmp_path):
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.user.rewards import import_function
    from vigor_cli.model.tiny import TINY_DIR

    tok = AutoTokenizer.from_pretrained(TINY_DIR)  # the bundled files as they are
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}*{b}="}], "answer": a * b}
                              for a, b in [(3, 4), (7, 8)]])
    trainer = trl.GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR),
                              reward_funcs=[import_function(f"{calc['reward']}:right")],
                              args=trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                                                  per_device_train_batch_size=2, num_generations=2, max_steps=1,
                                                  max_completion_length=24, logging_steps=1),
                              train_dataset=data, processing_class=tok,
                              environment_factory=import_function(f"{calc['env']}:Calculator", flag="--env"))
    assert [t.__name__ for t in trainer.tools] == ["multiply"]
    trainer.train()
    assert trainer.state.global_step == 1


# --------------------------------------------------------------------------- the whole journey
@pytest.mark.slow
def test_an_environment_run_dry_runs_trains_evaluates_exports_and_inspects(calc, vigor, monkeypatch):
    """A user's environment class and data: the dry run shows the prompts as the model receives
    them (with the default task.max_prompt_tokens, which bounds the task's part), two steps
    train, `vigor eval --run` plays the run's episodes and reproduces its last held-out numbers
    exactly, the export's tokenizer renders the run's tools, inspect shows each episode."""
    from transformers import AutoTokenizer

    monkeypatch.chdir(calc["dir"])
    task = ["--data", "data.jsonl", "--reward", "reward.py:right", "--env", "calc.py:Calculator"]
    code, out, err = vigor("train", *task, "--dry-run")
    assert code == 0, err
    assert "the first 3 prompts as the model receives them under the environment" in out
    assert "custom/train/0: 162 tokens (4 of the task's prompt, 135 of the tool descriptions, 23 of the reset text)" in out
    assert "| multiply(a: integer, b: integer): Multiply two integers." in out and "| 3*4= Use the multiply tool." in out
    code, out, err = vigor("train", *task, "--steps", "2", "--prompts-per-step", "4", "--strategy", "grpo",
                           "--set", "allocation.group_size=2", "--set", "train.eval_limit=4",
                           "--output-dir", "runs", "--run-name", "calc")
    assert code == 0, err
    run = calc["dir"] / "runs" / "calc"
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step2 = next(s for s in steps if s["step"] == 2 and "episodes/turns/mean" in s)
    assert step2["episodes/turns/limit"] == 3 and "episodes/tool_calls/mean" in step2
    assert "no episode's model called a tool (task.env=calc.py:Calculator)" in err  # the tiny model never does
    held = json.loads((run / "eval" / "step-2.json").read_text())["sets"]["custom"]
    code, out, err = vigor("eval", "--run", str(run), "--output", str(calc["dir"] / "again.json"))
    assert code == 0, err
    assert "environment Calculator (calc.py:Calculator): tools multiply" in err and "warning" not in err
    again = json.loads((calc["dir"] / "again.json").read_text())["sets"]["custom"]
    assert again["metrics"] == held["metrics"] and again["accuracy"] == held["accuracy"]
    assert [s["episode"] for s in again["samples"]] == [s["episode"] for s in held["samples"]]
    assert "episodes" in again["metrics"] and "turns" in out and "tool calls" in out
    code, out, err = vigor("export", str(run), "--out", str(calc["dir"] / "exported"))
    assert code == 0, err
    tok = AutoTokenizer.from_pretrained(calc["dir"] / "exported")
    shown = tok.apply_chat_template([{"role": "user", "content": "3*4="}], tokenize=False, add_generation_prompt=True)
    assert shown.startswith("Tools (call one as") and "multiply(a: integer, b: integer): Multiply two integers." in shown
    record = json.loads((calc["dir"] / "exported" / "vigor_run.json").read_text())["task"]
    assert record["env"] == "../calc.py:Calculator" and record["max_turns"] == 3
    code, out, err = vigor("eval", str(calc["dir"] / "exported"), "--output", str(calc["dir"] / "export.json"))
    assert code == 0, err  # the export's record plays the run's episodes too
    from_export = json.loads((calc["dir"] / "export.json").read_text())["sets"]["custom"]
    assert from_export["metrics"] == held["metrics"]
    code, out, err = vigor("inspect-allocation", str(run), "--step", "1", "--episodes", "0")
    assert code == 0, err
    assert "model: " in out and "Tools (call one" not in out


@pytest.mark.slow
def test_vigor_eval_plays_any_model_on_any_environment(calc, vigor, monkeypatch):
    monkeypatch.chdir(calc["dir"])
    code, out, err = vigor("eval", "tiny", "--eval-data", "data.jsonl", "--reward", "reward.py:right",
                           "--env", "calc.py:Calculator", "--max-turns", "2", "--limit", "3",
                           "--output", str(calc["dir"] / "any.json"))
    assert code == 0, err
    assert "each sample is an episode of at most 2 model turns" in err
    result = json.loads((calc["dir"] / "any.json").read_text())["sets"]["custom"]
    assert result["metrics"]["episodes"]["turns/mean"] >= 1 and all("episode" in s for s in result["samples"])
    code, out, err = vigor("eval", "tiny", "--env", "calc.py:Calculator")
    assert code == 2 and "--env and --max-turns play episodes on your own set" in err


# --------------------------------------------------------------------------- prompt limits, exports
@pytest.mark.slow  # a custom task and its reward file: over a second of CPU
def test_the_prompt_limit_bounds_the_tasks_part_and_the_tools_come_on_top(calc):
    from vigor_cli.episodes.tools import ToolEnvironment
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.user.rewards import import_function
    from vigor_cli.settings import build_config
    from vigor_cli.tasks import get_task
    from vigor_cli.evaluate.sets import fit_prompts

    cfg = build_config(sets=["model.name_or_path=tiny", "task.name=custom", f"task.data={calc['data']}",
                             f"task.rewards=[{calc['reward']}:right]", f"task.env={calc['env']}:Calculator"])
    task, tok = get_task(cfg.task, workers=1), load_tokenizer(cfg.model)
    try:
        env = ToolEnvironment(import_function(f"{calc['env']}:Calculator", flag="--env"), "calc.py:Calculator", tok, 5)
        examples = task.train_examples()
        kept, long, _ = fit_prompts(5, task, tok, examples, env=env)
        assert sorted(kept) == [ex.uid for ex in examples if len(ex.question) <= 5] and long == [6]
        assert all(len(ids) > 100 for ids in kept.values())  # the tools are there, on top of the task's part
        assert tok.decode(kept[examples[0].uid]).startswith("Tools (call one as")
    finally:
        task.close()


def test_an_exported_template_renders_the_runs_tools_unless_others_are_passed():
    from jinja2 import Template

    from vigor_cli.tasks.plain_template import PLAIN_CHAT_TEMPLATE, is_plain
    from vigor_cli.export.card import JOIN_TEMPLATE, with_default_tools

    schema = {"type": "function", "function": {"name": "multiply", "description": "Multiply.",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
    other = {"type": "function", "function": {"name": "divide", "description": "Divide.",
                                              "parameters": {"type": "object", "properties": {}}}}
    template = with_default_tools(PLAIN_CHAT_TEMPLATE, [schema])
    assert is_plain(template)  # the mark stays first: vigor still reads it as plain text
    user = [{"role": "user", "content": "3*4="}]
    assert Template(template).render(messages=user, eos_token="<eos>").startswith(
        'Tools (call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>):\nmultiply(a: integer): Multiply.\n3*4=')
    passed = Template(template).render(messages=user, tools=[other], eos_token="<eos>")
    assert "divide(): Divide." in passed and "multiply" not in passed
    assert Template(with_default_tools(JOIN_TEMPLATE, [schema])).render(messages=user) == "3*4="  # no tool slot


@pytest.mark.slow
def test_the_code_feedback_example_fits_the_tiny_models_context(vigor):
    """docs/episodes.md's code-feedback command: every held-out episode fits the 256-token
    context; the default budget (2 x 3 x 48) does not, and the warning names what fits."""
    code, out, err = vigor("train", "--task", "tiny-code", "--env", "code-feedback", "--max-turns", "2",
                           "--set", "task.max_episode_tokens=200", "--dry-run")
    assert code == 0, err
    assert "exceed the model's context" not in err and "at most 2 model turns and 200 tokens per episode" in out
    code, out, err = vigor("train", "--task", "tiny-code", "--env", "code-feedback", "--max-turns", "3", "--dry-run")
    assert code == 0, err
    assert "40 of 40 held-out prompts of set tiny-code plus task.max_episode_tokens=288 exceed" in " ".join(err.split())
    assert "(at most 212 fits every one)" in " ".join(err.split())


@pytest.mark.slow
def test_eval_run_reproduces_a_built_in_environment_run_sampled(tmp_path, vigor, monkeypatch):
    """higher-lower on tiny-guess, sampled (temperature 1, two samples): the same episodes,
    the accuracy after the answers and at the first attempt."""
    monkeypatch.chdir(tmp_path)
    code, out, err = vigor("train", "--task", "tiny-guess", "--env", "higher-lower", "--steps", "1",
                           "--prompts-per-step", "4", "--strategy", "grpo", "--set", "allocation.group_size=2",
                           "--set", "train.eval_limit=6", "--set", "train.eval_samples=2",
                           "--set", "train.eval_temperature=1.0", "--output-dir", "runs", "--run-name", "guess")
    assert code == 0, err
    code, out, err = vigor("eval", "--run", "runs/guess", "--output", "again.json")
    assert code == 0, err
    again = json.loads((tmp_path / "again.json").read_text())["sets"]["tiny-guess"]
    held = json.loads((tmp_path / "runs" / "guess" / "eval" / "step-1.json").read_text())["sets"]["tiny-guess"]
    assert again["metrics"] == held["metrics"] and "first_attempt" in again["metrics"]
    assert [s["completion"] for s in again["samples"]] == [s["completion"] for s in held["samples"]]

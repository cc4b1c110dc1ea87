"""A tiny agent on a laptop: the calculator's tool and environment, tiny-products, the
`make-tiny --recipe tools` warm-up, and bench/tiny_agent.py.

Fast: the tool (right products, malformed and huge arguments refused), the environment
driven as the episode loop drives it with the real tiny tokenizer, the warm-up's
conversations rendered as the loop renders them, config and CLI errors. Slow: a short
warm-up of the real tiny model writes tool calls the environment reads, two steps of
training with the environment and `vigor eval --run` on them, the benchmark's --quick.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vigor_cli.episodes.base import Episode
from vigor_cli.tasks import tiny_products
from vigor_cli.tasks.tiny_products import BAD_CALL, MAX_DIGITS, TinyProductsTask, multiply

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from vigor_cli.model.loading import TINY_DIR

    return AutoTokenizer.from_pretrained(str(TINY_DIR))


def calculator(tokenizer, task_name="tiny-products"):
    from vigor_cli.config import TaskConfig
    from vigor_cli.episodes.registry import make_environment

    cfg = TaskConfig(name=task_name, env="calculator")
    return make_environment(cfg, TinyProductsTask(), tokenizer)


def turn(tokenizer, text: str) -> Episode:
    """An episode whose model has just written ``text`` (its one turn)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return Episode(token_ids=list(ids), logprobs=[0.0] * len(ids), text=text, truncated=False,
                   mask=[1] * len(ids), messages=[{"role": "assistant", "content": text}])


# --------------------------------------------------------------------------- the tool
@pytest.mark.parametrize("a, b, product", [(37, 48, "1776"), (10, 99, "990"), (-12, 12, "-144"), (0, 999999, "0"),
                                           ("37", " 48 ", "1776"), ("+7", "-3", "-21")])
def test_multiply_gives_the_product_of_whole_numbers(a, b, product):
    assert multiply(a, b) == product


@pytest.mark.parametrize("a, b", [(True, 3), (3, False), (3.0, 4), (3.5, 4), (None, 4), ([3], 4), ({"x": 1}, 2),
                                  ("3+4", 1), ("__import__('os').system('true')", 2), ("1e3", 2), ("", 2),
                                  ("0x10", 2), ("3 4", 2), ("٣", 2)])
def test_multiply_answers_a_malformed_call_with_one_error_text(a, b):
    assert multiply(a, b) == BAD_CALL
    assert "\n" not in BAD_CALL and "a and b" in BAD_CALL


@pytest.mark.parametrize("a, b", [(10**MAX_DIGITS, 2), (2, -(10**MAX_DIGITS)), ("1" * (MAX_DIGITS + 1), 2),
                                  (10**4000, 2), ("9" * 10_000, 1)])
def test_multiply_refuses_huge_numbers(a, b):
    assert multiply(a, b) == BAD_CALL
    assert multiply(10**MAX_DIGITS - 1, 10**MAX_DIGITS - 1) == str((10**MAX_DIGITS - 1) ** 2)


# --------------------------------------------------------------------------- the task
def test_tiny_products_splits_every_product_once_and_grades_the_boxed_number():
    task = TinyProductsTask(split_seed=0)
    train, held = task.train_examples(), task.eval_examples()
    assert len(held) == tiny_products.HELD_OUT_SIZE and len(train) + len(held) == 90 * 90
    assert not {e.question for e in train} & {e.question for e in held}
    assert [e.question for e in TinyProductsTask(split_seed=1).eval_examples()] != [e.question for e in held]
    ex = held[0]
    a, b = tiny_products.operands(ex.question)
    assert ex.answer == str(a * b) and 10 <= a <= 99 and 10 <= b <= 99
    scores = task.score([ex] * 4, [f"\\boxed{{{a * b}}}", f"\\boxed{{{a * b + 1}}}", "no answer",
                                   f"<tool_call>{{}}</tool_call>\\boxed{{{a * b}}}"])
    assert [s.reward for s in scores] == [1.0, 0.0, 0.0, 1.0]
    assert task.render_prompt(ex, None) == f"{ex.question}="


# --------------------------------------------------------------------------- the environment
def test_calculator_is_a_registered_builtin_for_math_tasks_only():
    from vigor_cli.episodes.registry import ENVIRONMENTS, check_spec, check_task

    assert "calculator" in ENVIRONMENTS and ENVIRONMENTS["calculator"].kinds == ("math",)
    check_spec("calculator")
    check_task("calculator", "tiny-products")
    with pytest.raises(ValueError, match="task.env=calculator works with the tasks .*tiny-products.*not 'tiny-code'"):
        check_task("calculator", "tiny-code")


def test_calculator_answers_a_tool_call_with_the_product(tokenizer):
    env = calculator(tokenizer)
    assert env.name == "calculator" and env.tools == ["multiply"]
    from vigor_cli.model.tiny_agent import tool_schema

    assert env.schemas == [tool_schema()]
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 37, "b": 48}}</tool_call>'
    ex = TinyProductsTask().eval_examples()[0]
    [start] = env.start([ex])
    ep = turn(tokenizer, call)
    ep.session = start.session
    [reply] = env.answer([ep], [ex], last=False)
    assert reply.messages == [{"role": "tool", "name": "multiply", "content": "1776"}]
    assert reply.tool_calls[0]["function"] == {"name": "multiply", "arguments": {"a": 37, "b": 48}}
    # a string argument that is no number gets the error text back, the episode goes on
    ep2 = turn(tokenizer, '<tool_call>{"name": "multiply", "arguments": {"a": "os.system(1)", "b": 2}}</tool_call>')
    ep2.session = start.session
    [reply] = env.answer([ep2], [ex], last=False)
    assert reply.messages[0]["content"] == BAD_CALL and not reply.done
    # an answer without a call ends the episode (the task grades it)
    [reply] = env.answer([turn(tokenizer, "\\boxed{1776}")], [ex], last=False)
    assert reply.done and reply.ended == "answered"


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "multiply", "arguments": {"a": 3</tool_call>',  # not JSON
    '<tool_call>{"name": "multiply", "arguments": {"x": 3, "y": 4}}</tool_call>',  # wrong argument names
    '<tool_call>{"name": "multiply", "arguments": {"a": 3}}</tool_call>',  # one missing
    '<tool_call>{"name": "divide", "arguments": {"a": 3, "b": 4}}</tool_call>',  # no such tool
    '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}',  # not closed
])
def test_calculator_ends_an_episode_on_a_call_it_cannot_read(tokenizer, text):
    env = calculator(tokenizer)
    ex = TinyProductsTask().eval_examples()[0]
    [start] = env.start([ex])
    ep = turn(tokenizer, text)
    ep.session = start.session
    [reply] = env.answer([ep], [ex], last=False)
    assert reply.done and reply.ended == "bad_tool_call" and not reply.messages


def test_warmup_conversations_are_the_tokens_the_episode_loop_builds(tokenizer):
    """The warm-up renders with the chat template; the loop renders the prompt as plain text
    with the tool list and appends each turn and result: the same tokens."""
    from vigor_cli.episodes.messages import MessageFormat, render_prompt
    from vigor_cli.model.tiny_agent import conversation, encode_conversation, tool_schema
    from vigor_cli.tasks.prompts import encode_prompt

    task = TinyProductsTask()
    env = calculator(tokenizer)
    ex = task.train_examples()[5]
    ids, mask = encode_conversation(tokenizer, conversation(ex.question, ex.answer, True), [tool_schema()])
    prompt = encode_prompt(tokenizer, render_prompt(task, ex, tokenizer, env))
    assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)])
    a, b = tiny_products.operands(ex.question)
    call = tokenizer(f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>',
                     add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    result = MessageFormat(tokenizer, [tokenizer.eos_token_id], task.follow_up).encode(
        [{"role": "tool", "name": "multiply", "content": ex.answer}])
    answer = tokenizer(f"\\boxed{{{ex.answer}}}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert ids == prompt + call + result + answer
    assert mask == [0] * len(prompt) + [1] * len(call) + [0] * len(result) + [1] * len(answer)
    assert len(ids) <= 256  # the tiny model's context holds the whole episode
    direct, dmask = encode_conversation(tokenizer, conversation(ex.question, ex.answer, False), [tool_schema()])
    assert direct[: len(prompt)] == prompt and sum(dmask) == len(direct) - len(prompt)


# --------------------------------------------------------------------------- config and CLI errors
def _one_line_error(code, out, err):
    assert code == 2, out + err
    assert "Traceback" not in out + err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_calculator_on_a_code_task_is_one_line(vigor, tmp_path):
    line = _one_line_error(*vigor("train", "--task", "tiny-code", "--env", "calculator", "--dry-run",
                                  "--set", f"train.output_dir={tmp_path}"))
    assert "calculator" in line and "tiny-code" in line


def test_a_misspelt_environment_or_task_is_one_line_naming_the_builtins(vigor, tmp_path):
    line = _one_line_error(*vigor("train", "--task", "tiny-products", "--env", "calculater", "--dry-run",
                                  "--set", f"train.output_dir={tmp_path}"))
    assert "calculater" in line and "calculator" in line
    line = _one_line_error(*vigor("train", "--task", "tiny-product", "--dry-run", "--set", f"train.output_dir={tmp_path}"))
    assert "tiny-product" in line and "tiny-products" in line


def test_a_misspelt_benchmark_is_one_line_naming_tiny_products(vigor):
    line = _one_line_error(*vigor("eval", "tiny", "--benchmarks", "tiny-product"))
    assert "tiny-product'" in line and "tiny-products" in line


def test_an_unknown_recipe_is_one_line_naming_tools(vigor, tmp_path):
    line = _one_line_error(*vigor("make-tiny", "--recipe", "tool", "--out", str(tmp_path / "m")))
    assert "--recipe" in line and "tools" in line
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # a dry run's model and memory plan: seconds
def test_the_agent_config_dry_runs_with_the_tool_list_in_its_prompts(vigor, tmp_path):
    from vigor_cli.model.loading import TINY_DIR

    code, out, err = vigor("train", "--config", str(ROOT / "configs" / "tiny-agent.yaml"), "--dry-run",
                           "--set", f"model.name_or_path={TINY_DIR}", "--set", f"train.output_dir={tmp_path}")
    assert code == 0, out + err
    assert "multiply(a: integer, b: integer)" in out and "calculator" in out


# --------------------------------------------------------------------------- the benchmark's summary
def _bench():
    spec = importlib.util.spec_from_file_location("bench_tiny_agent", ROOT / "bench" / "tiny_agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_tiny_agent"] = module
    spec.loader.exec_module(module)
    return module


def test_bench_counts_tool_calls_in_episodes_and_plain_completions():
    bench = _bench()
    called = {"episode": {"messages": [{"role": "assistant", "content": "<tool_call>{}</tool_call>",
                                        "tool_calls": [{"function": {"name": "multiply"}}]}]}}
    unread = {"episode": {"messages": [{"role": "assistant", "content": "<tool_call>{oops"}]}}
    answered = {"episode": {"messages": [{"role": "assistant", "content": "\\boxed{12}"}]}}
    plain = {"completion": '<tool_call>{"name": "multiply"}</tool_call>'}
    assert [bench.called_tool(s) for s in (called, unread, answered, plain, {"completion": "\\boxed{3}"})] == \
        [True, True, False, True, False]


def test_bench_summary_pairs_the_arms_by_seed():
    bench = _bench()

    def run(arm, seed, pass_rates, tool_rates):
        curve = {"step": [0, 2], "rollouts": [0, 64], "pass_rate": pass_rates, "tool_call_rate": tool_rates}
        return {"arm": arm, "seed": seed, "rollouts": 64, "wall_s": 1.0, "cpu_s": 1.0, "held_out": curve,
                "training": {"step": [1, 2], "rollouts": [32, 64], "pass_rate": [0, 0], "tool_call_rate": [0, 0]}}

    runs = [run("tool", 0, [0.1, 0.5], [0.2, 0.6]), run("no tool", 0, [0.0, 0.0], [0.0, 0.0]),
            run("tool", 1, [0.1, 0.3], [0.2, 0.4])]
    summary = bench.summarise(runs)
    assert summary["paired"]["tool - no tool"]["seeds"] == 1
    assert summary["paired"]["tool - no tool"]["mean"] == pytest.approx(0.5)
    assert summary["arms"]["tool"]["tool_call_rate"]["end"] == pytest.approx(0.5)
    assert summary["arms"]["tool"]["pass_rate"]["change"] == pytest.approx(0.3)
    assert "tool - no tool" in bench.table(summary)


def test_the_committed_results_hold_paired_seeds_and_no_machine_paths():
    results = ROOT / "bench" / "tiny_agent_results.json"
    text = results.read_text()
    assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text
    data = json.loads(text)
    seeds = {arm: {r["seed"] for r in data["runs"] if r["arm"] == arm} for arm in ("tool", "no tool")}
    assert len(seeds["tool"]) >= 3 and seeds["tool"] == seeds["no tool"]
    assert {r["rollouts"] for r in data["runs"]} == {data["runs"][0]["rollouts"]}  # the same budget in both arms
    assert (ROOT / "bench" / "tiny_agent_curves.png").is_file()


# --------------------------------------------------------------------------- slow: the real tiny model
@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """The bundled tiny model after a short tools warm-up (60 steps), built through the CLI."""
    out = tmp_path_factory.mktemp("agent") / "model"
    proc = subprocess.run([sys.executable, "-m", "vigor_cli", "make-tiny", "--recipe", "tools", "--max-steps", "60",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


@pytest.mark.slow
def test_the_warmed_model_writes_tool_calls_the_calculator_reads(warmed, tokenizer):
    """Sampled from the warmed model on held-out prompts with the tool list: some turns are
    tool calls the environment parses and runs, with the operands of the question."""
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.episodes.tools import parse_tool_calls
    from vigor_cli.model.tiny import load, sample_completions

    recipe = json.loads((warmed / "recipe.json").read_text())
    assert recipe["recipe"] == "tools" and recipe["steps"] == 60 and recipe["format_steps"] == 40
    assert recipe["base"] == "tiny"
    model, tok = load(warmed)
    task = TinyProductsTask()
    env = calculator(tok)
    examples = task.eval_examples()[:32]
    prompts = [render_prompt(task, ex, tok, env) for ex in examples]
    samples = sample_completions(model, tok, prompts, 4, temperature=1.0, max_new_tokens=80, seed=0)
    calls = right = 0
    for ex, group in zip(examples, samples):
        for text in group:
            if "<tool_call>" not in text:
                continue
            try:
                parsed = parse_tool_calls(text, tok(text, add_special_tokens=False)["input_ids"], tok)
            except ValueError:
                continue
            if parsed and parsed[0]["function"]["name"] == "multiply":
                calls += 1
                args = parsed[0]["function"]["arguments"]
                right += (args.get("a"), args.get("b")) == tiny_products.operands(ex.question)
    assert calls > 0, samples[:3]
    assert calls < 128  # warmed partly: some answers come without the tool
    # the bundled model itself never calls the tool
    base_model, base_tok = load()
    base = sample_completions(base_model, base_tok, prompts[:8], 4, temperature=1.0, max_new_tokens=80, seed=0)
    assert not any("<tool_call>" in t for group in base for t in group)


@pytest.mark.slow
def test_two_steps_with_the_calculator_then_vigor_eval_run(warmed, vigor, tmp_path):
    code, out, err = vigor("train", "--config", str(ROOT / "configs" / "tiny-agent.yaml"),
                           "--set", f"model.name_or_path={warmed}", "--set", "train.steps=2",
                           "--set", "train.prompts_per_step=4", "--set", "train.eval_every=2",
                           "--set", "train.eval_limit=8", "--set", "train.save_every=2",
                           "--set", f"train.output_dir={tmp_path}", "--set", "train.run_name=agent")
    assert code == 0, out[-3000:] + err[-3000:]
    run = tmp_path / "agent"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "reward/pass_rate" in x]
    assert len(steps) == 2 and all("episodes/tool_calls/none" in x for x in steps)
    assert any("episodes/tool_calls/tool/multiply" in x for x in steps) or all(x["episodes/tool_calls/none"] == 1.0 for x in steps)
    last_eval = [x for x in lines if "eval/accuracy" in x][-1]
    code, out, err = vigor("eval", "--run", str(run), "--output", str(tmp_path / "eval.json"))
    assert code == 0, out[-3000:] + err[-3000:]
    result = json.loads((tmp_path / "eval.json").read_text())
    metrics = result["sets"]["tiny-products"]["metrics"]
    assert metrics["avg@n"] == pytest.approx(last_eval["eval/tiny-products/accuracy"])
    assert "tool_calls/mean" in metrics["episodes"]


@pytest.mark.slow
def test_bench_quick_trains_both_arms(warmed, tmp_path):
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tiny_agent.py"), "--quick", "--model", str(warmed),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert {r["arm"] for r in data["runs"]} == {"tool", "no tool"}
    for r in data["runs"]:
        assert r["held_out"]["step"] == [0, 2] and len(r["training"]["pass_rate"]) == 2
        assert all(0.0 <= v <= 1.0 for v in r["held_out"]["tool_call_rate"])
    assert "tool - no tool" in proc.stdout
    assert json.loads((warmed / "recipe.json").read_text())["steps"] == 60  # the given model is used as it is


@pytest.mark.slow
def test_the_tools_warmup_repeats_on_one_thread(tmp_path):
    """Two 6-step warm-ups with one seed on one thread give the same weights; another seed does not."""
    import torch
    from safetensors.torch import load_file

    from vigor_cli.model.tiny_agent import warm_tools

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, seed in (("a", 0), ("b", 0), ("c", 1)):
            warm_tools(tmp_path / name, seed=seed, steps=6, log=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    a, b, c = (load_file(str(tmp_path / n / "model.safetensors")) for n in "abc")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    recipe = json.loads((tmp_path / "a" / "recipe.json").read_text())
    assert recipe["steps"] == 6 and recipe["format_steps"] == 4 and recipe["torch_threads"] == 1

"""Episodes (vigor_cli/episodes/): the turn-by-turn loop on the real tiny model, the loss mask
over the model's own tokens, an environment class written for TRL run unmodified, bad
environments, the built-in environments with the real sandbox, the chat template's messages,
and the config's rules.

The tiny model never writes a tool call, so the tests of tool calls script the policy's turns
(:class:`Scripted`: text through the real tokenizer); everything else is real: the class, the
tokenizer, the loop, the scorer, the reward function and the sandbox."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from vigor_cli.episodes import base as episode_base
from vigor_cli.episodes.attempts import CORRECT, HIGHER, LOWER, NOT_A_NUMBER, WRONG
from vigor_cli.episodes.base import ENV_ERROR, ENV_TIMEOUT, MAX_TURNS, Episode, episode_metrics
from vigor_cli.episodes.loop import make_runner
from vigor_cli.episodes.messages import MessageFormat, render_prompt
from vigor_cli.episodes.registry import make_environment
from vigor_cli.episodes.scoring import EpisodeScorer
from vigor_cli.episodes.tools import ANSWERED, BAD_TOOL_CALL, ToolCallError, parse_tool_calls
from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams
from vigor_cli.settings import build_config
from vigor_cli.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]
GAME = ROOT / "examples" / "number-game" / "env.py"
REWARD = ROOT / "examples" / "number-game" / "reward.py"
BAD = ROOT / "tests" / "fixtures" / "envs" / "bad_envs.py"
CHATML = ("{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}{% endfor %}"
          "{{ eos_token }}\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
          "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A ChatML-like template whose turns end with the tokenizer's EOS (the stop token the model samples)."""


@pytest.fixture(scope="module")
def policy():
    from vigor_cli.config import ModelConfig
    from vigor_cli.model.loading import load_policy

    model, tokenizer, _ = load_policy(ModelConfig(lora={"enabled": False}))
    return model, tokenizer


class Scripted(RolloutEngine):
    """The policy's turns written out: ``script(context text)`` is the next turn's text (the
    tiny model never writes a tool call); counts each call's rows."""

    def __init__(self, tokenizer, script):
        self.tok, self.script, self.calls = tokenizer, script, []

    def generate(self, prompts, counts, sampling):
        self.calls.append(sum(counts))
        out = []
        for p, c in zip(prompts, counts):
            text = self.script(self.tok.decode(p))
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Rollout(ids, [0.0] * len(ids), text, False) for _ in range(c)])
        return out


def game_setup(tmp_path, policy, factory="NumberGame", *extra):
    """The custom task over a two-row JSONL, the example's reward function and class (or one
    of the fixtures' bad classes)."""
    data = tmp_path / "games.jsonl"
    data.write_text('{"prompt": "Guess my number.", "answer": 3}\n{"prompt": "Guess my number.", "answer": 6}\n')
    cfg = build_config(sets=["model.name_or_path=tiny", "task.name=custom", f"task.data={data}",
                             f"task.rewards=[{REWARD}:few_guesses]",
                             f"task.env={GAME if factory == 'NumberGame' else BAD}:{factory}",
                             "sampling.max_new_tokens=48", *extra])
    task = get_task(cfg.task, workers=1)
    env = make_environment(cfg.task, task, policy[1])
    return cfg, task, env


def guesses(*numbers, final="It is found."):
    """A script: turn t calls guess(numbers[t]) while numbers last, then answers ``final``."""
    def script(context: str) -> str:
        t = context.count("<tool_response>")
        if t < len(numbers):
            return f'<tool_call>{{"name": "guess", "arguments": {{"number": {numbers[t]}}}}}</tool_call>'
        return final

    return script


def run_game(tmp_path, policy, script, factory="NumberGame", *extra):
    cfg, task, env = game_setup(tmp_path, policy, factory, *extra)
    engine = Scripted(policy[1], script)
    runner = make_runner(cfg, task, policy[1], engine, env, [policy[1].eos_token_id])
    examples = task.train_examples()
    episodes = [g[0] for g in runner.run(examples, [1] * len(examples), SamplingParams(max_new_tokens=48, seed=1))]
    return cfg, task, env, runner, engine, examples, episodes


# --------------------------------------------------------------------------- TRL's convention
def test_an_environment_class_written_for_trl_runs_unmodified(tmp_path, policy):
    cfg, task, env, runner, engine, examples, episodes = run_game(tmp_path, policy, guesses(1, 3))
    tok = policy[1]
    assert env.tools == ["guess"] and env.reward_name == "NumberGame"
    first, second = episodes  # secrets 3 and 6
    assert [m["role"] for m in first.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in first.messages if m["role"] == "tool"] == ["higher", "correct"]
    assert first.messages[0]["tool_calls"] == [{"type": "function", "function": {"name": "guess", "arguments": {"number": 1}}}]
    assert first.ended == ANSWERED and first.turns == 3 and first.text == "It is found."
    assert [m["content"] for m in second.messages if m["role"] == "tool"] == ["higher", "higher"]
    # reset's observation is appended to the prompt, after the tool list (no chat template here)
    prompt = tok.decode(first.prompt_ids)
    assert prompt.endswith("Guess my number. Find it with the guess tool.")
    assert "\nguess(number: integer): Guess the hidden number.\n" in prompt
    assert engine.calls == [2, 2, 2]  # every turn one engine call for both episodes
    # the reward: the user's function read the instances (environments=), get_reward weighs 1
    scores = EpisodeScorer(task, env).score(examples, episodes)
    assert scores[0].components == {"few_guesses": pytest.approx(0.8), "NumberGame": 1.0}
    assert scores[0].reward == pytest.approx(1.8) and scores[1].reward == 0.0
    assert EpisodeScorer(task, env).weights() == [1.0, 1.0]
    assert all(ep.session is None for ep in episodes) and len(env.pool) == 2  # released, reused
    task.close()


def test_tool_results_are_masked_and_are_the_formats_tokens(tmp_path, policy):
    *_, runner, _, _, episodes = run_game(tmp_path, policy, guesses(1, 3))
    ep = episodes[0]
    assert len(ep.mask) == len(ep.token_ids) == len(ep.logprobs)
    env_runs = [m for m in ep.messages if m["role"] == "tool"]
    spans = _runs(ep.mask, 0)
    assert [ep.token_ids[a:b] for a, b in spans] == [runner.fmt.encode([m]) for m in env_runs]
    assert all(ep.logprobs[j] == 0.0 for a, b in spans for j in range(a, b))
    assert ep.model_tokens + ep.env_tokens == len(ep.token_ids)
    decoded = [policy[1].decode(ep.token_ids[a:b], skip_special_tokens=True) for a, b in _runs(ep.mask, 1)]
    assert decoded == [m["content"] for m in ep.messages if m["role"] == "assistant"]


def _runs(mask, value):
    """(start, end) of each maximal run of ``value`` in ``mask``."""
    out, start = [], None
    for j, m in enumerate([*mask, None]):
        if m == value and start is None:
            start = j
        elif m != value and start is not None:
            out.append((start, j))
            start = None
    return out


def test_a_raising_tool_ends_one_episode_unscored_and_counted(tmp_path, policy):
    script = lambda text: ('<tool_call>{"name": "guess", "arguments": {"number": -1}}</tool_call>'  # noqa: E731
                           if text.count("<tool_response>") == 0 and "raise" in text else guesses(3)(text))
    data_rows = '{"prompt": "Guess, raise.", "answer": 3}\n{"prompt": "Guess my number.", "answer": 3}\n'
    cfg, task, env = game_setup(tmp_path, policy)
    (tmp_path / "games.jsonl").write_text(data_rows)
    task = get_task(cfg.task, workers=1)
    runner = make_runner(cfg, task, policy[1], Scripted(policy[1], script), env, [policy[1].eos_token_id])
    examples = task.train_examples()
    raised, fine = [g[0] for g in runner.run(examples, [1, 1], SamplingParams(max_new_tokens=48))]
    assert raised.ended == ENV_ERROR and raised.turns == 1
    assert re.fullmatch(r"guess: ValueError: numbers are not negative \(env\.py, line \d+\)", raised.error)
    assert fine.ended == ANSWERED and fine.turns == 2
    scores = EpisodeScorer(task, env).score(examples, [raised, fine])
    assert scores[0].reward is None and "numbers are not negative" in scores[0].reason
    assert scores[1].reward == pytest.approx(1.9)
    metrics = episode_metrics([raised, fine])
    assert metrics["episodes/ended/env_error"] == 1 and metrics["episodes/ended/answered"] == 1
    task.close()


def test_a_reset_past_the_time_limit_ends_its_episode_and_drops_the_instance(tmp_path, policy):
    cfg, task, env = game_setup(tmp_path, policy, "Sleepy", "task.env_timeout_s=0.2")
    starts = env.start(task.train_examples()[:1])
    assert starts[0].ended == ENV_TIMEOUT and "did not return within 0.2 s (task.env_timeout_s) and was stopped" in starts[0].error
    assert env.pool == []  # the instance still sleeping is never handed out again
    task.close()


def test_an_environment_that_fails_most_episodes_stops_the_run_in_one_line(tmp_path, policy):
    with pytest.raises(UserError, match=r"environment Broken: 2 of 2 episodes failed \(first: env_error: reset: "
                                        r"RuntimeError: no games today .*\); stopping: the environment is broken"):
        run_game(tmp_path, policy, guesses(1), "Broken")


def test_an_unparsable_tool_call_ends_the_episode_and_is_scored(tmp_path, policy):
    *_, task, env, _, _, examples, episodes = run_game(tmp_path, policy, lambda text: "<tool_call>{guess 3</tool_call>")
    assert [ep.ended for ep in episodes] == [BAD_TOOL_CALL, BAD_TOOL_CALL]
    scores = EpisodeScorer(task, env).score(examples, episodes)
    assert [s.reward for s in scores] == [0.0, 0.0]  # the model's mistake, graded as it stands
    task.close()


@pytest.mark.parametrize("text,calls", [
    ("no call", []),
    ('<tool_call>{"name": "guess", "arguments": {"number": 4}}</tool_call>', [("guess", {"number": 4})]),
    ('a <tool_call>\n{"name": "a", "arguments": "{\\"x\\": 1}"}\n</tool_call> b <tool_call>{"name": "b"}</tool_call>',
     [("a", {"x": 1}), ("b", {})]),
])
def test_tool_calls_are_read_in_qwens_form(text, calls, policy):
    got = parse_tool_calls(text, [], policy[1])
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in got] == calls


@pytest.mark.parametrize("text", ['<tool_call>{"name": "guess"', "<tool_call>[1]</tool_call>",
                                  '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "g", "arguments": 3}</tool_call>'])
def test_tool_calls_that_cannot_be_read(text, policy):
    with pytest.raises(ToolCallError):
        parse_tool_calls(text, [], policy[1])


def test_a_method_that_cannot_be_a_tool_is_one_line(tmp_path, policy):
    with pytest.raises(UserError, match=r"--env .*:Undocumented: method hint\(\) cannot be a tool"):
        game_setup(tmp_path, policy, "Undocumented")
    with pytest.raises(UserError, match=r"--env .*bad_envs.py:Nothing: .* has no function 'Nothing'"):
        game_setup(tmp_path, policy, "Nothing")


# --------------------------------------------------------------------------- the real tiny model
def test_masks_cover_exactly_the_model_tokens_and_logprobs_match_the_policy(tmp_path, policy):
    from vigor_cli.train import logprobs
    from vigor_cli.rollout.hf import HFEngine

    model, tok = policy
    cfg = build_config(sets=["model.name_or_path=tiny", "task.name=tiny-guess", "task.env=higher-lower",
                             "task.max_turns=3", "task.max_episode_tokens=96", "sampling.max_new_tokens=16"])
    task = get_task(cfg.task)
    env = make_environment(cfg.task, task, tok)
    engine = HFEngine(model, tok)
    calls = []
    real = engine.generate
    engine.generate = lambda p, c, s: calls.append(len(p)) or real(p, c, s)
    runner = make_runner(cfg, task, tok, engine, env, engine.eos_ids)
    examples = task.train_examples()[:4]
    groups = runner.run(examples, [2] * 4, SamplingParams(max_new_tokens=16, seed=3))
    episodes = [ep for g in groups for ep in g]
    assert calls[0] == 8 and calls == sorted(calls, reverse=True) and len(calls) <= 3  # a batch per turn
    assert any(ep.turns > 1 for ep in episodes)
    base = runner.prompt_of(examples[0], None)
    for ep in episodes:
        env_spans = _runs(ep.mask, 0)
        replies = [m for m in ep.messages if m["role"] == "user"]
        assert [ep.token_ids[a:b] for a, b in env_spans] == [runner.fmt.encode([m]) for m in replies]
        assert tok.decode(runner.fmt.encode([replies[0]])) in (f"{HIGHER}=", f"{LOWER}=") if replies else True
        assert ep.ended in (CORRECT, MAX_TURNS, "truncated", "token_budget")
        # the update's view: only the model's tokens reach the loss, with the engine's log-probs
        batch = logprobs.make_batch([base], [ep.token_ids], tok.pad_token_id, [ep.mask])
        assert batch.mask[0, : len(ep.mask)].tolist() == [float(m) for m in ep.mask]
        with torch.no_grad():
            lp, _ = logprobs.completion_logprobs(model, batch, torch.device("cpu"))
        keep = [j for j, m in enumerate(ep.mask) if m]
        assert lp[0, keep].tolist() == pytest.approx([ep.logprobs[j] for j in keep], abs=1e-4)
        assert all(lp[0, j] == 0 for a, b in env_spans for j in range(a, b))


def test_higher_lower_and_retry_answer_each_attempt():
    from vigor_cli.episodes.attempts import HigherLower, Retry
    from vigor_cli.tasks.base import Example
    from vigor_cli.tasks.tiny_guess import TinyGuessTask

    task = TinyGuessTask()
    ex = Example("u", "q", "5")
    eps = [Episode([], [], text, False) for text in ("\\boxed{2}", "\\boxed{7}", "\\boxed{5}", "five")]
    said = [r.messages[0]["content"] if r.messages else r.ended for r in HigherLower(task).answer(eps, [ex] * 4, False)]
    assert said == [HIGHER, LOWER, CORRECT, NOT_A_NUMBER]
    assert [r.ended for r in HigherLower(task).answer(eps, [ex] * 4, True)] == [MAX_TURNS, MAX_TURNS, CORRECT, MAX_TURNS]
    assert HigherLower(task).answer(eps[:1], [Example("w", "q", "x")], False)[0].ended == ENV_ERROR
    said = [r.messages[0]["content"] if r.messages else r.ended for r in Retry(task).answer(eps, [ex] * 4, False)]
    assert said == [WRONG, WRONG, CORRECT, WRONG]


# --------------------------------------------------------------------------- chat templates
def test_messages_follow_the_chat_template_after_the_turns_stop_token(policy):
    tok = copy.deepcopy(policy[1])
    tok.chat_template = CHATML
    fmt = MessageFormat(tok, [tok.eos_token_id], lambda t: t)
    eos = tok.eos_token
    assert tok.decode(fmt.encode([{"role": "user", "content": "test 1 failed"}])) == (
        f"\n<|im_start|>user\ntest 1 failed{eos}\n<|im_start|>assistant\n")
    assert tok.decode(fmt.encode([{"role": "tool", "name": "guess", "content": "higher"}])) == (
        f"\n<|im_start|>tool\nhigher{eos}\n<|im_start|>assistant\n")
    # the prompt: the tools in the template, reset's observation at the end of the user message
    task = get_task(build_config(sets=["task.name=tiny-guess"]).task)
    env = type("Env", (episode_base.Environment,), {"start": None, "answer": None,
                                                     "template_kwargs": lambda self: {"tools": [_SCHEMA]}})()
    text = render_prompt(task, task.train_examples()[0], tok, env, observation=" (7 is too big)")
    assert text.startswith(f"<|im_start|>system\nTools: guess{eos}\n<|im_start|>user\n")
    assert text.endswith(f"I will say whether my number is higher or lower. (7 is too big){eos}\n<|im_start|>assistant\n")


_SCHEMA = {"type": "function", "function": {"name": "guess", "description": "Guess.", "parameters": {"type": "object", "properties": {}}}}


# --------------------------------------------------------------------------- the config
@pytest.mark.parametrize("sets,message", [
    (["task.max_turns=2"], "task.max_turns is read only with task.env"),
    (["task.env=code-feedback"], "task.env=code-feedback works with the tasks tiny-code, code, not 'tiny-math'"),
    (["task.env=nosuch"], "unknown environment 'nosuch'; built-in: code-feedback, higher-lower, retry, calculator, or FILE.py:Factory"),
    (["task.env=game.py"], "an environment file is given as FILE.py:Factory"),
    (["task.env=retry", "task.max_episode_tokens=1"], "task.max_episode_tokens"),
])
def test_config_rules_name_the_key(sets, message):
    from vigor_cli.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config(sets=sets)


def test_an_episode_budget_sizes_the_rows():
    cfg = build_config(sets=["task.env=retry", "task.max_turns=2", "sampling.max_new_tokens=100"])
    assert cfg.completion_tokens() == 400  # 2 turns x 100, and as much again for the answers
    assert build_config(sets=["task.env=retry", "task.max_episode_tokens=300"]).completion_tokens() == 300
    assert build_config(sets=["sampling.max_new_tokens=100"]).completion_tokens() == 100
    with pytest.raises(UserError, match=r"engine.gen_batch_tokens \(600\) must hold one row: task.max_prompt_tokens "
                                        r"\+ task.max_episode_tokens \(64 \+ 900\)"):
        build_config(sets=["task.env=retry", "task.max_episode_tokens=900", "engine.gen_batch_tokens=600",
                           "task.max_prompt_tokens=64", "sampling.max_new_tokens=100", "grpo.micro_batch_tokens=1000"])


def test_cli_bad_env_is_one_line_before_anything_loads(vigor, tmp_path):
    code, out, err = vigor("train", "--env", "nosuch", "--output-dir", str(tmp_path))
    assert code == 2 and "unknown environment 'nosuch'" in err and len(err.strip().splitlines()) == 1
    code, out, err = vigor("train", "--env", f"{tmp_path}/missing.py:Game", "--dry-run")
    assert code == 2 and f"--env {tmp_path}/missing.py:Game: {tmp_path}/missing.py not found" in err
    assert not list(tmp_path.iterdir())

"""Episodes in training and evaluation: code-feedback on the real sandbox, `vigor train` with
an environment (its metrics, episodes.jsonl, completions.jsonl, the evaluation's first
attempt, inspect-allocation turn by turn), the TRL path, and the vLLM engine's turns against
the pinned release's signatures. Whole trainings are marked slow; the fast checks of the
same parts are here and in test_episodes.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vigor_cli.episodes.base import Episode, MAX_TURNS
from vigor_cli.episodes.code_feedback import NO_PROGRAM, PASSED, CodeFeedback, final_tests
from vigor_cli.settings import build_config
from vigor_cli.tasks import get_task
from vigor_cli.tasks.tiny_code import target_completion

ROOT = Path(__file__).resolve().parents[1]
GAME = ROOT / "examples" / "number-game" / "env.py"
REWARD = ROOT / "examples" / "number-game" / "reward.py"


def guess_sets(tmp_path: Path, name: str, *extra: str) -> list[str]:
    """Two quick steps of tiny-guess with higher-lower on the tiny model."""
    return ["model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-guess", "task.env=higher-lower",
            "task.max_turns=3", "task.max_episode_tokens=96", "task.max_prompt_tokens=32", "sampling.max_new_tokens=16",
            "allocation.strategy=grpo", "allocation.group_size=4", "train.prompts_per_step=4", "train.steps=2",
            "train.eval_every=0", "train.eval_limit=7", "train.save_every=0", "train.log_completions_every=1",
            "engine.kind=hf", "grpo.learning_rate=1e-3", f"train.output_dir={tmp_path}", f"train.run_name={name}",
            *extra]


# --------------------------------------------------------------------------- code-feedback
@pytest.fixture(scope="module")
def code_task():
    task = get_task(build_config(sets=["task.name=tiny-code"]).task, workers=2)
    yield task
    task.close()


def _episode(text: str) -> Episode:
    return Episode([], [], text, False)


def test_code_feedback_shows_the_first_failing_test_and_stops_on_a_pass(code_task):
    ex = next(e for e in code_task.train_examples() if "+" in e.meta["solution"])
    public = json.loads(ex.answer["public_test_cases"])
    right = target_completion(ex.meta["solution"])
    off = target_completion(ex.meta["solution"].replace("+", "+1+"))  # one too many on every test
    crash = "```python\nprint(1 // 0)\n```"
    replies = CodeFeedback(code_task).answer([_episode(t) for t in (off, crash, "no code here", right)], [ex] * 4, False)
    wrong, crashed, missing, passed = replies
    got = int(public[0]["output"]) + 1
    assert wrong.messages == [{"role": "user", "content": f"test 1: wrong answer\ninput: {public[0]['input'].strip()}\n"
                                                          f"expected: {public[0]['output'].strip()}\ngot: {got}"}]
    assert crashed.messages[0]["content"].endswith("error: ZeroDivisionError: integer division or modulo by zero")
    assert crashed.messages[0]["content"].startswith("test 1: runtime error\ninput: ")
    assert missing.messages[0]["content"] == NO_PROGRAM and not missing.done
    assert passed.done and passed.ended == PASSED and not passed.messages
    last = CodeFeedback(code_task).answer([_episode(off)], [ex], True)[0]
    assert last.done and last.ended == MAX_TURNS  # the final attempt is graded by the reward, not run here


def test_first_failures_report_the_lowest_failing_test_and_what_the_program_gave(code_task):
    from vigor_cli.verifiers.code import load_problem

    ex = code_task.train_examples()[0]
    problem = load_problem(ex.answer)
    tests = problem.tests("public")
    # right on the first public test only: the failure is the second, with the program's output
    program = f"s = input()\nprint({tests[0].output.strip()!r} if s == {tests[0].input.strip()!r} else 'nope')"
    [failure] = code_task.verifier().first_failures([(problem, program, "public")])
    assert failure.index == 1 and failure.verdict.status == "wrong_answer" and failure.got.strip() == "nope"
    assert code_task.verifier().first_failures([(problem, ex.meta["solution"], "public")]) == [None]


def test_the_final_program_is_graded_on_the_code_tasks_protocol(code_task):
    train, held = code_task.train_examples()[0], code_task.eval_examples()[0]
    assert final_tests(train, code_task) == "all"  # tiny-code's training problems are not evaluated
    assert final_tests(held, code_task) == "private"
    env = CodeFeedback(code_task)
    # under the default (disjoint) protocol training problems are rewarded on all their tests already
    assert train.meta["tests"] == "all" and env.scoring_example(train).meta["tests"] == final_tests(train, code_task)
    assert env.scoring_example(held).meta["tests"] == "private"


# --------------------------------------------------------------------------- vigor train
@pytest.mark.slow
def test_vigor_train_with_an_environment_logs_episodes(trained, tmp_path, vigor):
    run = trained.get(guess_sets(tmp_path, "guess"))
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "eval/accuracy" not in m]
    evals = [m for m in lines if "eval/accuracy" in m]
    assert len(steps) == 2
    for m in steps:
        ended = {k: v for k, v in m.items() if k.startswith("episodes/ended/")}
        assert sum(ended.values()) == m["rollouts/step"] == 16
        assert 1 <= m["episodes/turns/mean"] <= m["episodes/turns/max"] <= 3
        assert m["episodes/model_tokens"] == m["tokens/step"] and m["episodes/env_tokens"] > 0
    assert all("eval/tiny-guess/first_attempt" in m for m in evals)
    episodes = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert [sum(e["step"] == s for e in episodes) for s in (1, 2)] == [16, 16]
    e = episodes[0]
    assert {"uid", "index", "round", "reward", "in_update", "turns", "ended", "model_tokens", "env_tokens",
            "messages"} <= set(e)
    assert len([m for m in e["messages"] if m["role"] == "assistant"]) == e["turns"]
    completions = [json.loads(x) for x in (run / "completions.jsonl").read_text().splitlines()]
    assert completions and all("messages" in c and "ended" in c for c in completions)
    held = json.loads((run / "eval" / "step-2.json").read_text())["sets"]["tiny-guess"]
    assert "first_attempt" in held["metrics"] and all("episode" in s and "first_reward" in s for s in held["samples"])
    # inspect-allocation: the step's episodes turn by turn
    code, out, err = vigor("inspect-allocation", str(run), "--step", "2", "--episodes", "2")
    assert code == 0, err
    assert "episodes of step 2" in out and " model " in out and " env " in out
    code, out, err = vigor("inspect-allocation", str(run), "--step", "2", "--json")
    assert code == 0 and len(json.loads(out)["steps"][0]["episodes"]) == 4  # one per prompt
    # vigor eval scores single completions: said, never silently
    code, out, err = vigor("eval", "--run", str(run), "--benchmarks", "tiny-guess", "--limit", "2")
    assert code == 0, err
    assert "trained with an environment (task.env=higher-lower); vigor eval scores one completion" in err


@pytest.mark.slow
def test_vigor_train_runs_a_trl_environment_class_with_a_users_reward(tmp_path):
    from vigor_cli.train.trainer import train
    from test_trainer import quiet

    data = tmp_path / "games.jsonl"
    data.write_text("".join(f'{{"prompt": "Guess my number (1-7)=", "answer": {k}}}\n' for k in range(1, 8)))
    sets = [s for s in guess_sets(tmp_path, "game") if not s.startswith(("task.name", "task.env"))]
    cfg = build_config(sets=[*sets, "task.name=custom", f"task.data={data}", f"task.rewards=[{REWARD}:few_guesses]",
                             f"task.env={GAME}:NumberGame", "train.eval_limit=2", "train.steps=1",
                             "task.max_prompt_tokens=192"])
    summary = train(cfg, out=quiet())
    run = Path(summary["run_dir"])
    [step] = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "eval/" not in x]
    # the tiny model writes no tool call: each episode ends with its first turn; both rewards
    # ran (the user's read the instances: environments=), and no game was won
    ended = {k: v for k, v in step.items() if k.startswith("episodes/ended/")}
    assert step["episodes/turns/max"] == 1 and sum(ended.values()) == 16
    assert step["reward/NumberGame/mean"] == 0.0 and step["reward/few_guesses/mean"] == 0.0
    first = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])
    assert first["ended"] in ("answered", "truncated", "bad_tool_call") and first["reward"] == 0.0


@pytest.mark.slow
def test_vigor_train_with_code_feedback(tmp_path):
    from vigor_cli.train.trainer import train
    from test_trainer import quiet

    cfg = build_config(sets=[
        "model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-code", "task.env=code-feedback",
        "task.max_turns=2", "task.max_prompt_tokens=64", "sampling.max_new_tokens=48", "allocation.strategy=grpo",
        "allocation.group_size=4", "train.prompts_per_step=4", "train.steps=2", "train.eval_every=0",
        "train.eval_limit=6", "train.save_every=0", "engine.kind=hf", "train.reward_workers=2",
        f"train.output_dir={tmp_path}", "train.run_name=code"])
    run = Path(train(cfg, out=quiet())["run_dir"])
    episodes = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 32 and {e["ended"] for e in episodes} <= {"passed", "max_turns", "truncated", "token_budget"}
    fed = [e for e in episodes if e["turns"] == 2]
    assert fed and all(e["messages"][1]["role"] == "user" and e["messages"][1]["content"].startswith(("test ", "No program"))
                       for e in fed)
    assert all(e["reward"] is not None for e in episodes)
    held = json.loads((run / "eval" / "step-2.json").read_text())["sets"]["tiny-code"]["metrics"]
    assert held["first_attempt"]["pass@k"]["1"] <= held["pass@k"]["1"]


# --------------------------------------------------------------------------- the TRL path
@pytest.mark.slow
def test_trl_path_trains_episodes_with_the_environment_tokens_masked(tmp_path):
    pytest.importorskip("trl")
    from vigor_cli.integrations.trl import build_trainer

    cfg = build_config(sets=[*guess_sets(tmp_path, "trl", "train.steps=1"), "train.eval_every=0"])
    trainer, held_out, task = build_trainer(cfg, tmp_path / "out", use_cpu=True)
    handed = []
    real = trainer._generate_and_score_completions

    def spy(inputs):
        out = real(inputs)
        if trainer.model.training:
            handed.append(out)
        return out

    trainer._generate_and_score_completions = spy
    try:
        trainer.train()
    finally:
        task.close()
    [out] = handed
    round_episodes = trainer.vigor_episodes.round  # grpo: one round, its rows in order
    masks, ids = out["tool_mask"].tolist(), out["completion_ids"].tolist()
    assert len(round_episodes) == len(masks) == 16
    for ep, mask, row in zip(round_episodes, masks, ids):
        n = len(ep.token_ids)
        assert row[:n] == ep.token_ids and mask[:n] == ep.mask  # TRL's loss skips the environment's tokens
    assert any(0 in ep.mask for ep in round_episodes)
    lines = [json.loads(x) for x in (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()]
    assert [e["turns"] for e in lines] == [ep.turns for ep in round_episodes]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "episodes/turns/mean" in m)
    assert step["episodes/env_tokens"] == sum(ep.env_tokens for ep in round_episodes)


@pytest.mark.slow
def test_trl_environment_factory_argument_takes_a_trl_class(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.integrations.trl import VigorGRPOTrainer
    from vigor_cli.user.rewards import import_function
    from vigor_cli.model.tiny import TINY_DIR
    from test_trl_integration import _args

    game = import_function(f"{GAME}:NumberGame", flag="--env")
    few = import_function(f"{REWARD}:few_guesses")
    seen = []

    def record(completions, environments, **kwargs):
        seen.append([type(e).__name__ for e in environments])
        return few(completions=completions, environments=environments)

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    data = Dataset.from_list([{"prompt": "Guess my number (1-7)=", "answer": k, "uid": f"g{k}"} for k in range(1, 5)])
    args = _args(tmp_path, vigor={"strategy": "grpo", "group_size": 2}, prompts_per_step=4, max_steps=1,
                 per_device_train_batch_size=2, num_generations=2)
    args.max_tool_calling_iterations = 1  # two turns at most (TRL's key)
    trainer = VigorGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR), reward_funcs=[record],
                               args=args, train_dataset=data, processing_class=tok, environment_factory=game)
    assert trainer.reward_func_names == ["record", "NumberGame"]  # get_reward: one more function, as TRL adds it
    assert trainer.vigor_episodes.limits.max_turns == 2
    trainer.train()
    assert seen and all(names == ["NumberGame"] * len(names) for names in seen)
    logged = [h for h in trainer.state.log_history if "rewards/NumberGame/mean" in h]
    assert logged


@pytest.mark.slow
def test_trls_own_trainer_takes_the_same_class(tmp_path):
    """The fixture class is TRL's kind: TRL's GRPOTrainer probes it, builds its tool schema and
    adds its get_reward (a tool-calling chat template on the tiny tokenizer: TRL's Qwen2.5)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from vigor_cli.user.rewards import import_function
    from vigor_cli.model.tiny import TINY_DIR

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    tok.chat_template = qwen2_5_chat_template
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "Guess."}], "answer": 3}])
    trainer = trl.GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR),
                              reward_funcs=[import_function(f"{REWARD}:few_guesses")],
                              args=trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none",
                                                  per_device_train_batch_size=2, num_generations=2, max_steps=1),
                              train_dataset=data, processing_class=tok,
                              environment_factory=import_function(f"{GAME}:NumberGame", flag="--env"))
    assert [t.__name__ for t in trainer.tools] == ["guess"] and trainer.reward_func_names[-1] == "NumberGame"


# --------------------------------------------------------------------------- the vLLM engine
def test_vllm_engine_generates_each_turn_for_the_batch_with_its_prefix_cached():
    from test_vllm_engine import _base, _cfg, _tokenizer
    from vllm_stand_in import stand_in_api

    from vigor_cli.episodes.base import Environment, Reply, Start
    from vigor_cli.episodes.loop import EpisodeLimits, EpisodeRunner
    from vigor_cli.episodes.messages import MessageFormat
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.vllm import VLLMEngine

    checkpoint = _checkpoint_for_vllm()
    model = _base(checkpoint)
    cfg = _cfg()
    cfg.task.env, cfg.task.max_turns, cfg.task.max_episode_tokens = "retry", 3, 40
    engine = VLLMEngine(cfg, model, _tokenizer(), vllm_api=stand_in_api({n for n, _ in model.named_parameters()}))
    assert engine.llm.init_kwargs["max_model_len"] == 128  # prompt limit + the episode's tokens, capped
    seen = []
    real = engine.llm.generate
    engine.llm.generate = lambda prompts, params, **kw: seen.append([p["prompt_token_ids"] for p in prompts]) or real(prompts, params, **kw)

    class Talker(Environment):
        name = "talker"

        def start(self, examples):
            return [Start() for _ in examples]

        def answer(self, episodes, examples, last):
            return [Reply(done=last, messages=[{"role": "user", "content": "t7 t8"}]) for _ in episodes]

    fmt = MessageFormat(_tokenizer(), [1], lambda text: text)
    runner = EpisodeRunner(engine, Talker(), fmt, EpisodeLimits(3, 40), lambda ex, obs: [])
    groups = runner.run(["a", "b"], [2, 2], SamplingParams(max_new_tokens=6, seed=4), prompt_ids=[[2, 3], [4, 5, 6]])
    episodes = [ep for g in groups for ep in g]
    generates = [c for c in engine.llm.calls if c[0] == "generate"]
    assert len(generates) == len(seen) <= 3 and seen[0] == [[2, 3], [2, 3], [4, 5, 6], [4, 5, 6]]
    assert all(n == [1] * len(n) for _, n in generates)  # one request per active episode each turn
    assert ("reset_prefix_cache",) not in engine.llm.calls[engine.llm.calls.index(generates[0]):]
    for earlier, later in zip(seen, seen[1:]):  # each turn's prompt extends that episode's last one
        assert all(any(p[: len(q)] == q for q in earlier) for p in later)
    for ep in episodes:
        assert len(ep.logprobs) == len(ep.token_ids) and ep.model_tokens > 0
        assert all(lp < 0 for lp, m in zip(ep.logprobs, ep.mask) if m)  # the engine's, per model token


_CHECKPOINT: list[Path] = []


def _checkpoint_for_vllm() -> Path:
    """The vLLM tests' small Qwen2 checkpoint (test_vllm_engine.py's shape), made once."""
    import tempfile

    from transformers import Qwen2Config, Qwen2ForCausalLM
    from vllm_stand_in import EOS, VOCAB
    from test_vllm_engine import _tokenizer

    if not _CHECKPOINT:
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             tie_word_embeddings=False, eos_token_id=EOS, pad_token_id=0)
        path = Path(tempfile.mkdtemp(prefix="vigor-vllm-"))
        Qwen2ForCausalLM(config).save_pretrained(path)
        _tokenizer().save_pretrained(path)
        _CHECKPOINT.append(path)
    return _CHECKPOINT[0]


# --------------------------------------------------------------------------- fast checks of the slow ones
def test_inspect_allocation_prints_a_steps_episodes_turn_by_turn():
    from rich.console import Console

    from vigor_cli.report.episodes_view import by_prompt, print_episodes

    rows = [{"step": 3, "uid": "p1", "index": i, "round": 1, "reward": r, "in_update": True, "turns": 2,
             "ended": "correct", "error": None, "model_tokens": 9, "env_tokens": 5,
             "messages": [{"role": "assistant", "content": "\\boxed{4}"}, {"role": "user", "content": "Higher. Guess again"},
                          {"role": "assistant", "content": "\\boxed{6}", "tool_calls": [{"function": {"name": "guess"}}]}]}
            for i, r in enumerate([1.0, None])]
    assert [len(v) for v in by_prompt(rows, 1).values()] == [1]
    console = Console(width=200, record=True)
    print_episodes(console, 3, rows, 2, 100)
    text = console.export_text()
    assert "p1 #0 (round 1): 2 turns, ended correct; reward 1.00, in the update" in text
    assert "reward unscored" in text
    assert "     1 model \\boxed{4}" in text and "     2 env   Higher. Guess again" in text and "[calls guess]" in text


def test_trl_environment_limits_and_refusals():
    from types import SimpleNamespace

    from vigor_cli.integrations.trl_episodes import TOOL_TURNS_UNSET, factory_environment, limits_from_trl

    limits, per_turn = limits_from_trl(SimpleNamespace(max_tool_calling_iterations=2, max_completion_length=300))
    assert (limits.max_turns, limits.max_tokens, per_turn) == (3, 300, 300)
    assert limits_from_trl(SimpleNamespace(max_tool_calling_iterations=None, max_completion_length=9))[0].max_turns == TOOL_TURNS_UNSET
    with pytest.raises(ValueError, match="takes one environment_factory"):
        factory_environment({"a": object, "b": object}, None, 1.0)


@pytest.mark.slow
def test_an_episodes_lines_and_eval_sample_format():
    from vigor_cli.evaluate.evaluation import SampleResult
    from vigor_cli.train.rollout_core import Sample
    from vigor_cli.train.log import episode_lines

    ep = Episode([5, 6, 7], [-0.1, 0.0, -0.2], "b", False, mask=[1, 0, 1], ended="correct",
                 messages=[{"role": "assistant", "content": "a"}, {"role": "user", "content": "x" * 3000},
                           {"role": "assistant", "content": "b"}])
    [line] = episode_lines(4, [Sample("u", ep, 1.0, "correct", 0, index=2, in_update=True)])
    assert (line["step"], line["uid"], line["index"], line["round"], line["turns"], line["model_tokens"],
            line["env_tokens"], line["ended"]) == (4, "u", 2, 1, 2, 2, 1, "correct")
    assert len(line["messages"][1]["content"]) == 2003  # cut at 2000 characters, marked
    plain = SampleResult("u", 0, "t", 1.0, "ok", False, 3)
    assert "episode" not in plain.to_json() and "first_reward" not in plain.to_json()


@pytest.mark.slow
def test_a_resumed_run_with_an_environment_continues_as_if_never_stopped(tmp_path):
    from vigor_cli.train.trainer import train
    from test_trainer import quiet, strip_times

    whole = Path(train(build_config(sets=guess_sets(tmp_path, "whole", "train.steps=4", "train.save_every=2")),
                       out=quiet())["run_dir"])
    part = Path(train(build_config(sets=guess_sets(tmp_path, "part", "train.steps=2", "train.save_every=2")),
                      out=quiet())["run_dir"])
    train(resume=part, steps=4, out=quiet())
    read = lambda run, name: [json.loads(x) for x in (run / name).read_text().splitlines()]  # noqa: E731
    steps = lambda run: [m for m in strip_times(read(run, "metrics.jsonl")) if "eval/accuracy" not in m]  # noqa: E731
    assert steps(part) == steps(whole)  # (the finished part evaluated at its end, step 2, too)
    assert read(part, "episodes.jsonl") == read(whole, "episodes.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["vigor", "auto"])
def test_multi_round_strategies_count_episodes_as_rollouts(tmp_path, strategy):
    from vigor_cli.train.trainer import train
    from test_trainer import quiet

    sets = [s for s in guess_sets(tmp_path, strategy, "train.steps=1") if not s.startswith("allocation.")]
    run = Path(train(build_config(sets=[*sets, f"allocation.strategy={strategy}", "allocation.rollouts_per_prompt=4",
                                        "train.eval_limit=2"]), out=quiet())["run_dir"])
    [record] = [json.loads(x) for x in (run / "allocation.jsonl").read_text().splitlines()]
    episodes = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert record["totals"]["rollouts"] == len(episodes)
    for p in record["prompts"]:  # each prompt's rewards per round are its episodes', in order
        told = [r for rd in p["rounds"] for r in rd["rewards"]]
        mine = [e for e in episodes if e["uid"] == p["uid"]]
        assert [e["index"] for e in mine] == list(range(len(mine))) and len(told) == len(mine)

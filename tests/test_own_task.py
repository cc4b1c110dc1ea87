"""Your own task (task 'custom'): data in every format, column mapping, chat prompts, reward
functions with TRL's signature, None, weights, the refused-key rule, --dry-run, --eval-data."""

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

ROWS = [
    {"prompt": "ab=", "word": "ab", "answer": "2"},
    {"prompt": "abc=", "word": "abc", "answer": "3"},
    {"prompt": "x=", "word": "x", "answer": "007"},
]
"""Text-only rows: every format (CSV included) holds them exactly."""

LENGTH_REWARD = '''
import re

def length(prompts, completions, word, **kwargs):
    out = []
    for text, w in zip(completions, word):
        m = re.search(r"\\\\boxed\\{(\\d+)\\}", text)
        out.append(0.0 if m is None else float(int(m.group(1)) == len(w)))
    return out
'''


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "reward.py"
    path.write_text(LENGTH_REWARD)
    return path


def custom(data, *specs, **keys) -> CustomTask:
    cfg = TaskConfig(name="custom", data=str(data), rewards=[str(s) for s in specs], **keys)
    return get_task(cfg)


def write_format(tmp_path: Path, kind: str, rows: list[dict]) -> str:
    """``rows`` in format ``kind``; the path (or PATH:SPLIT) to give --data."""
    from datasets import Dataset, DatasetDict

    if kind == "jsonl":
        p = tmp_path / "d.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif kind == "json-array":
        p = tmp_path / "d.json"
        p.write_text(json.dumps(rows, indent=1))
    elif kind == "json-lines":
        p = tmp_path / "d.json"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif kind in ("csv", "tsv"):
        import csv

        p = tmp_path / f"d.{kind}"
        with p.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="," if kind == "csv" else "\t")
            w.writeheader()
            w.writerows(rows)
    elif kind == "parquet":
        p = tmp_path / "d.parquet"
        Dataset.from_list(rows).to_parquet(str(p))
    elif kind == "save_to_disk":
        p = tmp_path / "saved"
        Dataset.from_list(rows).save_to_disk(str(p))
    elif kind == "save_to_disk-dict":
        p = tmp_path / "saved-dict"
        DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list(rows[:1])}).save_to_disk(str(p))
    elif kind == "hub-folder":  # a hub dataset's layout, downloaded: data/<split>-*.parquet
        p = tmp_path / "hub-style"
        (p / "data").mkdir(parents=True)
        Dataset.from_list(rows).to_parquet(str(p / "data" / "train-00000-of-00001.parquet"))
        Dataset.from_list(rows[:1]).to_parquet(str(p / "data" / "test-00000-of-00001.parquet"))
        (p / "README.md").write_text("---\nlicense: mit\n---\n# a dataset\n")
    else:
        raise AssertionError(kind)
    return str(p)


FORMATS = ["jsonl", "json-array", "json-lines", "csv", "tsv", "parquet", "save_to_disk", "save_to_disk-dict",
           "hub-folder"]


# --------------------------------------------------------------------------- data formats
@pytest.mark.parametrize("kind", FORMATS)
def test_every_format_gives_the_same_examples(tmp_path, reward_file, kind):
    task = custom(write_format(tmp_path, kind, ROWS), f"{reward_file}:length")
    examples = task.train_examples()
    assert [e.meta["prompt"] for e in examples] == ["ab=", "abc=", "x="]
    assert [e.meta["columns"] for e in examples] == [{"word": r["word"], "answer": r["answer"]} for r in ROWS]
    assert [e.answer for e in examples] == ["2", "3", "007"]  # CSV too: '007' stays text
    scores = task.score(examples, ["\\boxed{2}", "\\boxed{4}", "\\boxed{1}"])
    assert [s.reward for s in scores] == [1.0, 0.0, 1.0]


def test_a_folder_with_splits_gives_train_for_data_and_test_for_eval(tmp_path, reward_file):
    folder = write_format(tmp_path, "hub-folder", ROWS)
    task = custom(folder, f"{reward_file}:length", eval_data=folder)
    assert len(task.train_examples()) == 3 and len(task.eval_examples()) == 1
    assert task.tables["train"].split == "train" and task.tables["eval"].split == "test"
    assert len(read_table(f"{folder}:test", key="--data").rows) == 1  # PATH:SPLIT
    with pytest.raises(UserError, match=r"no split 'dev' \(splits: train, test\)"):
        read_table(f"{folder}:dev", key="--data")
    saved = write_format(tmp_path, "save_to_disk-dict", ROWS)
    assert len(read_table(saved, key="--eval-data", purpose="eval").rows) == 1


def test_a_hub_id_goes_through_the_offline_probe(monkeypatch):
    from vigor_cli import hub

    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(hub, "unreachable", lambda: "the hub cannot be reached (offline?)")
    with pytest.raises(UserError) as err:
        read_table("someone/word-lengths:train", key="--data")
    message = str(err.value)
    assert "someone/word-lengths" in message and "offline" in message and "--data" in message
    with pytest.raises(UserError, match="data file not found"):  # a missing local path is not a hub id
        read_table("data/train.jsonl", key="--data")


def test_bad_files_are_one_line_naming_file_and_line_or_row(tmp_path, reward_file):
    spec = f"{reward_file}:length"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a=", "word": "a"}\n{"prompt": "b=", "word": \n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: not valid JSON"):
        custom(bad, spec).train_examples()
    bad.write_text('{"prompt": "a=", "word": "a"}\n{"word": "b"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: no prompt \(field 'prompt' is missing or null\)"):
        custom(bad, spec).train_examples()
    bad.write_text('{"prompt": "a=", "word": "a"}\n{"prompt": "b="}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: missing field 'word' \(reward .*:length needs it\)"):
        custom(bad, spec).train_examples()
    csv = tmp_path / "bad.csv"
    csv.write_text('prompt,answer\n"a=,1\n')
    with pytest.raises(UserError, match=r"bad.csv:2: not CSV this tool reads \(unexpected end of data\) "
                                        r"\(a quote opened there is never closed\?\)"):
        custom(csv, "math").train_examples()
    csv.write_text("prompt,answer\na=,1\nb=,\n")  # an empty cell is null: the verifier has no gold
    with pytest.raises(UserError, match=r"bad.csv row 2: field 'answer' is null \(reward math grades against it\)"):
        custom(csv, "math").train_examples()
    with pytest.raises(UserError, match="unsupported file type '.txt'"):
        (tmp_path / "d.txt").write_text("x")
        custom(tmp_path / "d.txt", spec).train_examples()


# --------------------------------------------------------------------------- column mapping
@pytest.mark.slow
def test_fields_map_prompt_answer_and_a_reward_column(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "2+2=", "target": "4", "w": "abcd"}) + "\n")
    (tmp_path / "r.py").write_text("def f(prompts, completions, target_word):\n"
                                   "    return [float(len(t)) for t in target_word]\n")
    task = custom(data, "math", f"{tmp_path / 'r.py'}:f",
                  fields={"prompt": "question", "answer": "target", "target_word": "w"})
    [ex] = task.train_examples()
    assert (ex.meta["prompt"], ex.answer, ex.meta["columns"]["target_word"]) == ("2+2=", "4", "abcd")
    try:
        [score] = task.score([ex], ["\\boxed{4}"])
    finally:
        task.close()
    assert score.components == {"math": 1.0, "f": 4.0} and score.reward == 5.0
    with pytest.raises(UserError, match=r"--answer-field solution: .* has no column 'solution' \(columns: question, target, w\)"):
        custom(data, "math", fields={"prompt": "question", "answer": "solution"}).train_examples()
    with pytest.raises(UserError, match=r"no 'prompt' column \(columns: question, target, w\); name the prompt column with --prompt-field"):
        custom(data, "math", fields={"answer": "target"}).train_examples()
    with pytest.raises(UserError, match=r"reward math needs column 'answer'.*lacks.*--answer-field"):
        custom(data, "math", fields={"prompt": "question"}).train_examples()


def test_prompt_template_fills_columns(tmp_path, reward_file):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"word": "abc"}) + "\n")
    [ex] = custom(data, f"{reward_file}:length", prompt_template="letters in {word}= {{x}}").train_examples()
    assert ex.meta["prompt"] == "letters in abc= {x}" and ex.meta["columns"] == {"word": "abc"}
    with pytest.raises(UserError, match=r"d.jsonl:1: no column 'nope' for task.prompt_template"):
        custom(data, f"{reward_file}:length", prompt_template="{nope}").train_examples()
    for bad in ("{", "a}b", "{}"):
        with pytest.raises(ValueError, match="task.prompt_template"):
            build_config(sets=["task.name=custom", "task.data=d", "task.rewards=[math]",
                               f"task.prompt_template='{bad}'"])


# --------------------------------------------------------------------------- chat prompts
@pytest.fixture(scope="module")
def tokenizers():
    """The tiny tokenizer as shipped (no chat template) and with a small one."""
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(str(TINY_DIR))
    chat = AutoTokenizer.from_pretrained(str(TINY_DIR))
    chat.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}<assistant>{% endif %}")
    return plain, chat


def test_message_prompts_with_a_system_message(tmp_path, tokenizers):
    plain, chat = tokenizers
    messages = [{"role": "system", "content": "Count letters."}, {"role": "user", "content": "abc"}]
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": messages, "word": "abc"}) + "\n")
    seen = tmp_path / "seen.json"
    (tmp_path / "r.py").write_text(
        "import json\n"
        f"def f(prompts, completions, word, **kw):\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps([prompts, completions, word]))\n"
        "    return [1.0 for _ in completions]\n")
    task = custom(data, f"{tmp_path / 'r.py'}:f")
    [ex] = task.train_examples()
    assert task.render_prompt(ex, chat) == "<system>Count letters.\n<user>abc\n<assistant>"
    assert task.render_prompt(ex, plain) == "Count letters.\n\nabc"  # no template: contents joined
    assert ex.question == "abc"
    task.score([ex], ["\\boxed{3}"])
    # TRL's convention: the prompt as the data gave it; a conversational completion as messages
    assert json.loads(seen.read_text()) == [[messages], [[{"role": "assistant", "content": "\\boxed{3}"}]], ["abc"]]
    with pytest.raises(UserError, match=r"d.jsonl:1: the prompt already has a system message"):
        custom(data, f"{tmp_path / 'r.py'}:f", system_prompt="Be brief.").train_examples()


def test_system_prompt_and_the_chat_template_rule_for_text_prompts(tmp_path, reward_file, tokenizers):
    plain, chat = tokenizers
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "abc=", "word": "abc"}) + "\n")
    spec = f"{reward_file}:length"
    [ex] = (task := custom(data, spec)).train_examples()
    assert task.render_prompt(ex, chat) == "abc=" == task.render_prompt(ex, plain)  # text: as is (TRL)
    [ex] = (task := custom(data, spec, chat_template=True)).train_examples()
    assert task.render_prompt(ex, chat) == "<user>abc=\n<assistant>"
    with pytest.raises(UserError, match="task.chat_template=true, but the model's tokenizer has no chat template"):
        task.render_prompt(ex, plain)
    [ex] = (task := custom(data, spec, system_prompt="Count.")).train_examples()
    assert ex.meta["prompt"] == [{"role": "system", "content": "Count."}, {"role": "user", "content": "abc="}]
    assert task.render_prompt(ex, chat) == "<system>Count.\n<user>abc=\n<assistant>"
    assert task.render_prompt(ex, plain) == "Count.\n\nabc="
    [ex] = (task := custom(data, spec, system_prompt="Count.", chat_template=False)).train_examples()
    assert task.render_prompt(ex, chat) == "Count.\n\nabc="
    data.write_text(json.dumps({"prompt": [{"role": "user", "text": "abc"}], "word": "abc"}) + "\n")
    with pytest.raises(UserError, match=r"d.jsonl:1: the prompt \('prompt'\) is a list but not of chat messages"):
        custom(data, spec).train_examples()


# --------------------------------------------------------------------------- rewards
def test_the_signature_says_which_columns_a_reward_needs(tmp_path):
    (tmp_path / "r.py").write_text(
        "def needs(prompts, completions, word, hint=None, *, level, **kw): return [0.0] * len(completions)\n"
        "def only(prompts, completions, word): return [float(len(w)) for w in word]\n"
        "def one(prompts): return []\n"
        "def posonly(prompts, completions, word, /): return []\n"
        "def trl_style(prompts, completions, completion_ids, trainer_state=None, **kwargs): return [1.0]\n"
        "CONSTANT = 3\n")
    spec = f"{tmp_path / 'r.py'}"
    needs = rewards.load_reward(f"{spec}:needs")
    assert (needs.needs, needs.optional, needs.all_columns) == (("word", "level"), ("hint",), True)
    only = rewards.load_reward(f"{spec}:only")
    # without **kwargs a function gets only the columns it names (TRL would pass them all and fail)
    assert only(["p"], ["c"], word=["abc"], other=["x"], trainer_state=None) == [3.0]
    trl_style = rewards.load_reward(f"{spec}:trl_style")
    assert trl_style.needs == () and trl_style.__name__ == "trl_style"
    # called the way TRL calls a reward function: keywords, completion_ids and trainer_state
    assert trl_style(prompts=["p"], completions=["c"], completion_ids=[[1]], trainer_state=None) == [1.0]
    trl_utils = pytest.importorskip("trl.trainer.utils")  # how GRPOTrainer names and dispatches one
    assert trl_utils.get_callable_name(only) == "only" and not trl_utils.is_async_callable(only)
    with pytest.raises(UserError, match=r"r.py:one: the function takes \(prompts\); a reward function takes \(prompts, completions"):
        rewards.load_reward(f"{spec}:one")
    with pytest.raises(UserError, match="parameter 'word' is positional-only"):
        rewards.load_reward(f"{spec}:posonly")
    with pytest.raises(UserError, match=r"has no function 'missing' \(functions: needs, one, only, posonly, trl_style\)"):
        rewards.load_reward(f"{spec}:missing")
    with pytest.raises(UserError, match="'CONSTANT' in .* is a int, not a function"):
        rewards.load_reward(f"{spec}:CONSTANT")
    (tmp_path / "broken.py").write_text("def f(prompts, completions:\n    pass\n")
    with pytest.raises(UserError, match=r"importing .*broken.py failed \(broken.py, line 1\): SyntaxError"):
        rewards.load_reward(f"{tmp_path / 'broken.py'}:f")
    with pytest.raises(UserError, match=r"nowhere.py not found"):
        rewards.load_reward(f"{tmp_path / 'nowhere.py'}:f")


@pytest.mark.parametrize("returned, message", [
    ("[1.0]", r"returned 1 values for 2 completions"),
    ("'good'", r"returned a str; it must return a list"),
    ("[1.0, 'x']", r"returned 'x' \(str\) at index 1"),
    ("[True, 1.0]", r"returned True \(bool\) at index 0"),
    ("[1.0, float('nan')]", r"returned nan at index 1; values must be finite"),
    ("1 / 0", r"raised ZeroDivisionError: division by zero \(r.py, line 2\)"),
])
def test_a_bad_reward_is_one_line_naming_the_function(tmp_path, returned, message):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("a=", "b=")))
    (tmp_path / "r.py").write_text(f"def f(prompts, completions, **kw):\n    return {returned}\n")
    task = custom(data, f"{tmp_path / 'r.py'}:f")
    with pytest.raises(UserError) as err:
        task.score(task.train_examples(), ["x", "y"])
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"reward function {tmp_path / 'r.py'}:f ")
    assert __import__("re").search(message, text), text


def test_none_weights_and_per_reward_components(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "k": k}) + "\n" for p, k in (("a=", 0), ("b=", 1), ("c=", 2))))
    (tmp_path / "r.py").write_text(
        "import numpy as np\n"
        "def first(prompts, completions, k, **kw):\n"
        "    return [None if x == 2 else 1.0 for x in k]\n"
        "def second(prompts, completions, k, **kw):\n"
        "    return np.array([0.5, float('nan'), 0.0])[:0].tolist() + [0.5 if x == 0 else None for x in k]\n")
    r = tmp_path / "r.py"
    task = custom(data, f"{r}:first", f"{r}:second", reward_weights=[2.0, 1.0])
    scores = task.score(task.train_examples(), ["x", "y", "z"])
    # TRL's rule: the weighted sum of the values that are not None; None when none scored
    assert [s.reward for s in scores] == [2.5, 2.0, None]
    assert [s.components for s in scores] == [{"first": 1.0, "second": 0.5}, {"first": 1.0, "second": None},
                                               {"first": None, "second": None}]
    assert rewards.combine([[1.0, None], [None, None]], [1.0, 3.0]) == [1.0, None]
    assert set(task.reward_seconds()) == {"first", "second"}
    assert rewards.check_values(__import__("numpy").array([0.25, 1.0]), 2, "f") == [0.25, 1.0]


@pytest.mark.slow
def test_builtin_rewards_read_the_gold_and_grade_with_the_real_verifier(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "What is half of 1?", "answer": "\\frac{1}{2}"}) + "\n")
    task = custom(data, "math")
    try:
        [ex] = task.train_examples()
        scores = task.score([ex, ex, ex], ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{2}"])
    finally:
        task.close()
    assert [s.reward for s in scores] == [1.0, 1.0, 0.0]
    assert scores[2].reason == "wrong answer" and scores[0].components == {"math": 1.0}


@pytest.mark.slow
def test_the_code_reward_runs_the_rows_tests_in_the_sandbox(tmp_path):
    from vigor_cli.tasks import tiny_code

    record = tiny_code.TinyCodeTask(split_seed=0).train[0].answer  # a LiveCodeBench-shaped row
    family, k = record["question_title"].split("-")[1:]
    reference = tiny_code.FAMILIES[int(family)][1].format(k=int(k))
    row = {"prompt": record["question_content"], **{f: record[f] for f in
                                                    ("public_test_cases", "private_test_cases", "metadata")}}
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(row) + "\n")
    task = custom(data, "code", allow_weak_sandbox=True)
    try:
        [ex] = task.train_examples()
        good, bad = task.score([ex, ex], [f"```python\n{reference}\n```", "```python\nprint(0)\n```"])
    finally:
        task.close()
    assert (good.reward, bad.reward) == (1.0, 0.0)
    assert good.details["tests"] and len(good.details["tests"]) == tiny_code.PUBLIC_TESTS + tiny_code.PRIVATE_TESTS


# --------------------------------------------------------------------------- the config
def _unread_value(key: str):
    return {"split_seed": 3, "train_path": "x.jsonl", "data_dir": "d", "eval_sets": ["x"],
            "contest_date_start": "2024-01-01", "contest_date_end": "2024-02-01", "lcb_release": "v1",
            "code_protocol": "same-problem", "contest_date_split": "2023-01-01",
            "allow_weak_sandbox": True, "code_reward": "fraction", "data": "x.jsonl", "eval_data": "y.jsonl",
            "fields": {"prompt": "q"}, "prompt_template": "{q}", "system_prompt": "s", "chat_template": True,
            "rewards": ["math"], "reward_weights": [1.0], "reward_timeout": 5.0}[key]


@pytest.mark.parametrize("task", list(TASK_READS))
def test_every_task_refuses_the_keys_it_does_not_read(task):
    reads = set(task_reads(task))
    unread = [k for k in TaskConfig.model_fields if k not in reads | set(EVERY_TASK_KEYS) | set(EPISODE_KEYS)]
    assert unread, task
    own = ["task.data=x.jsonl", "task.rewards=[math]"] if task == "custom" else []
    build_config(sets=[f"task.name={task}", *own])  # the task alone builds
    for key in unread:
        value = json.dumps(_unread_value(key))
        with pytest.raises(ConfigError) as err:
            build_config(sets=[f"task.name={task}", *own, f"task.{key}={value}"])
        assert f"task.{key} is not read by task '{task}'" in str(err.value), str(err.value)
        assert str(err.value).startswith(f"--set task.{key}=")


def test_train_path_under_the_default_task_is_refused_not_ignored(vigor):
    """The issue's first attempt: it used to train on tiny-math, bit-identical to the default."""
    code, out, err = vigor("train", "--set", "task.train_path=my.jsonl")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "task.train_path is not read by task 'tiny-math'" in err and "--data PATH" in err
    code, _, err = vigor("train", "--task", "math", "--eval-data", "mine.jsonl")
    assert code == 2 and "task.eval_data is not read by task 'math'" in err
    code, _, err = vigor("train", "--reward", "math")
    assert code == 2 and "task.rewards is not read by task 'tiny-math'" in err


def test_custom_needs_data_and_a_reward_and_weights_match(vigor, tmp_path):
    code, _, err = vigor("train", "--data", str(tmp_path / "d.jsonl"))
    assert code == 2 and "--data" in err and "task 'custom' needs at least one reward" in err
    code, _, err = vigor("train", "--set", "task.name=custom")
    assert code == 2 and "task 'custom' needs training data: --data PATH" in err
    code, _, err = vigor("train", "--data", "d.jsonl", "--reward", "math", "--reward", "code", "--reward-weights", "1")
    assert code == 2 and "task.reward_weights has 1 weights for 2 rewards" in err
    code, _, err = vigor("train", "--data", "d.jsonl", "--reward", "maths")
    assert code == 2 and "unknown reward 'maths'" in err and "FILE.py:FUNC" in err
    code, _, err = vigor("train", "--data", "d.jsonl", "--reward", "math", "--reward-weights", "1,x")
    assert code == 2 and "--reward-weights 1,x: expected numbers" in err


def test_help_lists_the_own_task_flags(vigor):
    code, out, _ = vigor("train", "--help")
    assert code == 0
    for flag in ("--data", "--reward", "--reward-weights", "--eval-data", "--system-prompt", "--prompt-field",
                 "--answer-field", "--prompt-template"):
        assert flag in out, flag


# --------------------------------------------------------------------------- --dry-run
@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: --dry-run and bad input must stop before one starts."""
    from transformers import AutoModelForCausalLM

    def refuse(*a, **k):
        raise AssertionError("a model load started")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


def test_dry_run_reads_the_data_and_imports_the_rewards(vigor, tmp_path, reward_file, no_model):
    data = write_format(tmp_path, "jsonl", ROWS)
    code, out, err = vigor("train", "--data", data, "--reward", f"{reward_file}:length", "--reward", "math",
                           "--reward-weights", "1,0.5", "--dry-run")
    assert code == 0, err
    assert f"data: {data} (jsonl, 3 rows): columns prompt, word, answer" in out
    assert f"{data}:1: the model sees (as the model's tokenizer renders it, 3 characters):\n    | ab=\n" in out
    assert "    columns: word='ab', answer='2'" in out
    assert (f"reward length ({reward_file}:length), weight 1: needs column word; gets prompts, completions, "
            "completion_ids (token ids), trainer_state (global_step, max_steps), log_metric, log_extra, every column") in out
    assert "reward math (math), weight 0.5: needs column answer; the built-in verifier grades" in out
    assert "eval data: none (--eval-data); the first 3 training rows are evaluated" in out
    assert "memory plan" in out


@pytest.mark.parametrize("case", ["bad-line", "missing-column", "no-function", "bad-signature", "import-error"])
def test_dry_run_fails_on_a_bad_file_or_function_before_any_model(vigor, tmp_path, reward_file, no_model, case):
    data = Path(write_format(tmp_path, "jsonl", ROWS))
    spec = f"{reward_file}:length"
    if case == "bad-line":
        data.write_text(data.read_text() + "{oops\n")
        needle = f"{data}:4: not valid JSON"
    elif case == "missing-column":
        data.write_text(json.dumps({"prompt": "a="}) + "\n")
        needle = "needs column 'word'"
    elif case == "no-function":
        spec, needle = f"{reward_file}:lenght", "has no function 'lenght' (functions: length)"
    elif case == "bad-signature":
        reward_file.write_text("def length(text):\n    return []\n")  # (completions) alone is TRL's keyword call
        needle = "a reward function takes (prompts, completions, **columns)"
    else:
        reward_file.write_text("import not_a_module_anywhere\n")
        needle = "ModuleNotFoundError: No module named 'not_a_module_anywhere'"
    code, out, err = vigor("train", "--data", str(data), "--reward", spec, "--dry-run")
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert "memory plan" not in out  # it failed on the data, first


# --------------------------------------------------------------------------- evaluation
class ScriptedEngine:
    """An engine whose completion for a prompt is the scripted text (the real one needs a model)."""

    def __init__(self, tokenizer, answers: dict[str, str]):
        self.tokenizer, self.answers, self.calls = tokenizer, answers, []

    def generate(self, prompts, counts, sampling):
        from vigor_cli.rollout.base import Rollout

        self.calls.append((len(prompts), sampling.seed))
        out = []
        for ids, n in zip(prompts, counts):
            text = self.answers[self.tokenizer.decode(ids, skip_special_tokens=True)]
            out.append([Rollout([5], [0.0], text, False) for _ in range(n)])
        return out


def test_eval_data_is_scored_by_the_same_rewards_with_pass_at_k(tmp_path, tokenizers, monkeypatch, capsys):
    from vigor_cli.evaluate import evaluation
    from vigor_cli.rollout.base import SamplingParams

    plain, _ = tokenizers
    words = ["ab", "abc", "abcd", "x", "xyz"]
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
    (tmp_path / "r.py").write_text(
        "def f(prompts, completions, word, **kw):\n"
        "    return [None if w == 'x' else float(c == f'\\\\boxed{{{len(w)}}}') for c, w in zip(completions, word)]\n")
    task = custom(data, f"{tmp_path / 'r.py'}:f", eval_data=str(data), prompt_template="{word}=")
    examples = task.eval_examples()
    answers = {f"{w}=": f"\\boxed{{{len(w) if w != 'abcd' else 9}}}" for w in words}
    engine = ScriptedEngine(plain, answers)
    monkeypatch.setattr(evaluation, "CHUNK_SAMPLES", 4)  # 2 samples each: two problems per graded chunk
    seen = []
    result = evaluation.evaluate_examples(engine, task, plain, examples, 2, SamplingParams(seed=7), "custom",
                                          progress=lambda done, total, s: seen.append((done, total)))
    assert engine.calls == [(5, 7)] and seen == [(5, 5)]  # one call, one seed, however the set is graded
    # 'x' is unscored (None): out of the means, counted
    assert result.per_example == {"custom/eval/0": 1.0, "custom/eval/1": 1.0, "custom/eval/2": 0.0,
                                  "custom/eval/4": 1.0}
    assert result.accuracy == 0.75 and result.unscored == 2
    metrics = result.to_json()["metrics"]
    assert metrics["avg@n"] == 0.75 and metrics["pass@k"] == {"1": 0.75, "2": 0.75} and metrics["unscored"] == 2
    evaluation.evaluate_examples(engine, task, plain, examples, 2, SamplingParams(seed=7), "custom")
    assert capsys.readouterr().err == ""  # a quick evaluation prints no progress


def test_a_long_evaluation_prints_progress_lines_whatever_its_size(tmp_path, tokenizers, monkeypatch, capsys):
    """One chunk that generates slowly still shows progress (a timer, not the chunk count)."""
    import time as clock

    from vigor_cli.evaluate import evaluation
    from vigor_cli.rollout.base import SamplingParams

    plain, _ = tokenizers
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a="}) + "\n")
    (tmp_path / "r.py").write_text("def f(prompts, completions, **kw):\n    return [1.0] * len(completions)\n")
    task = custom(data, f"{tmp_path / 'r.py'}:f")

    class Slow(ScriptedEngine):
        def generate(self, prompts, counts, sampling):
            clock.sleep(0.5)
            return super().generate(prompts, counts, sampling)

    monkeypatch.setattr(evaluation, "PROGRESS_EVERY_S", 0.1)
    result = evaluation.evaluate_examples(Slow(plain, {"a=": "x"}), task, plain, task.eval_examples(), 3,
                                          SamplingParams(), "custom")
    lines = capsys.readouterr().err.strip().splitlines()
    assert result.accuracy == 1.0 and len(lines) >= 3, lines  # while it ran, then the end
    assert all(line.startswith("eval custom: ") and "problems x 3 samples" in line for line in lines)
    assert lines[0].startswith("eval custom: 0/1 problems") and lines[-1].startswith("eval custom: 1/1 problems")


def test_a_failing_reward_in_evaluation_names_the_set(tmp_path, tokenizers):
    from vigor_cli.evaluate.evaluation import evaluate_examples
    from vigor_cli.rollout.base import SamplingParams

    plain, _ = tokenizers
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a="}) + "\n")
    (tmp_path / "r.py").write_text("def f(prompts, completions, **kw):\n    return [1.0, 2.0]\n")
    task = custom(data, f"{tmp_path / 'r.py'}:f")
    with pytest.raises(UserError, match=r"^evaluation of custom: reward function .*r.py:f returned 2 values for 1 completions$"):
        evaluate_examples(ScriptedEngine(plain, {"a=": "x"}), task, plain, task.eval_examples(), 1,
                          SamplingParams(), "custom", progress=False)

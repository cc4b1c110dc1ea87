"""Config checks before downloads, model loading or engine start; LiveCodeBench release files;
a thinking template with a budget that would mask most rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vigor_cli.model.loading as models
import vigor_cli.tasks.loading as loading
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.train.preflight import check_static, check_tokenizer, thinking_template
from vigor_cli.tasks.code_task import LCB_HUB_ID, lcb_release_files, load_lcb

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
LCB_SAMPLE = REPO / "tests" / "fixtures" / "tasks" / "lcb_v6_sample.jsonl"
MATH_SETS = ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"]


@pytest.fixture
def nothing_loads(monkeypatch, tmp_path):
    """Model, tokenizer and hub loading fail the test."""
    def fail(*a, **k):
        pytest.fail("loaded a model, tokenizer or hub dataset before the config check")

    for name in ("load_policy", "load_tokenizer"):
        monkeypatch.setattr(models, name, fail)
    monkeypatch.setattr(loading, "load_hub", fail)


@pytest.mark.parametrize("config", ["qwen2.5-1.5b-math-vigor.yaml", "qwen2.5-1.5b-math-grpo.yaml"])
def test_1_5b_eval_sets_must_resolve_before_anything_loads(vigor, nothing_loads, tmp_path, config):
    only_math500 = _math_dir(tmp_path, ["math500"])
    code, out, err = vigor("train", "--config", str(CONFIGS / config), "--output-dir", str(tmp_path / "runs"),
                           "--set", f"task.data_dir={only_math500}")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "aime24" in lines[0] and "task.data_dir" in lines[0] and "math500." not in lines[0]
    assert not (tmp_path / "runs").exists()


def test_1_5b_eval_sets_resolve_from_the_shipped_files(nothing_loads):
    """Without task.data_dir the six sets come from the package; a lost file is named."""
    cfg = build_config(CONFIGS / "qwen2.5-1.5b-math-vigor.yaml")
    check_static(cfg)


def test_a_lost_shipped_file_is_named(nothing_loads, monkeypatch, tmp_path):
    import vigor_cli.verifiers.math_answers as math_answers

    monkeypatch.setattr(math_answers, "DEFAULT_DATA_DIR", _math_dir(tmp_path, ["math500"]))
    with pytest.raises(UserError, match=r"aime24.jsonl.*missing from the files shipped"):
        check_static(build_config(CONFIGS / "qwen2.5-1.5b-math-vigor.yaml"))


def _math_dir(tmp_path, sets):
    d = tmp_path / "math-eval"
    d.mkdir()
    for name in sets:
        (d / f"{name}.jsonl").write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    return d


def test_1_5b_eval_sets_resolve_from_a_data_dir(nothing_loads, tmp_path):
    good = _math_dir(tmp_path, MATH_SETS)
    cfg = build_config(CONFIGS / "qwen2.5-1.5b-math-vigor.yaml", sets=[f"task.data_dir={good}"])
    assert check_static(cfg) == "cpu"
    (good / "amc23.jsonl").unlink()
    with pytest.raises(UserError, match=r"task.data_dir=.*missing amc23.jsonl"):
        check_static(cfg)
    with pytest.raises(UserError, match="not a directory"):
        check_static(build_config(CONFIGS / "qwen2.5-1.5b-math-vigor.yaml", sets=[f"task.data_dir={tmp_path}/none"]))


@pytest.mark.parametrize("sets, needle", [
    (["task.eval_sets=[math501]"], "unknown math evaluation set 'math501'"),
    (["task.train_path=/no/such/file.jsonl"], "task.train_path=/no/such/file.jsonl: file not found"),
    (["task.name=tiny-math", "task.eval_sets=[aime24]"], "tiny-math has one evaluation set"),
    (["grpo.micro_batch_tokens=1024"], "grpo.micro_batch_tokens (1024) must be at least"),
    (["task.name=code", "task.lcb_release=release_v9"], "task.lcb_release='release_v9'"),
    (["task.name=code", "task.data_dir=/no/such/lcb"], "LiveCodeBench data not found"),
    (["model.load_in_4bit=true"], "needs a CUDA GPU"),
    (["engine.max_model_len=1024"], "engine.max_model_len (1024) must hold"),
    (["engine.kind=vllm"], "engine.kind=vllm needs the policy on CUDA"),
])
def test_static_errors_name_the_key(nothing_loads, sets, needle):
    with pytest.raises(UserError) as e:  # the config's own rules fail while it is built
        cfg = build_config(CONFIGS / "qwen2.5-1.5b-math-vigor.yaml", sets=["task.eval_sets=[math500]", *sets])
        check_static(cfg)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_trainer_reads_eval_sets_before_the_model(monkeypatch, tmp_path):
    """A bad evaluation file fails before the model loads (it used to fail after engine start)."""
    from vigor_cli.train.trainer import train

    def fail(*a, **k):
        pytest.fail("the model loaded before the evaluation sets were read")

    monkeypatch.setattr(models, "load_policy", fail)
    d = tmp_path / "math-eval"
    d.mkdir()
    (d / "math500.jsonl").write_text('{"problem": "1+1"}\n')  # exists, but no answer
    (tmp_path / "train.jsonl").write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    cfg = build_config(sets=["task.name=math", f"task.data_dir={d}", "task.eval_sets=[math500]",
                             f"task.train_path={tmp_path / 'train.jsonl'}", "train.prompts_per_step=1",
                             "allocation.strategy=vigor",  # auto's census needs 2 prompts per step
                             f"train.output_dir={tmp_path / 'runs'}", "engine.kind=hf"])
    with pytest.raises(UserError, match="math500.jsonl:1: missing field"):
        train(cfg)


# --------------------------------------------------------------------------- LiveCodeBench
def test_lcb_release_file_names():
    assert lcb_release_files("release_v6") == ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
    assert lcb_release_files("release_v1") == ["test.jsonl"]
    assert lcb_release_files("v6") == ["test6.jsonl"] and lcb_release_files("v1") == ["test.jsonl"]


def _release_folder(tmp_path, release="release_v6"):
    rows = [json.loads(x) for x in LCB_SAMPLE.read_text().splitlines()]
    d = tmp_path / "lcb"
    d.mkdir()
    for i, name in enumerate(lcb_release_files(release)):
        (d / name).write_text(json.dumps(dict(rows[i % len(rows)], question_id=f"q{i}")) + "\n")
    return d


def test_lcb_from_a_local_folder_of_release_files(tmp_path):
    d = _release_folder(tmp_path)
    rows = load_lcb(str(d), "LiveCodeBench problems", "--set task.data_dir=DIR")
    assert [r["question_id"] for r in rows] == [f"q{i}" for i in range(6)]
    assert [r["question_id"] for r in load_lcb(str(d), "x", "f", "v6")] == ["q5"]
    (d / "test3.jsonl").unlink()
    with pytest.raises(UserError, match="missing test3.jsonl"):
        load_lcb(str(d), "x", "f")


def test_lcb_from_the_hub_is_plain_file_downloads(tmp_path, monkeypatch):
    """Hub files through huggingface_hub, read as JSONL: no dataset script, no `datasets`."""
    import datasets
    import huggingface_hub

    d = _release_folder(tmp_path)
    asked = []

    def download(repo_id, filename, repo_type=None, **kwargs):
        asked.append((repo_id, filename, repo_type))
        return str(d / filename)

    from vigor_cli import hub

    monkeypatch.setattr(hub, "unreachable", lambda: None)  # the hub answers (tests/test_offline_hub.py: it does not)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets.load_dataset called"))
    rows = load_lcb(None, "LiveCodeBench problems", "--set task.data_dir=DIR")
    assert len(rows) == 6
    assert asked == [(LCB_HUB_ID, name, "dataset") for name in lcb_release_files("release_v6")]

    def offline(*a, **k):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load this file")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(UserError, match=r"cannot download .* file test.jsonl.*task.data_dir=DIR"):
        load_lcb(None, "LiveCodeBench problems", "--set task.data_dir=DIR")


# --------------------------------------------------------------------------- thinking
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def _qwen3_tokenizer(enable_thinking):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models.TINY_DIR)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]})
    tok.chat_template = QWEN3_TEMPLATE
    if enable_thinking is not None:  # as models.load_tokenizer does for model.enable_thinking
        tok.vigor_chat_template_kwargs = {"enable_thinking": enable_thinking}
    return tok


def test_thinking_template_detection():
    assert thinking_template(_qwen3_tokenizer(None))
    assert thinking_template(_qwen3_tokenizer(True))
    assert not thinking_template(_qwen3_tokenizer(False))
    from vigor_cli.tasks.prompts import render

    assert render(_qwen3_tokenizer(False), "q", "q").endswith("<think>\n\n</think>\n\n")


def test_thinking_with_mask_truncated_and_a_small_budget_is_refused():
    old = build_config(CONFIGS / "qwen3-8b-lcb.yaml", sets=["model.enable_thinking=null"])
    assert old.sampling.max_new_tokens == 4096 and old.grpo.mask_truncated
    with pytest.raises(UserError) as e:
        check_tokenizer(old, _qwen3_tokenizer(old.model.enable_thinking))
    for key in ("sampling.max_new_tokens=4096", "model.enable_thinking=false", "grpo.mask_truncated=false"):
        assert key in str(e.value)
    notes = []
    roomy = build_config(CONFIGS / "qwen3-8b-lcb.yaml", sets=["model.enable_thinking=true",
                                                             "sampling.max_new_tokens=16384",
                                                             "engine.gen_batch_tokens=32768"])
    check_tokenizer(roomy, _qwen3_tokenizer(True), warn=notes.append)
    assert notes and "32768" in notes[0]
    unmasked = build_config(CONFIGS / "qwen3-8b-lcb.yaml", sets=["model.enable_thinking=null",
                                                                "grpo.mask_truncated=false"])
    check_tokenizer(unmasked, _qwen3_tokenizer(None))


@pytest.mark.parametrize("config", ["qwen3-8b-lcb.yaml", "qwen3-8b-lcb-grpo.yaml"])
def test_shipped_qwen3_configs_make_sense(config):
    cfg = build_config(CONFIGS / config)
    assert cfg.model.enable_thinking is False
    notes = []
    check_tokenizer(cfg, _qwen3_tokenizer(cfg.model.enable_thinking), warn=notes.append)
    assert notes == []

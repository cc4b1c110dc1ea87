"""bench/gpu_smoke.py's verdicts at their seams, on CPU: each check passes the real code and
fails a stand-in that breaks what it checks.

The checks run on the bundled tiny model on the CPU (the script builds a Qwen2.5-1.5B-shaped
model on a GPU); the vLLM checks run the real engine against the stand-in LLM of
tests/vllm_stand_in.py. Only the GPU-bound parts are left unrun here: CUDA memory (a stand-in
meter reports what a GPU would), real vLLM kernels, bitsandbytes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from vllm_stand_in import REPO, WeightedStandInLLM, stand_in_api

import vigor_cli.rollout.weights as engine_weights

GIB = float(1 << 30)


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "bench" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = module
    spec.loader.exec_module(module)
    return module


class ConstantMeter:
    """Reports the same allocation for every measurement (what a GPU would say, chosen here)."""

    def __init__(self, gib: float):
        self.bytes = gib * GIB

    def start(self):
        pass

    def now(self):
        return self.bytes

    def peak(self):
        return self.bytes

    def reset_peak(self):
        pass

    def free_total(self):
        return None, None


@pytest.fixture(scope="module")
def random_model(tmp_path_factory) -> str:
    """The tiny model's shape with random weights (logits spread as the GPU run's random 1.5B
    model's are, so the temperature shows), saved with its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.model.loading import TINY_DIR

    config = AutoConfig.from_pretrained(TINY_DIR)
    config.initializer_range = 0.1
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("random-tiny")
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(TINY_DIR).save_pretrained(path)
    return str(path)


def _ctx(smoke, meter=None, *argv, model=None):
    args = smoke._parse(["--new-tokens", "16", "--prompt-tokens", "16", "--micro-batch-tokens", "512",
                         "--gen-batch-tokens", "512", *argv])
    return smoke.Context(model or smoke.TINY, torch.device("cpu"), args, meter or ConstantMeter(0.0))


def _verdicts(smoke):
    lines = []
    return smoke.Verdicts(say=lines.append), lines


def _by_name(v):
    return {r["check"]: r["verdict"] for r in v.rows}


# --------------------------------------------------------------------------- memory
def test_memory_verdict_by_hand(smoke):
    v, _ = _verdicts(smoke)
    assert smoke.judge_memory(v, "exact", 10 * GIB, 10 * GIB, 0.10, 0.60)
    assert smoke.judge_memory(v, "a little over", 10 * GIB, 10.9 * GIB, 0.10, 0.60)
    assert not smoke.judge_memory(v, "under-counted", 10 * GIB, 11.5 * GIB, 0.10, 0.60)
    assert not smoke.judge_memory(v, "plan far too big", 10 * GIB, 6 * GIB, 0.10, 0.60)
    assert smoke.judge_memory(v, "plan a bit big", 10 * GIB, 6.5 * GIB, 0.10, 0.60)
    assert "1.15 x the plan" in v.rows[2]["detail"]


@pytest.mark.parametrize("gib", [64.0, 0.0])  # far more than planned; nothing at all
@pytest.mark.slow
def test_memory_checks_fail_a_measurement_the_plan_does_not_match(smoke, gib):
    """The real generation, learner and update run (tiny model, CPU); the stand-in meter's
    measurement disagrees with every plan, and every memory verdict says so."""
    ctx = _ctx(smoke, ConstantMeter(gib))
    v, lines = _verdicts(smoke)
    smoke.check_memory(ctx, v)
    names = _by_name(v)
    assert set(names) == {
        "memory: one transformers generation call", "memory: one LoRA update (512 tokens)",
        "memory: full fine-tuning policy (float32 master weights)", "memory: the weight check's frozen base copy",
        "memory: one full fine-tuning update (512 tokens)", "memory: the LoRA AdamW step",
        "memory: the full fine-tuning AdamW step",
    }, lines
    assert set(names.values()) == {"FAIL"}, lines
    assert ctx.results["memory_update_full"]["grad_norm"] > 0  # the update really ran


# --------------------------------------------------------------------------- log-probs
@pytest.mark.slow
def test_logprobs_chunked_equals_full_and_a_shifted_path_fails(smoke, monkeypatch):
    v, lines = _verdicts(smoke)
    smoke.check_logprobs(_ctx(smoke), v)
    assert set(_by_name(v).values()) == {"PASS"} and len(v.rows) == 2, lines

    import vigor_cli.train.logprobs as lp_module

    real = lp_module.completion_logprobs

    def off_by_one(model, batch, device, temperature=1.0, chunk_tokens=512):
        lp, ent = real(model, batch, device, temperature, chunk_tokens)
        return torch.roll(lp, 1, dims=1), ent  # each token scored at its neighbour's position

    monkeypatch.setattr(lp_module, "completion_logprobs", off_by_one)
    v, lines = _verdicts(smoke)
    smoke.check_logprobs(_ctx(smoke), v)
    assert set(_by_name(v).values()) == {"FAIL"}, lines


# --------------------------------------------------------------------------- merge
@pytest.mark.slow
def test_merge_matches_float64_and_a_dropped_delta_fails(smoke, monkeypatch):
    v, lines = _verdicts(smoke)
    smoke.check_merge(_ctx(smoke), v)
    assert _by_name(v) == {"merge: pushed weights = base + (alpha/r)·B·A": "PASS"}, lines

    monkeypatch.setattr(engine_weights, "merged_lora_weight",
                        lambda module, path: engine_weights.dense_weight(module.get_base_layer().weight))
    v, lines = _verdicts(smoke)
    smoke.check_merge(_ctx(smoke), v)
    assert set(_by_name(v).values()) == {"FAIL"}, lines


@pytest.mark.slow
def test_merge_fails_a_weight_under_another_name(smoke, monkeypatch):
    real = engine_weights.policy_weights

    def renamed(model, dtype=torch.bfloat16):
        for name, t in real(model, dtype):
            yield name.replace("model.norm.", "model.final_norm."), t

    monkeypatch.setattr(engine_weights, "policy_weights", renamed)
    v, lines = _verdicts(smoke)
    smoke.check_merge(_ctx(smoke), v)
    assert set(_by_name(v).values()) == {"FAIL"} and "DIFFER" in lines[0], lines


# --------------------------------------------------------------------------- sampling
def _engine_that(kind):
    """An hf engine broken one way: 'raw' reports log-probs at T=1 whatever it samples at;
    'hot' samples at T=1 but reports the log-probs of the asked temperature."""
    from vigor_cli.train import logprobs
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    class Broken(HFEngine):
        def generate(self, prompts, counts, sampling):
            asked = sampling.temperature
            run = SamplingParams(1.0, sampling.top_p, sampling.max_new_tokens, sampling.seed) if kind == "hot" else sampling
            groups = super().generate(prompts, counts, run)
            score_at = 1.0 if kind == "raw" else asked
            rows = [(p, r) for p, g in zip(prompts, groups) for r in g if r.token_ids]
            batch = logprobs.make_batch([p for p, _ in rows], [r.token_ids for _, r in rows], 0)
            with torch.no_grad():
                lp, _ = logprobs.completion_logprobs(self.model, batch, torch.device("cpu"), score_at, 512)
            for k, (_, r) in enumerate(rows):
                r.logprobs = lp[k, : len(r.token_ids)].tolist()
            return groups

    return lambda model, tok: Broken(model, tok, gen_batch_tokens=4096)


@pytest.mark.slow
def test_sampling_passes_the_hf_engine_at_both_temperatures(smoke, random_model):
    ctx = _ctx(smoke, model=random_model)
    v, lines = _verdicts(smoke)
    smoke.check_sampling(ctx, v)
    assert set(_by_name(v).values()) == {"PASS"} and len(v.rows) == 4, lines
    assert ctx.results["sampling_T0.7"]["err_1"] > 2 * ctx.results["sampling_T0.7"]["err_t"]


@pytest.mark.parametrize("kind, failing", [
    ("raw", "sampling: engine log-probs are the policy's at T=0.7"),
    ("hot", "sampling: tokens follow softmax(logits/T) at T=0.7"),
])
@pytest.mark.slow
def test_sampling_fails_an_engine_with_the_wrong_temperature(smoke, random_model, kind, failing):
    v, lines = _verdicts(smoke)
    smoke.check_sampling(_ctx(smoke, model=random_model), v, engine_factory=_engine_that(kind))
    names = _by_name(v)
    assert names[failing] == "FAIL", lines
    assert all(w == "PASS" for n, w in names.items() if n.endswith("T=1.0")), lines  # T=1 cannot tell


def test_sampling_verdicts_by_hand(smoke):
    v, _ = _verdicts(smoke)
    smoke.sampling_verdicts(v, 0.7, err_t=0.01, err_1=0.3, z=1.0, threshold=0.1, z_max=4.0, tokens=100)
    smoke.sampling_verdicts(v, 0.7, err_t=0.01, err_1=0.015, z=1.0, threshold=0.1, z_max=4.0, tokens=100)
    smoke.sampling_verdicts(v, 1.0, err_t=0.01, err_1=0.01, z=-4.5, threshold=0.1, z_max=4.0, tokens=100)
    assert [r["verdict"] for r in v.rows] == ["PASS", "PASS", "FAIL", "PASS", "PASS", "FAIL"]


# --------------------------------------------------------------------------- vigor train
def _fake_train(steps_first, steps_after, code=0):
    """Stands in for the `vigor train` processes: writes the steps a run would log."""

    def run(cmd, **kw):
        if "--resume" in cmd:
            run_dir, steps = Path(cmd[cmd.index("--resume") + 1]), steps_after
        else:
            run_dir, steps = Path(cmd[cmd.index("--output-dir") + 1]) / cmd[cmd.index("--run-name") + 1], steps_first
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "metrics.jsonl", "a") as f:
            for s in steps:
                f.write(json.dumps({"step": s, "losses/loss": 0.0}) + "\n")
            f.write(json.dumps({"step": steps[-1] if steps else 0, "eval/accuracy": 0.5}) + "\n")
        return SimpleNamespace(returncode=code, stderr="", stdout="")

    return run


@pytest.mark.parametrize("first, after, code, want", [
    ([1, 2, 3], [4], 0, ["PASS", "PASS"]),
    ([1, 2, 3], [1, 2, 3, 4], 0, ["PASS", "FAIL"]),  # the resume started over
    ([1, 2], [3], 0, ["FAIL", "FAIL"]),
    ([1, 2, 3], [4], 1, ["FAIL", "FAIL"]),
])
def test_train_verdicts(smoke, first, after, code, want):
    v, lines = _verdicts(smoke)
    smoke.check_train(_ctx(smoke), v, run=_fake_train(first, after, code))
    assert [r["verdict"] for r in v.rows] == want, lines


@pytest.mark.slow
def test_train_check_runs_vigor_train_and_resume_on_the_tiny_model(smoke):
    v, lines = _verdicts(smoke)
    smoke.check_train(_ctx(smoke, None, "--timeout", "300"), v)
    assert set(_by_name(v).values()) == {"PASS"}, lines


# --------------------------------------------------------------------------- vLLM engine checks
def _run_engine(smoke, llm=WeightedStandInLLM, model=None):
    from transformers import AutoModelForCausalLM

    names = {n for n, _ in AutoModelForCausalLM.from_pretrained(smoke.TINY).named_parameters()}
    v, lines = _verdicts(smoke)
    args = smoke._parse(["--rollouts", "2", "--new-tokens", "12", "--questions", "10"])
    result = smoke.run_engine(args, False, v, vllm_api=stand_in_api(names, llm=llm), model_dir=model)
    return _by_name(v), lines, result


@pytest.mark.slow
def test_correct_engine_passes_every_check_at_both_temperatures(smoke):
    verdicts, lines, result = _run_engine(smoke)
    want = {"readback": "PASS", "memory": "SKIP"}  # no CUDA here
    for t in (1.0, 0.7):
        for name in ("step 1 not yet discriminating", "policy far from base", "engine tracks policy",
                     "check can fail (base pushed on purpose)", "engine tracks policy again"):
            want[f"{name} (T={t})"] = "PASS"
    assert verdicts == want, lines
    assert result["checks"]["pushed T=0.7"]["policy_base"] >= 0.05
    assert abs(result["checks"]["pushed T=1.0"]["is_ratio_mean"] - 1.0) < 0.05


@pytest.mark.slow
def test_dropped_lora_delta_fails(smoke, monkeypatch):
    monkeypatch.setattr(engine_weights, "merged_lora_weight",
                        lambda module, path: engine_weights.dense_weight(module.get_base_layer().weight))
    verdicts, lines, _ = _run_engine(smoke)
    assert verdicts["engine tracks policy (T=1.0)"] == verdicts["engine tracks policy (T=0.7)"] == "FAIL"
    assert verdicts["readback"] == "FAIL"
    assert any(line.startswith("FAIL  engine tracks policy (T=1.0): the engine samples from stale weights") for line in lines)


class RawLogprobsLLM(WeightedStandInLLM):
    """Samples at the asked temperature but reports the raw (T=1) log-probs, as vLLM would with
    logprobs_mode='raw_logprobs'."""

    def _request(self, prompt, sp):
        request = super()._request(prompt, sp)
        with torch.no_grad():
            for out in request.outputs:
                ids = torch.tensor([list(prompt["prompt_token_ids"]) + list(out.token_ids)])
                logits = self.hf_model(input_ids=ids).logits[0, len(prompt["prompt_token_ids"]) - 1 : -1]
                lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, -len(out.token_ids):, None])[:, 0]
                for step, t, x in zip(out.logprobs, out.token_ids, lp.tolist()):
                    step[t].logprob = x
        return request


@pytest.mark.slow
def test_raw_logprobs_fail_at_temperature_0_7_only(smoke, random_model):
    """On the random model (the GPU run's kind: spread logits) T=0.7 and T=1 log-probs differ by
    far more than the check's limit; the trained tiny model is too sure of itself to show it."""
    verdicts, lines, _ = _run_engine(smoke, llm=RawLogprobsLLM, model=random_model)
    assert verdicts["engine tracks policy (T=1.0)"] == "PASS"
    assert verdicts["engine tracks policy (T=0.7)"] == "FAIL", lines


@pytest.mark.parametrize("codes, code, want", [
    ([0, 1, 1], 0, ["PASS", "PASS"]), ([0, 0, 0], 0, ["PASS", "FAIL"]), ([0, -1], 2, ["FAIL", "FAIL"]),
])
def test_trainer_vllm_verdicts(smoke, codes, code, want):
    def run(cmd, **kw):
        run_dir = Path(cmd[cmd.index("--output-dir") + 1]) / "smoke"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": i + 1, "engine/weight_check": c}) + "\n" for i, c in enumerate(codes)))
        return SimpleNamespace(returncode=code, stderr="", stdout="")

    v, lines = _verdicts(smoke)
    smoke.run_trainer_vllm(smoke._parse([]), v, run=run)
    assert [r["verdict"] for r in v.rows] == want, lines


# --------------------------------------------------------------------------- the driver
@pytest.mark.parametrize("process", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["main", "script"])
def test_without_cuda_one_line_and_exit_3(smoke, capfd, process):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    if process:  # the script itself, in a new interpreter
        out = subprocess.run([sys.executable, "bench/gpu_smoke.py"], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
        code, text = out.returncode, out.stdout + out.stderr
    else:
        capfd.readouterr()
        code = smoke.main([])
        text = "".join(capfd.readouterr())
    assert code == 3  # distinct from 1 (a check failed) and 2 (bad arguments)
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU and did not run" in lines[0]


def test_bad_check_name_exit_2(smoke):
    with pytest.raises(SystemExit) as e:
        smoke._parse(["--only", "memory,nosuch"])
    assert e.value.code == 2


def test_driver_counts_children_and_skips_vllm_checks_it_cannot_run(smoke, monkeypatch, tmp_path):
    """With CUDA (faked) and no vllm: the core child's verdicts are collected, a child that dies
    before writing them is a FAIL, and the vLLM checks are SKIPs; the exit code follows."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(smoke, "vllm_missing", lambda: "vllm is not installed")

    def child(cmd, **kw):
        group = cmd[cmd.index("--group") + 1]
        if group == "core":
            path = Path(cmd[cmd.index("--json", cmd.index("--group")) + 1])
            path.write_text(json.dumps({"verdicts": [{"check": "logprobs", "verdict": "PASS", "detail": ""}]}))
            return SimpleNamespace(returncode=0)
        return SimpleNamespace(returncode=0)  # the build

    monkeypatch.setattr(smoke.subprocess, "run", child)
    out = tmp_path / "smoke.json"
    assert smoke.main(["--json", str(out)]) == 0
    rows = json.loads(out.read_text())["verdicts"]
    assert [(r["check"], r["verdict"]) for r in rows] == [
        ("logprobs", "PASS"), ("engine", "SKIP"), ("engine-4bit", "SKIP"), ("trainer-vllm", "SKIP")]

    def dying(cmd, **kw):
        return SimpleNamespace(returncode=-9 if "core" in cmd else 0)

    monkeypatch.setattr(smoke.subprocess, "run", dying)
    assert smoke.main(["--json", str(out), "--only", "memory"]) == 1
    assert json.loads(out.read_text())["verdicts"][-1]["verdict"] == "FAIL"


@pytest.mark.slow
def test_core_child_runs_its_checks_and_writes_its_verdicts(smoke, tmp_path):
    """The child the driver starts (--group core), on the CPU: memory is a SKIP without CUDA,
    the other checks asked for run and their verdicts land in the JSON."""
    out = tmp_path / "core.json"
    args = smoke._parse(["--only", "memory,merge", "--group", "core", "--model-dir", smoke.TINY, "--json", str(out)])
    assert smoke.run_group(args) == 0
    got = json.loads(out.read_text())
    assert [(r["check"], r["verdict"]) for r in got["verdicts"]] == [
        ("memory", "SKIP"), ("merge: pushed weights = base + (alpha/r)·B·A", "PASS")]
    assert "merge_s" in got


def test_build_model_saves_a_loadable_random_model_with_the_tiny_tokenizer(smoke, monkeypatch, tmp_path):
    """The GPU run builds Qwen2.5-1.5B's shape; here the tiny config stands in for it (same code)."""
    from vigor_cli.config import ModelConfig
    from vigor_cli.model.loading import load_policy

    monkeypatch.setattr(smoke, "SHAPE", Path(smoke.TINY))
    path = smoke.build_model(tmp_path / "m")
    model, tokenizer, _ = load_policy(ModelConfig(name_or_path=path, lora={"enabled": False}))
    trained = load_policy(ModelConfig(name_or_path="tiny", lora={"enabled": False}))[0]
    assert len(tokenizer) == 263 and model.config.hidden_size == 128
    assert not torch.equal(model.model.embed_tokens.weight, trained.model.embed_tokens.weight)  # random
    assert smoke._checkpoint_names(path) == {n for n, _ in model.named_parameters()}

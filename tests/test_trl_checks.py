"""The TRL path trains what `vigor train` trains, or refuses in one line (issue 32): the update's
KL and clip fractions reach metrics.jsonl and the health checks; completions metrics once per
step; non-finite engine log-probs kept out of TRL's correction and counted; QLoRA prepared as
`vigor train` prepares it; 4-bit with TRL's vLLM, continuous batching over float32 weights and
the engine correction without vLLM refused; vigor's warm-up and weight decay. CPU, the bundled
tiny model, TRL's real GRPOTrainer."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from test_trl_core import _trainer  # noqa: E402
from vigor_cli.commands.train import DEFAULT_CONFIG  # noqa: E402
from vigor_cli.integrations import trl_checks, trl_metrics  # noqa: E402
from vigor_cli.integrations.trl import main  # noqa: E402
from vigor_cli.model.loading import TINY_DIR  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as vigor runs a model this small (model.cpu_threads)
    yield
    torch.set_num_threads(threads)


def _finish(tr, logs=None):
    """The end of the rollout phase as Trainer.train reaches it: PhaseEnd, then log."""
    state = SimpleNamespace(global_step=1, max_steps=1)
    control = SimpleNamespace(should_log=False)
    trl_metrics.PhaseEnd(tr).on_step_end(tr.args, state, control)
    assert control.should_log
    tr.log(dict(logs or {"loss": 0.0, "grad_norm": 1.0, "learning_rate": 1e-3}))


def _lines(tr) -> list[dict]:
    return [json.loads(x) for x in (tr.vigor_run_dir / "metrics.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------- health sees TRL's KL
@pytest.mark.slow
def test_the_updates_kl_and_clipping_reach_metrics_jsonl_and_the_health_checks(tmp_path):
    """beta = 0.04 and a policy moved away from its reference: TRL computes a KL > 0 in the
    update; the step's line carries it as losses/kl (with the clip fractions), TRL's own logged
    value agrees, and the health monitor's history holds it (kl_jump reads that)."""
    tr = _trainer(tmp_path, vigor={"strategy": "grpo", "group_size": 4}, per_device_train_batch_size=4,
                  num_generations=4, beta=0.04)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = tr._generate_and_score_completions([])
    tr.compute_loss(tr.model, out).backward()
    trl_kl = tr._metrics["train"]["kl"][-1]
    assert trl_kl > 1e-4
    _finish(tr)
    (line,) = _lines(tr)
    assert line["losses/kl"] == pytest.approx(trl_kl) and line["step"] == 1
    for key in ("losses/clipfrac_low", "losses/clipfrac_high", "losses/entropy", "health/kl_jump", "health/clip_jump"):
        assert key in line
    assert line["losses/grad_norm"] == 1.0 and line["lr"] == 1e-3 and math.isfinite(line["losses/loss"])
    assert tr.vigor_health.monitor.history[-1]["kl"] == pytest.approx(trl_kl)
    assert not tr._metrics["train"]  # TRL's log cleared its metrics after the line was written


@pytest.mark.slow
def test_completions_metrics_are_one_value_per_step_over_the_real_rollouts(tmp_path):
    """vigor's rounds call TRL's generation once per round (4 here): TRL appended one
    completions/* value per round; the step keeps one, over every rollout of the step."""
    tr = _trainer(tmp_path, vigor={"strategy": "vigor", "m0": 2, "gamma": 2.0, "rounds": 3, "budget": 16},
                  prompts_per_step=4)
    tr._generate_and_score_completions([])
    batch = tr.last_batch
    assert len(batch.round_sizes) > 1  # several rounds, so several generation calls
    m = tr._metrics["train"]
    lengths = [s.tokens for s in batch.generated]
    assert m["completions/mean_length"] == [pytest.approx(sum(lengths) / len(lengths))]
    assert m["completions/max_length"] == [max(lengths)] and m["completions/min_length"] == [min(lengths)]
    truncated = sum(bool(s.truncated) for s in batch.generated)
    assert m["completions/clipped_ratio"] == [pytest.approx(truncated / len(lengths))]


# --------------------------------------------------------------------------- non-finite engine log-probs
@pytest.mark.slow
def test_nonfinite_engine_logprobs_never_reach_trls_loss_and_are_counted(tmp_path, monkeypatch):
    """Engine log-probs as TRL's vLLM returns them, with a NaN, +inf, -inf and a missing one: the
    importance ratio is exactly 1 at those tokens (TRL let an infinite one through to the cap),
    the others keep their correction, the loss is finite, and the step counts four."""
    tr = _trainer(tmp_path, vigor={"strategy": "grpo", "group_size": 4}, per_device_train_batch_size=4,
                  num_generations=4, max_completion_length=6)
    real = GRPOTrainer._generate
    garbage = [float("nan"), float("inf"), float("-inf"), None]

    def vllm_like(self, prompts):
        self.use_vllm = False
        try:
            out = real(self, prompts)
        finally:
            self.use_vllm = True
        logprobs = [[-1.0] * len(c) for c in out[1]]
        for row, bad in zip(logprobs, garbage):
            row[0] = bad
        garbage.clear()  # once: the first round
        return (*out[:4], logprobs, *out[5:])

    monkeypatch.setattr(GRPOTrainer, "_generate", vllm_like)
    tr.use_vllm, tr.vllm_importance_sampling_correction = True, True
    tr.vllm_importance_sampling_mode, tr.vllm_importance_sampling_clip_min = "token_truncate", None
    tr.vllm_importance_sampling_clip_max = 3.0
    out = tr._generate_and_score_completions([])
    ratio = out["importance_sampling_ratio"]
    assert torch.isfinite(ratio).all()
    assert [float(ratio[i, 0]) for i in range(4)] == [1.0, 1.0, 1.0, 1.0]
    assert tr._metrics["train"]["sampling/nonfinite_engine_logprobs"] == [4]
    assert tr.vigor_pending.line["sampling/nonfinite_engine_logprobs"] == 4
    loss = tr.compute_loss(tr.model, out)
    assert math.isfinite(float(loss.detach()))


def test_nonfinite_to_nan_by_hand():
    rows, bad = trl_checks.nonfinite_to_nan([[0.0, float("inf")], [None, -1.5, float("nan")]])
    assert bad == 3 and rows[0][0] == 0.0 and rows[1][1] == -1.5
    assert all(math.isnan(x) for x in (rows[0][1], rows[1][0], rows[1][2]))
    assert trl_checks.nonfinite_to_nan(None) == (None, 0)


# --------------------------------------------------------------------------- QLoRA and refusals
def _flagged_4bit():
    """The tiny model as bitsandbytes marks a quantised one (no CUDA here to quantise it)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.bfloat16)
    model.is_loaded_in_4bit = True
    return model


@pytest.mark.slow
def test_a_4bit_base_is_prepared_and_keeps_float32_adapters_as_vigor_train_does(tmp_path):
    """The same k-bit preparation and LoRA as vigor_cli/model/loading.py's: frozen float32 base, float32
    adapters (TRL casts QLoRA adapters to bf16), the same trained parameters."""
    from peft import LoraConfig

    from vigor_cli.model.loading import _wrap_lora
    from vigor_cli.settings import build_config

    cfg = build_config(DEFAULT_CONFIG, sets=["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8",
                                             "model.load_in_4bit=true"])
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=cfg.model.lora.target_modules,
                      task_type="CAUSAL_LM")
    tr = _trainer(tmp_path, model=_flagged_4bit(), peft_config=lora, bf16=False)
    ours = {n: (p.dtype, p.requires_grad) for n, p in tr.model.named_parameters()}
    vigor = {n: (p.dtype, p.requires_grad) for n, p in _wrap_lora(_flagged_4bit(), cfg.model, None, False).named_parameters()}
    assert ours == vigor
    trained = [d for d, g in ours.values() if g]
    assert trained and all(d == torch.float32 for d in trained)
    assert all(d == torch.float32 for d, g in ours.values())  # the frozen base upcast too (prepare_model_for_kbit)


def test_a_4bit_base_with_trls_vllm_is_refused_before_trl_builds_it(tmp_path):
    with pytest.raises(ValueError, match="TRL's vLLM weight sync merges the LoRA into the 4-bit layers"):
        _trainer(tmp_path, model=_flagged_4bit(), use_vllm=True, vllm_mode="colocate")


def test_refusals_by_hand():
    args = SimpleNamespace(use_vllm=False, use_transformers_continuous_batching=True, bf16=True, fp16=False,
                           model_init_kwargs=None)
    fp32 = torch.nn.Linear(2, 2)
    assert trl_checks.refusals(fp32, args)[0].startswith("use_transformers_continuous_batching=True with float32")
    bf16 = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert trl_checks.refusals(bf16, args) == []  # trains in one dtype: nothing to spoil
    assert trl_checks.refusals(bf16, args, peft_config=object())  # peft's adapters are float32
    args.bf16 = False
    assert trl_checks.refusals(fp32, args) == []
    hub = SimpleNamespace(use_vllm=True, use_transformers_continuous_batching=False, bf16=True, fp16=False,
                          model_init_kwargs={"quantization_config": {"load_in_4bit": True}})
    assert trl_checks.refusals("Qwen/Qwen2.5-1.5B", hub)


@pytest.mark.parametrize("flags, words", [
    (["--vllm-mode", "colocate", "--set", "model.load_in_4bit=true", "--set", "model.lora.enabled=true"],
     "error: model.load_in_4bit with --vllm-mode: TRL's vLLM weight sync"),
    (["--set", "model.dtype=bfloat16", "--trl", "use_transformers_continuous_batching=true"],
     "error: --trl use_transformers_continuous_batching=true with float32 trained weights"),
    (["--set", "grpo.importance_sampling=on"], "error: grpo.importance_sampling=on without TRL's vLLM"),
])
def test_the_command_refuses_in_one_line_before_anything_loads(tmp_path, capsys, flags, words):
    assert main(["--cpu", "--output-dir", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(words) and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- vigor's optimizer rules
@pytest.mark.slow
def test_warmup_counts_rollout_phases_from_one_over_warmup_and_decay_covers_every_parameter(tmp_path):
    """vigor_optimizer: warm-up 4 phases of num_iterations 2: the rates of vigor train's
    LambdaLR, each held over the phase's two optimizer steps; weight decay on every trained
    parameter (Transformers leaves biases and norms out)."""
    tr = _trainer(tmp_path, vigor_optimizer=True, warmup_steps=4, num_iterations=2, max_steps=10,
                  learning_rate=1.0, weight_decay=0.1)
    tr.create_optimizer_and_scheduler(num_training_steps=10)
    rates = []
    for _ in range(10):
        rates.append(tr.lr_scheduler.get_last_lr()[0])
        tr.optimizer.step()
        tr.lr_scheduler.step()
    assert rates == pytest.approx([0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0, 1.0, 1.0])
    decayed = {id(p) for g in tr.optimizer.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert decayed == {id(p) for p in tr.model.parameters() if p.requires_grad}
    plain = _trainer(tmp_path / "plain", lr_scheduler_type="constant_with_warmup", warmup_steps=4, max_steps=10,
                     learning_rate=1.0, weight_decay=0.1)
    plain.create_optimizer_and_scheduler(num_training_steps=10)
    assert plain.lr_scheduler.get_last_lr()[0] == 0.0  # Transformers' warm-up starts at 0: not vigor's


@pytest.mark.slow
def test_the_command_with_a_kl_coefficient_writes_the_updates_kl_to_metrics_jsonl(tmp_path, capsys):
    """The TRL path from the command line, grpo.beta 0.04, two steps: each step's line has
    losses/kl (0 at step 1, where the policy is its reference; above 0 after an update) and
    the health checks' kl_jump; TRL's metrics agree."""
    out = tmp_path / "out"
    assert main(["--cpu", "--output-dir", str(out), "--set", "grpo.beta=0.04", "--set", "train.steps=2",
                 "--set", "train.prompts_per_step=8", "--set", "train.eval_limit=4", "--set", "train.eval_every=0",
                 "--set", "grpo.learning_rate=5e-3"]) == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "losses/kl" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert steps[0]["losses/kl"] == 0.0 < steps[1]["losses/kl"]
    assert all("health/kl_jump" in m and "losses/clipfrac_low" in m and m["losses/grad_norm"] is not None for m in steps)


@pytest.mark.slow
def test_the_sandboxs_isolation_level_reaches_the_step_line_once_said(tmp_path, capsys):
    """A reward function that keeps the sandbox's level (a code task's, from
    vigor_cli/integrations/trl_rewards.py; its real content: tests/test_trl_integration.py):
    the step's metrics.jsonl line carries sandbox/isolation and sandbox/memory_cgroup as `vigor
    train`'s does, TRL's own metrics the number, and stderr says the level once."""
    from test_trl_core import keyed_reward

    def graded_in_the_sandbox(prompts, completions, uid, rollout_index, **kwargs):
        return keyed_reward(prompts, completions, uid, rollout_index)

    level = "full, memory: rlimit only"
    graded_in_the_sandbox.vigor_sandbox = {"sandbox/isolation": level, "sandbox/memory_cgroup": 0.0}
    tr = _trainer(tmp_path, reward=graded_in_the_sandbox, vigor={"strategy": "grpo", "group_size": 4},
                  per_device_train_batch_size=4, num_generations=4)
    capsys.readouterr()
    for _ in range(2):
        tr._generate_and_score_completions([])
        assert tr._metrics["train"]["sandbox/memory_cgroup"][-1] == 0.0
        _finish(tr)
    lines = _lines(tr)
    assert len(lines) == 2 and all(x["sandbox/isolation"] == level and x["sandbox/memory_cgroup"] == 0.0 for x in lines)
    assert capsys.readouterr().err.count(f"sandbox isolation: {level}") == 1
    plain = _trainer(tmp_path / "plain", vigor={"strategy": "grpo", "group_size": 4}, per_device_train_batch_size=4,
                     num_generations=4)
    plain._generate_and_score_completions([])
    _finish(plain)
    assert not any(k.startswith("sandbox/") for k in _lines(plain)[0])  # no sandbox, no keys

"""TRL's vLLM on the TRL path without a GPU: TRL 1.16's own colocated generation code
(trl.generation.vllm_generation.VLLMGeneration: its sync_weights and generate, unchanged)
drives the recording stand-in for ``vllm.LLM`` (tests/vllm_stand_in.py, with vLLM's recorded
signatures), and the test counts how often the policy's weights reach the engine per step;
then TRL's calls into vLLM are checked against each recorded vLLM release (0.33.0, 0.34.0)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from test_trl_core import _trainer  # noqa: E402
from vllm_stand_in import StandInLLM, StandInSamplingParams, _constant  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECORDS = {"0.33.0": REPO / "tests" / "fixtures" / "vllm_signatures.json",
           "0.34.0": REPO / "tests" / "fixtures" / "vllm_signatures-0.34.0.json"}


class TRLStandInLLM(StandInLLM):
    """The stand-in as TRL's colocate mode reaches it: one SamplingParams for every prompt (vLLM's
    generate takes one or a list), and the worker's model behind ``llm_engine`` (vLLM 0.34's
    uniproc executor: ``llm_engine.model_executor.driver_worker.model_runner.model``)."""

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None,
                 priority=None, tokenization_kwargs=None, mm_processor_kwargs=None):
        if not isinstance(sampling_params, list):
            sampling_params = [sampling_params] * len(prompts)
        return super().generate(prompts, sampling_params, use_tqdm=use_tqdm)

    @property
    def llm_engine(self):
        assert "weights" not in self.sleeping, "writing weights into sleeping memory"
        self.weights_valid = True  # TRL loads every weight through here
        runner = SimpleNamespace(model=self.vllm_model)
        return SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)))


def _colocated(tr, monkeypatch, sleep_mode=True):
    """TRL's VLLMGeneration in colocate mode over the stand-in, attached to trainer ``tr``."""
    from trl.generation import vllm_generation as vg
    from trl.distributed import DistributedBackend

    monkeypatch.setattr(vg, "SamplingParams", StandInSamplingParams, raising=False)
    names = {n for n, _ in tr.model.named_parameters()}
    llm_class = type("LLM", (TRLStandInLLM,), {"checkpoint_names": names})
    llm = llm_class(tr.model.name_or_path, distributed_executor_backend="external_launcher",
                    logprobs_mode="processed_logprobs", enable_sleep_mode=sleep_mode)
    g = vg.VLLMGeneration.__new__(vg.VLLMGeneration)
    g.__dict__.update(mode="colocate", enable_sleep_mode=sleep_mode, llm=llm, accelerator=tr.accelerator,
                      model=tr.model, _dist=DistributedBackend(tr.accelerator), tensor_parallel_size=1,
                      temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                      max_completion_length=tr.max_completion_length, logprobs=0, structured_outputs_regex=None,
                      generation_kwargs={}, processing_class=tr.processing_class, _weight_metadata=None,
                      vllm_client=None, _llm_weights_sleeping=sleep_mode)
    if sleep_mode:
        llm.sleep(level=2)  # as TRL builds it: asleep until the first generate
    tr.use_vllm, tr.vllm_mode, tr.vllm_generation, tr._last_loaded_step = True, "colocate", g, -1
    tr.vllm_importance_sampling_correction = False
    return llm, len(names)


def _pushes(llm, params: int) -> float:
    return sum(len(load) for load in llm.vllm_model.loads) / params


@pytest.mark.slow
@pytest.mark.parametrize("sleep_mode", [True, False])
def test_weights_reach_the_colocated_engine_once_per_optimizer_step(tmp_path, monkeypatch, sleep_mode):
    """Two steps of several rounds each (the vigor strategy's schedule) through TRL's real
    colocate code: the weights are pushed once per step (they were pushed before every round,
    four times a step, under sleep mode), the engine sleeps once per step and is asleep
    during the update."""
    tr = _trainer(tmp_path, vigor={"strategy": "vigor", "m0": 1, "gamma": 3.0}, prompts_per_step=2,
                  max_completion_length=6)
    llm, params = _colocated(tr, monkeypatch, sleep_mode)
    per_step = []
    for step in range(2):
        tr.state.global_step = step  # an optimizer step between the phases, as Trainer counts it
        before = _pushes(llm, params)
        sleeps = sum(1 for c in llm.calls if c[0] == "sleep")
        tr._generate_and_score_completions([])
        rounds = len(tr.last_batch.round_sizes)
        generates = [c for c in llm.calls if c[0] == "generate"]
        per_step.append((rounds, _pushes(llm, params) - before, sum(1 for c in llm.calls if c[0] == "sleep") - sleeps))
        assert not sleep_mode or llm.sleeping == set(_constant("SLEEP_TAGS"))  # asleep for the update
    assert all(rounds >= 2 for rounds, _, _ in per_step) and len(generates) >= 4
    assert [pushed for _, pushed, _ in per_step] == [1.0, 1.0]
    assert [slept for _, _, slept in per_step] == ([1, 1] if sleep_mode else [0, 0])


@pytest.mark.slow
def test_without_the_phase_guard_trls_sleep_mode_pushes_before_every_round(tmp_path, monkeypatch):
    """The measurement behind the fix, at TRL's level: two generate calls in one optimizer step
    push the weights twice (TRL sleeps at level 2 after each); inside the guard, once."""
    from vigor_cli.integrations import trl_vllm

    tr = _trainer(tmp_path, max_completion_length=4)
    llm, params = _colocated(tr, monkeypatch)
    prompts = [[2, 3, 4], [5, 6]]
    for _ in range(2):
        tr._generate_single_turn(prompts, None, {}, 1)
    assert _pushes(llm, params) == 2.0
    with trl_vllm.one_push_per_phase(tr):
        for _ in range(3):
            tr._generate_single_turn(prompts, None, {}, 1)
    assert _pushes(llm, params) == 3.0 and llm.sleeping and "sleep" not in vars(llm)


def _trl_source(name: str) -> ast.Module:
    import trl

    return ast.parse((Path(trl.__file__).parent / name).read_text())


def _calls(tree: ast.Module, func: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Name) and n.func.id == func) or (isinstance(n.func, ast.Attribute) and n.func.attr == func))]


@pytest.mark.parametrize("release", sorted(RECORDS))
def test_trls_colocated_and_server_calls_bind_to_each_recorded_vllm(release):
    """TRL 1.16 declares vLLM 0.22-0.31 (and warns outside it); the gpu extra's vLLM is 0.33 or
    0.34. What its colocate mode passes to ``LLM()``, to ``SamplingParams`` and to the engine's
    methods, and the ``vllm serve`` flags its server mode builds, all exist in each recorded
    release (read from the wheels by scripts/extract_vllm_signatures.py)."""
    record = json.loads(RECORDS[release].read_text())
    assert record["vllm_version"] == release
    llm_params = {p["name"] for p in record["methods"]["LLM.__init__"]["params"]}
    engine_fields = set(record["fields"]["EngineArgs"]["fields"])
    generation = _trl_source("generation/vllm_generation.py")
    (build,) = _calls(generation, "LLM")
    passed = {k.arg for k in build.keywords}
    assert passed and passed <= llm_params | engine_fields, passed - llm_params - engine_fields
    sampling = set(record["fields"]["SamplingParams"]["fields"])
    colocate = [n for n in ast.walk(generation) if isinstance(n, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "repetition_penalty" for k in n.keys)]
    keys = {k.value for d in colocate for k in d.keys if isinstance(k, ast.Constant)}
    assert {"n", "temperature", "max_tokens", "logprobs"} <= keys and keys - {"structured_outputs_regex",
                                                                               "generation_kwargs"} <= sampling
    assert "structured_outputs" in sampling
    for method, args in (("sleep", {"level"}), ("wake_up", {"tags"}), ("generate", {"sampling_params", "use_tqdm"}),
                         ("reset_prefix_cache", set())):
        params = {p["name"] for p in record["methods"][f"LLM.{method}"]["params"]}
        used = {k.arg for c in _calls(generation, method) for k in c.keywords if k.arg} & (args | params)
        assert args <= params and used <= params, (method, used - params)
    assert {"weights", "kv_cache"} <= set(record["constants"]["SLEEP_TAGS"]["values"])
    serve = _trl_source("scripts/vllm_serve.py")
    flags = {n.value[2:].replace("-", "_") for n in ast.walk(serve)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("--")}
    # the API server's own flags (0.34's frontend reads --enable-scale-out: entrypoints/scale_out), or a negation
    flags -= {"host", "port", "uvicorn_log_level", "no_enable_prefix_caching", "enable_scale_out"}
    assert {"weight_transfer_config", "logprobs_mode", "max_logprobs"} <= flags
    assert flags <= engine_fields, flags - engine_fields


def test_vllm_0_34_changes_nothing_the_engine_calls():
    """0.34.0 against 0.33.0: every method vigor's engine and TRL call keeps its parameters
    (new ones have defaults), no field either reads is gone, the constants are the same."""
    old, new = (json.loads(RECORDS[v].read_text()) for v in ("0.33.0", "0.34.0"))
    for key, method in old["methods"].items():
        before = {p["name"]: p for p in method["params"]}
        after = {p["name"]: p for p in new["methods"][key]["params"]}
        assert set(before) <= set(after), key
        assert all(p["default"] is not None or p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD")
                   for name, p in after.items() if name not in before), key
        assert all(before[n]["kind"] == after[n]["kind"] for n in before), key
    for key, cls in old["fields"].items():
        assert set(cls["fields"]) <= set(new["fields"][key]["fields"]), key
    assert old["constants"] == new["constants"]


def test_the_gpu_extra_admits_the_recorded_vllm_releases_only():
    import tomllib

    from packaging.specifiers import SpecifierSet

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (spec,) = [r for r in extras["gpu"] if r.startswith("vllm")]
    admitted = SpecifierSet(spec.removeprefix("vllm"))
    assert all(v in admitted for v in RECORDS)  # 0.33.0 and 0.34.0, each recorded from its wheel
    assert "0.32.0" not in admitted and "0.35.0" not in admitted

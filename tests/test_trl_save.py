"""A TRL run is a run: the entry point and VigorGRPOTrainer save at train.save_every and at the
end in `vigor train`'s layout (checkpoints/step-N sealed, weights, allocator, data position,
RNG), `vigor export`, `eval --run`, `inspect-allocation` and `report` read the run, and
`--resume RUN` continues it exactly as if never stopped, in one process and in two (gloo)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--set", "train.prompts_per_step=8", "--set", "train.eval_limit=16"]


def _main(args: list[str], capfd) -> tuple[int, str, str]:
    """The entry point in this process: exit code, stdout, stderr (``capfd`` or ``capsys``)."""
    from vigor_cli.integrations import trl

    capfd.readouterr()
    code = trl.main(args)
    out = capfd.readouterr()
    return code, out.out, out.err


def _fake_run(path: Path, steps: int, checkpoint_step: int | None, trainer: str | None = "trl") -> Path:
    """A run directory holding a valid vigor config and (optionally) one sealed checkpoint
    whose data_state.json names ``trainer``: what the resume checks read, without training."""
    from vigor_cli.run.checkpoints import RUN_ID, CheckpointStore
    from vigor_cli.config import dump_config
    from vigor_cli.settings import build_config

    text = dump_config(build_config(sets=[f"train.steps={steps}"]))
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(text)
    (path / RUN_ID).write_text("abc\n")
    (path / "allocation.jsonl").write_text("")
    if checkpoint_step is not None:
        store = CheckpointStore(path / "checkpoints")
        tmp = store.begin(checkpoint_step)
        state = {"step": checkpoint_step, **({"trainer": trainer} if trainer else {})}
        (tmp / "data_state.json").write_text(json.dumps(state))
        (tmp / "config.yaml").write_text(text)
        store.commit(tmp, checkpoint_step, keep=2)
    return path


# --------------------------------------------------------------------------- fast: the seams
def test_trl_args_save_as_vigor_train_does(tmp_path):
    from vigor_cli.config import RunConfig
    from vigor_cli.integrations.trl import trl_args
    from vigor_cli.settings import build_config

    cfg = build_config(sets=["train.steps=6", "train.save_every=2", "train.keep_checkpoints=3", "grpo.mu=2"])
    args = trl_args(cfg, tmp_path, use_cpu=True)
    assert (args.save_strategy, args.save_steps, args.save_total_limit) == ("steps", 4, 3)  # optimizer steps
    assert RunConfig.model_validate(args.vigor_config) == cfg  # config.yaml is the whole vigor config
    only_end = trl_args(build_config(sets=["train.steps=5", "train.save_every=0"]), tmp_path, use_cpu=True)
    assert (only_end.save_strategy, only_end.save_steps) == ("steps", 5)  # 0: at the end only


def test_a_checkpoint_inside_a_rollout_phase_is_refused(tmp_path):
    from vigor_cli.integrations.trl import VigorGRPOConfig

    with pytest.raises(ValueError, match="save_steps=3.*multiple of num_iterations=2"):
        VigorGRPOConfig(output_dir=str(tmp_path), num_iterations=2, save_strategy="steps", save_steps=3,
                        per_device_train_batch_size=2, num_generations=2, use_cpu=True)
    VigorGRPOConfig(output_dir=str(tmp_path), num_iterations=2, save_strategy="steps", save_steps=4,
                    per_device_train_batch_size=2, num_generations=2, use_cpu=True)


RESUME_REFUSALS = {
    "with --set": (lambda t: _fake_run(t / "r", 3, 1), ["--set", "train.seed=1"], ["drop --set"]),
    "with --output-dir": (lambda t: _fake_run(t / "r", 3, 1), ["--output-dir", "x"], ["drop --output-dir"]),
    "with --config": (lambda t: _fake_run(t / "r", 3, 1), ["--config", "configs/tiny-math.yaml"], ["drop --config"]),
    "not a run": (lambda t: (t / "r").mkdir(), [], ["not a run directory", "config.yaml"]),
    "a vigor train run": (lambda t: _fake_run(t / "r", 3, 1, trainer=None), [], ["vigor train --resume"]),
    "a vigor train run's record": (lambda t: (_fake_run(t / "r", 3, None) / "provenance.json").write_text(
        '{"trainer": "vigor train"}'), [], ["vigor train --resume"]),
    "finished": (lambda t: _fake_run(t / "r", 2, 2), [], ["finished", "step 2 of train.steps=2"]),
}


@pytest.mark.parametrize("case", list(RESUME_REFUSALS))
def test_resume_refusals_are_one_line_exit_2_and_change_nothing(tmp_path, capfd, case):
    make, extra, fragments = RESUME_REFUSALS[case]
    make(tmp_path)
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    code, out, err = _main(["--cpu", "--resume", str(tmp_path / "r"), *extra], capfd)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0]
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before


def test_vigor_train_resume_of_a_trl_run_names_the_trl_entry_point(tmp_path, vigor):
    run = _fake_run(tmp_path / "r", 3, 1)
    (run / "provenance.json").write_text('{"trainer": "trl"}')
    code, out, err = vigor("train", "--resume", str(run))
    assert code == 2 and "python -m vigor_cli.integrations.trl --resume" in err and "damaged" not in err


def test_neither_output_dir_nor_resume_is_one_line(tmp_path, capfd):
    code, _, err = _main(["--cpu"], capfd)
    assert code == 2 and "--output-dir is required" in err and "--resume" in err
    code, _, err = _main(["--cpu", "--output-dir", str(tmp_path / "o"), "--allow-changed-files"], capfd)
    assert code == 2 and "--allow-changed-files goes with --resume" in err and not (tmp_path / "o").exists()


def test_resolve_names_a_damaged_checkpoint_and_a_folder_that_is_no_run(tmp_path):
    from vigor_cli.errors import UserError
    from vigor_cli.integrations import trl_save

    run = _fake_run(tmp_path / "r", 3, 1)
    assert trl_save.resolve(run, print) == run / "checkpoints" / "step-1"
    assert trl_save.resolve(run / "checkpoints" / "step-1", print) == run / "checkpoints" / "step-1"
    (run / "checkpoints" / "step-1" / "data_state.json").write_text('{"step": 1, "trainer": "trl", "x": 1}')
    with pytest.raises(UserError, match="damaged"):
        trl_save.resolve(run / "checkpoints" / "step-1", print)
    with pytest.raises(UserError, match="neither a run directory"):
        trl_save.resolve(tmp_path, print)


# --------------------------------------------------------------------------- slow: real runs
def _train(out: Path, capfd, *sets: str) -> dict:
    code, stdout, err = _main(["--cpu", "--output-dir", str(out), "--set", "train.steps=2",
                               "--set", "train.save_every=1", *SMALL, *sets], capfd)
    assert code == 0, err[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Two steps of the tiny model through the TRL entry point, save_every=1 (full weights)."""
    from vigor_cli.integrations import trl

    out = tmp_path_factory.mktemp("trl-save") / "run"
    assert trl.main(["--cpu", "--output-dir", str(out), "--set", "train.steps=2", "--set", "train.save_every=1",
                     *SMALL]) == 0
    return out


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (path / "adapter_model.safetensors").is_file() else "model.safetensors"
    return load_file(path / name)


def _same_run(a: Path, b: Path) -> None:
    """Two runs logged and trained the same: allocation.jsonl byte for byte, metrics.jsonl
    but for wall times, the evaluations, the last checkpoint's weights and states."""
    assert (a / "allocation.jsonl").read_bytes() == (b / "allocation.jsonl").read_bytes()

    def lines(run):
        return [{k: v for k, v in json.loads(x).items() if "time" not in k}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert lines(a) == lines(b)
    assert sorted(p.name for p in (a / "eval").iterdir()) == sorted(p.name for p in (b / "eval").iterdir())
    for f in (a / "eval").iterdir():
        assert json.loads(f.read_text()) == json.loads((b / "eval" / f.name).read_text())
    last_a, last_b = a / "checkpoints" / "step-2", b / "checkpoints" / "step-2"
    wa, wb = _weights(last_a), _weights(last_b)
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
    for name in ("allocator.json",):
        assert (last_a / name).read_text() == (last_b / name).read_text()
    da, db = (json.loads((c / "data_state.json").read_text()) for c in (last_a, last_b))
    assert da == db


@pytest.mark.slow
def test_a_trl_run_saves_checkpoints_in_vigor_trains_layout(full_run):
    from vigor_cli.run.checkpoints import verify_checkpoint
    from vigor_cli.export.folder import run_config
    from vigor_cli.settings import build_config

    store = full_run / "checkpoints"
    assert sorted(p.name for p in store.iterdir()) == ["step-1", "step-2"]  # every step and the end
    for step in (1, 2):
        ckpt = store / f"step-{step}"
        assert verify_checkpoint(ckpt) is None
        names = {p.name for p in ckpt.iterdir()}
        assert {"COMPLETE", "manifest.json", "model.safetensors", "config.json", "tokenizer.json", "allocator.json",
                "data_state.json", "config.yaml", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                "trainer_state.json"} <= names
        state = json.loads((ckpt / "data_state.json").read_text())
        assert (state["step"], state["optimizer_step"], state["trainer"]) == (step, step, "trl")
        assert state["rollouts_cumulative"] == 64 * step  # 8 prompts x 8 rollouts per step
        assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == step
    cfg = run_config(full_run)  # config.yaml validates as a vigor config: the run's own
    assert (cfg.train.steps, cfg.train.save_every, cfg.train.prompts_per_step) == (2, 1, 8)
    assert build_config(store / "step-2" / "config.yaml") == cfg


@pytest.mark.slow
def test_export_of_a_trl_run_loads_in_transformers(full_run, tmp_path, vigor):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    code, out, err = vigor("export", str(full_run), "--out", str(tmp_path / "exp"))
    assert code == 0, err
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "exp")
    tok = AutoTokenizer.from_pretrained(tmp_path / "exp")
    saved = _weights(full_run / "checkpoints" / "step-2")
    params = dict(model.named_parameters())
    assert all(torch.equal(params[k], v) for k, v in saved.items() if k in params)
    ids = tok("1+2=", return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=4, do_sample=False).shape[1] > ids.shape[1]


@pytest.mark.slow
def test_eval_inspect_and_report_read_a_trl_run(full_run, tmp_path, vigor):
    held = json.loads((full_run / "eval" / "step-2.json").read_text())["accuracy"]
    code, out, err = vigor("eval", "--run", str(full_run))
    assert code == 0, err
    row = next(line for line in out.splitlines() if re.search(r"tiny-math\s*│\s*16\b", line))
    assert f"{held:.3f}" in row  # the run's own last evaluation, again
    code, out, err = vigor("inspect-allocation", str(full_run))
    assert code == 0, err
    code, out, err = vigor("report", str(full_run), "--out", str(tmp_path / "rep"))
    assert code == 0 and (tmp_path / "rep" / "report.json").is_file(), err


@pytest.mark.slow
def test_a_resumed_run_equals_an_uninterrupted_one(full_run, tmp_path, capfd):
    """Killed after step 2 was logged but before its checkpoint: the resume cuts the logs back
    to step 1 and repeats step 2 exactly."""
    copy = tmp_path / "copy"
    shutil.copytree(full_run, copy)
    shutil.rmtree(copy / "checkpoints" / "step-2")
    code, out, err = _main(["--cpu", "--resume", str(copy)], capfd)
    assert code == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["held_out"] == {"2": json.loads(
        (full_run / "eval" / "step-2.json").read_text())["accuracy"]}
    _same_run(full_run, copy)
    record = json.loads((copy / "provenance.json").read_text())
    assert record["trainer"] == "trl" and [r["from_step"] for r in record["resumes"]] == [1]


@pytest.mark.slow
def test_lora_adapters_save_export_and_resume(tmp_path, capsys, vigor):
    run = tmp_path / "lora"
    _train(run, capsys, "--set", "model.lora.enabled=true")
    names = {p.name for p in (run / "checkpoints" / "step-2").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= names and "model.safetensors" not in names
    code, out, err = vigor("export", str(run), "--out", str(tmp_path / "exp"), "--merge-lora")
    assert code == 0, err
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "exp")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "checkpoints" / "step-2")
    code, _, err = _main(["--cpu", "--resume", str(copy)], capsys)
    assert code == 0, err[-3000:]
    _same_run(run, copy)


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    leaked = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
              "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")
    env = {k: v for k, v in os.environ.items() if k not in leaked and not k.startswith("ACCELERATE_")}
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "vigor_cli.integrations.trl", "--cpu", *args]
    for _ in range(3):  # torchrun's store port can be taken between its pick and its bind
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode == 0 or "EADDRINUSE" not in done.stderr:
            break
    return done


@pytest.mark.slow
def test_two_processes_save_once_and_resume_as_if_never_stopped(tmp_path):
    """About 90 s on 2 CPU cores: two torchrun runs of two ranks (gloo)."""
    run = tmp_path / "run"
    done = _torchrun("--output-dir", str(run), "--set", "train.steps=2", "--set", "train.save_every=1", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = run / "checkpoints" / "step-2"
    names = {p.name for p in ckpt.iterdir()}
    assert {"rng_state_0.pth", "rng_state_1.pth", "model.safetensors"} <= names  # every rank's RNG, one model
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2"]  # no rank's leftovers
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "checkpoints" / "step-2")
    done = _torchrun("--resume", str(copy))
    assert done.returncode == 0, done.stderr[-3000:]
    _same_run(run, copy)


# --------------------------------------------------------------------------- FSDP / ZeRO-3: the seam
def test_the_save_seams_match_the_installed_libraries():
    """What trl_save.py calls under FSDP and ZeRO-3, which cannot run on this CPU (accelerate
    turns an FSDP request with use_cpu into plain DDP, and without use_cpu Transformers refuses
    FSDP outside a GPU group): the signatures it relies on, from the installed releases."""
    import inspect

    from accelerate import Accelerator
    from peft import PeftModel
    from transformers import PreTrainedModel, Trainer

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(Accelerator.get_state_dict)[:3] == ["self", "model", "unwrap"]
    assert "state_dict" in params(PreTrainedModel.save_pretrained)
    assert 'kwargs.get("state_dict"' in inspect.getsource(PeftModel.save_pretrained)  # peft reads it from **kwargs
    for name in ("_save_optimizer_and_scheduler", "_save_scaler", "_save_rng_state"):
        assert params(getattr(Trainer, name)) == ["self", "output_dir"], name
    assert params(Trainer._save_checkpoint) == ["self", "model", "trial"]
    assert params(Trainer.train)[:2] == ["self", "resume_from_checkpoint"]
    assert params(Trainer._load_rng_state) == ["self", "checkpoint"]


@pytest.mark.slow
def test_the_weights_saved_are_the_gathered_ones_written_once(tmp_path, monkeypatch):
    """The policy's weights come from accelerate's get_state_dict (called on every rank: it
    gathers FSDP and ZeRO-3 shards; under DeepSpeed it is given the engine), not from the
    local module; a gather that cannot be made is one line."""
    import torch

    from vigor_cli.errors import UserError
    from vigor_cli.integrations import trl_save
    from vigor_cli.integrations.trl import build_trainer
    from vigor_cli.settings import build_config

    cfg = build_config("configs/tiny-math.yaml", sets=["train.steps=1", "train.prompts_per_step=8",
                                                        "train.eval_limit=8"])
    trainer, _, task = build_trainer(cfg, tmp_path / "run", use_cpu=True)
    try:
        calls = []
        real = trainer.accelerator.get_state_dict

        def gathered(model, unwrap=True):
            calls.append(model)
            return {k: v + 1 for k, v in real(model, unwrap).items()}  # what "the other shards" hold

        monkeypatch.setattr(trainer.accelerator, "get_state_dict", gathered)
        trainer.create_optimizer_and_scheduler(num_training_steps=1)
        trainer.vigor_step = 1
        final = trl_save.save(trainer)
        assert calls == [trainer.model]
        saved = _weights(final)
        local = dict(trainer.model.named_parameters())
        assert saved and all(torch.equal(v, local[k].detach() + 1) for k, v in saved.items() if k in local)
        monkeypatch.setattr(trainer, "is_deepspeed_enabled", True)
        monkeypatch.setattr(trainer.accelerator, "get_state_dict", lambda model, unwrap=True: (calls.append(model), (
            _ for _ in ()).throw(ValueError("Cannot get 16bit model weights because ...")))[1])
        trainer.vigor_step = 2
        with pytest.raises(UserError, match="zero3_save_16bit_model"):
            trl_save.save(trainer)
        assert calls[-1] is trainer.model_wrapped
        assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-1"]  # none half-written
    finally:
        task.close()


@pytest.mark.slow
def test_vigor_grpo_trainer_from_python_saves_by_trls_keys_and_resumes(tmp_path):
    """VigorGRPOTrainer built by hand (TRL's keys: save_strategy, save_steps, save_total_limit,
    resume_from_checkpoint=True) writes the same layout and continues exactly."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.config import TaskConfig
    from vigor_cli.integrations.trl import VigorGRPOConfig, VigorGRPOTrainer, task_dataset, task_reward
    from vigor_cli.model.loading import TINY_DIR
    from vigor_cli.tasks import get_task

    def run(out: Path, **kw):
        tok = AutoTokenizer.from_pretrained(TINY_DIR)
        task = get_task(TaskConfig(name="tiny-math"))
        args = VigorGRPOConfig(output_dir=str(out), max_steps=3, per_device_train_batch_size=8, num_generations=8,
                               max_completion_length=16, logging_steps=1, report_to=[], use_cpu=True, seed=0,
                               learning_rate=5e-4, prompts_per_step=8, bf16=False, save_strategy="steps",
                               save_steps=1, save_total_limit=2, vigor={"strategy": "vigor"}, **kw)
        trainer = VigorGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(TINY_DIR),
                                   reward_funcs=[task_reward(task)], args=args, train_dataset=task_dataset(task, tok),
                                   processing_class=tok)
        try:
            trainer.train()
        finally:
            task.close()

    whole = tmp_path / "whole"
    run(whole)
    assert sorted(p.name for p in (whole / "checkpoints").iterdir()) == ["step-2", "step-3"]  # kept 2
    copy = tmp_path / "copy"
    shutil.copytree(whole, copy)
    shutil.rmtree(copy / "checkpoints" / "step-3")
    run(copy, resume_from_checkpoint=True)
    assert (whole / "allocation.jsonl").read_bytes() == (copy / "allocation.jsonl").read_bytes()
    a, b = _weights(whole / "checkpoints" / "step-3"), _weights(copy / "checkpoints" / "step-3")
    assert all((a[k] == b[k]).all() for k in a)

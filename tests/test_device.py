"""Loud device choice: CUDA present but unusable is an error naming the cause, never a CPU run.

The probes (torch.cuda.is_available and its warnings, /dev/nvidia*, nvidia-smi,
the /proc driver version, torch.cuda.init, torch.version.cuda) are
monkeypatched into each machine the issue names; the decision code is real.
"""

from __future__ import annotations

import pytest
import torch

import vigor_cli.model.loading as models
import vigor_cli.rollout as rollout_pkg
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.model.loading import pick_device, probe_cuda

OLD_DRIVER = ("CUDA initialization: The NVIDIA driver on your system is too old (found version "
              "12020). Please update your GPU driver by downloading and installing a new version "
              "from the URL: http://www.nvidia.com/Download/index.aspx")


def machine(monkeypatch, *, available=False, warnings=(), devices=(), smi=None, driver=None,
            cuda_build="13.0", init_error=None):
    monkeypatch.setattr(models, "_torch_cuda_available", lambda: (available, list(warnings)))
    monkeypatch.setattr(models, "_nvidia_device_files", lambda: list(devices))
    monkeypatch.setattr(models, "_nvidia_smi", lambda: smi)
    monkeypatch.setattr(models, "_driver_version", lambda: driver)
    monkeypatch.setattr(models, "_cuda_init_error", lambda: init_error)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)


def test_no_cuda_at_all_is_the_cpu(monkeypatch):
    machine(monkeypatch, cuda_build=None)
    assert pick_device("auto").type == "cpu"
    assert not probe_cuda().present
    with pytest.raises(UserError, match="model.device=cuda: no CUDA GPU here"):
        pick_device("cuda")


def test_driver_too_old_for_the_torch_build(monkeypatch):
    machine(monkeypatch, warnings=[OLD_DRIVER], devices=["/dev/nvidia0"], smi="/usr/bin/nvidia-smi",
            driver="535.129.03")
    with pytest.raises(UserError) as e:
        pick_device("auto")
    msg = str(e.value)
    assert "\n" not in msg
    for needle in ("model.device=auto", "/dev/nvidia0", "nvidia-smi", "driver 535.129.03",
                   "driver on your system is too old (found version 12020)",
                   "CUDA 13.0 build (needs driver >= 580", "--device cpu"):
        assert needle in msg, needle
    assert pick_device("cpu").type == "cpu"  # asked for: fine


def test_only_torch_warns(monkeypatch):
    """No device file or nvidia-smi visible (a container), but torch's own warning says a GPU is there."""
    machine(monkeypatch, warnings=[OLD_DRIVER])
    with pytest.raises(UserError, match="too old"):
        pick_device("auto")


def test_cpu_only_torch_on_a_gpu_machine(monkeypatch):
    machine(monkeypatch, devices=["/dev/nvidia0", "/dev/nvidia1"], cuda_build=None)
    with pytest.raises(UserError, match=r"torch .* is a CPU-only build"):
        pick_device("auto")


def test_cuda_init_error_is_the_cause(monkeypatch):
    machine(monkeypatch, smi="/usr/bin/nvidia-smi", cuda_build="12.8",
            init_error="CUDA driver initialization failed, you might not have a CUDA gpu.")
    with pytest.raises(UserError) as e:
        pick_device("cuda")
    assert "CUDA driver initialization failed" in str(e.value)
    assert "CUDA 12.8 build (needs driver >= 525.60.13)" in str(e.value)


def test_usable_cuda(monkeypatch):
    machine(monkeypatch, available=True, devices=["/dev/nvidia0"])
    assert pick_device("auto").type == "cuda"


def test_train_refuses_before_anything_loads(vigor, monkeypatch, tmp_path):
    machine(monkeypatch, warnings=[OLD_DRIVER], devices=["/dev/nvidia0"])

    def no_load(*a, **k):
        pytest.fail("the model was loaded before the device check")

    monkeypatch.setattr(models, "load_policy", no_load)
    monkeypatch.setattr(models, "load_tokenizer", no_load)
    code, out, err = vigor("train", "--steps", "1", "--output-dir", str(tmp_path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "too old" in lines[0] and "--device cpu" in lines[0]
    assert not any(tmp_path.iterdir())  # no run directory left behind


def test_train_device_flag_reaches_the_config(monkeypatch):
    from vigor_cli.commands.train import default_config_file

    cfg = build_config(default_config_file(None, None), overrides={"model.device": "cpu"})
    assert cfg.model.device == "cpu"
    machine(monkeypatch, warnings=[OLD_DRIVER], devices=["/dev/nvidia0"])
    from vigor_cli.train.preflight import check_static

    assert check_static(cfg) == "cpu"  # asked for the CPU: no error on the broken GPU


# --------------------------------------------------------------------------- engine 'auto'
class _Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


def test_auto_engine_on_cpu_says_why(monkeypatch):
    notes = []
    from vigor_cli.model.loading import load_policy

    cfg = build_config(sets=["engine.kind=auto"])
    model, tok, _ = load_policy(cfg.model)
    engine = rollout_pkg.make_engine(cfg, model, tok, announce=notes.append)
    assert engine.name == "hf" and "the policy runs on the CPU" in notes[0]


def test_auto_engine_on_cuda_with_a_broken_vllm_is_an_error(monkeypatch):
    monkeypatch.setattr(rollout_pkg, "_policy_device_type", lambda model: "cuda")
    monkeypatch.setattr(rollout_pkg, "_vllm_reason",
                        lambda: "vllm is installed but does not import (libcudart.so.13: cannot open shared object file)")
    monkeypatch.setattr(rollout_pkg, "_vllm_installed", lambda: True)
    cfg = build_config(sets=["engine.kind=auto"])
    with pytest.raises(UserError, match="engine.kind=auto: vllm is installed but does not import .*libcudart"):
        rollout_pkg.make_engine(cfg, _Policy(), None)


def test_auto_engine_on_cuda_without_vllm_warns(monkeypatch):
    monkeypatch.setattr(rollout_pkg, "_policy_device_type", lambda model: "cuda")
    monkeypatch.setattr(rollout_pkg, "_vllm_reason", lambda: "vllm is not installed")
    monkeypatch.setattr(rollout_pkg, "_vllm_installed", lambda: False)
    notes = []
    from vigor_cli.model.loading import load_policy

    model, tok, _ = load_policy(build_config().model)
    engine = rollout_pkg.make_engine(build_config(sets=["engine.kind=auto"]), model, tok, announce=notes.append)
    assert engine.name == "hf" and "vllm is not installed" in notes[0]

"""Policy loading: CPU thread choice (spinning OpenMP threads beside reward workers made
tiny-model steps 20-30x slower on 2 cores, so small CPU models run on one thread)."""

from __future__ import annotations

import torch

from vigor_cli.config import ModelConfig
from vigor_cli.model.loading import load_policy


def test_tiny_model_runs_on_one_cpu_thread_by_default():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        load_policy(ModelConfig(name_or_path="tiny"))
        assert torch.get_num_threads() == 1
        load_policy(ModelConfig(name_or_path="tiny", cpu_threads=2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

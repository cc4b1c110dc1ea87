"""Every random number generator a `vigor train` run touches: how each is seeded from
``train.seed``, and its state in a checkpoint.

Details: docs/modules.md.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from the base seed and names (step, round, ...): stable across runs."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


SEED_RULES: dict[str, str] = {
    "derive_seed": "derive_seed(a, b, ...) = the first 8 bytes of sha256('a:b:...') read little-endian, "
                   "shifted right by one (63 bits)",
    "setup": "torch.manual_seed(seed), random.seed(seed) and numpy.random.seed(seed mod 2^32) before the "
             "task, its reward files and the model load (LoRA's initialisation draws from torch's)",
    "data_order": "epoch e's order of the training prompts: random.Random(derive_seed(seed, 'data', e)).shuffle",
    "rollouts": "round r of step t samples with derive_seed(seed, 'rollout', t, r) (vigor_cli/rollout/sampler.py)",
    "evaluation": "the evaluation at step t samples with derive_seed(seed, 'eval', t) (step 0: before training)",
    "allocator": "the strategy's own random.Random(seed) (its state in each checkpoint's allocator.json)",
    "python_random": "random.seed(derive_seed(seed, 'python-random', t)) before step t, "
                     "random.seed(derive_seed(seed, 'python-random', 'eval', t)) before the evaluation at step t",
    "numpy": "numpy.random.seed(derive_seed(seed, 'numpy', t) mod 2^32) before step t, "
             "numpy.random.seed(derive_seed(seed, 'numpy', 'eval', t) mod 2^32) before the evaluation at step t",
    "checkpoint": "torch's (CPU and CUDA), Python's and numpy's global states are saved and restored",
}
"""How every seed of a run follows from ``train.seed`` (the run's record carries this)."""


def seed_run(seed: int) -> None:
    """Seed the global generators before anything of the run is imported or built."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def seed_step(seed: int, step: int, phase: str | None = None) -> None:
    """Seed Python's and numpy's global generators for ``step`` (``phase`` 'eval': for its
    evaluation), as a function of the seed, the phase and the step only: what a reward draws
    does not depend on what ran before (a reward module imported once per process, a resume)."""
    names = (phase, step) if phase else (step,)
    random.seed(derive_seed(seed, "python-random", *names))
    np.random.seed(derive_seed(seed, "numpy", *names) % 2**32)


def rng_state() -> dict:
    """Every global generator's state, as a checkpoint keeps it (plain types and tensors:
    ``torch.load(weights_only=True)`` reads it back)."""
    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python_rng": [version, list(internal), gauss],
        "numpy_rng": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                      "pos": int(numpy_state["state"]["pos"]), "has_gauss": int(numpy_state["has_gauss"]),
                      "gauss": float(numpy_state["gauss"])},
    }


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state`'s generators (a checkpoint written before Python's and
    numpy's were kept restores torch's only)."""
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    if "python_rng" in state:
        version, internal, gauss = state["python_rng"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy_rng" in state:
        n = state["numpy_rng"]
        np.random.set_state({"bit_generator": "MT19937",
                             "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                             "has_gauss": n["has_gauss"], "gauss": n["gauss"]})

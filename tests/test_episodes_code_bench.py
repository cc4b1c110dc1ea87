"""The code-feedback benchmark (bench/episodes_code.py): the arms' settings fit the tiny
model's context and differ only in task.env, its paired summary (fast), and --quick end to
end on the real sandbox (slow)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_bench():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_episodes_code", ROOT / "bench" / "episodes_code.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_episodes_code"] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def test_the_arms_differ_only_in_the_environment(tmp_path):
    arms = {arm: bench.settings(arm, 0, 6, tmp_path, quick=False) for arm in bench.ARMS}
    one = set(arms["one-attempt"]) - {"train.run_name=one-attempt-s0"}
    for arm in ("code-feedback", "retry"):
        extra = set(arms[arm]) - one - {f"train.run_name={arm}-s0"}
        assert extra == {f"task.env={arm}", "task.max_turns=2", "task.max_episode_tokens=200"}


def _run(arm: str, seed: int, final: float, first: float) -> dict:
    return {"arm": arm, "seed": seed, "final": final, "final_first_attempt": first, "start": 0.5, "turns_mean": 1.5,
            "wall_s": 10.0, "curve": {"step": [0, 6], "pass_rate": [0.5, final], "first_attempt": [0.5, first]}}


def test_the_summary_pairs_the_arms_by_seed():
    runs = [_run("code-feedback", 0, 0.6, 0.5), _run("one-attempt", 0, 0.5, 0.5),
            _run("code-feedback", 1, 0.4, 0.3), _run("one-attempt", 1, 0.45, 0.45), _run("retry", 0, 0.55, 0.5)]
    s = bench.summarise(runs)
    pair = s["paired"]["code-feedback - one-attempt"]
    assert pair["seeds"] == 2 and pair["per_seed"] == pytest.approx([0.1, -0.05])
    assert s["paired"]["code-feedback - retry"]["seeds"] == 1
    assert "| code-feedback | 2 | 0.500" in bench.table(s)


@pytest.mark.slow
def test_quick_mode_runs_every_arm(tmp_path):
    out = tmp_path / "quick.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "episodes_code.py"), "--seeds", "1", "--steps", "1",
                           "--quick", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert {r["arm"] for r in runs} == set(bench.ARMS)
    assert all(r["turns_mean"] == 1.0 for r in runs if r["arm"] == "one-attempt")

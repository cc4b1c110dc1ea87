"""The episodes benchmark (bench/episodes.py): its answer-use measure on hand-made evaluation
files, its paired summary and the committed results (fast), and --quick end to end (slow)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_episodes", ROOT / "bench" / "episodes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_episodes"] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def episode(*turns: str) -> dict:
    """An evaluation sample's episode: the model's and the environment's messages alternating."""
    roles = ["assistant", "user"] * len(turns)
    return {"episode": {"messages": [{"role": r, "content": t} for r, t in zip(roles, turns)]}}


def write_eval(run: Path, step: int, samples: list[dict]) -> None:
    (run / "eval").mkdir(parents=True, exist_ok=True)
    body = {"sets": {"tiny-guess": {"samples": samples}}}
    (run / "eval" / f"step-{step}.json").write_text(json.dumps(body))


def test_guess_moves_counts_moves_that_follow_the_answer(tmp_path):
    samples = [
        episode(r"\boxed{4}", "Higher. Guess again", r"\boxed{6}", "Lower. Guess again", r"\boxed{5}"),  # follows twice
        episode(r"\boxed{4}", "Lower. Guess again", r"\boxed{4}"),      # repeats the guess
        episode(r"\boxed{2}", "Higher. Guess again", r"\boxed{1}"),     # moves the wrong way
        episode(r"\boxed{3}", "Higher. Guess again", "no number here"),  # not a follow-up guess
        {"completion": r"\boxed{3}"},                                    # not an episode
    ]
    write_eval(tmp_path, 0, samples)
    got = bench.guess_moves(tmp_path / "eval" / "step-0.json")
    assert got == {"follow_ups": 4, "changed": 3 / 4, "followed_direction": 2 / 4}


def test_retry_answers_have_no_direction_and_runs_compare_first_and_last_evaluation(tmp_path):
    write_eval(tmp_path, 0, [episode(r"\boxed{4}", "Wrong. Guess again", r"\boxed{4}")])
    write_eval(tmp_path, 10, [episode(r"\boxed{4}", "Wrong. Guess again", r"\boxed{5}")])
    write_eval(tmp_path, 2, [])  # sorted by step number, not by name
    got = bench.answer_use(tmp_path)
    assert got["start"] == {"follow_ups": 1, "changed": 0.0, "followed_direction": None}
    assert got["end"] == {"follow_ups": 1, "changed": 1.0, "followed_direction": None}


def test_summary_pairs_arms_by_seed_only_where_both_ran():
    def run(arm, seed, acc):
        return {"arm": arm, "seed": seed, "final_accuracy": acc, "final_first_attempt": 0.1,
                "curve": {"accuracy": [0.1, acc]}, "model_tokens": 1, "env_tokens": 0, "turns_mean": 1.0, "wall_s": 1.0}

    runs = [run("higher-lower", 0, 0.5), run("higher-lower", 1, 0.7), run("retry", 0, 0.3)]
    summary = bench.summarise(runs)
    assert summary["arms"]["higher-lower"]["seeds"] == 2
    assert summary["paired"]["higher-lower - retry"]["seeds"] == 1
    assert abs(summary["paired"]["higher-lower - retry"]["mean"] - 0.2) < 1e-12
    assert "one-turn" not in summary["arms"]
    assert "| higher-lower | 2 |" in bench.table(summary)
    assert summary["answer_use"] == {}


def test_summary_averages_answer_use_over_the_runs_that_measured_it():
    def use(changed, followed):
        return {"follow_ups": 10, "changed": changed, "followed_direction": followed}

    runs = [{"arm": "higher-lower", "seed": s, "final_accuracy": 0.5, "final_first_attempt": 0.1,
             "curve": {"accuracy": [0.1, 0.5]}, "model_tokens": 1, "env_tokens": 1, "turns_mean": 2.0, "wall_s": 1.0,
             **({"answer_use": {"start": use(1.0, 0.4), "end": use(0.8, f)}} if f is not None else {})}
            for s, f in ((0, 0.9), (1, 0.7), (2, None))]
    runs.append({**runs[0], "arm": "retry", "answer_use": {"start": use(0.5, None), "end": use(1.0, None)}})
    got = bench.summarise(runs)["answer_use"]
    assert got["higher-lower"]["seeds"] == 2
    assert abs(got["higher-lower"]["end"]["followed_direction"] - 0.8) < 1e-12
    assert got["retry"]["end"] == {"changed": 1.0, "followed_direction": None}
    assert "| retry | 1 | 0.500 -> 1.000 | - -> - |" in bench.table(bench.summarise(runs))


def test_the_committed_results_hold_paired_seeds_of_every_arm_and_no_machine_paths():
    path = ROOT / "bench" / "episodes_results.json"
    text = path.read_text()
    assert "/tmp/" not in text and "/home/" not in text and "/work/" not in text
    body = json.loads(text)
    assert set(body["summary"]["arms"]) == set(bench.ARMS)
    assert all(arm["seeds"] >= 3 for arm in body["summary"]["arms"].values())
    assert body["summary"]["paired"]["higher-lower - retry"]["seeds"] >= 3
    assert json.loads(json.dumps(bench.summarise(body["runs"]))) == body["summary"]  # the summary is of these runs


@pytest.mark.slow
def test_quick_mode_trains_every_arm_and_measures_answer_use(tmp_path):
    """The whole benchmark in --quick mode on the bundled tiny model: every arm trains, the
    environment arms record answer use, the table prints, the results file is the one named."""
    out = tmp_path / "quick.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "episodes.py"), "--seeds", "1", "--steps", "2",
                           "--quick", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    body = json.loads(out.read_text())
    assert {r["arm"] for r in body["runs"]} == set(bench.ARMS)
    for run in body["runs"]:
        assert ("answer_use" in run) == (bench.ARMS[run["arm"]] is not None)
        assert run["turns_mean"] > 1.0 if bench.ARMS[run["arm"]] else run["turns_mean"] == 1.0
    assert set(body["summary"]["answer_use"]) == {"higher-lower", "retry"}
    assert "| paired by seed |" in done.stdout and "| answers used" in done.stdout

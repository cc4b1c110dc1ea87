"""The README tells a new user what they will see: its quick-start numbers are those of the
command it gives (measured by bench/quick_start.py, repeated in BENCHMARKS.md), it comes before
the study's counts, it shows an environment, and it speaks of what was measured, not of the
project's internal issue numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = json.loads((ROOT / "bench" / "quick_start_results.json").read_text(encoding="utf-8"))


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    nxt = text.find("\n## ", start + 1)
    return text[start: nxt if nxt > 0 else None]


def test_the_readme_names_no_internal_issue_number():
    found = re.findall(r"\bissues?\s+(?:#\s*)?\d+", README, flags=re.IGNORECASE)
    assert not found, found


def test_the_quick_start_comes_first_and_before_the_studys_counts():
    titles = re.findall(r"^## (.+)$", README, flags=re.MULTILINE)
    assert titles.index("Quick start") < titles.index("Which strategy to use")
    assert titles.index("Install") < titles.index("Quick start")
    assert "vigor train " in section(README, "Quick start") and "python3 -m pytest -q" in section(README, "Quick start")


def test_the_quick_start_numbers_are_the_measured_run():
    """Accuracy before and after, rollouts, steps and times in the README are the ones
    bench/quick_start.py recorded for `vigor train`, and BENCHMARKS.md says the same."""
    r = RESULTS
    assert r["command"] == "vigor train"
    text = " ".join(section(README, "Quick start").split())
    before_after = f"{r['start_accuracy']:.3f} → {r['final_accuracy']:.3f}"
    assert before_after in text
    assert f"pass rate {r['start_pass_rate']:.3f} → {r['final_pass_rate']:.3f}" in text
    assert f"{r['steps']} steps and {r['rollouts']:,} rollouts" in text
    assert f"{r['train_seconds']} s of training and {r['wall_seconds']} s in all ({r['cpu_seconds']} CPU-s)" in text
    bench = " ".join(section((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"), "The quick start").split())
    assert before_after in bench and f"{r['rollouts']:,} rollouts" in bench


def test_the_readme_shows_an_environment_and_the_command_that_trains_it():
    env = section(README, "An environment that answers back")
    code = re.findall(r"```python\n(.*?)```", env, flags=re.DOTALL)
    assert code and "def reset(" in code[0] and "def get_reward(" in code[0]
    commands = re.findall(r"```bash\n(.*?)```", env, flags=re.DOTALL)
    assert commands and "--env examples/number-game/env.py:NumberGame" in commands[0]
    example = (ROOT / "examples" / "number-game" / "env.py").read_text(encoding="utf-8")
    for method in re.findall(r"def (\w+)\(", code[0]):  # the abridged class is the example's
        assert f"def {method}(" in example

"""Benchmark: what the boundary around a user's reward function costs per call.

Each call of a `--reward FILE.py:FUNC` function goes through vigor_cli/user/code.py: its own
copies of the prompts, completions and columns, the SIGINT handler and the time limit's
watchdog thread, the standard streams, working directory and settings saved and put back.
This times one call of a real reward file (a regex over each completion, as the README's
letter-count reward does) through ``Reward.__call__`` (the boundary) against the bare
function, side by side in one process, for rounds of 64, 512 and 4096 completions with text
prompts and with chat-message prompts. Process CPU time, median of the repeats, so other
processes on a shared machine do not inflate it.

Run: python bench/reward_guard.py [--repeats N]   -> bench/reward_guard_results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from vigor_cli.user import rewards  # noqa: E402

SIZES = (64, 512, 4096)
REWARD = '''
import re


def letters(prompts, completions, word, **kwargs):
    out = []
    for completion, w in zip(completions, word):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        found = re.search(r"\\\\boxed\\{(\\d+)\\}", text)
        out.append(0.0 if found is None else max(0.0, 1 - abs(int(found.group(1)) - len(w)) / 4))
    return out
'''


def batch(n: int, chat: bool) -> tuple[list, list, dict]:
    words = [f"word{i % 97}" for i in range(n)]
    if chat:
        prompts = [[{"role": "system", "content": "Count letters."}, {"role": "user", "content": f"letters in {w}="}]
                   for w in words]
        completions = [[{"role": "assistant", "content": f"\\boxed{{{len(w)}}}"}] for w in words]
    else:
        prompts = [f"letters in {w}=" for w in words]
        completions = [f"\\boxed{{{len(w)}}} " * 8 for w in words]
    return prompts, completions, {"word": words}


def cpu_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("reward_guard_results.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "reward.py"
        path.write_text(REWARD)
        guarded = rewards.load_reward(f"{path}:letters", timeout=600.0)
        bare = rewards.import_function(f"{path}:letters")
        rows = []
        for chat in (False, True):
            for n in SIZES:
                prompts, completions, columns = batch(n, chat)
                assert guarded(prompts, completions, **columns) == bare(prompts, completions, **columns)
                t_bare = cpu_ms(lambda: bare(prompts=prompts, completions=completions, **columns), args.repeats)
                t_guarded = cpu_ms(lambda: guarded(prompts, completions, **columns), args.repeats)
                rows.append({"prompts": "messages" if chat else "text", "completions": n, "bare_ms": t_bare,
                             "guarded_ms": t_guarded, "overhead_ms": t_guarded - t_bare,
                             "overhead_us_per_completion": (t_guarded - t_bare) * 1e3 / n})
    table = Table(title="reward call through the boundary vs bare (process CPU ms, median)")
    for col in ("prompts", "completions", "bare ms", "guarded ms", "overhead ms", "us / completion"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["prompts"], str(r["completions"]), f"{r['bare_ms']:.3f}", f"{r['guarded_ms']:.3f}",
                      f"{r['overhead_ms']:.3f}", f"{r['overhead_us_per_completion']:.2f}")
    Console().print(table)
    args.out.write_text(json.dumps({"python": platform.python_version(), "machine": platform.machine(),
                                    "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

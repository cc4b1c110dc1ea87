"""`vigor inspect-allocation`'s view of a step's episodes, turn by turn (runs with task.env).

Reads ``episodes.jsonl`` (docs/episodes.md) through the run's checked reader: every episode of
a step, in generation order, with its messages. Each prompt's first ``per_prompt`` episodes
are shown: how the episode went (turns, how it ended, its reward and whether the update used
it), then each message on its own line, the model's and the environment's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vigor_cli.console import shown

ROLE_LABEL = {"assistant": "model", "user": "env", "tool": "tool"}


def load_step_episodes(run_path: Path, step: int) -> list[dict]:
    """The episodes of ``step`` from the run's episodes.jsonl (empty without that file)."""
    from vigor_cli.run.directory import RunDir

    if not (run_path / "episodes.jsonl").is_file():
        return []
    return [r for r in RunDir(run_path).read_log("episodes.jsonl").records if r["step"] == step]


def by_prompt(episodes: list[dict], per_prompt: int) -> dict[str, list[dict]]:
    """Each prompt's first ``per_prompt`` episodes, prompts in first-seen order."""
    out: dict[str, list[dict]] = {}
    for e in episodes:
        mine = out.setdefault(e["uid"], [])
        if len(mine) < per_prompt:
            mine.append(e)
    return out


def _reward(value: Any) -> str:
    return "unscored" if value is None else f"{value:.2f}"


def _one_line(text: Any, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_episodes(console: Any, step: int, episodes: list[dict], per_prompt: int, text_width: int) -> None:
    """The step's episodes turn by turn (module docstring)."""
    if not episodes:
        return
    picked = by_prompt(episodes, per_prompt)
    console.print(f"[bold]episodes of step {step}[/] ({len(episodes)} in all; the first {per_prompt} of each "
                  "prompt, turn by turn; --episodes K shows more, 0 none)", highlight=False)
    for uid, mine in picked.items():
        for e in mine:
            used = "in the update" if e.get("in_update") else "not in the update"
            error = f", {shown(_one_line(e['error'], text_width))}" if e.get("error") else ""
            console.print(f"  {shown(uid)} #{e['index']} (round {e['round']}): {e['turns']} turns, ended "
                          f"{e['ended']}{error}; reward {_reward(e.get('reward'))}, {used}", highlight=False)
            for turn, m in enumerate(e.get("messages", []), start=1):
                label = ROLE_LABEL.get(m.get("role"), m.get("role", "?"))
                names = ", ".join(c["function"]["name"] for c in m.get("tool_calls") or [])
                calls = f" {shown(f'[calls {names}]')}" if names else ""
                console.print(f"    {turn:>2} {label:<5} {shown(_one_line(m.get('content', ''), text_width))}{calls}",
                              highlight=False, soft_wrap=True)


def turns_text(episode: dict) -> str:
    """An episode's own turns on one line (``model: ... [calls multiply] | tool: 42 | model: ...``)."""
    parts = []
    for m in episode.get("messages", []):
        names = ", ".join(c["function"]["name"] for c in m.get("tool_calls") or [])
        calls = f" [calls {names}]" if names else ""
        said = " ".join(f"{' '.join(str(m.get('content', '')).split())}{calls}".split())
        parts.append(f"{ROLE_LABEL.get(m.get('role'), m.get('role', '?'))}: {said}")
    return " | ".join(parts)


def with_episode_text(step: Any, episodes: list[dict]) -> Any:
    """``step`` (its allocation record) with each prompt's text column showing its first
    episode's turns, for a run with an environment: every prompt there starts with the same
    tool description, so its text tells the rows apart no more (unchanged without episodes)."""
    from dataclasses import replace

    first = by_prompt(episodes, 1)
    if not first:
        return step
    prompts = [replace(p, text=turns_text(first[p.uid][0])) if first.get(p.uid) else p for p in step.prompts]
    return replace(step, prompts=prompts)


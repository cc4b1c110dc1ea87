"""An episode as a rollout, the environment interface, and a step's episode metrics.

An :class:`Episode` is a :class:`~vigor_cli.rollout.base.Rollout` whose tokens after the
prompt alternate between the model's turns and the environment's answers. ``mask`` marks the
model's own tokens (1) and the environment's (0): the loss trains only the first, and an
environment token has no log-probability (0.0 in ``logprobs``). ``text`` is the model's last
turn (what a task's verifier grades); ``messages`` the whole exchange after the prompt, as
chat messages.

An :class:`Environment` answers a batch of episodes at once: :meth:`Environment.start` opens
an episode per example, :meth:`Environment.answer` answers each one's latest model turn (a
message to append, or the end), :meth:`Environment.release` closes them after their rewards.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from vigor_cli.rollout.base import Rollout

# how an episode ended (metrics.jsonl counts them as episodes/ended/<reason>)
ENV_ERROR = "env_error"
"""The environment raised (or returned something unusable): the episode is not scored."""
ENV_TIMEOUT = "env_timeout"
"""A call into the environment ran past task.env_timeout_s: the episode is not scored."""
MAX_TURNS = "max_turns"
"""task.max_turns model turns were taken."""
TOKEN_BUDGET = "token_budget"
"""The episode's tokens reached task.max_episode_tokens (a turn cut, or an answer that did not fit)."""
TRUNCATED = "truncated"
"""A model turn reached sampling.max_new_tokens before it ended."""
FAILED = (ENV_ERROR, ENV_TIMEOUT)
"""Reasons that leave an episode unscored (its environment's state is not to be trusted)."""


@dataclass
class Episode(Rollout):
    """One rollout of several turns (see the module docstring)."""

    mask: list[int] = field(default_factory=list)
    """Per token of ``token_ids``: 1 for the model's, 0 for the environment's."""
    messages: list[dict] = field(default_factory=list)
    """After the prompt: ``{"role": "assistant", "content": ...}`` per model turn (with
    ``tool_calls`` when it called tools) and the environment's messages (role ``user`` or
    ``tool``)."""
    ended: str = ""
    """How it ended: a reason of this module, or the environment's own ('passed', 'answered', ...)."""
    error: str | None = None
    """The environment's error, one line, when it ended the episode with one."""
    first_text: str = ""
    """The model's first turn (its first attempt)."""
    turn_start: int = 0
    """Where the model's latest turn starts in ``token_ids``."""
    prompt_ids: list[int] | None = None
    """The episode's own prompt when the environment changed it (an observation from
    ``reset``); None: the example's prompt."""
    session: Any = field(default=None, repr=False, compare=False)
    """The environment's state of this episode (a TRL-convention environment's instance)."""

    @property
    def turns(self) -> int:
        """The model's turns."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)

    @property
    def env_tokens(self) -> int:
        return len(self.mask) - sum(self.mask)

    @property
    def failed(self) -> bool:
        """The environment failed this episode: it is left unscored."""
        return self.ended in FAILED


@dataclass
class EpisodeSummary:
    """What the run's metrics and logs read of an episode (an :class:`Episode` has the same
    attributes): the TRL path gathers these from every process."""

    turns: int
    model_tokens: int
    env_tokens: int
    ended: str
    error: str | None = None
    messages: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, episode: Episode, text_limit: int) -> "EpisodeSummary":
        record = episode_record(episode, text_limit)
        return cls(record["turns"], record["model_tokens"], record["env_tokens"], record["ended"],
                   record["error"], record["messages"])


def is_episode(rollout: Any) -> bool:
    """An :class:`Episode` or an :class:`EpisodeSummary`."""
    return isinstance(rollout, (Episode, EpisodeSummary))


@dataclass
class Reply:
    """An environment's answer to one episode's latest model turn."""

    messages: list[dict] = field(default_factory=list)
    """Messages to append before the model's next turn (``role`` user or tool, ``content``)."""
    done: bool = False
    """The episode ends here (``messages`` are then not appended)."""
    ended: str = ""
    """Why it ended (when ``done``)."""
    error: str | None = None
    """The environment failed on this episode (``ended`` says how: env_error, env_timeout)."""
    tool_calls: list[dict] | None = None
    """The tool calls it read in the turn (logged with the model's message)."""


@dataclass
class Start:
    """An episode opened by :meth:`Environment.start`."""

    session: Any = None
    observation: str | None = None
    """Text the environment adds to the end of the prompt's last user message (TRL's reset)."""
    error: str | None = None
    ended: str = ""


class Environment(ABC):
    """What the episode loop drives (vigor_cli/episodes/loop.py); a batch at a time."""

    name: str = "environment"
    attempts: bool = False
    """Every model turn is a whole answer (evaluation then also scores the first turn alone:
    pass@1 at the first attempt beside after the environment's answers)."""
    reward_name: str | None = None
    """The environment scores episodes itself (:meth:`reward`), logged under this name."""

    @abstractmethod
    def start(self, examples: Sequence[Any]) -> list[Start]:
        """Open an episode per example (an error is that episode's, never the batch's)."""

    @abstractmethod
    def answer(self, episodes: Sequence[Episode], examples: Sequence[Any], last: bool) -> list[Reply]:
        """Answer each episode's latest model turn (``episode.text``); ``last``: no turn
        follows (answer with the end)."""

    summary: str = ""
    """What it does, in a few words (a built-in's registry entry)."""

    def describe(self) -> str:
        """One line on what the environment is (`vigor train --dry-run` prints it)."""
        return f"{self.name} (built-in): {self.summary}" if self.summary else self.name

    def scoring_example(self, example: Any) -> Any:
        """The example the task grades the episode's final turn against (default: as is)."""
        return example

    def reward(self, episodes: Sequence[Episode]) -> list[float | None]:
        """The environment's own reward per episode (when ``reward_name`` is set)."""
        return [None] * len(episodes)

    def prompt_text(self, text: str) -> str:
        """A prompt rendered without a chat template, as this environment shows it (a tool
        list added); default: as is."""
        return text

    def template_kwargs(self) -> dict:
        """Extra arguments of ``apply_chat_template`` for the prompt (``tools``); default none."""
        return {}

    def observation(self, example: Any) -> str | None:
        """The text an episode of ``example`` adds to its prompt at the start (a preview's;
        default none)."""
        return None

    def release(self, episodes: Sequence[Episode]) -> None:
        """The episodes' rewards are in: their sessions may be reused."""

    def close(self) -> None:
        """Release what the environment holds."""


# --------------------------------------------------------------------------- metrics
CALL_FAILED = ("bad_tool_call", ENV_ERROR, ENV_TIMEOUT)
"""How an episode ends when the tool calls of its last turn failed (could not be read or run)."""


@dataclass
class ToolCalls:
    """The tool calls an episode's model wrote: ``ran`` (their results came back), ``failed``
    (unreadable, an unknown tool, arguments that do not fit, a tool that raised or timed out)
    and ``by_tool`` (every call written, by tool name; an unreadable call has no name)."""

    ran: int = 0
    failed: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)

    @property
    def written(self) -> int:
        """Every call the model wrote: ran, failed, and those of a last turn never run."""
        return max(sum(self.by_tool.values()), self.ran + self.failed)


def tool_calls(messages: Sequence[dict], ended: str) -> ToolCalls:
    """Count an episode's tool calls from its messages (see :class:`ToolCalls`)."""
    out = ToolCalls()
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    for i in turns:
        calls = messages[i].get("tool_calls") or []
        for c in calls:
            name = str((c.get("function") or c).get("name", "?"))
            out.by_tool[name] = out.by_tool.get(name, 0) + 1
        answered = i + 1 < len(messages) and messages[i + 1].get("role") == "tool"
        if answered:
            out.ran += len(calls)
        elif i == turns[-1] and ended in CALL_FAILED:
            out.failed += max(1, len(calls)) if ended == "bad_tool_call" or calls else 0
    return out


def episode_metrics(rollouts: Sequence[Any], max_turns: int | None = None) -> dict[str, float]:
    """The episode half of a step's metrics.jsonl line (empty when no rollout is an episode):
    model turns per episode (and their share of ``max_turns``), tool calls per episode (all,
    failed, per tool), model and environment tokens, and how many ended each way."""
    episodes = [r for r in rollouts if is_episode(r)]
    if not episodes:
        return {}
    n = len(episodes)
    turns = [e.turns for e in episodes]
    ended = Counter(e.ended or "unknown" for e in episodes)
    calls = [tool_calls(e.messages, e.ended) for e in episodes]
    tools = sorted({name for c in calls for name in c.by_tool})
    out = {
        "episodes/turns/mean": sum(turns) / n,
        "episodes/turns/max": max(turns),
        "episodes/tool_calls/mean": sum(c.written for c in calls) / n,
        "episodes/tool_calls/failed": sum(c.failed for c in calls) / n,
        "episodes/tool_calls/none": sum(c.written == 0 for c in calls) / n,
        **{f"episodes/tool_calls/tool/{name}": sum(c.by_tool.get(name, 0) for c in calls) / n for name in tools},
        "episodes/model_tokens": sum(e.model_tokens for e in episodes),
        "episodes/env_tokens": sum(e.env_tokens for e in episodes),
        **{f"episodes/ended/{reason}": count for reason, count in sorted(ended.items())},
    }
    if max_turns:
        out["episodes/turns/limit"] = max_turns
        out["episodes/turns/used"] = sum(turns) / (n * max_turns)
    return out


def record_metrics(records: Sequence[dict]) -> dict[str, float]:
    """:func:`episode_metrics` of episodes as their records hold them (an evaluation's samples),
    without the ``episodes/`` prefix: turns, tool calls, tokens, how they ended."""
    summaries = [EpisodeSummary(r["turns"], r["model_tokens"], r["env_tokens"], r["ended"], r.get("error"),
                                r.get("messages") or []) for r in records]
    return {k.removeprefix("episodes/"): v for k, v in episode_metrics(summaries).items()}


def episode_record(episode: Any, text_limit: int) -> dict:
    """An episode as its lines in the run's files show it: turns, tokens, how it ended, and
    its messages (each message's text cut at ``text_limit`` characters)."""
    def cut(message: dict) -> dict:
        out = {k: v for k, v in message.items() if k != "content"}
        content = str(message.get("content", ""))
        out["content"] = content if len(content) <= text_limit else content[:text_limit] + "..."
        return out

    return {"turns": episode.turns, "ended": episode.ended, "error": episode.error,
            "model_tokens": episode.model_tokens, "env_tokens": episode.env_tokens,
            "messages": [cut(m) for m in episode.messages]}

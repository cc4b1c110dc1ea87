"""Health checks: say when a step's rollouts were spent without learning signal, and why.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from vigor_cli.errors import UserError

JUMP_HISTORY = 10
"""Steps a jump check compares the current value with (their median)."""


# --------------------------------------------------------------------------- measuring
def template_suffix(tokenizer: Any) -> str | None:
    """What the chat template puts after a user turn when it opens the assistant's (the
    generation prompt); None when the tokenizer has no chat template. A prompt the template
    rendered ends with it; one that bypassed the template does not."""
    from vigor_cli.tasks.prompts import has_chat_template

    if tokenizer is None or not has_chat_template(tokenizer):
        return None
    marker = "\u2063vigor-health\u2063"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # a template that cannot render a plain user turn: nothing to compare with
        return None
    suffix = text.split(marker)[-1] if marker in text else ""
    return suffix.strip() or None


def templated(prompt_text: str, suffix: str | None) -> bool:
    """Whether ``prompt_text`` went through the chat template (always true without one)."""
    return suffix is None or prompt_text.rstrip().endswith(suffix)


@dataclass
class PromptInfo:
    """What the checks need to know of one training prompt."""

    tokens: int
    templated: bool = True


def measure(samples: Iterable[Any], prompts: Mapping[str, PromptInfo], *, max_new_tokens: int,
            context: int | None, update: Mapping[str, float] | None = None,
            text: Callable[[Any], str | None] = lambda s: s.rollout.text, tools: bool = False) -> dict[str, float]:
    """The step's health numbers from its generated rollouts.

    ``samples``: every rollout generated this step, each with ``uid``, ``reward`` (None when
    unscored), ``tokens`` and ``truncated``; ``text(sample)`` is its completion (None where it
    is not known here: another rank's, on the TRL path). ``prompts``: the step's prompts by
    uid. ``context``: the longest prompt + completion the engine takes (None: unknown).
    ``update``: the update's metrics (``losses/kl``, clip fractions). ``tools``: the
    rollouts are episodes of an environment with tools (``no_tool_calls`` is measured)."""
    samples = list(samples)
    groups: dict[str, list[Any]] = defaultdict(list)
    for s in samples:
        groups[s.uid].append(s)
    n = len(samples)
    texts = {id(s): text(s) for s in samples}
    known = [s for s in samples if texts[id(s)] is not None]
    out: dict[str, float] = {
        "truncated": _share(s.truncated for s in samples),
        "empty": _share(s.tokens <= 1 or not texts[id(s)].strip() for s in known),
    }
    # Zero variance: groups (and their rollouts) whose scored rewards are all equal.
    scored_groups = [[s.reward for s in g if s.reward is not None] for g in groups.values()]
    scored_groups = [g for g in scored_groups if len(g) >= 2]
    flat = [g for g in scored_groups if max(g) == min(g)]
    out["zero_variance"] = len(flat) / len(scored_groups) if scored_groups else 0.0
    out["zero_variance_rollouts"] = sum(map(len, flat)) / n if n else 0.0
    # Identical text: groups (of two or more known texts) whose rollouts are all the same.
    text_groups = [[texts[id(s)] for s in g if texts[id(s)] is not None] for g in groups.values()]
    text_groups = [g for g in text_groups if len(g) >= 2]
    out["identical"] = _share(len(set(g)) == 1 for g in text_groups)
    rewards = [s.reward for s in samples if s.reward is not None]
    out["constant_reward"] = 1.0 if len(rewards) >= 2 and max(rewards) == min(rewards) else 0.0
    out["reward_value"] = rewards[0] if rewards else 0.0
    step_prompts = [prompts[u] for u in groups if u in prompts]
    out["prompt_cut"] = (_share(p.tokens + max_new_tokens > context for p in step_prompts)
                         if context else 0.0)
    out["chat_template"] = _share(not p.templated for p in step_prompts)
    out.update(_unscored(samples))
    out.update(hard_coding(samples))
    out.update(tool_use(samples) if tools else {"no_tool_calls": 0.0})
    update = update or {}
    out["kl"] = float(update.get("losses/kl", 0.0))
    out["clipfrac"] = float(update.get("losses/clipfrac_low", 0.0)) + float(update.get("losses/clipfrac_high", 0.0))
    return out


def _unscored(samples: list[Any]) -> dict[str, float]:
    """``unscored``: the largest share of rollouts left without a reward, by the reward as a
    whole (``unscored/all``: every function returned None) or by one of several functions
    (``unscored/<name>``)."""
    out = {"unscored/all": _share(s.reward is None for s in samples)}
    names = list(dict.fromkeys(n for s in samples for n in (getattr(s, "components", None) or {})))
    for name in names:
        out[f"unscored/{name}"] = _share((getattr(s, "components", None) or {}).get(name) is None
                                         for s in samples)
    out["unscored"] = max(out.values()) if samples else 0.0
    return out


def hard_coding(samples: Sequence[Any]) -> dict[str, float]:
    """Over the step's graded programs (rollouts whose details carry a code verdict's signs,
    vigor_cli/verifiers/hard_coding.py): the share that looks hard-coded by either sign
    (``hard_coding``), that passes every public test but fails most private ones
    (``hard_coded``), and whose source holds the public tests' expected outputs
    (``quoted_outputs``). All 0 where nothing was graded that way."""
    graded = [d for d in (getattr(s, "details", None) or {} for s in samples) if "hard_coded" in d]
    return {"hard_coding": _share(d["hard_coded"] or d["quotes_outputs"] for d in graded),
            "hard_coded": _share(d["hard_coded"] for d in graded),
            "quoted_outputs": _share(d["quotes_outputs"] for d in graded)}


def tool_use(samples: Sequence[Any]) -> dict[str, float]:
    """Over the step's episodes: the share whose model called no tool (not even one that
    failed) and took one turn only (``no_tool_calls``), and the mean turns per episode."""
    from vigor_cli.episodes.base import is_episode, tool_calls

    episodes = [e for e in ((s.episode if getattr(s, "episode", None) is not None else s.rollout) for s in samples)
                if is_episode(e)]
    idle = [tool_calls(e.messages, e.ended).written == 0 and e.turns <= 1 for e in episodes]
    return {"no_tool_calls": _share(idle),
            "episode_turns": sum(e.turns for e in episodes) / len(episodes) if episodes else 0.0}


def _share(flags: Iterable[bool]) -> float:
    flags = list(flags)
    return sum(map(bool, flags)) / len(flags) if flags else 0.0


# --------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class Check:
    """One condition: ``value(measured, history, rule)`` is compared with ``rule.threshold``;
    ``message(span, value, measured, cfg)`` is the line (cause and the key to change)."""

    name: str
    value: Callable[[Mapping[str, float], list[Mapping[str, float]], Any], float]
    message: Callable[[str, float, Mapping[str, float], Any], str]
    summary: str
    """One line for the README and --help: what it watches."""
    parts: tuple[str, ...] = ()
    """Measured numbers its value is made of, logged beside it as ``health/<part>``."""


CHECKS: dict[str, Check] = {}
"""Check name -> check, in the order they are reported; each has ``health.<name>`` in the config."""


def register_check(name: str, summary: str,
                   value: Callable[[Mapping[str, float], list[Mapping[str, float]], Any], float] | None = None,
                   parts: tuple[str, ...] = ()):
    """Decorator on a check's message function; ``value`` defaults to the measured number of
    the same name; ``parts`` are measured numbers logged beside it."""

    def add(message: Callable[[str, float, Mapping[str, float], Any], str]):
        CHECKS[name] = Check(name, value or (lambda m, h, rule: m[name]), message, summary, parts)
        return message

    return add


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


@register_check("truncated", "share of completions cut at sampling.max_new_tokens")
def _truncated(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    return (f"{span}: {_pct(v)} of completions hit sampling.max_new_tokens={cfg.sampling.max_new_tokens} "
            f"(raise it, or set grpo.mask_truncated=true so cut completions carry no gradient)")


@register_check("zero_variance", "share of groups whose rollouts all got the same reward (no gradient)")
def _zero_variance(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    every = "every group has" if v >= 1.0 else f"{_pct(v)} of groups have"
    rollouts = f"{_pct(m['zero_variance_rollouts'])} of rollouts carry no gradient"
    temperature = cfg.sampling.temperature
    if temperature < 0.3:
        fix = f"at sampling.temperature={temperature:g}; raise the temperature"
    else:
        fix = ("the prompts are all solved or all failed at this model's level; pick data of "
               "middling difficulty, or let allocation.strategy (auto, dapo) skip such prompts")
    return f"{span}: {every} zero reward variance, {rollouts}: {fix}"


@register_check("identical", "share of groups whose rollouts are all the same text")
def _identical(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    every = "every prompt's rollouts are" if v >= 1.0 else f"{_pct(v)} of prompts' rollouts are"
    return (f"{span}: {every} all the same text at sampling.temperature={cfg.sampling.temperature:g}, "
            f"top_p={cfg.sampling.top_p:g}: a group of copies holds one sample's information; raise "
            "sampling.temperature (or top_p)")


@register_check("constant_reward", "1 when every scored rollout of the step got the same reward")
def _constant(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    return (f"{span}: every rollout got reward {m['reward_value']:g}: the reward never varies; "
            "check the reward function (does the completion ever meet its format?) and task.name/--reward")


@register_check("empty", "share of completions that are empty or stop at once")
def _empty(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    return (f"{span}: {_pct(v)} of completions are empty or stop after one token: check the prompt "
            "format (task.prompt_template, the chat template) and the stop tokens")


@register_check("prompt_cut", "share of prompts that leave no room for sampling.max_new_tokens in the context")
def _prompt_cut(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    return (f"{span}: {_pct(v)} of prompts plus sampling.max_new_tokens={cfg.sampling.max_new_tokens} "
            "exceed the context: their completions are cut by the context; lower "
            "task.max_prompt_tokens or sampling.max_new_tokens (or raise engine.max_model_len)")


@register_check("chat_template", "share of prompts not rendered by the tokenizer's chat template")
def _chat_template(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    return (f"{span}: {_pct(v)} of prompts were not rendered with the tokenizer's chat template "
            "(plain-string prompts are passed as they are): give the prompts as message lists "
            "(`prompt: [{role: user, content: ...}]`) or use a base model")


@register_check("unscored", "share of rollouts a reward function returned None for (no reward, no gradient)",
                value=lambda m, h, rule: m.get("unscored", 0.0))
def _unscored_line(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    names = [k.removeprefix("unscored/") for k in m if k.startswith("unscored/") and k != "unscored/all"]
    if m.get("unscored/all") == v:
        who = f"reward function {names[0]} returned" if len(names) == 1 else "every reward function returned"
    else:
        who = f"reward function {next(n for n in names if m[f'unscored/{n}'] == v)} returned"
    return (f"{span}: {who} None for {_pct(v)} of rollouts (None: 'cannot score this one'): they carry no "
            "reward and no gradient; check what the function returns for this data (task.rewards)")


@register_check("hard_coding", "code tasks: share of graded programs that pass every public test but fail "
                "most private ones, or hold the public tests' expected outputs in their source",
                value=lambda m, h, rule: m.get("hard_coding", 0.0),  # 0 for a task that grades no code
                parts=("hard_coded", "quoted_outputs"))
def _hard_coding(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    signs = (f"{_pct(m.get('hard_coded', 0.0))} pass every public test but fail most private ones, "
             f"{_pct(m.get('quoted_outputs', 0.0))} hold the public tests' expected outputs in their source")
    if getattr(cfg.task, "code_protocol", "disjoint") == "same-problem":
        fix = ("task.code_protocol=same-problem rewards the public tests, the statement's samples, "
               "so printing them pays: train with task.code_protocol=disjoint (all tests rewarded)")
    else:
        fix = ("they earn little, as every test is rewarded; if it persists the programs are learning "
               "the samples, or are too slow for the large private tests")
    return f"{span}: {_pct(v)} of graded programs look hard-coded ({signs}): {fix}"


@register_check("no_tool_calls", "environments with tools: share of episodes whose model called no tool and "
                "took one turn only", value=lambda m, h, rule: m.get("no_tool_calls", 0.0))
def _no_tool_calls(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    every = "no episode's model called a tool" if v >= 1.0 else f"{_pct(v)} of episodes called no tool"
    env = f" (task.env={cfg.task.env})" if cfg.task.env else ""
    return (f"{span}: {every}{env}; they took one turn of task.max_turns={cfg.task.max_turns}, "
            "so no tool use can be learned: check that the prompt shows the tools in a form the model writes "
            "(`vigor train --dry-run` renders it; a chat template with tools, a model that knows the "
            "<tool_call> format), or warm the model on tool calls first")


def _jump(key: str) -> Callable[[Mapping[str, float], list[Mapping[str, float]], Any], float]:
    """The current value over the median of the previous steps' (at least 3 of them); 0 below
    the rule's ``floor`` (a jump from 1e-6 to 1e-4 is no alarm)."""

    def value(m: Mapping[str, float], history: list[Mapping[str, float]], rule: Any) -> float:
        past = [h[key] for h in history[-JUMP_HISTORY:]]
        if len(past) < 3 or m[key] < rule.floor:
            return 0.0
        base = statistics.median(past)
        return m[key] / base if base > 0 else (math.inf if m[key] > 0 else 0.0)

    return value


@register_check("kl_jump", "losses/kl over the median of the previous steps' (a ratio)", value=_jump("kl"))
def _kl_jump(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    times = "from zero" if math.isinf(v) else f"{v:.0f}x its recent median"
    return (f"{span}: the KL to the reference jumped {times} (losses/kl {m['kl']:.4g}): the policy is "
            f"moving fast; lower grpo.learning_rate ({cfg.grpo.learning_rate:g}) or raise grpo.beta")


@register_check("clip_jump", "clip fraction over the median of the previous steps' (a ratio)", value=_jump("clipfrac"))
def _clip_jump(span: str, v: float, m: Mapping[str, float], cfg: Any) -> str:
    times = "from zero" if math.isinf(v) else f"{v:.0f}x its recent median"
    return (f"{span}: the clipped share of tokens jumped {times} ({_pct(m['clipfrac'])}): updates "
            f"overshoot; lower grpo.learning_rate ({cfg.grpo.learning_rate:g}) or grpo.mu ({cfg.grpo.mu})")


# --------------------------------------------------------------------------- the monitor
@dataclass
class Alert:
    """A condition that holds: its check, the steps it has held over, and the line."""

    check: str
    first_step: int
    step: int
    line: str
    fatal: bool = False
    """health.strict and the condition held for its whole window: the run stops after this step."""


@dataclass
class HealthMonitor:
    """Consecutive-step bookkeeping over :data:`CHECKS` with the thresholds of ``cfg.health``.

    ``observe(step, measured)`` returns the alerts to print now (a condition speaks when it has
    held for its window, then stays quiet until it clears) and the ``health/*`` metrics of the
    step. Its state round-trips through :meth:`state_dict`, so a resumed run speaks as an
    uninterrupted one would."""

    cfg: Any
    streak: dict[str, int] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    spoken: set[str] = field(default_factory=set)
    history: list[dict[str, float]] = field(default_factory=list)

    def observe(self, step: int, measured: Mapping[str, float]) -> tuple[list[Alert], dict[str, float]]:
        h = self.cfg.health
        alerts: list[Alert] = []
        metrics: dict[str, float] = {}
        for name, check in CHECKS.items():
            rule = getattr(h, name)
            value = check.value(measured, self.history, rule)
            metrics[f"health/{name}"] = value if math.isfinite(value) else 1e9
            metrics.update({f"health/{part}": float(measured.get(part, 0.0)) for part in check.parts})
            holds = h.enabled and rule.steps > 0 and value >= rule.threshold
            if holds:
                self.streak[name] = self.streak.get(name, 0) + 1
                self.since.setdefault(name, step)
            else:
                self.streak.pop(name, None)
                self.since.pop(name, None)
                self.spoken.discard(name)
            firing = holds and self.streak[name] >= rule.steps
            metrics[f"health/{name}/alert"] = 1.0 if firing else 0.0
            if firing and name not in self.spoken:
                self.spoken.add(name)
                first = self.since[name]
                span = f"step {step}" if first == step else f"steps {first}\u2013{step}"
                alerts.append(Alert(name, first, step, check.message(span, value, measured, self.cfg),
                                    fatal=bool(h.strict)))
        self.history.append({k: float(v) for k, v in measured.items() if k in ("kl", "clipfrac")})
        del self.history[:-JUMP_HISTORY]
        return alerts, metrics

    def state_dict(self) -> dict:
        return {"streak": dict(self.streak), "since": dict(self.since), "spoken": sorted(self.spoken),
                "history": list(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.streak = {k: int(v) for k, v in state.get("streak", {}).items()}
        self.since = {k: int(v) for k, v in state.get("since", {}).items()}
        self.spoken = set(state.get("spoken", []))
        self.history = [dict(h) for h in state.get("history", [])]


class HealthError(UserError):
    """health.strict: a condition held for its whole window; the message is its line."""


# --------------------------------------------------------------------------- before the first step
def preflight(cfg: Any, prompt_lengths: Sequence[int], *, context: int | None,
              has_template: bool = True, answer_lengths: Sequence[int] = ()) -> list[str]:
    """What can be told before generating anything: prompts over the context, a chat model with
    no chat template, ``sampling.max_new_tokens`` below the 95th percentile of the reference
    answers' lengths (in tokens) where the data holds them. Returns the lines (empty: healthy)."""
    lines: list[str] = []
    s = cfg.sampling
    if context:
        over = sum(1 for n in prompt_lengths if n + s.max_new_tokens > context)
        if over:
            lines.append(f"{over} of {len(prompt_lengths)} training prompts plus sampling.max_new_tokens="
                         f"{s.max_new_tokens} exceed the model's context ({context} tokens): their "
                         "completions will be cut; lower sampling.max_new_tokens or task.max_prompt_tokens")
    name = str(cfg.model.name_or_path).lower()
    if not has_template and any(w in name for w in ("instruct", "chat", "-it")):
        lines.append(f"model {cfg.model.name_or_path} looks like a chat model but its tokenizer has no "
                     "chat template: prompts go in as plain text; check the tokenizer files")
    if answer_lengths:
        ordered = sorted(answer_lengths)
        p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
        if s.max_new_tokens < p95:
            lines.append(f"sampling.max_new_tokens={s.max_new_tokens} is below the 95th percentile of the "
                         f"reference answers' length ({p95} tokens): most long answers cannot be written; raise it")
    return lines


# --------------------------------------------------------------------------- a run's checks
def context_length(cfg: Any, model_config: Any) -> int | None:
    """The longest prompt + completion the engine takes: engine.max_model_len when set, else
    the model's max_position_embeddings (None when the config does not say)."""
    if cfg.engine.max_model_len:
        return int(cfg.engine.max_model_len)
    text = getattr(model_config, "text_config", None) or model_config
    n = getattr(text, "max_position_embeddings", None)
    return int(n) if n else None


def prompt_infos(task: Any, tokenizer: Any, examples: Mapping[str, Any],
                 prompt_ids: Mapping[str, Sequence[int]]) -> dict[str, PromptInfo]:
    """Each training prompt's length and whether the chat template rendered it (prompts are
    rendered again only when the tokenizer has a template to tell)."""
    suffix = template_suffix(tokenizer)
    return {uid: PromptInfo(len(ids), True if suffix is None else
                            templated(task.render_prompt(examples[uid], tokenizer), suffix))
            for uid, ids in prompt_ids.items()}


def answer_lengths(tokenizer: Any, examples: Iterable[Any], limit: int = 2000) -> list[int]:
    """Token lengths of the reference answers that are text (at most ``limit`` of them)."""
    texts = [ex.answer for ex in examples if isinstance(ex.answer, str) and ex.answer.strip()][:limit]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []


def run_preflight(cfg: Any, task: Any, tokenizer: Any, examples: Mapping[str, Any],
                  prompts: Mapping[str, PromptInfo], context: int | None) -> list[str]:
    """:func:`preflight` on a run's encoded training prompts (`vigor train` at its start, and
    `--dry-run`)."""
    if not cfg.health.enabled:
        return []
    return preflight(cfg, [p.tokens for p in prompts.values()], context=context,
                     has_template=template_suffix(tokenizer) is not None,
                     answer_lengths=answer_lengths(tokenizer, examples.values()))


@dataclass
class RunHealth:
    """A training run's checks: the monitor, what it knows of the prompts, the context."""

    cfg: Any
    prompts: dict[str, PromptInfo]
    context: int | None
    tools: bool | None = None
    """The rollouts are episodes of an environment with tools (None: task.env is a FILE.py:Class)."""
    monitor: HealthMonitor = field(init=False)

    def __post_init__(self) -> None:
        self.monitor = HealthMonitor(self.cfg)

    def step(self, step: int, generated: Iterable[Any], update: Mapping[str, float],
             text: Callable[[Any], str | None] = lambda s: s.rollout.text) -> tuple[list[Alert], dict[str, float]]:
        """The step's alerts to print and its ``health/*`` metrics."""
        from vigor_cli.episodes.registry import is_file_spec

        tools = self.tools
        if tools is None:  # an environment class in TRL's convention: tools
            tools = bool(self.cfg.task.env) and is_file_spec(self.cfg.task.env)
        measured = measure(generated, self.prompts, max_new_tokens=self.cfg.sampling.max_new_tokens,
                           context=self.context, update=update, text=text, tools=tools)
        return self.monitor.observe(step, measured)

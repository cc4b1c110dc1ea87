"""A user's environment class in TRL's ``environment_factory`` convention (``--env FILE.py:Factory``).

Details: docs/modules.md.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from vigor_cli.episodes.base import ENV_ERROR, ENV_TIMEOUT, MAX_TURNS, Environment, Episode, Reply, Start
from vigor_cli.episodes.calls import bounded_call, bounded_text
from vigor_cli.errors import UserError

ANSWERED = "answered"
"""The model's turn called no tool: its answer ends the episode."""
BAD_TOOL_CALL = "bad_tool_call"
"""The model's tool call could not be read or run (unparsable, unknown tool, wrong arguments)."""
RESERVED = ("reset", "get_reward")
"""Public methods that are not tools."""
FIRST_TIMEOUTS = 2
"""Calls to ``reset`` past the time limit, before any returned, that stop the run (one line)."""

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
PLAIN_TOOLS = "Tools (call one as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>):\n{tools}\n"
"""The tool list a prompt without chat template starts with (a line per tool, :func:`tool_line`)."""


class ToolCallError(ValueError):
    """A tool call the model wrote that cannot be read."""


def tool_methods(cls: type) -> list[str]:
    """The tools of an environment class: its public functions but reset and get_reward."""
    return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in RESERVED]


def tool_schemas(instance: Any, spec: str) -> list[dict]:
    """Each tool's JSON schema (transformers' ``get_json_schema``, as TRL uses); a method it
    cannot describe is one line naming the method."""
    from transformers.utils import get_json_schema

    schemas = []
    for name in tool_methods(type(instance)):
        try:
            schemas.append(get_json_schema(getattr(instance, name)))
        except Exception as e:  # DocstringParsingException, TypeHintParsingException, ...
            raise UserError(f"--env {spec}: method {name}() cannot be a tool ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200]}); give it type hints and a Google-style "
                            "docstring with an Args section, as TRL's tools need") from None
    return schemas


def parse_tool_calls(text: str, ids: Sequence[int], tokenizer: Any) -> list[dict]:
    """The tool calls of a model turn, ``[{"type": "function", "function": {"name", "arguments"}}]``
    (empty: none); :class:`ToolCallError` when one is there but cannot be read."""
    from vigor_cli.tasks.prompts import has_chat_template

    parser = getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None) is not None
    if parser and has_chat_template(tokenizer):  # a plain-text template's calls are read below, in the same form
        try:
            takes_prefix = "prefix" in inspect.signature(tokenizer.parse_response).parameters
            parsed = tokenizer.parse_response(list(ids), **({"prefix": ""} if takes_prefix else {}))
        except Exception as e:  # the parser's errors vary by template
            raise ToolCallError(f"the response parser failed: {type(e).__name__}: {e}") from None
        calls = (parsed or {}).get("tool_calls") or []
        return [_checked(c.get("function", c)) for c in calls]
    bodies = _CALL.findall(text)
    if not bodies:
        if "<tool_call>" in text:
            raise ToolCallError("a <tool_call> is not closed")
        return []
    calls = []
    for body in bodies:
        try:
            call = json.loads(body)
        except ValueError as e:
            raise ToolCallError(f"not JSON: {body.strip()[:80]!r} ({e})") from None
        calls.append(_checked(call))
    return calls


def _checked(call: Any) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ToolCallError(f"a tool call names no tool: {str(call)[:80]!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise ToolCallError(f"tool {call['name']}: arguments are not JSON: {arguments[:80]!r}") from None
    if not isinstance(arguments, dict):
        raise ToolCallError(f"tool {call['name']}: arguments are not an object: {str(arguments)[:80]!r}")
    return {"type": "function", "function": {"name": call["name"], "arguments": arguments}}


class ToolEnvironment(Environment):
    """A TRL-convention environment class driven by the episode loop (module docstring)."""

    def __init__(self, factory: Callable[[], Any], spec: str, tokenizer: Any, timeout_s: float):
        self.factory, self.spec, self.tokenizer, self.timeout_s = factory, spec, tokenizer, timeout_s
        probe = self._make()
        cls = type(probe)
        self.name = cls.__name__
        if not callable(getattr(probe, "reset", None)):
            raise UserError(f"--env {spec}: {self.name} has no reset method (TRL's environment_factory "
                            "needs reset(**row) -> str | None)")
        self.tools = tool_methods(cls)
        self.schemas = tool_schemas(probe, spec)
        self.reward_name = self.name if callable(getattr(probe, "get_reward", None)) else None
        self.pool: list[Any] = [probe]
        self.cls = cls
        self.shared = shared_state(cls)
        """Its class's and module's data at the start: state kept there outlives an episode,
        and a resumed run starts it afresh (warned once, when it changes)."""
        self.returned = False
        """A reset has returned in time (before one has, :data:`FIRST_TIMEOUTS` stop the run)."""
        self.timeouts: list[str] = []

    def describe(self) -> str:
        own = f"; get_reward: its own reward, weight 1, logged as {self.reward_name}" if self.reward_name else ""
        return f"{self.name} ({self.spec}): tools {', '.join(self.tools) or 'none'}{own}"

    def _make(self) -> Any:
        out = bounded_call(self.factory, self.timeout_s)
        if out.error is not None:
            raise UserError(f"--env {self.spec}: making an environment failed: {out.error}")
        return out.value

    # ------------------------------------------------------------------ episodes
    def start(self, examples: Sequence[Any]) -> list[Start]:
        return [self._start_one(example) for example in examples]

    def _start_one(self, example: Any) -> Start:
        if self.pool:
            instance = self.pool.pop()
        else:
            made = bounded_call(self.factory, self.timeout_s)
            if made.error is not None:
                return Start(None, error=f"making an environment: {made.error}",
                             ended=ENV_TIMEOUT if made.timed_out else ENV_ERROR)
            instance = made.value
        out = bounded_call(instance.reset, self.timeout_s, **row_of(example))
        if out.timed_out:
            self._timed_out(out.error or "")
            return Start(None, error=f"reset: {out.error}", ended=ENV_TIMEOUT)
        if out.error is not None:
            self.pool.append(instance)
            return Start(None, error=f"reset: {out.error}", ended=ENV_ERROR)
        self.returned = True
        observation = out.value
        if observation is None:
            return Start(instance)
        if not isinstance(observation, str):
            return Start(instance, error=f"reset returned a {type(observation).__name__}; it returns "
                         "None or a string", ended=ENV_ERROR)
        text = bounded_text(observation, self.timeout_s, "reset's observation")
        if text.error is not None:
            return Start(instance, error=f"reset: {text.error}", ended=ENV_ERROR)
        return Start(instance, observation=text.value)

    def _timed_out(self, error: str) -> None:
        """A reset past the limit: before any reset has returned, the second stops the run."""
        self.timeouts.append(error)
        if not self.returned and len(self.timeouts) >= FIRST_TIMEOUTS:
            raise UserError(f"--env {self.spec}: reset timed out on each of the first {len(self.timeouts)} episodes "
                            f"(first: {self.timeouts[0]}); stopping: the environment does not start "
                            "(a slower one needs --set task.env_timeout_s=SECONDS)")

    def observation(self, example: Any) -> str | None:
        """What ``reset`` returns for ``example`` (a preview; its instance goes back to the pool)."""
        [start] = self.start([example])
        if start.error is not None:
            raise UserError(f"--env {self.spec}: {start.error}")
        self.pool.append(start.session)
        return start.observation

    def answer(self, episodes: Sequence[Episode], examples: Sequence[Any], last: bool) -> list[Reply]:
        return [self._answer_one(ep, last) for ep in episodes]

    def _answer_one(self, ep: Episode, last: bool) -> Reply:
        try:
            calls = parse_tool_calls(ep.text, ep.token_ids[ep.turn_start:], self.tokenizer)
        except ToolCallError:
            return Reply(done=True, ended=BAD_TOOL_CALL)
        if not calls:
            return Reply(done=True, ended=ANSWERED)
        if last:
            return Reply(done=True, ended=MAX_TURNS, tool_calls=calls)
        messages = []
        for call in calls:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            method = getattr(ep.session, name, None) if name in self.tools else None
            if method is None:
                return Reply(done=True, ended=BAD_TOOL_CALL, tool_calls=calls)
            try:
                inspect.signature(method).bind(**arguments)
            except TypeError:
                return Reply(done=True, ended=BAD_TOOL_CALL, tool_calls=calls)
            out = bounded_call(method, self.timeout_s, **arguments)
            if out.error is None:
                out = bounded_text(out.value, self.timeout_s, f"{name}()'s result")
            if out.error is not None:
                if out.timed_out:
                    ep.session = None  # stopped mid-call: its state is not to be trusted, never reused
                return Reply(error=f"{name}: {out.error}", ended=ENV_TIMEOUT if out.timed_out else ENV_ERROR,
                             tool_calls=calls)
            messages.append({"role": "tool", "name": name, "content": out.value})
        return Reply(messages=messages, tool_calls=calls)

    def reward(self, episodes: Sequence[Episode]) -> list[float | None]:
        """Each live episode's ``get_reward()`` (None for a failed one). As a ``--reward``
        function's, a fault stops the run in one line naming it: what it raised, a call past
        the limit; its values are checked by the caller (rewards.check_values)."""
        values: list[float | None] = []
        for ep in episodes:
            if ep.session is None or ep.failed:
                values.append(None)
                continue
            out = bounded_call(ep.session.get_reward, self.timeout_s)
            if out.error is not None:
                did = out.error if out.timed_out else f"raised {out.error}"
                raise UserError(f"environment {self.name}.get_reward (--env {self.spec}): {did}; a reward "
                                "it cannot give is None, as a reward function's")
            values.append(out.value)
        return values

    def release(self, episodes: Sequence[Episode]) -> None:
        for ep in episodes:
            if ep.session is not None and ep.ended != ENV_TIMEOUT:
                self.pool.append(ep.session)
            ep.session = None
        if self.shared is not None:
            changed = [name for name, text in shared_state(self.cls).items() if self.shared.get(name) != text]
            if changed:
                self.shared = None  # said once
                from vigor_cli.console import err_console

                line = (f"warning: environment {self.name} (--env {self.spec}) keeps state at class or module "
                        f"level ({', '.join(changed[:3])} changed during the run): a resumed run starts it afresh "
                        "from the file, so it will not match an uninterrupted run; keep an episode's state on "
                        "its instance")
                err_console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------------ the prompt
    def template_kwargs(self) -> dict:
        return {"tools": self.schemas} if self.schemas else {}

    def prompt_text(self, text: str) -> str:
        if not self.schemas:
            return text
        return PLAIN_TOOLS.format(tools="\n".join(tool_line(s) for s in self.schemas)) + text


def shared_state(cls: type) -> dict[str, str]:
    """'Class.name' or 'module.name' -> repr of each data attribute of an environment's class
    (and its bases) and module: what every instance shares (functions, classes and modules aside)."""
    import sys
    import types

    def data(space: dict, owner: str) -> dict[str, str]:
        out = {}
        for name, value in list(space.items()):
            if name.startswith("__") or isinstance(value, (types.FunctionType, types.ModuleType, type, staticmethod,
                                                            classmethod, property, types.BuiltinFunctionType)):
                continue
            try:  # a large container by its size (a repr of it each batch would cost more than the batch)
                big = isinstance(value, (list, dict, set, tuple, str, bytes)) and len(value) > 1000
                out[f"{owner}.{name}"] = (f"<{type(value).__name__} of {len(value)} at {id(value)}>" if big
                                          else repr(value)[:10_000])
            except Exception:  # noqa: BLE001 - a repr that fails: compared by identity
                out[f"{owner}.{name}"] = f"<id {id(value)}>"
        return out

    state: dict[str, str] = {}
    for klass in cls.__mro__[:-1]:
        state.update(data(dict(vars(klass)), klass.__name__))
    module = sys.modules.get(cls.__module__)
    if module is not None and not cls.__module__.startswith(("vigor_cli", "builtins")):
        state.update(data(dict(vars(module)), Path(getattr(module, "__file__", "") or "module").stem))
    return state


def tool_line(schema: dict) -> str:
    """A tool's schema as one line: ``guess(number: integer): Guess the hidden number.``"""
    f = schema["function"]
    props = f.get("parameters", {}).get("properties", {})
    args = ", ".join(f"{name}: {p.get('type', 'any')}" for name, p in props.items())
    return f"{f['name']}({args}): {f.get('description', '')}".rstrip(": ")


def row_of(example: Any) -> dict:
    """What ``reset(**row)`` gets: TRL passes the dataset row; here the example's prompt and
    columns (the custom task's row), or for a built-in task its prompt, answer and uid."""
    meta = getattr(example, "meta", {}) or {}
    if "columns" in meta:
        return {"prompt": meta.get("prompt", example.question), **meta["columns"]}
    return {"prompt": example.question, "answer": example.answer, "uid": example.uid}

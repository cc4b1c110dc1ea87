"""Calls into a user's environment, behind the boundary a reward function's call has.

:func:`bounded_call` runs one call (``__init__``, ``reset``, a tool, ``str()`` of its
result, ``get_reward``) through :mod:`vigor_cli.user.code`: at most ``timeout_s`` seconds
(stopped there), the working directory, ``sys.stdout``/``stderr``, signal handlers and the
process settings put back, ``os._exit`` turned into an error; what it raised becomes one
line (``ValueError: bad move (env.py, line 12)``). :func:`bounded_text` cuts an
observation or a tool result to :data:`ENV_TEXT_CHARS` before anything renders it, and
refuses text that cannot be encoded (a lone surrogate). The caller ends that one episode.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from vigor_cli.user import code as user_code

ENV_TEXT_CHARS = 20_000
"""Characters of an observation or a tool result kept (the rest cut, marked with
:data:`CUT_MARK`) before it is rendered and tokenized; then the episode's token budget applies."""
CUT_MARK = " ...[cut at {n:,} characters]"


@dataclass
class Outcome:
    value: Any = None
    error: str | None = None
    """One line: what was raised, or that the limit passed."""
    timed_out: bool = False


def bounded_call(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Outcome:
    """``fn(*args, **kwargs)`` behind the boundary, at most ``timeout_s`` seconds (see the
    module docstring). Off the main thread (where no signal can stop it) the call runs on a
    thread of its own, given up at the limit."""
    name = getattr(fn, "__name__", "call")
    label = f"the environment's {name}()"
    if threading.current_thread() is threading.main_thread():
        value, error, timed_out = user_code.attempt(lambda: fn(*args, **kwargs), timeout=timeout_s, label=label)
        if timed_out:
            where = user_code.user_frame(error) if error is not None else ""
            return Outcome(error=f"{name}() did not return within {timeout_s:g} s (task.env_timeout_s) and was "
                                 f"stopped{where}", timed_out=True)
        return Outcome(value=value) if error is None else Outcome(error=describe(error))
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            value, error, _ = user_code.attempt(lambda: fn(*args, **kwargs), label=label)
        except BaseException as e:  # noqa: BLE001 - the user's code: anything it raises is one line
            value, error = None, e
        box.update(value=value) if error is None else box.update(error=describe(error))

    worker = threading.Thread(target=run, name=f"vigor-env-{name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return Outcome(error=f"{name}() still running after {timeout_s:g} s (task.env_timeout_s)", timed_out=True)
    if "error" in box:
        return Outcome(error=box["error"])
    return Outcome(value=box.get("value"))


def bounded_text(value: Any, timeout_s: float, what: str) -> Outcome:
    """``value`` as the text an episode shows: ``str()`` of it behind the boundary, cut to
    :data:`ENV_TEXT_CHARS`, refused (an error naming ``what``) when it cannot be encoded."""
    if isinstance(value, str):
        text = value
    else:
        out = bounded_call(str, timeout_s, value)
        if out.error is not None:
            out.error = f"str() of {what}: {out.error}"
            return out
        text = out.value
        if not isinstance(text, str):  # a str subclass's __str__ returning something else
            return Outcome(error=f"str() of {what} returned a {type(text).__name__}")
    if len(text) > ENV_TEXT_CHARS:
        text = text[:ENV_TEXT_CHARS] + CUT_MARK.format(n=ENV_TEXT_CHARS)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return Outcome(error=f"{what} is not valid text: {e.reason} at character {e.start} "
                             f"({text[e.start:e.end]!r})")
    return Outcome(value=str(text))


def describe(e: BaseException) -> str:
    """An exception from a user's environment as one line, with the line of their file."""
    return f"{user_code.raised(e)}{user_code.user_frame(e)}"

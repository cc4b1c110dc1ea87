"""Calls into a user's environment, each bounded in time and unable to stop the run.

:func:`bounded_call` runs one call on a thread of its own and waits at most ``timeout_s``:
an exception becomes one line (``ValueError: bad move (env.py, line 12)``) and a call still
running at the limit is given up (Python cannot stop a thread: it keeps running in the
background, and the caller drops the environment instance it was using). Either way the
caller ends that one episode, never the run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from vigor_cli import user_code


@dataclass
class Outcome:
    value: Any = None
    error: str | None = None
    """One line: what was raised, or that the limit passed."""
    timed_out: bool = False


def bounded_call(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Outcome:
    """``fn(*args, **kwargs)``, at most ``timeout_s`` seconds (see the module docstring)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - the user's code: anything it raises is one line
            box["error"] = describe(e)

    worker = threading.Thread(target=run, name=f"vigor-env-{getattr(fn, '__name__', 'call')}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return Outcome(error=f"{getattr(fn, '__name__', 'call')}() still running after {timeout_s:g} s "
                             "(task.env_timeout_s)", timed_out=True)
    if "error" in box:
        return Outcome(error=box["error"])
    return Outcome(value=box.get("value"))


def describe(e: BaseException) -> str:
    """An exception from a user's environment as one line, with the line of their file."""
    return f"{user_code.raised(e)}{user_code.user_frame(e)}"

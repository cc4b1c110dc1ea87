"""Reward functions by name: the built-in verifiers and a user's own ``file.py:func``.

``--reward NAME`` (``task.rewards``) takes:

- a built-in name: every registered task that grades (``math``, ``code``, ``tiny-math``,
  ``tiny-code``, ``tiny-facts``, ``tiny-ladder``; the task registry registers them here,
  vigor_cli/tasks/task_reward.py). A math-kind task grades the completion against the row's ``answer`` column
  (its real verifier); a code-kind task runs the program in the sandbox against the row's
  LiveCodeBench test fields (``public_test_cases``, optional ``private_test_cases`` and
  ``metadata``), all of its tests;
- ``path/to/file.py:func``: a function with TRL's signature,
  ``func(prompts, completions, **columns) -> list[float | None]``, called as TRL calls it:
  by keyword, so ``func(completions, **kwargs)`` and ``func(completions, solution, **kwargs)``
  (TRL's own ``trl.rewards``) work as they are. The file is imported with
  importlib into the trainer's process: it is the user's own code, run as TRL runs it (no
  sandbox), and nothing from a dataset is ever executed. Every column of the data but the
  prompt reaches the function by name; parameters it names without a default are columns
  every row must have (checked when the data is read, and by ``vigor train --dry-run``).

Each :class:`Reward` is itself a TRL reward function (``reward(prompts, completions,
**kwargs)`` with a ``__name__``), so the same objects can be handed to TRL's
``GRPOTrainer(reward_funcs=...)``. Values are checked on every call: a list as long as the
completions of finite numbers or None (None: "cannot score this one"); anything else, or an
exception in the function, is a :class:`UserError` naming the function (the trainer adds the
step). :func:`combine` is TRL's weighted sum over the functions that scored a completion.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import numbers
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from vigor_cli.errors import UserError

PROMPT_ARGS = ("prompts", "completions")
"""The two arguments every reward function takes first (TRL's names)."""
TRL_EXTRA_ARGS = ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
"""Keyword arguments TRL passes besides the columns; never treated as columns a row must have."""


@dataclass
class Reward:
    """One reward function, callable as TRL calls a reward function."""

    name: str
    """Short name for metrics (``reward/<name>/mean``): the built-in name or the function's."""
    spec: str
    """As given: ``math`` or ``path/to/file.py:func`` (named in errors)."""
    needs: tuple[str, ...] = ()
    """Columns every row must have (a built-in's gold fields; a function's parameters without
    a default)."""
    optional: tuple[str, ...] = ()
    """Columns passed when present (a function's parameters with a default)."""
    all_columns: bool = True
    """The function takes ``**kwargs``: every column reaches it."""
    builtin: bool = False
    """A built-in verifier: the columns it needs hold a gold that may not be null."""
    seconds: float = 0.0
    """Time spent in this function so far (the trainer may log it per step)."""
    _score: Callable[[list, list, dict], list] = field(default=lambda p, c, k: [], repr=False)
    _close: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def __name__(self) -> str:  # TRL names a reward function by its __name__
        return self.name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL's calling convention; returns checked values (see :meth:`scores`)."""
        return [s.reward for s in self.scores(list(prompts), list(completions), kwargs)]

    def scores(self, prompts: list, completions: list, columns: dict[str, list]) -> list:
        """A :class:`~vigor_cli.tasks.base.Score` per completion (a user function's value
        becomes a Score without a reason); raises UserError naming the function when it
        raises or returns something other than one finite number or None per completion."""
        t0 = time.perf_counter()
        try:
            out = self._score(prompts, completions, columns)
        finally:
            self.seconds += time.perf_counter() - t0
        return out

    def close(self) -> None:
        if self._close is not None:
            self._close()


# --------------------------------------------------------------------------- names
BUILTINS: dict[str, Callable[..., "Reward"]] = {}
"""Built-in reward name -> factory ``(workers=, code_reward=, allow_weak_sandbox=) -> Reward``.
The task registry (vigor_cli/tasks/__init__.py) registers one per task that grades, when it is
imported: this module knows no task."""


def register_builtin(name: str, factory: Callable[..., "Reward"]) -> None:
    BUILTINS[name] = factory


def builtin_names() -> list[str]:
    """The built-in verifiers' names (every registered task that grades its own completions;
    filled once vigor_cli.tasks is imported)."""
    return list(BUILTINS)


def is_file_spec(spec: str) -> bool:
    """``path.py:func`` rather than a built-in name."""
    head, sep, func = spec.rpartition(":")
    return bool(sep) and head.endswith(".py")


def check_spec(spec: str, key: str = "task.rewards") -> None:
    """The form of one reward spec (a known built-in, or ``file.py:func`` with a function
    name): cheap, no import; what the config checks when it is built."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{key}: a reward is a built-in name or FILE.py:FUNC, got {spec!r}")
    if is_file_spec(spec):
        func = spec.rpartition(":")[2]
        if not func.isidentifier():
            raise ValueError(f"{key}: {spec!r}: '{func}' is not a function name")
        return
    if ":" in spec or spec.endswith(".py"):
        raise ValueError(f"{key}: {spec!r}: a reward file is given as FILE.py:FUNC (e.g. reward.py:score)")
    names = builtin_names()
    if spec not in names:
        raise ValueError(f"{key}: unknown reward {spec!r}; built-in: {', '.join(names)}, or FILE.py:FUNC")


# --------------------------------------------------------------------------- loading
def load_rewards(specs: Sequence[str], *, workers: int = 0, code_reward: str = "full",
                 allow_weak_sandbox: bool = False) -> list[Reward]:
    """The rewards of ``specs``, user functions imported and their signatures checked; names
    made unique (``a.score``/``b.score`` when two files define ``score``)."""
    rewards = [load_reward(s, workers=workers, code_reward=code_reward, allow_weak_sandbox=allow_weak_sandbox)
               for s in specs]
    counts: dict[str, int] = {}
    for r in rewards:
        counts[r.name] = counts.get(r.name, 0) + 1
    for r in rewards:
        if counts[r.name] > 1 and is_file_spec(r.spec):
            r.name = f"{Path(r.spec.rpartition(':')[0]).stem}.{r.name}"
    names = [r.name for r in rewards]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UserError(f"task.rewards: '{dup}' is given twice")
    return rewards


def load_reward(spec: str, *, workers: int = 0, code_reward: str = "full", allow_weak_sandbox: bool = False) -> Reward:
    """One reward from its spec (see the module docstring)."""
    try:
        check_spec(spec, f"--reward {spec}")
    except ValueError as e:
        raise UserError(str(e)) from None
    if is_file_spec(spec):
        return _user_reward(spec)
    return BUILTINS[spec](workers=workers, code_reward=code_reward, allow_weak_sandbox=allow_weak_sandbox)


def import_function(spec: str, flag: str = "--reward") -> Callable:
    """The function ``func`` of ``path.py:func``, its file imported under a private module name
    (errors name ``flag``: ``--reward``, or ``--env`` for an environment class)."""
    path_text, _, func_name = spec.rpartition(":")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UserError(f"{flag} {spec}: {path} not found" if not path.exists() else f"{flag} {spec}: {path} is not a file")
    resolved = path.resolve()
    module_name = "vigor_user_reward_" + hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, resolved)
        if loader_spec is None or loader_spec.loader is None:
            raise UserError(f"{flag} {spec}: cannot import {path}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module  # dataclasses and pickling inside the file look it up
        try:
            loader_spec.loader.exec_module(module)
        except Exception as e:  # the user's file: any error while importing it
            sys.modules.pop(module_name, None)
            where = _user_frame(e, resolved)
            raise UserError(f"{flag} {spec}: importing {path} failed{where}: {type(e).__name__}: "
                            f"{_first_line(e)}") from None
    func = getattr(module, func_name, None)
    if func is None:
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module_name)
        raise UserError(f"{flag} {spec}: {path} has no function '{func_name}' (functions: {', '.join(defined) or 'none'})")
    if not callable(func):
        raise UserError(f"{flag} {spec}: '{func_name}' in {path} is a {type(func).__name__}, not a function")
    return func


def signature_columns(func: Callable, spec: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(columns required, columns optional, takes **kwargs) from a reward function's
    signature; refuses one that cannot be called as TRL calls it (by keyword: ``prompts=``,
    ``completions=``, the columns)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return (), (), True  # a builtin or C callable: nothing to read, pass every column
    params = list(sig.parameters.values())
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params)
    if not (takes_all or "completions" in sig.parameters):
        raise UserError(f"--reward {spec}: the function takes ({_params(sig)}); a reward function takes "
                        "(prompts, completions, **columns), as TRL's do: it is called with completions=...")
    first = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD][:2]
    if "completions" not in sig.parameters and len(first) == 2 and all(
            p.default is p.empty and p.name not in (*PROMPT_ARGS, *TRL_EXTRA_ARGS) for p in first):
        raise UserError(f"--reward {spec}: the function takes ({_params(sig)}); TRL and vigor pass prompts= and "
                        f"completions= by name: name those parameters prompts and completions")
    for p in sorted(params, key=lambda p: p.name in PROMPT_ARGS):  # a column's name first
        if p.kind == p.POSITIONAL_ONLY and p.default is p.empty:
            raise UserError(f"--reward {spec}: parameter '{p.name}' is positional-only; TRL and vigor pass "
                            "everything by name (prompts=, completions=, the columns)")
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in PROMPT_ARGS]
    required = tuple(p.name for p in named if p.default is p.empty and p.name not in TRL_EXTRA_ARGS)
    optional = tuple(p.name for p in named if p.default is not p.empty or p.name in TRL_EXTRA_ARGS)
    return required, optional, takes_all


def _user_reward(spec: str) -> Reward:
    func = import_function(spec)
    required, optional, takes_all = signature_columns(func, spec)
    label = f"reward function {spec}"
    try:
        takes = set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        takes = set()

    def score(prompts: list, completions: list, columns: dict[str, list]) -> list:
        from vigor_cli.tasks.base import Score

        if takes_all:
            kwargs = {k: v for k, v in columns.items() if k not in PROMPT_ARGS}
        else:
            kwargs = {k: columns[k] for k in (*required, *optional) if k in columns}
        given = {"prompts": prompts, "completions": completions}
        if not takes_all:  # (completions, solution) takes no prompts: TRL's own rewards
            given = {k: v for k, v in given.items() if k in takes}
        try:
            values = func(**given, **kwargs)
        except Exception as e:  # the user's function: any error stops the run in one line
            raise UserError(f"{label} raised {type(e).__name__}: {_first_line(e)}{_user_frame(e, None)}") from None
        return [Score(v) for v in check_values(values, len(completions), label)]

    name = getattr(func, "__name__", spec.rpartition(":")[2])
    return Reward(name=str(name), spec=spec, needs=required, optional=optional, all_columns=takes_all, _score=score)


def check_values(values: Any, n: int, label: str) -> list[float | None]:
    """``values`` as a list of n floats or None; anything else is a UserError naming ``label``."""
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()  # a numpy array or torch tensor
    if not isinstance(values, (list, tuple)):
        raise UserError(f"{label} returned a {type(values).__name__}; it must return a list with one "
                        "number (or None) per completion")
    if len(values) != n:
        raise UserError(f"{label} returned {len(values)} values for {n} completions")
    out: list[float | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise UserError(f"{label} returned {v!r} ({type(v).__name__}) at index {i}; values must be "
                            "numbers, or None for a completion it cannot score")
        x = float(v)
        if not math.isfinite(x):
            raise UserError(f"{label} returned {x} at index {i}; values must be finite (None: cannot score)")
        out.append(x)
    return out


def _prompt_text(prompt: Any) -> str:
    """A prompt as text: a string as is; of a message list, the last user message."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)


def _completion_text(completion: Any) -> str:
    """A completion as text: TRL gives a conversational completion as [{'role': 'assistant',
    'content': ...}]."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


# --------------------------------------------------------------------------- combining
def combine(values: Sequence[Sequence[float | None]], weights: Sequence[float]) -> list[float | None]:
    """Per completion, the weighted sum of the values that are not None (TRL's nansum); None
    when no function scored it."""
    out: list[float | None] = []
    for column in zip(*values):
        scored = [w * v for w, v in zip(weights, column) if v is not None]
        out.append(sum(scored) if scored else None)
    return out


# --------------------------------------------------------------------------- messages
def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else "")[:300]


def _params(sig: inspect.Signature) -> str:
    return ", ".join(str(p) for p in sig.parameters.values())


def _user_frame(e: BaseException, path: Path | None) -> str:
    """' (file.py, line N)' for the innermost frame of the traceback in a user's file."""
    tb = e.__traceback__
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if (path is not None and Path(filename) == path) or (path is None and "vigor_cli" not in filename
                                                            and "site-packages" not in filename):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.lineno:
        return f" ({Path(e.filename or '').name}, line {e.lineno})"
    return f" ({Path(found[0]).name}, line {found[1]})" if found else ""

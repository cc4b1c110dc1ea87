"""Reward functions by name: the built-in verifiers and a user's own ``file.py:func``.

Details: docs/modules.md.
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

from vigor_cli.user import code as user_code
from vigor_cli.errors import UserError

PROMPT_ARGS = ("prompts", "completions")
"""The two arguments every reward function takes first (TRL's names)."""
TRL_EXTRA_ARGS = ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
"""Keyword arguments TRL passes besides the columns; never treated as columns a row must have."""
PASSED_ARGS = ("completion_ids", "trainer_state", "log_metric", "log_extra")
"""The TRL arguments vigor passes (``environments`` needs TRL's environment_factory)."""


@dataclass
class CallContext:
    """TRL's keyword arguments of one reward call besides the columns (None: not passed)."""

    completion_ids: list | None = None
    """Each completion's token ids, as generated."""
    trainer_state: Any = None
    """A ``transformers.TrainerState`` (``global_step``: updates done so far; ``max_steps``)."""
    log_metric: Callable[[str, float], Any] | None = None
    log_extra: Callable[[str, list], Any] | None = None

    def arguments(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PASSED_ARGS if getattr(self, name) is not None}


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
    gets: tuple[str, ...] = ()
    """The arguments besides the columns it receives: ``prompts``, ``completions`` and TRL's
    (:data:`PASSED_ARGS`), those its signature takes (all of them with ``**kwargs``)."""
    seconds: float = 0.0
    """Time spent in this function so far (the trainer may log it per step)."""
    _score: Callable[[list, list, dict, CallContext], list] = field(default=lambda p, c, k, x: [], repr=False)
    _close: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def __name__(self) -> str:  # TRL names a reward function by its __name__
        return self.name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL's calling convention (its own arguments passed on as TRL gave them); returns
        checked values (see :meth:`scores`)."""
        context = CallContext(**{k: kwargs.pop(k) for k in PASSED_ARGS if k in kwargs})
        kwargs.pop("environments", None)
        return [s.reward for s in self.scores(list(prompts), list(completions), kwargs, context)]

    def scores(self, prompts: list, completions: list, columns: dict[str, list],
               context: CallContext | None = None) -> list:
        """A :class:`~vigor_cli.task_base.Score` per completion (a user function's value
        becomes a Score without a reason); raises UserError naming the function when it
        raises or returns something other than one finite number or None per completion.
        ``context``: TRL's other arguments, passed to a function that takes them."""
        t0 = time.perf_counter()
        try:
            out = self._score(prompts, completions, columns, context or CallContext())
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
                 allow_weak_sandbox: bool = False, timeout: float | None = None,
                 environments: bool = False) -> list[Reward]:
    """The rewards of ``specs``, user functions imported and their signatures checked; names
    made unique (``a.score``/``b.score`` when two files define ``score``). ``environments``:
    the run's episodes have an environment (task.env), whose instances a function may take."""
    rewards = [load_reward(s, workers=workers, code_reward=code_reward, allow_weak_sandbox=allow_weak_sandbox,
                           timeout=timeout, environments=environments) for s in specs]
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


def load_reward(spec: str, *, workers: int = 0, code_reward: str = "full", allow_weak_sandbox: bool = False,
                timeout: float | None = None, environments: bool = False) -> Reward:
    """One reward from its spec (see the module docstring); ``timeout``: the seconds one call
    of a user's function may take (``task.reward_timeout``; None: no limit)."""
    try:
        check_spec(spec, f"--reward {spec}")
    except ValueError as e:
        raise UserError(str(e)) from None
    if is_file_spec(spec):
        return _user_reward(spec, timeout, environments)
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
        try:  # the user's file, behind the boundary: sys.exit or any BaseException is one line
            user_code.call(lambda: loader_spec.loader.exec_module(module), label=f"{flag} {spec} (its import)",
                           describe=lambda e: f"{flag} {spec}: importing {path} failed"
                                              f"{user_code.user_frame(e, resolved)}: {user_code.raised(e)}")
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    func = getattr(module, func_name, None)
    if func is None:
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module_name)
        raise UserError(f"{flag} {spec}: {path} has no function '{func_name}' (functions: {', '.join(defined) or 'none'})")
    if not callable(func):
        raise UserError(f"{flag} {spec}: '{func_name}' in {path} is a {type(func).__name__}, not a function")
    return func


def signature_columns(func: Callable, spec: str,
                      environments: bool = False) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
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
    if not environments and any(p.name == "environments" and p.default is p.empty for p in named):
        raise UserError(f"--reward {spec}: the function requires 'environments', which TRL passes only with "
                        "its environment_factory (tool-calling environments) and vigor only with an environment "
                        "(--env, task.env); this run has none: give it a default")
    required = tuple(p.name for p in named if p.default is p.empty and p.name not in TRL_EXTRA_ARGS)
    optional = tuple(p.name for p in named if p.default is not p.empty and p.name not in TRL_EXTRA_ARGS)
    return required, optional, takes_all


def _user_reward(spec: str, timeout: float | None = None, environments: bool = False) -> Reward:
    func = import_function(spec)
    required, optional, takes_all = signature_columns(func, spec, environments)
    label = f"reward function {spec}"
    try:
        takes = set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        takes = set()

    gets = tuple(a for a in (*PROMPT_ARGS, *PASSED_ARGS) if takes_all or a in takes)

    def score(prompts: list, completions: list, columns: dict[str, list], context: CallContext) -> list:
        from vigor_cli.task_base import Score

        if takes_all:
            kwargs = {k: v for k, v in columns.items() if k not in PROMPT_ARGS and k not in TRL_EXTRA_ARGS}
        else:
            kwargs = {k: columns[k] for k in (*required, *optional) if k in columns and k not in TRL_EXTRA_ARGS}
        kwargs.update({k: v for k, v in context.arguments().items() if k in gets})  # TRL's, as TRL passes them
        # (completions, solution) takes no prompts: TRL's own rewards
        given = {k: v for k, v in (("prompts", prompts), ("completions", completions)) if k in gets}
        # an episode's environment instances, as TRL passes them: the live objects, never copies
        live = ({"environments": columns["environments"]}
                if "environments" in columns and (takes_all or "environments" in takes) else {})

        def run() -> Any:  # its own copies: no function changes what another grades
            values = func(**{k: user_code.private_copy(v) for k, v in {**given, **kwargs}.items()}, **live)
            if inspect.isawaitable(values):  # an async def reward, awaited as TRL awaits it
                values = _await(values)
            return values

        values = user_code.call(run, label=label, timeout=timeout, timeout_line=over_time,
                                describe=lambda e: f"{label} raised {user_code.raised(e)}{user_code.user_frame(e)}")
        return [Score(v) for v in check_values(values, len(completions), label)]

    def over_time(seconds: float, where: str) -> str:
        return (f"{label} did not return within task.reward_timeout={seconds:g} s and was stopped{where}; "
                "a slower function needs a higher limit (--set task.reward_timeout=SECONDS)")

    name = getattr(func, "__name__", spec.rpartition(":")[2])
    return Reward(name=str(name), spec=spec, needs=required, optional=optional, all_columns=takes_all, gets=gets,
                  _score=score)


def _await(awaitable: Any) -> Any:
    """The value of an ``async def`` reward's coroutine: run on a fresh event loop, in a thread
    of its own when this thread already runs one."""
    import asyncio
    import concurrent.futures

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def check_values(values: Any, n: int, label: str) -> list[float | None]:
    """``values`` as a list of n floats or None; anything else is a UserError naming ``label``."""
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()  # a numpy array or torch tensor
    if not isinstance(values, (list, tuple)):
        if inspect.iscoroutine(values):
            values.close()  # never awaited here: closed, so Python prints no warning at exit
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
def _params(sig: inspect.Signature) -> str:
    return ", ".join(str(p) for p in sig.parameters.values())

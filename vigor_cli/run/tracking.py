"""Dashboards: every metrics.jsonl line also goes to TensorBoard, W&B or trackio (``train.report_to``).

The run directory stays the record; a dashboard gets a copy of the same lines, under the same
keys (``reward/mean``, ``rollouts/cumulative``, ``time/generate``, ``eval/accuracy``, ...),
at the line's ``step``, plus the completions sample as a table where the backend has tables.

Details: docs/modules.md.
"""

from __future__ import annotations

import importlib.util
import math
import os
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import urlparse

from vigor_cli.errors import UserError

NONE = "none"
"""The ``report_to`` value that turns every dashboard off (the default: none)."""
PROBE_TIMEOUT_S = 3.0
"""How long a connection to the W&B server may take before wandb runs offline."""
TEXT_CHARS = 2000
"""Completion and prompt characters kept per table cell."""


class Tracker:
    """One dashboard backend. Subclasses set ``package`` (the module imported) and implement
    :meth:`start`, :meth:`log` and :meth:`close`; :meth:`table` is optional."""

    name = ""
    package = ""
    tables = False
    """Whether the backend shows the completions sample as a table."""

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any]):
        self.run_dir, self.run_name, self.config = Path(run_dir), run_name, config
        self.where = ""
        """Where the backend writes (said on the console when it starts)."""

    def start(self, first_step: int) -> None:
        """Open the backend; ``first_step`` is the first step this session logs."""
        raise NotImplementedError

    def log(self, scalars: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """A small table (the completions sample); backends without tables ignore it."""

    def close(self) -> None:
        raise NotImplementedError

    @classmethod
    def check_environment(cls) -> None:
        """Refuse, in one line, a setting of the backend's own (an environment variable) it
        would fail on once the run has started; nothing by default."""


BACKENDS: dict[str, type[Tracker]] = {}
"""Backend name -> its Tracker class (``train.report_to`` accepts these and ``none``)."""


def register(cls: type[Tracker]) -> type[Tracker]:
    BACKENDS[cls.name] = cls
    return cls


def names() -> list[str]:
    return list(BACKENDS)


def parse(value: Any) -> list[str]:
    """``train.report_to`` as a list of backend names: a list, or one string (comma-separated
    names allowed); ``none`` (alone) or an empty list turns dashboards off. Unknown names and
    ``none`` beside a backend raise ValueError naming the known ones."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected backend names, not {item!r}")
        for name in (p.strip() for p in item.split(",")):
            if not name:
                continue
            if name != NONE and name not in BACKENDS:
                raise ValueError(f"unknown backend {name!r}; known: {', '.join([*BACKENDS, NONE])}")
            if name not in out:
                out.append(name)
    if NONE in out and len(out) > 1:
        raise ValueError(f"'{NONE}' turns dashboards off; it cannot be combined with {', '.join(n for n in out if n != NONE)}")
    return [n for n in out if n != NONE]


def require(report_to: Sequence[str]) -> None:
    """Refuse, in one line naming the key and the extra to install, a backend whose package is
    missing (checked without importing it, before anything slow)."""
    for name in report_to:
        package = BACKENDS[name].package
        if importlib.util.find_spec(package.split(".")[0]) is None:
            raise UserError(f"train.report_to={name}: the {package} package is not installed; "
                            f"pip install 'vigor[{name}]' (or drop {name} from --report-to)")
        BACKENDS[name].check_environment()


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl line, without its step (None and non-finite left out)."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


COMPLETION_COLUMNS = ["step", "prompt", "completion", "reward", "advantage"]
"""The completions table's columns; what reward functions log through TRL's log_extra follows."""


def _number(value: Any) -> float:
    """A table cell's number; NaN for an unscored completion (reward None)."""
    return float("nan") if value is None else float(value)


class Trackers:
    """The configured backends, fed the same lines as metrics.jsonl.

    Built when the run is set up (:func:`require` refuses a missing package then); each
    backend starts at the first line logged. :meth:`log_metrics` takes a metrics.jsonl line,
    :meth:`log_completions` the completions.jsonl rows of a step, :meth:`close` ends them
    (safe to call twice).
    """

    def __init__(self, report_to: Sequence[str], run_dir: str | Path, run_name: str,
                 config: dict[str, Any] | None = None, announce: Callable[[str], Any] | None = None):
        require(report_to)
        self.backends = [BACKENDS[n](Path(run_dir), run_name, config or {}) for n in report_to]
        self.announce = announce
        self.started = False
        self._last: dict[str, tuple[int, float]] = {}

    def __bool__(self) -> bool:
        return bool(self.backends)

    def _start(self, row: dict[str, Any]) -> None:
        if self.started:
            return
        self.started = True
        step = int(row.get("step", 0))
        # an evaluation line first (step 0, or the checkpoint's own evaluation logged again on
        # resume) keeps its step's training line; a training line first is the first step run
        first = step + 1 if "eval/accuracy" in row else step
        for b in self.backends:
            b.start(first)
            if self.announce is not None and b.where:
                self.announce(f"{b.name}: {b.where}")

    def log_metrics(self, row: dict[str, Any]) -> None:
        if not self.backends:
            return
        self._start(row)
        step = int(row.get("step", 0))
        # an evaluation line repeats its step's rollouts/cumulative, tokens/cumulative (and,
        # resumed, time/elapsed) so a JSONL reader needs no join; a chart needs each point once
        values = {k: v for k, v in scalars(row).items() if self._last.get(k) != (step, v)}
        self._last.update((k, (step, v)) for k, v in values.items())
        for b in self.backends:
            b.log(values, step)

    def log_completions(self, step: int, rows: Iterable[dict[str, Any]]) -> None:
        shown = [b for b in self.backends if b.tables]
        if not shown:
            return
        rows = list(rows)
        extra = list(dict.fromkeys(k for r in rows for k in r.get("extra") or {}))  # the reward functions' log_extra
        table = [[step, str(r.get("prompt", ""))[-TEXT_CHARS:], str(r.get("text", ""))[:TEXT_CHARS],
                  _number(r.get("reward")), _number(r.get("advantage")),
                  *[(r.get("extra") or {}).get(k) for k in extra]] for r in rows]
        if not table:
            return
        self._start({"step": step})
        for b in shown:
            b.table("completions", COMPLETION_COLUMNS + extra, table, step)

    def close(self) -> None:
        """End every started backend. One that fails to close is a warning line (through
        ``announce``): metrics.jsonl is the run's record, and the error must not hide the
        other backends or an error the run itself is stopping with."""
        backends, self.backends = self.backends, []
        for b in backends if self.started else []:
            try:
                b.close()
            except Exception as e:
                if self.announce is None:
                    raise
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                self.announce(f"warning: {b.name} did not close cleanly ({first}); metrics.jsonl is complete")


# --------------------------------------------------------------------------- backends
def _markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (TensorBoard's text tab renders it)."""
    def cell(v: Any) -> str:
        text = f"{v:.3f}" if isinstance(v, float) else str(v)
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


@register
class TensorBoardTracker(Tracker):
    """Event files under ``<run>/tensorboard`` through ``torch.utils.tensorboard``."""

    name = "tensorboard"
    package = "tensorboard"
    tables = True

    def start(self, first_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = self.run_dir / "tensorboard"
        # purge_step drops events at or after the first step this session logs: a resumed run
        # re-runs the steps after its checkpoint, and each must appear once
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=first_step if first_step > 0 else None)
        self.where = f"event files in {log_dir} (tensorboard --logdir {self.run_dir.parent})"

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        self.writer.add_text(key, _markdown_table(columns, rows), step)

    def close(self) -> None:
        self.writer.close()


def _wandb_api_key() -> bool:
    """An API key is configured (environment or ``wandb login``'s netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
        return netrc.netrc().authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")
"""The values wandb takes for ``$WANDB_MODE`` (its Settings refuse any other once a run starts)."""


def wandb_mode() -> tuple[str, str]:
    """(mode, why): ``$WANDB_MODE`` when set (no probe); else online only with an API key and
    a W&B server that answers, offline otherwise."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode, "WANDB_MODE"
    if not _wandb_api_key():
        return "offline", "no W&B API key (wandb login, or WANDB_API_KEY)"
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=PROBE_TIMEOUT_S).close()
    except (OSError, TypeError):
        return "offline", f"{url.hostname} cannot be reached"
    return "online", "API key and server found"


@register
class WandbTracker(Tracker):
    """A W&B run, online or offline (:func:`wandb_mode`)."""

    name = "wandb"
    package = "wandb"
    tables = True

    @classmethod
    def check_environment(cls) -> None:
        mode = os.environ.get("WANDB_MODE")
        if mode and mode not in WANDB_MODES:
            raise UserError(f"train.report_to=wandb: WANDB_MODE={mode!r} is not a mode wandb takes "
                            f"({', '.join(WANDB_MODES)}); set one of them, or unset it")

    def start(self, first_step: int) -> None:
        import wandb

        mode, why = wandb_mode()
        directory = os.environ.get("WANDB_DIR") or str(self.run_dir)
        name = self.run_name if first_step <= 1 else f"{self.run_name} (from step {first_step})"
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "vigor"), name=name, dir=directory,
                              mode=mode, config=self.config, reinit="create_new",
                              settings=wandb.Settings(quiet=True))  # the trainer prints its own lines
        self.where = f"{mode} ({why})"
        if mode == "offline":
            files = getattr(self.run, "dir", None)
            self.where += f"; upload later with: wandb sync {Path(files).parent if files else directory}"

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        import wandb

        self.run.log({key: wandb.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        import wandb

        self.run.finish()
        if wandb.run is None:
            # finish() can return before wandb's service has written the run's file; teardown
            # waits for it (at exit wandb does this itself, but not reliably under multiprocessing)
            wandb.teardown()


@register
class TrackioTracker(Tracker):
    """A trackio run in trackio's local store (``trackio show`` opens the dashboard)."""

    name = "trackio"
    package = "trackio"
    tables = True

    def start(self, first_step: int) -> None:
        import trackio

        project = os.environ.get("TRACKIO_PROJECT", "vigor")
        # a resumed session (first step past 1) continues the run's trackio run; a new run never
        # joins another run's (two run directories may share a name)
        self.run = trackio.init(project=project, name=self.run_name, config=self.config,
                                resume="allow" if first_step > 1 else "never", embed=False)
        self.where = f"project {project} (trackio show --project {project})"

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        import trackio

        self.run.log({key: trackio.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        self.run.finish()

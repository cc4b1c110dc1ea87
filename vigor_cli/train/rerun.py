"""`vigor train --rerun RUN`: repeat a run from its record and say whether it came out the same.

The run's saved config (its seed included) trains again into a new directory (``RUN-rerun``
beside it unless ``--output-dir``/``--run-name`` say otherwise), in the folder the run was
started in, so relative paths mean what they meant. Before it trains, every recorded
version, machine property and file that differs here is named (vigor_cli/run/provenance.py);
after, the two runs are compared step by step: ``metrics.jsonl`` (timing fields aside),
``allocation.jsonl``, ``completions.jsonl``, ``eval/step-<N>.json`` and the final weights.
The answer is "identical", or the first step, file and key that differ.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vigor_cli.run import provenance
from vigor_cli.errors import UserError
from vigor_cli.run.logs import LOGS, RunLog

EXIT_DIFFERS = 3
"""`vigor train --rerun`'s exit code when the repeat differs from the run (0: identical)."""
TIMING_PREFIX = "time/"
"""metrics.jsonl keys that measure time: they differ between any two runs and are not compared."""
WEIGHT_SUFFIX = ".safetensors"


@dataclass
class Difference:
    step: int
    file: str
    key: str
    recorded: Any
    rerun: Any

    def line(self, a: Path, b: Path) -> str:
        return (f"differs: first at step {self.step}, {self.file} {self.key}: {_short(self.recorded)} in {a}, "
                f"{_short(self.rerun)} in {b}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """(the key path, a's value, b's value) of the first place two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip("."), a.get(k, "<missing>"), b.get(k, "<missing>")
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path} (length)".lstrip(". "), len(a), len(b)
        return None
    same = a == b and type(a) is type(b) or (a != a and b != b)  # NaN equals NaN in a log
    return None if same else (path.lstrip(".") or "(value)", a, b)


def _by_step(log: RunLog, name: str, upto: int) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for step, row in log.steps(name) if (log.path / name).is_file() else []:
        if step <= upto:
            if name == "metrics.jsonl":
                row = {k: v for k, v in row.items() if not k.startswith(TIMING_PREFIX)}
            out.setdefault(step, []).append(row)
    return out


def compare_runs(a: Path, b: Path, upto: int, cut_short: bool = False) -> Difference | None:
    """The first difference between two runs' logs and evaluations, steps 0..``upto``,
    in the order a step writes them (None: identical). ``cut_short``: ``b`` stopped at
    ``upto`` before ``a`` did, so its end-of-training evaluation there, which ``a`` never
    ran (``upto`` not one of its evaluation steps), is not compared."""
    la, lb = RunLog(a), RunLog(b)
    logs = {name: (_by_step(la, name, upto), _by_step(lb, name, upto)) for name in LOGS}
    evals = ({s: p for s, p in la.eval_steps().items() if s <= upto}, {s: p for s, p in lb.eval_steps().items() if s <= upto})
    if cut_short and upto not in evals[0]:
        evals[1].pop(upto, None)
        ra, rb = logs["metrics.jsonl"]
        if not any(_is_eval(row) for row in ra.get(upto, [])):
            rb[upto] = [row for row in rb.get(upto, []) if not _is_eval(row)]
    for step in range(upto + 1):
        for name, (ra, rb) in logs.items():
            found = first_difference(ra.get(step, []), rb.get(step, []))
            if found:
                return Difference(step, name, *found)
        pa, pb = evals[0].get(step), evals[1].get(step)
        if pa is None and pb is None:
            continue
        if pa is None or pb is None:
            return Difference(step, f"eval/step-{step}.json", "(file)", "present" if pa else "absent",
                              "present" if pb else "absent")
        found = first_difference(_read_json(pa), _read_json(pb))
        if found:
            return Difference(step, f"eval/step-{step}.json", *found)
    return None


def _is_eval(row: dict) -> bool:
    """A metrics.jsonl line of an evaluation (its keys eval/...), not of a training step."""
    return any(k.startswith("eval/") for k in row) and "reward/mean" not in row


def _read_json(path: Path) -> Any:
    from vigor_cli.user.files import parse_json

    return parse_json(path.read_bytes(), str(path))


def _weights(checkpoint: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(checkpoint.glob(f"*{WEIGHT_SUFFIX}"))}


def compare_weights(a: Path, b: Path, step: int) -> tuple[bool | None, str]:
    """(same, what was compared) for the two runs' checkpoints of ``step``; None when the
    recorded run kept no checkpoint of that step."""
    ca, cb = a / "checkpoints" / f"step-{step}", b / "checkpoints" / f"step-{step}"
    wa, wb = (_weights(ca) if ca.is_dir() else {}), (_weights(cb) if cb.is_dir() else {})
    if not wa or not wb:
        return None, f"weights not compared ({a} keeps no checkpoint of step {step})"
    names = ", ".join(sorted(wa))
    return wa == wb, f"the weights of step {step} ({names})"


def last_step(run: Path) -> int:
    """The last step a run logged (0 when it logged only its first evaluation)."""
    steps = [s for s, _ in RunLog(run).steps("metrics.jsonl")] if (run / "metrics.jsonl").is_file() else []
    if not steps:
        raise UserError(f"--rerun {run}: the run has logged no step to compare with")
    return max(steps)


def rerun(path: str | Path, out: Any, steps: int | None = None, output_dir: str | None = None,
          run_name: str | None = None) -> bool:
    """Train ``path``'s run again from its config and compare (module docstring); prints
    what differs and returns whether the runs are identical."""
    from vigor_cli.console import shown
    from vigor_cli.run.directory import RunDir
    from vigor_cli.settings import build_config
    from vigor_cli.train.trainer import train

    def say(line: str) -> None:
        out.print(shown(line), highlight=False, soft_wrap=True)

    original = RunDir.open_existing(Path(os.path.abspath(path)), flag="--rerun")
    record = provenance.read(original.path)
    if record is not None and record.get("trainer", "vigor train") != "vigor train":
        raise UserError(f"--rerun {path}: the run was trained through TRL (python -m vigor_cli.integrations.trl); "
                        "--rerun repeats `vigor train` runs")
    logged = last_step(original.path)
    if steps is not None and steps > logged:
        raise UserError(f"--steps {steps}: {original.path} logged steps up to {logged}; a rerun repeats at most those")
    upto = steps if steps is not None else logged
    cfg = build_config(original.path / "config.yaml")
    cfg.train.steps = max(upto, 1)
    cfg.train.output_dir = output_dir or str(original.path.parent)
    cfg.train.run_name = run_name or f"{original.name}-rerun"
    with original.in_launch_dir(say):
        if record is None:
            say(f"{original.path} has no {provenance.RECORD}: versions and files cannot be compared")
        else:
            for line in provenance.summary_lines(record)[:2]:
                say(f"recorded: {line}")
        before = provenance.differences(record, threads=False) if record is not None else []
        for line in before:
            say(f"differs from the record: {line}")
        summary = train(cfg, out=out)
    new = Path(summary["run_dir"]).absolute()
    here = provenance.read(new)  # written once the model loaded: the threads vigor set
    differ = before
    if record is not None and here is not None:
        threads = [f"{k}: recorded {a}, here {b}" for k, a, b in provenance.version_changes(record, here)
                   if k == provenance.THREADS]
        for line in threads:
            say(f"differs from the record: {line}")
        differ = before + threads
    _mark_rerun(new, original.path)
    found = compare_runs(original.path, new, upto, cut_short=upto < logged)
    if found is None:
        same, what = compare_weights(original.path, new, upto)
        if same is False:
            say(f"differs: logs identical up to step {upto}, but {what} differ")
        else:
            done = f", and {what}" if same else f"; {what}"
            say(f"identical: metrics.jsonl (timing fields aside), allocation.jsonl, completions.jsonl and eval/ of "
                f"steps 0-{upto}{done}")
            return True
    else:
        say(found.line(original.path, new))
    if differ:
        say("recorded versions or files that differ here (a likely cause): " + "; ".join(differ))
    return False


def _mark_rerun(new: Path, original: Path) -> None:
    """Say in the new run's record which run it repeats."""
    from vigor_cli.run.checkpoints import read_run_id

    record = provenance.read(new)
    if record is not None:
        record["rerun_of"] = {"run": original.name, "run_id": read_run_id(original)}
        provenance.write(new, record)

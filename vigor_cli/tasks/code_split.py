"""Which LiveCodeBench problems train and which evaluate: the code task's protocol.

Details: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from vigor_cli.errors import UserError


@dataclass(frozen=True)
class Protocol:
    """How one protocol picks and grades problems."""

    train_tests: str
    """Tests a training problem is rewarded on ('all' or 'public')."""
    eval_tests: str
    """Tests an evaluation problem is graded on ('all' or 'private')."""
    by_date: bool
    """Training and evaluation problems are split by contest date (disjoint)."""
    summary: str


CODE_PROTOCOLS: dict[str, Protocol] = {
    "disjoint": Protocol("all", "all", True,
                         "training problems before task.contest_date_split, rewarded on all their "
                         "tests; evaluation on the problems from that date on, all their tests"),
    "same-problem": Protocol("public", "private", False,
                             "the paper's: the same problems train on their public tests and "
                             "evaluate on their private tests"),
}
"""``task.code_protocol`` names -> protocol."""


def parse_date(text: object, where: str) -> datetime:
    """An ISO date or date-time (naive); a UserError naming ``where`` otherwise."""
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        raise UserError(f"{where}: {text!r} is not an ISO date (e.g. 2024-08-01)") from None


@dataclass(frozen=True)
class CodeSplit:
    """The code task's problems: which train, which evaluate, and on which tests."""

    protocol: str
    split_date: str | None
    """``task.contest_date_split`` under a protocol that splits by date; else None."""
    train: list[dict]
    """LiveCodeBench records that train (empty when only evaluation was loaded)."""
    eval: list[dict]
    """LiveCodeBench records that evaluate (empty when only training was loaded)."""

    @property
    def train_tests(self) -> str:
        return CODE_PROTOCOLS[self.protocol].train_tests

    @property
    def eval_tests(self) -> str:
        return CODE_PROTOCOLS[self.protocol].eval_tests

    def describe(self) -> str:
        """One line: the protocol, how many problems train and evaluate, on which tests."""
        p = CODE_PROTOCOLS[self.protocol]
        if p.by_date:
            return (f"code split (task.code_protocol=disjoint): {len(self.train)} training problems "
                    f"with contest_date before {self.split_date}, rewarded on all their tests; "
                    f"{len(self.eval)} held-out evaluation problems from {self.split_date} on, "
                    "graded on all their tests")
        return (f"code split (task.code_protocol=same-problem, the paper's): {len(self.train)} "
                f"training problems rewarded on their public tests, {len(self.eval)} evaluation "
                "problems graded on their private tests; a program that prints the statement's "
                "samples earns full training reward, and evaluating problems trained on is "
                "contaminated by design")


def split_problems(train_rows: Sequence[dict] | None, eval_rows: Sequence[dict] | None,
                   protocol: str, split_date: str) -> CodeSplit:
    """The split of ``train_rows`` (the training source's records) and ``eval_rows`` (the
    evaluation source's; the same list when both read one source) under ``protocol``; a side
    given as None is left empty (not loaded). Raises UserError for an unknown protocol or a
    date that is not ISO."""
    if protocol not in CODE_PROTOCOLS:
        raise UserError(f"task.code_protocol={protocol!r}: unknown (known: {', '.join(CODE_PROTOCOLS)})")
    train, evals = list(train_rows or []), list(eval_rows or [])
    if not CODE_PROTOCOLS[protocol].by_date:
        return CodeSplit(protocol, None, train, evals)
    cut = parse_date(split_date, "task.contest_date_split")

    def date(row: dict) -> datetime:
        return parse_date(row["contest_date"], f"record {row.get('question_id')} contest_date")

    evals = [r for r in evals if date(r) >= cut]
    held = {str(r["question_id"]) for r in evals}
    train = [r for r in train if date(r) < cut and str(r["question_id"]) not in held]
    return CodeSplit(protocol, split_date, train, evals)


def empty_side(split: CodeSplit, side: str, rows: Sequence[dict], source: str) -> UserError:
    """The one line for a split that leaves ``side`` ('training' or 'evaluation') with no
    problem: what the source holds, and the keys to change."""
    dates = sorted(str(r.get("contest_date", ""))[:10] for r in rows)
    held = f"its {len(rows)} problems date from {dates[0]} to {dates[-1]}" if dates else "it holds no problem"
    return UserError(f"code: task.contest_date_split={split.split_date} leaves no {side} problems in "
                     f"{source} ({held}); set task.contest_date_split to a date between, or "
                     "task.code_protocol=same-problem (the paper's, which trains and evaluates on "
                     "the same problems)")

"""code: LiveCodeBench v6 problems, graded by the real code verifier in the sandbox.

Training examples are rewarded on their public tests; evaluation examples
are graded on their private tests, the paper's protocol. Programs run only in a
fully isolated sandbox unless ``task.allow_weak_sandbox`` is set, and a test the
sandbox itself failed on stops the run with one clear error (never a silent 0).
Problems come from the hub (``livecodebench/code_generation_lite``,
``release_v6``) or from a local JSONL file (``task.train_path`` for
training, ``task.data_dir``/``code.jsonl`` or ``task.data_dir`` as a file
for evaluation), and can be cut to a contest-date window.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from vigor_cli.errors import UserError
from vigor_cli.tasks import loading
from vigor_cli.tasks.base import Example, Score, Task
from vigor_cli.tasks.prompts import render

LCB_HUB_ID = "livecodebench/code_generation_lite"
LCB_VERSION = "release_v6"
LCB_FIELDS = (
    "question_title", "question_content", "platform", "question_id", "contest_id",
    "contest_date", "starter_code", "difficulty", "public_test_cases",
    "private_test_cases", "metadata",
)  # fmt: skip
"""Every field a LiveCodeBench record must carry."""

SYSTEM = (
    "You will be given a question (problem specification) and will generate a correct Python "
    "program that matches the specification and passes all tests."
)
STDIN_FORMAT = (
    "Read the inputs from stdin, solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows.\n"
    "```python\n# YOUR CODE HERE\n```"
)
STARTER_FORMAT = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters.\n```python\n{starter}\n```"
)


def code_instruction(record: dict) -> str:
    """LiveCodeBench's generation prompt for one record (stdin or starter-code form)."""
    starter = record.get("starter_code") or ""
    fmt = STARTER_FORMAT.format(starter=starter) if starter.strip() else STDIN_FORMAT
    return f"{SYSTEM}\n\nQuestion: {record['question_content']}\n\n{fmt}"


class CodeTaskBase(Task):
    """Scoring shared by code tasks: extract the program, grade it in the sandbox."""

    def __init__(self, reward: str = "full", workers: int = 0, allow_weak_sandbox: bool = False):
        self.reward_kind = reward
        self.workers = workers
        self.allow_weak_sandbox = allow_weak_sandbox
        self._verifier = None
        self._problems: dict[str, Any] = {}

    def render_code_prompt(self, example: Example, tokenizer: Any, plain: str) -> str:
        return render(tokenizer, code_instruction(example.answer), plain)

    def _problem(self, example: Example):
        if example.uid not in self._problems:
            from vigor_cli.verifiers.code import load_problem

            try:
                self._problems[example.uid] = load_problem(example.answer)
            except UserError:
                raise
            except Exception as e:  # a record whose tests do not decode
                raise UserError(f"{self.name}: record {example.uid} ({example.answer.get('question_id')}): {e}") from None
        return self._problems[example.uid]

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        from vigor_cli.sandbox import WeakSandboxError
        from vigor_cli.verifiers.code import CodeVerifier, extract_code

        if self._verifier is None:
            try:
                self._verifier = CodeVerifier(workers=self.workers,
                                              allow_weak_sandbox=self.allow_weak_sandbox)
            except WeakSandboxError as exc:
                raise UserError(f"{self.name}: {exc}") from None
        scores: list[Score | None] = [None] * len(completions)
        jobs, where = [], []
        for i, (ex, text) in enumerate(zip(examples, completions)):
            code = extract_code(text)
            if not code:
                scores[i] = Score(0.0, "no code block")
                continue
            jobs.append((self._problem(ex), code, ex.meta.get("tests", "public")))
            where.append(i)
        verdicts = self._verifier.grade_many(jobs) if jobs else []
        failed = [(i, v) for i, v in zip(where, verdicts) if v.sandbox_errors]
        if failed:
            count = sum(len(v.sandbox_errors) for _, v in failed)
            first = failed[0][1].sandbox_errors[0].detail or "no detail"
            raise UserError(
                f"{self.name}: the sandbox failed on {count} test(s) of {len(failed)} "
                f"completion(s) (first: {first}); stopping instead of scoring them 0. "
                "Check that the sandbox works: vigor verify code --problem ... --solution ...")
        for i, v in zip(where, verdicts):
            reward = float(v.full) if self.reward_kind == "full" else float(v.fraction)
            scores[i] = Score(reward, v.reason, {"fraction": v.fraction, "tests": v.tests,
                                                 "isolation": v.isolation})
        return scores  # type: ignore[return-value]

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None


def _parse_date(text: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        raise UserError(f"{where}: {text!r} is not an ISO date (e.g. 2024-08-01)") from None


def check_record(record: dict, where: str) -> None:
    """Raise a one-line UserError naming the record and the first missing LCB field."""
    for key in LCB_FIELDS:
        if key not in record:
            raise UserError(f"{where}: missing field '{key}' (LiveCodeBench records need {', '.join(LCB_FIELDS)})")


def filter_by_date(records: list[dict], start: str | None, end: str | None) -> list[dict]:
    """Keep records with start <= contest_date <= end (either bound optional), as LCB does."""
    lo = _parse_date(start, "task.contest_date_start") if start else None
    hi = _parse_date(end, "task.contest_date_end") if end else None
    kept = []
    for r in records:
        d = _parse_date(r["contest_date"], f"record {r.get('question_id')} contest_date")
        if (lo is None or d >= lo) and (hi is None or d <= hi):
            kept.append(r)
    return kept


def load_lcb(path: str | None, what: str, flag: str) -> list[dict]:
    """LiveCodeBench records from a local JSONL/Parquet file, or the hub when ``path`` is None."""
    if path is not None:
        rows = loading.read_records(path)
        source = str(path)
    else:
        # Never trust_remote_code: a hub loading script would run inside the trainer. Where the
        # hub copy needs its script, this fails with one line naming the local-path flag.
        rows = loading.load_hub(LCB_HUB_ID, split="test", flag=flag, what=what, version_tag=LCB_VERSION)
        source = LCB_HUB_ID
    for n, r in enumerate(rows):
        check_record(r, f"{source} record {n + 1}")
    return rows


class CodeTask(CodeTaskBase):
    """LiveCodeBench v6: the same problems serve training (public tests) and evaluation
    (private tests)."""

    name = "code"

    def __init__(self, cfg: Any, workers: int = 0):
        super().__init__(reward=cfg.code_reward, workers=workers,
                         allow_weak_sandbox=getattr(cfg, "allow_weak_sandbox", False))
        self.cfg = cfg
        self._records: list[dict] | None = None

    def _eval_path(self) -> str | None:
        if self.cfg.data_dir is None:
            return None
        p = Path(self.cfg.data_dir)
        return str(p / "code.jsonl") if p.is_dir() else str(p)

    def _load(self, path: str | None, flag: str) -> list[dict]:
        rows = load_lcb(path, "LiveCodeBench problems", flag)
        return filter_by_date(rows, self.cfg.contest_date_start, self.cfg.contest_date_end)

    def _examples(self, rows: list[dict], part: str, tests: str) -> list[Example]:
        return [
            Example(uid=f"code/{part}/{r['question_id']}", question=r["question_content"], answer=r,
                    meta={"tests": tests, "platform": r["platform"], "difficulty": r["difficulty"]})
            for r in rows
        ]  # fmt: skip

    def train_examples(self) -> list[Example]:
        rows = self._load(self.cfg.train_path, "--set task.train_path=FILE.jsonl")
        return self._examples(rows, "train", "public")

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "code", "lcb", "livecodebench"):
            raise UserError(f"code has one evaluation set, 'livecodebench'; got {name!r}")
        path = self._eval_path() or self.cfg.train_path
        rows = self._load(path, "--set task.data_dir=DIR (with code.jsonl) or task.train_path=FILE.jsonl")
        return self._examples(rows, "test", "private")

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        plain = code_instruction(example.answer) + "\n\n"
        return self.render_code_prompt(example, tokenizer, plain)

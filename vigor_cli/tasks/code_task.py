"""code: LiveCodeBench v6 problems, graded by the real code verifier in the sandbox.

Details: docs/modules.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import vigor_cli.tasks.loading as loading
from vigor_cli.user import records
from vigor_cli.errors import UserError
from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.code_split import CodeSplit, empty_side, parse_date, split_problems
from vigor_cli.tasks.prompts import render

LCB_HUB_ID = "livecodebench/code_generation_lite"
EVAL_SET_NAMES = ("code", "lcb", "livecodebench")
"""The names ``task.eval_sets`` may give the code task's one evaluation set (LiveCodeBench)."""
LCB_VERSION = "release_v6"
_LCB_FILES = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
LCB_RELEASES = {
    **{f"release_v{i}": _LCB_FILES[:i] for i in range(1, 7)},
    "release_latest": list(_LCB_FILES),
    **{f"v{i}": [_LCB_FILES[i - 1]] for i in range(1, 7)},
}
"""Release name -> JSONL files of the hub repository (as its loading script maps them)."""
LCB_FIELDS = (
    "question_title", "question_content", "platform", "question_id", "contest_id",
    "contest_date", "starter_code", "difficulty", "public_test_cases",
    "private_test_cases", "metadata",
)  # fmt: skip
"""Every field a LiveCodeBench record must carry."""
SYSTEMIC_FAILURE_SHARE = 0.5
"""Grading failed for more than this share of a batch's programs: the sandbox or the grader
is broken (not the programs), so the run stops instead of training on zeros."""

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

    def verifier(self) -> Any:
        """The task's code verifier and its sandbox pool, started on first use (a sandbox
        that cannot start, or runs weaker than full isolation unasked, is one line)."""
        from vigor_cli.sandbox import SandboxError, WeakSandboxError
        from vigor_cli.verifiers.code import CodeVerifier

        if self._verifier is None:
            try:
                self._verifier = CodeVerifier(workers=self.workers,
                                              allow_weak_sandbox=self.allow_weak_sandbox)
            except WeakSandboxError as exc:
                raise UserError(f"{self.name}: {exc}") from None
            except SandboxError as exc:
                raise UserError(f"{self.name}: the sandbox cannot start: {exc}; {_CHECK}") from None
        return self._verifier

    def problem(self, example: Example) -> Any:
        """The example's problem (its tests decoded once)."""
        return self._problem(example)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        from vigor_cli.sandbox import SandboxError
        from vigor_cli.verifiers.code import extract_code

        self.verifier()
        scores: list[Score | None] = [None] * len(completions)
        jobs, where = [], []
        for i, (ex, text) in enumerate(zip(examples, completions)):
            code = extract_code(text)
            if not code:
                scores[i] = Score(0.0, "no code block")
                continue
            jobs.append((self._problem(ex), code, ex.meta.get("tests", "public")))
            where.append(i)
        try:
            verdicts = self._verifier.grade_many(jobs) if jobs else []
        except SandboxError as exc:  # the pool could not replace a worker, or is closed
            raise UserError(f"{self.name}: the sandbox failed: {exc}; {_CHECK}") from None
        failed = [v for v in verdicts if v.grading_errors]
        if len(failed) > SYSTEMIC_FAILURE_SHARE * len(verdicts):
            raise UserError(
                f"{self.name}: could not grade {len(failed)} of {len(verdicts)} programs of the "
                f"batch (first: {_grading_error(failed[0])}); stopping instead of training on "
                f"zeros: the sandbox or the grader is broken, not the programs; {_CHECK}")
        for i, v, signs in zip(where, verdicts, self._hard_coding(jobs, verdicts)):
            details = {"fraction": v.fraction, "tests": v.tests, "isolation": v.isolation, **signs}
            if v.grading_errors:
                why = _grading_error(v)
                scores[i] = Score(0.0, f"grading failed ({why})", details, grading_error=why)
                continue
            reward = float(v.full) if self.reward_kind == "full" else float(v.fraction)
            scores[i] = Score(reward, v.reason, details)
        return scores  # type: ignore[return-value]

    def _hard_coding(self, jobs: list, verdicts: list) -> list[dict]:
        """Each graded program's signs of hard-coding (vigor_cli/verifiers/hard_coding.py),
        read from its verdict: a problem graded on all tests tells both halves; one graded on
        its public tests alone (the same-problem protocol) has its private tests graded too,
        without reward, when it passed every public one, the only case that needs them."""
        from vigor_cli.verifiers.hard_coding import signals

        halves: list[tuple[bool | None, float | None]] = []
        probe: list[int] = []
        for k, ((problem, _, tests), v) in enumerate(zip(jobs, verdicts)):
            n, passed = len(problem.public_tests), [t.status == "pass" for t in v.tests]
            private = passed[n:] if tests == "all" else []
            public_passed = None if tests not in ("all", "public") or v.grading_errors else all(passed[:n])
            halves.append((public_passed, sum(private) / len(private) if private else None))
            if tests == "public" and public_passed and problem.private_tests:
                probe.append(k)
        extra = self._verifier.grade_many([(jobs[k][0], jobs[k][1], "private") for k in probe]) if probe else []
        for k, v in zip(probe, extra):
            halves[k] = (True, None if v.grading_errors else v.fraction)
        return [signals(code, problem.public_tests, *half) for (problem, code, _), half in zip(jobs, halves)]

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None


_CHECK = "check the sandbox with: vigor verify code --problem FILE --solution FILE"


def _grading_error(verdict: Any) -> str:
    """'<status>: <detail>' of a verdict's first test that was not graded."""
    test = verdict.grading_errors[0]
    return f"{test.status}: {test.detail or 'no detail'}"


def check_record(record: dict, where: str) -> None:
    """Raise a one-line UserError naming the record and the first missing LCB field, or the
    first field of the wrong kind (vigor_cli/user/records.py: an object or NaN where text belongs)."""
    if not isinstance(record, dict):
        raise UserError(f"{where}: not a record (a JSON object)")
    for key in LCB_FIELDS:
        if key not in record:
            raise UserError(f"{where}: missing field '{key}' (LiveCodeBench records need {', '.join(LCB_FIELDS)})")
    records.check_record(record, where, text=("question_content", "question_title", "starter_code"),
                         answers=("question_id",))


def filter_by_date(records: list[dict], start: str | None, end: str | None) -> list[dict]:
    """Keep records with start <= contest_date <= end (either bound optional), as LCB does."""
    lo = parse_date(start, "task.contest_date_start") if start else None
    hi = parse_date(end, "task.contest_date_end") if end else None
    kept = []
    for r in records:
        d = parse_date(r["contest_date"], f"record {r.get('question_id')} contest_date")
        if (lo is None or d >= lo) and (hi is None or d <= hi):
            kept.append(r)
    return kept


def lcb_release_files(release: str) -> list[str]:
    """The JSONL files of a LiveCodeBench release in ``livecodebench/code_generation_lite``.

    ``release_vN`` is cumulative (``test.jsonl`` .. ``testN.jsonl``); ``vN`` is
    the one file that release added; ``release_latest`` is the newest release.
    """
    if release in LCB_RELEASES:
        return list(LCB_RELEASES[release])
    raise UserError(f"task.lcb_release={release!r}: unknown LiveCodeBench release (known: "
                    f"{', '.join(LCB_RELEASES)})")


def lcb_local_files(path: str | Path, release: str) -> list[Path]:
    """The files a local LiveCodeBench source holds: a file is itself; a directory holds the
    release's files (test.jsonl, test2.jsonl, ...) or a single code.jsonl."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"LiveCodeBench data not found: {p}")
    if not p.is_dir():
        return [p]
    files = [p / name for name in lcb_release_files(release)]
    if all(f.is_file() for f in files):
        return files
    if (p / "code.jsonl").is_file():
        return [p / "code.jsonl"]
    missing = [f.name for f in files if not f.is_file()]
    raise UserError(f"{p}: no LiveCodeBench files for task.lcb_release={release} (missing "
                    f"{', '.join(missing)}; or put one code.jsonl there)")


def _hub_release_files(release: str, flag: str, what: str) -> list[Path]:
    """Download the release's JSONL files from the hub (plain file downloads: no dataset
    script, so nothing from the hub runs here; the files are cached by huggingface_hub)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise UserError(f"cannot load {what} from the hub: huggingface_hub is not installed; "
                        f"point to local files with {flag}") from None
    from vigor_cli import hub

    hub.quiet()
    names = lcb_release_files(release)
    reason = None if hub.offline_mode() else hub.unreachable()
    if reason is not None:  # offline: the cached files, or one line now (not a minute of retries)
        cached = _cached_release_files(names)
        if cached is None:
            raise hub.HubUnavailable(f"cannot download {what} from the hub ({LCB_HUB_ID}): {reason}, and the files "
                            f"are not in the Hugging Face cache; point to local files with {flag}")
        return cached
    paths = []
    for name in names:
        try:
            paths.append(Path(hf_hub_download(LCB_HUB_ID, name, repo_type="dataset")))
        except Exception as e:  # network, auth, offline and missing-file errors vary
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise hub.HubUnavailable(f"cannot download {what} from the hub ({LCB_HUB_ID}, file {name}): "
                            f"{reason[:200]}; offline? point to local files with {flag}") from None
    return paths


def _cached_release_files(names: list[str]) -> list[Path] | None:
    """The release's files from the Hugging Face cache, or None if any is missing."""
    from huggingface_hub import try_to_load_from_cache

    paths = []
    for name in names:
        found = try_to_load_from_cache(LCB_HUB_ID, name, repo_type="dataset")
        if not isinstance(found, str):
            return None
        paths.append(Path(found))
    return paths


def load_lcb(path: str | None, what: str, flag: str, release: str = LCB_VERSION) -> list[dict]:
    """LiveCodeBench records from local files (a JSONL/Parquet file, or a folder with the
    release's ``test*.jsonl`` or a ``code.jsonl``), or the release's files from the hub when
    ``path`` is None. Never a dataset script and never ``trust_remote_code``."""
    files = lcb_local_files(path, release) if path is not None else _hub_release_files(release, flag, what)
    rows: list[dict] = []
    for f in files:
        part = loading.read_records(f)
        for n, r in enumerate(part):
            check_record(r, f"{f.name if path is None else f} record {n + 1}")
        rows.extend(part)
    return rows


class CodeTask(CodeTaskBase):
    """LiveCodeBench v6 under ``task.code_protocol``: by default problems before
    ``task.contest_date_split`` train on all their tests and the later ones evaluate
    (:meth:`split`)."""

    name = "code"

    def __init__(self, cfg: Any, workers: int = 0):
        super().__init__(reward=cfg.code_reward, workers=workers,
                         allow_weak_sandbox=getattr(cfg, "allow_weak_sandbox", False))
        self.cfg = cfg
        self._rows: dict[str | None, list[dict]] = {}
        self._split: CodeSplit | None = None

    _TRAIN_FLAG = "--set task.train_path=FILE.jsonl"
    _EVAL_FLAG = ("--set task.data_dir=DIR (the release's test*.jsonl, or code.jsonl) or "
                  "task.train_path=FILE.jsonl")

    def _eval_path(self) -> str | None:
        path = self.cfg.data_dir if self.cfg.data_dir is not None else self.cfg.train_path
        return None if path is None else str(path)

    def _load(self, path: str | None, flag: str) -> list[dict]:
        """The records of one source (a local path, or the hub for None), cut to the
        contest-date window; read once per source."""
        if path not in self._rows:
            rows = load_lcb(path, "LiveCodeBench problems", flag, getattr(self.cfg, "lcb_release", LCB_VERSION))
            self._rows[path] = filter_by_date(rows, self.cfg.contest_date_start, self.cfg.contest_date_end)
        return self._rows[path]

    def _train_path(self) -> str | None:
        return None if self.cfg.train_path is None else str(self.cfg.train_path)

    def split(self) -> CodeSplit:
        """Which problems train and which evaluate, and on which tests (both sources read)."""
        if self._split is None:
            train_rows = self._load(self._train_path(), self._TRAIN_FLAG)
            eval_rows = self._load(self._eval_path(), self._EVAL_FLAG)
            self._split = split_problems(train_rows, eval_rows, self.cfg.code_protocol,
                                         self.cfg.contest_date_split)
        return self._split

    def describe_data(self) -> list[str]:
        return [self.split().describe()]

    def _examples(self, rows: list[dict], part: str, tests: str) -> list[Example]:
        return [
            Example(uid=f"code/{part}/{r['question_id']}", question=r["question_content"], answer=r,
                    meta={"tests": tests, "platform": r["platform"], "difficulty": r["difficulty"]})
            for r in rows
        ]  # fmt: skip

    def train_examples(self) -> list[Example]:
        split = self.split()
        if not split.train:
            raise empty_side(split, "training", self._load(self._train_path(), self._TRAIN_FLAG),
                             self.cfg.train_path or LCB_HUB_ID)
        return self._examples(split.train, "train", split.train_tests)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name is not None and name not in EVAL_SET_NAMES:
            raise UserError(f"code has one evaluation set, 'livecodebench'; got {name!r}")
        rows = self._load(self._eval_path(), self._EVAL_FLAG)  # evaluation alone reads one source
        split = self._split or split_problems(None, rows, self.cfg.code_protocol, self.cfg.contest_date_split)
        if not split.eval:
            raise empty_side(split, "evaluation", rows, self._eval_path() or LCB_HUB_ID)
        return self._examples(split.eval, "test", split.eval_tests)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        plain = code_instruction(example.answer) + "\n\n"
        return self.render_code_prompt(example, tokenizer, plain)

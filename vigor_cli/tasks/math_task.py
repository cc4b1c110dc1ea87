"""math: MATH training problems, the six math benchmarks for evaluation.

Training records come from the hub (``DigitalLearningGmbH/MATH-lighteval``,
the 7.5k MATH training problems with ``problem``/``solution``) or from a
local JSONL/Parquet file (``task.train_path``) with ``problem`` (or
``question``) and ``answer`` (or a ``solution`` whose last ``\\boxed{}`` is
the answer). Evaluation sets are read by ``vigor_cli.verifiers.math_answers``
from the files shipped in the package (``vigor_cli/data/math-eval``), or from
``task.data_dir`` (the same layout: ``<name>.jsonl``) when it is set.
"""

from __future__ import annotations

from typing import Any, Sequence

import vigor_cli.tasks.loading as loading
from vigor_cli.errors import UserError
from vigor_cli.user.records import check_record
from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.prompts import last_boxed, render

MATH_TRAIN_HUB_ID = "DigitalLearningGmbH/MATH-lighteval"
DEFAULT_EVAL_SET = "math500"
INSTRUCTION = "{q}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
PLAIN = "Question: {q}\nPlease reason step by step, and put your final answer within \\boxed{{}}.\nAnswer:"


def training_example(row: dict, index: int, where: str) -> Example:
    """An Example from a MATH-style record; the error names ``where`` and the missing field."""
    check_record(row, where, text=("problem", "question", "solution"), answers=("answer",))
    question = row.get("problem") or row.get("question")
    if not question:
        raise UserError(f"{where}: missing field 'problem' (or 'question')")
    answer = row.get("answer")
    if isinstance(answer, list):
        raise UserError(f"{where}: field 'answer' is a list; a training problem has one answer")
    if answer is None or str(answer).strip() == "":
        solution = row.get("solution")
        if not solution:
            raise UserError(f"{where}: missing field 'answer' (or a 'solution' with a \\boxed{{}} answer)")
        answer = last_boxed(str(solution))
        if answer is None:
            raise UserError(f"{where}: 'solution' has no \\boxed{{}} answer and there is no 'answer' field")
    meta = {k: row[k] for k in ("level", "type", "subject") if k in row}
    return Example(uid=f"math/train/{index}", question=str(question), answer=str(answer), meta=meta)


class MathScored(Task):
    """Scoring shared by math tasks: the real math verifier, started on first use."""

    _verifier: Any = None

    def _math_verifier(self):
        if self._verifier is None:
            from vigor_cli.verifiers.math import MathVerifier

            self._verifier = MathVerifier(timeout_s=5.0, workers=0)
        return self._verifier

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        # The question goes along: "What percent ...?" lets a bare gold 20 match 20\%.
        verdicts = self._math_verifier().score_many([(e.answer, c, e.question) for e, c in zip(examples, completions)])
        return [Score(float(v.reward), v.reason, {"pred": v.pred_parsed}) for v in verdicts]

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None


class MathTask(MathScored):
    name = "math"

    def __init__(self, cfg: Any, verifier: Any = None):
        self.cfg = cfg
        self._verifier = verifier

    def train_examples(self) -> list[Example]:
        if self.cfg.train_path:
            rows, source = loading.read_records(self.cfg.train_path), str(self.cfg.train_path)
        else:
            rows = loading.load_hub(
                MATH_TRAIN_HUB_ID, split="train", what="MATH training problems",
                flag="--set task.train_path=FILE.jsonl (or .parquet)",
            )  # fmt: skip
            source = MATH_TRAIN_HUB_ID
        return [training_example(r, i, f"{source} record {i + 1}") for i, r in enumerate(rows)]

    def eval_examples(self, name: str | None = None) -> list[Example]:
        from vigor_cli.verifiers.math_answers import DEFAULT_DATA_DIR, KNOWN, load_benchmark

        name = name or DEFAULT_EVAL_SET
        if name not in KNOWN:
            raise UserError(f"unknown math evaluation set {name!r}; valid: {', '.join(KNOWN)}")
        records = load_benchmark(name, self.cfg.data_dir or DEFAULT_DATA_DIR)
        return [
            Example(uid=r.uid, question=r.question, answer=r.golds[0] if len(r.golds) == 1 else list(r.golds), meta=dict(r.meta))
            for r in records
        ]  # fmt: skip

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION.format(q=example.question), PLAIN.format(q=example.question))

"""`vigor verify math`: grade answers with the math reward verifier and show how it read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import iter_jsonl
from vigor_cli.user.records import check_record


FORKED_MAX_CASES = 32
"""Up to this many cases are graded in a child forked from the command (no worker pool to start:
one case takes about the import of Math-Verify); more go to a pool of worker processes."""


def _read_cases(path: Path) -> list[tuple[object, str, Optional[str]]]:
    """(gold, pred, problem) from a JSONL file; gold may be a string, a number or a list of
    strings; ``problem`` (the question's text) is optional."""
    cases = []
    for i, row in iter_jsonl(path, "a JSON object with fields gold and pred"):
        check_record(row, f"{path}:{i}", required=("gold", "pred"), answers=("gold", "pred"))
        gold, pred = row["gold"], row["pred"]
        if isinstance(gold, list):
            if not gold or not all(isinstance(g, (str, int, float)) for g in gold):
                raise UserError(f"{path}:{i}: field 'gold' must be a string or a non-empty list of strings")
            gold = [str(g) for g in gold]
        elif isinstance(gold, (str, int, float)) and not isinstance(gold, bool):
            gold = str(gold)
        else:
            raise UserError(f"{path}:{i}: field 'gold' must be a string or a list of strings")
        if not isinstance(pred, (str, int, float)) or isinstance(pred, bool):
            raise UserError(f"{path}:{i}: field 'pred' must be a string")
        problem = row.get("problem")
        if problem is not None and not isinstance(problem, str):
            raise UserError(f"{path}:{i}: field 'problem' must be a string")
        cases.append((gold, str(pred), problem))
    if not cases:
        raise UserError(f"{path}: no cases")
    return cases


def verify_math(
    gold: Annotated[Optional[str], typer.Option("--gold", help="Gold answer (LaTeX, e.g. '\\frac12').")] = None,
    pred: Annotated[Optional[str], typer.Option("--pred", help="Prediction: an answer or a whole completion.")] = None,
    problem: Annotated[Optional[str], typer.Option("--problem", "--question", help="The question's text (optional): a question that asks for a percentage lets a bare gold 20 match 20\\%.")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", help="JSONL file of cases with fields gold, pred and optionally problem.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per case instead of a table.")] = False,
    timeout: Annotated[float, opt.timeout(help="Seconds allowed per case.")] = 5.0,
) -> None:
    """Grade answers with the math reward verifier (Math-Verify plus guards).

    The answer is the prediction's last \\boxed{} (several boxes written as one list when the gold has several parts; else Math-Verify's extraction). Prints the verdict, the reason and both parsed forms. In --input files, a list of golds is a problem with several answers.
    """
    if input is not None and (gold is not None or pred is not None or problem is not None):
        raise UserError("give either --input or --gold with --pred (and --problem), not both")
    if input is None:
        if gold is None or pred is None:
            raise UserError("give --gold and --pred (or --input cases.jsonl)")
        cases: list[tuple[object, str, Optional[str]]] = [(gold, pred, problem)]
    else:
        cases = _read_cases(input)

    from vigor_cli.verifiers.math import MathVerifier, grade_forked

    if len(cases) <= FORKED_MAX_CASES:
        verdicts = grade_forked(cases, timeout_s=timeout)
    else:
        with MathVerifier(timeout_s=timeout) as verifier:
            verdicts = verifier.score_many(cases)

    if as_json:
        for (g, p, _), v in zip(cases, verdicts):
            print(json.dumps({"gold": g, "pred": p, "reward": v.reward, "reason": v.reason,
                              "gold_parsed": v.gold_parsed, "pred_parsed": v.pred_parsed}, ensure_ascii=False))
        return
    from vigor_cli.console import console
    from vigor_cli.report.verify_view import print_math_verdicts

    print_math_verdicts(console, verdicts)

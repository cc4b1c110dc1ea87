"""Load math benchmark files and turn each answer shape into plain LaTeX gold strings.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import iter_jsonl
from vigor_cli.user.records import check_record
from vigor_cli.package_data import MATH_EVAL_DIR

BENCHMARKS = ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"]
"""The six math benchmarks the VIGOR paper reports."""

KNOWN = BENCHMARKS + ["gsm8k"]

DEFAULT_DATA_DIR = MATH_EVAL_DIR
"""The benchmark files shipped in the package (``vigor_cli/data/math-eval``)."""


@dataclass
class MathRecord:
    uid: str
    """``<benchmark>/<id or line index>``, unique within the file."""
    question: str
    golds: list[str]
    """One gold answer (LaTeX, no ``$``); several for OlympiadBench multi-answer problems."""
    meta: dict = field(default_factory=dict)


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every closed ``\\boxed{...}`` (or ``\\fbox{...}``) in order,
    braces matched; ``text[start:end]`` is the whole box.

    ``\\boxed 5`` (one token after a space, no braces) counts too; an unclosed box is skipped.
    """
    found = []
    for m in re.finditer(r"\\(?:boxed|fbox)(\s*)", text):
        i = m.end()
        if text[i : i + 1] == "{":
            depth = 0
            for j in range(i, len(text)):
                c = text[j]
                if c == "{" and text[j - 1] != "\\":
                    depth += 1
                elif c == "}" and text[j - 1] != "\\":
                    depth -= 1
                    if depth == 0:
                        found.append((m.start(), j + 1, text[i + 1 : j].strip()))
                        break
        elif m.group(1):
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                found.append((m.start(), i + token.end(), token.group(0).rstrip(".")))
    return found


def all_boxed(text: str) -> list[str]:
    """Contents of every closed ``\\boxed{...}`` (or ``\\fbox{...}``) in order, braces matched.

    ``\\boxed 5`` (one token after a space, no braces) counts too; an unclosed box is skipped.
    """
    return [content for _, _, content in boxed_spans(text)]


def last_boxed(text: str) -> str | None:
    """Content of the last closed ``\\boxed{...}`` in ``text``; None when there is none."""
    found = all_boxed(text)
    return found[-1] if found else None


def split_top_level(text: str, seps: tuple[str, ...] = (",", ";")) -> list[str]:
    """Split at separators that are outside every (), [], {} pair; pieces stripped, empties dropped."""
    pieces, depth, start = [], 0, 0
    i = 0
    while i < len(text):
        c = text[i]
        if c in "([{":  # \\{ \\} (set braces) nest too
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and c in seps:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return [p.strip() for p in pieces if p.strip()]


def _strip_dollars(text: str) -> str:
    """Drop math-mode dollars (not ``\\$``) and a sentence's closing period ("... \\cup\\{1\\}.")."""
    text = re.sub(r"(?<!\\)\$", "", text).strip()
    return re.sub(r"(?<=[^\d\s])\.$", "", text).strip()


def _number_text(value) -> str:
    """27.0 -> '27', 2.5 -> '2.5', '025' -> '25'."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an answer")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"non-finite answer {value}")
        if float(value).is_integer():
            return str(int(value))
        return repr(float(value))
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return str(int(text))
    return text


def gaokao_answer(raw: str) -> str:
    """Gaokao answers: ``$x$`` pieces, joined by ',', 'or', 'and' -> one comma list."""
    text = re.sub(r"solution:\s*$", "", raw.strip())
    unit = re.fullmatch(r"(-?[\d.]+)\s*\$[A-Za-z]+(?:\^\{?\d\}?)?\$", text)
    if unit:  # "20 $cm^{2}$": the number, the unit is dropped
        return unit.group(1)
    pieces = re.findall(r"\$(.*?)\$", text)
    if len(pieces) > 1:
        between = re.sub(r"\$.*?\$", "|", text)
        if set(re.findall(r"[^|\s]+", between)) <= {",", "or", "and"}:
            return ", ".join(p.strip() for p in pieces)
    return _strip_dollars(text)


def olympiad_answers(final_answer: list, multiple: bool) -> list[str]:
    """OlympiadBench ``final_answer``: one gold, or the split answers when ``multiple``."""
    texts = [_strip_dollars(str(a)) for a in final_answer]
    if not multiple:
        return [", ".join(texts)]
    golds: list[str] = []
    for t in texts:
        # Prose ("..., where $b$ is an arbitrary integer") cannot be split into answers.
        if re.search(r"\b(where|arbitrary|any)\b", t):
            golds.append(t)
        else:
            golds.extend(split_top_level(t, (",",)))
    return golds


def gsm8k_answer(raw: str) -> str:
    if "####" not in raw:
        raise ValueError("no '####' in answer")
    return raw.split("####")[-1].strip().replace(",", "")


def _record(name: str, i: int, row: dict) -> MathRecord:
    """One JSON row of benchmark ``name`` (line ``i``) -> MathRecord; KeyError/ValueError on bad rows."""
    uid = f"{name}/{row.get('id', row.get('idx', row.get('unique_id', i)))}"
    question = row.get("question") or row.get("problem")
    if not question:
        raise KeyError("question")
    meta: dict = {}
    if name == "olympiadbench":
        multiple = row.get("is_multiple_answer") in (True, "True", "true")
        golds = olympiad_answers(row["final_answer"], multiple)
        unit = row.get("unit")
        meta = {"is_multiple_answer": multiple, "unit": unit if unit not in (None, "None") else None,
                "answer_type": row.get("answer_type")}
    elif name == "minerva_math":
        box = last_boxed(row["solution"])
        if box is None:
            raise ValueError("no \\boxed{} in solution")
        gold = re.sub(r"(?<!\\)\$", "", box).strip()  # one box spans "...+$ $..."
        # Two golds are written as Python: "-1./3" and "np.arcsin(10/13)".
        gold = re.sub(r"(\d)\./", r"\1/", gold).replace("np.arcsin", "\\arcsin")
        golds = [gold]
        meta = {"type": row.get("type")}
    elif name == "gsm8k":
        golds = [gsm8k_answer(row["answer"])]
    elif name in ("aime24", "amc23"):
        golds = [_number_text(row["answer"])]
    elif name == "gaokao2023en":
        raw = str(row["answer"]).strip()
        if not raw:
            # Two rows carry their answer at the end of the question ("...answers: $x$",
            # "...Answer: A") and an empty answer field: recover it and cut it off the question.
            tail = re.search(r"\s*answers?:\s*(.+?)\s*$", question, flags=re.IGNORECASE)
            if tail is None:
                raise ValueError("empty answer")
            raw, question = tail.group(1), question[: tail.start()]
            meta["answer_from_question"] = True
        golds = [gaokao_answer(raw)]
    elif name == "math500":
        golds = [str(row["answer"]).strip()]
        meta = {"level": row.get("level"), "subject": row.get("subject")}
        uid = f"math500/{i}"
    else:  # a user file: question/problem + answer
        answer = row["answer"]
        if isinstance(answer, list):
            golds = [_strip_dollars(_number_text(a)) for a in answer]
        else:
            golds = [_strip_dollars(_number_text(answer))]
        uid = f"{name}/{row.get('id', i)}"
    if not golds or not all(golds):
        raise ValueError("empty answer")
    return MathRecord(uid=uid, question=str(question), golds=golds, meta=meta)


def load_benchmark(name_or_path: str, data_dir: str | Path | None = None) -> list[MathRecord]:
    """Records of a known benchmark (``<data_dir>/<name>.jsonl``) or of any JSONL file.

    Raises UserError naming the file (and line) when it is missing, not JSON, or a
    record lacks the question or answer field.
    """
    if name_or_path in KNOWN:
        path = Path(data_dir or DEFAULT_DATA_DIR) / f"{name_or_path}.jsonl"
        name = name_or_path
    else:
        path = Path(name_or_path)
        name = path.stem
        if not path.suffix == ".jsonl" and not path.exists():
            raise UserError(f"unknown benchmark {name_or_path!r}: use one of {', '.join(KNOWN)} or a .jsonl path")
    records = []
    read_solution = ("solution",) if name == "minerva_math" else ()  # its gold is the solution's box
    for number, row in iter_jsonl(path):
        check_record(row, f"{path}:{number}", text=("question", "problem", *read_solution),
                     answers=("answer", "final_answer"))  # a null, NaN or object answer: refused
        try:
            records.append(_record(name, number - 1, row))
        except KeyError as e:
            raise UserError(f"{path}:{number}: missing field {e.args[0]!r}") from None
        except (ValueError, TypeError) as e:
            raise UserError(f"{path}:{number}: bad answer ({e})") from None
    if not records:
        raise UserError(f"{path}: no records")
    return records

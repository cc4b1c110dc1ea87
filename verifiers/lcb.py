"""LiveCodeBench ``code_generation_lite`` records: decoding, safely.

A record's fields are all strings. ``public_test_cases`` is a JSON list of
``{"input", "output", "testtype"}``; ``private_test_cases`` is either that JSON
or base64(zlib(pickle(<that JSON as a str>))). The pickle comes from the
internet, so it is read with :class:`NoGlobalsUnpickler`, which refuses every
global: a crafted payload cannot name a callable, so it cannot run code.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zlib
from dataclasses import dataclass, field

from vigor_cli.sandbox.values import parse_json
from vigor_cli.user.files import loads

TEST_TYPES = ("stdin", "functional")
MAX_DECOMPRESSED_BYTES = 1 << 30
"""The most a ``private_test_cases`` blob may decompress to (1 GiB; the largest release_v6
record is far below): a zlib bomb is a bad record, not an out-of-memory crash."""

ERRATA = {
    **dict.fromkeys(
        ("abc311_c", "abc326_d", "abc327_b", "abc333_e", "abc343_e", "abc362_c",
         "find-words-containing-character", "find-the-peaks",
         "generate-binary-strings-without-adjacent-zeros"),
        "multiple answers accepted; graded against one",
    ),
    "abc337_e": "interactive; cannot be graded",
    "abc355_e": "interactive; cannot be graded",
    "abc350_c": "erroneous test cases",
}
"""Problems LiveCodeBench's ERRATA lists, keyed by question_id (AtCoder) or title slug
(LeetCode). They are flagged, not silently scored: callers may exclude them."""


class ProblemError(ValueError):
    """A record that cannot be graded; the message names the question_id and the field."""


class NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles plain data (str, bytes, numbers, lists, dicts, tuples) and nothing else."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def safe_unpickle(data: bytes) -> object:
    return NoGlobalsUnpickler(io.BytesIO(data)).load()


@dataclass(frozen=True)
class TestCase:
    input: str
    output: str
    testtype: str
    """'stdin' or 'functional'."""
    expected: tuple = ()
    """functional: (the output's JSON value,), parsed once when the problem is loaded."""


@dataclass
class Problem:
    question_id: str
    title: str
    platform: str
    difficulty: str
    contest_date: str
    starter_code: str
    func_name: str | None
    """LeetCode problems: the ``Solution`` method the functional tests call."""
    public_tests: list[TestCase]
    private_tests: list[TestCase]
    content: str = ""
    metadata: dict = field(default_factory=dict)

    @property
    def errata(self) -> str | None:
        """Why upstream's ERRATA says this problem cannot be graded fairly, or None."""
        return ERRATA.get(self.question_id) or ERRATA.get(self.title)

    def tests(self, which: str = "public") -> list[TestCase]:
        """'public' (the training reward), 'private' (evaluation, the paper's protocol;
        a problem without private tests falls back to its public ones) or 'all'."""
        if which == "public":
            return list(self.public_tests)
        if which == "private":
            return list(self.private_tests or self.public_tests)
        if which == "all":
            return list(self.public_tests) + list(self.private_tests)
        raise ValueError(f"tests must be 'public', 'private' or 'all', not {which!r}")


def _decode_tests(text: object, qid: str, field_name: str) -> list[dict]:
    if isinstance(text, list):
        return text
    if not isinstance(text, str):
        raise ProblemError(f"problem {qid}: field {field_name} is {type(text).__name__}, not a string")
    stripped = text.strip()
    if stripped == "":
        return []
    if stripped.startswith("["):
        try:
            return loads(stripped)
        except (ValueError, RecursionError) as exc:
            raise ProblemError(f"problem {qid}: field {field_name} is not valid JSON ({exc})") from None
    try:
        packed = _bounded_decompress(base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise ProblemError(
            f"problem {qid}: field {field_name} is neither JSON nor base64/zlib data ({exc})"
        ) from None
    if packed is None:
        raise ProblemError(f"problem {qid}: field {field_name} decompresses to more than "
                           f"{MAX_DECOMPRESSED_BYTES >> 20} MiB (refused as a zlib bomb)")
    try:
        inner = safe_unpickle(packed)
    except Exception as exc:  # UnpicklingError, EOFError, ... : any failure is a bad record
        raise ProblemError(f"problem {qid}: field {field_name} holds an unsafe or broken "
                           f"pickle ({exc})") from None
    if isinstance(inner, bytes):
        inner = inner.decode("utf-8", "replace")
    if not isinstance(inner, str):
        raise ProblemError(f"problem {qid}: field {field_name} unpickles to "
                           f"{type(inner).__name__}, not a JSON string")
    try:
        return loads(inner)
    except (ValueError, RecursionError) as exc:
        raise ProblemError(f"problem {qid}: field {field_name} is not valid JSON inside its "
                           f"pickle ({exc})") from None


def _bounded_decompress(data: bytes) -> bytes | None:
    """zlib-decompress ``data``, or None once the output would pass the cap."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_DECOMPRESSED_BYTES)
    if inflater.unconsumed_tail:
        return None
    out += inflater.flush()
    if len(out) > MAX_DECOMPRESSED_BYTES:
        return None
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return out


def _check_tests(raw: object, qid: str, field_name: str, func_name: str | None) -> list[TestCase]:
    if not isinstance(raw, list):
        raise ProblemError(f"problem {qid}: field {field_name} is not a list of tests")
    tests = []
    for i, item in enumerate(raw):
        where = f"problem {qid}: field {field_name}[{i}]"
        if not isinstance(item, dict) or not all(k in item for k in ("input", "output")):
            raise ProblemError(f"{where} lacks input/output")
        for key in ("input", "output"):
            if not isinstance(item[key], str):
                raise ProblemError(f"{where} has {key} of type {type(item[key]).__name__}, not text")
        kind = item.get("testtype", "functional" if func_name else "stdin")
        if not isinstance(kind, str) or kind not in TEST_TYPES:
            raise ProblemError(f"{where} has testtype {kind!r}, not stdin/functional")
        expected: tuple = ()
        if kind == "functional":
            if not func_name:
                raise ProblemError(f"{where} is functional but metadata has no func_name")
            for text in (*item["input"].split("\n"), item["output"]):
                value, why = parse_json(text)  # bounded: a record is data from the internet
                if why is not None:
                    raise ProblemError(f"{where} is not one JSON value per line ({why})")
            expected = (value,)  # the output's, the loop's last
        tests.append(TestCase(item["input"], item["output"], kind, expected))
    return tests


def load_problem(record: dict) -> Problem:
    """A :class:`Problem` from one ``code_generation_lite`` record.

    Raises :class:`ProblemError` naming the question_id and field when a payload
    does not decode, or when the problem has no test at all.
    """
    if not isinstance(record, dict):
        raise ProblemError(f"a problem record must be a JSON object, not {type(record).__name__}")
    raw_qid = record.get("question_id", "?")
    if isinstance(raw_qid, bool) or not isinstance(raw_qid, (str, int)):
        raise ProblemError(f"problem field question_id is {raw_qid!r} ({type(raw_qid).__name__}); "
                           "expected text (or an integer)")
    qid = str(raw_qid)
    metadata_raw = record.get("metadata") or "{}"
    try:
        metadata = loads(metadata_raw) if isinstance(metadata_raw, str) else dict(metadata_raw)
    except (ValueError, TypeError) as exc:
        raise ProblemError(f"problem {qid}: field metadata is not a JSON object ({exc})") from None
    if not isinstance(metadata, dict):
        raise ProblemError(f"problem {qid}: field metadata is not a JSON object")
    func_name = metadata.get("func_name") or None
    if func_name is not None and not (isinstance(func_name, str) and func_name.isidentifier()):
        raise ProblemError(f"problem {qid}: metadata func_name is {func_name!r}; expected a method "
                           "name")
    public = _check_tests(_decode_tests(record.get("public_test_cases", ""), qid,
                                        "public_test_cases"), qid, "public_test_cases", func_name)
    private = _check_tests(_decode_tests(record.get("private_test_cases", ""), qid,
                                         "private_test_cases"), qid, "private_test_cases", func_name)
    if not public and not private:
        raise ProblemError(f"problem {qid}: no tests in public_test_cases or private_test_cases")
    return Problem(
        question_id=qid,
        title=str(record.get("question_title", "")),
        platform=str(record.get("platform", "")),
        difficulty=str(record.get("difficulty", "")),
        contest_date=str(record.get("contest_date", "")),
        starter_code=str(record.get("starter_code", "")),
        func_name=func_name,
        public_tests=public,
        private_tests=private,
        content=str(record.get("question_content", "")),
        metadata=metadata,
    )

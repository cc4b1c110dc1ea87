"""Finding the answer in a completion.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vigor_cli.verifiers.math_answers import boxed_spans, split_top_level
from vigor_cli.verifiers.math_latex import Answer, math_verify, parse_answer, parse_latex, prepare, truncated
from vigor_cli.verifiers.math_units import split_unit
from vigor_cli.verifiers.math_words import NUMBER_WORDS, SCALE_WORDS, words_value

ANSWER_SEPARATORS = re.compile(r"\\text\s*\{\s*(?:and|or)\s*\}|\\(?:quad|qquad)|\band\b|\bor\b")
FINAL_ANSWER = re.compile(r"final answer is", re.IGNORECASE)
_BETWEEN_MARKUP = re.compile(r"\\(?:text|mathrm|textbf)\s*\{([^{}]*)\}|\\[()\[\]]|\\q?quad|\\[,;: ]|\$")
_SEPARATOR = re.compile(r"\b(?:and|or)\b|[,;]")
_PURE_SEPARATOR = re.compile(r"[\s,;.]*(?:\b(?:and|or)\b)?[\s,;.]*")
MAX_WORDS_BETWEEN_BOXES = 4
"""Boxes are one answer list when what lies between them is short: under 10 characters, or
a separator (",", ";", "and", "or") among at most this many words (under 70 characters)."""


def joined_boxes(text: str, pure: bool = False) -> list[str]:
    """The last box and the boxes before it that Math-Verify would read as one answer list.

    Math-Verify joins a box with the one before it when fewer than 10 characters lie
    between them, or fewer than 70 with a separator. Here the second case also needs at
    most :data:`MAX_WORDS_BETWEEN_BOXES` words ("\\boxed{1} papers and \\boxed{2} bins" is
    a list; "\\boxed{1} and and and or thus but \\boxed{2}" is not). Repeated neighbours
    count once. ``pure``: only boxes with nothing but separators between them
    ("\\boxed{1} or \\boxed{2}", "\\boxed{1}, \\boxed{2}").
    """
    spans = boxed_spans(text)
    if not spans:
        return []
    items = [spans[-1][2]]
    for (_, end, content), (start, _, _) in zip(reversed(spans[:-1]), reversed(spans[1:])):
        between = text[end:start]
        if pure:
            plain = _BETWEEN_MARKUP.sub(lambda m: " " + (m.group(1) or "") + " ", between)
            if not _PURE_SEPARATOR.fullmatch(plain):
                break
        elif len(between) >= 10:
            plain = _BETWEEN_MARKUP.sub(lambda m: " " + (m.group(1) or "") + " ", between)
            words = re.findall(r"[A-Za-z]+|\(\w\)", plain)
            if len(between) >= 70 or not _SEPARATOR.search(plain) or len(words) > MAX_WORDS_BETWEEN_BOXES:
                break
        if content != items[0]:
            items.insert(0, content)
    return items


def several_parts(gold: str, gold_parsed: list) -> bool:
    """Whether a gold answer has several parts (a list of answers, a set of solutions)."""
    first = gold_parsed[0] if gold_parsed else None
    if type(first).__name__ == "FiniteSet" and len(first) > 1:
        return True
    return len(split_top_level(ANSWER_SEPARATORS.sub(",", gold), (",", ";"))) > 1


def extract_answer(completion: str, several: bool = False) -> Answer:
    """The completion's answer (see the module's docstring); ``parsed`` is [] when none."""
    text = prepare(completion)
    spans = boxed_spans(text)
    if spans:
        items = joined_boxes(text, pure=not several)
        if len(items) > 1:  # a list of answers; against a one-part gold, a hedge that fails
            answer = ", ".join(items)
            parsed = parse_latex(answer)
            if parsed:
                return Answer(parsed, answer)
        tail = text[spans[-1][1] :]
        if FINAL_ANSWER.search(tail):
            found = find_in_prose(tail)
            if found.parsed:
                return found
        found = parse_answer(spans[-1][2])
        if found.parsed:
            if found.unit is None:  # "\\boxed{12}\\text{ cm}", "$\\boxed{12}$ cm": a unit after the box
                found.unit = _unit_after(text, found.text, spans[-1][1])
            return found
    return find_in_prose(text)


# ------------------------------------------------------------------------- answers in prose


@dataclass
class _Found:
    value: object
    fallback: str
    start: int
    end: int
    plain: bool
    """Found by the plain number/expression patterns (not a LaTeX environment)."""
    first_text: str = ""
    """The text of the first match tried when it did not parse: Math-Verify keeps it beside the
    answer (a gold it cannot parse either then still equals the same text)."""
    unparsed_span: tuple[int, int] | None = None
    """Where that first match lies when it was a LaTeX environment that did not parse."""
    match_end: int = 0
    """Where the whole match ends (after the environment's closing delimiter)."""


def _locate(text: str) -> _Found | None:
    """Math-Verify's own search (its patterns, priorities and order: by priority, then the
    rightmost match), keeping where the answer was found. None when nothing matched."""
    mv = math_verify()
    from_parser = mv.parser
    configs = (mv.LatexExtractionConfig(), mv.ExprExtractionConfig())
    fallback = None
    groups = {}
    for patterns, target in from_parser.get_extraction_regexes(configs):
        for pattern, priority in patterns:
            groups.setdefault(priority, []).append((pattern, target))
    for priority in sorted(groups):
        matches = [(m, target) for pattern, target in groups[priority] for m in pattern.finditer(text)]
        matches.sort(key=lambda mt: (mt[0].end(), -mt[0].start()), reverse=True)
        for match, target in matches:
            value, shown = from_parser.extract_match(match, target)
            if fallback is None and shown:
                fallback = _Found(None, shown, match.start(), match.end(), False)
                fallback.unparsed_span = match.span() if value is None and not isinstance(target, mv.ExprExtractionConfig) else None
            if value is None:
                continue
            plain = isinstance(target, mv.ExprExtractionConfig) or bool(
                match.groupdict().get("first_latexFraction"))  # "\\frac{7}{2}" found without delimiters
            start, end = _answer_span(match)
            failed_first = fallback is not None and (fallback.start, fallback.end) != match.span()
            return _Found(value, shown, start, end, plain, fallback.fallback if failed_first else "",
                          fallback.unparsed_span if failed_first else None, match.end())
    return fallback


def _answer_span(match: re.Match) -> tuple[int, int]:
    """Where the answer itself lies within a match (the match also holds "answer is", anchors)."""
    spans = [match.span(name) for name, value in match.groupdict().items()
             if value and (name.startswith(("integer", "decimal", "expr")) or "latex" in name)]
    if not spans:
        return match.span()
    return min(s for s, _ in spans), max(e for _, e in spans)


_COMMAND = re.compile(r"\\([A-Za-z]+|[{}|])")
_PROSE_COMMANDS = frozenset({"text", "textbf", "textit", "mathrm", "mbox", "quad", "qquad", "hspace", "label",
                             "tag", "begin", "end", "item", "newline", "hline", "dots", "ldots", "cdots"})
_DIGITS = frozenset("0123456789")
_ARGUMENTS = {"sqrt": 1, "frac": 2, "dfrac": 2, "tfrac": 2, "binom": 2}
"""Commands whose arguments may be single characters without braces (``\\sqrt5``, ``\\frac12``)."""
_FUNCTION_WORDS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "arcsin", "arccos",
                             "arctan", "sinh", "cosh", "tanh"})


def _group_end(text: str, i: int) -> int:
    """End of the brace (or bracket) group opening at ``i``; len(text) when it never closes."""
    open_c, close_c = text[i], {"{": "}", "[": "]", "(": ")"}[text[i]]
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c and text[j - 1 : j] != "\\":
            depth += 1
        elif text[j] == close_c and text[j - 1 : j] != "\\":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _operand_end(text: str, i: int) -> int | None:
    """End of the math operand starting at ``i`` (a number, a command with its arguments, a
    group, one letter, a function name); None when prose starts there."""
    if i >= len(text):
        return None
    c = text[i]
    if c in _DIGITS or (c == "." and text[i + 1 : i + 2] in _DIGITS):
        m = re.match(r"\d*\.?\d+", text[i:])
        return i + m.end()
    if c in "{([":
        return _group_end(text, i)
    if c == "\\":
        m = _COMMAND.match(text, i)
        if not m or m.group(1) in _PROSE_COMMANDS:
            return None
        j = m.end()
        wanted = _ARGUMENTS.get(m.group(1), 0)
        while j < len(text) and (text[j] in "{[" or wanted > 0):
            if text[j] in "{[":
                j = _group_end(text, j)
            elif text[j] in _DIGITS or text[j].isalpha():
                j += 1  # "\\sqrt5", "\\frac12": one-character arguments
            else:
                break
            wanted -= 1
        return j
    if c in "π√∞":
        return i + 1
    m = re.match(r"[A-Za-z]+", text[i:])
    if m and (len(m.group(0)) == 1 or m.group(0) in _FUNCTION_WORDS):
        return i + m.end()
    return None


_BINARY = re.compile(r"[-+*/^_×÷·]|(?<=\d):(?=\d)|\\(?:cdot|times|div|pm|mp)(?![A-Za-z])")
"""Binary operators; a colon between digits is a ratio or a time (``1:2``, ``12:30``)."""
_LIST_SEPARATOR = re.compile(r",\s*(?:and\s+|or\s+)?|(?:and|or)\s+")


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _extend_right(text: str, end: int) -> int:
    """The end of the math expression that continues after ``end`` (``end`` when none does):
    an operator and its operand (``- \\sqrt{5}``, ``\\times 10^5``, ``^{10}``), a factor written
    next to it (``\\sqrt{3}``, ``\\pi``, ``x``), more numbers of a list (", 8", " and 8")."""
    while end < len(text):
        j = _skip_spaces(text, end)
        op = _BINARY.match(text, j)
        if op and not text.startswith("--", j):
            k = _skip_spaces(text, op.end())
            after = _operand_end(text, k)
            if after is None:
                break
            end = after
            continue
        sep = _LIST_SEPARATOR.match(text, j)
        if sep and re.match(r"-?\d", text[sep.end() :]):
            end = _operand_end(text, sep.end() + (text[sep.end()] == "-"))
            continue
        if j == end and re.match(r"(?:st|nd|rd|th)\b", text[j:]):
            break  # "12th": an ordinal, not a product
        if j > end and text[j : j + 1] not in ("\\", "π", "√"):
            break  # after a space only a command continues ("4 \\sqrt{3}"); "12 (twelve)" is prose
        after = _operand_end(text, j)
        if after is None or (j > end and text[j] in _DIGITS):
            break
        end = after
    return end


def _operand_start(text: str, k: int) -> int | None:
    """Start of the math operand that ends at ``k`` (mirror of _operand_end), or None."""
    if k <= 0:
        return None
    c = text[k - 1]
    if c in _DIGITS:
        m = re.search(r"\d*\.?\d+$", text[:k])
        return m.start()
    if c in "})]":
        opener = {"}": "{", ")": "(", "]": "["}[c]
        depth, i = 0, k - 1
        while i >= 0:
            if text[i] == c and text[i - 1 : i] != "\\":
                depth += 1
            elif text[i] == opener and text[i - 1 : i] != "\\":
                depth -= 1
                if depth == 0:
                    break
            i -= 1
        if i < 0:
            return None
        command = re.search(r"\\[A-Za-z]+(?:\{[^{}]*\}|\[[^\[\]]*\])*$", text[:i])
        return command.start() if command else i
    m = re.search(r"\\[A-Za-z]+$|(?<![A-Za-z\\])[A-Za-z]+$|[π∞]$", text[:k])
    if m and (m.group(0).startswith("\\") or len(m.group(0)) == 1 or m.group(0) in _FUNCTION_WORDS):
        return m.start()
    return None


def _extend_left(text: str, start: int) -> int:
    """The start of the math expression the answer at ``start`` belongs to (``start`` when it
    stands alone): operands before a binary operator, and the command whose argument it is."""
    while start > 0:
        if text[start - 1] in "{[":
            command = re.search(r"\\[A-Za-z]+(?:\{[^{}]*\}|\[[^\[\]]*\])*[{[]$", text[:start])
            if not command:
                break
            start = command.start()
            continue
        j = start
        while j > 0 and text[j - 1] in " \t":
            j -= 1
        op = re.search(r"(?:[-+*/^×÷·]|\\(?:cdot|times|div|pm|mp))$", text[:j])
        if not op:
            break
        before = _operand_start(text, len(text[: op.start()].rstrip(" \t")))
        if before is None:
            break
        start = before
    return start


def _sentence_words(text: str, end: int, count: int = 4) -> list[str]:
    rest = re.split(r"[.,;:!?\n$]", text[end : end + 80], maxsplit=1)[0]
    return rest.split()[:count]


_LEADING_CLOSERS = re.compile(r"(?:\s|\$|~|\\[,;:!)\] ])*")


def _unit_after(text: str, value: str, end: int):
    """A unit written right after an answer ("12 cm", "3.5 hours", "\\boxed{12}\\text{ cm}",
    "$\\boxed{12}$ cm")."""
    start = _LEADING_CLOSERS.match(text, end).end()
    words = _sentence_words(text, start)
    for k in range(len(words), 0, -1):
        cut, unit = split_unit(value + " " + " ".join(words[:k]))
        if unit is not None and cut.strip() == value.strip():
            return unit
    return None


_ANSWER_PHRASE = re.compile(r"answer\s*(?:is|:|=|would be|will be)\s*(?:the\s+|\$\s*)?", re.IGNORECASE)


def _number_phrases(text: str) -> list[tuple[int, object]]:
    """(start, value) of every number written in words ("four thousand", "twelfth")."""
    phrases = []
    for m in re.finditer(r"[A-Za-z0-9][A-Za-z0-9\s-]*", text):
        words = m.group(0).split()
        offset, i = 0, 0
        while i < len(words):
            if words[i].lower().split("-")[0] in NUMBER_WORDS:
                for j in range(len(words), i, -1):
                    value = words_value(" ".join(words[i:j]))
                    if value is not None:
                        phrases.append((m.start() + m.group(0).find(words[i], offset), value))
                        i = j
                        break
                else:
                    i += 1
            else:
                i += 1
            offset = 0
    return phrases


def _words_answer(text: str, after: int | None) -> Answer | None:
    """An answer written in words: the one right after the last "answer is" (when that comes
    after ``after``, where a written number was found), or, with no number found at all
    (``after`` None), the last number phrase of the text."""
    phrases = _number_phrases(text)
    if not phrases:
        return None
    answer_at = [a for a in _ANSWER_PHRASE.finditer(text)]
    chosen = None
    if answer_at and (after is None or answer_at[-1].start() >= after):
        chosen = next((v for start, v in phrases if start == answer_at[-1].end()), None)
    if chosen is None and after is None:
        chosen = phrases[-1][1]
    if chosen is None:
        return None
    latex = str(chosen.numerator) if chosen.denominator == 1 else f"\\frac{{{chosen.numerator}}}{{{chosen.denominator}}}"
    return Answer(parse_latex(latex), latex)


def _after_answer_phrase(text: str, found: _Found | None) -> Answer | None:
    """The expression right after the last "answer is" when Math-Verify's patterns found
    nothing there ("The answer is \\sqrt{2}.", "the answer is -\\frac{\\pi}{3}"): read whole."""
    phrases = list(_ANSWER_PHRASE.finditer(text))
    if not phrases or (found is not None and found.value is not None and found.end > phrases[-1].end()):
        return None
    start = phrases[-1].end()
    if text.startswith(("$", "\\(", "\\["), start) or text[start - 1 : start] == "$":
        return None  # a LaTeX environment: Math-Verify's to read whole
    sign = 1 if text[start : start + 1] in "-+" else 0
    first = _operand_end(text, start + sign)
    if first is None or text[start + sign] in _DIGITS:
        return None  # a number there is Math-Verify's to find
    answer = parse_answer(text[start : _extend_right(text, first)])
    return answer if answer.parsed and not isinstance(answer.parsed[0], str) else None


def find_in_prose(text: str) -> Answer:
    """The answer of a completion without a box (``text`` is prepared)."""
    found = _locate(text)
    phrase = _after_answer_phrase(text, found) if "nswer" in text else None
    if phrase is not None:
        return phrase
    if found is None or found.value is None:
        words = _words_answer(text, None)
        if words is not None:
            return words
        return Answer([found.fallback] if found else [], found.fallback if found else "")
    if found.plain and "answer" in text[found.end :].lower():
        words = _words_answer(text, found.end)
        if words is not None:
            return words
    if not found.plain:
        answer = text[found.start : found.end]
        raw = found.fallback
        if text.startswith("\\", found.match_end) and _operand_end(text, found.match_end) is not None:
            return Answer([], answer)  # "$4$\\sqrt{3}": the expression goes on past the formula
        if split_unit(answer)[1] is not None:  # "$22.1cm^{2}$": the value without its unit
            inner = parse_answer(answer)
            if inner.parsed and not isinstance(inner.parsed[0], str):
                return inner
        parsed = [found.value, found.first_text or raw]
        return Answer([] if truncated(parsed) else parsed, raw, _unit_after(text, answer, found.end))
    span = found.unparsed_span
    if span is not None and span[0] <= found.start < span[1]:
        return Answer([found.first_text], found.first_text)  # a number inside LaTeX that did not parse
    start = _extend_left(text, found.start)
    end = found.end
    if start < found.start:  # a group opened on the left closes on the right
        end = max(end, _operand_end(text, start) or end)
    end = _extend_right(text, end)
    value = text[start:end].strip()
    scale = _sentence_words(text, end, 3)
    if scale and scale[0].lower() in SCALE_WORDS:
        number = words_value(value + " " + " ".join(w for w in scale if w.lower() in SCALE_WORDS))
        if number is not None:
            latex = str(number.numerator) if number.denominator == 1 else f"\\frac{{{number.numerator}}}{{{number.denominator}}}"
            return Answer(parse_latex(latex), latex)
    unit = _unit_after(text, value, end)
    if (start, end) == (found.start, found.end):
        return Answer([found.value, found.first_text or found.fallback], found.fallback, unit)
    whole = parse_answer(value)  # the number was part of a longer expression: all of it, or nothing
    if whole.parsed and not isinstance(whole.parsed[0], str):
        whole.unit = whole.unit or unit
        whole.parsed = [whole.parsed[0]] + ([found.first_text] if found.first_text else [])
        return whole
    return Answer([found.first_text] if found.first_text else [], value)

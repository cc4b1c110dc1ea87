"""Math answer rewards: Math-Verify equivalence, repaired, guarded and time-bounded.

The public names live here; the work is split by purpose:

- :mod:`math_grade`: :func:`grade` one completion, :func:`grade_multi` for several golds,
  the plain-number fast path and the gold cache;
- :mod:`math_extract`: where the answer is in a completion (boxes, lists of boxes,
  "final answer is", the whole expression in prose);
- :mod:`math_latex`: one answer's text rewritten where Math-Verify misreads it, and parsed
  whole, with its unit;
- :mod:`math_compare`: equivalence (Math-Verify with the decimal rule, units, more
  equivalences) and the guards against Math-Verify's wrong accepts;
- :mod:`math_numbers`, :mod:`math_units`, :mod:`math_words`: decimals and their digits,
  units and their sizes, numbers in words;
- :mod:`math_pool`: :class:`MathVerifier` (killable worker processes under a time limit) and
  :func:`grade_forked` (a few cases from a single-threaded program).
"""

from __future__ import annotations

from vigor_cli.verifiers.math_compare import asks_for_percent
from vigor_cli.verifiers.math_grade import Gold, MathVerdict, grade, grade_any, grade_multi
from vigor_cli.verifiers.math_pool import (
    DEFAULT_MAX_WORKERS, WORKER_EXTRA_MEMORY, MathVerifier, grade_forked,
)

__all__ = ["DEFAULT_MAX_WORKERS", "WORKER_EXTRA_MEMORY", "Gold", "MathVerdict", "MathVerifier", "asks_for_percent",
           "grade", "grade_any", "grade_forked", "grade_multi"]

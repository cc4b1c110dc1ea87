"""Math answer rewards: Math-Verify equivalence, repaired, guarded and time-bounded.

Details: docs/modules.md.
"""

from __future__ import annotations

from vigor_cli.verifiers.math_compare import asks_for_percent
from vigor_cli.verifiers.math_grade import Gold, MathVerdict, grade, grade_any, grade_multi
from vigor_cli.verifiers.math_pool import (
    DEFAULT_MAX_WORKERS, WORKER_EXTRA_MEMORY, MathVerifier, grade_forked,
)

__all__ = ["DEFAULT_MAX_WORKERS", "WORKER_EXTRA_MEMORY", "Gold", "MathVerdict", "MathVerifier", "asks_for_percent",
           "grade", "grade_any", "grade_forked", "grade_multi"]

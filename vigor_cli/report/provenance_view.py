"""What `vigor report` and `vigor inspect-allocation` print of a run's record
(provenance.json, vigor_cli/run/provenance.py): what made each run, and where runs compared side
by side were made differently."""

from __future__ import annotations

from typing import Any

from vigor_cli.run.provenance import summary_lines, version_changes


def print_records(console: Any, records: dict[str, dict | None]) -> None:
    """Each run's record in a few lines; then every version or machine property in which the
    runs differ (their numbers may differ for that reason alone)."""
    from vigor_cli.console import literal

    for name, record in records.items():
        console.print(literal(f"made by ({name}): " + "; ".join(summary_lines(record)[:2])), highlight=False,
                      soft_wrap=True)
        for line in summary_lines(record)[2:]:
            console.print(literal(f"  {line}"), highlight=False, soft_wrap=True)
    have = {n: r for n, r in records.items() if r is not None}
    if len(have) < 2:
        return
    first, *others = list(have)
    for other in others:
        for key, a, b in version_changes(have[first], have[other]):
            console.print(literal(f"note: {first} and {other} were made with different {key}: {a} and {b}"),
                          style="yellow", highlight=False, soft_wrap=True)

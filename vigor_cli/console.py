"""One rich console for the whole tool (stdout for tables, stderr for errors)."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)

"""``calculator``: a built-in tool environment, one tool, ``multiply(a, b)``.

An environment class in TRL's ``environment_factory`` convention (``reset`` and a public
method per tool), driven like a user's (vigor_cli/episodes/tools.py): the model calls
``<tool_call>{"name": "multiply", "arguments": {"a": 37, "b": 48}}</tool_call>``, the result
comes back as a tool message, and the task grades the ``\\boxed{}`` answer of its last
turn. Made for tiny-products, whose products the tiny model cannot do by heart. The tool
reads whole numbers only (vigor_cli/tasks/tiny_products.py: bounded, never evaluated);
anything else gets one error text back.
"""

from __future__ import annotations

from typing import Any

from vigor_cli.tasks import tiny_products


class Calculator:
    """One episode's calculator (it keeps no state: every call stands alone)."""

    def reset(self, **row: Any) -> None:
        """Nothing to show at the start: the question is the prompt."""
        return None

    multiply = staticmethod(tiny_products.multiply)

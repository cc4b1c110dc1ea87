"""Studying allocation without a model: simulated rewards, the variance law of a starting point, and confidence intervals.

The map of the package: docs/design.md; each module: docs/modules.md."""

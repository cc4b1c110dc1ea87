"""Evaluation: n samples per held-out example scored by the task, the sets a model can take, and `vigor eval` on a task's own sets.

The map of the package: docs/design.md; each module: docs/modules.md."""

"""`vigor export`: a run's checkpoint as a plain Hugging Face folder, and what it carries about the run.

The map of the package: docs/design.md; each module: docs/modules.md."""

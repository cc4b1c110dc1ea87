"""The run directory: its files and lock, logs, checkpoints, provenance, random generators and dashboards.

The map of the package: docs/design.md; each module: docs/modules.md."""

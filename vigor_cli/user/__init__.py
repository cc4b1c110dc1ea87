"""The boundary around what a user brings: their code (imported and called under guard), their files (read bounded), their records and their reward functions.

The map of the package: docs/design.md; each module: docs/modules.md."""

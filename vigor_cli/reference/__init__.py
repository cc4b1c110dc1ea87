"""The generated reference pages: the command reference and the configuration key reference.

The map of the package: docs/design.md; each module: docs/modules.md."""

"""Where the files that ship inside the package lie.

Everything here sits beside this module, so a checkout and an installed wheel
find the same files the same way (nothing is looked up next to the repository):

- ``configs/``: the run configs (in a checkout a symlink to the repository's
  ``configs/``; the wheel holds a copy).
- ``data/math-eval/``: the seven math benchmark files (see its README.md).
- ``assets/tiny/``: the bundled tiny model (:data:`vigor_cli.tiny_model.TINY_DIR`).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The installed ``vigor_cli`` package directory."""

CONFIGS_DIR = PACKAGE_DIR / "configs"
"""The bundled run configs: what `vigor train` uses without --config."""

MATH_EVAL_DIR = PACKAGE_DIR / "data" / "math-eval"
"""The six math evaluation sets and GSM8K (``<name>.jsonl``): the default of ``task.data_dir``
and of `vigor eval --data-dir`."""

"""Where the files that ship inside the package lie.

Everything here is found through the package itself, so a checkout (an editable install)
and an installed wheel find the same files the same way (nothing is looked up next to the
repository by guesswork):

- ``vigor_cli.configs``: the run configs. The repository keeps them in ``configs/`` at its
  top; the build configuration (``pyproject.toml``'s ``package-dir``) installs that folder as
  ``vigor_cli.configs``, in a wheel as a copy, in an editable install as a mapping.
- ``data/math-eval/``: the seven math benchmark files (see its README.md).
- ``assets/tiny/``: the bundled tiny model (:data:`vigor_cli.model.tiny.TINY_DIR`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The installed ``vigor_cli`` package directory."""


def _package_folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name} is not installed: install vigor (pip install -e . in a checkout)",
                                  name=name)
    return Path(next(iter(spec.submodule_search_locations))).resolve()


CONFIGS_DIR = _package_folder("vigor_cli.configs")
"""The bundled run configs: what `vigor train` uses without --config."""

MATH_EVAL_DIR = PACKAGE_DIR / "data" / "math-eval"
"""The six math evaluation sets and GSM8K (``<name>.jsonl``): the default of ``task.data_dir``
and of `vigor eval --data-dir`."""


DEFAULT_CONFIG = CONFIGS_DIR / "tiny-math.yaml"

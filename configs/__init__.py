"""The bundled run configs (``*.yaml``), installed as ``vigor_cli.configs`` so a checkout
(editable install) and a wheel find them the same way (:mod:`vigor_cli.package_data`)."""

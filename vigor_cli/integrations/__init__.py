"""Bridges to other trainers. Each lives behind an optional extra:

- :mod:`vigor_cli.integrations.trl`: the allocation strategies inside TRL's ``GRPOTrainer``
  (``pip install 'vigor[trl]'``; docs/scaling.md).
"""

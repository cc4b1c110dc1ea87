"""Moved: the run directory's one reader and writer live in :mod:`vigor_cli.runs`, the one
JSONL reader in :mod:`vigor_cli.jsonl`. These names stay importable from here."""

from vigor_cli.jsonl import JsonlContent, read_jsonl
from vigor_cli.runs import RunDir, check_run_dir, load_run, read_config

__all__ = ["JsonlContent", "RunDir", "check_run_dir", "load_run", "read_config", "read_jsonl"]

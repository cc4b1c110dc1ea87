"""Errors a user can fix: printed as one line, exit code 2, nothing written is lost."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (key, file, record, flag). The message names it and says what to do."""


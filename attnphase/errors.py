"""Errors shared by the command-line modules."""


class UsageError(ValueError):
    """Bad command-line input; the message names the parameter (one line, exit 2)."""

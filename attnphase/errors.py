"""Errors shared by the command-line modules."""


class UsageError(ValueError):
    """Bad command-line input; the message names the parameter (one line, exit 2)."""


class CommandFailed(RuntimeError):
    """A command ran but did not give its result; the message says why (one line, exit 1)."""

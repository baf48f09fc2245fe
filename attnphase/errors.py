"""Errors shared by the command-line modules."""


class UsageError(ValueError):
    """Bad command-line input; the message names the parameter (one line, exit 2)."""


#: the optional dependencies of the simulations, as ``pip install 'attnphase[simulation]'`` installs them
SIMULATION_EXTRA = "simulation"


class MissingExtra(RuntimeError):
    """A command needs an optional dependency that is not installed (one line naming the extra, exit 1)."""

    def __init__(self, extra: str = SIMULATION_EXTRA, module: str = "torch"):
        super().__init__(f"needs {module}, which this installation lacks: pip install 'attnphase[{extra}]'")


def require_simulation() -> None:
    """Raise :class:`MissingExtra` unless the simulations' dependency (torch) imports."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingExtra() from None


class CommandFailed(RuntimeError):
    """A command ran but did not give its result; the message says why (one line, exit 1)."""


class TimeLimitReached(BaseException):
    """A stage of preparing a typed attention (its derivation and code generation, the first solve)
    ran past ``--time-limit`` (one line naming the stage, exit 1). A BaseException, as Ctrl-C is, so
    that no ``except Exception`` of a solver's retries takes it for a failed attempt."""

    def __init__(self, stage: str, seconds: float):
        super().__init__(f"{stage} did not finish within --time-limit {seconds:g} s (a typed attention; "
                         f"--time-limit raises it, 0 removes it)")
        self.stage, self.seconds = stage, seconds

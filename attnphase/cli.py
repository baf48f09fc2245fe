"""The ``attnphase`` command-line program.

Each command group lives in :mod:`attnphase.commands` and exposes
``register(subparsers)``, which adds its parsers and sets ``func`` to a function
``func(args) -> int``. The command modules import the libraries (and torch, dask,
matplotlib) inside their command functions, so registering them is cheap.

Errors: the libraries raise their own exception types; :func:`main` turns every
exception into one line on stderr and an exit status (:func:`exit_status`): 2 for bad
input (:data:`BAD_INPUT`), 1 for a command whose optional dependencies are not installed
(:class:`~attnphase.errors.MissingExtra`, one line naming the extra), 1 for a computation that failed (any other exception of the
libraries: a solver, a branch, a threshold, a diverged simulation), for a file that
could not be read or written (``OSError``) and for a fault of the program itself (named
as such), 130 on Ctrl-C. A traceback is printed only with ``-v``.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
import traceback

from derivations.spec import ModelSpecError
from numerics.tidy import UnreadableFile
from attnphase.paper import PaperError
from attnphase.sweeps import SweepError
from validation.run_settings import RunSettingsError

from .commands import derive, histogram, paper, simulation, sweep, theory
from .errors import MissingExtra, UsageError
from .options import add_progress_option, set_progress

#: the command groups, in help order
COMMAND_GROUPS = (derive, theory, simulation, sweep, histogram, paper)

#: the one-line description atop ``attnphase --help``
DESCRIPTION = ("The replica theory of a solvable model of dot-product attention, and finite-size simulations "
               "that check it. Every command states its defaults and its cost on a 2-core machine in its "
               "own --help.")

#: exceptions that mean bad input: one line, exit status 2
BAD_INPUT = (UsageError, ModelSpecError, SweepError, RunSettingsError, UnreadableFile, PaperError)
#: the packages whose exceptions are failures of a computation (exit status 1, the message as it is)
#: the packages whose exceptions are computation failures, not faults of the program
LIBRARIES = ("derivations", "numerics", "validation", "attnphase.sweeps", "attnphase.histogram_task", "attnphase.paper")
#: exit statuses
FAILED, BAD = 1, 2
INTERRUPTED = 130


def exit_status(exc: BaseException) -> tuple:
    """``(status, message)`` of an exception that ended a command: see the module docstring."""
    if isinstance(exc, BAD_INPUT):
        return BAD, str(exc)
    if isinstance(exc, MissingExtra):
        return FAILED, str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":  # a path that missed its own check
        return FAILED, str(MissingExtra())
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc)
        return FAILED, f"{what}: {exc.filename}" if exc.filename else what
    name = type(exc).__name__
    module = type(exc).__module__
    if any(module == lib or module.startswith(lib + ".") for lib in LIBRARIES):  # SolverError, ...
        return FAILED, f"{name}: {exc}"
    return FAILED, f"{name}: {exc} (a fault of the program; run with -v for the traceback)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # an argument that starts with '-' and a digit or a point is a value, never an option (no
        # option is spelled so): argparse alone takes '-0.2,1.2' or '-1:2:3' for an unknown option
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):  # one line, exit 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnphase", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-vv for debug) and a traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for group in COMMAND_GROUPS:
        group.register(sub)
    for command in sub.choices.values():
        add_progress_option(command)
    return parser


def main(argv=None) -> int:
    name, verbose = "attnphase", 0
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # bad input (one line, 2) or --help (0): a status, as every other outcome
            return exc.code
        name, verbose = f"attnphase {args.command}", args.verbose
        set_progress(args.progress)
        logging.basicConfig(
            level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
            format="%(levelname)s %(name)s: %(message)s",
        )
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if verbose:
            traceback.print_exc()
        sys.stderr.write(f"{name}: interrupted\n")
        return INTERRUPTED
    except Exception as exc:  # every failure becomes one line and an exit status
        if verbose:
            traceback.print_exc()
        status, message = exit_status(exc)
        sys.stderr.write(f"{name}: error: {' '.join(message.split())}\n")
        return status


if __name__ == "__main__":
    sys.exit(main())

"""The ``attnphase`` command-line program.

Each command group lives in :mod:`attnphase.commands` and exposes
``register(subparsers)``, which adds its parsers and sets ``func`` to a function
``func(args) -> int``. The command modules import the libraries (and torch, dask,
matplotlib) inside their command functions, so registering them is cheap.

Errors: the libraries raise their own exception types; :func:`main` turns them into
one line on stderr and an exit status: 2 for bad input (:data:`BAD_INPUT`), 1 for a
computation that failed (a solver, a threshold, a file that could not be written),
130 on Ctrl-C. A traceback is printed only with ``-v``.
"""
from __future__ import annotations

import argparse
import logging
import sys
import traceback

from derivations.spec import ModelSpecError
from sweeps import SweepError
from validation.run_settings import RunSettingsError

from .commands import derive, histogram, simulation, sweep, theory
from .errors import UsageError

#: the command groups, in help order
COMMAND_GROUPS = (derive, theory, simulation, sweep, histogram)

#: exceptions that mean bad input: one line, exit status 2
BAD_INPUT = (UsageError, ModelSpecError, SweepError, RunSettingsError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnphase", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-vv for debug) and a traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write("attnphase: interrupted\n")
        return 130
    except Exception as exc:  # every failure becomes one line and an exit status
        status = 2 if isinstance(exc, BAD_INPUT) else 1
        if args.verbose:
            traceback.print_exc()
        message = str(exc) if isinstance(exc, BAD_INPUT) else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"attnphase {args.command}: error: {message}\n")
        return status


if __name__ == "__main__":
    sys.exit(main())

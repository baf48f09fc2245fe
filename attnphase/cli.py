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
as such), 1 for a typed attention whose preparation ran past ``--time-limit``
(:class:`~attnphase.errors.TimeLimitReached`, naming the stage), 130 on Ctrl-C, 143 on SIGTERM and 129 on SIGHUP (:func:`ending_signals`: each ends the
command as Ctrl-C does, its files closed and its lock released). A traceback is printed only with
``-v``, and without it a message is cut at :data:`MESSAGE_LIMIT` characters.

Warnings: the libraries' log records of level WARNING and above, and Python's warnings, are
kept by :class:`WarningSummary` and summed up in one line at the end (inside the error line
of a failure); ``-v`` prints each in full.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import traceback

from derivations.spec import ModelSpecError
from tidyio import UnreadableFile
from attnphase.paper import PaperError
from attnphase.sweeps import SweepError
from validation.run_settings import RunSettingsError

from .commands import derive, gamp, histogram, paper, simulation, sweep, theory
from .errors import CommandFailed, MissingExtra, TimeLimitReached, UsageError
from .options import add_progress_option, apply_backend, set_progress

#: the command groups, in help order
COMMAND_GROUPS = (derive, theory, simulation, gamp, sweep, histogram, paper)

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
#: the signals that end a command as Ctrl-C does (exit status 128 + the signal's number), and the
#: word of its one line
ENDING_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hung up (SIGHUP)"}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is: a KeyboardInterrupt, so that every path that
    ends cleanly on Ctrl-C (a sweep's store and lock, a folder marked incomplete, the Dask cluster
    shut down) ends so on these too."""

    def __init__(self, signum: int):
        super().__init__(ENDING_SIGNALS[signum])
        self.signum = signum


def _quiet_teardown() -> None:
    """The command ends with its one line: a Dask client's ``sync`` interrupted before its future
    exists schedules a callback that raises ``NameError`` on the client's event loop, which tornado
    logs with its traceback while the cluster shuts down."""
    logging.getLogger("tornado.application").setLevel(logging.CRITICAL)


def _raise_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    _quiet_teardown()
    raise Terminated(signum)


def _raise_interrupted(signum, frame):
    _quiet_teardown()
    raise KeyboardInterrupt


@contextlib.contextmanager
def ending_signals():
    """While the block runs, SIGTERM and SIGHUP raise :class:`Terminated` and Ctrl-C
    ``KeyboardInterrupt``, as Python's own handler does (in the main thread, and where the signal
    is not ignored: ``nohup`` keeps its meaning)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_interrupted)
    for signum in ENDING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _write_line(text: str) -> None:
    """One line on stderr; nothing when stderr is gone (a terminal that hung up)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def exit_status(exc: BaseException) -> tuple:
    """``(status, message)`` of an exception that ended a command: see the module docstring."""
    if isinstance(exc, BAD_INPUT):
        return BAD, str(exc)
    if isinstance(exc, MissingExtra):
        return FAILED, str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":  # a path that missed its own check
        return FAILED, str(MissingExtra())
    if isinstance(exc, CommandFailed):
        return FAILED, str(exc)
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


class WarningSummary(logging.Handler):
    """Without ``-v``: the libraries' warnings (log records of level WARNING and above, and Python
    warnings) are kept, not printed; the command ends with at most one line saying how many there
    were and the start of the first (:meth:`line`). ``-v`` prints each in full instead."""

    #: characters of the first warning quoted in the summary
    QUOTED = 120

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count, self.first = 0, ""

    def emit(self, record):
        self.count += 1
        if not self.first:
            self.first = " ".join(self.format(record).split())

    def line(self, error: str = "") -> str:
        """The summary; the first warning is not quoted again where ``error`` (the command's error
        line) already says it, and is cut at a word."""
        if not self.count:
            return ""
        known = error and self.first[:60] in " ".join(error.split())
        if known:
            return f"{self.count} warning{'s' * (self.count > 1)} logged (-v shows them)"
        first = self.first if len(self.first) <= self.QUOTED else self.first[:self.QUOTED].rsplit(" ", 1)[0] + " ..."
        more = f"{self.count} warnings logged, the first: " if self.count > 1 else "1 warning logged: "
        return f"{more}{first} (-v shows them)"


def _log_handler(verbose: int) -> logging.Handler:
    if not verbose:
        handler = WarningSummary()
        handler.setFormatter(logging.Formatter("%(message)s"))
        return handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    return handler


def quiet_child_processes() -> None:
    """Worker processes and the multiprocessing resource tracker inherit this: the tracker's
    "leaked semaphore" lines after a stopped run are about Dask's own semaphores, which the
    stopped workers could not release; they say nothing to a user."""
    ignore = "ignore:resource_tracker:UserWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if ignore not in current.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [current, ignore]))


#: characters of an error message shown without -v (a failure that lists every attempt can run to thousands)
MESSAGE_LIMIT = 600


def _shortened(message: str, verbose: int) -> str:
    """The message on one line; without ``-v``, cut to :data:`MESSAGE_LIMIT` characters (the
    traceback that ``-v`` prints holds all of it)."""
    text = " ".join(message.split())
    if verbose or len(text) <= MESSAGE_LIMIT:
        return text
    return text[:MESSAGE_LIMIT].rsplit(" ", 1)[0] + f" ... (cut at {MESSAGE_LIMIT} characters; -v shows all of it)"


def main(argv=None) -> int:
    with ending_signals():
        return _main(argv)


def _interruption_within(exc: BaseException):
    """The Ctrl-C, signal or time limit that ``exc`` carries, else None: raised by a signal handler
    while compiled code returns (numba's dispatcher), it comes back as a SystemError ("returned a
    result with an exception set") whose cause is that exception."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (KeyboardInterrupt, TimeLimitReached)):
            return exc
        if not isinstance(exc, SystemError):
            return None
        exc = exc.__cause__ or exc.__context__
    return None


def _main(argv) -> int:
    name, verbose = "attnphase", 0
    root = logging.getLogger()
    handler, level = None, root.level
    try:
        try:
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as exc:  # bad input (one line, 2) or --help (0): a status, as every other outcome
                return exc.code
            name, verbose = f"attnphase {args.command}", args.verbose
            set_progress(args.progress)
            apply_backend(args)
            handler = _log_handler(verbose)
            root.addHandler(handler)
            root.setLevel([logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)])
            logging.captureWarnings(True)
            quiet_child_processes()
            status = int(args.func(args) or 0)
            summary = handler.line() if isinstance(handler, WarningSummary) else ""
            if summary:
                sys.stderr.write(f"{name}: {summary}\n")
            return status
        except Exception as exc:  # a Ctrl-C, signal or time limit that compiled code wrapped: as itself
            interruption = _interruption_within(exc)
            if interruption is None:
                raise
            raise interruption from None
    except TimeLimitReached as exc:  # a BaseException, as Ctrl-C: no solver's retry takes it for a failure
        if verbose:
            traceback.print_exc()
        summary = handler.line(str(exc)) if isinstance(handler, WarningSummary) else ""
        _write_line(f"{name}: error: {exc}" + (f" [{summary}]" if summary else ""))
        return FAILED
    except KeyboardInterrupt as exc:
        if verbose:
            traceback.print_exc()
        if isinstance(exc, Terminated):
            _write_line(f"{name}: {ENDING_SIGNALS[exc.signum]}")
            return 128 + exc.signum
        _write_line(f"{name}: interrupted")
        return INTERRUPTED
    except Exception as exc:  # every failure becomes one line and an exit status
        if verbose:
            traceback.print_exc()
        status, message = exit_status(exc)
        summary = handler.line(message) if isinstance(handler, WarningSummary) else ""
        sys.stderr.write(f"{name}: error: {_shortened(message, verbose)}" + (f" [{summary}]" if summary else "") + "\n")
        return status
    finally:
        if handler is not None:
            root.removeHandler(handler)
            root.setLevel(level)
            logging.captureWarnings(False)


if __name__ == "__main__":
    sys.exit(main())

"""Command-line options shared by the subcommands, THE parsers of their values, and what
every command does the same way with its outputs.

One definition each: the model options (:func:`add_model_options`,
:func:`model_from_args`), the grid of values (:func:`parse_range`: ``START:STOP:N``, a
comma-separated list or one number), the comma-separated list (:func:`parse_list`), the
precision option, the hidden old spelling of an option (:func:`add_alias`), the check of an
output path before any work (:func:`check_output`), the ``--json`` printer
(:func:`print_json`) and the progress bar on stderr (:func:`progress_bar`, off with
``--no-progress``). Every parser and check raises :class:`~attnphase.errors.UsageError` with a
message that names the option.

The vocabulary: an option named after a quantity takes one value (``--alpha 2``, ``--init
semantic``, ``--branch positional``, ``--format``), its plural takes several (``--alphas
0.5:2.5:9`` or ``--alphas 0.5,1,2``, ``--omegas``, ``--inits``, ``--branches``, ``--formats``);
a value may start with ``-`` (``--A -0.2,1.2,0.4,0.6``).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

from derivations.spec import BUILTIN_ATTENTIONS, REGULARISERS, ModelSpec, parse_A, parse_matrix
from numerics.api import BACKENDS
from numerics.api import PRECISIONS

from .costs import add_yes_option, check_shape
from .errors import CommandFailed, TimeLimitReached, UsageError

PRECISION_HELP = ("draft: one coarse rule, no error estimate (curves for figures); fast: error estimates "
                  "~1e-5..1e-4; high: finer rules, about ten times slower than fast")
#: what every grid option accepts, for its help
GRID_HELP = "START:STOP:N (N values, both ends included), a comma-separated list, or one number"
#: a grid of more values is refused (it would never finish, and is most likely a typo)
MAX_RANGE_POINTS = 100000
#: the default of --time-limit: seconds for a typed attention's derivation, code generation and first solve
#: (a new two-token expression takes about 3 s to derive, a three-token one about 6 s)
DEFAULT_TIME_LIMIT = 600.0


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model of docs/theory.md, sections 1 and 4: numbers and structure."""
    g = parser.add_argument_group("model (docs/theory.md, sections 1 and 4)")
    g.add_argument("--omega", type=float, default=0.3, help="teacher weight of the positional matrix A (default 0.3)")
    g.add_argument("--sigma", type=float, default=0.5, help="std of the semantic token part (default 0.5)")
    g.add_argument("--lam", type=float, default=0.01,
                   help="strength lam of the regulariser: the ridge's weight decay (default 0.01)")
    g.add_argument("--A", default=None, metavar="ROWS",
                   help="teacher matrix A, rows separated by ';' (e.g. 0.6,0.4;0.4,0.6), or row-major "
                        "a11,a12,a21,a22 (default: 0.6 on the diagonal, 0.4/(L-1) elsewhere)")
    g.add_argument("--attention", default="softmax", metavar="NAME|EXPR",
                   help=f"student attention: {', '.join(BUILTIN_ATTENTIONS)} (default softmax), or the weight on "
                        "the score h1 as an expression of one row of scores h1..hL, e.g. "
                        "'(1 + h1**2)/(2 + h1**2 + h2**2)' (docs/extending.md)")
    g.add_argument("--beta", type=float, default=1.0,
                   help="the student's inverse temperature: the softmax's, or the symbol beta of --attention (default 1)")
    g.add_argument("--teacher-attention", default="softmax", metavar="NAME|EXPR",
                   help="the teacher's attention T0 in T = (1 - omega) T0 + omega A, set like --attention "
                        "(default softmax)")
    g.add_argument("--regulariser", default="ridge", metavar="ridge|EXPR",
                   help="penalty of each entry w of the student weights: ridge, lam/2*w**2 (default ridge), or an "
                        "expression c(lam)*w**2 of w and lam, e.g. 'lam*w**2'; only quadratic penalties "
                        "(docs/extending.md)")
    g.add_argument("--tokens", type=whole_number, default=2, help="number of tokens L (default 2)")
    g.add_argument("--rank", type=whole_number, default=1, help="rank r of the student (default 1)")
    g.add_argument("--teacher-rank", type=whole_number, default=1, help="rank t of the teacher (default 1)")
    g.add_argument("--positions", default=None, metavar="ROWS",
                   help="positional matrix P (L x k), rows separated by ';' (default 1;-1 for two tokens, "
                        "the identity otherwise)")
    add_yes_option(g)
    g.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="SECONDS",
                   help="a typed attention or regulariser (an expression, not a built-in name): the seconds its "
                        f"derivation, code generation and first solve may take before the command stops, naming the "
                        f"stage (default {DEFAULT_TIME_LIMIT:g}; 0: no limit)")


def model_from_args(args: argparse.Namespace, derives: bool = True) -> ModelSpec:
    """The ModelSpec of the model options; raises ModelSpecError (naming the parameter) on bad input.
    Its shape is checked first (:func:`attnphase.costs.check_shape`): the size of the model, and
    where the command ``derives`` its equations the time of a first derivation."""
    check_shape(args.tokens, args.rank, args.teacher_rank, args, derives)
    L = args.tokens
    A = None if args.A is None else parse_A(args.A, L if isinstance(L, int) and L >= 2 else None)
    positions = None if args.positions is None else parse_matrix(args.positions, "positions")
    return ModelSpec(sigma=args.sigma, lam=args.lam, omega=args.omega, A=A, attention=args.attention, tokens=L,
                     rank=args.rank, teacher_rank=args.teacher_rank, positions=positions, beta=args.beta,
                     teacher=args.teacher_attention, regulariser=args.regulariser)


class _Budget:
    """The stage a :func:`typed_attention_budget` is in; :meth:`done` ends the budget.

    The timer's exception is raised wherever Python is when it fires, and Python drops an exception
    raised inside a weak reference's callback or a finaliser (in the full test suite it fired in
    one while sympy derived, and the command went on past its limit). So the expiry is also
    recorded (``expired``: the stage it fired in) and raised again at the end of that stage."""

    def __init__(self, seconds: float, active: bool):
        self.seconds, self.active, self.name = seconds, active, "the preparation of the model"
        self.expired = ""

    def stage(self, name: str) -> None:
        self._raise_if_expired()
        self.name = name

    def done(self, *_) -> None:
        self.stop()
        self._raise_if_expired()

    def stop(self) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.active = False

    def _raise_if_expired(self) -> None:
        if self.expired:
            stage, self.expired = self.expired, ""
            raise TimeLimitReached(stage, self.seconds)


@contextlib.contextmanager
def typed_attention_budget(args: argparse.Namespace, spec: ModelSpec):
    """For a model with a typed attention or regulariser (an expression, not a name), ``--time-limit``
    seconds for what follows until :meth:`_Budget.done`: the derivation and code generation, which
    this runs first (:func:`prepare_model`), and the first solve. Past it, :class:`TimeLimitReached`
    names the stage (one line, exit 1). Nothing for a model of built-in names only, whose code is
    generated in seconds, with ``--time-limit 0``, or outside the main thread (a signal timer)."""
    seconds = getattr(args, "time_limit", 0) or 0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise UsageError(f"--time-limit: must be a number of seconds >= 0, got {seconds}")
    typed = not (spec.attention in BUILTIN_ATTENTIONS and spec.teacher in BUILTIN_ATTENTIONS
                 and spec.regulariser in REGULARISERS)
    active = typed and seconds > 0 and threading.current_thread() is threading.main_thread()
    budget = _Budget(seconds, active)
    if not active:
        yield budget
        return

    def reached(signum, frame):
        budget.expired = budget.name
        raise TimeLimitReached(budget.name, seconds)

    def dropped(unraisable):
        # the expiry Python drops is raised again at its stage's end: no "Exception ignored" report
        if not isinstance(unraisable.exc_value, TimeLimitReached):
            previous_hook(unraisable)

    previous, previous_hook = signal.signal(signal.SIGALRM, reached), sys.unraisablehook
    sys.unraisablehook = dropped
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        budget.stage("the derivation and code generation of the model")
        prepare_model(spec)
        budget.stage("the first solve")
        yield budget
    finally:
        budget.stop()
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook


def prepare_model(spec: ModelSpec) -> None:
    """Derive and generate the model's code now (cached on disk, so that solves here and on a
    cluster's workers reuse it)."""
    from derivations import generated_functions

    generated_functions(spec)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a machine-readable JSON object")


def add_precision_option(parser: argparse.ArgumentParser, help_prefix: str = "", default: Optional[str] = "fast") -> None:
    """``--precision``: the modes of ``numerics.precision.PRECISIONS`` (the QMC integrator of the general
    model has modes of the same names, ``numerics.channel.qmc.precision.QMC_PRECISIONS``). ``help_prefix``
    states the default when it is not a plain ``default``."""
    prefix = help_prefix or f"default {default}. "
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default=default, help=prefix + PRECISION_HELP)
    add_backend_option(parser)


def add_instance_options(parser: argparse.ArgumentParser) -> None:
    """The finite instance of ``simulate`` and ``gamp``: ``--d``, ``--alpha``, ``--init``, ``--seeds``."""
    from validation.run_settings import INITS

    parser.add_argument("--d", type=whole_number, default=1000, help="dimension (default 1000)")
    parser.add_argument("--alpha", type=float, default=2.0,
                        help="samples per dimension, n = round(alpha d) (default 2)")
    parser.add_argument("--init", default="semantic", choices=INITS, help="start (default semantic)")
    parser.add_argument("--seeds", type=whole_number, default=1, help="number of independent runs (default 1)")


def add_backend_option(parser: argparse.ArgumentParser) -> None:
    """``--backend``: how the per-node functions run (numerics.backend)."""
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="compiled (default: numba kernels generated from the model's expressions) or numpy (the "
                             "reference, the same expressions vectorised); default: $ATTNPHASE_BACKEND or compiled")


def apply_backend(args: argparse.Namespace) -> None:
    """The command's ``--backend`` for this process and the workers it starts (they inherit the
    environment)."""
    if getattr(args, "backend", None):
        os.environ["ATTNPHASE_BACKEND"] = args.backend


def add_alias(parser, old: str, dest: str) -> None:
    """``old``: a hidden spelling of the option whose value is ``dest`` (kept so that scripts
    written with it keep working; not in ``--help``). It sets no default of its own."""
    parser.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` (every command; ``--quiet`` is its old spelling)."""
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (default: a bar on stderr when it is a terminal)")
    parser.add_argument("--quiet", dest="progress", action="store_false", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


#: whether :func:`progress_bar` may show a bar: the command line sets it from ``--no-progress``
_show_progress = True


def set_progress(show: bool) -> None:
    """Let :func:`progress_bar` show its bar (when stderr is a terminal) or not, for this process."""
    global _show_progress
    _show_progress = bool(show)


def add_dask_options(parser: argparse.ArgumentParser, embedded: bool = True):
    """The execution group of the commands that run tasks on Dask (``--scheduler``, and with
    ``embedded`` the embedded cluster's ``--workers``); returns the group, for options of the
    command's own."""
    g = parser.add_argument_group("execution (Dask)")
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="run on this existing Dask scheduler (its workers must import this project; default: "
                        + ("an embedded cluster on this machine)" if embedded else "no Dask)"))
    if embedded:
        g.add_argument("--workers", type=whole_number, default=None,
                       help="worker processes of the embedded cluster (default: the machine's cores)")
    return g


#: what ``--workers`` does for the solves made in this process
PROCESSES_HELP = ("general model: processes that solve the quasi-Monte Carlo scramblings of each fixed point side "
                  "by side (the values do not depend on it; on 2 cores, 2 make a fast fixed point 1.3-1.4 times "
                  "faster, a whole thresholds run less)")


def add_processes_option(parser: argparse.ArgumentParser) -> None:
    """``--workers`` of the commands that solve in this process (:func:`solve_processes`)."""
    parser.add_argument("--workers", type=whole_number, default=None, help=PROCESSES_HELP + " (default 1)")


def solve_processes(args: argparse.Namespace):
    """The context in which this process's QMC solves use ``--workers`` processes
    (:func:`numerics.api.scramble_workers`)."""
    from numerics.api import scramble_workers

    _check_workers(args)
    return scramble_workers(args.workers or 1)


def _check_workers(args: argparse.Namespace) -> None:
    """``--workers``, whichever processes it counts, is at least 1."""
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers}")


def check_dask_options(args: argparse.Namespace, embedded: bool = True) -> None:
    """``--workers`` and ``--scheduler`` as :func:`add_dask_options` defines them."""
    _check_workers(args)
    if embedded and args.workers is not None and args.scheduler:
        raise UsageError("--workers: sizes the embedded cluster; with --scheduler the cluster is yours")
    if args.scheduler is not None and "://" not in args.scheduler:
        raise UsageError(f"--scheduler: expected tcp://HOST:PORT, got {args.scheduler!r}")


def parse_range(text: str, flag: str, positive: bool = False, min_points: int = 1) -> list:
    """A grid of values: ``START:STOP:N`` (``N`` evenly spaced values from START to STOP, both
    included, each the decimal it is: :func:`_grid`), a comma-separated list of distinct values,
    or a single number. ``positive``: every value must be > 0. ``min_points``: the fewest values
    the command can use (a scan that brackets roots needs 3)."""
    text = str(text)
    parts = text.split(":")
    if "," in text:
        if len(parts) > 1:
            raise UsageError(f"{flag}: expected START:STOP:N or a comma-separated list, not both, got {text!r}")
        values = parse_list(text, flag, item=float)
        if len(set(values)) < len(values):
            raise UsageError(f"{flag}: a value is repeated in {text!r}")
        parts = None
    elif len(parts) not in (1, 3):
        raise UsageError(f"{flag}: expected START:STOP:N, a comma-separated list or a number, got {text!r}")
    if parts is not None:
        try:
            ends = [float(p) for p in parts[:2]]
        except ValueError:
            raise UsageError(f"{flag}: expected START:STOP:N with numbers, got {text!r}") from None
    else:
        ends = values
    if not all(math.isfinite(v) for v in ends):
        raise UsageError(f"{flag}: values must be finite, got {text!r}")
    if parts is not None and len(parts) == 1:
        values = ends
    elif parts is not None:
        try:
            n = int(parts[2])
        except ValueError:
            raise UsageError(f"{flag}: N must be an integer, got {parts[2]!r} in {text!r}") from None
        start, stop = ends
        if n < 1:
            raise UsageError(f"{flag}: N must be >= 1, got {n}")
        if n > MAX_RANGE_POINTS:
            raise UsageError(f"{flag}: N = {n} is too many grid values")
        if n == 1 and start != stop:
            raise UsageError(f"{flag}: N = 1 needs START = STOP (or give a single number), got {text!r}")
        if n > 1 and not start < stop:
            raise UsageError(f"{flag}: START must be below STOP, got {text!r}")
        values = _grid(parts[0].strip(), parts[1].strip(), n)
    if positive and any(v <= 0 for v in values):
        raise UsageError(f"{flag}: every value must be a positive number, got {text!r}")
    if len(values) < min_points:
        raise UsageError(f"{flag}: needs at least {min_points} values (START:STOP:N with START < STOP and "
                         f"N >= {min_points}, or a list of {min_points}), got {text!r}")
    return values


def _grid(start: str, stop: str, n: int) -> list:
    """``n`` values from ``start`` to ``stop`` (both included, as written), each the decimal it is:
    ``0.1:2.5:25`` gives 0.7, not 0.7000000000000001 (numpy.linspace's), so that a row stored with
    it is found by ``alpha == 0.7``."""
    import decimal

    with decimal.localcontext(decimal.Context(prec=40)):
        a, b = decimal.Decimal(start), decimal.Decimal(stop)
        if n == 1:
            return [float(a)]
        step = (b - a) / (n - 1)
        return [float(a + k * step) for k in range(n - 1)] + [float(b)]


_ITEM_KIND = {float: "numbers", int: "integers"}


def parse_list(text: str, flag: str, item: Callable = str, choices: Optional[Sequence] = None,
               allow_empty: bool = False) -> list:
    """Comma-separated values (blanks dropped), each converted by ``item`` and, with
    ``choices``, one of them."""
    parts = [x.strip() for x in str(text).split(",") if x.strip()]
    if not parts and not allow_empty:
        raise UsageError(f"{flag}: empty list")
    try:
        values = [item(x) for x in parts]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated {_ITEM_KIND.get(item, 'values')}, got {text!r}") \
            from None
    if choices is not None:
        for v in values:
            if v not in choices:
                raise UsageError(f"{flag}: unknown value {v!r}; choose from {', '.join(map(str, choices))}")
    return values


#: a whole number written with more digits than this is beyond every count the program takes
_MAX_COUNT_DIGITS = 18


def whole_number(text: str) -> int:
    """An argparse ``type``: an integer, written as one (``1000``) or in a float's notation with
    an integral value (``1e6``, ``1000.0``), as a count is often written; the size checks then
    refuse what is too large with its cost. Digits beyond :data:`_MAX_COUNT_DIGITS` are refused
    here (the exact integer of ``1e999999999`` would take minutes to build)."""
    import decimal

    try:
        value = decimal.Decimal(text.strip().replace("_", "x"))
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not value.is_finite() or (value != 0 and value.adjusted() >= _MAX_COUNT_DIGITS):
        raise argparse.ArgumentTypeError(f"{text!r} is beyond any count this program takes (at most "
                                         f"{_MAX_COUNT_DIGITS} digits)")
    if value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def positive_number(text: str) -> float:
    """An argparse ``type``: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


# --------------------------------------------------------------------------- outputs

OUTPUT_KINDS = ("file", "folder")


def check_output(path, kind: str, flag: str = "--out") -> None:
    """Refuse, before any work, an output path the command could not write: ``kind`` is
    ``"file"`` (written whole, replacing one that exists) or ``"folder"`` (created if
    missing, with its parents). The path must be of that kind if it exists, and its folder
    (or the nearest existing one above it) must take a new file: this is tried, not read
    from the permission bits, which say nothing for the superuser or for ``/proc``."""
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind: choose from {', '.join(OUTPUT_KINDS)}, got {kind!r}")
    if not str(path):
        raise UsageError(f"{flag}: empty path")
    p = Path(path)
    if kind == "file" and (p.is_dir() or str(path).endswith(("/", os.sep))):
        raise UsageError(f"{flag}: {path} is a folder; give a file name")
    if kind == "file" and p.exists() and not p.is_file():
        # a file is written whole and renamed over the path: a device, a pipe or a socket would be replaced
        raise UsageError(f"{flag}: {path} is not a regular file (a device, a pipe or a socket) and writing "
                         f"would replace it; give a file name")
    if kind == "folder" and p.exists() and not p.is_dir():
        raise UsageError(f"{flag}: {path} exists and is not a folder")
    where = p if kind == "folder" and p.is_dir() else p.absolute().parent
    while not where.exists():
        where = where.parent
    if not where.is_dir():
        raise UsageError(f"{flag}: cannot create {path}: {where} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".attnphase-write-test-")
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {path}: no new file can be made in {where} "
                         f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def _same_file(a, b) -> bool:
    """The same file by any name (a link, ``./``), whether or not it exists yet."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_distinct_outputs(outputs: dict) -> None:
    """Refuse, before any work, two outputs that are one file (the second would overwrite the
    first): ``outputs`` maps a flag to the paths it writes."""
    named = [(flag, path) for flag, paths in outputs.items() for path in paths]
    for i, (flag, path) in enumerate(named):
        for other_flag, other in named[i + 1:]:
            if _same_file(path, other):
                raise UsageError(f"{flag}: {path} is also written by {other_flag} ({other}), which would overwrite "
                                 f"it: give another name")


def check_not_input(outputs: dict, inputs: dict) -> None:
    """Refuse, before any work, an output that is also an input (writing it would lose the
    input before it is read): ``outputs`` and ``inputs`` map a flag to the paths it names.
    Paths are compared as files: the same file by another name (a link, ``./``) is the same."""
    same = _same_file

    for out_flag, out_paths in outputs.items():
        for out in out_paths:
            for in_flag, in_paths in inputs.items():
                for source in in_paths:
                    if same(out, source):
                        raise UsageError(f"{out_flag}: {out} is also the input {in_flag} {source}; "
                                         f"writing it would lose the input: give another name")


def failed(command: str, message: str) -> int:
    """A command that ran but did not give its result: raises :class:`~attnphase.errors.CommandFailed`,
    which the program turns into one line on stderr and exit status 1."""
    raise CommandFailed(message)


def print_json(obj) -> None:
    """``--json``: ``obj`` on stdout by THE JSON writer (:func:`tidyio.json_text`: no NaN)."""
    from tidyio import json_text

    sys.stdout.write(json_text(obj) + "\n")


@contextlib.contextmanager
def progress_bar(total: Optional[int] = None, desc: str = "", unit: str = "it"):
    """A tqdm bar on stderr, shown when stderr is a terminal (and not turned off by
    :func:`set_progress`), whose elapsed time keeps running (refreshed every second) while one long step is in progress."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None if _show_progress else True,
               dynamic_ncols=True, leave=False)
    stop = threading.Event()

    def tick():
        while not stop.wait(1.0):
            bar.refresh()

    ticker = None if bar.disable else threading.Thread(target=tick, name="progress", daemon=True)
    if ticker:
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker:
            ticker.join()
        bar.close()

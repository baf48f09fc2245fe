"""What a command will cost, estimated before it starts, and the refusal of what it cannot afford.

Every size option (the dimension, the samples, the test samples, steps, seeds, the grids, the
numbers of tokens and columns) is checked here before anything is allocated:

* memory: a run whose data need more than this machine has available is refused (exit 2), with
  the estimate (:func:`require_memory`);
* time: a run estimated to take longer than :data:`LONG_RUN_S` is refused unless ``--yes`` is
  given, with the estimate in one line (:func:`require_time`); one beyond :data:`OUT_OF_REACH_S`
  is refused even so.

The estimates are rates measured on the 2-core machine of the README (each constant below says
what it was measured from); they are meant to tell an afternoon from a year, not to the minute.
"""
from __future__ import annotations

import argparse
import math
import os

from .errors import UsageError

#: a run estimated to take longer needs ``--yes``
LONG_RUN_S = 3 * 3600.0
#: a run estimated to take longer is refused even with ``--yes`` (a typo, not a plan)
OUT_OF_REACH_S = 365 * 86400.0

# --- simulation (validation.simulate), measured: 5000 steps at d = 1000, alpha = 2, two tokens,
# rank one in about 7 s, of which the 10000 test samples about 3 s; peak memory 0.70 GB at d = 1000 and
# 1.65 GB at d = 3000 (alpha = 2), 2.2 GB with 200000 test samples: about 8 bytes per byte of the
# training data, 1 per byte of the test data, above 0.55 GB of the program itself
#: seconds per step, training sample, dimension, token and column
TRAIN_S = 2e-13
#: seconds per test sample, dimension and token
TEST_S = 1.6e-7
TRAIN_COPIES = 8
TEST_COPIES = 1
PROGRAM_BYTES = 0.55e9

# --- message passing (validation.gamp), measured: 70-78 iterations in 0.7-0.8 s at d = 1000, alpha = 2, two
# tokens, rank one (docs/gamp.md, section 6): about 2.5e-9 s per iteration, training sample, dimension, token
# and column; a run is taken at 100 iterations (one that does not converge takes up to 400 per damping)
GAMP_ITERATION_S = 2.5e-9
GAMP_ITERATIONS = 100

# --- theory (README and the commands' --help): seconds of one point of one branch
#: the two-token rank-one model's line quadrature, by precision
LINE_POINT_S = {"draft": 0.5, "fast": 7.0, "high": 70.0}
#: the general model's quasi-Monte Carlo (--help: "seconds to tens of seconds per point at draft, minutes at fast")
QMC_POINT_S = {"draft": 20.0, "fast": 120.0, "high": 1200.0}
#: a phase-diagram grid point (all its branches and its share of the thresholds), two workers: the
#: default grid of 10 x 25 points took about 13 minutes at fast
DIAGRAM_POINT_S = {"draft": 0.5, "fast": 3.1, "high": 31.0}
#: the same for the general model: the rank-2 diagram of 640 points took about 46 minutes at draft
#: (docs/phase_diagram.md); fast and high taken 10 and 100 times longer, as for one solve
DIAGRAM_GENERAL_POINT_S = {"draft": 4.3, "fast": 43.0, "high": 430.0}

#: the replica-symmetric stability of a grid point's branches (``phase-diagram --stability``), two workers:
#: about 1-2 s a converged point of a branch at the default 2^13 x 8 nodes (docs/gamp.md, section 5)
STABILITY_GRID_POINT_S = 2.0

# --- derivation and code generation of a new shape, measured with no cache on a shared 2-core machine
# (seconds, L tokens and rank r): (2, 1) 3, (3, 1) 6, (4, 1) 12, (5, 1) 56, (6, 1) 55, (8, 1) 369,
# (10, 1) 435; (2, 2) 8, (3, 2) 66, (4, 2) 75, (5, 2) 34, (6, 2) 78. The estimate is their upper
# envelope in the number n = L r of prox variables: 3 s (n / 2)^3.5 (384 s at n = 8, 838 s at n = 10);
# beyond n = 12 it is an extrapolation
DERIVATION_S_AT_2 = 3.0
DERIVATION_POWER = 3.5
#: the most points of a sweep's grid
MAX_GRID_POINTS = 10**6
#: the most tokens or columns of any model (the teacher's matrix alone has L^2 entries)
MAX_SHAPE = 1000


def add_yes_option(parser) -> None:
    parser.add_argument("--yes", action="store_true",
                        help=f"run even when the estimated time is above {LONG_RUN_S / 3600:g} hours "
                             "(the estimate is printed instead of running without it)")


def duration_text(seconds: float) -> str:
    for unit, size in (("years", 365 * 86400.0), ("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def bytes_text(n: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g} bytes"


def available_memory() -> float:
    """Bytes of memory available to a new allocation: MemAvailable of /proc/meminfo, else the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def require_memory(nbytes: float, flag: str, what: str) -> None:
    """Refuse (exit 2) what needs more memory than is available."""
    free = available_memory()
    if nbytes > free:
        raise UsageError(f"{flag}: {what} need about {bytes_text(nbytes)} of memory, more than the "
                         f"{bytes_text(free)} available here")


def require_time(seconds: float, flag: str, what: str, args: argparse.Namespace) -> None:
    """Refuse (exit 2) what is estimated to take longer than :data:`LONG_RUN_S` without ``--yes``,
    and what would take longer than :data:`OUT_OF_REACH_S` at all."""
    if seconds > OUT_OF_REACH_S:
        raise UsageError(f"{flag}: {what} would take about {duration_text(seconds)} on 2 cores (estimated from "
                         f"measured rates): out of reach")
    if seconds > LONG_RUN_S and not getattr(args, "yes", False):
        raise UsageError(f"{flag}: {what} would take about {duration_text(seconds)} on 2 cores (estimated from "
                         f"measured rates); add --yes to run it anyway")


# --------------------------------------------------------------------------- estimates


def simulation_run(d: int, alpha: float, steps: int, n_test: int, L: int, r: int, dtype: str) -> tuple:
    """``(seconds, bytes)`` of one gradient-descent run (module constants)."""
    item = 8 if dtype == "float64" else 4
    n = max(1, round(alpha * d))
    seconds = steps * n * d * L * r * TRAIN_S + n_test * d * L * TEST_S
    nbytes = PROGRAM_BYTES + TRAIN_COPIES * n * L * d * item + TEST_COPIES * n_test * L * d * item
    return seconds, nbytes


def gamp_run(d: int, alpha: float, n_test: int, L: int, r: int, dtype: str) -> tuple:
    """``(seconds, bytes)`` of one GAMP run (module constants): ``X`` (``L n d`` items) held once, its
    chunked products and the test set's chunks beside it, and the program."""
    item = 8 if dtype == "float64" else 4
    n = max(1, round(alpha * d))
    seconds = GAMP_ITERATIONS * n * d * L * r * GAMP_ITERATION_S + n_test * d * L * TEST_S
    nbytes = PROGRAM_BYTES + n * L * d * item + 2 * 2048 * L * d * 8
    return seconds, nbytes


#: the defaults of the simulation's sizes, to name the one that makes a run too large
SIMULATION_DEFAULTS = {"--d": 1000, "--alpha": 2.0, "--n-test": 10000, "--steps": 5000, "--seeds": 1}


def _largest(sizes: dict, d_flag: str) -> str:
    """The option whose value is the most times its default (``--d`` spelled ``d_flag``)."""
    name = max(sizes, key=lambda f: sizes[f] / SIMULATION_DEFAULTS[f])
    return d_flag if name == "--d" else name


def check_simulations(runs: int, d: int, alpha: float, steps: int, n_test: int, L: int, r: int, dtype: str,
                      args, d_flag: str = "--d") -> None:
    """``runs`` runs at these sizes: the memory of one, the time of all; the message names the option
    furthest above its default."""
    seconds, nbytes = simulation_run(d, alpha, steps, n_test, L, r, dtype)
    n = max(1, round(alpha * d))
    memory_flag = _largest({"--d": d, "--alpha": alpha, "--n-test": n_test}, d_flag)
    require_memory(nbytes, memory_flag, f"the data of one run (n = {n:.3g} samples and {n_test:.3g} test samples "
                                        f"of {L} tokens in d = {d:.3g} dimensions, {dtype})")
    time_flag = _largest({"--d": d, "--alpha": alpha, "--n-test": n_test, "--steps": steps, "--seeds": runs}, d_flag)
    require_time(runs * seconds, time_flag, f"{runs:.3g} run(s) of {steps:.3g} steps at d = {d:.3g}, alpha = {alpha:g}",
                 args)


def check_gamp_runs(runs: int, d: int, alpha: float, n_test: int, L: int, r: int, dtype: str, args,
                    d_flag: str = "--d") -> None:
    """``runs`` GAMP runs at these sizes (:func:`gamp_run`): the memory of one, the time of all."""
    seconds, nbytes = gamp_run(d, alpha, n_test, L, r, dtype)
    n = max(1, round(alpha * d))
    memory_flag = _largest({"--d": d, "--alpha": alpha, "--n-test": n_test}, d_flag)
    require_memory(nbytes, memory_flag, f"the design of one GAMP run (n = {n:.3g} samples of {L} tokens in d = "
                                        f"{d:.3g} dimensions, {dtype})")
    time_flag = _largest({"--d": d, "--alpha": alpha, "--n-test": n_test, "--seeds": runs}, d_flag)
    require_time(runs * seconds, time_flag, f"{runs:.3g} GAMP run(s) at d = {d:.3g}, alpha = {alpha:g}", args)


def derivation_seconds(L: int, r: int) -> float:
    """The derivation and code generation of a new shape with ``L r`` prox variables (measured above)."""
    return DERIVATION_S_AT_2 * (L * r / 2.0) ** DERIVATION_POWER


def check_shape(tokens: int, rank: int, teacher_rank: int, args, derives: bool = True) -> None:
    """The model's shape before it is built (the teacher's matrix alone has ``L^2`` entries) and, where
    the command derives its equations, the derivation's time."""
    for flag, value in (("--tokens", tokens), ("--rank", rank), ("--teacher-rank", teacher_rank)):
        if isinstance(value, int) and value > MAX_SHAPE:
            raise UsageError(f"{flag}: {value} is beyond any model this program can derive or simulate (at most "
                             f"{MAX_SHAPE}; the derivation's cost grows as (L r)^{DERIVATION_POWER:g})")
    if derives and isinstance(tokens, int) and isinstance(rank, int):
        flag = "--rank" if rank > 1 else "--tokens"
        require_time(derivation_seconds(tokens, rank), flag,
                     f"the first derivation and code generation of L = {tokens} tokens, rank {rank} "
                     f"({tokens * rank} prox variables; cached once done)", args)


def check_theory_points(points: int, precision: str, noisy: bool, flag: str, what: str, args) -> None:
    rate = (QMC_POINT_S if noisy else LINE_POINT_S)[precision]
    require_time(points * rate, flag, f"{what} ({points} points at {precision} precision)", args)


def check_grid(n_omegas: int, n_alphas: int) -> None:
    """A sweep's grid that it can store and draw (at most :data:`MAX_GRID_POINTS`)."""
    points = n_omegas * n_alphas
    if points > MAX_GRID_POINTS:
        raise UsageError(f"--omegas, --alphas: a grid of {n_omegas} x {n_alphas} = {points:.3g} points is beyond "
                         f"what a sweep can store and draw (at most {MAX_GRID_POINTS:.0e})")


def check_diagram(n_omegas: int, n_alphas: int, precision: str, noisy: bool, args,
                  stability: bool = False) -> None:
    """The theory of a sweep: :data:`DIAGRAM_POINT_S` (or :data:`DIAGRAM_GENERAL_POINT_S`) a grid point,
    and :data:`STABILITY_GRID_POINT_S` (twice that for the general model's branches) with ``stability``."""
    rate = (DIAGRAM_GENERAL_POINT_S if noisy else DIAGRAM_POINT_S)[precision]
    if stability:
        rate += STABILITY_GRID_POINT_S * (2 if noisy else 1)
    require_time(n_omegas * n_alphas * rate, "--omegas, --alphas",
                 f"the theory on {n_omegas} x {n_alphas} grid points at {precision} precision", args)

"""Phase diagrams over the ``(alpha, omega)`` plane, run on Dask (issue 5; SPEC section 3).

What is computed
----------------
*Theory*: three tasks per ``omega`` column: the semantic and the positional branch,
each followed by continuation along the ``alpha`` grid (``numerics.api.follow_branch``,
with the linear baseline), and then ``alpha_c(omega)`` and ``alpha_l(omega)`` by
root-finding (``numerics.api.thresholds``), bracketed by the two branch tasks' rows as
read back from ``theory.csv`` (so a resumed sweep starts from the same values as an
uninterrupted one). The threshold task is submitted when both branch tasks of its
column are stored; the spinodals in its row are theirs.

*Simulation*: one task per finite-size run ``(omega, alpha, init, run_index)``
(``validation.simulate.run_one``), from the semantic and the positional start.

Files (all under ``--out``)
---------------------------
``theory.csv``      one row per (omega, alpha, branch), tidy; every model parameter and
                    solver setting is in the row. A grid point where a branch does not
                    exist (past its spinodal) has ``exists = False`` and empty values;
                    ``spinodal_{lower,upper}_alpha(_error)`` are where the branch ended.
``thresholds.csv``  one row per omega: ``alpha_c, alpha_c_error, alpha_l, alpha_l_error``,
                    the linear baseline, the spinodals (one column group per branch, all of
                    them as JSON in ``spinodals``) and ``threshold_status``/``_message``.
``simulation.csv``  one row per simulated run.
``theory_points.csv``, ``simulation_points.csv``  derived per-grid-point differences
                    (rewritten at the end of a run; the figures are drawn from the CSVs).
``failures.csv``    an append-only log of failed tasks (``run_started`` says which run).
``manifest.json``   the settings of each kind of sweep and their hash.
``done.txt``        the keys of finished tasks, one per line.

Resuming and crash safety
-------------------------
A finished task's rows are appended to the CSV as one block, flushed and fsynced; only
then is its key appended to ``done.txt`` (and fsynced). On start, rows whose task is not
in ``done.txt`` (a task killed half-written) and a trailing partial line are dropped by
rewriting the file to a temporary name and renaming it over the old one, so a SIGKILL at
any moment loses at most the tasks in flight. Re-running skips the tasks in
``done.txt``. The settings that decide the values of a row (the model without ``omega``,
the solver precision and the ``alpha`` grid for the theory; the model and the training
settings for simulations) are hashed into ``manifest.json``; a run with other settings
and the same ``--out`` is refused. Extending the ``omega`` grid (or ``--seeds``) adds
tasks to an existing sweep.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import hashlib
import io
import json
import logging
import math
import os
import sys
import time
import traceback
import uuid
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

from attnphase.errors import UsageError
from attnphase.options import simulation_option_error

log = logging.getLogger(__name__)

THEORY_BRANCHES = ("semantic", "positional")
SIM_INITS = ("semantic", "positional")
WHATS = ("theory", "simulation", "both")
PRECISIONS = ("draft", "fast", "high")  # draft: numerics.fixed_point, for quick looks

THEORY_CSV = "theory.csv"
THRESHOLDS_CSV = "thresholds.csv"
SIMULATION_CSV = "simulation.csv"
FAILURES_CSV = "failures.csv"
DONE_FILE = "done.txt"
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"
DATA_CSVS = (THEORY_CSV, THRESHOLDS_CSV, SIMULATION_CSV)

MANIFEST_FORMAT = 1
FIRST_THEORY_COLUMNS = ("task", "omega", "alpha", "branch", "exists", "converged", "q", "m", "V", "theta",
                        "test_error", "test_error_error", "train_loss", "train_loss_error",
                        "linear_test_error", "linear_test_error_error")
THRESHOLD_COLUMNS = ("task", "omega", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error",
                     "linear_test_error", "linear_test_error_error")


class SweepError(UsageError):
    """Bad sweep input or an --out folder that cannot be used; the message names the option
    (a :class:`attnphase.cli.UsageError`: one line on stderr, exit status 2)."""


# --------------------------------------------------------------------------- grids and keys


def fmt(x: float) -> str:
    """The canonical text of a grid value (12 significant digits): used in task keys."""
    return format(float(x), ".12g")


def parse_grid(text: str, flag: str) -> list:
    """``START:STOP:N`` (``N`` evenly spaced values, both ends included) or a single number.

    Values are rounded to 12 significant digits so that ``0:0.45:10`` gives ``0.15``,
    not ``0.15000000000000002``, in the files and the task keys.
    """
    parts = str(text).split(":")
    try:
        if len(parts) == 1:
            values = [float(parts[0])]
        elif len(parts) == 3:
            start, stop = float(parts[0]), float(parts[1])
            try:
                n = int(parts[2])
            except ValueError:
                raise SweepError(f"{flag}: N must be an integer, got {parts[2]!r} in {text!r}") from None
            if n < 1:
                raise SweepError(f"{flag}: N must be >= 1, got {n}")
            if n == 1 and start != stop:
                raise SweepError(f"{flag}: N = 1 needs START = STOP (or give a single number), got {text!r}")
            if n > 100000:
                raise SweepError(f"{flag}: N = {n} is too many grid values")
            values = [start + (stop - start) * i / (n - 1) for i in range(n)] if n > 1 else [start]
        else:
            raise SweepError(f"{flag}: expected START:STOP:N or a number, got {text!r}")
    except ValueError as exc:
        if isinstance(exc, SweepError):
            raise
        raise SweepError(f"{flag}: expected START:STOP:N with numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise SweepError(f"{flag}: values must be finite, got {text!r}")
    values = [float(fmt(v)) + 0.0 for v in values]
    if len(set(values)) != len(values):
        raise SweepError(f"{flag}: grid values must be distinct, got {text!r}")
    if len(values) > 1 and values != sorted(values):
        raise SweepError(f"{flag}: START must be below STOP, got {text!r}")
    return values


def grid_text(values: Sequence[float]) -> str:
    """A compact text for a grid: ``START:STOP:N`` when evenly spaced, else comma-separated."""
    values = list(values)
    if len(values) == 1:
        return fmt(values[0])
    n = len(values)
    even = [float(fmt(values[0] + (values[-1] - values[0]) * i / (n - 1))) for i in range(n)]
    if even == values:
        return f"{fmt(values[0])}:{fmt(values[-1])}:{n}"
    return ",".join(fmt(v) for v in values)


def theory_key(omega: float, job: str) -> str:
    """``theory:omega=W:branch=B`` for a branch, ``theory:omega=W:thresholds`` for the thresholds."""
    return f"theory:omega={fmt(omega)}:" + (job if job == "thresholds" else f"branch={job}")


def simulation_key(omega: float, alpha: float, init: str, run_index: int) -> str:
    return f"simulation:omega={fmt(omega)}:alpha={fmt(alpha)}:init={init}:run={run_index}"


# --------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What to compute. ``spec`` gives the model; its ``omega`` is replaced per column."""

    spec: object  # derivations.spec.ModelSpec
    omegas: tuple
    alphas: tuple
    what: str = "theory"
    precision: str = "fast"
    d: int = 1000
    seeds: int = 1
    seed: int = 0
    steps: int = 5000
    lr: Optional[float] = None
    optimizer: str = "gd"
    dtype: str = "float32"
    n_test: int = 10000

    def __post_init__(self):
        # the same 12-digit rounding as parse_grid: keys and rows never carry float noise
        object.__setattr__(self, "omegas", tuple(float(fmt(w)) + 0.0 for w in self.omegas))
        object.__setattr__(self, "alphas", tuple(float(fmt(a)) + 0.0 for a in self.alphas))
        self.validate()

    @property
    def kinds(self) -> tuple:
        return ("theory", "simulation") if self.what == "both" else (self.what,)

    def validate(self) -> None:
        if self.what not in WHATS:
            raise SweepError(f"--what: choose from {', '.join(WHATS)}, got {self.what!r}")
        if self.precision not in PRECISIONS:
            raise SweepError(f"--precision: choose from {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not self.omegas:
            raise SweepError("--omega: empty grid")
        if not self.alphas:
            raise SweepError("--alpha: empty grid")
        for w in self.omegas:
            if not 0.0 <= w <= 1.0:
                raise SweepError(f"--omega: values must lie in [0, 1], got {fmt(w)}")
        for a in self.alphas:
            if not a > 0:
                raise SweepError(f"--alpha: values must be > 0, got {fmt(a)}")
        if "simulation" in self.kinds:
            if self.d < 2:
                raise SweepError(f"--d: must be >= 2, got {self.d}")
            error = simulation_option_error(self.steps, self.lr, self.n_test, self.seeds, self.seed)
            if error:
                raise SweepError(error)
            if self.optimizer not in ("gd", "adam"):
                raise SweepError(f"--optimizer: choose from gd, adam, got {self.optimizer!r}")
            if self.dtype not in ("float32", "float64"):
                raise SweepError(f"--dtype: choose from float32, float64, got {self.dtype!r}")
            for a in self.alphas:
                if round(a * self.d) < 1:
                    raise SweepError(f"--alpha: alpha * d = {a * self.d:g} leaves no training sample")

    def spec_at(self, omega: float):
        return self.spec.replace(omega=float(omega))

    def model_settings(self) -> dict:
        """The model without ``omega`` (which varies across the sweep)."""
        d = self.spec.to_dict()
        d.pop("omega", None)
        d.pop("rho", None)
        return d

    def theory_settings(self, task_fn: Callable) -> dict:
        return {"kind": "theory", "model": self.model_settings(), "precision": self.precision,
                "alphas": [fmt(a) for a in self.alphas], "branches": list(THEORY_BRANCHES),
                "task": _callable_name(task_fn)}

    def simulation_settings(self, task_fn: Callable) -> dict:
        return {"kind": "simulation", "model": self.model_settings(), "d": self.d, "seed": self.seed,
                "steps": self.steps, "lr": self.lr, "optimizer": self.optimizer, "dtype": self.dtype,
                "n_test": self.n_test, "inits": list(SIM_INITS), "task": _callable_name(task_fn)}


def settings_hash(settings: dict) -> str:
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _callable_name(fn: Callable) -> str:
    while hasattr(fn, "func"):  # functools.partial: its arguments (e.g. a test delay) do not change results
        fn = fn.func
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def model_columns(spec) -> dict:
    """Every model parameter as flat CSV columns (``A`` as ``A11, A12, A21, A22``)."""
    d = spec.to_dict()
    A = d.pop("A")
    cols = {}
    for k, v in d.items():
        cols[k] = v
    for i, row in enumerate(A):
        for j, x in enumerate(row):
            cols[f"A{i + 1}{j + 1}"] = x
    return cols


@dataclasses.dataclass(frozen=True)
class Task:
    key: str
    kind: str  # "theory" | "simulation"
    fn: Callable
    payload: dict


def make_tasks(config: SweepConfig, theory_task: Callable, simulation_task: Callable) -> list:
    tasks = []
    if "theory" in config.kinds:
        for w in config.omegas:
            for job in THEORY_BRANCHES + ("thresholds",):
                payload = {"spec": config.spec_at(w), "omega": w, "alphas": list(config.alphas),
                           "precision": config.precision, "job": "thresholds" if job == "thresholds" else "branch"}
                if job != "thresholds":
                    payload["branch"] = job
                tasks.append(Task(theory_key(w, job), "theory", theory_task, payload))
    if "simulation" in config.kinds:
        for w in config.omegas:
            for a in config.alphas:
                for init in SIM_INITS:
                    for k in range(config.seeds):
                        tasks.append(Task(simulation_key(w, a, init, k), "simulation", simulation_task,
                                          {"spec": config.spec_at(w), "omega": w, "alpha": a, "init": init,
                                           "run_index": k, "seed": config.seed, "d": config.d,
                                           "steps": config.steps, "lr": config.lr, "optimizer": config.optimizer,
                                           "dtype": config.dtype, "n_test": config.n_test}))
    return tasks


# --------------------------------------------------------------------------- task functions (run on workers)


def theory_task(payload: dict, api=None) -> dict:
    """One theory task at one ``omega`` (``payload["job"]``):

    * ``"branch"``: follow ``payload["branch"]`` along the ``alpha`` grid by continuation;
      returns ``{"rows": [...]}``, one row per grid ``alpha``, with the linear baseline and
      the spinodals met on the way;
    * ``"thresholds"``: ``alpha_c``, ``alpha_l`` and the spinodals by root-finding; returns
      ``{"thresholds": {...}}``. ``ThresholdError`` (not bracketed) gives NaN and its message.

    The two branch jobs are independent, so a branch that cannot be found does not lose
    the other, and a column's work spreads over several workers. The thresholds job
    starts from both branch jobs' rows (``payload["branch_rows"]``, added when they are
    stored; without them it brackets the roots with a draft scan of its own, as
    ``attnphase thresholds`` does); a branch that was not found gives rows with
    ``exists = False`` and then a thresholds row with its reason.
    ``api`` defaults to :mod:`numerics.api` (imported here, on the worker); tests pass a
    fake. Model and solver columns are added by the writer.
    """
    if api is None:
        from numerics import api
    # numpy RuntimeWarnings (overflow in exp inside the softmax, sqrt of a negative in a
    # rejected trial step) would be printed by every worker; they are counted into the
    # rows instead. Convergence flags and error estimates are in the rows.
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        if payload["job"] == "thresholds":
            result = _thresholds_job(payload, api)
        else:
            result = _branch_job(payload, api)
    extra = {"runtime_warnings": sum(issubclass(w.category, RuntimeWarning) for w in caught),
             "task_wall_time": time.perf_counter() - t0}
    for r in result.get("rows", []):
        r.update(extra)
    if "thresholds" in result:
        result["thresholds"].update(extra)
    return result


DEFAULT_THEORY_TASK = theory_task


def _baseline(api, spec) -> tuple:
    baseline = api.linear_baseline(spec)
    return float(baseline.test_error), float(getattr(baseline, "error", float("nan")))


def _branch_job(payload: dict, api) -> dict:
    spec, alphas, branch = payload["spec"], list(payload["alphas"]), payload["branch"]
    lin, lin_err = _baseline(api, spec)
    curve = api.follow_branch(spec, alphas, branch, precision=payload["precision"])
    rows = _branch_rows(curve.points, alphas, branch)
    spinodals = [dict(sp) for sp in getattr(curve, "spinodals", [])]
    sp_cols = {}
    for side in ("lower", "upper"):
        mine = [sp for sp in spinodals if sp.get("side") == side]
        sp_cols[f"spinodal_{side}_alpha"] = float(mine[0]["alpha"]) if mine else float("nan")
        sp_cols[f"spinodal_{side}_alpha_error"] = float(mine[0].get("alpha_error", float("nan"))) if mine \
            else float("nan")
        sp_cols[f"spinodal_{side}_last_found"] = float(mine[0].get("last_found", float("nan"))) if mine \
            else float("nan")
    note = str(getattr(curve, "note", "") or "")  # e.g. the branch was not found at its anchor
    for r in rows:
        r["linear_test_error"], r["linear_test_error_error"] = lin, lin_err
        r.update(sp_cols)
        r["branch_note"] = note
    # one column order for every row and every task, whichever points exist
    rest = sorted({k for r in rows for k in r} - set(FIRST_THEORY_COLUMNS))
    return {"rows": [{k: r.get(k, "") for k in FIRST_THEORY_COLUMNS[2:] + tuple(rest)} for r in rows]}


def _thresholds_job(payload: dict, api) -> dict:
    spec = payload["spec"]
    lin, lin_err = _baseline(api, spec)
    thr = {k: float("nan") for k in THRESHOLD_COLUMNS[2:6]}
    thr.update(linear_test_error=lin, linear_test_error_error=lin_err, alpha_l_branch="", alpha_l_at_jump="")
    rows = payload.get("branch_rows")
    thr["bracket_source"] = "own scan" if rows is None else "branch rows"
    # the column's own branch rows bracket the roots (at the sweep's precision)
    scan = {} if rows is None else {"scan_curves": api.scan_curves_from_rows(rows)}
    try:
        th = api.thresholds(spec, precision=payload["precision"], **scan)
    except api.ThresholdError as exc:
        status, message, spinodals = "not_bracketed", str(exc), []
    else:
        status, message = "ok", ""
        for k in THRESHOLD_COLUMNS[2:6]:
            thr[k] = float(getattr(th, k))
        spinodals = [dict(sp) for sp in getattr(th, "spinodals", [])]
        al_status = getattr(th, "alpha_l_status", "ok")
        if al_status != "ok":  # alpha_c found, alpha_l off the scan: a result, as below
            status, message = "alpha_l_not_bracketed", f"alpha_l {al_status}"
        fine = (getattr(th, "details", None) or {}).get("fine", {})
        thr["alpha_l_branch"] = fine.get("branch_l", "")
        thr["alpha_l_at_jump"] = fine.get("at_jump", "")
    thr.update(_spinodal_columns(spinodals))
    thr["spinodals"] = json.dumps(spinodals, default=_json_default)
    thr["threshold_status"], thr["threshold_message"] = status, message
    return {"thresholds": thr}


def _json_default(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def _spinodal_columns(spinodals: list) -> dict:
    cols = {}
    for branch in THEORY_BRANCHES:
        mine = [s for s in spinodals if s.get("branch") == branch]
        first = mine[0] if mine else {}
        cols[f"spinodal_{branch}_alpha"] = float(first.get("alpha", float("nan")))
        cols[f"spinodal_{branch}_alpha_error"] = float(first.get("alpha_error", float("nan")))
        cols[f"spinodal_{branch}_side"] = str(first.get("side", ""))
    return cols


def _point_row(p) -> dict:
    row = dict(p.to_row()) if hasattr(p, "to_row") else {}
    ov = getattr(p, "overlaps", None)
    for name in ("q", "m", "V", "theta"):
        if name not in row and ov is not None:
            row[name] = float(getattr(ov, name))
    for name in ("test_error", "train_loss", "converged"):
        if name not in row:
            row[name] = getattr(p, name)
    err = getattr(p, "error", None) or {}
    for name in ("test_error", "train_loss"):
        if f"{name}_error" not in row and f"error_{name}" not in row and name in err:
            row[f"{name}_error"] = float(err[name])
    return row


def _branch_rows(points, alphas: list, branch: str) -> list:
    """One row per grid ``alpha``; a missing point (the branch ended) gets ``exists = False``."""
    found = {}
    for p in points:
        i = min(range(len(alphas)), key=lambda j: abs(alphas[j] - p.alpha))
        if abs(alphas[i] - p.alpha) > 1e-9 * max(1.0, abs(p.alpha)):
            log.debug("%s point at alpha=%g is off the grid; not written", branch, p.alpha)
            continue
        if i not in found or (p.converged and not found[i].converged):
            found[i] = p
    rows = []
    for i, a in enumerate(alphas):
        row = {k: "" for k in FIRST_THEORY_COLUMNS[4:]}
        if i in found:
            row.update(_point_row(found[i]))
            row["exists"] = True
        else:
            row.update(exists=False, converged=False)
            for k in ("q", "m", "V", "theta", "test_error", "test_error_error", "train_loss", "train_loss_error"):
                row[k] = float("nan")
        row["alpha"], row["branch"] = a, branch
        rows.append(row)
    return rows


def simulation_run_task(payload: dict) -> dict:
    """One finite-size run (``validation.simulate.run_one``) on the CPU; drops the loss curve."""
    import torch

    from validation.simulate import DEFAULT_LR, DTYPES, run_one

    rec = run_one(payload["spec"], payload["d"], payload["alpha"], payload["init"], seed=payload["seed"],
                  run_index=payload["run_index"], steps=payload["steps"], lr=payload["lr"],
                  optimizer=payload["optimizer"], dtype=DTYPES[payload["dtype"]], device=torch.device("cpu"),
                  n_test=payload["n_test"], record_points=2)
    rec.pop("loss_curve", None)
    rec["lr_used"] = DEFAULT_LR[payload["optimizer"]] if payload["lr"] is None else float(payload["lr"])
    rec["alpha"], rec["init"] = payload["alpha"], payload["init"]
    return {"rows": [rec]}


@dataclasses.dataclass(frozen=True)
class _FakeOverlaps:
    q: float
    m: float
    V: float
    theta: float


@dataclasses.dataclass(frozen=True)
class _FakePoint:
    alpha: float
    branch: str
    overlaps: _FakeOverlaps
    test_error: float
    train_loss: float
    converged: bool
    error: dict

    def to_row(self) -> dict:
        return {"alpha": self.alpha, "branch": self.branch, **dataclasses.asdict(self.overlaps),
                "test_error": self.test_error, "train_loss": self.train_loss, "converged": self.converged,
                **{f"{k}_error": v for k, v in self.error.items()}}


class _FakeTheoryAPI:
    """TEST DOUBLE for :mod:`numerics.api`: closed-form toy curves, no solver (microseconds).

    Toy physics with the right shape: ``alpha_c(omega) = 0.8 + 2 omega`` (training losses
    cross there), the semantic branch exists for ``alpha >= 0.3``, the positional one for
    ``alpha <= 2 + omega`` (and is "not found at its anchor" for ``omega >= 0.9``), linear
    baseline ``0.002 + 0.001 omega``. ``thresholds`` raises ``ThresholdError`` when
    ``alpha_c > 2.5``.
    """

    class ThresholdError(RuntimeError):
        pass

    SEM_START = 0.3

    @staticmethod
    def alpha_c(omega):
        return 0.8 + 2.0 * omega

    @staticmethod
    def linear(omega):
        return 0.002 + 0.001 * omega

    def linear_baseline(self, spec):
        from types import SimpleNamespace

        return SimpleNamespace(test_error=self.linear(spec.omega), error=1e-9)

    def _point(self, spec, a, branch):
        w, lam = spec.omega, spec.lam
        ls = 0.01 / (1.0 + a) + lam * 0.01
        if branch == "semantic":
            ov = _FakeOverlaps(0.1 * a / (1 + a), 0.0, 10.0 + lam, 0.15 * a / (1 + a))
            te, tl = 0.004 / (1.0 + a), ls
        else:
            ov = _FakeOverlaps(0.05, 0.25 * (1 + w), 14.0, 0.0)
            te, tl = 0.003 + 0.0005 * w, ls + 0.001 * (a - self.alpha_c(w))
        return _FakePoint(float(a), branch, ov, te, tl, True, {"q": 1e-7, "test_error": 1e-8, "train_loss": 1e-8})

    def follow_branch(self, spec, alphas, branch, precision="fast"):
        from types import SimpleNamespace

        if branch == "positional" and spec.omega >= 0.9:  # like numerics.api: an empty curve with a note
            return SimpleNamespace(points=[], spinodals=[], note="positional branch not found at the anchor")
        lo, hi = (self.SEM_START, math.inf) if branch == "semantic" else (0.0, 2.0 + spec.omega)
        pts = [self._point(spec, a, branch) for a in alphas if lo <= a <= hi]
        side = "lower" if branch == "semantic" else "upper"
        edge = lo if branch == "semantic" else hi
        sp = [{"branch": branch, "alpha": edge, "alpha_error": 0.01, "side": side}] if min(alphas) < edge < max(alphas) else []
        return SimpleNamespace(points=pts, spinodals=sp)

    @staticmethod
    def scan_curves_from_rows(rows):
        return {b: [r for r in rows if r.get("branch") == b and str(r.get("exists")) == "True"]
                for b in THEORY_BRANCHES}

    def thresholds(self, spec, precision="fast", scan_curves=None):
        from types import SimpleNamespace

        ac = self.alpha_c(spec.omega)
        if ac > 2.5:
            raise self.ThresholdError(f"alpha_c not bracketed in [0.05, 2.5] at omega={spec.omega:g}")
        if scan_curves is not None and not all(scan_curves.values()):
            raise self.ThresholdError("a branch has no rows in this column")
        al = max(ac, 0.004 / self.linear(spec.omega) - 1.0)
        # like numerics.api at large omega: alpha_c on the scan, alpha_l beyond it
        al_status = "not bracketed: beyond the scan" if 0.6 <= spec.omega < 0.85 else "ok"
        if al_status != "ok":
            al = float("nan")
        sp = [{"branch": "semantic", "alpha": self.SEM_START, "alpha_error": 1e-4, "side": "lower"},
              {"branch": "positional", "alpha": 2.0 + spec.omega, "alpha_error": 1e-4, "side": "upper"}]
        d = {"alpha_c": ac, "alpha_c_error": 1e-4, "alpha_l": al, "alpha_l_error": 2e-4,
             "linear_test_error": self.linear(spec.omega), "spinodals": sp}
        return SimpleNamespace(**d, alpha_l_status=al_status, to_dict=lambda: dict(d))


def _fake_theory_task(payload: dict, delay: float = 0.0, fail_omegas: Sequence[float] = (),
                      fail_only: Optional[str] = None) -> dict:
    """TEST DOUBLE for :func:`theory_task`: the real task logic on :class:`_FakeTheoryAPI`.

    ``delay`` seconds of sleep make a slow task (kill-and-resume tests). At an ``omega``
    in ``fail_omegas`` the task raises: every job, or only ``fail_only`` (a branch name or
    ``"thresholds"``). Lives in this module so that Dask workers can import it.
    """
    if delay:
        time.sleep(delay)
    job = payload.get("branch", payload["job"])
    if any(abs(payload["omega"] - w) < 1e-12 for w in fail_omegas) and fail_only in (None, job):
        raise RuntimeError(f"fake failure at omega={payload['omega']:g} ({job})")
    return theory_task(payload, api=_FakeTheoryAPI())


# --------------------------------------------------------------------------- crash-safe files


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _append_text(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _complete_text(path: Path) -> tuple:
    """The file's text up to its last newline, and whether a partial line followed."""
    if not path.exists():
        return "", False
    text = path.read_text(encoding="utf-8", errors="replace")
    cut = text.rfind("\n") + 1
    return text[:cut], cut != len(text)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):  # np.float64 too (a float subclass whose repr is "np.float64(...)")
        v = float(v)
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (list, dict, tuple)):
        v = json.dumps(v, default=_json_default)
    if type(v).__module__ == "numpy":
        v = v.item() if hasattr(v, "item") else v
        return _cell(v)
    return str(v).replace("\r", " ").replace("\n", " ")  # one physical line per row


def _render(header: Sequence[str], rows: Sequence[dict], with_header: bool) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if with_header:
        w.writerow(header)
    for r in rows:
        w.writerow([_cell(r.get(k, "")) for k in header])
    return buf.getvalue()


def read_csv_rows(path) -> tuple:
    """``(header, rows)`` of a CSV written here, ignoring a trailing partial line."""
    text, _ = _complete_text(Path(path))
    if not text:
        return [], []
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    rows = [dict(zip(header, r)) for r in reader if r]
    return header, rows


class SweepStore:
    """The files of one ``--out`` folder; holds an exclusive lock while open."""

    def __init__(self, out):
        self.out = Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SweepError(f"--out: cannot create {self.out} ({exc.strerror})") from None
        if not self.out.is_dir():
            raise SweepError(f"--out: {self.out} is not a folder")
        self._lock = None
        self.done: set = set()
        self._headers: dict = {}

    # -- locking
    def __enter__(self):
        import fcntl

        self._lock = open(self.out / LOCK_FILE, "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise SweepError(f"--out: another phase-diagram run is writing to {self.out}") from None
        return self

    def __exit__(self, *exc):
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- manifest
    def manifest(self) -> Optional[dict]:
        path = self.out / MANIFEST
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SweepError(f"--out: {path} is unreadable ({exc}); use another --out") from None

    def check_settings(self, sections: dict) -> None:
        """Record ``{kind: settings}``; refuse settings that differ from those already recorded."""
        manifest = self.manifest()
        if manifest is None:
            stray = [n for n in DATA_CSVS + (DONE_FILE,) if (self.out / n).exists()]
            if stray:
                raise SweepError(f"--out: {self.out} holds {', '.join(stray)} but no {MANIFEST}; "
                                 f"use another --out")
            manifest = {"format": MANIFEST_FORMAT, "created": _now(), "sections": {}}
        changed = False
        for kind, settings in sections.items():
            h = settings_hash(settings)
            old = manifest["sections"].get(kind)
            if old is None:
                manifest["sections"][kind] = {"hash": h, "settings": settings}
                changed = True
            elif old["hash"] != h:
                diff = "; ".join(_diff(old.get("settings", {}), settings)) or "hash differs"
                raise SweepError(f"--out: {self.out} holds a {kind} sweep with other settings ({diff}); "
                                 f"use another --out, or delete the folder to start over")
        if changed:
            manifest["environment"] = _environment()
            _atomic_write_text(self.out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    # -- recovery
    def recover(self) -> dict:
        """Drop a partial trailing line and the rows of unfinished tasks. Returns counts dropped."""
        text, partial = _complete_text(self.out / DONE_FILE)
        if partial:
            _atomic_write_text(self.out / DONE_FILE, text)
        self.done = {line for line in text.splitlines() if line}
        dropped = {}
        for name in DATA_CSVS:
            path = self.out / name
            if not path.exists():
                continue
            _, partial = _complete_text(path)
            header, rows = read_csv_rows(path)
            keep = [r for r in rows if r.get("task") in self.done]
            if partial or len(keep) != len(rows):
                dropped[name] = len(rows) - len(keep) + int(partial)
                if header and keep:
                    _atomic_write_text(path, _render(header, keep, True))
                else:
                    path.unlink()
                    _fsync_dir(self.out)
            if path.exists():
                self._headers[name] = header
        path = self.out / FAILURES_CSV
        text, partial = _complete_text(path)
        if partial:
            _atomic_write_text(path, text)
        for name, n in dropped.items():
            log.info("%s: dropped %d row(s) of unfinished tasks or a partial line", name, n)
        return dropped

    # -- appending
    def append_rows(self, name: str, rows: list) -> None:
        """Append rows as one block (fsynced). New columns rewrite the file atomically with the union header."""
        if not rows:
            return
        path = self.out / name
        header = self._headers.get(name)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        if header is None or not path.exists():
            header = keys
            _atomic_write_text(path, _render(header, rows, True))
        elif set(keys) <= set(header):
            _append_text(path, _render(header, rows, False))
        else:
            old_header, old_rows = read_csv_rows(path)
            header = old_header + [k for k in keys if k not in old_header]
            _atomic_write_text(path, _render(header, old_rows + list(rows), True))
        self._headers[name] = header

    def mark_done(self, key: str) -> None:
        _append_text(self.out / DONE_FILE, key + "\n")
        self.done.add(key)

    def record_failure(self, task: Task, error: str, tb: str, run_started: str) -> None:
        row = {"run_started": run_started, "task": task.key, "kind": task.kind,
               "omega": task.payload.get("omega"), "alpha": task.payload.get("alpha", ""),
               "error": error, "traceback": tb.strip().replace("\n", " | ")}
        path = self.out / FAILURES_CSV
        header = list(row)
        _append_text(path, _render(header, [row], not path.exists() or path.stat().st_size == 0))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _environment() -> dict:
    import platform

    env = {"python": platform.python_version()}
    for mod in ("numpy", "dask", "distributed"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return env


def _diff(old: dict, new: dict, prefix: str = "") -> list:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            if isinstance(a, list) and isinstance(b, list) and len(a) + len(b) > 6:
                a, b = f"{len(a)} values {a[0]}..{a[-1]}" if a else "[]", f"{len(b)} values {b[0]}..{b[-1]}" if b else "[]"
            out.append(f"{prefix}{k}: {a} -> {b}")
    return out


# --------------------------------------------------------------------------- rows as written


def theory_rows(task: Task, result: dict, config: SweepConfig, shash: str) -> tuple:
    """``(theory.csv rows, thresholds.csv rows)`` of a finished theory task, with the model and solver columns."""
    spec = task.payload["spec"]
    common = {**model_columns(spec), "precision": config.precision, "alpha_grid": grid_text(config.alphas),
              "settings_hash": shash}
    rows = []
    for r in result.get("rows", []):
        row = {"task": task.key, "omega": task.payload["omega"], "alpha": r["alpha"], "branch": r["branch"]}
        row.update({k: v for k, v in r.items() if k not in row})
        for k, v in common.items():
            row.setdefault(k, v)
        rows.append(row)
    thr = []
    if "thresholds" in result:
        t = {"task": task.key, "omega": task.payload["omega"]}
        t.update({k: v for k, v in result["thresholds"].items() if k not in t})
        for k, v in common.items():
            t.setdefault(k, v)
        thr.append(t)
    return rows, thr


def simulation_rows(task: Task, result: dict, config: SweepConfig, shash: str) -> list:
    p = task.payload
    common = {**model_columns(p["spec"]), "d": p["d"], "steps": p["steps"], "lr": p["lr"],
              "optimizer": p["optimizer"], "dtype": p["dtype"], "n_test": p["n_test"], "base_seed": p["seed"],
              "settings_hash": shash}
    rows = []
    for r in result["rows"]:
        row = {"task": task.key, "omega": p["omega"], "alpha": p["alpha"], "init": p["init"],
               "run_index": p["run_index"]}
        row.update({k: v for k, v in r.items() if k not in row})
        for k, v in common.items():
            row.setdefault(k, v)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- execution


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def open_client(scheduler: Optional[str] = None, workers: Optional[int] = None, n_tasks: int = 1,
                connect_timeout: str = "20s"):
    """A ``dask.distributed.Client``: to ``scheduler`` if given, else to an embedded LocalCluster
    of ``workers`` single-threaded worker processes (default: the machine's cores, at most
    one per task)."""
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=connect_timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SweepError(f"--scheduler: cannot connect to {scheduler} ({exc})") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or min(default_workers(), max(1, n_tasks))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client


def run_sweep(config: SweepConfig, out, *, scheduler: Optional[str] = None, workers: Optional[int] = None,
              client=None, theory_task: Optional[Callable] = None, simulation_task: Optional[Callable] = None,
              progress: bool = True, plot: bool = True) -> dict:
    """Run (or resume) a sweep into ``out``. Returns a summary; ``summary["failed"]`` lists failures.

    ``client``: an existing ``dask.distributed.Client`` (tests); otherwise one is opened
    with :func:`open_client`. ``theory_task``/``simulation_task`` replace the task
    functions (tests inject :func:`_fake_theory_task`); they must be importable by workers.
    """
    theory_task = theory_task or DEFAULT_THEORY_TASK
    simulation_task = simulation_task or simulation_run_task
    t_start = time.perf_counter()
    run_started = _now()
    with SweepStore(out) as store:
        sections = {}
        if "theory" in config.kinds:
            sections["theory"] = config.theory_settings(theory_task)
        if "simulation" in config.kinds:
            sections["simulation"] = config.simulation_settings(simulation_task)
        store.check_settings(sections)
        hashes = {k: settings_hash(v) for k, v in sections.items()}
        dropped = store.recover()
        tasks = make_tasks(config, theory_task, simulation_task)
        pending = [t for t in tasks if t.key not in store.done]
        summary = {"out": str(store.out), "tasks": len(tasks), "skipped": len(tasks) - len(pending),
                   "computed": [], "failed": [], "dropped_on_recovery": dropped, "notes": [],
                   "settings_hash": hashes, "figures": []}
        if pending:
            if client is not None:
                _execute(client, pending, store, config, hashes, summary, run_started, progress)
            else:
                with open_client(scheduler, workers, len(pending)) as cl:
                    summary["workers"] = len(cl.scheduler_info().get("workers", {}))
                    _execute(cl, pending, store, config, hashes, summary, run_started, progress)
        summary["compute_wall_time"] = time.perf_counter() - t_start
        if plot:
            _finish_outputs(store.out, summary)
    summary["wall_time"] = time.perf_counter() - t_start
    return summary


def _execute(client, pending: list, store: SweepStore, config: SweepConfig, hashes: dict, summary: dict,
             run_started: str, progress: bool) -> None:
    """Submit the pending tasks and store each result as it arrives.

    Only as many tasks as the cluster has worker threads are in flight; the next one, by
    :func:`_priority`, is submitted when one finishes. Submitted all at once, the tasks
    were spread over the workers' own queues up front (each key is its own task group,
    so Dask neither queues them on the scheduler nor learns their durations to steal
    them): on the target diagram the workers then sat idle for 19% of the run, and in a
    two-column test one worker idled 190 s of 339 s with a task queued on the other.

    A column's threshold task becomes ready once both its branch tasks are stored (at
    once, if an earlier run did them): it starts from their rows
    (:func:`_with_branch_rows`). If one of them fails, the threshold task is recorded as
    failed too, and a re-run does all three."""
    from distributed import as_completed
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    token = uuid.uuid4().hex[:8]
    futures = {}
    done_now = as_completed()

    def submit(t: Task):
        fut = client.submit(t.fn, t.payload, key=f"{t.key}-{token}", pure=False, priority=_priority(t))
        futures[fut] = t
        done_now.add(fut)

    waiting = {t.key: t for t in pending if _needs_branch_rows(t)}
    # a stable sort: within a priority, the order of make_tasks
    ready = sorted((t for t in pending if t.key not in waiting), key=lambda t: -_priority(t))

    def fill():
        slots = _worker_threads(client)
        while ready and len(futures) < slots:
            submit(ready.pop(0))
    bar = tqdm(total=summary["tasks"], initial=summary["skipped"], unit="task", desc="phase-diagram",
               file=sys.stderr, disable=not progress, mininterval=0.5, dynamic_ncols=True)
    failed_keys = set()

    def release_waiting():
        for key, t in list(waiting.items()):
            deps = _branch_keys(t)
            if all(d in store.done for d in deps):
                del waiting[key]
                ready.append(_with_branch_rows(t, store))
            elif any(d in failed_keys for d in deps):
                del waiting[key]
                bad = ", ".join(d for d in deps if d in failed_keys)
                _fail(store, t, RuntimeError(f"not run: it starts from the branch tasks' rows, and {bad} failed"),
                      "", run_started, summary)
                bar.update(1)
        ready.sort(key=lambda t: -_priority(t))

    try:
        with logging_redirect_tqdm():
            release_waiting()  # threshold tasks of columns whose branches an earlier run finished
            fill()
            for fut in done_now:
                task = futures.pop(fut)
                try:
                    if fut.status != "finished":
                        exc = fut.exception() if fut.status == "error" else RuntimeError(f"task {fut.status}")
                        tb = "".join(traceback.format_tb(fut.traceback())) if fut.status == "error" else ""
                        raise _TaskFailed(exc, tb)
                    result = fut.result()
                    _store_result(store, task, result, config, hashes, summary)
                    summary["computed"].append(task.key)
                except _TaskFailed as failed:
                    failed_keys.add(task.key)
                    _fail(store, task, failed.exc, failed.tb, run_started, summary)
                except Exception as exc:  # a malformed result: record it, keep going
                    failed_keys.add(task.key)
                    _fail(store, task, exc, traceback.format_exc(), run_started, summary)
                finally:
                    fut.release()
                bar.update(1)
                if waiting:
                    release_waiting()
                fill()
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    finally:
        bar.close()


def _worker_threads(client) -> int:
    """Worker threads in the cluster now (workers may join or leave a user's cluster)."""
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # a cluster that cannot say: one task at a time still finishes
        log.debug("could not read the cluster's worker threads; submitting one task at a time")
        return 1


def _needs_branch_rows(task: Task) -> bool:
    return task.kind == "theory" and task.payload.get("job") == "thresholds"


def _branch_keys(task: Task) -> tuple:
    return tuple(theory_key(task.payload["omega"], b) for b in THEORY_BRANCHES)


def _with_branch_rows(task: Task, store: SweepStore) -> Task:
    """The threshold task with its column's branch rows, as read back from ``theory.csv``
    (the same text whether this run or an earlier one wrote them)."""
    keys = set(_branch_keys(task))
    _, rows = read_csv_rows(store.out / THEORY_CSV)
    mine = [r for r in rows if r.get("task") in keys]
    return dataclasses.replace(task, payload={**task.payload, "branch_rows": mine})


def _priority(task: Task) -> int:
    """Branch tasks (the longest: ~90-170 s on the target diagram) before threshold tasks
    (~40-75 s), theory before simulations: the last tasks to run are then short ones,
    and fewer workers sit idle at the end of a sweep."""
    if task.kind != "theory":
        return 0
    return 1 if task.payload.get("job") == "thresholds" else 2


class _TaskFailed(Exception):
    def __init__(self, exc, tb):
        super().__init__(str(exc))
        self.exc, self.tb = exc, tb


def _fail(store, task, exc, tb, run_started, summary):
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    log.error("task %s failed: %s", task.key, msg)
    store.record_failure(task, msg, tb, run_started)
    summary["failed"].append({"task": task.key, "error": msg})


def _store_result(store: SweepStore, task: Task, result: dict, config: SweepConfig, hashes: dict,
                  summary: dict) -> None:
    if task.kind == "theory":
        rows, thr = theory_rows(task, result, config, hashes["theory"])
        store.append_rows(THEORY_CSV, rows)
        store.append_rows(THRESHOLDS_CSV, thr)
        for t in thr:
            if t.get("threshold_status") != "ok":
                what = "alpha_l not found" if t.get("threshold_status") == "alpha_l_not_bracketed" \
                    else "thresholds not found"
                summary["notes"].append({"task": task.key, "message": f"{what}: {t.get('threshold_message')}"})
        if rows and rows[0].get("branch_note"):
            summary["notes"].append({"task": task.key, "message": rows[0]["branch_note"]})
    else:
        store.append_rows(SIMULATION_CSV, simulation_rows(task, result, config, hashes["simulation"]))
    store.mark_done(task.key)


def _finish_outputs(out: Path, summary: dict) -> None:
    """Derived point tables and figures, from the CSVs alone."""
    from . import plotting_phase as P

    for name in (THEORY_CSV, SIMULATION_CSV):
        path = out / name
        if not path.exists():
            continue
        try:
            points = P.points_from_csv(path)
            derived = out / ("theory_points.csv" if name == THEORY_CSV else "simulation_points.csv")
            if points:
                _atomic_write_text(derived, _render(list(points[0]), points, True))
            summary["figures"] += [str(p) for p in P.plot_file(path)]
        except Exception as exc:  # a figure never loses the data; report it
            msg = f"{type(exc).__name__}: {exc}"
            log.error("figure from %s failed: %s", path, msg)
            summary["failed"].append({"task": f"plot:{name}", "error": msg})

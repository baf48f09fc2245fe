"""The theory as simulations meet it: one solver, memoised in memory and on disk, read in two views.

A :class:`Theory` holds ``solve(spec, alpha, branch, precision)``, as :func:`numerics.api.solve`
for every model: an object with ``test_error``, ``train_loss``, ``converged`` and, where the
solution has them, the scalar overlaps ``q, m, V, theta`` of the two-token rank-one model (flat or
under ``overlaps``), the ``invariants`` of docs/theory.md, section 4.9, the stated errors
``error`` and ``status`` (as :class:`numerics.result.FixedPoint`); it raises
:class:`numerics.fixed_points.errors.BranchNotFound` where the branch does not exist. Beside it,
``linear_baseline(spec)`` (an object with ``test_error``). :func:`default_theory` gives
``numerics.api``'s; tests pass fakes. :func:`memoized` remembers every solve (they take minutes),
so an interrupted or repeated ``validate`` does not solve again.

A solution is read in one of two views, because the statistics that compare it with simulations
differ on purpose (``validation.statistics``, "Branch and sign conventions"):

* the signed scalar overlaps of the two-token rank-one model, better statistics there than
  invariants (:func:`theory_point`, :func:`theory_curves`, :func:`theory_crossing`);
* the invariants, for any model: the theory's ``q_eigenvalues``, ``m_singular_values`` and
  ``theta_singular_values`` are the simulation's ``q_eig_j``, ``m_sv_j`` and ``theta_sv_j``
  (:data:`INVARIANT_KEYS`; :func:`invariant_point`, :func:`branches_at`, :func:`invariant_curves`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import types
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from numerics.api import BranchNotFound
from numerics.api import COMPETING_BRANCHES
from tidyio import KeyedStore

log = logging.getLogger(__name__)


QUANTITIES = ("test_error", "train_loss", "theta_over_sigma2", "m", "q")
ON_BRANCH_CUT = 1e-3  # theory: |theta|/sigma^2 (semantic) or |m| (positional) above this
#: the theory's invariant (``FixedPoint.invariants`` key) -> the simulation record's prefix
#: (``validation.simulate.summary_statistics``): component ``j`` is ``<prefix>_<j>`` in both
INVARIANT_KEYS = {"q_eigenvalues": "q_eig", "m_singular_values": "m_sv", "theta_singular_values": "theta_sv"}
#: the scalar outputs compared beside the invariants
OUTPUTS = ("test_error", "train_loss")


@dataclasses.dataclass(frozen=True)
class Theory:
    """The theory's solver and linear baseline, and the precision validation solves at (see the
    module docstring)."""

    solve: Callable
    linear_baseline: Callable
    precision: str = "fast"


#: the fields every remembered solve holds
_CORE = ("test_error", "train_loss", "converged")
#: the scalar overlaps of the two-token rank-one model
_SCALARS = ("q", "m", "V", "theta")
#: the fields of a remembered solve, each where the solution has it (:func:`_record`)
_FIELDS = _CORE + _SCALARS + ("invariants", "error", "status", "overlaps")


def _overlap(sol, name):
    """An overlap of a solution: a flat attribute (as the fakes of tests have), or one of its
    ``overlaps`` (as :class:`numerics.result.FixedPoint` has); None where it has neither."""
    value = getattr(sol, name, None)
    return getattr(getattr(sol, "overlaps", None), name, None) if value is None else value


def _number(sol, name) -> float:
    """An overlap of the two-token rank-one model as a number: the entry of its ``1 x 1`` matrix (a
    solver's record) or the number itself (a remembered one); a larger matrix raises."""
    return float(np.asarray(_overlap(sol, name), dtype=float).item())


def _record(sol) -> dict:
    """The fields of a solution that validation reads, JSON-ready: :data:`_CORE`, and each of the
    others that it has: the overlaps that are numbers (the entries of ``1 x 1`` matrices, the
    two-token rank-one model's), ``invariants``, the stated errors with the invariants'
    (:func:`_stated`), ``status`` and the overlap matrices as nested lists (``overlaps``)."""
    out = {"test_error": float(sol.test_error), "train_loss": float(sol.train_loss),
           "converged": bool(sol.converged)}
    for name in _SCALARS:
        value = _overlap(sol, name)
        if isinstance(value, numbers.Real) or (value is not None and np.size(value) == 1):
            out[name] = _number(sol, name)
    if getattr(sol, "invariants", None) is not None:
        out["invariants"] = {k: [float(x) for x in v] for k, v in sol.invariants.items()}
    if hasattr(sol, "error"):
        out["error"] = {k: float(v) for k, v in _stated(sol).items()}
    if hasattr(sol, "status"):
        out["status"] = str(sol.status)
    overlaps = getattr(sol, "overlaps", None)
    if overlaps is not None and hasattr(overlaps, "nested"):
        out["overlaps"] = overlaps.nested()
    return out


def _stated(sol) -> dict:
    """The stated errors of a solution, with its invariants' (``q_eigenvalues_1``, ...)."""
    stated = dict(sol.error or {})
    if hasattr(sol, "invariant_errors"):
        stated.update(sol.invariant_errors())
    return stated


def _decode(stored: dict, key):
    """A remembered solve: a namespace of its :data:`_FIELDS`, or the exception to raise again."""
    if "absent" in stored:
        return BranchNotFound(stored["absent"], key[2], key[1])
    if "failure" in stored:
        return RuntimeError(stored["failure"])
    return types.SimpleNamespace(**{k: v for k, v in stored.items() if k in _FIELDS})


def _memo_on_disk(compute: Callable, cache_dir: Optional[str]) -> Callable:
    """``compute(spec, alpha, branch, precision)`` remembered per ``(spec, alpha, branch,
    precision)`` in memory and, with ``cache_dir``, as checksummed JSON ``theory_<key>.json``
    (:func:`_record`). A branch that does not exist (:class:`BranchNotFound`) is remembered as
    ``{"absent": message}`` and raised again as such; any other exception as ``{"failure":
    message}``, raised again as :class:`RuntimeError`. A file that does not read back whole as the
    solve of its key is moved aside (with a warning) and the point solved again."""
    solves = {}
    records = KeyedStore(cache_dir, "theory_", "theory solve") if cache_dir else None

    def blob(key):
        return {"model": key[0].to_dict(), "alpha": key[1], "branch": key[2], "precision": key[3]}

    def read(key):
        def valid(stored):
            return (isinstance(stored, dict) and stored.get("branch") == key[2] and stored.get("alpha") == key[1]
                    and ("failure" in stored or "absent" in stored or all(k in stored for k in _CORE)))

        stored = records.get(blob(key), valid=valid)
        return None if stored is None else _decode(stored, key)

    def solve(spec, alpha, branch, precision="fast"):
        key = (spec, round(float(alpha), 12), branch, precision)
        if key not in solves and cache_dir:
            found = read(key)
            if found is not None:
                solves[key] = found
        if key not in solves:
            try:
                stored = _record(compute(spec, alpha, branch, precision=precision))
            except BranchNotFound as exc:
                stored = {"absent": str(exc)}
            except Exception as exc:
                stored = {"failure": f"{type(exc).__name__}: {exc}"}
            solves[key] = _decode(stored, key)
            if cache_dir:
                records.put(blob(key), {**stored, "alpha": key[1], "branch": branch, "precision": precision},
                            replace=True)
        if isinstance(solves[key], Exception):
            raise solves[key]
        return solves[key]

    return solve


def memoized(theory: Theory, cache_dir: Optional[str] = None) -> Theory:
    """The same theory, remembering each ``(spec, alpha, branch, precision)`` solve (solves take
    minutes) and each model's linear baseline. With ``cache_dir``, solves are also kept on disk as
    JSON, so an interrupted or repeated ``validate`` does not solve again; a remembered solve is a
    namespace of the fields the solution had (:func:`_record`), and a branch that does not exist
    raises :class:`BranchNotFound` again (:func:`_memo_on_disk`)."""
    baselines = {}

    def linear_baseline(spec):
        if spec not in baselines:
            baselines[spec] = theory.linear_baseline(spec)
        return baselines[spec]

    return Theory(_memo_on_disk(theory.solve, cache_dir), linear_baseline, theory.precision)


def default_theory(precision: str = "fast") -> Theory:
    """``numerics.api``'s one solver (for every model, and both views) and linear baseline."""
    from numerics.api import linear_baseline, solve

    return Theory(solve, linear_baseline, precision)


def _curve_rows(branches: Sequence[str], alphas: Sequence[float], values_at: Callable) -> List[dict]:
    """Tidy rows ``(branch, alpha, quantity, value, converged)`` of ``values_at(alpha, branch)``
    (``(values by quantity, converged)``); a point whose solve raises is skipped (a branch can stop
    existing, at a spinodal)."""
    rows = []
    for branch in branches:
        for alpha in alphas:
            try:
                values, converged = values_at(float(alpha), branch)
            except Exception as exc:
                log.warning("theory %s alpha=%g failed: %s", branch, alpha, exc)
                continue
            rows += [{"branch": branch, "alpha": float(alpha), "quantity": qty, "value": value,
                      "converged": converged} for qty, value in values.items()]
    return rows


# --------------------------------------------------------------------------- invariants (any model)


def invariant_point(theory: Theory, spec, alpha: float, branch: str) -> Dict:
    """The theory on ``branch`` at ``alpha`` in the simulation's names: ``values`` and ``errors``
    (stated, absolute; 0 where none is stated) keyed ``q_eig_1``, ``m_sv_1``, ..., ``test_error``,
    ``train_loss``; ``converged``, ``status``; ``present`` False (and no values) where the branch
    does not exist at ``alpha`` (:class:`BranchNotFound`)."""
    try:
        sol = theory.solve(spec, alpha, branch, precision=theory.precision)
    except BranchNotFound as exc:
        log.info("theory: no %s branch at alpha=%g (%s)", branch, alpha, exc)
        return {"present": False, "converged": False, "status": f"absent: {exc}", "values": {}, "errors": {}}
    stated = _stated(sol)
    values, errors = {}, {}
    for key, prefix in INVARIANT_KEYS.items():
        for j, v in enumerate(sol.invariants.get(key, ()), 1):
            values[f"{prefix}_{j}"] = float(v)
            errors[f"{prefix}_{j}"] = _stated_error(stated.get(f"{key}_{j}"))
    for key in OUTPUTS:
        values[key] = float(getattr(sol, key))
        errors[key] = _stated_error(stated.get(key))
    return {"present": True, "converged": bool(sol.converged), "status": str(sol.status), "values": values,
            "errors": errors}


def _stated_error(value) -> float:
    """A stated error as a number; none stated (or not finite, as a one-rule solve's NaN) is 0."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return abs(x) if math.isfinite(x) else 0.0


def branches_at(theory: Theory, spec, alpha: float) -> Dict[str, dict]:
    """:func:`invariant_point` of every branch of ``spec`` (``numerics.api.branches``) at ``alpha``,
    and which of the present, converged ones has the lowest training loss (``"global"``; None when
    none has converged)."""
    from numerics.api import branches

    points = {b: invariant_point(theory, spec, alpha, b) for b in branches(spec)}
    found = {b: p for b, p in points.items() if p["present"] and p["converged"]}
    best = min(found, key=lambda b: found[b]["values"]["train_loss"], default=None)
    return {"branches": points, "global": best}


def invariant_curves(theory: Theory, spec, alphas: Sequence[float]) -> List[dict]:
    """Tidy rows ``(branch, alpha, quantity, value, converged)`` of :func:`invariant_point` on every
    branch of ``spec`` (absent branches and failed solves are skipped)."""
    from numerics.api import branches

    def values_at(alpha, branch):
        point = invariant_point(theory, spec, alpha, branch)
        return point["values"], point["converged"]

    return _curve_rows(branches(spec), alphas, values_at)


# --------------------------------------------------------------------------- signed scalar overlaps (two-token model)


def theory_point(theory: Theory, spec, alpha: float, branch: str) -> Dict[str, float]:
    """Theory values of :data:`QUANTITIES` on ``branch`` (main order parameter positive). Where the
    branch does not exist at ``alpha`` (:class:`BranchNotFound`), ``present`` is False, the values
    NaN and ``converged`` and ``on_branch`` False: a simulation there has no theory counterpart
    (its rows say so, ``validation.statistics.unmatched``), which ends no command."""
    try:
        sol = theory.solve(spec, alpha, branch, precision=theory.precision)
    except BranchNotFound as exc:
        log.info("theory: no %s branch at alpha=%g (%s)", branch, alpha, exc)
        return {**{qty: math.nan for qty in QUANTITIES}, "converged": False, "on_branch": False, "present": False,
                "status": f"absent: {exc}"}
    th, m = _number(sol, "theta") / spec.sigma ** 2, _number(sol, "m")
    if branch == "semantic":
        th = abs(th)
    elif branch == "positional":
        m = abs(m)
    # a solve started on a branch can converge elsewhere (e.g. positional -> trivial)
    on_branch = {"semantic": abs(th) > ON_BRANCH_CUT, "positional": abs(m) > ON_BRANCH_CUT}.get(branch, True)
    if not on_branch:
        log.warning("theory: the %s solve at alpha=%g left its branch (m=%g, theta/sigma^2=%g)", branch, alpha, m, th)
    return {"test_error": float(sol.test_error), "train_loss": float(sol.train_loss),
            "theta_over_sigma2": th, "m": m, "q": _number(sol, "q"), "converged": bool(sol.converged),
            "on_branch": bool(on_branch), "present": True, "status": str(getattr(sol, "status", ""))}


def theory_crossing(theory: Theory, spec, alphas: Sequence[float], refine: bool = True, xtol: float = 2e-3) -> float:
    """Alpha where the semantic branch's test error falls below the linear baseline's.

    Evaluates the semantic branch at ``alphas`` (skipping ones where it fails or does
    not converge, e.g. below its spinodal), takes the first + to - sign change and,
    with ``refine``, polishes it by ``brentq`` to ``xtol`` (else linear interpolation).
    Equals ``alpha_l`` when the semantic branch is the global minimum there.
    """
    from scipy.optimize import brentq

    lin = float(theory.linear_baseline(spec).test_error)

    def f(alpha):
        sol = theory.solve(spec, float(alpha), "semantic", precision=theory.precision)
        return float(sol.test_error) - lin if sol.converged else float("nan")

    grid, vals = [], []
    for a in sorted(float(x) for x in alphas):
        try:
            v = f(a)
        except Exception as exc:  # the branch may not exist there
            log.info("theory crossing: semantic branch at alpha=%g failed: %s", a, exc)
            continue
        if math.isfinite(v):
            grid.append(a)
            vals.append(v)
    for i in range(len(grid) - 1):
        if vals[i] > 0 >= vals[i + 1]:
            linear = float(grid[i] + (grid[i + 1] - grid[i]) * vals[i] / (vals[i] - vals[i + 1]))
            if not refine:
                return linear
            try:
                return float(brentq(f, grid[i], grid[i + 1], xtol=xtol))
            except (ValueError, RuntimeError):
                return linear
    return float("nan")


def theory_curves(theory: Theory, spec, alphas: Sequence[float], branches=COMPETING_BRANCHES) -> List[dict]:
    """Tidy rows ``(branch, alpha, quantity, value, converged)`` of :func:`theory_point` (converged:
    and on its branch) and of the linear baseline; points whose solve raises are skipped."""
    lin = float(theory.linear_baseline(spec).test_error)

    def values_at(alpha, branch):
        point = theory_point(theory, spec, alpha, branch)
        if not point["present"]:  # skipped, as a solve that raises
            raise BranchNotFound(point["status"], branch, alpha)
        return {qty: point[qty] for qty in QUANTITIES}, point["converged"] and point["on_branch"]

    rows = _curve_rows(branches, alphas, values_at)
    for alpha in alphas:
        rows.append({"branch": "linear", "alpha": float(alpha), "quantity": "test_error", "value": lin,
                     "converged": True})
    return rows

"""The theory as simulations meet it: two callables, memoised in memory and on disk.

A :class:`Theory` holds ``solve_branch(spec, alpha, branch, precision)`` (an object with
``q, m, V, theta, test_error, train_loss, converged``, flat or under ``overlaps``) and
``linear_baseline(spec)`` (an object with ``test_error``). :func:`default_theory` gives
``numerics.api``'s; tests pass fakes. :func:`memoized` remembers every solve (they take
minutes), so an interrupted or repeated ``validate`` does not solve again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

from numerics.overlaps import COMPETING_BRANCHES
from numerics.tidy import UnreadableFile, move_aside, read_checked_json, write_checked_json

log = logging.getLogger(__name__)


QUANTITIES = ("test_error", "train_loss", "theta_over_sigma2", "m", "q")
ON_BRANCH_CUT = 1e-3  # theory: |theta|/sigma^2 (semantic) or |m| (positional) above this


@dataclasses.dataclass
class Theory:
    """The two theory callables (see the module docstring)."""

    solve_branch: Callable
    linear_baseline: Callable
    precision: str = "fast"


_SOLUTION_FIELDS = ("q", "m", "V", "theta", "test_error", "train_loss", "converged")


def _flat_solution(sol) -> dict:
    def get(name):  # flat attributes (numerics.api contract), or an ``overlaps`` object
        return getattr(sol, name) if hasattr(sol, name) else getattr(sol.overlaps, name)

    out = {k: float(get(k)) for k in _SOLUTION_FIELDS if k != "converged"}
    out["converged"] = bool(sol.converged)
    return out


def memoized(theory: Theory, cache_dir: Optional[str] = None) -> Theory:
    """The same theory, remembering each ``(spec, alpha, branch, precision)`` solve (solves take
    minutes). With ``cache_dir``, solves are also kept on disk as JSON, so an interrupted or
    repeated ``validate`` does not solve again; hits return a namespace with the fields of
    the ``solve_branch`` contract."""
    import types

    solves, baselines = {}, {}

    def path_of(key):
        blob = json.dumps({"model": key[0].to_dict(), "alpha": key[1], "branch": key[2], "precision": key[3]},
                          sort_keys=True)
        return os.path.join(cache_dir, f"theory_{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json")

    def read(key):
        """The solve stored on disk, or None; a file that does not read back whole as the
        solve of this key is moved aside (with a warning) and the point solved again."""
        path = path_of(key)
        if not os.path.exists(path):
            return None
        try:
            stored = read_checked_json(path)
            if not (isinstance(stored, dict) and stored.get("branch") == key[2] and stored.get("alpha") == key[1]
                    and ("error" in stored or all(k in stored for k in _SOLUTION_FIELDS))):
                raise UnreadableFile(f"{path}: not the solve of alpha = {key[1]:g}, {key[2]}")
        except UnreadableFile as exc:
            move_aside(path, f"unreadable cached theory solve ({exc}); solving again")
            return None
        if "error" in stored:
            return RuntimeError(stored["error"])
        return types.SimpleNamespace(**{k: stored[k] for k in _SOLUTION_FIELDS})

    def solve_branch(spec, alpha, branch, precision="fast"):
        key = (spec, round(float(alpha), 12), branch, precision)
        if key not in solves and cache_dir:
            found = read(key)
            if found is not None:
                solves[key] = found
        if key not in solves:
            try:
                solves[key] = types.SimpleNamespace(**_flat_solution(
                    theory.solve_branch(spec, alpha, branch, precision=precision)))
                stored = vars(solves[key])
            except Exception as exc:
                solves[key] = exc
                stored = {"error": f"{type(exc).__name__}: {exc}"}
            if cache_dir:
                write_checked_json(path_of(key), {**stored, "alpha": key[1], "branch": branch,
                                                  "precision": precision})
        if isinstance(solves[key], Exception):
            raise solves[key]
        return solves[key]

    def linear_baseline(spec):
        if spec not in baselines:
            baselines[spec] = theory.linear_baseline(spec)
        return baselines[spec]

    return Theory(solve_branch, linear_baseline, theory.precision)


def default_theory(precision: str = "fast") -> Theory:
    """``numerics.api``'s solver and linear baseline."""
    from numerics.api import linear_baseline, solve_branch

    return Theory(solve_branch, linear_baseline, precision)


def theory_point(theory: Theory, spec, alpha: float, branch: str) -> Dict[str, float]:
    """Theory values of :data:`QUANTITIES` on ``branch`` (main order parameter positive)."""
    sol = theory.solve_branch(spec, alpha, branch, precision=theory.precision)

    def get(name):  # flat attributes (numerics.api), or an ``overlaps`` object
        return float(getattr(sol, name) if hasattr(sol, name) else getattr(sol.overlaps, name))

    th, m = get("theta") / spec.sigma ** 2, get("m")
    if branch == "semantic":
        th = abs(th)
    elif branch == "positional":
        m = abs(m)
    # a solve started on a branch can converge elsewhere (e.g. positional -> trivial)
    on_branch = {"semantic": abs(th) > ON_BRANCH_CUT, "positional": abs(m) > ON_BRANCH_CUT}.get(branch, True)
    if not on_branch:
        log.warning("theory: the %s solve at alpha=%g left its branch (m=%g, theta/sigma^2=%g)", branch, alpha, m, th)
    return {"test_error": float(sol.test_error), "train_loss": float(sol.train_loss),
            "theta_over_sigma2": th, "m": m, "q": get("q"), "converged": bool(sol.converged),
            "on_branch": bool(on_branch)}


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
        sol = theory.solve_branch(spec, float(alpha), "semantic", precision=theory.precision)
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
    """Tidy rows ``(branch, alpha, quantity, value, converged)``; points whose solve raises are skipped."""
    rows = []
    lin = float(theory.linear_baseline(spec).test_error)
    for branch in branches:
        for alpha in alphas:
            try:
                tp = theory_point(theory, spec, float(alpha), branch)
            except Exception as exc:  # a branch can stop existing (spinodal)
                log.warning("theory %s alpha=%g failed: %s", branch, alpha, exc)
                continue
            for qty in QUANTITIES:
                rows.append({"branch": branch, "alpha": float(alpha), "quantity": qty, "value": tp[qty],
                             "converged": tp["converged"] and tp["on_branch"]})
    for alpha in alphas:
        rows.append({"branch": "linear", "alpha": float(alpha), "quantity": "test_error", "value": lin,
                     "converged": True})
    return rows

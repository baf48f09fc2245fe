"""A generic fixed-point solver: it sees only a map ``x -> F(x)``.

Anderson acceleration (type II) on top of damped Picard steps. Convergence is
judged on the *undamped* residual ``|F(x) - x|`` of every component, scaled by
``max(|x|, floor)``, so a small damping cannot fake convergence. A step that
leaves the map's domain (the map raises ``FloatingPointError`` or returns a
non-finite value) is retried as a shorter damped Picard step.

Every solve is bounded: by ``maxiter``, by a stall window, and by a :class:`Budget` of
map evaluations and wall-clock time that the caller may share between several solves.
A solve that stops on any of these returns its best iterate with ``converged=False``
and the reason in ``stopped``, unless that iterate's residual is below ``accept_tol``:
the map is smooth only to a noise floor, and a solve whose residual stops falling
below the precision's acceptance tolerance is a converged solve at that precision
(``at_floor``).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Callable, Optional

import numpy as np

log = logging.getLogger(__name__)


#: what a map raises at a point outside its domain (the generated equations raise
#: ``OverflowError`` where a power of a tiny ``q`` overflows a Python float, a Cholesky
#: factor ``LinAlgError`` where a covariance is not positive)
OUTSIDE_DOMAIN = (FloatingPointError, OverflowError, ZeroDivisionError, np.linalg.LinAlgError)


def _point(x) -> str:
    """A point of the iteration as a person reads it: ``(0.11, 12, 0.15)``."""
    return "(" + ", ".join(f"{float(v):.4g}" for v in np.ravel(x)) + ")"


class SolverError(RuntimeError):
    """The map could not be evaluated even on short damped steps, or no start converged."""


class Budget:
    """A bound on the work of a solve: at most ``max_evaluations`` map evaluations and
    ``seconds`` of wall-clock time, shared by every solve that is given it (the attempts
    and starts of one fixed point). ``None`` leaves that bound off."""

    def __init__(self, max_evaluations: Optional[int] = None, seconds: Optional[float] = None):
        self.max_evaluations, self.seconds = max_evaluations, seconds
        self.start = time.monotonic()
        self.evaluations = 0

    def spend(self) -> None:
        self.evaluations += 1

    def exhausted(self) -> str:
        """Why no further evaluation may be made (``""`` while it may)."""
        if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
            return f"evaluation budget of {self.max_evaluations} map evaluations spent"
        if self.seconds is not None and time.monotonic() - self.start >= self.seconds:
            return f"time limit of {self.seconds:g} s reached"
        return ""


@dataclasses.dataclass(frozen=True)
class FixedPointResult:
    x: np.ndarray
    Fx: np.ndarray
    converged: bool
    iterations: int
    residual: float          # max_i |F(x)_i - x_i| / max(|x_i|, floor), undamped
    history: tuple = ()      # residual per iteration
    pairs: tuple = ()        # the last Anderson pairs (x, F(x) - x), oldest first
    stalled: bool = False    # stopped early: the residual had stopped falling (``stall_window``)
    # converged above ``tol`` but below ``accept_tol``, where the residual had stopped falling
    at_floor: bool = False
    stopped: str = ""        # why a solve stopped without reaching ``tol`` ("" if it reached it)


def _scaled_residual(x, Fx, floor):
    return float(np.max(np.abs(Fx - x) / np.maximum(np.abs(x), floor)))


def _spend_and_evaluate(F: Callable, budget: Optional[Budget], point: np.ndarray) -> np.ndarray:
    """``F(point)`` as an array, counted against ``budget``."""
    if budget is not None:
        budget.spend()
    return np.asarray(F(point), dtype=float)


def _start_image(evaluate: Callable, x: np.ndarray) -> np.ndarray:
    """``F`` at the starting point, where a solve cannot begin unless it is defined and finite."""
    try:
        Fx = evaluate(x)
    except OUTSIDE_DOMAIN as exc:
        raise SolverError(f"the map cannot be evaluated at the starting point {_point(x)} ({exc})") from exc
    if not np.isfinite(Fx).all():
        raise SolverError(f"the map is not finite at the starting point {_point(x)}")
    return Fx


def _evaluable_step(evaluate: Callable, x: np.ndarray, Fx: np.ndarray, x_new: np.ndarray, damping: float,
                    budget: Optional[Budget]) -> tuple:
    """The step to ``x_new`` and the map there, where the map is defined and finite; else the damped
    Picard step from ``x``, halved up to 8 times: ``(x_new, F(x_new), shortened, spent)``, ``spent``
    the budget's reason where it ran out first (the step then not taken). A map defined nowhere
    along the shortened steps is a :class:`SolverError`."""
    beta, shortened = 1.0, False
    for _ in range(8):
        spent = budget.exhausted() if budget is not None else ""
        if spent:
            return x, Fx, shortened, spent
        try:
            Fx_new = evaluate(x_new)
            if np.isfinite(Fx_new).all():
                return x_new, Fx_new, shortened, ""
        except OUTSIDE_DOMAIN as exc:
            log.debug("step left the domain (%s); shortening", exc)
        beta *= 0.5
        x_new = x + beta * damping * (Fx - x)
        shortened = True
    raise SolverError(f"map not evaluable near x = {x} even with step {beta * damping:g}")


def solve_fixed_point(F: Callable[[np.ndarray], np.ndarray], x0, *, tol: float = 1e-10, maxiter: int = 100,
                      damping: float = 1.0, anderson: int = 4, floor=1e-8, history: tuple = (),
                      callback: Optional[Callable[[int, np.ndarray, float], None]] = None,
                      stall_window: Optional[int] = None, accept_tol: Optional[float] = None,
                      budget: Optional[Budget] = None) -> FixedPointResult:
    """Solve ``x = F(x)``.

    ``damping`` is the Picard mixing ``x + damping (F(x) - x)``; ``anderson`` the
    history length (0 for plain damped iteration); ``floor`` the scale below which
    components are compared in absolute terms. ``history``: Anderson pairs
    ``(x_i, G(x_i) - x_i)`` of a related map ``G`` (another rule, a nearby ``alpha``),
    made consistent with ``F`` at ``x0`` by :func:`_seeded_history` and used as this
    solve's initial history. ``stall_window``: give up (``stalled=True``) once that many
    iterations have passed without the residual falling below half of its best value at
    the previous such improvement; a solve that has stopped converging (e.g. past a
    fold, where no fixed point is near) then costs a bounded number of evaluations
    instead of ``maxiter``. ``budget``: a bound on evaluations and time, checked before
    every evaluation.

    A solve that stops before reaching ``tol`` (stall, ``maxiter``, budget) returns its
    best iterate; it is ``converged`` (``at_floor``) if that iterate's residual is below
    ``accept_tol``, and otherwise says why it stopped in ``stopped``.
    """
    x = np.asarray(x0, dtype=float).copy()
    floor = np.broadcast_to(np.asarray(floor, dtype=float), x.shape)

    evaluate = functools.partial(_spend_and_evaluate, F, budget)
    Fx = _start_image(evaluate, x)
    xs, gs = [x.copy()], [Fx - x]
    if history and anderson > 0:
        xs, gs = _seeded_history(history, x, Fx - x, anderson)
    residuals = []
    best = (np.inf, x, Fx)
    mark, mark_it = np.inf, 0  # the residual level to halve, and when it was set

    def stop(reason, iterations):
        res_best, x_best, Fx_best = best
        accepted = accept_tol is not None and res_best < accept_tol
        if accepted:
            log.debug("%s at residual %.3e, below the acceptance tolerance %.1e: converged at the floor",
                      reason, res_best, accept_tol)
        return FixedPointResult(x_best, Fx_best, accepted, iterations, res_best, tuple(residuals),
                                tuple(zip(xs, gs)), stalled=reason == STALLED, at_floor=accepted,
                                stopped="" if accepted else reason)

    for it in range(1, maxiter + 1):
        res = _scaled_residual(x, Fx, floor)
        residuals.append(res)
        if res < best[0]:
            best = (res, x, Fx)
        if callback is not None:
            callback(it - 1, x, res)
        if res < tol:
            return FixedPointResult(x, Fx, True, it - 1, res, tuple(residuals), tuple(zip(xs, gs)))
        if res < 0.5 * mark:
            mark, mark_it = res, it
        elif stall_window is not None and it - mark_it >= stall_window:
            log.debug("stalled: residual %.3e has not halved in %d iterations", mark, stall_window)
            return stop(STALLED, it - 1)
        x_new, Fx_new, shortened, spent = _evaluable_step(evaluate, x, Fx, _anderson_step(xs, gs, damping, anderson),
                                                          damping, budget)
        if shortened:
            xs, gs = [x.copy()], [Fx - x]  # history is not trustworthy across a failed step
        if spent:
            return stop(spent, it - 1)
        x, Fx = x_new, Fx_new
        xs.append(x.copy())
        gs.append(Fx - x)
        if len(xs) > anderson + 1:
            xs.pop(0)
            gs.pop(0)
    res = _scaled_residual(x, Fx, floor)
    residuals.append(res)
    if res < tol:
        return FixedPointResult(x, Fx, True, maxiter, res, tuple(residuals), tuple(zip(xs, gs)))
    if res < best[0]:
        best = (res, x, Fx)
    return stop(f"{maxiter} iterations reached", maxiter)


STALLED = "stalled"

#: evaluations of the map that the root finder may spend from each start where the iteration failed
#: (a solve in three to ten free overlaps converges in 10-25: a difference Jacobian, then Broyden's
#: updates)
ROOT_EVALUATIONS = 40


class _RootStop(Exception):
    """Ends a root search from inside the function: converged, or out of budget."""


def root_fixed_point(F: Callable[[np.ndarray], np.ndarray], x0, *, tol: float, accept_tol: Optional[float] = None,
                     max_evaluations: int = 80, step: float = 1e-4, floor=1e-8, scale=None,
                     initial_step: float = 1.0, residual: Optional[Callable[[np.ndarray, np.ndarray], float]] = None,
                     callback: Optional[Callable[[int, np.ndarray, float], None]] = None,
                     budget: Optional[Budget] = None) -> FixedPointResult:
    """A root of ``G(x) = F(x) - x`` by MINPACK's hybrid Powell method
    (``scipy.optimize.root``, ``method="hybr"``): a trust-region dogleg on a
    forward-difference Jacobian kept up to date by Broyden's updates.

    Unlike the Picard/Anderson iteration it converges to a fixed point whatever the
    eigenvalues of ``F``'s Jacobian there (a repelling fixed point too, or one where a
    complex pair has left the unit circle). The difference step is ``step`` times
    ``|x_j|``, large against the noise floor of a quadrature map (a map smooth to ~1e-7
    gives a Jacobian good to ~1e-3, which is all the method needs). ``scale``: the unit of
    each component (by default ``max(|x0_j|, floor_j)``); ``initial_step``: the radius of
    the first trust region in those units. ``residual(x, F(x))``: the measure of
    convergence (by default the scaled residual of :func:`solve_fixed_point`, with
    ``floor``), for a caller that solves in other coordinates. A point outside the map's
    domain returns a residual 1e3 times the start's, so the trust region shrinks away
    from it. Stops once that measure is below ``tol``, after
    ``max_evaluations``, or when the budget is spent; returns the best point seen, with
    the same result type and acceptance (``accept_tol``) as :func:`solve_fixed_point`."""
    x0 = np.asarray(x0, dtype=float).copy()
    floor = np.broadcast_to(np.asarray(floor, dtype=float), x0.shape)
    best = [np.inf, x0, x0]
    residuals = []
    state = {"stopped": "", "outside": None, "last": None}

    def G(x):
        x = np.array(x, dtype=float)
        if state["last"] is not None and np.array_equal(x, state["last"][0]):
            # MINPACK asks again for the point it was just given (scipy's shape check, then hybrd's
            # first evaluation): the map is deterministic, so the answer is the one it gave
            return state["last"][1].copy()
        spent = budget.exhausted() if budget is not None else ""
        if spent or len(residuals) >= max_evaluations:
            state["stopped"] = spent or f"{max_evaluations} evaluations of the root finder spent"
            raise _RootStop()
        if budget is not None:
            budget.spend()
        try:
            Fx = np.asarray(F(x), dtype=float)
            if not np.isfinite(Fx).all():
                raise FloatingPointError(f"the map is not finite at {x}")
        except OUTSIDE_DOMAIN as exc:
            log.debug("root finder: outside the domain at %s (%s)", x, exc)
            residuals.append(np.inf)
            if state["outside"] is None:
                raise
            return state["outside"]
        g = Fx - x
        res = measure(x, Fx)
        residuals.append(res)
        if state["outside"] is None:
            state["outside"] = 1e3 * np.maximum(np.abs(g), floor)
        if res < best[0]:
            best[:] = [res, x, Fx]
        if callback is not None:
            callback(len(residuals) - 1, x, res)
        if res < tol:
            raise _RootStop()
        state["last"] = (x, g.copy())
        return g

    measure = residual or (lambda x, Fx: _scaled_residual(x, Fx, floor))
    diag = 1.0 / (np.maximum(np.abs(x0), floor) if scale is None else np.asarray(scale, dtype=float))
    # imported here: scipy.optimize is a third of a cold command's imports, and most solves
    # converge by iteration without it
    from scipy.optimize import root

    try:
        # MINPACK's first trust region is ``factor * |diag * x0|``
        sol = root(G, x0, method="hybr",
                   options={"eps": step**2, "factor": float(np.clip(initial_step / max(np.linalg.norm(diag * x0), 1e-300), 0.1, 100.0)),
                            "diag": diag,
                            "maxfev": max_evaluations, "xtol": 1e-12})
        if not state["stopped"] and best[0] >= tol:
            state["stopped"] = f"the root finder stopped: {sol.message}"
    except _RootStop:
        pass
    res_best, x_best, Fx_best = best
    converged = res_best < tol
    accepted = converged or (accept_tol is not None and res_best < accept_tol)
    log.debug("root finder: residual %.3e after %d evaluations", res_best, len(residuals))
    return FixedPointResult(x_best, Fx_best, accepted, len(residuals), res_best, tuple(residuals),
                            at_floor=accepted and not converged,
                            stopped="" if accepted else (state["stopped"] or "the root finder did not converge"))


def _seeded_history(history, x0, g0, anderson):
    """Anderson pairs of a related map ``G``, made consistent with this map at ``x0``.

    The pairs' secant model of ``G`` is extrapolated to ``x0`` (least squares on their
    differences; nothing to extrapolate when the last pair is at ``x0``), and every
    ``G`` value is shifted by ``F(x0) - x0`` minus that prediction. The differences,
    which carry the Jacobian information, are unchanged, so a map that differs from
    ``G`` by a nearly constant term (another quadrature rule; a nearby ``alpha``)
    starts with ``G``'s Jacobian estimate.
    """
    hx = [np.array(p[0], dtype=float) for p in history]
    hg = [np.array(p[1], dtype=float) for p in history]
    if np.array_equal(hx[-1], x0):
        hx, hg = hx[:-1], hg[:-1]
        predicted = np.array(history[-1][1], dtype=float)
    else:
        predicted = hg[-1]
        if len(hx) >= 2:
            dX = np.array([hx[i + 1] - hx[i] for i in range(len(hx) - 1)]).T
            dG = np.array([hg[i + 1] - hg[i] for i in range(len(hg) - 1)]).T
            gamma, *_ = np.linalg.lstsq(dX, x0 - hx[-1], rcond=1e-10)
            predicted = hg[-1] + dG @ gamma
    shift = g0 - predicted
    keep = slice(-anderson, None)
    return hx[keep] + [x0.copy()], [g + shift for g in hg[keep]] + [g0.copy()]


def _anderson_step(xs, gs, damping, m):
    x, g = xs[-1], gs[-1]
    if m == 0 or len(xs) < 2:
        return x + damping * g
    dX = np.array([xs[i + 1] - xs[i] for i in range(len(xs) - 1)]).T
    dG = np.array([gs[i + 1] - gs[i] for i in range(len(gs) - 1)]).T
    gamma, *_ = np.linalg.lstsq(dG, g, rcond=1e-12)
    return x + damping * g - (dX + damping * dG) @ gamma

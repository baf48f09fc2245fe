"""A generic fixed-point solver: it sees only a map ``x -> F(x)``.

Anderson acceleration (type II) on top of damped Picard steps. Convergence is
judged on the *undamped* residual ``|F(x) - x|`` of every component, scaled by
``max(|x|, floor)``, so a small damping cannot fake convergence. A step that
leaves the map's domain (the map raises ``FloatingPointError`` or returns a
non-finite value) is retried as a shorter damped Picard step.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Optional

import numpy as np

log = logging.getLogger(__name__)


class SolverError(RuntimeError):
    """The map could not be evaluated even on short damped steps."""


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


def _scaled_residual(x, Fx, floor):
    return float(np.max(np.abs(Fx - x) / np.maximum(np.abs(x), floor)))


def solve_fixed_point(F: Callable[[np.ndarray], np.ndarray], x0, *, tol: float = 1e-10, maxiter: int = 100,
                      damping: float = 1.0, anderson: int = 4, floor=1e-8, history: tuple = (),
                      callback: Optional[Callable[[int, np.ndarray, float], None]] = None,
                      stall_window: Optional[int] = None) -> FixedPointResult:
    """Solve ``x = F(x)``.

    ``damping`` is the Picard mixing ``x + damping (F(x) - x)``; ``anderson`` the
    history length (0 for plain damped iteration); ``floor`` the scale below which
    components are compared in absolute terms. ``history``: Anderson pairs
    ``(x_i, G(x_i) - x_i)`` of a related map ``G`` (another rule, a nearby ``alpha``),
    made consistent with ``F`` at ``x0`` by :func:`_seeded_history` and used as this
    solve's initial history. ``stall_window``: give up (``converged=False``,
    ``stalled=True``) once that many iterations have passed without the residual
    falling below half of its best value at the previous such improvement; a solve
    that has stopped converging (e.g. past a fold, where no fixed point is near)
    then costs a bounded number of evaluations instead of ``maxiter``.
    """
    x = np.asarray(x0, dtype=float).copy()
    floor = np.broadcast_to(np.asarray(floor, dtype=float), x.shape)
    Fx = np.asarray(F(x), dtype=float)
    if not np.isfinite(Fx).all():
        raise SolverError(f"the map is not finite at the starting point {x}")
    xs, gs = [x.copy()], [Fx - x]
    if history and anderson > 0:
        xs, gs = _seeded_history(history, x, Fx - x, anderson)
    residuals = []
    mark, mark_it = np.inf, 0  # the residual level to halve, and when it was set
    for it in range(1, maxiter + 1):
        res = _scaled_residual(x, Fx, floor)
        residuals.append(res)
        if callback is not None:
            callback(it - 1, x, res)
        if res < tol:
            return FixedPointResult(x, Fx, True, it - 1, res, tuple(residuals), tuple(zip(xs, gs)))
        if res < 0.5 * mark:
            mark, mark_it = res, it
        elif stall_window is not None and it - mark_it >= stall_window:
            log.debug("stalled: residual %.3e has not halved in %d iterations", mark, stall_window)
            return FixedPointResult(x, Fx, False, it - 1, res, tuple(residuals), tuple(zip(xs, gs)), stalled=True)
        x_new = _anderson_step(xs, gs, damping, anderson)
        beta = 1.0
        for attempt in range(8):
            try:
                Fx_new = np.asarray(F(x_new), dtype=float)
                if np.isfinite(Fx_new).all():
                    break
            except FloatingPointError as exc:
                log.debug("step left the domain (%s); shortening", exc)
            beta *= 0.5
            x_new = x + beta * damping * (Fx - x)
            xs, gs = [x.copy()], [Fx - x]  # history is not trustworthy across a failed step
        else:
            raise SolverError(f"map not evaluable near x = {x} even with step {beta * damping:g}")
        x, Fx = x_new, Fx_new
        xs.append(x.copy())
        gs.append(Fx - x)
        if len(xs) > anderson + 1:
            xs.pop(0)
            gs.pop(0)
    res = _scaled_residual(x, Fx, floor)
    residuals.append(res)
    return FixedPointResult(x, Fx, res < tol, maxiter, res, tuple(residuals), tuple(zip(xs, gs)))


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

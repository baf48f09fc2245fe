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


def _scaled_residual(x, Fx, floor):
    return float(np.max(np.abs(Fx - x) / np.maximum(np.abs(x), floor)))


def solve_fixed_point(F: Callable[[np.ndarray], np.ndarray], x0, *, tol: float = 1e-10, maxiter: int = 100,
                      damping: float = 1.0, anderson: int = 4, floor=1e-8, history: tuple = (),
                      callback: Optional[Callable[[int, np.ndarray, float], None]] = None) -> FixedPointResult:
    """Solve ``x = F(x)``.

    ``damping`` is the Picard mixing ``x + damping (F(x) - x)``; ``anderson`` the
    history length (0 for plain damped iteration); ``floor`` the scale below which
    components are compared in absolute terms. ``history``: Anderson pairs
    ``(x_i, G(x_i))`` of a related map ``G`` ending at ``x0``; they are shifted by
    ``F(x0) - x0 - G(x0)`` and used as this solve's initial history.
    """
    x = np.asarray(x0, dtype=float).copy()
    floor = np.broadcast_to(np.asarray(floor, dtype=float), x.shape)
    Fx = np.asarray(F(x), dtype=float)
    if not np.isfinite(Fx).all():
        raise SolverError(f"the map is not finite at the starting point {x}")
    xs, gs = [x.copy()], [Fx - x]
    if history and anderson > 0:
        shift = (Fx - x) - history[-1][1]
        xs = [np.array(p[0], dtype=float) for p in history[-anderson - 1:-1]] + xs
        gs = [np.array(p[1], dtype=float) + shift for p in history[-anderson - 1:-1]] + gs
    residuals = []
    for it in range(1, maxiter + 1):
        res = _scaled_residual(x, Fx, floor)
        residuals.append(res)
        if callback is not None:
            callback(it - 1, x, res)
        if res < tol:
            return FixedPointResult(x, Fx, True, it - 1, res, tuple(residuals), tuple(zip(xs, gs)))
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


def _anderson_step(xs, gs, damping, m):
    x, g = xs[-1], gs[-1]
    if m == 0 or len(xs) < 2:
        return x + damping * g
    dX = np.array([xs[i + 1] - xs[i] for i in range(len(xs) - 1)]).T
    dG = np.array([gs[i + 1] - gs[i] for i in range(len(gs) - 1)]).T
    gamma, *_ = np.linalg.lstsq(dG, g, rcond=1e-12)
    return x + damping * g - (dX + damping * dG) @ gamma

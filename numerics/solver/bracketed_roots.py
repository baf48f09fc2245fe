"""Roots of an elementwise function inside brackets, by Chandrupatla's method: scipy's
``scipy.optimize.elementwise.find_root`` step for step, with its default tolerances.

Why not scipy's own: the line quadrature locates the pitchfork radius of every teacher ray at every
evaluation of the saddle-point map (:func:`numerics.channel.lines.teacher_nodes.polar_teacher_nodes`),
8-10 iterations on a few dozen rays, and scipy's general machinery (array-API dispatch, result
objects, callbacks) cost about 1.3 ms of that, several times the function's own evaluations. This is
the same iteration on plain arrays: the same operations in the same order on every element, so the
same roots to the bit (``tests/test_bracketed_roots.py`` compares them with scipy's), at a fraction
of the overhead.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

_FINFO = np.finfo(float)
#: scipy's default tolerances: on the bracket's width, absolute and relative, and on ``|f|``
XATOL, XRTOL, FATOL = 4 * _FINFO.smallest_normal, 4 * _FINFO.eps, _FINFO.smallest_normal
#: scipy's default iteration limit: the bisections of the normal floating-point numbers
MAXITER = math.log2(_FINFO.max) - math.log2(_FINFO.smallest_normal)


class Roots(NamedTuple):
    """The root of each element (NaN where the bracket holds no sign change) and whether it converged."""

    x: np.ndarray
    success: np.ndarray


def find_roots(f: Callable, lo, hi, args=(), xatol: float = XATOL) -> Roots:
    """The root of ``f(x, *args)`` (elementwise: each element's value depends on its own ``x`` and
    ``args`` alone) in each bracket ``[lo, hi]`` (1-d arrays, with ``args`` of their shape), as
    ``scipy.optimize.elementwise.find_root(f, (lo, hi), args=args, tolerances={"xatol": xatol})`` gives
    ``x`` and ``success`` (by default scipy's default tolerances).

    Each iteration evaluates ``f`` once on the elements still open: inverse quadratic interpolation
    through the bracket's ends and the point before where Chandrupatla's test admits it, bisection
    otherwise, the step kept half a tolerance inside the bracket; an element stops when ``|f|`` is
    below the smallest normal number or the bracket is narrower than 4 ulps of the root plus ``xatol``."""
    x1, x2 = (np.array(a, dtype=float) for a in np.broadcast_arrays(lo, hi))
    args = [np.array(a, dtype=float) for a in np.broadcast_arrays(x1, *args)[1:]]
    f1 = np.array(f(x1, *args), dtype=float)
    f2 = np.array(f(x2, *args), dtype=float)
    n = x1.size
    x_out, success = np.zeros(n), np.zeros(n, dtype=bool)
    frtol = 0 * np.minimum(np.abs(f1), np.abs(f2))
    work = {"x1": x1, "f1": f1, "x2": x2, "f2": f2, "frtol": frtol}
    active = np.arange(n)
    t = 0.5
    nit = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            stop, xmin, converged, dx, tol = _termination(work, xatol)
            x_out[active[stop]], success[active[stop]] = xmin[stop], converged[stop]
            proceed = ~stop
            active = active[proceed]
            work = {key: value[proceed] for key, value in work.items()}
            args = [a[proceed] for a in args]
            if isinstance(t, np.ndarray):
                t = t[proceed]
            dx, tol = dx[proceed], tol[proceed]
            xmin = xmin[proceed]
            if nit >= MAXITER or active.size == 0:
                break
            if nit > 0:
                t = _next_fraction(work, dx, tol)
            x1, x2, f1 = work["x1"], work["x2"], work["f1"]
            x = x1 + t * (x2 - x1)
            fx = np.asarray(f(x, *args), dtype=float)
            # the new point replaces the end of the bracket with its sign; the end it replaces is kept as x3
            x3, f3 = work["x2"].copy(), work["f2"].copy()
            same = np.sign(fx) == np.sign(f1)
            x3[same], f3[same] = x1[same], f1[same]
            work["x2"][~same], work["f2"][~same] = x1[~same], f1[~same]
            work.update(x1=x, f1=fx, x3=x3, f3=f3)
            nit += 1
    x_out[active], success[active] = xmin, False  # the iteration limit: not converged
    return Roots(x_out, success)


def _termination(work: dict, xatol: float):
    """Which elements stop, the end with the smaller ``|f|`` (NaN without a sign change), whether
    each converged, the bracket's width and the tolerance on it (scipy's ``check_termination``)."""
    x1, f1, x2, f2 = work["x1"], work["f1"], work["x2"], work["f2"]
    nearer = np.abs(f1) < np.abs(f2)
    xmin = np.where(nearer, x1, x2)
    fmin = np.where(nearer, f1, f2)
    converged = np.zeros(x1.shape, dtype=bool)
    stop = np.abs(fmin) <= FATOL + work["frtol"]
    converged |= stop
    failed = ((np.sign(f1) == np.sign(f2)) | ~(np.isfinite(x1) & np.isfinite(x2)) | (np.isnan(f1) & np.isnan(f2)))
    failed &= ~stop
    xmin[failed] = np.nan
    stop |= failed
    dx = np.abs(x2 - x1)
    tol = np.abs(xmin) * XRTOL + xatol
    narrow = dx < tol
    converged[narrow] = True
    stop |= narrow
    return stop, xmin, converged, dx, tol


def _next_fraction(work: dict, dx, tol):
    """Where the next point lies between ``x1`` and ``x2``: inverse quadratic interpolation through
    the three points where Chandrupatla's test admits it, else the midpoint, kept ``tol / 2`` inside
    (scipy's ``post_termination_check``)."""
    x1, f1, x2, f2, x3, f3 = (work[k] for k in ("x1", "f1", "x2", "f2", "x3", "f3"))
    xi1 = (x1 - x2) / (x3 - x2)
    phi1 = (f1 - f2) / (f3 - f2)
    alpha = (x3 - x1) / (x2 - x1)
    j = ((1 - np.sqrt(1 - xi1)) < phi1) & (phi1 < np.sqrt(xi1))
    f1j, f2j, f3j, alphaj = f1[j], f2[j], f3[j], alpha[j]
    t = np.full_like(alpha, 0.5)
    t[j] = (f1j / (f1j - f2j) * f3j / (f3j - f2j)
            - alphaj * f1j / (f3j - f1j) * f2j / (f2j - f3j))
    tl = 0.5 * tol / dx
    return np.clip(t, tl, 1 - tl)

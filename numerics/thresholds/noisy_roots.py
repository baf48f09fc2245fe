"""Roots of a function known only to within a stated noise (a quadrature's error): a root with its
error bar, stopped where further evaluations could only move it within that error
(:func:`root_within_noise`); a root moved onto a finer rule's value at one point, with the coarse
rule's samples for its shape (:func:`shifted_root`), and a located root refined so once
(:func:`refined_root`); and the onset of a pitchfork from the overlap growing out of zero
(:func:`pitchfork_onset`). The noisy strategy of the threshold locator
(:mod:`numerics.thresholds.noisy`) uses them on QMC fixed points."""
from __future__ import annotations

import logging
import math
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import brentq

from numerics.channel.qmc.precision import refined
from numerics.solver.iteration import SolverError
from numerics.thresholds.record import ThresholdLocationError

log = logging.getLogger(__name__)

#: the smallest root-finding tolerance in alpha; below it the stated errors dominate anyway
MIN_XTOL = 1e-4
#: the noises within which the root finder stops where the root is refined on a finer rule
#: afterwards: the rank-2 birth then takes one solve and multiplier at fast fewer (about 2 of 15 minutes)
REFINED_STOP = 3.0


def stated_error(p, field: str) -> float:
    """The stated error of ``field`` at the fixed point ``p``; NaN where its precision mode states none
    (the line quadrature's draft mode), which makes a root's error NaN too."""
    e = p.error.get(field)
    return float(e) if e is not None else math.nan


class _ZeroWithinNoise(Exception):
    """``f`` at ``at``, inside the bracket, is zero within its noise: the root finder stops there."""

    def __init__(self, at: float):
        super().__init__(at)
        self.at = at


def root_within_noise(f, lo: float, hi: float, noise: Callable[[float], float],
                      refined_above: Callable[[], float] = lambda: math.inf) -> tuple:
    """The root of ``f`` in ``[lo, hi]`` with its error.

    Brent's method to a tolerance below the noise; its error is the noise in ``f`` over the slope at
    the root, plus the tolerance. It stops early at a point ``a`` inside the bracket where ``|f(a)|``
    is within the noise there, as further evaluations could only move the root within its error:
    the root is then ``a - f(a) / s``, with ``s`` the secant to the nearest point where ``f`` has the
    other sign, and its error ``noise(a) / |s|`` plus ``|f(a)|`` times the secant's own error
    (the two points' noises in quadrature over their distance) over ``s^2``. The line's curvature
    enters at second order in a distance below ``noise / |s|`` and is left out. ``refined_above()``
    (asked once ``f`` is known at both ends): where the noise over the bracket's slope is above it,
    the root is refined afterwards on a finer rule (:func:`refined_root`), which needs only the shape of
    ``f`` near it, and the search stops within :data:`REFINED_STOP` noises instead (the curvature then
    enters at a distance below ``REFINED_STOP noise / |s|``, and the refinement's shape carries it)."""
    f_lo, f_hi = f(lo), f(hi)
    if not f_lo * f_hi <= 0:
        # the scan's order of the branches is not the located one (a scan point that a solve missed)
        raise ThresholdLocationError(f"no sign change on [{lo:g}, {hi:g}] ({f_lo:.3g}, {f_hi:.3g}) where the scan "
                                    f"put one")
    slope0 = (f_hi - f_lo) / (hi - lo)
    n0 = noise(lo)
    xtol = max(MIN_XTOL, 0.3 * n0 / abs(slope0)) if slope0 != 0 and math.isfinite(n0) else MIN_XTOL
    seen = {lo: f_lo, hi: f_hi}
    within = REFINED_STOP if slope0 != 0 and n0 / abs(slope0) > refined_above() else 1.0

    def g(a):
        if a not in seen:
            seen[a] = f(a)
            if abs(seen[a]) <= within * noise(a):
                raise _ZeroWithinNoise(a)
        return seen[a]

    try:
        root = brentq(g, lo, hi, xtol=xtol, rtol=4 * np.finfo(float).eps, maxiter=40)
    except _ZeroWithinNoise as stop:
        a, fa = stop.at, seen[stop.at]
        other = min((x for x in seen if x != a and seen[x] * fa <= 0 and seen[x] != 0), key=lambda x: abs(x - a))
        slope = (seen[other] - fa) / (other - a)
        slope_error = math.hypot(noise(a), noise(other)) / abs(other - a)
        error = noise(a) / abs(slope) + abs(fa) * slope_error / slope**2
        return float(a - fa / slope), float(error), {"slope": float(slope), "xtol": float(xtol),
                                                     "evaluations": len(seen), "stopped_within_noise_at": float(a),
                                                     "samples": _samples(seen, noise)}
    # the slope from the two solved points nearest the root
    near = sorted(seen, key=lambda a: abs(a - root))[:2]
    slope = (seen[near[0]] - seen[near[1]]) / (near[0] - near[1]) if near[0] != near[1] else slope0
    slope = slope if slope != 0 else slope0
    error = noise(root) / abs(slope) + xtol
    return float(root), float(error), {"slope": float(slope), "xtol": float(xtol), "evaluations": len(seen),
                                       "samples": _samples(seen, noise)}


def _samples(seen: dict, noise: Callable[[float], float]) -> list:
    """``[alpha, f, noise]`` at each point the root finder solved, in ``alpha``: what a refinement fits."""
    return [[float(a), float(seen[a]), float(noise(a))] for a in sorted(seen)]


def pitchfork_onset(alphas: Sequence[float], d: Sequence[float], d_error: Sequence[float]) -> tuple:
    """``(alpha_s, error, three-point root)`` where an overlap ``d`` growing out of zero as
    ``d^2 ~ alpha - alpha_s`` (a pitchfork) vanishes, from its values at ``alphas`` (nearest the
    onset first; three or more). ``alpha_s`` is the root of the line through ``d^2`` at the nearest
    two points (the least bent by the curvature of ``d^2``); its error is its change to the
    least-squares line through the nearest three (the curvature's effect, larger over the longer
    span) plus the stated error of ``d`` at the nearest point carried through the line.
    NaN where ``d^2`` does not grow."""
    a = np.asarray(alphas[:3], dtype=float)
    d = np.asarray(d[:3], dtype=float)
    slope3, icpt3 = np.polyfit(a, d**2, 1)
    slope2, icpt2 = np.polyfit(a[:2], d[:2] ** 2, 1)
    if not (slope3 > 0 and slope2 > 0) or not (a[0] < a[1]):
        return math.nan, math.nan, math.nan
    root3, root2 = -icpt3 / slope3, -icpt2 / slope2
    # d^2 at the nearest point moved by its stated error moves the root by 2 d delta d / slope
    noise = 2 * d[0] * float(d_error[0]) / slope2
    return float(root2), float(abs(root3 - root2) + noise), float(root3)


def shifted_root(alphas: Sequence[float], values: Sequence[float], errors: Sequence[float], at: float,
                 value: float, value_error: float) -> tuple:
    """``(root, error)`` of a function sampled at ``alphas`` on one rule and at ``at`` on a finer one
    (``value +- value_error``).

    The samples of one rule share its quadrature error: its nodes are the same at every ``alpha``, so
    the error varies slowly along the branch, and the samples fix the function's shape much better
    than its value (two three-token samples 0.009 apart gave a slope within 4% of the bracket's, where
    independent errors would allow 27%). The shape is the polynomial of degree ``min(2, n - 1)``
    fitted to the ``n`` samples (least squares weighted by ``1/errors^2``), moved to pass through the
    finer rule's value at ``at``; the root is that curve's nearest ``at``. Its error: ``value_error``
    over the slope at the root, and the fit's covariance of the shape (slope and curvature; the offset
    drops out) carried through the root, in quadrature; the latter is the covariance of independent
    errors, an upper bound for errors that move together."""
    a, y, e = (np.asarray(v, dtype=float) for v in (alphas, values, errors))
    degree = min(2, len(a) - 1)
    c, cov = np.polyfit(a - at, y, degree, w=1.0 / e, cov="unscaled")
    moved = c.copy()
    moved[-1] = value
    roots = np.roots(moved)
    real = roots[np.abs(roots.imag) <= 1e-12 * (1 + np.abs(roots.real))].real
    if real.size == 0:
        raise ThresholdLocationError(f"the curve through the points at {', '.join(f'{x:g}' for x in a)} moved to "
                                     f"{value:.6g} at {at:g} has no real root")
    r = float(real[np.argmin(np.abs(real))])
    slope = np.polyval(np.polyder(moved), r)
    # d root / d c_k = -(r^(degree - k) - [k = degree]) / p'(r), c highest power first: the fitted
    # offset is replaced by the finer rule's value
    powers = r ** np.arange(degree, -1, -1.0)
    powers[-1] = 0.0
    grad = -powers / slope
    return at + r, float(np.hypot(value_error / slope, np.sqrt(grad @ cov @ grad)))


def refined_root(precision, root: float, error: float, samples: Sequence, fine_value: Callable,
                 details: dict) -> tuple:
    """A root located at ``precision`` with an error above that mode's aim, refined once:
    ``fine_value(rule)`` gives the located function, its stated error and a record for ``details`` at
    the root on :func:`~numerics.channel.qmc.precision.refined`'s rule (four times the points per
    scrambling, for the fixed point and the test error), and the root becomes :func:`shifted_root`'s:
    the shape of ``samples`` (``(alpha, value, error)`` on the located rule) through that value.
    Where the refining solve fails the located root stands, and ``details["refinement"]`` says why."""
    from numerics.fixed_points.errors import BranchNotFound

    fine = refined(precision)
    located = {"root": root, "error": error}
    try:
        value, value_error, record = fine_value(fine)
        # ThresholdLocationError (a SolverError) where the moved curve has no real root
        new_root, new_error = shifted_root(*zip(*samples), at=root, value=value, value_error=value_error)
    except (BranchNotFound, SolverError) as exc:
        log.info("the refinement of the root at %g on the %s rule failed: %s", root, fine.name, exc)
        details["refinement"] = {"rule": fine.name, "located": located, "status": f"not refined: {exc}"}
        return root, error
    log.info("refined on the %s rule: %g +- %.1e (located %g +- %.1e)", fine.name, new_root, new_error, root, error)
    details["refinement"] = {"rule": fine.name, "located": located, "value": value, "value_error": value_error,
                             **record, "status": "refined"}
    return new_root, new_error

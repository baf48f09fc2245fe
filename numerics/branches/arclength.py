"""Pseudo-arclength continuation of a branch in ``alpha`` or ``lam``, through its folds.

The branch is the solution curve of ``G(x, p) = (F(x; p) - x) / s = 0`` (``F`` the saddle-point
map over the branch's free overlaps, ``s`` their scale at the start, ``p`` the parameter). A
continuation in ``p`` alone cannot pass a fold, where the curve turns back in ``p``: there
``dG/dx`` is singular and no solution exists beyond it. Parametrised by arclength, the curve goes
on: each step predicts along the tangent ``t`` (the null vector of the Jacobian of ``G`` in
``y = (z, log p)``, ``z`` the domain coordinates of :class:`~numerics.fixed_points.root_fallback.DomainCoordinates`)
and corrects on the augmented system ``G(y) = 0``, ``t . (y - y_pred) = 0`` (Keller's method),
with MINPACK's hybrid method (``scipy.optimize.root``). After the first step the tangent is the
secant of the last two points, oriented along the way the curve is travelled.

A fold is then seen as what it is: the parameter turns back while every point stays a fixed
point (:attr:`ArcCurve.turns`, :meth:`ArcCurve.folds`).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Tuple

import numpy as np
import scipy.optimize

from derivations import ModelSpec

from numerics.model.bound import bind
from numerics.channel.lines.rule import ChannelRule
from numerics.fixed_points.lines import FLOOR, defining_overlap, line_map, map_jacobian_eigenvalues
from numerics.fixed_points.root_fallback import DomainCoordinates
from numerics.overlaps import COLLAPSE, Overlaps
from numerics.precision import PRECISIONS
from numerics.solver.iteration import OUTSIDE_DOMAIN, _scaled_residual

log = logging.getLogger(__name__)

#: the parameters a branch can be followed in
PARAMETERS = ("alpha", "lam")
#: a corrector's solution is accepted once ``|x - F(x)|`` (relative, as the solver's) is below this
ARC_TOL = 1e-8
#: evaluations of the map that one corrector may spend (a difference Jacobian of four or five
#: columns, then Broyden's updates: 8-15 where the step is right)
CORRECTOR_EVALUATIONS = 40
#: the difference step of the corrector's Jacobian, relative to each coordinate: large against
#: the noise floor of a quadrature map (as in ``solver.root_fixed_point``)
DIFF_STEP = 1e-4


@dataclasses.dataclass(frozen=True)
class ArcPoint:
    """A fixed point on the curve: the parameter's value, the overlaps, and the relative
    residual ``|x - F(x)|`` of the free overlaps there."""

    parameter: float
    overlaps: Overlaps
    residual: float


@dataclasses.dataclass(frozen=True)
class ArcCurve:
    """A branch followed by arclength from its first point; ``stopped`` says why it ended."""

    branch: str
    parameter: str
    points: Tuple[ArcPoint, ...]
    stopped: str
    sigma: float
    evaluations: int = 0      # of the map, the whole continuation's

    @property
    def turns(self) -> Tuple[int, ...]:
        """Indices of the points where the parameter turns back (its steps change sign)."""
        p = np.array([pt.parameter for pt in self.points])
        d = np.diff(p)
        return tuple(i + 1 for i in range(len(d) - 1) if d[i] * d[i + 1] < 0)

    def folds(self) -> list:
        """Each turn as a JSON-safe dict: ``kind``, the parameter at the turn (vertex of the
        parabola of the parameter against arclength through the three points around it), those
        points' parameters and signed defining overlaps, and the largest residual of the points
        past it. ``kind`` is ``fold`` where the defining overlap keeps its sign through the turn,
        ``pitchfork`` where it changes sign: the curve has passed through the trivial point onto
        the branch's mirror image (``Q -> -Q`` maps ``(m, theta)`` to ``(-m, -theta)``, so an
        overlap that vanishes at a turn is met there by its mirror branch: the branch ends by
        vanishing, not in a fold)."""
        out = []
        if len(self.points) < 3:  # a turn needs a point on each side (none where the start failed)
            return out
        y = np.array([[pt.parameter, *pt.overlaps.as_array()] for pt in self.points])
        s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(y / np.maximum(np.abs(y[0]), 1e-6), axis=0),
                                                              axis=1))])
        for i in self.turns:
            a, b, c = np.polyfit(s[i - 1:i + 2], y[i - 1:i + 2, 0], 2)
            vertex = c - b * b / (4 * a) if a != 0 else y[i, 0]
            signed = [self._signed_overlap(pt) for pt in self.points[i - 1:i + 2]]
            out.append({"kind": "fold" if signed[0] * signed[2] > 0 else "pitchfork",
                        "parameter": self.parameter, "turn": float(vertex),
                        "extreme_found": float(y[i, 0]),
                        "parameters": [float(v) for v in y[i - 1:i + 2, 0]],
                        "defining_overlap": signed,
                        "points_past_fold": len(self.points) - i - 1,
                        "largest_residual_past_fold": float(max(pt.residual for pt in self.points[i:]))})
        return out


    def _signed_overlap(self, pt: ArcPoint) -> float:
        value = pt.overlaps.theta / self.sigma**2 if self.branch == "semantic" else pt.overlaps.m
        return float(value)


class _Curve:
    """``G(y)`` for ``y = (z, log p)``: the scaled map residual of the branch at parameter ``p``."""

    def __init__(self, spec: ModelSpec, alpha: float, branch: str, rule: ChannelRule, parameter: str,
                 x0: np.ndarray):
        self.spec, self.alpha, self.branch, self.rule, self.parameter = spec, alpha, branch, rule, parameter
        self.model = bind(spec)
        probe = line_map(self.model, alpha, branch, rule)
        self.coords = DomainCoordinates.of(probe, spec.rho)
        self.free = probe.free
        self.floor = FLOOR[self.free]
        self.scale = np.maximum(np.abs(x0), self.floor)
        self.evaluations = 0

    def map_at(self, p: float):
        if self.parameter == "alpha":
            return line_map(self.model, p, self.branch, self.rule)
        return line_map(bind(dataclasses.replace(self.spec, lam=p)), self.alpha, self.branch, self.rule)

    def y_of(self, p: float, x: np.ndarray) -> np.ndarray:
        return np.append(self.coords.to_z(x), np.log(p))

    def split(self, y) -> tuple:
        return float(np.exp(y[-1])), self.coords.from_z(y[:-1])

    def residual(self, y) -> tuple:
        """``((F(x) - x) / scale, relative residual)`` at ``y``; ``None`` outside the map's domain."""
        p, x = self.split(y)
        try:
            Fx = self.map_at(p)(x)
        except OUTSIDE_DOMAIN + (ValueError,):
            return None
        finally:
            self.evaluations += 1
        if not np.all(np.isfinite(Fx)):
            return None
        return (Fx - x) / self.scale, _scaled_residual(x, Fx, self.floor)

    def jacobian(self, y, g) -> np.ndarray:
        """Forward-difference Jacobian of ``G`` at ``y`` (``g = G(y)``), ``n x (n + 1)``."""
        J = np.empty((g.size, y.size))
        for j in range(y.size):
            h = DIFF_STEP * max(abs(y[j]), 1.0)
            e = np.zeros(y.size)
            e[j] = h
            r = self.residual(y + e)
            if r is None:
                e[j] = -h
                r = self.residual(y + e)
                if r is None:
                    raise FloatingPointError("the Jacobian's difference steps leave the domain")
            J[:, j] = (r[0] - g) / e[j]
        return J


def _tangent(J: np.ndarray, direction: float) -> np.ndarray:
    """The unit null vector of ``J`` (its last right singular vector), its last component
    (``log p``) of the sign of ``direction``."""
    t = np.linalg.svd(J)[2][-1]
    return t if t[-1] * direction > 0 else -t


def _first_point(curve: _Curve, y: np.ndarray, tol: float) -> tuple:
    """The start ``y`` solved at its fixed parameter (the last coordinate pinned) where its residual
    is above ``tol``: ``(y, residual)``, the residual None outside the map's domain."""
    g = curve.residual(y)
    if g is None or g[1] > tol:
        n = y.size - 1
        first = scipy.optimize.root(lambda zz: _or_large(curve.residual(np.append(zz, y[-1])), n), y[:-1],
                                    method="hybr", options=dict(maxfev=CORRECTOR_EVALUATIONS, eps=DIFF_STEP**2))
        y = np.append(first.x, y[-1])
        g = curve.residual(y)
    return y, g


def _corrected(curve: _Curve, y_pred: np.ndarray, t: np.ndarray) -> tuple:
    """The corrector: the fixed point on the hyperplane through the prediction ``y_pred`` normal to
    the tangent ``t``, by MINPACK's hybrid method; ``(y, residual, evaluations spent)``."""
    n = y_pred.size - 1

    def augmented(v):
        r = curve.residual(v)
        return np.append(r[0] if r is not None else np.full(n, 1e3), t @ (v - y_pred))

    before = curve.evaluations
    sol = scipy.optimize.root(augmented, y_pred, method="hybr",
                              options=dict(maxfev=CORRECTOR_EVALUATIONS, eps=DIFF_STEP**2))
    return sol.x, curve.residual(sol.x), curve.evaluations - before


def follow_through_fold(spec: ModelSpec, alpha: float, branch: str, start: Overlaps, parameter: str = "alpha",
                        direction: float = 1.0, rule: Optional[ChannelRule] = None, step: float = 0.05,
                        max_points: int = 30, past_fold: int = 3, bounds: Tuple[float, float] = (1e-6, 1e4),
                        tol: float = ARC_TOL, min_step: float = 1e-3) -> ArcCurve:
    """Follow ``branch`` by pseudo-arclength continuation (module docstring) in ``parameter``
    (``alpha``, or ``lam`` at fixed ``alpha``) from ``start``, a fixed point at ``alpha`` and
    ``spec.lam`` (solved first to ``tol`` where it is not one yet), setting off the way the
    parameter moves by ``direction``'s sign.

    ``step``: the first arclength step in ``y = (z, log p)``; it grows by half after a
    corrector that converged in few evaluations, up to four times ``step``, and is halved
    after one that failed, down to ``min_step``. Stops after ``max_points`` points, or
    ``past_fold`` points after the first turn, or where the parameter leaves ``bounds``,
    or where the corrector fails at the smallest step. ``rule``: the channel rule (default the
    draft rule, global-prox checks on: the map whose fixed points the solver reports)."""
    if parameter not in PARAMETERS:
        raise ValueError(f"parameter: one of {PARAMETERS}, not {parameter!r}")
    if rule is None:
        rule = PRECISIONS["draft"].rule
    p0 = alpha if parameter == "alpha" else spec.lam
    start = Overlaps.of(start)
    curve = _Curve(spec, alpha, branch, rule, parameter, start.as_array()[line_map(bind(spec), alpha, branch, rule).free])
    y = curve.y_of(p0, start.as_array()[curve.free])
    # the first point: the start solved at fixed p (its last coordinate pinned)
    y, g = _first_point(curve, y, tol)
    if g is None or g[1] > tol:
        return ArcCurve(branch, parameter, (), f"the start is not a fixed point (residual "
                        f"{g[1] if g else float('inf'):.2e})", spec.sigma, curve.evaluations)
    points = [_point(curve, y, g[1])]
    t = _tangent(curve.jacobian(y, g[0]), direction)
    h, stopped, previous = step, "", None
    while len(points) < max_points:
        turns = ArcCurve(branch, parameter, tuple(points), "", spec.sigma).turns
        if turns and len(points) - 1 - turns[0] >= past_fold:
            stopped = f"{past_fold} points past the turn"
            break
        y_pred = y + h * t
        y_new, g, spent = _corrected(curve, y_pred, t)
        ok = g is not None and g[1] < tol and np.linalg.norm(y_new - y_pred) <= h
        if ok and defining_overlap(Overlaps.from_array(_full(curve, y_new)), branch, spec.sigma) < COLLAPSE:
            ok = False  # onto the trivial point: not this branch
        if not ok:
            log.debug("arclength: corrector failed at step %.3g (residual %s, %d evaluations)", h,
                      f"{g[1]:.2e}" if g else "outside", spent)
            h *= 0.5
            if h < min_step:
                stopped = f"the corrector failed down to the step {min_step:g}"
                break
            continue
        previous, y = y, y_new
        points.append(_point(curve, y, g[1]))
        p = float(np.exp(y[-1]))
        log.info("arclength %s: %s = %.6g, residual %.1e, %d evaluations, step %.3g", branch, parameter, p, g[1],
                 spent, h)
        if not bounds[0] <= p <= bounds[1]:
            stopped = f"{parameter} left [{bounds[0]:g}, {bounds[1]:g}]"
            break
        secant = y - previous
        t = secant / np.linalg.norm(secant)
        if spent <= 12:
            h = min(1.5 * h, 4 * step)
    else:
        stopped = f"{max_points} points"
    log.info("arclength %s in %s: %d points, %d evaluations; %s", branch, parameter, len(points), curve.evaluations,
             stopped)
    return ArcCurve(branch, parameter, tuple(points), stopped, spec.sigma, curve.evaluations)


def _or_large(r, n: int) -> np.ndarray:
    return r[0] if r is not None else np.full(n, 1e3)


def _full(curve: _Curve, y) -> np.ndarray:
    x = np.zeros(4)
    x[curve.free] = curve.split(y)[1]
    return x


def _point(curve: _Curve, y, residual: float) -> ArcPoint:
    return ArcPoint(curve.split(y)[0], Overlaps.from_array(_full(curve, y)), float(residual))


def fold_eigenvalue(spec: ModelSpec, alpha: float, curve: ArcCurve, rule: Optional[ChannelRule] = None) -> float:
    """The smallest modulus of an eigenvalue of ``I - DF`` at the turning point of ``curve``'s
    first fold (near zero at a fold; :func:`~numerics.fixed_points.lines.map_jacobian_eigenvalues`)."""
    if rule is None:
        rule = PRECISIONS["draft"].rule
    pt = curve.points[curve.turns[0]]
    if curve.parameter == "alpha":
        model, a = bind(spec), pt.parameter
    else:
        model, a = bind(dataclasses.replace(spec, lam=pt.parameter)), alpha
    return float(abs(map_jacobian_eigenvalues(model, a, curve.branch, rule, pt.overlaps)[0]))

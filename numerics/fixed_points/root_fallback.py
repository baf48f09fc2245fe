"""Where the damped Anderson iteration of a branch's map fails (it stalls, or collapses onto the
trivial point from a fixed point that repels it), a root finder on ``x - F(x)`` decides: in
coordinates where every point is in the map's domain (:class:`DomainCoordinates`), from the
iteration's best point and from the solve's start."""
from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Callable, Optional

import numpy as np

from numerics.fixed_points.errors import BranchLost
from numerics.solver.iteration import (OUTSIDE_DOMAIN, ROOT_EVALUATIONS, Budget, SolverError, _scaled_residual,
                                       root_fixed_point)

log = logging.getLogger(__name__)

# A solve that stops at a relative residual above this never came near a fixed point (its image
# differs by 10% in some component); stalls near a fold end below 1e-3
# (docs/studies/positional_small_lam.md). Where other starts fell onto the trivial point, such a
# start does not turn the absence of the branch into a solver failure; nor does a root search that
# stops that far after the iteration fell (:func:`root_fallback`).
WANDERED = 0.1


@dataclasses.dataclass(frozen=True)
class DomainCoordinates:
    """Coordinates of a branch's free overlaps in which every point is in the map's domain:
    ``log q``, ``m``, ``log V`` and ``atanh(theta / sqrt(rho q))`` (``theta^2 < rho q``,
    docs/theory.md, section 2.2). A root finder or a continuation that steps in them never
    proposes a point where the channel's covariance is not positive."""

    names: tuple
    rho: float

    @classmethod
    def of(cls, F, rho: float) -> "DomainCoordinates":
        return cls(tuple(("q", "m", "V", "theta")[i] for i in F.free), float(rho))

    def to_z(self, x) -> np.ndarray:
        full = dict(zip(self.names, x))
        z = []
        for name, value in zip(self.names, x):
            if name in ("q", "V"):
                if value <= 0:
                    raise FloatingPointError(f"{name} = {value} <= 0")
                z.append(np.log(value))
            elif name == "theta":
                z.append(np.arctanh(value / np.sqrt(self.rho * full["q"])))
            else:
                z.append(value)
        z = np.array(z)
        if not np.isfinite(z).all():
            raise FloatingPointError(f"outside the domain: {full}")
        return z

    def from_z(self, z) -> np.ndarray:
        full = dict(zip(self.names, z))
        q = np.exp(full["q"])
        return np.array([np.exp(v) if n in ("q", "V") else (np.tanh(v) * np.sqrt(self.rho * q) if n == "theta" else v)
                         for n, v in zip(self.names, z)])


def root_fallback(F, rho: float, branch: str, previous, x0, tol: float, accept_tol: Optional[float],
                  budget: Optional[Budget], floor: np.ndarray, check: Optional[Callable],
                  lost: Optional[BranchLost]):
    """A root of ``x - F(x)`` (:func:`~numerics.solver.iteration.root_fixed_point`) where the
    Anderson iteration failed: it stalled, or it collapsed onto the trivial point
    (``lost``). The Anderson iteration cannot converge on a fixed point that repels it
    (the positional map's Jacobian has eigenvalues below -1, and near small ``lam`` a
    complex pair outside the unit circle); a root finder converges regardless.

    Solved in coordinates where every point is in the map's domain: ``log q``, ``m``,
    ``log V`` and ``atanh(theta / sqrt(rho q))``, from the iteration's best point (if it
    stalled) and from the solve's start (the continuation's prediction). Returns the
    first converged result, else the best; raises ``lost`` again where the root finder
    too collapsed from every start, or where, after the iteration collapsed, no start's
    search came near a fixed point (its best residual not below :data:`WANDERED`).

    ``F``: the map of the branch's free overlaps (its ``free`` indices and ``alpha``); ``rho``: the
    model's ``sigma^2``; ``floor``: the free overlaps' residual floor; ``check(iteration, x,
    residual)``: raises :class:`BranchLost` where an iterate has left the branch (or None)."""
    coords = DomainCoordinates.of(F, rho)
    to_z, from_z = coords.to_z, coords.from_z

    def in_x(x_z, Fx_z):
        return _scaled_residual(from_z(x_z), from_z(Fx_z), floor)

    starts = [np.asarray(x0, dtype=float)]
    if previous is not None and not np.array_equal(previous.x, starts[0]):
        starts.insert(0, previous.x)
    best, falls = previous, 0

    def image(z, start, z0):
        # at its first point the search evaluates the start itself, not its round trip through the
        # coordinates (an ulp away): the map has it from the iteration's start (SaddlePointMap)
        return to_z(F(start if np.array_equal(z, z0) else from_z(z)))

    for start in starts:
        try:
            z0 = to_z(start)
            res = root_fixed_point(functools.partial(image, start=start, z0=z0), z0, tol=tol,
                                   accept_tol=accept_tol, max_evaluations=ROOT_EVALUATIONS, scale=np.ones_like(z0),
                                   initial_step=0.3, residual=in_x, budget=budget,
                                   callback=(lambda it, z, r: check(it, from_z(z), r)) if check else None)
        except BranchLost as exc:
            log.debug("alpha=%g %s: the root finder too collapsed (%s)", F.alpha, branch, exc)
            falls += 1
            lost = lost or exc
            continue
        except OUTSIDE_DOMAIN as exc:
            log.debug("alpha=%g %s: no root search from %s (%s)", F.alpha, branch, start, exc)
            continue
        res = dataclasses.replace(res, x=from_z(res.x), Fx=from_z(res.Fx),
                                  pairs=previous.pairs if previous is not None else ())
        log.debug("alpha=%g %s: root finder from %s: %s, residual %.2e, %d evaluations", F.alpha, branch, start,
                  "converged" if res.converged else res.stopped, res.residual, res.iterations)
        if res.converged:
            return res
        if best is None or res.residual < best.residual:
            best = res
        if budget is not None and budget.exhausted():
            break
    if best is None or (lost is not None and falls == len(starts) and previous is None):
        raise lost if lost is not None else SolverError(f"alpha={F.alpha:g} {branch}: no root search could start")
    if lost is not None and not best.converged and not best.residual < WANDERED:
        # the root search came near no fixed point: nothing repelled the iteration there, and its
        # fall onto the trivial point stands (at sigma = 1 the positional iteration falls so from
        # every start, flipping the sign of m, while the root search stalls at residuals of 0.5-2)
        log.debug("alpha=%g %s: the root search came near no fixed point (residual %.2e); the fall stands",
                  F.alpha, branch, best.residual)
        raise lost
    return best

"""Starts for the fixed-point solve when the default ones fail (multi-start).

The default starts (``fixed_point.DEFAULT_START``, ``branches.ANCHORS``) are the orders
of magnitude of docs/theory.md, section 3.8, for the softmax model. A regenerated model can have
its fixed points elsewhere. For linear attention (``S(h) = h h^T``) the loss is
concave around ``h = 0``, so at small ``q`` the map gives ``Vhat < -lam/sigma^2``
and an undamped ``V < 0``; its trivial fixed point lies at ``q ~ 0.2-0.6``, where
none of the default starts is (docs/studies/regenerated_models.md).

:func:`search_starts` evaluates the map once on each point of a coarse logarithmic
grid in ``(q, V)``, with the branch's defining overlap a fixed fraction of its
largest value, and ranks the points by how far the map moves them. It is a start
search, not a solve: the solver then runs from the best few. Its cost is one draft
evaluation per grid point (63 points, about 2-3 s on 2 cores), paid only where the
default start has failed.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import List

import numpy as np

from numerics.channel.lines.rule import ChannelRule
from numerics.model.bound import BoundModel
from numerics.overlaps import Overlaps
from numerics.channel.lines.expectations import update_hat_overlaps
from numerics.model.saddle_point import update_overlaps
from numerics.solver.iteration import OUTSIDE_DOMAIN

log = logging.getLogger(__name__)

GRID_Q = tuple(np.geomspace(0.005, 2.0, 9))
GRID_V = tuple(np.geomspace(0.1, 30.0, 7))
# the branch's defining overlap at a start: theta = 0.7 sqrt(rho q) (Cauchy-Schwarz
# bounds it by sqrt(rho q)); |m| = sqrt(q) (the softmax positional branch has
# m / sqrt(q) ~ 1.2 at alpha = 2)
THETA_FRACTION = 0.7
M_FRACTION = 1.0


def _start_on_grid(model: BoundModel, branch: str, q: float, V: float) -> Overlaps:
    m = M_FRACTION * np.sqrt(q) if branch in ("positional", "free") else 0.0
    theta = THETA_FRACTION * np.sqrt(model.spec.rho * q) if branch in ("semantic", "free") else 0.0
    return Overlaps(q=float(q), m=float(m), V=float(V), theta=float(theta))


def map_displacement(model: BoundModel, alpha: float, start: Overlaps, rule: ChannelRule) -> float:
    """``max_i |log(F_i(x) / x_i)|`` over the nonzero overlaps of ``start``: how far one
    undamped step of the map moves it, on the scale of each overlap. ``inf`` where the
    step leaves the domain (``q <= 0``, ``V <= 0``, a sign change) or the map cannot be
    evaluated there."""
    x = start.as_array()
    try:
        side = update_hat_overlaps(model, start, alpha, rule)
        y = update_overlaps(model, side.hats).as_array()
    except OUTSIDE_DOMAIN + (ValueError,) as exc:
        log.debug("start search: map not evaluable at %s (%s)", start, exc)
        return np.inf
    free = x != 0
    ratio = y[free] / x[free]
    if not np.all(np.isfinite(ratio)) or np.any(ratio <= 0):
        return np.inf
    return float(np.max(np.abs(np.log(ratio))))


def search_starts(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, count: int = 3
                  ) -> List[Overlaps]:
    """The ``count`` grid points whose map displacement is smallest, best first (module
    docstring). The rule's global-prox checks are switched off: a start needs no more."""
    rule = dataclasses.replace(rule, check_global=False)
    scored = []
    for q, V in itertools.product(GRID_Q, GRID_V):
        start = _start_on_grid(model, branch, q, V)
        if start.theta**2 >= model.spec.rho * start.q:
            continue
        d = map_displacement(model, alpha, start, rule)
        if np.isfinite(d):
            scored.append((d, start))
    scored.sort(key=lambda pair: pair[0])
    log.info("alpha=%g %s: start search kept %d of %d grid points; best displacement %s", alpha, branch,
             len(scored), len(GRID_Q) * len(GRID_V), f"{scored[0][0]:.3g}" if scored else "none")
    return [start for _, start in scored[:count]]

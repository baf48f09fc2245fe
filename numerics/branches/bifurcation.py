"""Where a branch of the general model grows continuously out of another, located on the parent
(docs/numerics.md, section 12).

A child branch (the rank-2 mixed branch out of the positional one, the three-token semantic
branch out of the trivial point) lives on a subspace that contains the parent's once the parent's
directions are matched to the child's (:func:`embedding`: a trivial direction of the parent takes
the child's new role). The components of the child's subspace that vanish on the parent's (the
``theta`` of the direction that turns semantic, the ``m`` of the one that turns positional) change
sign under a flip that fixes the parent's components, and the map is equivariant under it, so at a
point of the parent the Jacobian of the map has no entries between the new components and the
others. The child is born where an eigenvalue of the new components' block ``J_new`` crosses 1
(``I - DF`` turns singular there, and a fixed point with small new components appears).

:func:`growth_multiplier` computes that eigenvalue at a QMC fixed point of the parent, for each
scrambling at its own fixed point when the solve recorded it (so the spread carries the parent's
quadrature error too). ``J_new`` is a central difference with the nodes held fixed in ``(w, h*)``
rather than in the standard normals: the prox minima then do not move, and a change of the new
components reweights the nodes by the ratio of the Gaussian densities (a likelihood ratio) and
enters the moments and the conjugates where they depend on the overlaps explicitly. The difference
is smooth, so a small step has no truncation error to speak of (the step study says how small);
differencing the map itself with fixed standard normals instead moves the switches of the prox
across nodes, and at draft precision its value at the positional point of alpha = 0.5 (0.914 at a
step of 0.02) moved by 0.012 when the step was doubled, as much as the scramblings' spread. The value is the mean over the scramblings, its
error their spread over ``sqrt(R)`` plus the change of the mean when the step is multiplied by 4.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Optional, Tuple

import numpy as np

from derivations import ModelSpec, packing

from numerics.model.general import bind_general
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.fixed_points.subspaces import BranchSubspace, branch_subspace

#: the central difference's step, relative to each new component's natural scale
#: (``sqrt(q_jj rho)`` for ``theta``, ``sqrt(q_jj)`` for ``m``)
STEP = 1e-3


def embedding(parent: BranchSubspace, child: BranchSubspace) -> Optional[Tuple[int, ...]]:
    """``perm`` with child direction ``j`` taken by parent direction ``perm[j]``: the same role (and
    teacher direction, for a semantic one) or a trivial direction of the parent, and at least one
    such change; None where the child's subspace does not contain the parent's."""
    best = None
    pt, ct = parent.teacher_of(), child.teacher_of()
    for perm in itertools.permutations(range(parent.r)):
        ok, changed = True, 0
        for j, i in enumerate(perm):
            if parent.roles[i] == child.roles[j]:
                ok &= parent.roles[i] != "semantic" or pt[i] == ct[j]
            elif parent.roles[i] == "trivial":
                changed += 1
            else:
                ok = False
        if ok and changed and (best is None or changed < best[0]):
            best = (changed, perm)
    return None if best is None else best[1]


def _permutation_matrix(perm) -> np.ndarray:
    O = np.zeros((len(perm), len(perm)))
    for j, i in enumerate(perm):
        O[i, j] = 1.0
    return O


@dataclasses.dataclass(frozen=True)
class GrowthMultiplier:
    """The eigenvalue of ``J_new`` of largest real part at one parent point (module docstring)."""

    alpha: float
    value: float
    error: float             # scramblings' spread over sqrt(R), plus the step study's change
    statistical: float
    step_change: float       # |mean at 2 STEP - mean at STEP|
    per_scramble: tuple
    new_components: tuple    # their names in the child's gauge

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _log_density(model, ov: MatrixOverlaps, w: np.ndarray, hs: np.ndarray) -> np.ndarray:
    """``log p(w, h*)`` per node up to a constant that does not depend on ``ov``: the tokens'
    ``(w_l, h*_l)`` are independent Gaussians of mean ``((P m)_l, 0)`` and covariance
    ``Sigma = [[q, theta], [theta^T, rho]]`` (docs/theory.md, section 4.2)."""
    L, r, t, _ = model.shape
    Sigma = np.block([[ov.q, ov.theta], [ov.theta.T, model.spec.rho * np.eye(t)]])
    x = np.concatenate([(w - model.positional_mean(ov.m)[None, :]).reshape(len(w), L, r),
                        hs.reshape(len(w), L, t)], axis=-1)
    inv = np.linalg.inv(Sigma)
    return -0.5 * np.einsum("nli,ij,nlj->n", x, inv, x) - 0.5 * L * np.linalg.slogdet(Sigma)[1]


def _reported(forms: dict, form: str) -> dict:
    """The conjugates in the rule's form (``dl``: ``Vhat`` and ``thetahat`` through ``dl/dh*``)."""
    suffix = "_dl" if form == "dl" else ""
    return {"qhat": forms["qhat"], "mhat": forms["mhat"], "Vhat": forms["Vhat" + suffix],
            "thetahat": forms["thetahat" + suffix]}


def _scramble_multipliers(spec: ModelSpec, alpha: float, child: str, precision: str, new: tuple, names: tuple,
                          direction: tuple, steps: tuple, item: tuple) -> list:
    """The multiplier of scrambling ``j`` at its point ``ov0`` (``item``) at each relative step of
    ``steps`` (:func:`growth_multiplier`; a function of its arguments alone, for a mapper)."""
    from numerics.matrix_overlaps import MatrixHats
    from numerics.channel.qmc.channel import QMCChannel
    from numerics.channel.qmc.nodes import preactivations
    from numerics.channel.qmc.precision import as_qmc_precision
    from numerics.fixed_points.qmc import prior_image

    j, ov0 = item
    shape = ov0.shape
    model = bind_general(spec)
    rule = as_qmc_precision(precision).rule
    child_sub = branch_subspace(child, shape)
    channel = QMCChannel(model, rule, child_sub)
    new = list(new)
    channel.estimate(ov0, alpha, [j], dense_check=True)  # the global prox minima at the point
    rows = channel.nodes.rows(j)
    _, hs, w = preactivations(channel.nodes, ov0, spec.rho, model.positional_mean(ov0.m), rows)
    hmin = channel.prox(w, hs, ov0.V, rows, full=False)[0]
    base = _log_density(model, ov0, w, hs)
    x0 = ov0.pack()

    def image_at(ov):
        weight = np.exp(_log_density(model, ov, w, hs) - base)
        moments = model.channel_moments(hmin, w - model.positional_mean(ov.m)[None, :], hs, ov.m, ov.V)
        moments[:, channel.odd] = 0.0
        means = weight @ moments / weight.sum()
        forms = model.conjugates_from_moments(alpha, means[:-1], ov.q, ov.theta)
        hats = child_sub.project(MatrixHats(shape, **_reported(forms, rule.form)))
        return prior_image(model, child_sub, hats).pack()[new]

    out = []
    for h in steps:
        J = np.empty((len(new), len(new)))
        for c, component in enumerate(new):
            d = direction[component]
            dx = np.zeros_like(x0)
            dx[component] = h * float(np.sqrt(ov0.q[d, d] * (spec.rho if names[c].startswith("theta") else 1.0)))
            J[:, c] = (image_at(MatrixOverlaps.unpack(shape, x0 + dx))
                       - image_at(MatrixOverlaps.unpack(shape, x0 - dx))) / (2 * dx[component])
        ev = np.linalg.eigvals(J)
        out.append(float(ev[np.argmax(ev.real)].real))
    return out


def growth_multiplier(spec: ModelSpec, parent_point, child: str, precision: str, step: float = STEP,
                      mapper=None) -> GrowthMultiplier:
    """The multiplier of the child branch ``child``'s new direction at ``parent_point`` (a QMC
    :class:`~numerics.result.FixedPoint` of the parent branch), on the rule of ``precision`` (a QMC
    mode or its name), which should be the one the point was solved on.

    The derivative is taken with the nodes fixed in ``(w, h*)`` (the prox minima do not move, so
    the difference is smooth): a change of the new components reweights the nodes by the ratio of
    the Gaussian densities (self-normalised per scrambling) and enters the moments and the
    conjugates where they depend on ``m``, ``q`` and ``theta`` explicitly. ``mapper(function,
    items)``: how the scramblings, independent of each other, are computed (default one after
    another here; a Dask client's ``map`` on workers)."""
    from numerics.channel.qmc.precision import as_qmc_precision

    shape = parent_point.overlaps.shape
    parent_sub = branch_subspace(parent_point.branch, shape)
    child_sub = branch_subspace(child, shape)
    perm = embedding(parent_sub, child_sub)
    if perm is None:
        raise ValueError(f"the {child} branch's subspace does not contain the {parent_point.branch} branch's")
    O = _permutation_matrix(perm)
    rule = as_qmc_precision(precision).rule
    alpha = parent_point.alpha
    free = child_sub.free_mask(shape)
    ones = parent_sub.project(MatrixOverlaps.unpack(shape, np.ones(len(free))))
    new = np.nonzero(free & (ones.rotated(O).pack() == 0))[0]
    names = tuple(MatrixOverlaps.component_names(shape)[c] for c in new)
    stored = parent_point.diagnostics.get("scramble_fixed_points")
    points = ([MatrixOverlaps.unpack(shape, x) for x in stored] if stored
              else [parent_point.overlaps] * rule.scrambles)
    at = [p.rotated(O) for p in points]
    # the student direction of each component, for the natural scale of its step
    direction = [i if name == "theta" else j for name in MatrixOverlaps.NAMES
                 for i, j in packing.matrix_index(*packing.dimensions(name, shape))]

    R = rule.scrambles
    task = functools.partial(_scramble_multipliers, spec, alpha, child, precision, tuple(int(c) for c in new), names,
                             tuple(direction), (step, 4 * step))
    per, coarse = np.array(list((mapper or map)(task, [(j, at[j]) for j in range(R)]))).T
    statistical = float(per.std(ddof=1) / np.sqrt(R))
    step_change = float(abs(coarse.mean() - per.mean()))
    return GrowthMultiplier(float(alpha), float(per.mean()), statistical + step_change, statistical,
                            step_change, tuple(float(v) for v in per), names)

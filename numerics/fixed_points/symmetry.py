"""Symmetries of the channel integral, found numerically and used to fold the teacher rule.

A pair of signed token permutations ``(G_w, G_h)`` is a symmetry of the channel
(docs/theory.md, section 3.2) when

1. the Gaussian law of ``(w, h*)`` is invariant: ``G_w mu_w = mu_w`` and
   ``D Sigma D^T = Sigma`` with ``D = diag(G_w, G_h)``;
2. the prox objective is invariant: ``|G_w h - G_w w|^2 / (2V) + l(G_w h; G_h h*)``
   equals the original at every point. Then the global prox is equivariant,
   ``prox(G_w w, G_h h*) = G_w prox(w, h*)``.

Each generated channel integrand then picks up a sign ``chi = +-1`` (measured here at
random points, not assumed). An integrand odd under a symmetry has expectation
exactly zero (``E = E o g = -E``). For the even ones the inner integral over the
student direction for a teacher node ``eta`` equals that for ``g eta``. The teacher
rule can therefore be folded: one node per orbit, carrying the orbit's summed weight.

For the default model (``A`` commutes with the token swap) this gives:

* on the semantic branch (``m = 0``): the flip ``(xi, y) -> -(xi, y)`` and the swap;
* on the positional branch (``theta = 0``): the teacher sign ``y -> -y`` and the swap
  combined with the flip.

Each of these is a group of four maps, so the teacher rule shrinks by a factor of
about four. Nothing is assumed about ``A`` or the model: a candidate that fails a
check is simply not used.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging

import numpy as np

log = logging.getLogger(__name__)

_CHECK_POINTS = 64
_LOSS_RTOL = 1e-12
_CHARACTER_RTOL = 1e-9


def _signed_permutations():
    mats = []
    for perm in ((0, 1), (1, 0)):
        for signs in itertools.product((1.0, -1.0), repeat=2):
            M = np.zeros((2, 2))
            M[0, perm[0]], M[1, perm[1]] = signs
            mats.append(M)
    return mats


def _candidate_pairs():
    """The 64 candidate pairs ``(G_w, G_h)`` and the stacks ``(64, 2, 2)`` of ``G_w`` and ``(64, 4, 4)``
    of ``D = diag(G_w, G_h)``, made once: every evaluation of the map tests them all."""
    pairs = list(itertools.product(_signed_permutations(), repeat=2))
    D = np.zeros((len(pairs), 4, 4))
    for k, (G_w, G_h) in enumerate(pairs):
        D[k, :2, :2], D[k, 2:, 2:] = G_w, G_h
    return pairs, D[:, :2, :2].copy(), D


_PAIRS, _G_W, _D = _candidate_pairs()


@dataclasses.dataclass(frozen=True)
class ChannelSymmetry:
    """``(w, h*) -> (G_w w, G_h h*)`` with the sign of each channel integrand (CHANNEL_NAMES order)."""

    G_w: np.ndarray
    G_h: np.ndarray
    characters: tuple

    @property
    def is_identity(self) -> bool:
        return bool(np.array_equal(self.G_w, np.eye(2)) and np.array_equal(self.G_h, np.eye(2)))


def channel_symmetries(model, ov, mu_w, B, seed: int = 0) -> list:
    """Every signed-permutation symmetry of the channel at these overlaps, identity included.

    ``mu_w`` and ``B`` are the affine preactivation map ``(w, h*) = (mu_w, 0) + B (xi, y)``.
    The returned set is closed under composition (a group). The objective at the mapped points of
    every candidate whose law is invariant, and then the integrands of every candidate whose
    objective is, are each one generated call (the candidates one by one cost more in call
    overhead than in arithmetic, at every evaluation of the map)."""
    rng = np.random.default_rng(seed)
    cov = B @ B.T
    scale = np.sqrt(np.max(np.abs(np.diag(cov))))
    B_inv = np.linalg.inv(B)
    h = rng.normal(size=(2, _CHECK_POINTS)) * scale
    z = rng.normal(size=(4, _CHECK_POINTS))
    pre = np.concatenate([mu_w, np.zeros(2)])[:, None] + B @ z
    w, hs = pre[:2], pre[2:]
    # the candidates whose Gaussian law is invariant, all tested at once (a signed permutation maps
    # each entry to one entry: the products are exact, whatever the order of the sums)
    mean_moved = np.max(np.abs(_G_W @ mu_w - mu_w), axis=1) > 1e-13 * scale
    cov_moved = np.max(np.abs(_D @ cov @ _D.transpose(0, 2, 1) - cov), axis=(1, 2)) > 1e-13 * scale**2
    candidates = [(G_w, G_h, D) for (G_w, G_h), D, moved in zip(_PAIRS, _D, mean_moved | cov_moved) if not moved]
    # the objective at the points and at every candidate's images of them
    images = [(h, w, hs)] + [(G_w @ h, G_w @ w, G_h @ hs) for G_w, G_h, _ in candidates]
    objective = model.prox_objective(*(np.concatenate([x[k][i] for x in images]) for k in range(3) for i in range(2)),
                                     ov.V).reshape(len(images), _CHECK_POINTS)
    f0 = objective[0]
    invariant = [c for c, f1 in zip(candidates, objective[1:])
                 if not np.max(np.abs(f1 - f0)) > _LOSS_RTOL * np.max(np.abs(f0))]
    # the integrands at the points and at the images of every candidate that leaves the objective invariant
    points = [(h, z)] + [(G_w @ h, B_inv @ (D @ (B @ z))) for G_w, _, D in invariant]
    values = np.array(model.channel_integrands(*(np.concatenate([p[0][i] for p in points]) for i in range(2)),
                                               *(np.concatenate([p[1][i] for p in points]) for i in range(4)),
                                               ov.q, ov.m, ov.V, ov.theta)).reshape(-1, len(points), _CHECK_POINTS)
    # each integrand's character under each candidate: +1 where it is even, -1 where odd (tested in that
    # order), 0 where neither (then the candidate is no symmetry), all at once
    base, mapped = values[:, :1], values[:, 1:]
    tol = _CHARACTER_RTOL * np.maximum(np.max(np.abs(base), axis=2), 1e-300)
    even = np.max(np.abs(mapped - base), axis=2) <= tol
    odd = np.max(np.abs(mapped + base), axis=2) <= tol
    characters = np.where(even, 1, np.where(odd, -1, 0))
    found = []
    for (G_w, G_h, _), chi in zip(invariant, characters.T):
        if np.all(chi != 0):
            found.append(ChannelSymmetry(G_w, G_h, tuple(int(x) for x in chi)))
        else:
            log.debug("candidate symmetry G_w=%s G_h=%s leaves the loss invariant but not the integrands",
                      G_w.tolist(), G_h.tolist())
    return found


#: a direction with an irrational slope: the nodes' projections on it are distinct by far more than
#: the matching tolerance (a lattice's nodes would tie on an axis)
_PROJECTION = np.array([1.0, 0.6180339887498949])


def _matching_nodes(points, nodes, tol):
    """For each point, the index of the nearest node if it lies within ``tol``, or None when some
    point has no node within ``tol``.

    Sorted projections rather than a k-d tree (``scipy.spatial`` would be a quarter of a cold
    command's imports): a node within ``tol`` of a point has its projection within
    ``w = tol |direction|_1`` of the point's, so only the nodes in that window are candidates, and
    the answer is the k-d tree's exactly."""
    key = nodes @ _PROJECTION
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    projected = points @ _PROJECTION
    w = tol * np.abs(_PROJECTION).sum()
    lo = np.searchsorted(sorted_key, projected - w, side="left")
    hi = np.searchsorted(sorted_key, projected + w, side="right")
    if np.any(hi == lo):
        return None
    index = order[np.minimum(lo, len(order) - 1)]
    for row in np.flatnonzero(hi - lo > 1):  # several candidates: the nearest
        candidates = order[lo[row]:hi[row]]
        index[row] = candidates[np.argmin(((nodes[candidates] - points[row]) ** 2).sum(axis=1))]
    if np.any(((nodes[index] - points) ** 2).sum(axis=1) > tol * tol):
        return None
    return index


def fold_teacher_nodes(e1, e2, weight, L_hh, symmetries):
    """Keep one teacher node per orbit of the symmetries that map the node set onto itself,
    with the orbit's summed weight. Returns ``(e1, e2, weight, used)`` where ``used``
    are the symmetries applied (a subgroup)."""
    nodes = np.stack([e1, e2], axis=1)
    L_inv = np.linalg.inv(L_hh)
    tol = 1e-10 * max(np.max(np.abs(nodes)), 1.0)
    images, used = [], []
    for sym in symmetries:
        action = L_inv @ sym.G_h @ L_hh  # the map on eta
        index = _matching_nodes(nodes @ action.T, nodes, tol)
        if index is None:
            log.debug("symmetry G_h=%s does not map the teacher nodes onto themselves; not folded",
                      sym.G_h.tolist())
            continue
        images.append(index)
        used.append(sym)
    if not images:
        return e1, e2, weight, used
    representative = np.min(np.stack(images), axis=0)
    keep = np.unique(representative)
    folded = np.zeros(nodes.shape[0])
    np.add.at(folded, representative, weight)
    return e1[keep], e2[keep], folded[keep], used

"""The global proximal operator of the non-convex loss (docs/theory.md, section 2.3).

``prox(w, h*) = argmin_h |h - w|^2/(2V) + l(h; h*)``. The loss is not convex in
``h``: a Newton iteration from ``w`` lands in a local minimum, not always the
global one. Two facts make a global search cheap and safe:

* the global minimiser lies in the disk ``|h - w| <= R = sqrt(2 V l(w; h*))``,
  since any point outside it has objective larger than the objective at ``w``;
* the loss depends on ``h`` only through ``h h^T`` for every attention in this
  package, so local minima come in ``+-`` pairs; the reflected point of a
  minimum is a good start for the competing one.

:func:`global_prox` starts Newton from ``w``, from extra starts given by the
caller and from the best points of a polar grid in that disk, and keeps the
lowest objective.
"""
from __future__ import annotations

import functools

import numpy as np

from numerics.model.bound import BoundModel
from numerics.prox.newton import PARALLEL_NODES, newton
from numerics.threads import split_over_threads

def _overflow_is_a_limit(fn):
    """``exp`` overflows in the generated logistic functions far out on the search grid
    or a trial step give the correct limits (a logistic of +-inf is 0 or 1), so they
    are silenced; NaNs are not (they surface in the gradient norm and the channel)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore"):
            return fn(*args, **kwargs)
    return wrapper


def _pairs(*arrays):
    """Pairs of arrays broadcast together, as ``(N, 2)`` arrays of their flattened shape.

    Written column by column into one new array (``np.stack`` of broadcast views cost several
    times as much, and the line quadrature calls this about 50 times per evaluation)."""
    flat = [np.asarray(a, dtype=float) for a in arrays]
    shape = flat[0].shape
    if any(a.shape != shape for a in flat):
        flat = np.broadcast_arrays(*flat)
        shape = flat[0].shape
    size = flat[0].size
    pairs = []
    for i in range(0, len(flat), 2):
        pair = np.empty((size, 2))
        pair[:, 0], pair[:, 1] = flat[i].reshape(size), flat[i + 1].reshape(size)
        pairs.append(pair)
    return shape, pairs


@_overflow_is_a_limit
def newton_prox(model: BoundModel, h1, h2, w1, w2, hs1, hs2, V, tol: float = 1e-13, maxiter: int = 60,
                known=None, capture: float = 1e-3, return_terms: bool = False, teacher=None):
    """Saddle-free Newton descent on the prox objective from ``(h1, h2)`` at every node (arrays
    broadcast together): the one local solver of every prox (:func:`numerics.prox.newton.newton`, by
    the model's backend) in ``R^2``, on the objective's terms in the teacher's matrix ``T(h*)``,
    computed once per node (:meth:`BoundModel.teacher_matrix`). Returns ``(h1, h2, gradient_norm,
    objective)`` (the gradient norm the largest component, the objective at the returned points);
    nodes whose gradient norm is still above ``tol`` after ``maxiter`` steps are reported through
    that norm, never hidden.

    ``known = (k1, k2)``: a local minimum per node already found. Nodes whose iterate comes
    within ``capture`` (max norm) of it stop there (they are converging to that minimum, and
    their objective is not below it), which is all a check needs; their gradient norm is NaN.
    ``return_terms``: also return ``(objective, g1, g2, H11, H12, H22)`` at the returned points
    (the reflected start of :mod:`numerics.channel.lines` derives its own from them).
    ``teacher``: the nodes' teacher matrices (:meth:`BoundModel.teacher_matrix`) where the caller has them,
    ``(N, 4)`` for ``N`` nodes in the inputs' flattened order (the line quadrature computes them once
    per line; a call computes them from ``hs1, hs2`` otherwise).
    """
    # the pre-activations only where the teacher's matrices are to be computed from them
    args = (h1, h2, w1, w2) + ((hs1, hs2) if teacher is None else ()) + (() if known is None else tuple(known))
    shape, pairs = _pairs(*args)
    h, w = pairs[:2]
    out, f, gn = newton(model, h, w, model.teacher_matrix(pairs[2]) if teacher is None else teacher, V, tol, maxiter,
                        known=None if known is None else pairs[-1], capture=capture)
    b1, b2 = out[:, 0].reshape(shape), out[:, 1].reshape(shape)
    result = (b1, b2, gn.reshape(shape), f.reshape(shape))
    if return_terms:
        result += (model.prox_newton(b1, b2, w1, w2, hs1, hs2, V),)
    return result


#: the max-norm distance within which a start of :func:`global_prox` is taken as captured by the
#: minimum from ``w`` (as a check's Newton is by the followed branch, :func:`newton_prox`)
CAPTURE = 1e-3


@functools.lru_cache(maxsize=8)
def _polar_grid(n_angles: int, n_radii: int) -> tuple:
    """The polar grid of :func:`global_prox` in the unit disk: ``(radii, directions)``, point ``g`` at
    ``radii[g] * directions[g]`` (radius by radius, angles ``2 pi k / n_angles`` within each), read-only."""
    angles = np.linspace(0.0, 2.0 * np.pi, n_angles, endpoint=False)
    radii = np.repeat(np.arange(1, n_radii + 1) / n_radii, n_angles)
    a = np.tile(angles, n_radii)
    directions = np.stack([np.cos(a), np.sin(a)], axis=-1)
    for array in (radii, directions):
        array.flags.writeable = False
    return radii, directions


@_overflow_is_a_limit
def global_prox(model: BoundModel, w1, w2, hs1, hs2, V, starts=(), n_angles: int = 12, n_radii: int = 4,
                keep: int = 3, tol: float = 1e-13, teacher=None):
    """Global minimiser of the prox objective: Newton from ``w``, from ``starts``
    (pairs of arrays), and from the ``keep`` best points of a polar grid of
    ``n_angles x n_radii`` points in the disk that must contain the global minimum.
    ``teacher``: the nodes' teacher matrices where the caller has them (:func:`newton_prox`).

    Returns ``(h1, h2, objective, gradient_norm)``.
    """
    w1, w2, hs1, hs2 = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (w1, w2, hs1, hs2)))
    radius = np.sqrt(2.0 * V * np.maximum(model.loss(w1, w2, hs1, hs2), 0.0))
    radii, directions = _polar_grid(n_angles, n_radii)
    keep = min(keep, radii.size)
    candidates = [(w1, w2)] + [tuple(np.broadcast_to(a, w1.shape) for a in s) for s in starts]
    T = model.teacher_matrix(_pairs(hs1, hs2)[1][0]) if teacher is None else teacher
    if model.backend == "compiled":
        # the grid's objectives and their order in one compiled pass over the nodes (the numpy
        # reference below builds the whole grid, some 48 temporaries' worth per node)
        w_flat = _pairs(w1, w2)[1][0]
        T_flat, r_flat = np.ascontiguousarray(T, dtype=float), radius.reshape(-1)
        rest = (np.asarray(model.pack("V", V), dtype=float), np.asarray(model.params, dtype=float))

        def grid(part):  # node by node: side by side in the kernels' threads on many nodes
            return (model.gm.grid_prox_newton_of_T(w_flat[part], T_flat[part], *rest, r_flat[part], radii,
                                                   directions, keep).transpose(1, 0, 2),)

        best = split_over_threads(grid, len(w_flat), PARALLEL_NODES)[0].transpose(1, 0, 2)
        candidates += [(best[k, :, 0].reshape(w1.shape), best[k, :, 1].reshape(w1.shape)) for k in range(keep)]
    else:
        # the whole grid in one call (per-call overhead dominates for small node sets)
        r_grid = radii.reshape((-1,) + (1,) * w1.ndim)
        cos_grid, sin_grid = (directions[:, j].reshape((-1,) + (1,) * w1.ndim) for j in (0, 1))
        grid_h1 = w1 + r_grid * radius * cos_grid
        grid_h2 = w2 + r_grid * radius * sin_grid
        grid_f = model.prox_objective(grid_h1, grid_h2, w1, w2, hs1, hs2, V)
        best = np.argsort(grid_f, axis=0, kind="stable")[:keep]
        candidates += [(np.take_along_axis(grid_h1, best[k:k + 1], 0)[0],
                        np.take_along_axis(grid_h2, best[k:k + 1], 0)[0]) for k in range(keep)]
    # Newton from w first; then every other start in one batch, each stopped where it comes within
    # CAPTURE of the minimum from w (it converges to that minimum, which cannot be lower than itself:
    # a stopped start is no candidate). Only a converged minimum captures. The lowest objective wins
    # (ties: the earliest start).
    w_pair = _pairs(w1, w2)[1][0]
    first, f_first, gn_first = newton(model, w_pair, w_pair, T, V, tol)  # candidates[0] is w
    known = np.where((gn_first < tol)[:, None], first, np.inf)
    n_starts = len(candidates) - 1
    s1 = np.stack([c[0] for c in candidates[1:]])
    s2 = np.stack([c[1] for c in candidates[1:]])
    rep = lambda a: np.broadcast_to(a, (n_starts,) + a.shape)  # noqa: E731
    shape, (h, w) = _pairs(s1, s2, rep(w1), rep(w2))
    out, f, gn = newton(model, h, w, np.tile(T, (n_starts, 1)), V, tol, known=np.tile(known, (n_starts, 1)),
                        capture=CAPTURE)
    f = np.where(np.isnan(gn), np.inf, f)
    c1, c2, f, gn = out[:, 0].reshape(shape), out[:, 1].reshape(shape), f.reshape(shape), gn.reshape(shape)
    out = [first[:, 0].reshape(w1.shape), first[:, 1].reshape(w1.shape), f_first.reshape(w1.shape),
           gn_first.reshape(w1.shape)]
    for k in range(n_starts):
        better = f[k] < out[2]
        out = [np.where(better, new, old) for new, old in zip((c1[k], c2[k], f[k], gn[k]), out)]
    return tuple(out)

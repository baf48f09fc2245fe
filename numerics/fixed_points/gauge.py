"""A canonical orientation of the matrix order parameters, and the alignment of two points of the
same orbit (docs/theory.md, section 4.9).

The order parameters are defined up to ``h -> h O`` (``O`` in ``O(r)``) and ``h* -> h* W`` (``W`` in
``O(t)``). The saddle-point map is equivariant, so its fixed points come in orbits, and an iteration
can drift along them. :func:`canonical` picks one point of each orbit; the solver composes the map
with it, which keeps the fixed points (each orbit's canonical point is a fixed point of the
composition if and only if the orbit is a fixed orbit of the map). On a branch's subspace
(:mod:`numerics.fixed_points.subspaces`) ``theta`` is already diagonal and only rotations within groups of
student directions remain (:meth:`~numerics.fixed_points.subspaces.BranchSubspace.gauge_blocks`). Within each:

1. Gram-Schmidt on the columns of ``[theta, m^T]`` restricted to the group, in order, skipping
   columns already in the span (relative tolerance ``RANK_TOL``): ``[theta, m^T]`` becomes upper
   triangular there with a positive leading entry in each row;
2. the directions no column reaches: ``q`` diagonal there (eigenvalues descending), each
   direction's sign chosen so that its largest coupling (in ``q``, else in ``V``) to the other
   directions is positive.

Near a symmetric point (a coupling that vanishes, equal eigenvalues) that choice turns with the
noise of a quadrature; :func:`alignment` (the rotation bringing one point nearest another) is what
compares and averages points.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence, Tuple

import numpy as np

from numerics.matrix_overlaps import MatrixOverlaps

#: a column whose component orthogonal to the previous ones is below this times the largest
#: column norm is taken to lie in their span
RANK_TOL = 1e-9


def _sign_of_largest(v: np.ndarray) -> float:
    if v.size == 0 or not np.any(np.abs(v) > 0):
        return 1.0
    return 1.0 if v.flat[int(np.argmax(np.abs(v)))] >= 0 else -1.0


def _block_rotation(ov: MatrixOverlaps, theta: np.ndarray, block: Sequence[int]) -> np.ndarray:
    """The orthogonal ``n x n`` matrix (``n = len(block)``) orienting the student directions ``block``."""
    J = list(block)
    n = len(J)
    columns = np.concatenate([theta[J, :], ov.m[:, J].T], axis=1)
    scale = float(np.max(np.linalg.norm(columns, axis=0), initial=0.0))
    basis = []
    for c in range(columns.shape[1]):
        if len(basis) == n:
            break
        v = columns[:, c].copy()
        for b in basis:
            v -= (b @ v) * b
        if scale > 0 and np.linalg.norm(v) > RANK_TOL * scale:
            basis.append(v / np.linalg.norm(v))
    spanned = len(basis)
    if spanned < n:
        # the remaining directions: the orthogonal complement, with q diagonal on it
        B = np.array(basis).reshape(-1, n).T
        projector = np.eye(n) - B @ B.T
        w, vecs = np.linalg.eigh(projector)
        complement = vecs[:, w > 0.5]
        qc = complement.T @ ov.q[np.ix_(J, J)] @ complement
        lam, rot = np.linalg.eigh(qc)
        complement = complement @ rot[:, np.argsort(-lam, kind="stable")]
        for v in complement.T:
            basis.append(v)
    O = np.array(basis).T
    # signs of the complement's directions (the spanned ones are fixed by Gram-Schmidt)
    q_rot = O.T @ ov.q[np.ix_(J, J)] @ O
    V_rot = O.T @ ov.V[np.ix_(J, J)] @ O
    for j in range(spanned, n):
        others = [i for i in range(n) if i != j]
        coupling = q_rot[others, j] if np.any(np.abs(q_rot[others, j]) > 0) else V_rot[others, j]
        sign = _sign_of_largest(coupling) if coupling.size else _sign_of_largest(O[:, j])
        O[:, j] *= sign
    return O


def canonical_rotation(ov: MatrixOverlaps, blocks: Optional[Sequence[Sequence[int]]] = None) -> np.ndarray:
    """``O`` such that ``ov.rotated(O)`` is the canonical point of the orbit of ``ov`` (module
    docstring). ``blocks``: groups of student directions allowed to rotate into each other
    (default: all of them)."""
    r = ov.shape.r
    blocks = [tuple(range(r))] if blocks is None else blocks
    O = np.zeros((r, r))
    for block in blocks:
        O[np.ix_(block, block)] = _block_rotation(ov, ov.theta, block)
    return O


def canonical(ov: MatrixOverlaps, blocks: Optional[Sequence[Sequence[int]]] = None) -> MatrixOverlaps:
    """The canonical point of the orbit of ``ov`` (:func:`canonical_rotation`)."""
    return ov.rotated(canonical_rotation(ov, blocks))


def _rotation(params: np.ndarray, n: int) -> np.ndarray:
    """``expm(A)`` of the skew-symmetric ``n x n`` matrix with upper triangle ``params``."""
    from scipy.linalg import expm

    A = np.zeros((n, n))
    A[np.triu_indices(n, 1)] = params
    return expm(A - A.T)


def alignment(ov: MatrixOverlaps, target: MatrixOverlaps, blocks: Optional[Sequence[Sequence[int]]] = None,
              teacher: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """``(O, W)`` such that ``ov.rotated(O, W)`` is the point of the orbit of ``ov`` nearest to
    ``target``: Frobenius distance of the four matrices, each scaled by the size of its entries in
    ``target``, over rotations within each block of student directions (default: one block of all)
    and, with ``teacher``, of the teacher directions, and over every sign of the student and teacher
    directions (scipy's BFGS on the rotation angles from each sign pattern)."""
    from scipy.optimize import minimize

    r, t = ov.shape.r, ov.shape.t
    blocks = [tuple(range(r))] if blocks is None else [tuple(b) for b in blocks]
    scale = {name: max(float(np.max(np.abs(getattr(target, name)), initial=0.0)), 1e-12) for name in ov.NAMES}
    sizes = [len(b) * (len(b) - 1) // 2 for b in blocks] + [t * (t - 1) // 2 if teacher else 0]

    def rotations(params, signs, tsigns):
        O = np.zeros((r, r))
        start = 0
        for b, size in zip(blocks, sizes):
            O[np.ix_(b, b)] = _rotation(params[start:start + size], len(b)) if size else np.eye(len(b))
            start += size
        W = _rotation(params[start:], t) if sizes[-1] else np.eye(t)
        return O * signs[None, :], W * tsigns[None, :]

    def distance(params, signs, tsigns):
        O, W = rotations(params, signs, tsigns)
        rotated = ov.rotated(O, W)
        return sum(float(np.sum((getattr(rotated, n) - getattr(target, n)) ** 2)) / scale[n] ** 2 for n in ov.NAMES)

    best = (np.inf, None)
    x0 = np.zeros(sum(sizes))
    for signs in itertools.product((1.0, -1.0), repeat=r):
        for tsigns in itertools.product((1.0, -1.0), repeat=t):
            s, ts = np.array(signs), np.array(tsigns)
            if x0.size:
                res = minimize(distance, x0, args=(s, ts), method="BFGS")
                value, params = res.fun, res.x
            else:
                value, params = distance(x0, s, ts), x0
            if value < best[0]:
                best = (value, rotations(params, s, ts))
    return best[1]

"""The small dense linear algebra of the compiled Newton kernels, compiled once for every model.

Imported only by the generated modules of the compiled backend (:mod:`derivations.compiled`), which
need numba: :func:`eigen_direction` (the saddle-free Newton direction from numpy's ``eigh``, where
``H - floor I`` is not positive definite) and :func:`max_abs`. Their machine code is cached next to
this file once, not per model: numba's ``eigh`` alone takes about 4 s to compile. The Cholesky step
of the usual, positive-definite case is written out in the kernel itself (:mod:`derivations.kernels`
says why).
"""
from __future__ import annotations

import numpy as np
from numba import njit

JIT = njit(cache=True, nogil=True, error_model="numpy")


@JIT
def eigen_direction(H, g, floor, d):
    """The saddle-free Newton direction ``-U diag(1 / max(|lambda|, floor)) U^T g`` into ``d``, from
    the eigendecomposition ``H = U diag(lambda) U^T``."""
    n = H.shape[0]
    if n == 2:
        _eigen_direction_2(H, g, floor, d)
        return
    lam, U = np.linalg.eigh(H)
    for i in range(n):
        d[i] = 0.0
    for k in range(n):
        coef = 0.0
        for j in range(n):
            coef += U[j, k] * g[j]
        coef /= max(abs(lam[k]), floor)
        for i in range(n):
            d[i] -= U[i, k] * coef


@JIT
def _eigen_direction_2(H, g, floor, d):
    """:func:`eigen_direction` of a 2 x 2 ``H`` in closed form: the rotation by ``phi`` with ``tan 2 phi =
    2 H_12 / (H_11 - H_22)`` diagonalises it, with the eigenvalues ``mean +- radius``. The two-token
    prox takes this direction at a fifth of the steps of a check from ``w`` (where the objective is not
    convex), and LAPACK's ``eigh`` cost about half of that check's time; the eigenvalues agree with it
    to rounding of ``|H|`` (``tests/test_compiled.py``)."""
    a, b, c = H[0, 0], 0.5 * (H[0, 1] + H[1, 0]), H[1, 1]
    mean = 0.5 * (a + c)
    radius = np.hypot(0.5 * (a - c), b)
    phi = 0.5 * np.arctan2(b, 0.5 * (a - c))
    cs, sn = np.cos(phi), np.sin(phi)
    # (cs, sn) belongs to mean + radius, (-sn, cs) to mean - radius
    upper = (cs * g[0] + sn * g[1]) / max(abs(mean + radius), floor)
    lower = (-sn * g[0] + cs * g[1]) / max(abs(mean - radius), floor)
    d[0] = -(cs * upper - sn * lower)
    d[1] = -(sn * upper + cs * lower)


@JIT
def max_abs(x, n):
    """``max |x_j|``, NaN where any component is (as numpy's ``max``)."""
    m = 0.0
    for j in range(n):
        a = abs(x[j])
        if not a <= m:
            m = a
    return m

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
def max_abs(x, n):
    """``max |x_j|``, NaN where any component is (as numpy's ``max``)."""
    m = 0.0
    for j in range(n):
        a = abs(x[j])
        if not a <= m:
            m = a
    return m

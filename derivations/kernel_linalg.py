"""The small dense linear algebra of the compiled Newton kernels, compiled once for every model.

Imported only by the generated modules of the compiled backend (:mod:`derivations.compiled`), which
need numba: :func:`direction` (the saddle-free Newton direction, from a Cholesky factorisation of
``H - floor I`` or numpy's ``eigh``) and :func:`max_abs`. Their machine code is cached next to this
file once, not per model: numba's ``eigh`` alone takes about 4 s to compile.
"""
from __future__ import annotations

import numpy as np
from numba import njit

JIT = njit(cache=True, nogil=True, error_model="numpy")


@JIT
def cholesky_solve(S, b, L, y, x):
    """``x = S^{-1} b`` from the Cholesky factor ``L`` of the symmetric ``S``; False where ``S`` is
    not positive definite (a non-positive pivot)."""
    n = S.shape[0]
    for j in range(n):
        s = S[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return False
        root = np.sqrt(s)
        L[j, j] = root
        for i in range(j + 1, n):
            t = S[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / root
    for i in range(n):
        t = b[i]
        for k in range(i):
            t -= L[i, k] * y[k]
        y[i] = t / L[i, i]
    for i in range(n - 1, -1, -1):
        t = y[i]
        for k in range(i + 1, n):
            t -= L[k, i] * x[k]
        x[i] = t / L[i, i]
    return True


@JIT
def direction(H, g, floor, S, L, y, d):
    """The saddle-free Newton direction into ``d``; True where ``H - floor I`` is positive definite."""
    n = H.shape[0]
    for i in range(n):
        for j in range(n):
            S[i, j] = H[i, j]
        S[i, i] -= floor
    if cholesky_solve(S, g, L, y, d):
        for i in range(n):
            d[i] = -d[i]
        return True
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
    return False


@JIT
def max_abs(x, n):
    """``max |x_j|``, NaN where any component is (as numpy's ``max``)."""
    m = 0.0
    for j in range(n):
        a = abs(x[j])
        if not a <= m:
            m = a
    return m

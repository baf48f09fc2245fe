"""The pitchfork radius of each teacher ray, compiled: the source the generator binds to a model.

The line quadrature splits each ray of its polar teacher rule where the prox's pair of minima is
born (:func:`numerics.channel.lines.teacher_nodes.polar_teacher_nodes`): the root in ``r`` of the
smallest eigenvalue of the prox objective's Hessian at ``h = w = 0`` for the teacher node
``eta = r (c, s)``, located in a bracket to machine precision at every evaluation of the
saddle-point map. Its numpy form, :func:`numerics.solver.bracketed_roots.find_roots` (scipy's
Chandrupatla iteration step for step) on :func:`numerics.channel.lines.teacher_nodes.bifurcation_margin`,
spends about 1.2 ms an evaluation in Python between a few dozen rays' arithmetic: an eighth of a
draft evaluation. :func:`pitchfork_radii` is the same iteration ray by ray, with the margin the
same operations in the same order on the model's scalar ``prox_hess`` (``_node_prox_hess`` of a
generated module): the same roots to the bit (``tests/test_compiled.py``).

Nothing here runs as it stands: ``_HESS(hs1, hs2, V, p)``, the Hessian ``(H11, H12, H22)`` at
``h = w = 0``, is written out by :func:`derivations.compiled.pitchfork_source` as the model's scalar
function with its parameters unpacked, and numba compiles the result.
"""
from __future__ import annotations

import numpy as np

#: the names a generated module binds (:func:`derivations.compiled.pitchfork_source`)
TEMPLATE_NAMES = ("_HESS",)


def pitchfork_radii(lo, hi, c, s, L, V, p, xatol, xrtol, fatol, maxiter):  # pragma: no cover
    """The root of :func:`_margin` on each ray ``(c[i], s[i])`` in ``[lo[i], hi[i]]``, and whether it
    converged: ``find_roots(margin, lo, hi, args=(c, s), xatol)`` of
    :mod:`numerics.solver.bracketed_roots` (``xrtol``, ``fatol``, ``maxiter``: its constants)."""
    n = lo.shape[0]
    x = np.empty(n)
    success = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        x[i], success[i] = _ray_root(lo[i], hi[i], c[i], s[i], L, V, p, xatol, xrtol, fatol, maxiter)
    return x, success


def _margin(r, c, s, L, V, p):  # pragma: no cover
    # bifurcation_margin's operations, in its order
    e1 = r * c
    e2 = r * s
    hs1 = L[0, 0] * e1 + L[0, 1] * e2
    hs2 = L[1, 0] * e1 + L[1, 1] * e2
    H11, H12, H22 = _HESS(hs1, hs2, V, p)
    return 0.5 * (H11 + H22) - np.hypot(0.5 * (H11 - H22), H12)


def _sign(v):  # pragma: no cover
    # np.sign's: NaN for NaN (never equal to a sign)
    if v > 0:
        return 1.0
    if v < 0:
        return -1.0
    if v == 0:
        return 0.0
    return np.nan


def _ray_root(x1, x2, c, s, L, V, p, xatol, xrtol, fatol, maxiter):  # pragma: no cover
    # find_roots for one element: its termination test, then its step, until it stops
    f1 = _margin(x1, c, s, L, V, p)
    f2 = _margin(x2, c, s, L, V, p)
    frtol = 0.0 * np.minimum(np.abs(f1), np.abs(f2))
    x3, f3 = x2, f2
    t = 0.5
    nit = 0
    while True:
        nearer = np.abs(f1) < np.abs(f2)
        xmin = x1 if nearer else x2
        fmin = f1 if nearer else f2
        stop = np.abs(fmin) <= fatol + frtol
        converged = stop
        failed = (_sign(f1) == _sign(f2)) or not (np.isfinite(x1) and np.isfinite(x2)) \
            or (np.isnan(f1) and np.isnan(f2))
        if failed and not stop:
            xmin = np.nan
            stop = True
        dx = np.abs(x2 - x1)
        tol = np.abs(xmin) * xrtol + xatol
        if dx < tol:
            converged = True
            stop = True
        if stop:
            return xmin, converged
        if nit >= maxiter:
            return xmin, False
        if nit > 0:
            t = _next_fraction(x1, f1, x2, f2, x3, f3, dx, tol)
        x = x1 + t * (x2 - x1)
        fx = _margin(x, c, s, L, V, p)
        if _sign(fx) == _sign(f1):
            x3, f3 = x1, f1
        else:
            x3, f3 = x2, f2
            x2, f2 = x1, f1
        x1, f1 = x, fx
        nit += 1


def _next_fraction(x1, f1, x2, f2, x3, f3, dx, tol):  # pragma: no cover
    # bracketed_roots._next_fraction for one element
    xi1 = (x1 - x2) / (x3 - x2)
    phi1 = (f1 - f2) / (f3 - f2)
    alpha = (x3 - x1) / (x2 - x1)
    t = 0.5
    if ((1 - np.sqrt(1 - xi1)) < phi1) and (phi1 < np.sqrt(xi1)):
        t = (f1 / (f1 - f2) * f3 / (f3 - f2)
             - alpha * f1 / (f3 - f1) * f2 / (f2 - f3))
    tl = 0.5 * tol / dx
    return np.minimum(np.maximum(t, tl), 1 - tl)

"""The per-node iterations of the compiled backend, written once for every model.

:mod:`derivations.codegen` writes, for the ``compiled`` backend, a module per model that holds
the model's per-node functions (each generated expression as a scalar function, compiled by numba)
and, for each prox objective, a copy of the iteration below with its names bound to that
objective, beside the linear algebra of :mod:`derivations.kernel_linalg` (``direction``,
``max_abs``). This module is that iteration's source: its functions call ``_TERMS`` and
``_OBJECTIVE``, which exist only in a generated module, where they are the model's

* ``_TERMS(h, w, c, v, p, g, H) -> f``: the objective at ``h`` with its gradient written into ``g``
  and its Hessian into ``H`` (the generated ``prox_newton`` terms, one node);
* ``_OBJECTIVE(h, w, c, v, p) -> f``: the objective alone (the line search's trial points);

with ``w`` the node's ``w``, ``c`` its teacher values (``h*`` or the teacher's matrix ``T``), ``v``
the packed ``V`` and ``p`` the model's parameters. Nothing here is imported at run time; the
names are replaced textually (:data:`TEMPLATE_NAMES`), and numba compiles the result.

:func:`newton_nodes` is the saddle-free Newton descent of :mod:`numerics.prox.newton` (its numpy
reference, vectorised over nodes), node by node, with the same rules: the direction
``-U diag(1 / max(|lambda|, floor)) U^T g`` (the Newton step of ``H - floor I`` where that is
positive definite, from its Cholesky factor; an eigendecomposition otherwise), the full step near
a strict minimum, Armijo backtracking by halves otherwise, and the stopping tests on the gradient,
the iteration count, a known minimum (``capture``) and a capped search (``cap``).
"""
from __future__ import annotations

import numpy as np

#: the names a generated module binds (:mod:`derivations.codegen`)
TEMPLATE_NAMES = ("_TERMS", "_OBJECTIVE")

#: halvings of the line search: step lengths 1, 1/2, ..., 2^-29
LINE_SEARCH_HALVINGS = 30
#: Armijo's sufficient-decrease constant
ARMIJO = 1e-4
#: a direction this short (max norm) at a positive-definite Hessian takes the full step
FULL_STEP = 1e-3


def newton_nodes(h0, w, c, v, p, floor, tol, maxiter, known, known_obj, capture, cap):  # pragma: no cover
    """Saddle-free Newton from ``h0`` (``(N, n)``) at each node; returns ``(h, objective, gradient
    norm)`` as :func:`numerics.prox.newton.saddle_free_newton` does (a node stopped by ``known``
    reports a NaN gradient norm). ``known`` is ``(N, n)`` (or ``(0, n)``: none), ``known_obj``
    ``(N,)``; ``cap < 0``: no cap. It holds no Python lock (``nogil``): callers run blocks of nodes
    in threads side by side (:func:`numerics.prox.newton.compiled_newton`)."""
    N, n = h0.shape
    h = h0.copy()
    obj = np.full(N, np.nan)
    gn = np.full(N, np.inf)
    use_known = known.shape[0] == N and N > 0
    g = np.empty(n)
    H = np.empty((n, n))
    S = np.empty((n, n))
    L = np.zeros((n, n))
    y = np.empty(n)
    d = np.empty(n)
    trial = np.empty(n)
    for i in range(N):
        _newton_node(i, h, obj, gn, w, c, v, p, floor, tol, maxiter, known, known_obj, capture, cap, use_known,
                     g, H, S, L, y, d, trial)
    return h, obj, gn


def _newton_node(i, h, obj, gn, w, c, v, p, floor, tol, maxiter, known, known_obj, capture, cap, use_known,
                 g, H, S, L, y, d, trial):  # pragma: no cover - compiled in a generated module
    """Node ``i`` of :func:`newton_nodes`, iterated in place: ``h[i]``, ``obj[i]``, ``gn[i]``."""
    n = h.shape[1]
    a = h[i]
    wi = w[i]
    ci = c[i]
    for it in range(maxiter + 1):
        f0 = _TERMS(a, wi, ci, v, p, g, H)
        gmax = max_abs(g, n)
        done = gmax < tol or it == maxiter or not np.isfinite(gmax)
        if use_known:
            for j in range(n):
                y[j] = a[j] - known[i, j]
            stop = max_abs(y, n) < capture
            if cap >= 0 and it >= cap and f0 >= known_obj[i]:
                stop = True
            if stop and not done:
                gmax = np.nan
            done = done or stop
        if done:
            obj[i] = f0
            gn[i] = gmax
            return
        convex = direction(H, g, floor, S, L, y, d)
        if convex and not max_abs(d, n) > FULL_STEP:
            for j in range(n):
                a[j] += d[j]
            continue
        slope = 0.0
        for j in range(n):
            slope += g[j] * d[j]
        step = 1.0
        accepted = False
        for _ in range(LINE_SEARCH_HALVINGS):
            for j in range(n):
                trial[j] = a[j] + step * d[j]
            if _OBJECTIVE(trial, wi, ci, v, p) <= f0 + ARMIJO * step * slope:
                accepted = True
                break
            step *= 0.5
        if not accepted:
            # no decrease at any length: rounding hides it, and the node is as converged as
            # float64 can tell; it is finished where it is
            obj[i] = f0
            gn[i] = gmax
            return
        for j in range(n):
            a[j] += step * d[j]

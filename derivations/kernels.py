"""The per-node iterations of the compiled backend, written once for every model.

:mod:`derivations.codegen` writes, for the ``compiled`` backend, a module per model that holds
the model's per-node functions (each generated expression as a scalar function, compiled by numba)
and, for each prox objective, a copy of the iteration below bound to that objective, beside the
eigendecomposition fallback of :mod:`derivations.kernel_linalg` (``eigen_direction``). This module is
that iteration's source: it calls ``_TERMS`` and ``_OBJECTIVE``, which exist only in a generated
module, where the generator writes each call out in place as the model's scalar function of node
``i``'s entries (:func:`derivations.compiled.bind_terms`):

* ``f0 = _TERMS(h, i, w, c, v, p, g, H)``: the objective at ``h[i]`` with its gradient written into
  ``g`` and its Hessian into ``H`` (the generated ``prox_newton`` terms, one node); ``_TERMS(trial,
  ...)`` the same at the line search's full-length trial point;
* ``_OBJECTIVE(trial, i, w, c, v, p)``: the objective alone at ``trial`` (the line search's trial
  points, and the points of the global prox's grid of starts, :func:`grid_starts`);

with ``w[i]`` the node's ``w``, ``c[i]`` its teacher values (``h*`` or the teacher's matrix ``T``),
``v`` the packed ``V`` and ``p`` the model's parameters; and ``_N_H``, the number of coordinates of
``h``, a constant of the generated module, so that the small loops over them unroll (12-17% of a
two-token node's time, the same bits). Nothing here is imported at run time; the names are replaced
textually (:data:`TEMPLATE_NAMES`), and numba compiles the result.

Why one function with the terms and the Cholesky step written out in it: numba passes an array to
a function it does not inline with reference counting, and a row view (``h[i]``) costs the same;
per node and step that cost more than the arithmetic of a two-token step (a node's first terms
evaluation 200 ns through helper functions and row views, 26 ns written out; the whole iteration
from ``w`` 1.2 us against 0.6 us, the same bits). Only the rare eigendecomposition stays a call.

:func:`newton_nodes` is the saddle-free Newton descent of :mod:`numerics.prox.newton` (its numpy
reference, vectorised over nodes), node by node, with the same rules: the direction
``-U diag(1 / max(|lambda|, floor)) U^T g`` (the Newton step of ``H - floor I`` where that is
positive definite, from its Cholesky factor, for ``2 x 2`` its inverse in closed form; an
eigendecomposition otherwise), the full step near a strict minimum, Armijo backtracking by halves
otherwise (its full-length trial evaluated with its
gradient and Hessian, which, where it is accepted, are the next step's terms: a check of the
two-token prox from ``w`` or from the reflected minimum takes about three such steps, and this saves
the objective's separate evaluation at each), and the stopping tests on the gradient,
the iteration count, a known minimum (``capture``) and a capped search (``cap``). The others run it
where its callers would call it in a batch per step, without returning to Python between the steps:
:func:`follow_paths` (the continuation along the line quadrature's sides, and its numpy loop),
:func:`switch_lines` (the line quadrature's switch location) and :func:`grid_starts` (the global
prox's grid of starts).
"""
from __future__ import annotations

import numpy as np

#: the names a generated module binds (:mod:`derivations.codegen`)
TEMPLATE_NAMES = ("_TERMS", "_OBJECTIVE", "_N_H")

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
    N = h0.shape[0]
    n = _N_H
    h = h0.copy()
    obj = np.full(N, np.nan)
    gn = np.full(N, np.inf)
    use_known = known.shape[0] == N and N > 0
    g = np.empty(n)
    H = np.empty((n, n))
    L = np.zeros((n, n))
    y = np.empty(n)
    d = np.empty(n)
    trial = np.empty(n)
    for i in range(N):
        fresh = False  # whether f0, g and H are already those at h[i] (an accepted full-length trial's)
        for it in range(maxiter + 1):
            if not fresh:
                f0 = _TERMS(h, i, w, c, v, p, g, H)
            fresh = False
            gmax = max_abs(g, n)
            done = gmax < tol or it == maxiter or not np.isfinite(gmax)
            if use_known:
                for j in range(n):
                    y[j] = h[i, j] - known[i, j]
                stop = max_abs(y, n) < capture
                if cap >= 0 and it >= cap and f0 >= known_obj[i]:
                    stop = True
                if stop and not done:
                    gmax = np.nan
                done = done or stop
            if done:
                obj[i] = f0
                gn[i] = gmax
                break
            # the direction: the Newton step of H - floor I where that is positive definite, else the
            # eigendecomposition's
            if n == 2:
                # two coordinates (the line quadrature's prox): positive definite where the first
                # pivot and the determinant are, and the step by the inverse in closed form; the
                # Cholesky factor's square root and loops took a fifth of a check's time
                s11 = H[0, 0] - floor
                s22 = H[1, 1] - floor
                det = s11 * s22 - H[0, 1] * H[0, 1]
                convex = s11 > 0.0 and det > 0.0
                if convex:
                    d[0] = -(s22 * g[0] - H[0, 1] * g[1]) / det
                    d[1] = -(s11 * g[1] - H[0, 1] * g[0]) / det
            else:
                # from the Cholesky factor L (a positive pivot at every column)
                convex = True
                for j in range(n):
                    s = H[j, j] - floor
                    for k in range(j):
                        s -= L[j, k] * L[j, k]
                    if not s > 0.0:
                        convex = False
                        break
                    root = np.sqrt(s)
                    L[j, j] = root
                    for a in range(j + 1, n):
                        t = H[a, j]
                        for k in range(j):
                            t -= L[a, k] * L[j, k]
                        L[a, j] = t / root
                if convex:
                    for a in range(n):
                        t = g[a]
                        for k in range(a):
                            t -= L[a, k] * y[k]
                        y[a] = t / L[a, a]
                    for a in range(n - 1, -1, -1):
                        t = y[a]
                        for k in range(a + 1, n):
                            t -= L[k, a] * d[k]
                        d[a] = t / L[a, a]
                    for j in range(n):
                        d[j] = -d[j]
            if convex:
                if not max_abs(d, n) > FULL_STEP:
                    # a strict minimum close by: the full step, which converges quadratically
                    for j in range(n):
                        h[i, j] += d[j]
                    continue
            else:
                eigen_direction(H, g, floor, d)
            slope = 0.0
            for j in range(n):
                slope += g[j] * d[j]
            step = 1.0
            accepted = False
            for halving in range(LINE_SEARCH_HALVINGS):
                for j in range(n):
                    trial[j] = h[i, j] + step * d[j]
                if halving == 0:
                    # the full-length trial with its gradient and Hessian (into g and H, no longer
                    # needed here): accepted, as it mostly is, they are the next step's terms
                    ft = _TERMS(trial, i, w, c, v, p, g, H)
                else:
                    ft = _OBJECTIVE(trial, i, w, c, v, p)
                if ft <= f0 + ARMIJO * step * slope:
                    accepted = True
                    fresh = halving == 0
                    break
                step *= 0.5
            if not accepted:
                # no decrease at any length: rounding hides it, and the node is as converged as
                # float64 can tell; it is finished where it is
                obj[i] = f0
                gn[i] = gmax
                break
            for j in range(n):
                h[i, j] += step * d[j]
            if fresh:
                f0 = ft
    return h, obj, gn


def follow_paths(h0, t, w, c, running, lo, hi, v, p, floor, tol, maxiter, h, obj, gn):  # pragma: no cover
    """Continuation along paths of nodes: path ``s`` has the nodes ``k = 0 .. K_s - 1`` at the
    parameters ``t[k, s]`` with ``w[k, s]`` and the teacher values ``c[s]``; the paths are sorted
    longest first, so the ``running[k]`` paths with a node ``k`` are a prefix. Each path starts from
    ``h0[s]`` and each node from a prediction by the minima at the nodes before (the secant, or the
    quadratic), minimised by :func:`newton_nodes`, node ``k`` of the paths in one call. The paths
    ``lo .. hi - 1`` only: their ``(h, objective, gradient norm)`` are written into the rows of ``h``,
    ``obj`` and ``gn`` (over all paths' nodes) that are theirs in the order of
    :func:`numerics.prox.newton.follow_paths`, node ``k`` of every running path after those of
    ``k - 1`` (whose numpy reference runs the same steps), without a return to Python between the
    nodes. Blocks of paths run side by side write disjoint rows of the same outputs, and read the
    inputs in place (no copies of a block's columns, no scatter of its results)."""
    n = _N_H
    b = h0[lo:hi].copy()  # the minimum at each path's last node
    before = b.copy()  # and at the node before it
    earlier = b.copy()  # and at the one before that
    start = np.empty((hi - lo, n))
    quadratic = np.empty(n)
    no_known = np.empty((0, n))
    no_known_obj = np.empty(0)
    pos = 0  # the row of node k's first path
    for k in range(t.shape[0]):
        m = min(running[k], hi) - lo
        if m <= 0:
            break  # no path of the block has node k, nor a later one
        for i in range(m):
            s = lo + i
            if k >= 2:
                # secant predictor along the path: Newton then starts O(dt^2) away
                r = (t[k, s] - t[k - 1, s]) / (t[k - 1, s] - t[k - 2, s])
                for j in range(n):
                    start[i, j] = b[i, j] + r * (b[i, j] - before[i, j])
            else:
                for j in range(n):
                    start[i, j] = b[i, j]
            if k >= 3:
                # the quadratic through the three nodes before, O(dt^3) away, where its correction to
                # the secant is at most half the secant's own step (not across a kink of the minimum)
                t0, t1, t2, tk = t[k - 3, s], t[k - 2, s], t[k - 1, s], t[k, s]
                l0 = (tk - t1) * (tk - t2) / ((t0 - t1) * (t0 - t2))
                l1 = (tk - t0) * (tk - t2) / ((t1 - t0) * (t1 - t2))
                l2 = (tk - t0) * (tk - t1) / ((t2 - t0) * (t2 - t1))
                correction = 0.0
                secant_step = 0.0
                for j in range(n):
                    quadratic[j] = l0 * earlier[i, j] + l1 * before[i, j] + l2 * b[i, j]
                    correction = max(correction, abs(quadratic[j] - start[i, j]))
                    secant_step = max(secant_step, abs(start[i, j] - b[i, j]))
                if correction <= 0.5 * secant_step:
                    for j in range(n):
                        start[i, j] = quadratic[j]
            for j in range(n):
                earlier[i, j] = before[i, j]
                before[i, j] = b[i, j]
        hk, fk, gk = newton_nodes(start[:m], w[k, lo:lo + m], c[lo:lo + m], v, p, floor, tol, maxiter, no_known,
                                  no_known_obj, 0.0, -1)
        row = pos + lo
        for i in range(m):
            for j in range(n):
                b[i, j] = hk[i, j]
                h[row + i, j] = hk[i, j]
            obj[row + i] = fk[i]
            gn[row + i] = gk[i]
        pos += running[k]


def switch_lines(tl, tr, a, b, c1, c2, n1, n2, u, L_ww, dw, c, V, v, p, floor, tol, maxiter, max_iter,
                 gap_tol, join_tol):  # pragma: no cover
    """The switch of each line of the line quadrature (``h`` in ``R^2``): the safeguarded Newton
    iteration of :func:`numerics.channel.lines.switches.locate_switches` (whose numpy reference runs
    the same steps, all lines in one batch per step), line by line, without a return to Python
    between the steps. Line ``i`` starts from the bracket ``[tl[i], tr[i]]`` with the minima ``a[i]``
    at its left end and ``b[i]`` at its right end; ``w`` along it is that of
    :meth:`~numerics.channel.lines.geometry.ChannelLines.w_of` (the same products in the same order),
    ``dw[i]`` its direction, ``c[i]`` its teacher values and ``V`` the scalar prox variance. Returns
    ``(t, found, done, a, b)``: the switch where one was found, whether the iteration ended (a switch,
    a joined bracket or a shrunk one) and the minima at the bracket's ends."""
    N = tl.shape[0]
    n = _N_H
    tl = tl.copy()
    tr = tr.copy()
    a = a.copy()
    b = b.copy()
    t_out = np.empty(N)
    found = np.zeros(N, dtype=np.bool_)
    done = np.zeros(N, dtype=np.bool_)
    ends = np.empty((2, n))
    w = np.empty((2, n))
    cc = np.empty((2, c.shape[1]))
    no_known = np.empty((0, n))
    no_known_obj = np.empty(0)
    for i in range(N):
        for j in range(c.shape[1]):
            cc[0, j] = c[i, j]
            cc[1, j] = c[i, j]
        done[i] = np.hypot(a[i, 0] - b[i, 0], a[i, 1] - b[i, 1]) <= gap_tol  # one minimum at both ends
        trial = 0.5 * (tl[i] + tr[i])
        for _ in range(max_iter):
            if done[i]:
                break
            tm = trial
            z1 = tm * n1[i] - u[i] * n2[i]
            z2 = tm * n2[i] + u[i] * n1[i]
            w[0, 0] = c1[i] + L_ww[0, 0] * z1 + L_ww[0, 1] * z2
            w[0, 1] = c2[i] + L_ww[1, 0] * z1 + L_ww[1, 1] * z2
            w[1, 0] = w[0, 0]
            w[1, 1] = w[0, 1]
            for j in range(n):
                ends[0, j] = a[i, j]
                ends[1, j] = b[i, j]
            hk, fk, _gk = newton_nodes(ends, w, cc, v, p, floor, tol, maxiter, no_known, no_known_obj, 0.0, -1)
            a1, a2, b1, b2 = hk[0, 0], hk[0, 1], hk[1, 0], hk[1, 1]
            both = np.hypot(a1 - b1, a2 - b2) > gap_tol
            D = fk[0] - fk[1]
            dD = ((b1 - a1) * dw[i, 0] + (b2 - a2) * dw[i, 1]) / V
            nearer_a = np.hypot(a1 - a[i, 0], a2 - a[i, 1]) <= np.hypot(a1 - b[i, 0], a2 - b[i, 1])
            go_right = (D < 0) if both else nearer_a
            step = -D / dD if (both and dD != 0) else np.inf
            conv = both and abs(step) < 1e-13
            if go_right:
                tl[i], a[i, 0], a[i, 1] = tm, a1, a2
            else:
                tr[i], b[i, 0], b[i, 1] = tm, b1, b2
            if conv:
                t_out[i] = tm
                a[i, 0], a[i, 1], b[i, 0], b[i, 1] = a1, a2, b1, b2
                found[i] = True
                done[i] = True
            scale = abs(tm)
            if not (scale > 1.0 or scale != scale):  # numpy's maximum(1, |tm|), NaN kept
                scale = 1.0
            tiny = not conv and tr[i] - tl[i] < 1e-12 * scale
            joined = not conv and np.hypot(a[i, 0] - b[i, 0], a[i, 1] - b[i, 1]) <= join_tol
            if tiny and not joined:
                t_out[i] = 0.5 * (tl[i] + tr[i])
                found[i] = True
            if tiny or joined:
                done[i] = True
            newton_t = tm + step
            inside = both and newton_t > tl[i] and newton_t < tr[i]
            trial = newton_t if inside else 0.5 * (tl[i] + tr[i])
    return t_out, found, done, a, b


def grid_starts(w, c, v, p, radius, radii, directions, keep):  # pragma: no cover
    """The ``keep`` points of lowest objective, lowest first, of the polar grid ``w[i] + (radii[g] *
    radius[i]) * directions[g]`` (``g`` over the grid) at every node: ``(keep, N, n)``, the starts
    :func:`numerics.prox.scalar.global_prox` gives Newton besides ``w``. Each point is the numpy
    reference's to the bit (the same products in the same order); of equal objectives the earlier
    grid point comes first, and a NaN objective after every number."""
    N = w.shape[0]
    n = _N_H
    G = radii.shape[0]
    out = np.empty((keep, N, n))
    trial = np.empty(n)
    best_f = np.empty(keep)
    best_g = np.empty(keep, dtype=np.int64)
    for i in range(N):
        filled = 0
        for g in range(G):
            scale = radii[g] * radius[i]
            for j in range(n):
                trial[j] = w[i, j] + scale * directions[g, j]
            f = _OBJECTIVE(trial, i, w, c, v, p)
            # insertion into the sorted best list: strictly lower (a NaN is lower than nothing, and
            # every number is lower than a NaN) moves ahead, so ties keep the grid's order
            pos = filled
            while pos > 0 and (f < best_f[pos - 1] or (np.isnan(best_f[pos - 1]) and not np.isnan(f))):
                pos -= 1
            if pos < keep:
                last = min(filled, keep - 1)
                for q in range(last, pos, -1):
                    best_f[q] = best_f[q - 1]
                    best_g[q] = best_g[q - 1]
                best_f[pos] = f
                best_g[pos] = g
                if filled < keep:
                    filled += 1
        for k in range(filled):
            scale = radii[best_g[k]] * radius[i]
            for j in range(n):
                out[k, i, j] = w[i, j] + scale * directions[best_g[k], j]
    return out

"""The local solver of every prox: saddle-free Newton descent, vectorised over nodes.

One iteration serves the line quadrature's prox in ``R^2`` (:mod:`numerics.prox.scalar`) and the
general prox in ``R^{L r}`` (:mod:`numerics.prox.matrix`): :func:`saddle_free_newton` minimises
``objective(h)`` at every node from its own start, given the objective's terms (value, gradient,
Hessian) as a function of the nodes' arrays. This is the numpy reference; a model's compiled
backend runs the same iteration node by node in one compiled kernel
(:mod:`derivations.kernels`, :func:`newton_nodes`; :func:`compiled_newton`), with the same rules and
the same results to rounding. :func:`newton` runs it on a bound model's prox objective, by the
model's backend: what every prox calls.

Rules: each step is ``-U diag(1 / max(|lambda|, floor)) U^T g`` with ``H = U diag(lambda) U^T``, a
descent direction everywhere, which pushes away from saddles along negative curvature instead of
crawling along the flat valleys near a fold (:func:`_directions`); near a strict minimum (``H -
floor I`` positive definite and a step below 1e-3) the full step, which converges quadratically;
otherwise Armijo backtracking by halves down to ``2^-29`` (a node that finds no decrease at any
length is as converged as float64 can tell and is finished where it is). A node stops when the
largest component of its gradient is below ``tol``, after ``maxiter`` steps, or where it is not
finite; a search may also stop it at a known minimum (``capture``) or after ``cap`` steps above it.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np

from derivations.kernels import ARMIJO, FULL_STEP, LINE_SEARCH_HALVINGS
from numerics.threads import kernel_threads, map_over_threads, split_over_threads

_STEPS = 0.5 ** np.arange(LINE_SEARCH_HALVINGS)
_STEP_BLOCKS = (_STEPS[1:5], _STEPS[5:12], _STEPS[12:])


def curvature_floor(V) -> float:
    """The smallest curvature a step divides by: a millionth of the prox's smallest curvature,
    ``1 / max eig(V)``."""
    V = np.asarray(V, dtype=float)
    if V.size == 1:
        return 1e-6 / float(V.reshape(()))
    return 1e-6 / float(np.max(np.linalg.eigvalsh(V)))


def positive_definite(S: np.ndarray) -> np.ndarray:
    """Which of the symmetric matrices ``S`` (a stack, ``N x n x n``) are positive definite
    (:func:`cholesky_factors`)."""
    return cholesky_factors(S)[1]


def cholesky_factors(S: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(L, ok)``: a Cholesky factorisation ``S = L L^T`` of the symmetric matrices ``S`` (a stack,
    ``N x n x n``) vectorised over the stack, column by column, and which of them are positive
    definite (a non-positive pivot recorded per matrix, where numpy's ``cholesky`` raises for the
    whole stack; ``L`` is meaningless where ``ok`` is False)."""
    N, n, _ = S.shape
    L = np.zeros_like(S)
    ok = np.ones(N, dtype=bool)
    for j in range(n):
        pivot = S[:, j, j] - np.einsum("nk,nk->n", L[:, j, :j], L[:, j, :j])
        ok &= pivot > 0
        root = np.sqrt(np.where(ok, pivot, 1.0))
        L[:, j, j] = root
        L[:, j + 1:, j] = (S[:, j + 1:, j] - np.einsum("nik,nk->ni", L[:, j + 1:, :j], L[:, j, :j])) / root[:, None]
    return L, ok


def cholesky_solve(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x`` with ``L L^T x = b`` for a stack of lower-triangular factors ``L`` (``N x n x n``) and
    right-hand sides ``b`` (``N x n``): forward then back substitution, vectorised over the stack."""
    n = b.shape[1]
    y = np.empty_like(b)
    for i in range(n):
        y[:, i] = (b[:, i] - np.einsum("nk,nk->n", L[:, i, :i], y[:, :i])) / L[:, i, i]
    x = np.empty_like(b)
    for i in reversed(range(n)):
        x[:, i] = (y[:, i] - np.einsum("nk,nk->n", L[:, i + 1:, i], x[:, i + 1:])) / L[:, i, i]
    return x


def _directions(H: np.ndarray, g: np.ndarray, floor: float) -> Tuple[np.ndarray, np.ndarray]:
    """Saddle-free Newton directions ``-U diag(1 / max(|lambda|, floor)) U^T g`` and which nodes'
    Hessians exceed ``floor`` (``H - floor I`` positive definite).

    Which ones are is decided by one batched Cholesky factorisation of ``H - floor I`` that reports
    failure per matrix (:func:`cholesky_factors`); for two coordinates (the line quadrature's prox)
    by the first pivot and the determinant, the step then by the inverse in closed form. Those (the
    usual case near minima) take the Newton step of ``H - floor I`` (a shift of a millionth of the
    smallest curvature ``1/V``), the others an eigendecomposition: a batched eigendecomposition costs
    5-10 times a solve for 4 x 4 to 6 x 6 matrices."""
    n = H.shape[1]
    shifted = H - floor * np.eye(n)
    d = np.empty_like(g)
    if n == 2:
        # two coordinates: positive definite where the first pivot and the determinant are, and
        # the step by the inverse in closed form (as the compiled kernel takes it)
        s11, s22, s12 = shifted[:, 0, 0], shifted[:, 1, 1], shifted[:, 0, 1]
        det = s11 * s22 - s12 * s12
        convex = (s11 > 0.0) & (det > 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            d[:, 0] = -(s22 * g[:, 0] - s12 * g[:, 1]) / det
            d[:, 1] = -(s11 * g[:, 1] - s12 * g[:, 0]) / det
    else:
        factors, convex = cholesky_factors(shifted)
        if convex.any():
            d[convex] = -cholesky_solve(factors[convex], g[convex])
    other = ~convex
    if other.any():
        lam, U = np.linalg.eigh(H[other])
        coef = np.einsum("nji,nj->ni", U, g[other]) / np.maximum(np.abs(lam), floor)
        d[other] = -np.einsum("nij,nj->ni", U, coef)
    return d, convex


def _armijo_steps(objective: Callable, a, b, c, f0, g, d, convex) -> Tuple[np.ndarray, np.ndarray]:
    """The length of each node's step along its direction ``d``: the full step where the minimum is
    strict and close by (it converges quadratically, no search) or where it satisfies Armijo's
    condition, else the longest of :data:`_STEP_BLOCKS` that does, searched a block of lengths at a
    time; ``(step, stuck)``, ``stuck`` the nodes where no length decreases the objective."""
    todo = np.nonzero(~convex | (np.max(np.abs(d), axis=1) > FULL_STEP))[0]
    step = np.ones(len(a))
    stuck = np.zeros(len(a), dtype=bool)
    if todo.size:
        slope = np.einsum("ni,ni->n", g[todo], d[todo])
        trial = objective(a[todo] + d[todo], b[todo], c[todo])
        fail = np.nonzero(~(trial <= f0[todo] + ARMIJO * slope))[0]
        for block in _STEP_BLOCKS:
            if fail.size == 0:
                break
            sel = todo[fail]
            k = len(block)
            trial = objective((a[sel][None] + block[:, None, None] * d[sel][None]).reshape(-1, a.shape[1]),
                              np.tile(b[sel], (k, 1)), np.tile(c[sel], (k, 1))).reshape(k, -1)
            ok = trial <= f0[sel][None] + ARMIJO * block[:, None] * slope[fail][None]
            accepted = ok.any(axis=0)
            step[sel] = np.where(accepted, block[np.argmax(ok, axis=0)], 0.0)
            fail = fail[~accepted]
        stuck[todo[fail]] = True
    return step, stuck


def saddle_free_newton(terms: Callable, objective: Callable, h, w, c, floor: float, tol: float = 1e-11,
                       maxiter: int = 60, known: Optional[np.ndarray] = None,
                       known_objective: Optional[np.ndarray] = None, capture: float = 1e-2,
                       cap: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Local minimisation from ``h`` (``(N, n)``) at every node (rows); ``w`` (``(N, n)``) and ``c``
    (``(N, m)``, the node's teacher values) are the nodes' other arguments. ``terms(h, w, c)`` gives
    ``(objective (N,), gradient (N, n), Hessian (N, n, n))`` and ``objective(h, w, c)`` the objective
    alone; ``floor``: the smallest curvature a step divides by (a millionth of the prox's ``1/V``).
    Returns ``(h, objective, gradient norm)``; the gradient norm (max over components) reports
    nodes that did not reach ``tol`` in ``maxiter`` steps.

    For a search of the lowest minimum, given ``known`` (``(N, n)``) local minima per node and their
    objectives ``known_objective``: a node whose iterate comes within ``capture`` (max norm) of its
    known minimum stops (it converges to it); and with ``cap``, a node still above the known
    objective after ``cap`` steps stops (every step descends, but a start that has not gone below
    the known minimum in ``cap`` steps is in its basin or a higher one). Stopped nodes report a NaN
    gradient norm.
    """
    h = np.array(h, dtype=float, copy=True)
    n = len(h)
    obj_out = np.full(n, np.nan)
    gn_out = np.full(n, np.inf)
    active = {"node": np.arange(n), "a": h, "b": np.asarray(w, dtype=float), "c": np.asarray(c, dtype=float)}
    if known is not None:
        active["known"] = np.asarray(known, dtype=float)
        active["known_obj"] = (np.full(n, np.inf) if known_objective is None
                               else np.asarray(known_objective, dtype=float))

    def finish(mask, f0, gn):
        idx = active["node"][mask]
        h[idx], obj_out[idx], gn_out[idx] = active["a"][mask], f0[mask], gn[mask]
        keep = ~mask
        for key in active:
            active[key] = active[key][keep]
        return keep

    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for it in range(maxiter + 1):
            if active["node"].size == 0:
                break
            a, b, c = active["a"], active["b"], active["c"]
            f0, g, H = terms(a, b, c)
            gn = np.max(np.abs(g), axis=1)
            done = (gn < tol) | (it == maxiter) | ~np.isfinite(gn)
            if known is not None:
                stop = np.max(np.abs(a - active["known"]), axis=1) < capture
                if cap is not None and it >= cap:
                    stop |= f0 >= active["known_obj"]
                gn = np.where(stop & ~done, np.nan, gn)
                done |= stop
            if done.any():
                keep = finish(done, f0, gn)
                if active["node"].size == 0:
                    break
                f0, g, H, gn = f0[keep], g[keep], H[keep], gn[keep]
                a, b, c = active["a"], active["b"], active["c"]
            d, convex = _directions(H, g, floor)
            step, stuck = _armijo_steps(objective, a, b, c, f0, g, d, convex)
            if stuck.any():
                # no decrease at any length: rounding hides it, and the node is as converged as
                # float64 can tell; it is finished where it is
                keep = finish(stuck, f0, gn)
                d, step = d[keep], step[keep]
            active["a"] = active["a"] + step[:, None] * d
    return h, obj_out, gn_out


def newton(model, h, w, c, V, tol: float = 1e-11, maxiter: int = 60, known: Optional[np.ndarray] = None,
           known_objective: Optional[np.ndarray] = None, capture: float = 1e-2,
           cap: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Saddle-free Newton on the prox objective of ``model`` at ``V`` from ``h`` at every node: by
    the model's compiled kernel where its backend is compiled (:func:`compiled_newton`), else by the
    numpy reference (:func:`saddle_free_newton`, whose arguments these are) on the model's terms.
    ``c``: the nodes' teacher matrices ``T(h*)`` (row-major, through which alone the objective
    depends on ``h*``), or what stands in their place (a sample's coefficients,
    :class:`~numerics.gamp.sample_prox.SampleLoss`). Returns ``(h, objective, gradient norm)``.

    ``model``: a bound model (:class:`~numerics.model.bound.BoundModel`,
    :class:`~numerics.model.general.GeneralModel`, :class:`~numerics.gamp.sample_prox.SampleLoss`)
    with its ``backend``, for the compiled one its generated functions ``gm`` (the kernel
    ``newton_prox_newton_of_T``), ``params`` and ``pack("V", V)``, and for the numpy reference
    ``newton_terms(V)``: the objective's ``(terms, objective)`` as functions of ``(h, w, c)``."""
    floor = curvature_floor(V)
    if model.backend == "compiled":
        return compiled_newton(model.gm.newton_prox_newton_of_T, h, w, c, model.pack("V", V), model.params, floor,
                               tol, maxiter, known, known_objective, capture, cap)
    terms, objective = model.newton_terms(V)
    return saddle_free_newton(terms, objective, h, w, c, floor, tol=tol, maxiter=maxiter, known=known,
                              known_objective=known_objective, capture=capture, cap=cap)


def compiled_newton(kernel, h, w, c, v, params, floor: float, tol: float, maxiter: int,
                    known: Optional[np.ndarray], known_objective: Optional[np.ndarray], capture: float,
                    cap: Optional[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`saddle_free_newton` by a model's compiled kernel (``newton_<terms>`` of its compiled
    backend, :mod:`derivations.kernels`): the same arguments as arrays, ``v`` the packed ``V`` and
    ``params`` the model's parameters."""
    h = np.ascontiguousarray(h, dtype=float)
    n_h = h.shape[1] if h.ndim == 2 else 0
    if known is None:
        known, known_objective = np.empty((0, n_h)), np.empty(0)
    else:
        known = np.ascontiguousarray(known, dtype=float)
        known_objective = (np.full(len(h), np.inf) if known_objective is None
                           else np.ascontiguousarray(known_objective, dtype=float))
    w, c = np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(c, dtype=float)
    rest = (np.asarray(v, dtype=float), np.asarray(params, dtype=float), float(floor), float(tol), int(maxiter))
    search = (float(capture), -1 if cap is None else int(cap))
    has_known = len(known) == len(h)

    def run(s):
        return kernel(h[s], w[s], c[s], *rest, known[s] if has_known else known,
                      known_objective[s] if has_known else known_objective, *search)

    return split_over_threads(run, len(h), PARALLEL_NODES)


def follow_paths(model, h0, t, w, c, running, V, tol: float = 1e-11,
                 maxiter: int = 60) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Continuation along paths of nodes: path ``s`` has its nodes ``k = 0 .. K_s - 1`` at the
    parameters ``t[k, s]`` (``(K, S)``), with ``w[k, s]`` (``(K, S, n)``) and the teacher values
    ``c[s]`` (``(S, m)``, as :func:`newton` takes them); the paths are sorted longest first, so the
    ``running[k]`` paths with a node ``k`` are a prefix. Each path starts from ``h0[s]`` (``(S, n)``),
    each node from a prediction of its minimum by the minima at the nodes before it, and :func:`newton`
    minimises node ``k`` of every path in one batch. The prediction: the first two nodes from the
    minimum before; the third from the secant through the two before (Newton then starts ``O(dt^2)``
    away); the others from the quadratic through the three before (``O(dt^3)``), where its correction
    to the secant is at most half the secant's own step (largest component of each), else the secant
    (across a kink of the minimum, where a switch moved it). The quadratic saves 9% of the Newton
    iterations of a fast coarse evaluation's sides and 13% of a high reporting one's (3.19 to 2.89 and
    2.52 to 2.20 terms evaluations a node). Returns ``(h, objective, gradient norm)`` of every node,
    node ``k`` of every running path after those of node ``k - 1``.

    By the model's compiled continuation kernel where its backend is compiled (:func:`compiled_follow`:
    no return to Python between the nodes), else by this loop, its numpy reference."""
    if model.backend == "compiled":
        return compiled_follow(model.gm.follow_prox_newton_of_T, h0, t, w, c, running, model.pack("V", V),
                               model.params, curvature_floor(V), tol, maxiter)
    b = np.array(h0, dtype=float, copy=True)  # the minimum at each path's last node
    before = b.copy()  # and at the node before it
    earlier = b.copy()  # and at the one before that
    out = []
    for k, m in enumerate(running):
        start = b[:m]
        if k >= 2:
            r = (t[k, :m] - t[k - 1, :m]) / (t[k - 1, :m] - t[k - 2, :m])
            start = start + r[:, None] * (start - before[:m])
        if k >= 3:
            t0, t1, t2, tk = t[k - 3, :m], t[k - 2, :m], t[k - 1, :m], t[k, :m]
            l0 = (tk - t1) * (tk - t2) / ((t0 - t1) * (t0 - t2))
            l1 = (tk - t0) * (tk - t2) / ((t1 - t0) * (t1 - t2))
            l2 = (tk - t0) * (tk - t1) / ((t2 - t0) * (t2 - t1))
            quadratic = l0[:, None] * earlier[:m] + l1[:, None] * before[:m] + l2[:, None] * b[:m]
            near = (np.max(np.abs(quadratic - start), axis=1)
                    <= 0.5 * np.max(np.abs(start - b[:m]), axis=1))
            start = np.where(near[:, None], quadratic, start)
        earlier[:m] = before[:m]
        before[:m] = b[:m]
        h, f, gn = newton(model, start, w[k, :m], c[:m], V, tol, maxiter)
        b[:m] = h
        out.append((h, f, gn))
    return tuple(np.concatenate(parts) for parts in zip(*out))


def compiled_follow(kernel, h0, t, w, c, running, v, params, floor: float, tol: float,
                    maxiter: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`follow_paths` by a model's compiled continuation kernel (``follow_<terms>``,
    :mod:`derivations.kernels`). Paths are independent: on many nodes they are split in blocks of
    about equal nodes run side by side in threads (the kernel holds no Python lock), one call each,
    every call reading the whole inputs and writing its block's rows of the same outputs."""
    h0, t, w, c = (np.ascontiguousarray(a, dtype=float) for a in (h0, t, w, c))
    running = np.ascontiguousarray(running, dtype=np.int64)
    rest = (np.asarray(v, dtype=float), np.asarray(params, dtype=float), float(floor), float(tol), int(maxiter))
    total = int(running.sum())
    h = np.empty((total, h0.shape[1]))
    f, gn = np.empty(total), np.empty(total)
    blocks = min(kernel_threads(), total // PARALLEL_PATH_NODES)
    parts = [(0, len(h0))]  # one call in this thread (map_over_threads runs a single block in place)
    if blocks > 1:
        # path s has a node k where running[k] > s: its node count, and the paths' edges at equal node counts
        counts = np.searchsorted(-running, -np.arange(len(h0)), side="left")
        edges = np.concatenate([[0], np.searchsorted(np.cumsum(counts), total * np.arange(1, blocks) / blocks),
                                [len(h0)]])
        parts = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    map_over_threads(lambda part: kernel(h0, t, w, c, running, *part, *rest, h, f, gn), parts)
    return h, f, gn


#: nodes per thread below which a kernel call stays in the calling thread (a thread's hand-off
#: costs about as much as a thousand nodes' Newton steps)
PARALLEL_NODES = 2048
#: the same for a continuation (:func:`compiled_follow`), whose split costs more: the blocks' edges
#: at equal node counts and a call per block.
#: The draft rule's 9,000 nodes in one call make its evaluations take 0.90-0.98 of the time they took
#: split from 4,096; the fast rules' (64,000 and 260,000 nodes) are split either way
#: (``python benchmarks/kernels.py splits``, the same numbers)
PARALLEL_PATH_NODES = 8192

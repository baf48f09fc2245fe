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

_BACKTRACK = 0.5 ** np.arange(24)
_BACKTRACK_BLOCKS = (_BACKTRACK[1:5], _BACKTRACK[5:])


def _overflow_is_a_limit(fn):
    """``exp`` overflows in the generated logistic functions far out on the search grid
    or a trial step give the correct limits (a logistic of +-inf is 0 or 1), so they
    are silenced; NaNs are not (they surface in the gradient norm and the channel)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore"):
            return fn(*args, **kwargs)
    return wrapper


@_overflow_is_a_limit
def newton_prox(model: BoundModel, h1, h2, w1, w2, hs1, hs2, V, tol: float = 1e-13, maxiter: int = 60,
                known=None, capture: float = 1e-3, first_terms=None, return_terms: bool = False,
                final_gradient: bool = True):
    """Damped Newton descent on the prox objective, vectorised over nodes.

    Each step divides the gradient by the absolute Hessian eigenvalues (floored at
    ``1e-6/V``), so every step is a descent direction that also escapes saddles;
    away from a strict minimum the length is chosen by Armijo backtracking. Returns
    ``(h1, h2, gradient_norm)``; nodes whose gradient norm is still above
    ``tol`` after ``maxiter`` steps are reported through that norm, never hidden.

    ``known = (k1, k2)``: a local minimum per node already found. Nodes whose
    iterate comes within ``capture`` of it stop there (they are converging to that
    minimum, and their objective is not below it), which is all a check needs.

    ``first_terms``: ``(objective, g1, g2, H11, H12, H22)`` at the starting points,
    already known to the caller (the reflected start of :mod:`numerics.channel.lines`):
    the first generated evaluation is skipped. ``return_terms``: also return those
    six terms at the returned points (for nodes stopped at ``maxiter`` they are
    evaluated there once more). ``final_gradient=False``: nodes stopped at
    ``maxiter`` are not evaluated again and their gradient norm is NaN (a check that
    only compares objectives does not need it).
    """
    h1 = np.array(h1, dtype=float, copy=True)
    h2 = np.array(h2, dtype=float, copy=True)
    shape = np.broadcast(h1, h2, w1, w2, hs1, hs2).shape
    h1 = np.broadcast_to(h1, shape).copy().ravel()
    h2 = np.broadcast_to(h2, shape).copy().ravel()
    # the working arrays hold the active nodes only; ``node`` maps them back
    a1, a2 = h1.copy(), h2.copy()
    b1, b2, c1, c2 = (np.broadcast_to(np.asarray(a, dtype=float), shape).ravel() for a in (w1, w2, hs1, hs2))
    k1 = k2 = None
    if known is not None:
        k1, k2 = (np.broadcast_to(np.asarray(a, dtype=float), shape).ravel() for a in known)
    node = np.arange(h1.size)
    gnorm = np.full(h1.size, np.inf)
    terms_out = tuple(np.full(h1.size, np.nan) for _ in range(6)) if return_terms else None
    pending = None
    if first_terms is not None:
        pending = tuple(np.broadcast_to(np.asarray(t, dtype=float), shape).ravel() for t in first_terms)
    min_curvature = 1e-6 / V
    for _ in range(maxiter):
        if node.size == 0:
            break
        if pending is not None:
            terms, pending = pending, None
        else:
            terms = model.prox_newton(a1, a2, b1, b2, c1, c2, V)
        f0, g1, g2, H11, H12, H22 = terms
        gn = np.abs(g1) + np.abs(g2)
        keep = gn >= tol
        if k1 is not None:
            keep &= np.abs(a1 - k1) + np.abs(a2 - k2) >= capture
        if not keep.all():
            done = ~keep
            finished = node[done]
            h1[finished], h2[finished], gnorm[finished] = a1[done], a2[done], gn[done]
            if return_terms:
                for out, t in zip(terms_out, terms):
                    out[finished] = t[done]
            node, a1, a2, b1, b2, c1, c2, f0, g1, g2, H11, H12, H22 = (
                x[keep] for x in (node, a1, a2, b1, b2, c1, c2, f0, g1, g2, H11, H12, H22))
            if k1 is not None:
                k1, k2 = k1[keep], k2[keep]
            if node.size == 0:
                break
        # saddle-free Newton: divide by |eigenvalue| (floored), so negative curvature
        # pushes away from saddles instead of crawling along flat valleys. Where the
        # Hessian is safely positive definite that is the plain Newton step.
        mid = 0.5 * (H11 + H22)
        rad = np.hypot(0.5 * (H11 - H22), H12)
        lam_minus = mid - rad
        shift = lam_minus < min_curvature
        det = H11 * H22 - H12 * H12
        det = np.where(shift, 1.0, det)
        d1 = -(H22 * g1 - H12 * g2) / det
        d2 = -(H11 * g2 - H12 * g1) / det
        indefinite = np.nonzero(shift)[0]
        if indefinite.size:
            e11, e12, e22, f1, f2 = (x[indefinite] for x in (H11, H12, H22, g1, g2))
            angle = 0.5 * np.arctan2(2.0 * e12, e11 - e22)
            cs, sn = np.cos(angle), np.sin(angle)
            lam_plus = mid[indefinite] + rad[indefinite]
            gp = cs * f1 + sn * f2
            gm = -sn * f1 + cs * f2
            sp = gp / np.maximum(np.abs(lam_plus), min_curvature)
            sm = gm / np.maximum(np.abs(lam_minus[indefinite]), min_curvature)
            d1[indefinite] = -(cs * sp - sn * sm)
            d2[indefinite] = -(sn * sp + cs * sm)
        # near a strict minimum the full Newton step converges quadratically: no line search
        todo = np.nonzero(shift | (np.abs(d1) + np.abs(d2) > 1e-3))[0]
        if todo.size:
            step = np.ones_like(a1)
            a1t, a2t, b1t, b2t, c1t, c2t = (x[todo] for x in (a1, a2, b1, b2, c1, c2))
            f0t = f0[todo]
            slope = g1[todo] * d1[todo] + g2[todo] * d2[todo]
            f1 = model.prox_objective(a1t + d1[todo], a2t + d2[todo], b1t, b2t, c1t, c2t, V)
            fail = np.nonzero(f1 > f0t + 1e-4 * slope)[0]
            # Armijo backtracking, the candidate steps of a block in one vectorised call
            # (per-call overhead dominates otherwise); most nodes accept within the first block
            for block in _BACKTRACK_BLOCKS:
                if fail.size == 0:
                    break
                steps = block[:, None]
                sel = todo[fail]
                f1 = model.prox_objective(a1t[fail] + steps * d1[sel], a2t[fail] + steps * d2[sel],
                                          b1t[fail], b2t[fail], c1t[fail], c2t[fail], V)
                ok = f1 <= f0t[fail] + 1e-4 * steps * slope[fail]
                accepted = ok.any(axis=0)
                step[sel] = np.where(accepted, block[ok.argmax(axis=0)], block[-1])
                fail = fail[~accepted]
            a1 = a1 + step * d1
            a2 = a2 + step * d2
        else:
            a1 = a1 + d1
            a2 = a2 + d2
    else:
        if node.size:
            h1[node], h2[node] = a1, a2
            if return_terms:
                terms = model.prox_newton(a1, a2, b1, b2, c1, c2, V)
                for out, t in zip(terms_out, terms):
                    out[node] = t
                gnorm[node] = np.abs(terms[1]) + np.abs(terms[2])
            elif final_gradient:
                g1, g2 = model.prox_grad(a1, a2, b1, b2, c1, c2, V)
                gnorm[node] = np.abs(g1) + np.abs(g2)
            else:
                gnorm[node] = np.nan
    result = (h1.reshape(shape), h2.reshape(shape), gnorm.reshape(shape))
    if return_terms:
        result += (tuple(t.reshape(shape) for t in terms_out),)
    return result


@_overflow_is_a_limit
def global_prox(model: BoundModel, w1, w2, hs1, hs2, V, starts=(), n_angles: int = 12, n_radii: int = 4,
                keep: int = 3, tol: float = 1e-13):
    """Global minimiser of the prox objective: Newton from ``w``, from ``starts``
    (pairs of arrays), and from the ``keep`` best points of a polar grid of
    ``n_angles x n_radii`` points in the disk that must contain the global minimum.

    Returns ``(h1, h2, objective, gradient_norm)``.
    """
    w1, w2, hs1, hs2 = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (w1, w2, hs1, hs2)))
    radius = np.sqrt(2.0 * V * np.maximum(model.loss(w1, w2, hs1, hs2), 0.0))
    # the whole grid in one call (per-call overhead dominates for small node sets)
    angles = np.linspace(0.0, 2.0 * np.pi, n_angles, endpoint=False)
    radii = np.arange(1, n_radii + 1) / n_radii
    r_grid = np.repeat(radii, n_angles).reshape((-1,) + (1,) * w1.ndim)
    a_grid = np.tile(angles, n_radii).reshape((-1,) + (1,) * w1.ndim)
    grid_h1 = w1 + r_grid * radius * np.cos(a_grid)
    grid_h2 = w2 + r_grid * radius * np.sin(a_grid)
    grid_f = model.prox_objective(grid_h1, grid_h2, w1, w2, hs1, hs2, V)
    best = np.argsort(grid_f, axis=0)[:keep]
    candidates = [(w1, w2)] + [tuple(np.broadcast_to(a, w1.shape) for a in s) for s in starts]
    candidates += [(np.take_along_axis(grid_h1, best[k:k + 1], 0)[0], np.take_along_axis(grid_h2, best[k:k + 1], 0)[0])
                   for k in range(min(keep, grid_f.shape[0]))]
    # every start's Newton run in one batch; the lowest objective wins (ties: the earliest start)
    n_starts = len(candidates)
    s1 = np.stack([c[0] for c in candidates])
    s2 = np.stack([c[1] for c in candidates])
    rep = lambda a: np.broadcast_to(a, (n_starts,) + a.shape)  # noqa: E731
    c1, c2, gn = newton_prox(model, s1, s2, rep(w1), rep(w2), rep(hs1), rep(hs2), V, tol=tol)
    f = model.prox_objective(c1, c2, rep(w1), rep(w2), rep(hs1), rep(hs2), V)
    out = [c1[0], c2[0], f[0], gn[0]]
    for k in range(1, n_starts):
        better = f[k] < out[2]
        out = [np.where(better, new, old) for new, old in zip((c1[k], c2[k], f[k], gn[k]), out)]
    return tuple(out)

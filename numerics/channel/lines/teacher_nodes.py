"""The Gaussian pair ``(w, h*)`` in standard coordinates, and the teacher nodes ``eta``.

The pre-activations of docs/theory.md, section 2.2 are written as ``h* = L_hh eta``,
``w = mu_w + L_wh eta + L_ww zeta`` with ``eta, zeta ~ N(0, I_2)`` (a block Cholesky
factor of their covariance, :func:`gaussian_factor`). The teacher rule
(:func:`polar_teacher_nodes`) is polar, with each ray split where the pitchfork of the
prox at ``w = 0`` occurs.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from derivations.compiled import PITCHFORK

from numerics.model.bound import BoundModel
from numerics.overlaps import Overlaps
from numerics.channel.lines.rule import ChannelRule, leggauss
from numerics.solver.bracketed_roots import FATOL, MAXITER, XATOL, XRTOL, Roots, find_roots


class GaussianFactor(NamedTuple):
    """``(w1, w2, hs1, hs2) = (mu_w, 0) + B @ (xi1, xi2, y1, y2)``, and the block Cholesky
    factor of that covariance with the teacher block first (``L_hh``, ``L_wh``, ``L_ww``)."""

    mu_w: np.ndarray
    B: np.ndarray
    L_hh: np.ndarray
    L_wh: np.ndarray
    L_ww: np.ndarray


def gaussian_factor(model: BoundModel, ov: Overlaps) -> GaussianFactor:
    """The affine map ``(xi, y) -> (w1, w2, hs1, hs2)`` of the generated preactivations,
    and its block Cholesky factor with the teacher block first."""
    basis = np.vstack([np.zeros(4), np.eye(4)])
    cols = model.preactivations(basis[:, 0], basis[:, 1], basis[:, 2], basis[:, 3], ov.q, ov.m, ov.theta)
    pre = np.array(cols).T  # rows: origin, e1..e4
    mean = pre[0]
    B = (pre[1:] - mean).T  # (w1, w2, hs1, hs2) = mean + B @ (xi1, xi2, y1, y2)
    order = [2, 3, 0, 1]
    cov = B @ B.T
    chol = np.linalg.cholesky(cov[np.ix_(order, order)])
    L_hh, L_wh, L_ww = chol[:2, :2], chol[2:, :2], chol[2:, 2:]
    if np.any(np.abs(mean[2:]) > 0):
        raise ValueError("the teacher preactivations must have zero mean")
    return GaussianFactor(mean[:2], B, L_hh, L_wh, L_ww)


def smallest_eigenvalue(H11, H12, H22):
    """The smaller eigenvalue of the symmetric 2x2 matrices ``[[H11, H12], [H12, H22]]``."""
    return 0.5 * (H11 + H22) - np.hypot(0.5 * (H11 - H22), H12)


def bifurcation_margin(model, V, L_hh, c, s, r):
    """Smallest Hessian eigenvalue of the prox objective at ``h = w = 0`` for the teacher
    node ``eta = r (c, s)``. ``h = 0`` is always stationary there (the loss depends on
    ``h h^T``); where this margin turns negative the pair of minima ``+-p0`` is born
    (a supercritical pitchfork, docs/numerics.md, section 3) and the line integrand
    becomes non-smooth in ``eta``."""
    e1, e2 = r * c, r * s
    hs1 = L_hh[0, 0] * e1 + L_hh[0, 1] * e2
    hs2 = L_hh[1, 0] * e1 + L_hh[1, 1] * e2
    z = np.zeros_like(hs1)
    return smallest_eigenvalue(*model.prox_hess(z, z, z, z, hs1, hs2, V))


def pitchfork_radii(model, V, L_hh, lo, hi, c, s) -> Roots:
    """Where :func:`bifurcation_margin` is zero on each ray ``(c, s)`` in ``[lo, hi]``, to machine
    precision (:func:`~numerics.solver.bracketed_roots.find_roots`, scipy's tolerances); by the model's
    compiled kernel where it has one (:mod:`derivations.pitchfork_kernel`: the same roots to the bit,
    without the iteration's Python between the rays' arithmetic)."""
    kernel = model.gm.functions.get(PITCHFORK) if model.backend == "compiled" else None
    if kernel is None:
        return find_roots(lambda r, c_, s_: bifurcation_margin(model, V, L_hh, c_, s_, r), lo, hi, args=(c, s))
    x, success = kernel(*(np.ascontiguousarray(a, dtype=float) for a in (lo, hi, c, s, L_hh)), float(V),
                        np.asarray(model.params, dtype=float), XATOL, XRTOL, FATOL, float(MAXITER))
    return Roots(x, success)


def polar_teacher_nodes(model, V, L_hh, rule: ChannelRule):
    """Teacher nodes ``(e1, e2, weight)`` in polar coordinates, with each ray split where the
    pitchfork occurs, so that each radial piece is smooth: trapezoid in the angle (spectral
    for periodic integrands), Gauss-Legendre in the radius on ``[0, r_c]`` and ``[r_c, R]``."""
    n_beta = rule.n_eta
    R = rule.t_max
    beta = 2 * np.pi * (np.arange(n_beta) + 0.5) / n_beta
    c, s = np.cos(beta), np.sin(beta)
    grid = np.linspace(0.0, R, 65)
    # all radii of all rays in one generated call (row k: radius grid[k])
    margins = bifurcation_margin(model, V, L_hh, c[None, :], s[None, :], grid[:, None])
    neg = margins < 0
    has_root = neg.any(axis=0) & (margins[0] > 0)
    first = np.where(has_root, neg.argmax(axis=0), 1)
    r_split = np.full(n_beta, 0.5 * R)
    rays = np.nonzero(has_root)[0]
    if rays.size:
        # to machine precision (scipy's default tolerances): the split must sit exactly on the kink
        found = pitchfork_radii(model, V, L_hh, grid[first[rays] - 1], grid[first[rays]], c[rays], s[rays])
        if not np.all(found.success):
            raise FloatingPointError(f"pitchfork radius not located on {np.count_nonzero(~found.success)} rays")
        r_split[rays] = found.x
    g, gw = leggauss(rule.n_r)
    e1, e2, w = [], [], []
    for a, b in ((np.zeros_like(r_split), r_split), (r_split, np.full_like(r_split, R))):
        r = 0.5 * (a + b)[:, None] + 0.5 * (b - a)[:, None] * g[None, :]
        wr = 0.5 * (b - a)[:, None] * gw[None, :] * r * np.exp(-0.5 * r**2) / n_beta
        e1.append(r * c[:, None])
        e2.append(r * s[:, None])
        w.append(wr)
    return np.concatenate(e1).ravel(), np.concatenate(e2).ravel(), np.concatenate(w).ravel()

"""Pre-integration of the channel moments along one Gaussian direction (conditional sampling).

The moments at the global prox jump where the prox switches from one minimum to another, and a
jump in ``L (r + t)`` dimensions is what slows randomised quasi-Monte Carlo down. Integrating one
standard normal coordinate ``x`` (the line) exactly, per node of a scrambled Sobol rule in the
other coordinates, leaves a smoother function of those.

Per line: a composite Gauss-Legendre rule (``cells`` cells of ``order`` points on ``[-span,
span]``, weights times the normal density) of fixed nodes, whose global prox is the one of
:class:`~numerics.prox.matrix.GlobalProx`. Consecutive nodes lie on one branch when Newton
continuation from one lands on the other's minimiser; otherwise the switch between them is located
by bisection on the difference of the two continued branches' objectives, and the cell that
holds it is integrated again in two pieces (each by Gauss-Legendre on its own branch, continued
from the switch). The correction of that cell is added to the line's fixed-node sum.

A cell with two or more switches is integrated with its fixed nodes only and counted
(``diagnostics["cells_with_several_switches"]``).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from numpy.polynomial.legendre import leggauss
from scipy.special import ndtri
from scipy.stats import norm, qmc

from numerics.prox.newton import newton
from numerics.channel.qmc.nodes import GaussianNodes

#: bisection steps locating a switch on a line (the bracket starts at one node spacing)
BISECTIONS = 40
#: consecutive nodes are on one branch when the continued minimiser is this close to the other's
SAME_BRANCH_TOL = 1e-6


@dataclasses.dataclass(frozen=True)
class LineRule:
    """The rule along one line: positions ``t`` (``(n,)``), weights (normal density included),
    cell edges and the cell of each position."""

    t: np.ndarray
    weights: np.ndarray
    edges: np.ndarray
    cell: np.ndarray
    order: int

    @classmethod
    def make(cls, cells: int, order: int, span: float) -> "LineRule":
        x, w = leggauss(order)
        edges = np.linspace(-span, span, cells + 1)
        half = 0.5 * (edges[1] - edges[0])
        t = (edges[:-1, None] + half * (x[None] + 1.0)).ravel()
        weights = (half * np.tile(w, cells)) * norm.pdf(t)
        return cls(t, weights, edges, np.repeat(np.arange(cells), order), order)

    def piece(self, a: np.ndarray, b: np.ndarray):
        """Gauss-Legendre positions and weights (density included) on the intervals ``[a, b]``
        (``(m, order)`` each)."""
        x, w = leggauss(self.order)
        half = 0.5 * (b - a)[:, None]
        t = a[:, None] + half * (x[None] + 1.0)
        return t, half * w[None] * norm.pdf(t)


def line_nodes(shape, log2_points: int, scrambles: int, seed: int, rule: LineRule, line_dim: int) -> GaussianNodes:
    """``scrambles`` scramblings of ``2^log2_points`` Sobol points in the ``L (r + t) - 1``
    coordinates other than ``line_dim``, each repeated at the ``n`` positions of ``rule`` along
    ``line_dim``: rows ``(scrambling, point, position)`` in that order."""
    L, r, t, _ = shape
    dim = L * (r + t)
    children = np.random.SeedSequence(seed).spawn(scrambles)
    u = np.stack([qmc.Sobol(dim - 1, scramble=True, seed=np.random.default_rng(c)).random_base2(log2_points)
                  for c in children])
    outer = ndtri(np.clip(u, 1e-300, 1.0 - 2.0**-53))
    n = len(rule.t)
    z = np.repeat(np.insert(outer, line_dim, 0.0, axis=-1), n, axis=1)
    z[..., line_dim] = np.tile(rule.t, 2**log2_points)
    z = z.reshape(-1, L, r + t)
    z.flags.writeable = False
    return GaussianNodes(z[..., :t], z[..., t:], scrambles, 2**log2_points * n)


def line_direction(shape, line_dim: int):
    """The node (``y``, ``xi``) of unit length along ``line_dim``."""
    L, r, t, _ = shape
    e = np.zeros((1, L * (r + t)))
    e[0, line_dim] = 1.0
    e = e.reshape(1, L, r + t)
    return GaussianNodes(e[..., :t], e[..., t:], 1, 1)


def switch_corrections(model, ov, rule: LineRule, h, zeta, hs, w, dzeta, dhs, odd, prox_tol: float):
    """Per line, the exact integral of the cells that hold a switch minus their fixed-node sum.

    ``h, zeta, hs, w``: at the fixed nodes, rows ``(line, position)``; ``dzeta, dhs``: their
    change per unit of the line coordinate (``w`` moves with ``zeta``). Returns ``(corrections
    (lines, moments), diagnostics)``."""
    n = len(rule.t)
    lines = len(h) // n
    V, m = ov.V, ov.m
    # continuation from each node to the next one on its line
    a_rows = (np.arange(lines)[:, None] * n + np.arange(n - 1)[None]).ravel()
    b_rows = a_rows + 1
    cont, _, _ = newton(model, h[a_rows], w[b_rows], model.teacher(hs[b_rows]), V, tol=prox_tol, maxiter=30)
    scale = 1.0 + np.max(np.abs(h[b_rows]), axis=1)
    jump = ~(np.max(np.abs(cont - h[b_rows]), axis=1) <= SAME_BRANCH_TOL * scale)
    ja, jb = a_rows[jump], b_rows[jump]
    diagnostics = {"line_nodes": int(len(h)), "lines": int(lines), "switches": int(jump.sum()),
                   "lines_with_switches": int(len(np.unique(ja // n)))}
    corrections = np.zeros((lines, odd.size))
    if ja.size == 0:
        diagnostics["cells_with_several_switches"] = 0
        return corrections, diagnostics
    pos_a, pos_b = ja % n, jb % n
    lo, hi = rule.t[pos_a].copy(), rule.t[pos_b].copy()
    hA, hB = h[ja].copy(), h[jb].copy()

    def at(rows, t0, t):
        d = (t - t0)[:, None]
        z = zeta[rows] + d * dzeta
        return z, hs[rows] + d * dhs, w[rows] + d * dzeta

    t_a = rule.t[pos_a]
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        _, s_mid, w_mid = at(ja, t_a, mid)
        T_mid = model.teacher(s_mid)
        a_new, fa, _ = newton(model, hA, w_mid, T_mid, V, tol=prox_tol, maxiter=30)
        b_new, fb, _ = newton(model, hB, w_mid, T_mid, V, tol=prox_tol, maxiter=30)
        left = fa <= fb
        lo, hi = np.where(left, mid, lo), np.where(left, hi, mid)
        hA = np.where(left[:, None], a_new, hA)
        hB = np.where(left[:, None], hB, b_new)
    star = 0.5 * (lo + hi)
    line = ja // n
    cell = np.clip(np.searchsorted(rule.edges, star, side="right") - 1, 0, len(rule.edges) - 2)
    key = line * len(rule.edges) + cell
    unique, counts = np.unique(key, return_counts=True)
    single = np.isin(key, unique[counts == 1])
    diagnostics["cells_with_several_switches"] = int((counts > 1).sum())
    sel = np.nonzero(single)[0]
    c_lo, c_hi = rule.edges[cell[sel]], rule.edges[cell[sel] + 1]
    total = np.zeros((len(sel), odd.size))
    for a, b, seed in ((c_lo, star[sel], hA[sel]), (star[sel], c_hi, hB[sel])):
        tq, wq = rule.piece(a, b)
        # continuation outward from the switch, point by point
        order = np.argsort(np.abs(tq - star[sel][:, None]), axis=1)
        cur = seed
        for k in range(rule.order):
            idx = order[:, k]
            tk = tq[np.arange(len(sel)), idx]
            z_k, s_k, w_k = at(ja[sel], t_a[sel], tk)
            cur, _, _ = newton(model, cur, w_k, model.teacher(s_k), V, tol=prox_tol, maxiter=40)
            with np.errstate(over="ignore", under="ignore"):
                mom = model.channel_moments(cur, z_k, s_k, m, V)
            mom[:, odd] = 0.0
            total += wq[np.arange(len(sel)), idx][:, None] * mom
    # minus the fixed nodes of those cells
    with np.errstate(over="ignore", under="ignore"):
        fixed_rows = (line[sel][:, None] * n + (cell[sel][:, None] * rule.order + np.arange(rule.order)[None])).ravel()
        mom = model.channel_moments(h[fixed_rows], zeta[fixed_rows], hs[fixed_rows], m, V)
    mom[:, odd] = 0.0
    fixed = (mom * rule.weights[fixed_rows % n][:, None]).reshape(len(sel), rule.order, -1).sum(axis=1)
    np.add.at(corrections, line[sel], total - fixed)
    return corrections, diagnostics

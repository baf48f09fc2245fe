"""Channel-side expectations ``E_{xi,y}[...]`` of SPEC section 2, integrated with the
switching surfaces of the global prox located and split out (pre-integration).

Why this scheme (see docs/numerics.md for the convergence study): where the
global minimiser of the prox jumps between two local minima the integrands of
the conjugates jump, and a tensor rule converges slowly. We therefore

1. write the Gaussian pair ``(w, h*)`` of SPEC section 2 as ``h* = L_hh eta``,
   ``w = mu_w + L_wh eta + L_ww zeta`` with ``eta, zeta ~ N(0, I_2)`` (a block
   Cholesky factor of the covariance read off the generated ``preactivations``);
2. for each teacher node ``eta`` (tensor Gauss-Hermite) find ``p0``, the global
   prox at ``w = 0``. The loss depends on ``h`` only through ``h h^T``, so the
   minima at ``w = 0`` are ``+-p0`` and the switching line passes through
   ``w = 0`` with normal ``p0``. We integrate ``zeta`` along that normal (``t``)
   and across it (``u``, Gauss-Hermite);
3. along each line locate the switch ``t*`` where the objectives of the two
   branches cross, by Newton's method on their difference (its derivative is
   given by the envelope theorem), and integrate each side with Gauss-Legendre
   on a branch followed by continuation, so each piece is smooth.

Every node is still checked against Newton from ``w`` and from the reflected
branch; a lower objective found there is used, and its quadrature weight is
reported as ``unresolved_weight`` (an unlocated switch).
"""
from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np
from numpy.polynomial.hermite_e import hermegauss as _hermegauss
from numpy.polynomial.legendre import leggauss as _leggauss
from scipy.optimize.elementwise import find_root

from .model import BoundModel
from .overlaps import Overlaps
from .prox import global_prox, newton_prox
from .symmetry import channel_symmetries, fold_teacher_nodes

log = logging.getLogger(__name__)


def _read_only(nodes_weights):
    for a in nodes_weights:
        a.flags.writeable = False
    return nodes_weights


@functools.lru_cache(maxsize=None)
def leggauss(n: int):
    """numpy's Gauss-Legendre rule, computed once per order (every map evaluation asks
    for the same few orders; numpy refines the nodes by Newton's method on each call)."""
    return _read_only(_leggauss(n))


@functools.lru_cache(maxsize=None)
def hermegauss(n: int):
    """numpy's Gauss-Hermite (probabilists') rule, computed once per order."""
    return _read_only(_hermegauss(n))

# the order of the generated ``channel_integrands`` outputs (derivations owns it)
from derivations import CHANNEL_NAMES  # noqa: E402


@dataclasses.dataclass(frozen=True)
class ChannelRule:
    """Resolution of the channel quadrature.

    n_eta: angles of the polar teacher rule (or Gauss-Hermite nodes per teacher
    direction with ``eta_scheme='hermite'``); n_r: Gauss-Legendre nodes on each radial
    piece; n_u: Gauss-Hermite nodes across the lines (along the switching line);
    n_t: Gauss-Legendre nodes on each side of a line's split point (the switch, or
    the point nearest ``w = 0``), plus ``n_near`` nodes within ``near`` of it, graded
    like ``s^grading`` towards it; t_max:
    truncation of the lines (Gaussian mass beyond it below 1e-16); use_symmetry: fold
    the teacher rule by the channel's symmetries (:mod:`numerics.symmetry`) and set the
    integrands odd under one of them to their exact value zero. check_global: check every
    node's followed branch against Newton from ``w`` and from the reflected branch (the
    safety net of :class:`_Accumulator`, about 60% of an evaluation). Off, the map is the
    one the located switches give; the solver uses it only to approach a fixed point,
    which is then always confirmed with the checks on
    (:func:`numerics.fixed_point.solve_with_rule`). check_from_w: the checks start
    Newton from ``w`` as well as from the reflected branch (off, only the reflected
    start: with the switches bracketed, the ``w`` start changed the fast channel
    expectations by at most 7e-8 relative on twelve study points, near the positional
    fold at ``omega = 0.15``, and by 9e-9 elsewhere, and cost a quarter of a checked
    evaluation; docs/numerics.md, "The switch location"). soft_lines: teacher nodes
    without a pair of minima at ``w = 0`` (inside the pitchfork radius) orient their
    lines along the soft direction of the prox objective at ``h = w = 0``, not along a
    fixed axis. Near the pitchfork the integrands change steeply across a line through
    ``w = 0`` normal to that direction (where the switching line appears past the
    pitchfork); lines normal to it cross it at their split point, where the near nodes
    are. Off only to reproduce the tenth session's study (docs/numerics.md, "Lines
    along the soft direction"). band_split: a line without a switch is split where it
    crosses the steep band of the prox (the root of ``prox . d`` within 2 of ``t_c``, by
    scipy's elementwise root finder) instead of at ``t_c``. The band is the switching
    line or its continuation beyond the cusp ends of the switching segment; it is
    curved, so far from ``w = 0`` it leaves ``t_c``. It costs a global prox per line and
    root-finding step: 20-95% of an evaluation for the fast rules, 13-39% for the high
    ones, which alone use it (docs/numerics.md, "The band beyond the cusp ends").
    """

    n_eta: int = 24
    n_u: int = 10
    n_t: int = 24
    t_max: float = 8.5
    newton_tol: float = 1e-12
    eta_scheme: str = "polar"
    n_r: int = 12
    grading: float = 3.0
    n_near: int = 6
    near: float = 1.0
    use_symmetry: bool = True
    check_global: bool = True
    check_from_w: bool = True
    soft_lines: bool = True
    band_split: bool = False

    def __post_init__(self):
        if self.eta_scheme not in ("polar", "hermite"):
            raise ValueError(f"eta_scheme: unknown {self.eta_scheme!r}")


@dataclasses.dataclass(frozen=True)
class ChannelResult:
    expectations: dict          # name -> E[integrand], without the factor alpha
    unresolved_weight: float    # quadrature weight of nodes where an unlocated switch was found
    max_gradient_norm: float    # worst prox stationarity over all nodes
    switch_fraction: float      # fraction of lines carrying a located switch
    n_nodes: int
    symmetry_order: float = 1.0  # teacher nodes per folded node, on average (1: no folding)


def _gaussian_factor(model: BoundModel, ov: Overlaps):
    """Affine map (xi, y) -> (w1, w2, hs1, hs2) of the generated preactivations,
    and a block Cholesky factor with the teacher block first."""
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
    return mean[:2], B, L_hh, L_wh, L_ww


def channel_expectations(model: BoundModel, ov: Overlaps, rule: ChannelRule = ChannelRule()) -> ChannelResult:
    """``E[integrand]`` for each channel integrand generated by :mod:`derivations`
    (SPEC section 2: ``qhat = alpha E[f1^2 + f2^2]`` etc., without ``alpha``).

    ``exp`` overflows in the generated sigmoids far out on the search grid are the
    correct limits (a sigmoid of +-inf is 0 or 1) and are silenced; a NaN is not,
    and raises ``FloatingPointError``."""
    with np.errstate(over="ignore", under="ignore"):
        result = _channel_expectations(model, ov, rule)
    values = np.array(list(result.expectations.values()))
    if not np.isfinite(values).all():
        raise FloatingPointError(f"non-finite channel expectations at {ov}: {result.expectations}")
    return result


def _channel_expectations(model: BoundModel, ov: Overlaps, rule: ChannelRule) -> ChannelResult:
    ov.validate()
    V = ov.V
    mu_w, B, L_hh, L_wh, L_ww = _gaussian_factor(model, ov)
    B_inv = np.linalg.inv(B)

    if rule.eta_scheme == "hermite":
        x, wx = hermegauss(rule.n_eta)
        wx = wx / np.sqrt(2 * np.pi)
        e1, e2 = (a.ravel() for a in np.meshgrid(x, x, indexing="ij"))
        w_eta = np.outer(wx, wx).ravel()
    else:
        e1, e2, w_eta = _polar_eta_nodes(model, V, L_hh, rule)
    odd = np.zeros(len(CHANNEL_NAMES), dtype=bool)
    order = 1.0
    if rule.use_symmetry:
        symmetries = channel_symmetries(model, ov, mu_w, B)
        for sym in symmetries:
            odd |= np.array(sym.characters) < 0
        n_before = e1.size
        e1, e2, w_eta, used = fold_teacher_nodes(e1, e2, w_eta, L_hh, symmetries)
        order = n_before / e1.size
        log.debug("channel: %d symmetries (%d fold the teacher rule), %d of %d teacher nodes kept",
                  len(symmetries), len(used), e1.size, n_before)
    hs1 = L_hh[0, 0] * e1 + L_hh[0, 1] * e2
    hs2 = L_hh[1, 0] * e1 + L_hh[1, 1] * e2
    zeros = np.zeros_like(e1)

    # minima at w = 0 come in +-p0 pairs; p0 is the normal of the switching line
    p1, p2, _, _ = global_prox(model, zeros, zeros, hs1, hs2, V, tol=rule.newton_tol)
    norm_p0 = np.hypot(p1, p2)
    has_pair = norm_p0 > 1e-7
    d1 = np.where(has_pair, p1 / np.where(has_pair, norm_p0, 1.0), 1.0)
    d2 = np.where(has_pair, p2 / np.where(has_pair, norm_p0, 1.0), 0.0)
    if rule.soft_lines:
        # without a pair, h = 0 is the minimum at w = 0, and near the pitchfork it is
        # soft along one direction: the integrands then change steeply across a line
        # through w = 0 normal to that direction (the switching line-to-be)
        H11, H12, H22 = model.prox_hess(zeros, zeros, zeros, zeros, hs1, hs2, V)
        lam = _smallest_eigenvalue(H11, H12, H22)
        v1, v2 = H12, lam - H11  # (H - lam) v = 0
        alt = np.hypot(v1, v2) < 1e-14 * (np.abs(H11) + np.abs(H22) + 1e-300)
        v1, v2 = np.where(alt, lam - H22, v1), np.where(alt, H12, v2)
        nv = np.hypot(v1, v2)
        ok = ~has_pair & (nv > 0)
        d1 = np.where(ok, v1 / np.where(nv > 0, nv, 1.0), d1)
        d2 = np.where(ok, v2 / np.where(nv > 0, nv, 1.0), d2)
    # a fixed orientation keeps the line integrand continuous in eta
    flip = (d1 - d2 < 0) | ((d1 - d2 == 0) & (d1 < 0))
    d1, d2 = np.where(flip, -d1, d1), np.where(flip, -d2, d2)
    # normal in zeta space: n ~ L_ww^T d
    n1 = L_ww[0, 0] * d1 + L_ww[1, 0] * d2
    n2 = L_ww[0, 1] * d1 + L_ww[1, 1] * d2
    n_norm = np.hypot(n1, n2)
    n1, n2 = n1 / n_norm, n2 / n_norm

    # The prox is singular where w = 0 (for teacher nodes at the pitchfork radius it
    # grows like w^(1/3)), and the switching line passes there. In the line frame
    # z = t n + u n_perp that point has t = t_c: lines without a switch are split
    # there, lines with one at the switch, with nodes graded like s^grading towards
    # the split, so each piece is smooth in s.
    c1 = mu_w[0] + L_wh[0, 0] * e1 + L_wh[0, 1] * e2  # w at zeta = 0, per teacher node
    c2 = mu_w[1] + L_wh[1, 0] * e1 + L_wh[1, 1] * e2
    zc1, zc2 = -np.linalg.solve(L_ww, np.vstack([c1, c2]))  # zeta where w = 0
    # across the lines (u) a plain Gauss-Hermite rule: splitting at u_c, with or without
    # grading, converged more slowly in the study (the switches' cusp ends are further
    # singular points in u that no cheap rule locates; docs/numerics.md)
    xu, wu = hermegauss(rule.n_u)
    n_lines = rule.n_u
    U = np.tile(xu, e1.size)
    W_u = np.tile(wu / np.sqrt(2 * np.pi), e1.size)
    rep = lambda a: np.repeat(a, n_lines)  # noqa: E731  (one line per (eta, u) pair)
    C1, C2, HS1, HS2, N1, N2, PAIR = map(rep, (c1, c2, hs1, hs2, n1, n2, has_pair))
    W_line = rep(w_eta) * W_u

    def w_of(t, idx=slice(None)):
        """w at position t along the lines ``idx`` (all by default)."""
        n1_, n2_, u_ = N1[idx], N2[idx], U[idx]
        z1 = t * n1_ - u_ * n2_
        z2 = t * n2_ + u_ * n1_
        return (C1[idx] + L_ww[0, 0] * z1 + L_ww[0, 1] * z2, C2[idx] + L_ww[1, 0] * z1 + L_ww[1, 1] * z2)

    # the line crosses {w . d = 0} at t0
    D1, D2 = rep(d1), rep(d2)
    slope = (L_ww[0, 0] * N1 + L_ww[0, 1] * N2) * D1 + (L_ww[1, 0] * N1 + L_ww[1, 1] * N2) * D2
    w_at0 = w_of(np.zeros_like(U))
    t0 = -(w_at0[0] * D1 + w_at0[1] * D2) / slope
    t0 = np.clip(t0, -rule.t_max + 1.0, rule.t_max - 1.0)
    t_c = np.clip(rep(zc1) * N1 + rep(zc2) * N2, -rule.t_max + 1.0, rule.t_max - 1.0)

    tstar, branch_minus, branch_plus, switched = _locate_switches(model, rule, V, w_of, t0, HS1, HS2, PAIR)
    if rule.band_split:
        t_c = _locate_bands(model, rule, V, w_of, t_c, D1, D2, HS1, HS2, np.nonzero(~switched)[0])

    acc = _Accumulator(model, ov, rule, B_inv, mu_w)
    # each line is split at its switch (or, without one, at t_c) and integrated
    # outward on each side, following the branch of that side by continuation
    pieces = []  # (line indices, nodes (K, n), weights (K, n), start branch or None)
    sw = np.nonzero(switched)[0]
    sm = np.nonzero(~switched)[0]
    for lines, split, starts in ((sw, tstar, (branch_minus, branch_plus)), (sm, t_c, None)):
        # a split far from the Gaussian bulk leaves one side long (up to ~2 t_max): that
        # side is cut again at t = 0 so the bulk is resolved whichever way the line is
        # classified (otherwise the map jumps where a far switch crosses t_max)
        far = np.where(split[lines] > FAR_SPLIT, 1, np.where(split[lines] < -FAR_SPLIT, -1, 0))
        for sign in (0, 1, -1):
            idx = lines[far == sign]
            if idx.size == 0:
                continue
            for side, end in ((0, -rule.t_max), (1, rule.t_max)):
                cut_at_zero = (sign == 1 and side == 0) or (sign == -1 and side == 1)
                t_nodes, t_weights = _side_rule(split[idx], end, rule, cut_at_zero)
                start = (starts[side][0][idx], starts[side][1][idx]) if starts is not None else None
                pieces.append((idx, t_nodes, t_weights, start))
    _follow_sides(model, rule, V, w_of, HS1, HS2, W_line, pieces, acc)
    acc.finish()
    sums, unresolved, max_gn = acc.sums, acc.unresolved, acc.max_gn
    sums[odd] = 0.0  # exact: E = E o g = -E for an integrand odd under a symmetry g
    return ChannelResult(dict(zip(CHANNEL_NAMES, sums)), unresolved, max_gn, float(switched.mean()), acc.nodes,
                         order)


def _follow_sides(model, rule, V, w_of, HS1, HS2, W_line, pieces, acc):
    """Integrate every side of every line at once, node ``k`` of all sides in one batch
    (small per-group batches cost more in numpy call overhead than in arithmetic).

    Sides are sorted by their number of nodes, longest first, so the sides still
    running at node ``k`` are a prefix. Each side follows its branch by continuation
    from its split point outward: Newton from a secant prediction of the last two nodes."""
    K = np.array([p[1].shape[0] for p in pieces])
    counts = [p[0].size for p in pieces]
    order = np.argsort(-K, kind="stable")
    line = np.concatenate([pieces[o][0] for o in order])
    k_max = K[order[0]]
    T = np.concatenate([np.pad(pieces[o][1], ((0, k_max - K[o]), (0, 0))) for o in order], axis=1)
    WT = np.concatenate([np.pad(pieces[o][2], ((0, k_max - K[o]), (0, 0))) for o in order], axis=1)
    K_line = np.concatenate([np.full(counts[o], K[o]) for o in order])
    hs1, hs2, w_line = HS1[line], HS2[line], W_line[line]
    # starts: the located branches of switched lines, the global prox at the first node otherwise
    b1, b2 = np.empty(line.size), np.empty(line.size)
    unknown = []
    pos = 0
    for o in order:
        n = counts[o]
        if pieces[o][3] is not None:
            b1[pos:pos + n], b2[pos:pos + n] = pieces[o][3]
        else:
            unknown.append(np.arange(pos, pos + n))
        pos += n
    if unknown:
        u = np.concatenate(unknown)
        w1, w2 = w_of(T[0, u], idx=line[u])
        b1[u], b2[u] = global_prox(model, w1, w2, hs1[u], hs2[u], V, tol=rule.newton_tol)[:2]
    p1, p2 = b1.copy(), b2.copy()  # the branch at the node before
    for k in range(k_max):
        n = int(np.count_nonzero(K_line > k))
        tk = T[k, :n]
        s1, s2 = b1[:n], b2[:n]
        if k >= 2:
            # secant predictor along the branch: Newton then starts O(dt^2) away
            r = (tk - T[k - 1, :n]) / (T[k - 1, :n] - T[k - 2, :n])
            s1, s2 = s1 + r * (s1 - p1[:n]), s2 + r * (s2 - p2[:n])
        p1[:n], p2[:n] = b1[:n], b2[:n]
        wk = WT[k, :n] * np.exp(-0.5 * tk**2) / np.sqrt(2 * np.pi) * w_line[:n]
        b1[:n], b2[:n] = acc.add((s1, s2), *w_of(tk, idx=line[:n]), hs1[:n], hs2[:n], wk)


# Newton steps a safety check may take before it is abandoned. A check only matters
# where it reaches an objective below the followed branch; the prox Newton is a
# descent method, so a check already below is continued to convergence. Measured by
# benchmarks/check_steps_study.py on six overlaps (both branches, the trivial point,
# V from 11 to 24) with the fast reporting rule: a single check can need up to 13
# steps to go below, but with both checks at 4 steps the channel expectations differ
# from those with 60 steps by at most 1.8e-11 relative.
CHECK_STEPS = 4
CHUNK = 16384  # nodes per batch in the checks: the temporaries stay in cache
FAR_SPLIT = 2.0  # a line's split beyond this |t|: its long side is cut again at t = 0


class _Accumulator:
    """Adds the weighted channel integrands of a batch of nodes, each at the global prox.

    The branch being followed is refined by Newton; Newton from ``w`` and from the
    reflected branch point check it (``CHECK_STEPS`` steps, then to convergence
    where a check went lower). A strictly lower objective found by a check is used
    and its weight counted as unresolved (an unlocated switch)."""

    def __init__(self, model, ov, rule, B_inv, mu_w):
        self.model, self.ov, self.rule, self.B_inv, self.mu_w = model, ov, rule, B_inv, mu_w
        self.sums = np.zeros(len(CHANNEL_NAMES))
        self.unresolved = 0.0
        self.max_gn = 0.0
        self.nodes = 0
        self._queue = []

    def add(self, branch, w1, w2, hs1, hs2, weight):
        """Refine the followed branch at a batch of nodes (continuation) and queue
        the nodes; the checks and integrands run over all queued nodes in
        :meth:`finish` (one large vectorised batch instead of many small ones)."""
        # the checks reuse the objective's terms at the followed branch (_finish_chunk)
        checks = self.rule.check_global
        b1, b2, gn, *terms = newton_prox(self.model, branch[0], branch[1], w1, w2, hs1, hs2, self.ov.V,
                                         tol=self.rule.newton_tol, return_terms=checks)
        self._queue.append((b1, b2, gn, w1, w2, hs1, hs2, weight) + (tuple(terms[0]) if checks else ()))
        return b1, b2

    def finish(self):
        """Check every queued node and add its integrands, in chunks of ``CHUNK``
        nodes so that the temporaries stay in cache. (Threads over the chunks were
        tried: no gain on 2 cores, the boolean indexing holds the GIL.)"""
        arrays = [np.concatenate(a) for a in zip(*self._queue)]
        self._queue = []
        n = arrays[0].size
        for lo in range(0, n, CHUNK):
            sums, unresolved, max_gn = self._finish_chunk([a[lo:lo + CHUNK] for a in arrays])
            self.sums += sums
            self.unresolved += unresolved
            self.max_gn = max(self.max_gn, max_gn)
        self.nodes += n

    def _finish_chunk(self, arrays):
        model, V = self.model, self.ov.V
        b1, b2, gn, w1, w2, hs1, hs2, weight = arrays[:8]
        best1, best2, bestgn, unresolved = b1, b2, gn, 0.0
        if self.rule.check_global:
            best1, best2, bestgn, unresolved = self._checked(b1, b2, gn, w1, w2, hs1, hs2, weight, *arrays[8:])
        xi1, xi2, y1, y2 = _xi_y(self.B_inv, self.mu_w, w1, w2, hs1, hs2)
        ov = self.ov
        vals = model.channel_integrands(best1, best2, xi1, xi2, y1, y2, ov.q, ov.m, V, ov.theta)
        sums = np.array([np.dot(v, weight) for v in vals])
        return sums, unresolved, float(bestgn.max())

    def _checked(self, b1, b2, gn, w1, w2, hs1, hs2, weight, fb, g1, g2, H11, H12, H22):
        """The global prox at each node: the followed branch ``b`` (objective ``fb``,
        gradient ``g``, Hessian ``H`` there) checked by Newton from ``-b`` and, unless the
        rule leaves it out, from ``w``.
        Returns the best points, their gradient norms and the weight of the nodes where a
        check went lower."""
        model, V, tol = self.model, self.ov.V, self.rule.newton_tol
        best1, best2, bestf, bestgn = (np.array(a, dtype=float, copy=True) for a in (b1, b2, fb, gn))
        # the loss is even in h (it depends on h h^T), so the objective's terms at the
        # reflected start -b follow from those at b: f + 2 b.w/V, -2 w/V - g, and the
        # same Hessian; its first Newton step needs no evaluation
        reflected = ((fb + 2.0 * (b1 * w1 + b2 * w2) / V, -2.0 * w1 / V - g1, -2.0 * w2 / V - g2, H11, H12, H22)
                     if model.loss_is_even else None)
        starts = ((w1, w2, None), (-b1, -b2, reflected))
        if not self.rule.check_from_w and model.loss_is_even:
            starts = starts[1:]  # the reflected start alone (ChannelRule.check_from_w)
        for s1, s2, first in starts:
            c1, c2, _ = newton_prox(model, s1, s2, w1, w2, hs1, hs2, V, tol=tol, maxiter=CHECK_STEPS,
                                    known=(best1, best2), first_terms=first, final_gradient=False)
            fc = model.prox_objective(c1, c2, w1, w2, hs1, hs2, V)
            better = np.nonzero(fc < bestf - 1e-13 * np.maximum(1.0, np.abs(bestf)))[0]
            if better.size == 0:
                continue
            sub = (w1[better], w2[better], hs1[better], hs2[better])
            d1, d2, dgn = newton_prox(model, c1[better], c2[better], *sub, V, tol=tol)
            best1[better], best2[better], bestgn[better] = d1, d2, dgn
            bestf[better] = model.prox_objective(d1, d2, *sub, V)
        jumped = bestf < fb - 1e-13 * np.maximum(1.0, np.abs(fb))
        return best1, best2, bestgn, float(weight[jumped].sum())


def _locate_bands(model, rule, V, w_of, t_c, D1, D2, HS1, HS2, lines, half_width: float = 2.0):
    """Where an unswitched line crosses the steep band of the prox: the root of
    ``prox(w(t)) . d`` within ``half_width`` of ``t_c``. The band is where the switching
    line runs, or would run (beyond its cusp ends, or inside the pitchfork radius); it
    is curved, so away from ``w = 0`` it leaves ``t_c``. Lines without a sign change
    keep ``t_c``."""
    t_c = t_c.copy()
    if lines.size == 0:
        return t_c

    def g(t, idx):
        idx = idx.astype(int)
        w1, w2 = w_of(t, idx)
        p1, p2 = global_prox(model, w1, w2, HS1[idx], HS2[idx], V, tol=rule.newton_tol)[:2]
        return p1 * D1[idx] + p2 * D2[idx]

    lo = np.maximum(t_c[lines] - half_width, -rule.t_max + 1.0)
    hi = np.minimum(t_c[lines] + half_width, rule.t_max - 1.0)
    # a bracket without a sign change fails after its two end evaluations (status -1).
    # The split is a quadrature parameter: where there is no root, or the root finder
    # fails, the line keeps t_c, a valid split that is only less accurate
    found = find_root(g, (lo, hi), args=(lines.astype(float),))
    t_c[lines[found.success]] = found.x[found.success]
    return t_c


def _side_rule(centre, end, rule: ChannelRule, cut_at_zero: bool = False):
    """Nodes and weights from ``centre`` outward to ``end`` (one per line), in order.

    A near piece of length ``min(near, half the side)`` with ``n_near`` Gauss-Legendre
    nodes in ``s``, ``|t - centre| ~ s^grading`` (smooth in ``s`` for a
    ``|t - centre|^(1/3)`` singularity when ``grading = 3``), then a far piece with
    ``n_t`` plain Gauss-Legendre nodes; with ``cut_at_zero`` the far piece is cut at
    ``t = 0`` into two such pieces. Returns arrays of shape ``(nodes, lines)``."""
    centre = np.asarray(centre, dtype=float)
    length = np.abs(end - centre)
    sign = np.sign(end - centre)
    near = np.minimum(rule.near, 0.5 * length)
    gn, gwn = leggauss(rule.n_near)
    sn, wsn = 0.5 * (1 + gn)[:, None], 0.5 * gwn[:, None]
    p = rule.grading
    offsets, weights = [near * sn**p], [near * p * sn ** (p - 1) * wsn]
    g, gw = leggauss(rule.n_t)
    s, ws = 0.5 * (1 + g)[:, None], 0.5 * gw[:, None]
    pieces = [(near, np.abs(centre)), (np.abs(centre), length)] if cut_at_zero else [(near, length)]
    for a, b in pieces:
        offsets.append(a + (b - a) * s)
        weights.append((b - a) * ws)
    return centre + sign * np.concatenate(offsets), np.concatenate(weights)


def _smallest_eigenvalue(H11, H12, H22):
    """The smaller eigenvalue of the symmetric 2x2 matrices ``[[H11, H12], [H12, H22]]``."""
    return 0.5 * (H11 + H22) - np.hypot(0.5 * (H11 - H22), H12)


def _bifurcation_margin(model, V, L_hh, c, s, r):
    """Smallest Hessian eigenvalue of the prox objective at ``h = w = 0`` for the teacher
    node ``eta = r (c, s)``. ``h = 0`` is always stationary there (the loss depends on
    ``h h^T``); where this margin turns negative the pair of minima ``+-p0`` is born
    (a supercritical pitchfork, checked in docs/numerics.md) and the line integrand
    becomes non-smooth in ``eta``."""
    e1, e2 = r * c, r * s
    hs1 = L_hh[0, 0] * e1 + L_hh[0, 1] * e2
    hs2 = L_hh[1, 0] * e1 + L_hh[1, 1] * e2
    z = np.zeros_like(hs1)
    return _smallest_eigenvalue(*model.prox_hess(z, z, z, z, hs1, hs2, V))


def _polar_eta_nodes(model, V, L_hh, rule):
    """Teacher nodes in polar coordinates, with each ray split where the pitchfork
    occurs, so that each radial piece is smooth: trapezoid in the angle (spectral for
    periodic integrands), Gauss-Legendre in the radius on ``[0, r_c]`` and ``[r_c, R]``."""
    n_beta = rule.n_eta
    R = rule.t_max
    beta = 2 * np.pi * (np.arange(n_beta) + 0.5) / n_beta
    c, s = np.cos(beta), np.sin(beta)
    grid = np.linspace(0.0, R, 65)
    # all radii of all rays in one generated call (row k: radius grid[k])
    margins = _bifurcation_margin(model, V, L_hh, c[None, :], s[None, :], grid[:, None])
    neg = margins < 0
    has_root = neg.any(axis=0) & (margins[0] > 0)
    first = np.where(has_root, neg.argmax(axis=0), 1)
    r_split = np.full(n_beta, 0.5 * R)
    rays = np.nonzero(has_root)[0]
    if rays.size:
        # to machine precision (scipy's default tolerances): the split must sit exactly on the kink
        found = find_root(lambda r, c_, s_: _bifurcation_margin(model, V, L_hh, c_, s_, r),
                          (grid[first[rays] - 1], grid[first[rays]]), args=(c[rays], s[rays]))
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


def _xi_y(B_inv, mu_w, w1, w2, hs1, hs2):
    """Invert the affine preactivation map: the standard-normal (xi, y) of a node."""
    r = np.array([w1 - mu_w[0], w2 - mu_w[1], hs1, hs2])
    return tuple(B_inv @ r.reshape(4, -1))


def _locate_switches(model, rule, V, w_of, t0, hs1, hs2, has_pair, half_width: float = 2.0, max_iter: int = 80):
    """The switch ``t*`` of each line: where the global minimiser jumps between two
    local minima, located by a safeguarded Newton iteration on
    ``D(t) = M_left(t) - M_right(t)`` inside a bracket.

    The bracket ``[tl, tr]`` starts at ``t0 -+ half_width`` with the global minima
    there; ``A`` is the minimum followed from ``tl``, ``B`` the one from ``tr``.
    Each step continues both to a trial point ``tm`` (Newton's estimate from
    ``dD/dt = (B - A)/V . dw/dt``, the envelope theorem, where it falls inside the
    bracket; the midpoint otherwise). Where both minima exist there, the sign of
    ``D`` says on which side ``t*`` lies. Where they have merged, one of them has
    ended in a fold, and a fold of the left minimum lies right of ``t*`` (and vice
    versa); the merged point is attributed to the minimum it is nearer to. A line
    whose bracket ends come to hold minima within ``join_tol`` (1e-2) of each other
    carries no switch; its split stays at ``t0``. Near the cusp ends of a switching segment,
    where both minima exist only in a narrow window, this keeps the switch that
    Newton's method from ``t0 -+ 1`` lost (docs/numerics.md, "The switch location").
    A line still open after ``max_iter`` steps is left without a switch; the checks
    of :class:`_Accumulator` then report its jump as unresolved weight.
    Returns ``(t_split, branch_left, branch_right, switched)``.
    """
    n = t0.size
    t_split = t0.copy()
    left = [np.zeros(n), np.zeros(n)]
    right = [np.zeros(n), np.zeros(n)]
    switched = np.zeros(n, dtype=bool)
    lines = np.nonzero(has_pair)[0]
    if lines.size == 0:
        return t_split, tuple(left), tuple(right), switched
    gap_tol = 1e-7
    # A and B this close at the bracket's ends: one branch, no switch. A switch's gap is
    # below this only within ~1e-4 of a cusp end of its segment (gap ~ sqrt(distance));
    # such a jump left in a line is small, and the checks report its nodes. (1e-4 gave
    # bitwise the same channel values on six study points, with 7 more bisection steps.)
    join_tol = 1e-2
    tl = np.maximum(t0[lines] - half_width, -rule.t_max)
    tr = np.minimum(t0[lines] + half_width, rule.t_max)

    def at(t, idx):
        return w_of(t, idx=lines[idx])

    A1, A2 = global_prox(model, *at(tl, slice(None)), hs1[lines], hs2[lines], V, tol=rule.newton_tol)[:2]
    B1, B2 = global_prox(model, *at(tr, slice(None)), hs1[lines], hs2[lines], V, tol=rule.newton_tol)[:2]
    # the direction of w along the lines (w is affine in t)
    wa, wb = at(np.ones(lines.size), slice(None)), at(np.zeros(lines.size), slice(None))
    dw1, dw2 = wa[0] - wb[0], wa[1] - wb[1]
    trial = 0.5 * (tl + tr)
    done = np.hypot(A1 - B1, A2 - B2) <= gap_tol  # the same minimum at both ends: no switch
    found = np.zeros(lines.size, dtype=bool)
    for _ in range(max_iter):
        act = np.nonzero(~done)[0]
        if act.size == 0:
            break
        tm = trial[act]
        w1, w2 = at(tm, act)
        h_s = (hs1[lines[act]], hs2[lines[act]])
        a1, a2, _ = newton_prox(model, A1[act], A2[act], w1, w2, *h_s, V, tol=rule.newton_tol)
        b1, b2, _ = newton_prox(model, B1[act], B2[act], w1, w2, *h_s, V, tol=rule.newton_tol)
        both = np.hypot(a1 - b1, a2 - b2) > gap_tol
        D = model.prox_objective(a1, a2, w1, w2, *h_s, V) - model.prox_objective(b1, b2, w1, w2, *h_s, V)
        dD = ((b1 - a1) * dw1[act] + (b2 - a2) * dw2[act]) / V
        # merged: attribute the point to the minimum it continues
        nearer_A = np.hypot(a1 - A1[act], a2 - A2[act]) <= np.hypot(a1 - B1[act], a2 - B2[act])
        go_right = np.where(both, D < 0, nearer_A)  # t* lies right of tm
        step = np.where(both & (dD != 0), -D / np.where(dD != 0, dD, 1.0), np.inf)
        conv = both & (np.abs(step) < 1e-13)
        # update the bracket
        r, l_ = act[go_right], act[~go_right]
        tl[r], A1[r], A2[r] = tm[go_right], a1[go_right], a2[go_right]
        tr[l_], B1[l_], B2[l_] = tm[~go_right], b1[~go_right], b2[~go_right]
        # converged lines: the switch at tm, with both minima there
        c = act[conv]
        t_split[lines[c]] = tm[conv]
        A1[c], A2[c], B1[c], B2[c] = a1[conv], a2[conv], b1[conv], b2[conv]
        found[c] = True
        done[c] = True
        # a bracket that has shrunk to nothing: a switch if the minima still differ
        width = tr[act] - tl[act]
        tiny = ~conv & (width < 1e-12 * np.maximum(1.0, np.abs(tm)))
        joined = ~conv & (np.hypot(A1[act] - B1[act], A2[act] - B2[act]) <= join_tol)
        s = act[tiny & ~joined]
        t_split[lines[s]] = 0.5 * (tl[s] + tr[s])
        found[s] = True
        done[act[tiny | joined]] = True
        # next trial: Newton's estimate where it is inside the bracket, else the midpoint
        newton_t = tm + step
        inside = both & (newton_t > tl[act]) & (newton_t < tr[act])
        trial[act] = np.where(inside, newton_t, 0.5 * (tl[act] + tr[act]))
    else:
        log.debug("switch location: %d lines still open after %d steps", np.count_nonzero(~done), max_iter)
    # a switch at the truncation bounds no Gaussian mass worth a piece (beyond t_max - 0.01: < 1e-17)
    found &= np.abs(t_split[lines]) < rule.t_max - 0.01
    t_split[lines[~found]] = t0[lines[~found]]
    switched[lines[found]] = True
    left[0][lines], left[1][lines] = A1, A2
    right[0][lines], right[1][lines] = B1, B2
    return t_split, tuple(left), tuple(right), switched

"""The lines of the channel quadrature, their split points and the rule along each side.

For each teacher node (:func:`fold_nodes`: the teacher rule folded by the channel's symmetries)
the ``zeta`` plane is cut into lines normal to the switching line through ``w = 0``
(:func:`lines_normal_to`: the direction of ``p0``, the global prox at ``w = 0``, which the caller
finds, :func:`numerics.channel.lines.expectations.channel_lines`; for a node without a pair of
minima there, the soft direction of the prox objective). Along a line (``t``) each side of its
split point gets its own graded Gauss-Legendre rule (:func:`side_rule`); across the lines (``u``) a
Gauss-Hermite rule.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import NamedTuple

import numpy as np

from derivations import CHANNEL_NAMES

from numerics.fixed_points.symmetry import channel_symmetries, fold_teacher_nodes
from numerics.channel.lines.rule import ChannelRule, hermegauss, leggauss
from numerics.channel.lines.teacher_nodes import GaussianFactor, smallest_eigenvalue

log = logging.getLogger(__name__)

FAR_SPLIT = 2.0  # a line's split beyond this |t|: its long side is cut again at t = 0


@dataclasses.dataclass(frozen=True)
class ChannelLines:
    """One line per (teacher node, ``u`` node) pair, as arrays over the lines.

    ``c1, c2``: ``w`` at ``zeta = 0``; ``n1, n2``: the line's direction in ``zeta``;
    ``u``: its offset across; ``hs1, hs2``: the teacher pre-activations; ``has_pair``:
    the prox has a pair of minima at ``w = 0``; ``weight``: the teacher and ``u``
    weights; ``d1, d2``: the direction in ``w`` whose sign separates the two minima;
    ``t0``: where the line crosses ``w . d = 0``; ``t_c``: where it passes nearest
    ``w = 0``. ``odd`` marks the integrands odd under a symmetry of the channel (their
    expectation is exactly zero) and ``symmetry_order`` is the number of teacher nodes
    per folded node. ``teacher``: the teacher's matrix ``T(h*)`` of each line (``(lines, 4)``,
    :meth:`~numerics.model.bound.BoundModel.teacher_matrix`), computed once per folded node: every
    prox on the line takes it as it is."""

    L_ww: np.ndarray
    c1: np.ndarray
    c2: np.ndarray
    n1: np.ndarray
    n2: np.ndarray
    u: np.ndarray
    hs1: np.ndarray
    hs2: np.ndarray
    has_pair: np.ndarray
    weight: np.ndarray
    d1: np.ndarray
    d2: np.ndarray
    t0: np.ndarray
    t_c: np.ndarray
    odd: np.ndarray
    symmetry_order: float
    teacher: np.ndarray

    def w_of(self, t, idx=slice(None)):
        """w at position t along the lines ``idx`` (all by default)."""
        L_ww = self.L_ww
        n1_, n2_, u_ = self.n1[idx], self.n2[idx], self.u[idx]
        z1 = t * n1_ - u_ * n2_
        z2 = t * n2_ + u_ * n1_
        return (self.c1[idx] + L_ww[0, 0] * z1 + L_ww[0, 1] * z2, self.c2[idx] + L_ww[1, 0] * z1 + L_ww[1, 1] * z2)


class FoldedNodes(NamedTuple):
    """The teacher nodes ``e1, e2`` (in the coordinates ``eta``) and ``weight`` of the lines,
    folded by the channel's symmetries when ``rule.use_symmetry`` (:func:`fold_nodes`), with their
    teacher pre-activations ``hs1, hs2`` (``h* = L_hh eta``) and the teacher's matrices ``teacher`` of
    them (``(nodes, 4)``). ``odd`` marks the integrands odd under a symmetry of the channel (their
    expectation is exactly zero) and ``order`` is the number of teacher nodes per folded node."""

    e1: np.ndarray
    e2: np.ndarray
    weight: np.ndarray
    hs1: np.ndarray
    hs2: np.ndarray
    odd: np.ndarray
    order: float
    teacher: np.ndarray


def fold_nodes(model, ov, rule: ChannelRule, factor: GaussianFactor, nodes) -> FoldedNodes:
    """The teacher nodes ``nodes = (e1, e2, weight)`` folded by the channel's symmetries when
    ``rule.use_symmetry`` (as they are otherwise), with their teacher pre-activations and matrices."""
    mu_w, B, L_hh, _, _ = factor
    e1, e2, w_eta = nodes
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
    return FoldedNodes(e1, e2, w_eta, hs1, hs2, odd, order, model.teacher_matrix(np.stack([hs1, hs2], axis=-1)))


def lines_normal_to(model, ov, rule: ChannelRule, factor: GaussianFactor, folded: FoldedNodes, p0) -> ChannelLines:
    """The lines of the teacher nodes ``folded``, normal to the switching line through ``w = 0``.
    ``p0 = (p1, p2)``: the global prox at ``w = 0`` at each node; its minima there come in ``+-p0``
    pairs, and ``p0`` is the normal of the switching line. Where ``p0 = 0`` (no pair), with
    ``rule.soft_lines``, the soft direction of the prox objective takes its place."""
    V = ov.V
    mu_w, _, _, L_wh, L_ww = factor
    e1, e2, w_eta, hs1, hs2, odd, order, teacher = folded
    p1, p2 = p0
    norm_p0 = np.hypot(p1, p2)
    has_pair = norm_p0 > 1e-7
    d1 = np.where(has_pair, p1 / np.where(has_pair, norm_p0, 1.0), 1.0)
    d2 = np.where(has_pair, p2 / np.where(has_pair, norm_p0, 1.0), 0.0)
    if rule.soft_lines:
        # without a pair, h = 0 is the minimum at w = 0, and near the pitchfork it is
        # soft along one direction: the integrands then change steeply across a line
        # through w = 0 normal to that direction (the switching line-to-be)
        zeros = np.zeros_like(e1)
        H11, H12, H22 = model.prox_hess(zeros, zeros, zeros, zeros, hs1, hs2, V)
        lam = smallest_eigenvalue(H11, H12, H22)
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
    # singular points in u that no cheap rule locates; docs/studies/channel_convergence.md)
    xu, wu = hermegauss(rule.n_u)
    n_lines = rule.n_u
    U = np.tile(xu, e1.size)
    W_u = np.tile(wu / np.sqrt(2 * np.pi), e1.size)
    rep = lambda a: np.repeat(a, n_lines)  # noqa: E731  (one line per (eta, u) pair)
    C1, C2, HS1, HS2, N1, N2, PAIR = map(rep, (c1, c2, hs1, hs2, n1, n2, has_pair))
    W_line = rep(w_eta) * W_u
    D1, D2 = rep(d1), rep(d2)
    lines = ChannelLines(L_ww, C1, C2, N1, N2, U, HS1, HS2, PAIR, W_line, D1, D2, None, None, odd, order,
                         np.repeat(teacher, n_lines, axis=0))

    # the line crosses {w . d = 0} at t0
    slope = (L_ww[0, 0] * N1 + L_ww[0, 1] * N2) * D1 + (L_ww[1, 0] * N1 + L_ww[1, 1] * N2) * D2
    w_at0 = lines.w_of(np.zeros_like(U))
    t0 = -(w_at0[0] * D1 + w_at0[1] * D2) / slope
    t0 = np.clip(t0, -rule.t_max + 1.0, rule.t_max - 1.0)
    t_c = np.clip(rep(zc1) * N1 + rep(zc2) * N2, -rule.t_max + 1.0, rule.t_max - 1.0)
    return dataclasses.replace(lines, t0=t0, t_c=t_c)


def side_rule(centre, end, rule: ChannelRule, cut_at_zero: bool = False):
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


def line_pieces(rule: ChannelRule, switched, t_switch, t_split, branches) -> list:
    """The sides of every line, as ``(line indices, nodes (K, n), weights (K, n), start)``.

    Each line is split at its switch (``t_switch``, where ``switched``) or, without one,
    at ``t_split``, and integrated outward on each side; ``start`` is the branch each side
    of a switched line starts on (``branches = (left, right)``), ``None`` otherwise."""
    pieces = []  # (line indices, nodes (K, n), weights (K, n), start branch or None)
    sw = np.nonzero(switched)[0]
    sm = np.nonzero(~switched)[0]
    for lines, split, starts in ((sw, t_switch, branches), (sm, t_split, None)):
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
                t_nodes, t_weights = side_rule(split[idx], end, rule, cut_at_zero)
                start = (starts[side][0][idx], starts[side][1][idx]) if starts is not None else None
                pieces.append((idx, t_nodes, t_weights, start))
    return pieces

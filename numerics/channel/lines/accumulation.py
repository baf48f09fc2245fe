"""Accumulating the channel integrands over the nodes of the lines, each at the global prox.

Every side of every line follows its branch of the prox by continuation from its
split point outward (:func:`follow_sides`); the :class:`Accumulator` checks each node
against Newton from the reflected branch (and from ``w``) and adds the weighted
generated integrands.
"""
from __future__ import annotations

import numpy as np

from derivations import CHANNEL_NAMES

from numerics.prox.scalar import global_prox, newton_prox


# Newton steps a safety check may take before it is abandoned. A check only matters
# where it reaches an objective below the followed branch; the prox Newton is a
# descent method, so a check already below is continued to convergence. Measured by
# studies/check_steps.py on six overlaps (both branches, the trivial point,
# V from 11 to 24) with the fast reporting rule: a single check can need up to 13
# steps to go below, but with both checks at 4 steps the channel expectations differ
# from those with 60 steps by at most 1.8e-11 relative.
CHECK_STEPS = 4
CHUNK = 16384  # nodes per batch in the checks: the temporaries stay in cache


def follow_sides(model, rule, V, w_of, HS1, HS2, W_line, pieces, acc):
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


class Accumulator:
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
        b1, b2, gn, fb = newton_prox(self.model, branch[0], branch[1], w1, w2, hs1, hs2, self.ov.V,
                                     tol=self.rule.newton_tol)
        self._queue.append((b1, b2, gn, w1, w2, hs1, hs2, weight, fb))
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
        b1, b2, gn, w1, w2, hs1, hs2, weight, fb = arrays
        best1, best2, bestgn, unresolved = b1, b2, gn, 0.0
        if self.rule.check_global:
            best1, best2, bestgn, unresolved = self._checked(b1, b2, gn, w1, w2, hs1, hs2, weight, fb)
        xi1, xi2, y1, y2 = xi_y(self.B_inv, self.mu_w, w1, w2, hs1, hs2)
        ov = self.ov
        vals = model.channel_integrands(best1, best2, xi1, xi2, y1, y2, ov.q, ov.m, V, ov.theta)
        sums = np.array([np.dot(v, weight) for v in vals])
        return sums, unresolved, float(bestgn.max())

    def _checked(self, b1, b2, gn, w1, w2, hs1, hs2, weight, fb):
        """The global prox at each node: the followed branch ``b`` (objective ``fb`` there)
        checked by Newton from ``-b`` and, unless the rule leaves it out, from ``w``.
        Returns the best points, their gradient norms and the weight of the nodes where a
        check went lower."""
        model, V, tol = self.model, self.ov.V, self.rule.newton_tol
        best1, best2, bestf, bestgn = (np.array(a, dtype=float, copy=True) for a in (b1, b2, fb, gn))
        starts = ((w1, w2), (-b1, -b2))
        if not self.rule.check_from_w and model.loss_is_even:
            starts = starts[1:]  # the reflected start alone (ChannelRule.check_from_w)
        for s1, s2 in starts:
            c1, c2, _, fc = newton_prox(model, s1, s2, w1, w2, hs1, hs2, V, tol=tol, maxiter=CHECK_STEPS,
                                        known=(best1, best2))
            better = np.nonzero(fc < bestf - 1e-13 * np.maximum(1.0, np.abs(bestf)))[0]
            if better.size == 0:
                continue
            sub = (w1[better], w2[better], hs1[better], hs2[better])
            d1, d2, dgn, df = newton_prox(model, c1[better], c2[better], *sub, V, tol=tol)
            best1[better], best2[better], bestgn[better], bestf[better] = d1, d2, dgn, df
        jumped = bestf < fb - 1e-13 * np.maximum(1.0, np.abs(fb))
        return best1, best2, bestgn, float(weight[jumped].sum())


def xi_y(B_inv, mu_w, w1, w2, hs1, hs2):
    """Invert the affine preactivation map: the standard-normal (xi, y) of a node."""
    r = np.array([w1 - mu_w[0], w2 - mu_w[1], hs1, hs2])
    return tuple(B_inv @ r.reshape(4, -1))

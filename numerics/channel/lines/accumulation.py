"""Accumulating the channel integrands over the nodes of the lines, each at the global prox.

Every side of every line follows its branch of the prox by continuation from its
split point outward (:func:`follow_sides`); :func:`accumulate` checks each node against
Newton from the reflected branch (and from ``w``) and adds the weighted generated
integrands.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from derivations import CHANNEL_NAMES
from derivations.compiled import LINE_SUMS

from numerics.prox.newton import follow_paths
from numerics.prox.scalar import global_prox, newton_prox
from numerics.threads import kernel_threads, map_over_threads, split_over_threads


# Newton steps a safety check may take before it is abandoned. A check only matters
# where it reaches an objective below the followed branch; the prox Newton is a
# descent method, so a check already below is continued to convergence. Measured by
# studies/check_steps.py on six overlaps (both branches, the trivial point,
# V from 11 to 24) with the fast reporting rule: a single check can need up to 13
# steps to go below, but with both checks at 4 steps the channel expectations differ
# from those with 60 steps by at most 1.8e-11 relative.
CHECK_STEPS = 4
CHUNK = 16384  # nodes per batch in the checks: the temporaries stay in cache
# Nodes of follow_sides' padded (node k, side) layout per block of sides (:func:`side_blocks`). Every
# fast rule of the paper's model fits in one block (its largest is 0.39 million), so the fast and draft
# numbers are those of one pass to the last bit. The high reporting rule has 12.3 million: in one pass
# each evaluation allocated some 2 GB of temporaries of 80-320 MB, which the allocator maps afresh
# (page faults: a third of a high fixed point's time was the kernel's); in blocks of this size they
# stay a few MB each and are reused.
BLOCK_NODES = 2**19


class FollowedNodes(NamedTuple):
    """Every node of every side, in the continuation's order (node ``k`` of every side still running
    there, ``k = 0, 1, ...``): the followed branch ``b1, b2`` with its gradient norm ``gn`` and
    objective ``fb``, ``w1, w2``, the teacher pre-activations ``hs1, hs2`` and matrices ``teacher``
    of the node's line, and its quadrature ``weight``."""

    b1: np.ndarray
    b2: np.ndarray
    gn: np.ndarray
    fb: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    hs1: np.ndarray
    hs2: np.ndarray
    teacher: np.ndarray
    weight: np.ndarray

    def solved(self) -> tuple:
        """``(b1, b2, gn, fb)``, read-only: what :func:`follow_sides` solved for (the rest is layout)."""
        for a in (self.b1, self.b2, self.gn, self.fb):
            a.flags.writeable = False
        return self.b1, self.b2, self.gn, self.fb


def follow_sides(model, rule, V, lines, pieces, solved: Optional[tuple] = None) -> FollowedNodes:
    """Follow every side of every line (``lines``: :class:`~numerics.channel.lines.geometry.ChannelLines`;
    ``pieces``: :func:`~numerics.channel.lines.geometry.line_pieces`) at once, node ``k`` of all sides
    in one batch (small per-group batches cost more in call overhead than in arithmetic).

    Sides are sorted by their number of nodes, longest first, so the sides still running at node
    ``k`` are a prefix. Each side follows its branch by continuation from its split point outward:
    Newton from a prediction by the nodes before (secant or quadratic, :func:`numerics.prox.newton.follow_paths`,
    for the compiled backend one kernel call for all nodes). ``w`` and the weight of every node are
    computed at once before (elementwise: the numbers node ``k`` at a time would give).

    ``solved``: the followed branch of an earlier call on the same ``pieces`` (:meth:`FollowedNodes.solved`);
    only the layout is computed again, not the starts and the continuation."""
    K = np.array([p[1].shape[0] for p in pieces])
    counts = [p[0].size for p in pieces]
    order = np.argsort(-K, kind="stable")
    line = np.concatenate([pieces[o][0] for o in order])
    k_max = K[order[0]]
    # each side's nodes, zero below its last one: the padded (node, side) layout
    T, WT = np.zeros((k_max, line.size)), np.zeros((k_max, line.size))
    pos = 0
    for o in order:
        T[:K[o], pos:pos + counts[o]] = pieces[o][1]
        WT[:K[o], pos:pos + counts[o]] = pieces[o][2]
        pos += counts[o]
    K_line = np.concatenate([np.full(counts[o], K[o]) for o in order])
    hs1, hs2, teacher = lines.hs1[line], lines.hs2[line], lines.teacher[line]
    W1, W2 = lines.w_of(T, idx=line)
    weight = WT * np.exp(-0.5 * T**2) / np.sqrt(2 * np.pi) * lines.weight[line]
    # the sides with a node k: a prefix, as K_line does not increase
    running = np.searchsorted(-K_line, -np.arange(k_max), side="left")

    def nodes_of(a):
        # (node k, side) -> node k of every side still running there (a prefix of the sides), as
        # running-order arrays: the rows' prefixes one after the other (a boolean mask's order)
        return np.concatenate([a[k, :m] for k, m in enumerate(running)])

    def sides_of(a):
        # per side -> per node, in the same order
        return np.concatenate([a[:m] for m in running])

    layout = (nodes_of(W1), nodes_of(W2), sides_of(hs1), sides_of(hs2), sides_of(teacher), nodes_of(weight))
    if solved is not None:
        return FollowedNodes(*solved, *layout)
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
        b1[u], b2[u] = global_prox(model, W1[0, u], W2[0, u], hs1[u], hs2[u], V, tol=rule.newton_tol,
                                   teacher=teacher[u])[:2]
    h, fb, gn = follow_paths(model, np.stack([b1, b2], axis=-1), T, np.stack([W1, W2], axis=-1), teacher, running,
                             V, tol=rule.newton_tol)
    return FollowedNodes(h[:, 0], h[:, 1], gn, fb, *layout)


def side_blocks(pieces, budget: int) -> list:
    """``pieces`` (:func:`~numerics.channel.lines.geometry.line_pieces`) as blocks of sides whose padded
    layout in :func:`follow_sides` (the block's longest side times its sides) holds at most ``budget``
    nodes (a side longer than that alone); ``[pieces]`` as they are where all of them fit. Each side
    is followed by itself, so a node's prox does not depend on the blocks; only the order in which the
    integrands are summed does."""
    longest = max((p[1].shape[0] for p in pieces), default=0)
    if longest * sum(p[0].size for p in pieces) <= budget:
        return [pieces]
    blocks, block, k_block, n_block = [], [], 0, 0
    for idx, t, w, start in sorted(pieces, key=lambda p: -p[1].shape[0]):  # longest first, as follow_sides
        k, lo = t.shape[0], 0
        while lo < idx.size:
            room = max(budget // max(k_block, k), 1) - n_block
            if room <= 0:
                blocks.append(block)
                block, k_block, n_block = [], 0, 0
                continue
            hi = min(idx.size, lo + room)
            block.append((idx[lo:hi], t[:, lo:hi], w[:, lo:hi],
                          None if start is None else (start[0][lo:hi], start[1][lo:hi])))
            k_block, n_block, lo = max(k_block, k), n_block + hi - lo, hi
    return blocks + [block] if block else blocks


def integrate_sides(model, ov, rule, lines, pieces, B_inv, mu_w, followed: Optional[tuple] = None) -> tuple:
    """:func:`follow_sides` then :func:`accumulate`, block by block of sides (:func:`side_blocks`, of
    :data:`BLOCK_NODES`). Returns ``(Accumulated, followed)``, ``followed`` per block the pair of its
    :meth:`FollowedNodes.solved` (what an evaluation computes before its checks) and its accumulation
    at the followed branch (None where checks changed a node and none without them was made). Given
    ``followed`` of an earlier call on the same ``pieces``, the sides are not followed again, and where
    the checks change no node of a block its integrands are not summed again either (an evaluation with
    the checks at the overlaps where the solver approached a fixed point without them)."""
    blocks = side_blocks(pieces, BLOCK_NODES)

    def integrate(k):
        solved, plain = (None, None) if followed is None else followed[k]
        with np.errstate(over="ignore", under="ignore"):  # as the caller's, in whichever thread
            nodes = follow_sides(model, rule, ov.V, lines, blocks[k], solved)
            part, changed = accumulate(model, ov, rule, B_inv, mu_w, nodes, plain)
        return part, (nodes.solved(), plain if plain is not None or changed else part)

    # several blocks (the high rules) side by side in the kernels' threads, each with its layout's
    # numpy work, which alone holds a core; one block (every fast rule) splits its kernel calls
    parts, kept = zip(*map_over_threads(integrate, list(range(len(blocks)))))
    if len(parts) == 1:
        return parts[0], tuple(kept)
    return Accumulated(np.sum([p.sums for p in parts], axis=0), sum(p.unresolved for p in parts),
                       max(p.max_gn for p in parts), sum(p.nodes for p in parts)), tuple(kept)


class Accumulated(NamedTuple):
    """The weighted sums of the channel integrands (``CHANNEL_NAMES`` order), the weight of the
    nodes where a check went lower (``unresolved``), the worst gradient norm and the node count."""

    sums: np.ndarray
    unresolved: float
    max_gn: float
    nodes: int


def accumulate(model, ov, rule, B_inv, mu_w, nodes: FollowedNodes, plain: Optional[Accumulated] = None) -> tuple:
    """The weighted channel integrands of ``nodes``, each at the global prox: the followed branch,
    checked (where ``rule.check_global``) by Newton from the reflected branch and from ``w``
    (``CHECK_STEPS`` steps, then to convergence where a check went lower). A strictly lower objective
    found by a check is used and its weight counted as unresolved (an unlocated switch).

    The checks go in blocks of at most ``CHUNK`` nodes, side by side in the kernels' threads where
    there are several (each node checked by itself: the same numbers as chunk by chunk), so that the
    temporaries stay in cache and the selection between the compiled calls does not leave a core
    waiting. The weighted sums go chunk by chunk (:func:`_weighted_sums`: one compiled pass over a
    chunk's nodes, or its integrands as arrays dotted with its weights), in groups of consecutive chunks
    side by side in the kernels' threads where there are at least :data:`PARALLEL_INTEGRANDS` nodes a
    thread; the chunks' sums are added in their order (the same numbers either way).

    ``plain``: the accumulation of the same nodes at their followed branch (without checks, or with
    checks that changed none). Where the checks change no node it is that of this call to the bit (the
    same integrands summed in the same order), and is returned, a copy, instead of summing again.
    Returns ``(Accumulated, changed)``, ``changed`` whether a check changed a node."""
    n = nodes.b1.size
    chunks = [slice(lo, lo + CHUNK) for lo in range(0, n, CHUNK)]
    best1, best2, bestgn = nodes.b1, nodes.b2, nodes.gn
    unresolved_parts = [0.0] * len(chunks)
    changed = False
    if rule.check_global:
        best1, best2, bestgn = np.empty(n), np.empty(n), np.empty(n)
        jumped = np.empty(n, dtype=bool)

        def check(part):  # node by node: blocks of chunks side by side in the kernels' threads
            best1[part], best2[part], bestgn[part], jumped[part], moved = _checked(
                model, ov.V, rule, FollowedNodes(*(a[part] for a in nodes)))
            return (np.array([moved]),)

        changed = bool(split_over_threads(check, n, CHUNK, CHUNK)[0].any())
        unresolved_parts = [float(nodes.weight[part][jumped[part]].sum()) for part in chunks]
    if plain is not None and not changed:
        return plain._replace(sums=plain.sums.copy()), False
    per_chunk = _weighted_sums(model, ov, B_inv, mu_w, nodes, best1, best2, chunks)
    sums, unresolved, max_gn = np.zeros(len(CHANNEL_NAMES)), 0.0, 0.0
    for k, part in enumerate(chunks):
        sums += per_chunk[k]
        unresolved += unresolved_parts[k]
        max_gn = max(max_gn, float(bestgn[part].max()))
    return Accumulated(sums, unresolved, max_gn, n), changed


#: nodes per thread below which the integrands' sums stay in the calling thread (a hand-off cost about
#: 0.3 ms on the 2-core machine, the integrands of 3000 nodes as arrays): the fast coarse rule's 64,000
#: nodes split made its evaluations 4% faster than in one call (``python benchmarks/kernels.py splits``,
#: the same numbers), measured with the integrands as arrays; the draft rule's 9,000 stay in one
PARALLEL_INTEGRANDS = 16384


def _weighted_sums(model, ov, B_inv, mu_w, nodes: FollowedNodes, h1, h2, chunks: list) -> np.ndarray:
    """The weighted sums of the generated channel integrands at the prox ``h1, h2`` of ``nodes``, chunk
    by chunk (a row per chunk of ``chunks``, ``CHANNEL_NAMES`` order), in groups of consecutive chunks
    side by side in the kernels' threads where each gets at least :data:`PARALLEL_INTEGRANDS` nodes (the
    same numbers either way). By the model's compiled sums where it has them (one pass over the nodes,
    :data:`derivations.compiled.LINE_SUMS`), else each chunk's integrands as arrays (elementwise) and
    their dot products with its weights."""
    kernel = model.gm.functions.get(LINE_SUMS) if model.backend == "compiled" else None
    if kernel is not None:
        arrays = [np.ascontiguousarray(a, dtype=float) for a in (h1, h2, nodes.w1, nodes.w2, nodes.hs1, nodes.hs2,
                                                                   nodes.weight)]
        rest = (np.ascontiguousarray(B_inv, dtype=float), np.asarray(mu_w, dtype=float),
                np.array([ov.q, ov.m, ov.V, ov.theta], dtype=float), np.asarray(model.params, dtype=float))

        def run(ks):
            edges = np.array([chunks[k].start for k in ks] + [min(chunks[ks[-1]].stop, arrays[0].size)])
            return kernel(*arrays, *rest, edges)
    else:
        def run(ks):
            out = np.empty((len(ks), len(CHANNEL_NAMES)))
            for j, k in enumerate(ks):
                part = chunks[k]
                xi = xi_y(B_inv, mu_w, nodes.w1[part], nodes.w2[part], nodes.hs1[part], nodes.hs2[part])
                vals = model.channel_integrands(h1[part], h2[part], *xi, ov.q, ov.m, ov.V, ov.theta)
                out[j] = [np.dot(v, nodes.weight[part]) for v in vals]
            return out

    threads = max(min(kernel_threads(), nodes.b1.size // PARALLEL_INTEGRANDS, len(chunks)), 1)
    groups = [list(g) for g in np.array_split(np.arange(len(chunks)), threads) if g.size]
    return np.concatenate(map_over_threads(run, groups))


def _checked(model, V, rule, nodes: FollowedNodes):
    """The global prox at each node: the followed branch ``b`` (objective ``fb`` there)
    checked by Newton from ``-b`` and, unless the rule leaves it out, from ``w``.
    Returns the best points, their gradient norms, which nodes a check took lower and whether any
    node changed."""
    b1, b2, gn, fb, w1, w2, hs1, hs2, teacher, _ = nodes
    tol = rule.newton_tol
    best1, best2, bestf, bestgn = b1, b2, fb, gn  # copied where a check first goes lower
    changed = False
    starts = ((w1, w2), (-b1, -b2))
    if not rule.check_from_w and model.loss_is_even:
        starts = starts[1:]  # the reflected start alone (ChannelRule.check_from_w)
    for s1, s2 in starts:
        c1, c2, _, fc = newton_prox(model, s1, s2, w1, w2, hs1, hs2, V, tol=tol, maxiter=CHECK_STEPS,
                                    known=(best1, best2), teacher=teacher)
        better = np.nonzero(fc < bestf - 1e-13 * np.maximum(1.0, np.abs(bestf)))[0]
        if better.size == 0:
            continue
        sub = (w1[better], w2[better], hs1[better], hs2[better])
        d1, d2, dgn, df = newton_prox(model, c1[better], c2[better], *sub, V, tol=tol, teacher=teacher[better])
        if not changed:
            best1, best2, bestf, bestgn = (np.array(a, dtype=float, copy=True) for a in (best1, best2, bestf, bestgn))
        best1[better], best2[better], bestgn[better], bestf[better] = d1, d2, dgn, df
        changed = True
    jumped = bestf < fb - 1e-13 * np.maximum(1.0, np.abs(fb)) if changed else np.zeros(b1.size, dtype=bool)
    return best1, best2, bestgn, jumped, changed


def xi_y(B_inv, mu_w, w1, w2, hs1, hs2):
    """Invert the affine preactivation map: the standard-normal (xi, y) of a node."""
    r = np.array([w1 - mu_w[0], w2 - mu_w[1], hs1, hs2])
    return tuple(B_inv @ r.reshape(4, -1))

"""Where the global minimiser of the prox jumps along each line: the switch location.

Along a line the objectives of the two local minima cross at the switch ``t*``; it is
located by a safeguarded Newton iteration on their difference (whose derivative the
envelope theorem gives), so that each side of the line is integrated on one smooth
branch (docs/studies/switch_location.md).
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from numerics.prox.newton import curvature_floor
from numerics.prox.scalar import global_prox, newton_prox
from numerics.threads import split_over_threads

log = logging.getLogger(__name__)


class Switches(NamedTuple):
    """The switch of each line: ``t_split`` (the switch, or ``t0`` for a line without
    one), the minima left and right of it (``(h1, h2)`` arrays) and ``switched``."""

    t_split: np.ndarray
    left: tuple
    right: tuple
    switched: np.ndarray


#: two minima closer than this (max of the two coordinates' distance) at a trial point are one
GAP_TOL = 1e-7
#: the minima at a bracket's ends this close: one branch, no switch. A switch's gap is below this
#: only within ~1e-4 of a cusp end of its segment (gap ~ sqrt(distance)); such a jump left in a line
#: is small, and the checks report its nodes. (1e-4 gave bitwise the same channel values on six
#: study points, with 7 more bisection steps.)
JOIN_TOL = 1e-2
#: Newton's steps per minimum at a trial point
NEWTON_STEPS = 60


def _brackets(model, rule, V, at, t0, hs1, hs2, teacher, half_width: float) -> tuple:
    """The starting brackets ``t0 -+ half_width`` of the lines (within the rule's truncation), the
    global minima at their ends and the direction of ``w`` along the lines (``w`` is affine in
    ``t``): ``(tl, tr, A, B, dw)``."""
    tl = np.maximum(t0 - half_width, -rule.t_max)
    tr = np.minimum(t0 + half_width, rule.t_max)
    # both ends in one call (each node's global prox is its own; one call costs half the overhead)
    (wl1, wl2), (wr1, wr2) = at(tl, slice(None)), at(tr, slice(None))
    ends = global_prox(model, np.concatenate([wl1, wr1]), np.concatenate([wl2, wr2]), np.tile(hs1, 2),
                       np.tile(hs2, 2), V, tol=rule.newton_tol, teacher=np.tile(teacher, (2, 1)))
    n = t0.size
    A, B = (ends[0][:n], ends[1][:n]), (ends[0][n:], ends[1][n:])
    wa, wb = at(np.ones(n), slice(None)), at(np.zeros(n), slice(None))
    return tl, tr, A, B, (wa[0] - wb[0], wa[1] - wb[1])


def _trial_step(model, rule, V, w, hs, teacher, A, B, dw) -> tuple:
    """Both minima continued to the trial points (at ``w``) from the bracket's ends ``A`` and ``B``:
    ``(a, b, both, go_right, step)``; ``both``: they are distinct there; ``go_right``: the switch lies
    right of the trial point (by the sign of ``D = M_a - M_b`` where both exist, else by the minimum
    the merged point continues); ``step``: Newton's step on ``D``, ``dD/dt = (b - a)/V . dw/dt``."""
    # both minima in one call, as two sets of nodes
    n = A[0].size
    c1, c2, _, f = newton_prox(model, np.concatenate([A[0], B[0]]), np.concatenate([A[1], B[1]]), np.tile(w[0], 2),
                               np.tile(w[1], 2), np.tile(hs[0], 2), np.tile(hs[1], 2), V, tol=rule.newton_tol,
                               maxiter=NEWTON_STEPS, teacher=np.tile(teacher, (2, 1)))
    (a1, b1), (a2, b2), (fa, fb) = ((x[:n], x[n:]) for x in (c1, c2, f))
    both = np.hypot(a1 - b1, a2 - b2) > GAP_TOL
    D = fa - fb
    dD = ((b1 - a1) * dw[0] + (b2 - a2) * dw[1]) / V
    nearer_A = np.hypot(a1 - A[0], a2 - A[1]) <= np.hypot(a1 - B[0], a2 - B[1])
    go_right = np.where(both, D < 0, nearer_A)
    step = np.where(both & (dD != 0), -D / np.where(dD != 0, dD, 1.0), np.inf)
    return (a1, a2), (b1, b2), both, go_right, step


def locate_switches(model, rule, V, w_of, t0, hs1, hs2, has_pair, half_width: float = 2.0,
                    max_iter: int = 80, teacher=None, geometry=None) -> Switches:
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
    whose bracket ends come to hold minima within :data:`JOIN_TOL` of each other
    carries no switch; its split stays at ``t0``. Near the cusp ends of a switching segment,
    where both minima exist only in a narrow window, this keeps the switch that
    Newton's method from ``t0 -+ 1`` lost (docs/studies/switch_location.md).
    A line still open after ``max_iter`` steps is left without a switch; the checks
    of :func:`~numerics.channel.lines.accumulation.accumulate` then report its jump as
    unresolved weight. ``teacher``: the lines' teacher matrices (``ChannelLines.teacher``; computed
    from ``hs1, hs2`` where not given). ``geometry``: the :class:`~numerics.channel.lines.geometry.ChannelLines`
    whose ``w_of`` this is; with it, a model of the compiled backend runs the iteration in its kernel
    (:func:`_compiled_steps`: line by line, the same steps and numbers as this batch loop, its reference).
    """
    t_split = t0.copy()
    lines = np.nonzero(has_pair)[0]
    if lines.size == 0:
        none = (np.zeros(0), np.zeros(0))
        return _switches(rule, t0, t_split, lines, np.zeros(0, dtype=bool), none, none)

    def at(t, idx):
        return w_of(t, idx=lines[idx])

    if teacher is None:
        teacher = model.teacher_matrix(np.stack([hs1, hs2], axis=-1))
    T = teacher[lines]
    tl, tr, (A1, A2), (B1, B2), (dw1, dw2) = _brackets(model, rule, V, at, t0[lines], hs1[lines], hs2[lines], T,
                                                       half_width)
    if geometry is not None and model.backend == "compiled":
        t_found, found, done, (A1, A2), (B1, B2) = _compiled_steps(model, rule, V, geometry, lines, tl, tr,
                                                                  (A1, A2), (B1, B2), (dw1, dw2), T, max_iter)
        t_split[lines[found]] = t_found[found]
    else:
        trial = 0.5 * (tl + tr)
        done = np.hypot(A1 - B1, A2 - B2) <= GAP_TOL  # the same minimum at both ends: no switch
        found = np.zeros(lines.size, dtype=bool)
        for _ in range(max_iter):
            act = np.nonzero(~done)[0]
            if act.size == 0:
                break
            tm = trial[act]
            (a1, a2), (b1, b2), both, go_right, step = _trial_step(
                model, rule, V, at(tm, act), (hs1[lines[act]], hs2[lines[act]]), T[act], (A1[act], A2[act]),
                (B1[act], B2[act]), (dw1[act], dw2[act]))
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
            joined = ~conv & (np.hypot(A1[act] - B1[act], A2[act] - B2[act]) <= JOIN_TOL)
            s = act[tiny & ~joined]
            t_split[lines[s]] = 0.5 * (tl[s] + tr[s])
            found[s] = True
            done[act[tiny | joined]] = True
            # next trial: Newton's estimate where it is inside the bracket, else the midpoint
            newton_t = tm + step
            inside = both & (newton_t > tl[act]) & (newton_t < tr[act])
            trial[act] = np.where(inside, newton_t, 0.5 * (tl[act] + tr[act]))
    if not done.all():
        log.debug("switch location: %d lines still open after %d steps", np.count_nonzero(~done), max_iter)
    return _switches(rule, t0, t_split, lines, found, (A1, A2), (B1, B2))


def _switches(rule, t0, t_split, lines, found, A, B) -> Switches:
    """The :class:`Switches` of the located lines ``lines`` (``found``: a switch at ``t_split`` there,
    between the minima ``A`` and ``B``); the other lines keep their ``t0`` and no switch."""
    n = t0.size
    # a switch at the truncation bounds no Gaussian mass worth a piece (beyond t_max - 0.01: < 1e-17)
    found = found & (np.abs(t_split[lines]) < rule.t_max - 0.01)
    t_split[lines[~found]] = t0[lines[~found]]
    switched = np.zeros(n, dtype=bool)
    switched[lines[found]] = True
    left, right = (np.zeros(n), np.zeros(n)), (np.zeros(n), np.zeros(n))
    left[0][lines], left[1][lines] = A
    right[0][lines], right[1][lines] = B
    return Switches(t_split, left, right, switched)


#: lines per thread below which the compiled switch location stays in the calling thread (a line's
#: iteration is about a dozen steps of two Newton solves, some 10 us)
PARALLEL_LINES = 256


def _compiled_steps(model, rule, V, geometry, lines, tl, tr, A, B, dw, T, max_iter: int) -> tuple:
    """The iteration of :func:`locate_switches` on ``lines`` of ``geometry`` by the model's compiled
    kernel (``switch_<terms>``, :mod:`derivations.kernels`), blocks of lines side by side in the kernels'
    threads: ``(t, found, done, A, B)`` as the batch loop leaves them."""
    kernel = model.gm.switch_prox_newton_of_T
    L_ww = np.ascontiguousarray(geometry.L_ww, dtype=float)
    per_line = [np.ascontiguousarray(x, dtype=float) for x in
                (tl, tr, np.stack(A, axis=-1), np.stack(B, axis=-1), geometry.c1[lines], geometry.c2[lines],
                 geometry.n1[lines], geometry.n2[lines], geometry.u[lines], np.stack(dw, axis=-1), T)]
    rest = (float(V), np.asarray(model.pack("V", V), dtype=float), np.asarray(model.params, dtype=float),
            float(curvature_floor(V)), float(rule.newton_tol), NEWTON_STEPS, int(max_iter), GAP_TOL, JOIN_TOL)

    def run(part):
        tl_, tr_, a_, b_, c1, c2, n1, n2, u, dw_, c = (x[part] for x in per_line)
        return kernel(tl_, tr_, a_, b_, c1, c2, n1, n2, u, L_ww, dw_, c, *rest)

    t, found, done, a, b = split_over_threads(run, lines.size, PARALLEL_LINES)
    return t, found, done, (a[:, 0], a[:, 1]), (b[:, 0], b[:, 1])

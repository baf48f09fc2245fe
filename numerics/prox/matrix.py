"""The global prox of the general model in ``R^{L r}`` (docs/theory.md, section 4.3).

``prox(w, h*) = argmin_h 1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + l(h; h*)``. The loss is not
convex, and the theory needs the global minimiser. Three facts make a multi-start search safe:

* the global minimiser lies in the ellipsoid ``1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) <=
  l(w; h*)`` (the objective at ``h = w`` bounds the minimum);
* ``l`` depends on ``h`` only through ``h h^T``, so ``-h`` and the single-direction flips ``h D``
  (``D`` diagonal of signs) of a minimiser are natural starts for the competing minima;
* the nodes of a quasi-Monte Carlo rule do not move between evaluations of the saddle-point map,
  so each node's minimisers of the previous evaluation are starts within a Newton step or two of
  this one's.

:func:`numerics.prox.newton.newton` is the local solver; :class:`GlobalProx` keeps
the per-node warm starts and runs the search; :meth:`GlobalProx.dense_check` re-solves a subsample
from many more starts and reports where a better minimum exists.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

import numpy as np

from numerics.model.general import GeneralModel
from numerics.prox.newton import newton


def ellipsoid_factor(model: GeneralModel, V) -> np.ndarray:
    """``R`` (``L r x L r``) with ``1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) = 1/2 |R^{-1}(h - w)|^2``:
    ``I_L (x) V^{1/2}``, so ``h = w + sqrt(2 l(w)) R u`` with ``|u| <= 1`` fills the ellipsoid bound."""
    lam, U = np.linalg.eigh(np.atleast_2d(V))
    root = U @ np.diag(np.sqrt(np.maximum(lam, 0.0))) @ U.T
    return np.kron(np.eye(model.shape.L), root)


def sign_flips(L: int, r: int) -> np.ndarray:
    """The ``2^r - 1`` non-trivial sign patterns of the student directions, as multipliers of a
    packed ``h`` (``(2^r - 1, L r)``); the first is ``-1`` everywhere (the reflection)."""
    patterns = [p for p in itertools.product((-1.0, 1.0), repeat=r) if any(x < 0 for x in p)]
    patterns.sort(key=lambda p: -sum(x < 0 for x in p))
    return np.array([np.tile(p, L) for p in patterns])


def _first_lowest(n: int, rows: np.ndarray, obj: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Per node ``0 .. n - 1``: the ``index`` of its entry (``rows`` the entries' nodes, ``obj`` their
    objectives, never NaN) of lowest objective, the first in the entries' order on a tie; -1 where
    the node has none. The order of a stable sort by (node, objective), in linear time: the sort cost
    three times as much as the whole selection now does, on a search's 9 candidates per node."""
    if len(obj) == 0:
        return np.full(n, -1)
    lowest = np.full(n, np.inf)
    np.minimum.at(lowest, rows, obj)
    at = np.nonzero(obj == lowest[rows])[0]
    first = np.full(n, len(obj))
    np.minimum.at(first, rows[at], at)
    return np.where(first < len(obj), index[np.minimum(first, len(obj) - 1)], -1)


@dataclasses.dataclass(frozen=True)
class DenseCheck:
    """The outcome of :meth:`GlobalProx.dense_check` on a subsample."""

    nodes: int                 # subsample size
    improved_fraction: float   # fraction of the subsample where a lower minimum was found
    improved: np.ndarray       # node indices (into the full set) where it was
    new_h: np.ndarray          # the better minimisers at those nodes


class GlobalProx:
    """The global prox on a fixed set of ``n_nodes`` nodes, with per-node warm starts.

    A call minimises from the node's previous minimiser and its runner-up (a distinct local
    minimum found last time), with ``flips`` the sign flips of the previous minimiser
    (:func:`sign_flips`), and in a full search also ``w`` and ``n_ellipsoid`` points in the
    ellipsoid bound (fixed random directions and radii per node). The first call, with nothing to
    warm-start from, uses the flips and ``first_ellipsoid`` points. The lowest objective wins; the
    second lowest distinct minimum is kept as the runner-up.
    """

    def __init__(self, model: GeneralModel, n_nodes: int, n_ellipsoid: int = 2, first_ellipsoid: int = 8,
                 tol: float = 1e-11):
        self.model, self.n_nodes, self.tol = model, n_nodes, tol
        self.n_ellipsoid, self.first_ellipsoid = n_ellipsoid, first_ellipsoid
        self.best: Optional[np.ndarray] = None
        self.second: Optional[np.ndarray] = None
        self.flips = sign_flips(model.shape.L, model.shape.r)
        self._directions = {}

    def _ellipsoid_points(self, count: int, w, hs, V, idx, salt: int = 0) -> list:
        """``count`` points per node in the ellipsoid bound. The directions and radii are drawn once:
        per node of the whole set for the search (``salt = 0``), so that a node gets the same points
        at every evaluation whichever subset it is solved in; per subsample for a dense check."""
        if count == 0:
            return []
        table = self._direction_table(count, salt, idx)
        table = table[:, idx] if salt == 0 else table
        R = ellipsoid_factor(self.model, V)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            bound = np.sqrt(2.0 * np.maximum(self.model.loss(w, hs), 0.0))
        return [w + bound[:, None] * (u @ R.T) for u in table]

    def _direction_table(self, count: int, salt: int, idx) -> np.ndarray:
        size = self.n_nodes if salt == 0 else len(idx)
        key = (count, salt) if salt == 0 else (count, salt, len(idx), hash(np.asarray(idx).tobytes()))
        if key not in self._directions:
            rng = np.random.default_rng([salt, count, size])
            u = rng.standard_normal((count, size, self.model.n_h))
            u /= np.linalg.norm(u, axis=-1, keepdims=True)
            radius = rng.uniform(0.15, 1.0, size=(count, size, 1)) ** (1.0 / self.model.n_h)
            self._directions[key] = u * radius
        return self._directions[key]

    def _minimise(self, starts, w, T, V, known=None, known_objective=None, cap=None):
        """Newton from ``starts``, a list of ``(rows, h0)``: starting points ``h0`` for the nodes
        ``rows`` of ``w`` and of the teacher's matrices ``T`` (``None``: all). Returns per node (rows
        of ``w``) the lowest minimum, its objective and gradient norm, and the runner-up (the lowest
        minimum at least 1e-3 away, NaN where there is none). Starts stopped by ``known``
        (:func:`numerics.prox.newton.newton`) do not compete: the caller passes the known minima in as
        candidates."""
        n = len(w)
        rows = np.concatenate([np.arange(n) if r is None else r for r, _ in starts])
        h0 = np.concatenate([h for _, h in starts])
        kn = None if known is None else known[rows]
        ko = None if known_objective is None else known_objective[rows]
        h, obj, gn = newton(self.model, h0, w[rows], T[rows], V, tol=self.tol, known=kn, known_objective=ko,
                            cap=cap)
        obj = np.where(np.isfinite(obj) & ~np.isnan(gn), obj, np.inf)
        return rows, h, obj, gn

    @staticmethod
    def _select(n, candidates):
        """Per node of ``n``: the lowest of the ``candidates`` (tuples ``(rows, h, objective,
        gradient norm)``), its objective and gradient norm, and the runner-up (the lowest candidate
        at least 1e-3 away from it; NaN where there is none)."""
        rows, h, obj, gn = (np.concatenate(x) for x in zip(*candidates))
        first = _first_lowest(n, rows, obj, np.arange(len(rows)))
        if (first < 0).any():
            raise ValueError("a node without a candidate minimum")
        best_h = h[first]
        far = np.max(np.abs(h - best_h[rows]), axis=1) > 1e-3
        far &= np.isfinite(obj)
        runner = np.full_like(best_h, np.nan)
        cand = np.nonzero(far)[0]
        if cand.size:
            second = _first_lowest(n, rows[cand], obj[cand], cand)
            has = second >= 0
            runner[has] = h[second[has]]
        return best_h, obj[first], gn[first], runner

    def __call__(self, w, hs, V, idx: Optional[np.ndarray] = None, full: bool = True, cap: int = 4,
                 flips: bool = True):
        """``(h, objective, gradient norm)`` at the nodes ``idx`` (default all), whose ``(w, h*)``
        are the rows of ``w, hs``; updates the warm starts of those nodes.

        Without warm starts (the first call): Newton from ``w``, then from its sign flips and
        ``first_ellipsoid`` ellipsoid points, each stopped when it comes within reach of the
        minimum found from ``w``. With warm starts, in two batches: first from the previous
        minimiser, which converges in a step or two; then from the previous runner-up (where there
        was one) and, with ``flips``, the sign flips of the previous minimiser, capped at ``cap``
        steps unless below the first batch's minimum, and with ``full`` also from ``w`` and
        ``n_ellipsoid`` ellipsoid points, uncapped; every start of the second batch stops as soon
        as it comes within reach of the first batch's minimum. A call with the flips (the first
        call has them) records at its nodes whether its other starts changed the first batch's
        minimum (:meth:`flips_needed`)."""
        idx = np.arange(self.n_nodes) if idx is None else np.asarray(idx)
        n = len(idx)
        self._allocate()
        T = self.model.teacher(hs)
        if np.isnan(self.best[idx, 0]).any():
            first = self._minimise([(None, w)], w, T, V)
            starts = [(None, w * f) for f in self.flips]
            starts += [(None, p) for p in self._ellipsoid_points(self.first_ellipsoid, w, hs, V, idx)]
            candidates = [first, self._minimise(starts, w, T, V, known=first[1], known_objective=first[2])]
        else:
            prev = self.best[idx]
            first = self._minimise([(None, prev)], w, T, V)
            _, h1, obj1, _ = first
            runner = self.second[idx]
            has = np.nonzero(~np.isnan(runner[:, 0]))[0]
            light = [(has, runner[has])] if has.size else []
            if flips:
                light += [(None, prev * f) for f in self.flips]
            candidates = [first]
            if light:
                candidates.append(self._minimise(light, w, T, V, known=h1, known_objective=obj1, cap=cap))
            if full:
                search = [(None, w)] + [(None, p) for p in self._ellipsoid_points(self.n_ellipsoid, w, hs, V, idx)]
                candidates.append(self._minimise(search, w, T, V, known=h1, known_objective=obj1))
        best, obj, gn, runner = self._select(n, candidates)
        if flips and len(candidates) > 1:
            self._changed[idx] = np.max(np.abs(best - candidates[0][1]), axis=1) > 1e-3
        self.best[idx], self.second[idx] = best, runner
        return best, obj, gn

    def prepare(self, full: bool = True) -> None:
        """Allocate the per-node records and draw the ellipsoid points of the whole set that the calls
        will search (the first search's where a node has no warm start, the full search's with
        ``full``), before calls on blocks of the nodes run side by side in threads."""
        self._allocate()
        first = self.first_ellipsoid if np.isnan(self.best[:, 0]).any() else 0
        for count in (first, self.n_ellipsoid if full else 0):
            if count:
                self._direction_table(count, 0, None)

    def _allocate(self) -> None:
        """The per-node records, empty (no minimiser yet), where there are none."""
        if self.best is None:
            self.best = np.full((self.n_nodes, self.model.n_h), np.nan)
            self.second = np.full((self.n_nodes, self.model.n_h), np.nan)
            self._changed = np.ones(self.n_nodes, dtype=bool)

    def state(self, idx) -> dict:
        """The warm starts and search records of the nodes ``idx`` (:meth:`adopt_state`)."""
        self._allocate()
        return {"best": self.best[idx].copy(), "second": self.second[idx].copy(), "changed": self._changed[idx].copy(),
                "n_ellipsoid": self.n_ellipsoid}

    def adopt_state(self, idx, state: dict) -> None:
        """Take over the warm starts and search records of the nodes ``idx`` from another search of the
        same nodes (:meth:`state`); a refined search (more ellipsoid points) stays refined."""
        self._allocate()
        self.best[idx], self.second[idx], self._changed[idx] = state["best"], state["second"], state["changed"]
        self.n_ellipsoid = max(self.n_ellipsoid, state["n_ellipsoid"])

    def flips_needed(self, idx: Optional[np.ndarray] = None) -> bool:
        """Whether the last call with the sign flips at any of the nodes ``idx`` (default all) found
        a minimum other than the first batch's there (True before any such call). Between searches
        of a moving point a caller may leave the flips out where this is False
        (:class:`~numerics.channel.qmc.channel.QMCChannel`)."""
        if self.best is None:
            return True
        return bool(self._changed[slice(None) if idx is None else idx].any())

    def dense_check(self, w, hs, V, idx, current_obj, n_starts: int = 48, salt: int = 1) -> DenseCheck:
        """Re-solve the nodes ``idx`` (rows of ``w, hs``) from ``n_starts`` ellipsoid points, ``w``
        and the sign flips of ``w`` and of the current minimiser; report those where the minimum is
        lower than ``current_obj`` by more than rounding."""
        starts = [(None, w)] + [(None, w * f) for f in self.flips] + [(None, self.best[idx] * f) for f in self.flips]
        starts += [(None, p) for p in self._ellipsoid_points(n_starts, w, hs, V, idx, salt)]
        h, obj, _, _ = self._select(len(idx), [self._minimise(starts, w, self.model.teacher(hs), V)])
        better = obj < current_obj - 1e-10 * (1.0 + np.abs(current_obj))
        return DenseCheck(len(idx), float(better.mean()) if len(idx) else 0.0, np.asarray(idx)[better], h[better])

    def adopt(self, idx, h) -> None:
        """Use ``h`` as the minimisers of the nodes ``idx`` (found by a dense check); the search missed
        them, so the flips are searched again at the next evaluation (:meth:`flips_needed`)."""
        if len(idx):
            self.second[idx] = self.best[idx]
            self.best[idx] = h
            self._changed[idx] = True

"""The channel side of the general model by randomised quasi-Monte Carlo (docs/theory.md, section 4.6).

Per node: the global prox (:class:`~numerics.prox.matrix.GlobalProx`, warm-started from the
previous evaluation's minimisers at the same node) and the generated ``channel_moments``. Per
scrambling: the average of the moments and the generated ``conjugates_from_moments`` (linear in
the averages), so each conjugate has ``R`` independent estimates; the pooled estimate is the
conjugates of the pooled averages, and its standard error the spread of the ``R`` estimates over
``sqrt(R)``. Nothing here writes an equation of the model.

Folding: a moment odd under a sign flip that fixes the branch's subspace
(:meth:`~numerics.fixed_points.subspaces.BranchSubspace.symmetries`) has expectation exactly zero and is set
to zero; its parity is measured on the generated ``channel_moments`` at random points, not
assumed. Those are the moments that would move the iteration off the subspace (``pf`` at
``m = 0``, the ``h*`` columns of ``fx`` at ``theta = 0``, ...). The images under the flips need no
prox: ``prox`` of a flipped node is the flipped ``prox``.

Singular covariance: the Stein forms contain ``Sigma^{-1}`` (docs/theory.md, section 4.11). An
evaluation where ``Sigma`` is numerically singular (smallest eigenvalue of ``q - theta theta^T /
rho`` below ``SINGULAR_TOL`` times the largest of ``q``) raises :class:`SingularCovariance`
instead of dividing by it; docs/numerics.md says why the solutions met so far never come close.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Optional, Sequence

import numpy as np

from numerics.model.general import GeneralModel
from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps
from numerics.prox.matrix import GlobalProx
from numerics.fixed_points.subspaces import BranchSubspace
from numerics.channel.qmc.nodes import (GaussianNodes, OutsideDomain, gaussian_nodes, preactivation_root,
                                        preactivations)
from numerics.channel.qmc.preintegration import LineRule, line_direction, line_nodes, switch_corrections
from numerics.channel.qmc.rule import QMCRule
from numerics.threads import one_blas_thread, split_over_threads

log = logging.getLogger(__name__)

#: smallest eigenvalue of ``q - theta theta^T / rho`` (relative to the largest eigenvalue of ``q``)
#: below which ``Sigma`` counts as singular
SINGULAR_TOL = 1e-6
#: nodes per batch of the prox search
CHUNK = 2**16
#: nodes per thread below which the prox search stays in the calling thread: a draft scrambling's
#: 2048 nodes are searched in two blocks side by side (three-token draft thresholds 36.0 -> 31.7 s
#: against 4096; 512 gave no more)
PARALLEL_NODES = 1024
#: the dense check's estimated effect of the prox minima still missed on a conjugate, in units of
#: that conjugate's standard error, above which the search is refined (and then fails)
MISSED_MINIMA_TOL = 0.2


class SingularCovariance(OutsideDomain):
    """``Sigma`` is numerically singular: the Stein forms of the conjugates do not exist there."""


class GlobalProxError(RuntimeError):
    """The dense check found lower prox minima on a weight of nodes that is not small against the
    conjugates' standard errors, even after refining the search."""


@dataclasses.dataclass(frozen=True)
class ChannelEstimate:
    """The channel side at one point: pooled conjugates, the ``R`` per-scrambling ones, their
    standard error, ``E[M]`` (pooled and per scrambling), the other forms and diagnostics."""

    hats: MatrixHats
    scramble_hats: tuple
    standard_error: MatrixHats
    mean_envelope: float
    scramble_envelopes: np.ndarray
    other_forms: Dict[str, np.ndarray]
    diagnostics: dict


def moment_parities(model: GeneralModel, subspace: BranchSubspace, points: int = 16, seed: int = 0) -> np.ndarray:
    """Boolean mask of the moments odd under some flip of :meth:`BranchSubspace.symmetries`,
    measured on ``channel_moments`` at random points of the subspace (each such moment must
    change sign exactly, to rounding, at every point; any other behaviour raises)."""
    L, r, t, k = model.shape
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((points, L, r))
    zeta = rng.standard_normal((points, L, r))
    hs = rng.standard_normal((points, L, t))
    m = np.where(subspace.zero_pattern("m", model.shape), 0.0, rng.standard_normal((k, r)))
    A = rng.standard_normal((r, r))
    V = np.where(subspace.zero_pattern("V", model.shape), 0.0, A @ A.T + r * np.eye(r))
    base = model.channel_moments(h.reshape(points, -1), zeta.reshape(points, -1), hs.reshape(points, -1), m, V)
    odd = np.zeros(base.shape[1], dtype=bool)
    for signs, teacher in subspace.symmetries(model.shape):
        s, ts = np.array(signs, dtype=float), np.array(teacher, dtype=float)
        flipped = model.channel_moments((h * s).reshape(points, -1), (zeta * s).reshape(points, -1),
                                        (hs * ts).reshape(points, -1), m, V)
        scale = 1e-10 * (1.0 + np.abs(base))
        even = np.all(np.abs(flipped - base) <= scale, axis=0)
        this_odd = np.all(np.abs(flipped + base) <= scale, axis=0) & ~even
        neither = ~even & ~this_odd
        if neither.any():
            names = [model.moment_names[i] for i in np.nonzero(neither)[0]]
            raise ValueError(f"the flip {signs, teacher} fixes the {subspace.name} subspace but the moments "
                             f"{names} are neither even nor odd under it")
        odd |= this_odd
    return odd


def _moved(before: np.ndarray, after: np.ndarray) -> float:
    """The largest relative change of a component between two packed overlap vectors."""
    return float(np.max(np.abs(after - before) / np.maximum(np.abs(before), 1e-4)))


class QMCChannel:
    """The channel side of one model on one branch subspace, with fixed nodes and warm starts."""

    def __init__(self, model: GeneralModel, rule: QMCRule, subspace: BranchSubspace, fold: bool = True,
                 nodes: Optional[GaussianNodes] = None):
        """``nodes``: the rule's nodes (:func:`~numerics.channel.qmc.nodes.gaussian_nodes` of ``rule``), where
        the caller has them already (a process that solves scramblings of several points)."""
        self.model, self.rule, self.subspace = model, rule, subspace
        self.rho = model.spec.rho
        if rule.line_cells:
            L, r, t, _ = model.shape
            self.line_dim = rule.line_dim % (L * (r + t))
            self.line = LineRule.make(rule.line_cells, rule.line_order, rule.line_span)
            self.nodes = line_nodes(model.shape, rule.log2_points, rule.scrambles, rule.seed, self.line,
                                    self.line_dim)
        else:
            self.line = None
            self.nodes = nodes if nodes is not None else gaussian_nodes(model.shape, rule.log2_points,
                                                                        rule.scrambles, rule.seed)
        # nodes per line (1: plain quasi-Monte Carlo) and each one's weight within its line
        self.per_line = 1 if self.line is None else len(self.line.t)
        self.line_weights = np.ones(1) if self.line is None else self.line.weights
        self.prox = GlobalProx(model, self.nodes.size, rule.n_ellipsoid, rule.first_ellipsoid, rule.prox_tol)
        # fold=False keeps the odd moments' estimates (to check numerically that they vanish)
        self.fold = fold
        self.odd = moment_parities(model, subspace) if fold else np.zeros(len(model.moment_names), dtype=bool)
        # evaluations per set of scramblings evaluated together: a scrambling's dense checks then do
        # not depend on when the others were solved, or whether in this process
        self._evaluations_of: Dict[tuple, int] = {}
        rng = np.random.default_rng([rule.seed, 7])
        self.dense_subsample = np.sort(rng.choice(self.nodes.size, min(rule.dense_nodes, self.nodes.size),
                                                  replace=False))
        self.full_searches = 0
        self._searched_at: Dict[int, np.ndarray] = {}  # scrambling -> overlaps of its last full search

    def _check_covariance(self, ov: MatrixOverlaps) -> None:
        S = ov.q - ov.theta @ ov.theta.T / self.rho
        lam = np.linalg.eigvalsh(S)
        top = float(np.max(np.linalg.eigvalsh(ov.q)))
        if not top > 0 or lam[0] < SINGULAR_TOL * top:
            raise SingularCovariance(
                f"Sigma is singular to {SINGULAR_TOL:g}: q - theta theta^T / rho has the eigenvalue {lam[0]:.3g} "
                f"against {top:.3g} for q (the Stein forms of Vhat and thetahat divide by it; docs/theory.md, "
                f"section 4.11)")

    def scramble_state(self, j: int) -> dict:
        """What the evaluations of scrambling ``j`` alone left on its nodes (prox minimisers and the
        search's records), for :meth:`adopt_scramble_state` of another channel of the same rule."""
        return {"prox": self.prox.state(self.nodes.rows(j)), "searched_at": self._searched_at.get(j),
                "evaluations": self._evaluations_of.get((j,), 0), "full_searches": self.full_searches}

    def adopt_scramble_state(self, j: int, state: dict) -> None:
        """Continue as if scrambling ``j`` had been evaluated here as it was where ``state`` was taken
        (:meth:`scramble_state`)."""
        self.prox.adopt_state(self.nodes.rows(j), state["prox"])
        if state["searched_at"] is not None:
            self._searched_at[j] = state["searched_at"]
        self._evaluations_of[(j,)] = state["evaluations"]
        self.full_searches += state["full_searches"]

    def _conjugates(self, alpha: float, means: np.ndarray, ov: MatrixOverlaps) -> Dict[str, np.ndarray]:
        return self.model.conjugates_from_moments(alpha, means[..., :-1], ov.q, ov.theta)

    def _reported(self, forms: Dict[str, np.ndarray], i=Ellipsis) -> Dict[str, np.ndarray]:
        """The conjugates in the rule's form (``i``: which leading entry)."""
        suffix = "_dl" if self.rule.form == "dl" else ""
        return {"qhat": forms["qhat"][i], "mhat": forms["mhat"][i], "Vhat": forms["Vhat" + suffix][i],
                "thetahat": forms["thetahat" + suffix][i]}

    def _other(self, forms: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """``Vhat`` and ``thetahat`` in the other form (a check: equal as exact expectations)."""
        suffix = "" if self.rule.form == "dl" else "_dl"
        return {"Vhat": forms["Vhat" + suffix][0], "thetahat": forms["thetahat" + suffix][0]}

    @one_blas_thread
    def estimate(self, ov: MatrixOverlaps, alpha: float, scrambles: Optional[Sequence[int]] = None,
                 dense_check: Optional[bool] = None, points: Optional[int] = None) -> ChannelEstimate:
        """The conjugates at ``ov`` from the scramblings ``scrambles`` (default all). ``dense_check``:
        force (True) or skip (False) the dense check; by default it runs at the first evaluation of
        each scrambling and every ``rule.dense_every``-th evaluation. ``points``: use only the first
        ``points`` (a power of two) of each scrambling, itself a scrambled Sobol rule; with
        pre-integration, the first ``points`` lines)."""
        self._check_covariance(ov)
        scrambles = list(range(self.rule.scrambles)) if scrambles is None else list(scrambles)
        N = self.nodes.points if points is None else points * self.per_line
        rows = np.concatenate([self.nodes.rows(j)[:N] for j in scrambles])
        root = preactivation_root(ov, self.rho)
        key = tuple(scrambles)
        count = self._evaluations_of.get(key, 0)
        if dense_check is None:
            dense_check = bool(set(scrambles) - set(self._searched_at)) or count % self.rule.dense_every == 0
        x = ov.pack()
        full = any(j not in self._searched_at or _moved(self._searched_at[j], x) > self.rule.search_move
                   for j in scrambles)
        if full:
            self._searched_at.update({j: x for j in scrambles})
            self.full_searches += 1
        self._evaluations_of[key] = count + 1
        # the sign flips of the last minimisers are searched where the point has moved (a full
        # search, the first evaluation too) and at every evaluation while the last one that
        # searched them changed a minimum; on the fixed-point iteration's small steps they often
        # change none, and then cost a third to a half of the prox for nothing; the dense check,
        # with the flips among its starts, still estimates what a missed minimum does
        # (docs/numerics.md, section 11)
        flips = full or self.prox.flips_needed(rows)
        h, obj, gn, moments = self._nodes(ov, root, rows, full, flips=flips)
        R = len(scrambles)
        per_scramble = self._average(moments, R)
        diagnostics = {"max_prox_gradient": float(np.max(gn)), "nodes": int(len(rows)), "full_search": full}
        if dense_check:
            per_scramble, moments, dense = self._dense_check(ov, alpha, root, rows, obj, moments, per_scramble)
            diagnostics.update(dense)
        if self.line is not None:
            per_scramble, line_report = self._preintegrated(ov, root, rows, moments, R)
            diagnostics.update(line_report)
        if not np.isfinite(per_scramble).all():
            raise FloatingPointError(f"non-finite channel moments at {ov.as_dict()}")
        pooled = per_scramble.mean(axis=0)
        forms = self._conjugates(alpha, np.vstack([pooled[None], per_scramble]), ov)
        project = self.subspace.project if self.fold else (lambda x: x)
        hats_all = [project(MatrixHats(self.model.shape, **self._reported(forms, i))) for i in range(R + 1)]
        stack = np.array([hh.pack() for hh in hats_all[1:]])
        se = stack.std(axis=0, ddof=1) / np.sqrt(R) if R > 1 else np.full(stack.shape[1], np.nan)
        envelopes = per_scramble[:, -1]
        return ChannelEstimate(
            hats=hats_all[0], scramble_hats=tuple(hats_all[1:]),
            standard_error=MatrixHats.unpack(self.model.shape, se), mean_envelope=float(pooled[-1]),
            scramble_envelopes=envelopes,
            other_forms=self._other(forms),
            diagnostics=diagnostics)

    def _nodes(self, ov, root, rows, full, flips=True):
        """The global prox (``full``, ``flips``: :class:`~numerics.prox.matrix.GlobalProx`) and the
        (folded) moments at the nodes ``rows`` (``root``: the pre-activations' map at ``ov``), in
        blocks of at most ``CHUNK`` nodes (the multi-start search holds several copies of its nodes'
        Hessians) side by side in the kernels' threads, each writing its rows of the outputs: each
        node is searched by itself, so the blocks give the same numbers as one call."""
        self.prox.prepare(full)
        Pm = self.model.positional_mean(ov.m)
        n = len(rows)
        h, obj, gn = np.empty((n, self.model.n_h)), np.empty(n), np.empty(n)
        moments = np.empty((n, len(self.model.moment_names)))

        def block(part):
            zeta, hs, w = preactivations(self.nodes, ov, self.rho, Pm, rows[part], root)
            with np.errstate(over="ignore", under="ignore"):  # per thread
                h[part], obj[part], gn[part] = self.prox(w, hs, ov.V, rows[part], full=full, flips=flips)
                moments[part] = self.model.channel_moments(h[part], zeta, hs, ov.m, ov.V)
            moments[part, self.odd] = 0.0
            return ()

        split_over_threads(block, n, PARALLEL_NODES, CHUNK)
        return h, obj, gn, moments

    def _line_values(self, moments: np.ndarray) -> np.ndarray:
        """Per line (per node without pre-integration), the fixed nodes' weighted sum of the moments."""
        if self.line is None:
            return moments  # one node of weight one per line: the sum is the node's moments
        n = self.per_line
        return np.einsum("lnk,n->lk", moments.reshape(-1, n, moments.shape[1]), self.line_weights)

    def _average(self, moments: np.ndarray, R: int) -> np.ndarray:
        """The moments averaged per scrambling (``(R, moments)``), from the fixed nodes."""
        values = self._line_values(moments)
        return values.reshape(R, -1, values.shape[1]).mean(axis=1)

    def _preintegrated(self, ov, root, rows, moments, R):
        """The per-scrambling averages of the line integrals: the fixed nodes' sums plus the
        corrections of the cells where the global prox switches (:mod:`.preintegration`)."""
        zeta, hs, w = preactivations(self.nodes, ov, self.rho, self.model.positional_mean(ov.m), rows, root)
        h = self.prox.best[rows]
        unit = line_direction(self.model.shape, self.line_dim)
        origin = dataclasses.replace(unit, y=0 * unit.y, xi=0 * unit.xi)
        z1, s1, _ = preactivations(unit, ov, self.rho, np.zeros(zeta.shape[1]))
        z0, s0, _ = preactivations(origin, ov, self.rho, np.zeros(zeta.shape[1]))
        with np.errstate(over="ignore", under="ignore"):
            corrections, report = switch_corrections(self.model, ov, self.line, h, zeta, hs, w, (z1 - z0)[0],
                                                     (s1 - s0)[0], self.odd, self.rule.prox_tol)
        values = self._line_values(moments) + corrections
        return values.reshape(R, -1, values.shape[1]).mean(axis=1), report

    def _standard_errors(self, alpha, ov, moments, per_scramble) -> np.ndarray:
        """The standard errors of the reported conjugates (packed): the spread over the scramblings,
        or for one scrambling the plain Monte Carlo error of its nodes, or of its lines with
        pre-integration (larger than the quasi-Monte Carlo one)."""
        R = per_scramble.shape[0]
        values = per_scramble if R > 1 else self._line_values(moments)
        forms = self._reported(self._conjugates(alpha, values, ov))
        count = R if R > 1 else len(values)
        return np.concatenate([(f.std(axis=0, ddof=1) / np.sqrt(count)).ravel() for f in forms.values()])

    def _dense_check(self, ov, alpha, root, rows, obj, moments, per_scramble):
        """Re-solve the subsample from many starts; adopt the lower minima found (they are nodes of
        the rule), estimate from the subsample the effect of those still missed elsewhere, refine
        the search of the whole set once if that effect is not small against the standard error,
        and raise :class:`GlobalProxError` if it still is."""
        # rows is increasing (scramblings in order, each a range)
        at_rows = np.searchsorted(rows, self.dense_subsample).clip(0, len(rows) - 1)
        local = at_rows[rows[at_rows] == self.dense_subsample]
        zeta, hs, w = preactivations(self.nodes, ov, self.rho, self.model.positional_mean(ov.m), rows[local], root)
        R = per_scramble.shape[0]
        report = {}
        for attempt in range(2):
            check = self.prox.dense_check(w, hs, ov.V, rows[local], obj[local],
                                          n_starts=self.rule.dense_starts, salt=1 + attempt)
            report = {"dense_nodes": check.nodes, "dense_improved_fraction": check.improved_fraction}
            if check.improved.size == 0:
                break
            at = np.searchsorted(rows, check.improved)
            sub = np.searchsorted(rows[local], check.improved)  # the same nodes in the subsample
            new = self.model.channel_moments(check.new_h, zeta[sub], hs[sub], ov.m, ov.V)
            new[:, self.odd] = 0.0
            # the subsample's estimate of the missed weight's effect (each node weighted as in its line)
            weight = self.per_line * self.line_weights[at % self.per_line]
            shift = (weight[:, None] * (new - moments[at])).sum(axis=0) / len(local)
            self.prox.adopt(check.improved, check.new_h)
            moments[at] = new
            per_scramble = self._average(moments, R)
            pooled = per_scramble.mean(axis=0)
            forms = self._conjugates(alpha, np.vstack([pooled, pooled + shift]), ov)
            effect = np.concatenate([np.abs(f[1] - f[0]).ravel() for f in self._reported(forms).values()])
            se = self._standard_errors(alpha, ov, moments, per_scramble)
            ratio = float(np.max(np.where(se > 0, effect / np.where(se > 0, se, 1.0), 0.0)))
            report["dense_missed_effect_over_se"] = ratio
            log.info("dense check: lower prox minima at %.3g of %d nodes; estimated effect of those missed "
                     "elsewhere %.3g standard errors", check.improved_fraction, check.nodes, ratio)
            if ratio <= MISSED_MINIMA_TOL:
                break
            if attempt == 0:
                # refine: the whole set again with four times the random starts, kept from now on
                self.prox.n_ellipsoid = 4 * max(self.prox.n_ellipsoid, 1)
                h, obj, gn, moments = self._nodes(ov, root, rows, True)
                per_scramble = self._average(moments, R)
                report["refined_ellipsoid_starts"] = self.prox.n_ellipsoid
                continue
            raise GlobalProxError(
                f"the dense check found lower prox minima at a fraction {check.improved_fraction:.3g} of "
                f"{check.nodes} nodes even with {self.prox.n_ellipsoid} random starts per node; their estimated "
                f"effect on the conjugates is {ratio:.2g} standard errors (tolerance {MISSED_MINIMA_TOL})")
        return per_scramble, moments, report

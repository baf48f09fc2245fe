"""Fixed points of the general model with the quasi-Monte Carlo channel, with error bars from
independent scramblings (docs/numerics.md, section "The general model: QMC integrator").

The map iterated is ``x -> gauge(prior_updates(channel(x)))`` on the free components of the branch's
subspace (:mod:`numerics.fixed_points.subspaces`), with the overlaps canonically oriented (:mod:`numerics.fixed_points.gauge`)
in the blocks of directions along whose rotations the iteration could drift (:func:`_drifting_blocks`),
and solved by the generic Anderson solver (:mod:`numerics.solver.iteration`). Each scrambling ``j`` of the
rule is a deterministic map ``F_j`` (fixed nodes) with its own fixed point ``x_j``: scrambling 0 is
solved from the start, the others from ``x_0`` with its Anderson history (the maps differ by a
nearly constant quadrature error, so each takes a few evaluations). The reported point is the
fixed point of the pooled map (all ``R N`` nodes), polished from the mean ``x̄`` of the ``x_j`` by a
few of its evaluations, with its conjugates, ``E[M]`` and dense prox check. The error of each field
is one standard error: the spread of its ``R`` values at the ``x_j`` over ``sqrt(R)`` (the
quadrature error propagated through the fixed point), plus the residual of the pooled map at the
reported point times the field's scale.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Optional

import numpy as np
from scipy import stats

from derivations import ModelSpec, packing

from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.gauge import alignment, canonical_rotation
from numerics.model.general import GeneralModel, bind_general
from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps
from numerics.overlaps import COLLAPSE
from numerics.solver.iteration import OUTSIDE_DOMAIN, ROOT_EVALUATIONS, SolverError, root_fixed_point, solve_fixed_point
from numerics.fixed_points.saddle_map import SaddlePointMap
from numerics.fixed_points.subspaces import BranchSubspace, branch_subspace
from numerics.channel.qmc.channel import ChannelEstimate, QMCChannel
from numerics.channel.qmc.nodes import gaussian_nodes
from numerics.channel.qmc.precision import QMCPrecision, as_qmc_precision
from numerics.channel.qmc.test_error import test_error_estimates
from numerics.fixed_points.workers import current_workers, pool

log = logging.getLogger(__name__)

#: the Anderson solver's settings for every scrambling's solve
DAMPING, ANDERSON, STALL_WINDOW = 0.5, 4, 20
#: the history of the scramblings started from the first one's fixed point and pairs: 8 pairs span
#: the free components of the rank-2 branches (up to 10), and such a scrambling takes 2-3 evaluations
#: instead of 4-7 (docs/numerics.md, section 11); the first scrambling's own solve keeps 4, since
#: where a branch's direction is neutral (a draft solve at a branch's noise level) its fixed point
#: depends on the iteration's path, and whether the branch counts as found with it
SEEDED_ANDERSON = 8
#: evaluations of the pooled map (all scramblings) that polish the mean of their fixed points
POLISH = 8
#: the most points the approach runs on (the fast rule's eighth; the draft and fast rules' approach is
#: their eighth): it has only to bring the iteration from the start into the fixed point's basin, and
#: on more points each evaluation costs more and, measured, arrives no sooner. (2, 2, 1) mixed on
#: 2^18 x 8 points: on 2^15 the approach stalled at a residual of 0.5 after 24 evaluations and the
#: first scrambling then took 16 of 2^18 points; on 2^12 it converged in 20 and the first scrambling
#: took 7 (docs/numerics.md, section 11)
APPROACH_POINTS = 2**12


def default_start(spec: ModelSpec, subspace: BranchSubspace) -> MatrixOverlaps:
    """A start on the subspace, with the orders of magnitude of docs/theory.md, section 3.8 for the
    two-token rank-one model: ``q = 0.11, V = 12`` and a teacher overlap ``0.15`` on a semantic
    direction (the ``i``-th semantic direction on teacher direction ``i``), ``q = 0.05, V = 14`` and
    ``m = 0.25`` on a positional one (on positional direction ``i``), and the trivial branch's
    ``q = 0.04, V = 25`` on a trivial one."""
    L, r, t, k = spec.shape
    values = {"semantic": (0.11, 12.0), "positional": (0.05, 14.0), "trivial": (0.04, 25.0)}
    q = np.diag([values[role][0] for role in subspace.roles])
    V = np.diag([values[role][1] for role in subspace.roles])
    theta = np.zeros((r, t))
    m = np.zeros((k, r))
    semantic = [j for j, role in enumerate(subspace.roles) if role == "semantic"]
    positional = [j for j, role in enumerate(subspace.roles) if role == "positional"]
    for i, j in enumerate(semantic[:t]):
        theta[j, i] = 0.15
    for i, j in enumerate(positional[:k]):
        m[i, j] = 0.25
    return MatrixOverlaps(spec.shape, q=q, m=m, V=V, theta=theta)


def _on_subspace(start: Optional[MatrixOverlaps], spec: ModelSpec, subspace: BranchSubspace) -> MatrixOverlaps:
    """The start on the subspace: :func:`default_start` by default; a given start that is not on
    it is first rotated (student and teacher) to the orientation nearest the default start, then
    projected."""
    template = default_start(spec, subspace)
    if start is None:
        return template
    if not np.array_equal(subspace.project(start).pack(), start.pack()):
        O, W = alignment(start, template, teacher=True)
        start = start.rotated(O, W)
    return subspace.isotropic(subspace.project(start))


def _floor(ov: MatrixOverlaps, rho: float, free: np.ndarray) -> np.ndarray:
    """The scale below which each free component's residual is absolute: a hundredth of the
    geometric mean of the diagonal scales of its row and column (``sqrt(q_ii q_jj)`` for ``q``,
    ``sqrt(q_jj)`` for ``m``, ``sqrt(q_ii rho)`` for ``theta``, ``sqrt(V_ii V_jj)`` for ``V``)."""

    qd = np.maximum(np.abs(np.diag(ov.q)), 1e-6)
    Vd = np.maximum(np.abs(np.diag(ov.V)), 1e-6)
    out = []
    for name in MatrixOverlaps.NAMES:
        rows, cols, sym = packing.dimensions(name, ov.shape)
        for i, j in packing.matrix_index(rows, cols, sym):
            scale = {"q": lambda: np.sqrt(qd[i] * qd[j]), "V": lambda: np.sqrt(Vd[i] * Vd[j]),
                     "m": lambda: np.sqrt(qd[j]), "theta": lambda: np.sqrt(qd[i] * rho)}[name]()
            out.append(1e-2 * scale)
    return np.array(out)[free]


def _matrix_residual(image: MatrixOverlaps, ov: MatrixOverlaps) -> float:
    """``max_X |X(image) - X(ov)|_F / |X(ov)|_F`` over the nonzero matrices ``X`` of the overlaps,
    matrix by matrix (a component-wise relative residual would be dominated, near a symmetric
    point, by components that are zero up to the quadrature noise). ``image`` is the map's own,
    in the gauge of ``ov``: a point that the map sends to a rotated or sign-flipped copy of itself
    is a cycle of the map, not a fixed point, and must not pass."""
    out = 0.0
    for name in MatrixOverlaps.NAMES:
        size = np.linalg.norm(getattr(ov, name))
        if size > 0:
            out = max(out, float(np.linalg.norm(getattr(image, name) - getattr(ov, name)) / size))
    return out


def _drifting_blocks(subspace: BranchSubspace) -> tuple:
    """The gauge blocks whose orientation the solver fixes: two or more directions that rotate into
    each other, one of them positional (its column of ``m`` breaks the rotation symmetry, so the
    iteration could drift along the orbit). A sign is left free, since fixing it would turn a
    two-cycle ``x -> g x -> x`` of the map (``g`` a sign flip) into a fixed point of the oriented
    map; a block of trivial directions is left free too, since its orbit is nearly isotropic and its
    orientation would turn with the quadrature noise."""
    return tuple(b for b in subspace.gauge_blocks()
                 if len(b) >= 2 and any(subspace.roles[j] == "positional" for j in b))


def _oriented(ov: MatrixOverlaps, subspace: BranchSubspace) -> MatrixOverlaps:
    """``ov`` with the blocks of :func:`_drifting_blocks` in canonical orientation, the other
    directions as they are."""
    blocks = _drifting_blocks(subspace)
    O = canonical_rotation(ov, blocks)
    for j in set(range(ov.shape.r)) - {j for b in blocks for j in b}:
        O[j, j] = 1.0
    return ov.rotated(O)


def prior_image(model: GeneralModel, subspace: BranchSubspace, hats: MatrixHats) -> MatrixOverlaps:
    """The overlaps of the prior side from the conjugates ``hats``, projected onto the subspace and its
    isotropic part (:meth:`~numerics.fixed_points.subspaces.BranchSubspace.isotropic`)."""
    new = model.prior_updates(**subspace.isotropic(hats).matrices())
    return subspace.isotropic(subspace.project(MatrixOverlaps(model.shape, **new)))


def subspace_map(model: GeneralModel, subspace: BranchSubspace, alpha: float, update_hat_overlaps,
                 gauge: bool) -> SaddlePointMap:
    """The fixed-point map over the free components of ``subspace``: the channel half-step
    ``update_hat_overlaps(overlaps)``, then :func:`prior_image`, oriented where ``gauge``
    (:func:`_oriented`)."""

    def image(est) -> MatrixOverlaps:
        ov = prior_image(model, subspace, est.hats)
        return _oriented(ov, subspace) if gauge else ov

    free = subspace.free_mask(model.shape)
    return SaddlePointMap(alpha, free, np.zeros(len(free)), lambda x: MatrixOverlaps.unpack(model.shape, x),
                          MatrixOverlaps.pack, update_hat_overlaps, image, label=subspace.name)


def qmc_map(model: GeneralModel, channel: QMCChannel, alpha: float, scrambles, gauge: bool,
            points: Optional[int] = None, dense_check: Optional[bool] = None) -> SaddlePointMap:
    """The fixed-point map ``x -> F_j(x)`` over the free components of ``channel``'s subspace, for the
    scramblings ``scrambles`` of ``channel`` (its first ``points`` nodes of each; ``dense_check``:
    passed to every :meth:`QMCChannel.estimate <numerics.channel.qmc.channel.QMCChannel.estimate>`),
    the image oriented where ``gauge`` (:func:`_oriented`)."""
    return subspace_map(model, channel.subspace, alpha,
                        functools.partial(channel.estimate, alpha=alpha, scrambles=scrambles,
                                          dense_check=dense_check, points=points), gauge)


@dataclasses.dataclass(frozen=True)
class ScrambleSolution:
    """The fixed point of one scrambling's map."""

    overlaps: MatrixOverlaps
    estimate: ChannelEstimate
    converged: bool
    residual: float
    iterations: int
    evaluations: int
    pairs: tuple


def _solve_scramble(F: SaddlePointMap, x0: np.ndarray, prec: QMCPrecision, floor: np.ndarray, history: tuple = (),
                    anderson: int = ANDERSON) -> ScrambleSolution:
    try:
        res = solve_fixed_point(F, x0, tol=prec.tol, maxiter=prec.maxiter, damping=DAMPING, anderson=anderson,
                                floor=floor, history=history, stall_window=STALL_WINDOW)
    except SolverError as exc:
        # the damped Anderson iteration does not reach a fixed point where the map's Jacobian has an
        # eigenvalue far below -1 (the three-token trivial branch above alpha = 3: -3.3 to -3.8; its
        # iterates left the domain); the root finder reaches it whatever the eigenvalues. (A solve
        # that only stalls or runs out of iterations is not retried: near a birth that would add up
        # to ROOT_EVALUATIONS evaluations to every scrambling.)
        log.info("alpha=%g %s: %s; root finder from the start", F.alpha, F.label, exc)
        try:
            res = root_fixed_point(F, x0, tol=prec.tol, accept_tol=prec.residual_tol,
                                   max_evaluations=ROOT_EVALUATIONS, floor=floor)
        except OUTSIDE_DOMAIN:
            raise exc from None
    est = F.side_at(res.x)
    converged = bool(res.converged or res.residual < prec.residual_tol)
    return ScrambleSolution(F.overlaps(res.x), est, converged, float(res.residual), res.iterations, F.evaluations,
                            res.pairs)


#: the last rule's nodes in a worker process (:func:`_scramble_task`): the points of a scan share them
_WORKER_NODES: dict = {}


def _scramble_task(spec: ModelSpec, alpha: float, subspace: BranchSubspace, prec: QMCPrecision, gauge: bool,
                   j: int, x0: np.ndarray, floor: np.ndarray, history: tuple, n_ellipsoid: int, backend: str):
    """In a worker process (:mod:`numerics.fixed_points.workers`): scrambling ``j``'s fixed point from
    ``x0`` and ``history`` on a fresh channel, as :func:`solve_qmc` solves it in its own process, and
    the records its evaluations left on the scrambling's nodes. ``n_ellipsoid``: the random starts of
    a full search where the solve is (more than the rule's where a dense check refined them);
    ``backend``: the solving process's (:mod:`numerics.backend`)."""
    model = bind_general(spec, backend)
    rule = prec.rule
    key = (model.shape, rule.log2_points, rule.scrambles, rule.seed)
    if key not in _WORKER_NODES:
        _WORKER_NODES.clear()
        _WORKER_NODES[key] = gaussian_nodes(model.shape, rule.log2_points, rule.scrambles, rule.seed)
    channel = QMCChannel(model, rule, subspace, nodes=_WORKER_NODES[key])
    channel.prox.n_ellipsoid = n_ellipsoid
    solution = _solve_scramble(qmc_map(model, channel, alpha, [j], gauge), x0, prec, floor, history=history,
                               anderson=SEEDED_ANDERSON)
    return solution, channel.scramble_state(j)


def _fields(model: GeneralModel, alpha: float, ov: MatrixOverlaps, hats: MatrixHats, envelope: float,
            test_error: float) -> dict:
    """Every reported number at one point: packed overlaps and conjugates, invariants, the test error
    given and the training loss."""
    out = dict(ov.as_dict())
    out.update(hats.as_dict())
    for key, values in ov.invariants().items():
        for i, v in enumerate(values):
            out[f"{key}_{i + 1}"] = v
    out["test_error"] = float(test_error)
    out["train_loss"] = model.prior_free_energy(ov.matrices(), hats.matrices()) + alpha * envelope
    return out


def _collapsed(spec, alpha, subspace, prec, solution, defining, wall_time, model):
    """The record of a solve that fell to a smaller branch (carried by :class:`BranchNotFound`): the
    point reached, ``converged=False``, errors NaN, the reason in the diagnostics."""
    from numerics.result import FixedPoint

    ov, hats = solution.overlaps, solution.estimate.hats
    values = dict(ov.as_dict(), **hats.as_dict())
    reason = (f"{subspace.name} branch not found at alpha = {alpha:g}: the iteration fell to a smaller branch "
              f"(defining overlap {defining:.1e} < {COLLAPSE:g})")
    return FixedPoint(
        alpha=float(alpha), branch=subspace.name, model=spec, precision=prec.name, integrator="qmc", overlaps=ov,
        hats=hats, test_error=float("nan"), train_loss=float("nan"), converged=False, iterations=solution.iterations,
        residual=solution.residual, error={k: float("nan") for k in values}, invariants=ov.invariants(),
        diagnostics={"integrator": "qmc", "status": reason, "defining_overlap": defining}, wall_time=wall_time)


@dataclasses.dataclass(frozen=True)
class Approach:
    """The first stage of :func:`solve_qmc` alone: the iteration on the first eighth of scrambling 0
    from a start. ``defining``: the branch's defining overlap where it ended; ``collapsed``: below
    :data:`~numerics.overlaps.COLLAPSE` (the iteration fell to a smaller branch)."""

    overlaps: MatrixOverlaps
    converged: bool
    residual: float
    iterations: int
    defining: float

    @property
    def collapsed(self) -> bool:
        return self.defining < COLLAPSE


class _Setting:
    """What a solve at one point shares: the model, the channel on the branch's subspace, the
    oriented start and the floor of the free components."""

    def __init__(self, spec, alpha, branch, precision, start, gauge, subspace, model):
        if not alpha > 0:
            raise ValueError(f"alpha: must be > 0, got {alpha}")
        self.spec, self.alpha = spec, alpha
        self.prec = as_qmc_precision(precision)
        self.model = model or bind_general(spec)
        self.subspace = subspace or branch_subspace(branch, spec.shape)
        self.gauge = gauge and bool(_drifting_blocks(self.subspace))
        self.channel = QMCChannel(self.model, self.prec.rule, self.subspace)
        start = _on_subspace(start, spec, self.subspace)
        self.start = _oriented(start, self.subspace) if self.gauge else start
        self.free = self.subspace.free_mask(self.model.shape)
        self.floor = _floor(self.start, spec.rho, self.free)

    def approach(self) -> ScrambleSolution:
        # on the first eighth of scrambling 0, at most APPROACH_POINTS (itself a scrambled Sobol
        # rule): a fraction of the cost per evaluation, and its Anderson history seeds the solve on
        # the whole scrambling
        points = max(min(self.prec.rule.points // 8, APPROACH_POINTS), 256)
        F = qmc_map(self.model, self.channel, self.alpha, [0], self.gauge, points=points)
        return _solve_scramble(F, self.start.pack()[self.free], self.prec, self.floor)


def approach_qmc(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                 start: Optional[MatrixOverlaps] = None) -> Approach:
    """Where the iteration of ``branch``'s map from ``start`` goes on an eighth of one scrambling of
    ``precision``'s rule (the first stage of :func:`solve_qmc`, about a fiftieth of its cost): a test
    of whether the branch is reached from there at all. Its values have no error bars."""
    setting = _Setting(spec, alpha, branch, precision, start, True, None, None)
    a = setting.approach()
    return Approach(a.overlaps, a.converged, a.residual, a.iterations,
                    setting.subspace.defining_overlap(a.overlaps, spec.sigma))


def _other_scramblings(setting: _Setting, first: ScrambleSolution) -> tuple:
    """Scramblings ``1..R-1`` solved from the first one's fixed point and history, in worker
    processes where :func:`~numerics.fixed_points.workers.current_workers` allows (their nodes' records
    taken back into the channel for the polish); ``(solutions, processes)``."""
    spec, alpha, prec, channel = setting.spec, setting.alpha, setting.prec, setting.channel
    R = prec.rule.scrambles
    x0 = first.overlaps.pack()[setting.free]
    n_workers = min(current_workers(), R - 1) if not prec.rule.line_cells else 1
    solutions = []
    if n_workers > 1:
        # the other scramblings depend only on the first one's fixed point and history: solved in
        # other processes, each on its own nodes, and their nodes' records taken back for the polish
        tasks = [pool(n_workers).submit(_scramble_task, spec, alpha, setting.subspace, prec, setting.gauge, j, x0,
                                        setting.floor, first.pairs, channel.prox.n_ellipsoid, setting.model.backend)
                 for j in range(1, R)]
        try:
            for j, task in enumerate(tasks, 1):
                solution, state = task.result()
                channel.adopt_scramble_state(j, state)
                solutions.append(solution)
        finally:
            # a scrambling that failed fails the solve, as here: the others not started are dropped
            for task in tasks:
                task.cancel()
    else:
        for j in range(1, R):
            F = qmc_map(setting.model, channel, alpha, [j], setting.gauge)
            solutions.append(_solve_scramble(F, x0, prec, setting.floor, history=first.pairs,
                                             anderson=SEEDED_ANDERSON))
    return solutions, max(n_workers, 1)


def _pooled_point(setting: _Setting, solutions: list) -> tuple:
    """The scramblings' fixed points aligned with the first one's (``(overlaps, isotropic hats,
    E[M])`` each), and the pooled map's fixed point polished from their mean, in the first one's
    gauge: ``(aligned, overlaps, estimate, pooled evaluations, residual)``."""
    model, alpha, channel, subspace, free = setting.model, setting.alpha, setting.channel, setting.subspace, setting.free
    first = solutions[0]
    # near a symmetric point the canonical orientation turns with the quadrature noise: the
    # scramblings' fixed points are aligned with the first one before they are compared or averaged
    blocks = subspace.gauge_blocks()
    aligned = []
    for s in solutions:
        O, W = alignment(s.overlaps, first.overlaps, blocks)
        aligned.append((s.overlaps.rotated(O, W), subspace.isotropic(s.estimate.hats.rotated(O, W)),
                        s.estimate.mean_envelope))
    xbar = np.mean([a[0].pack()[free] for a in aligned], axis=0)
    # the pooled map's fixed point is x̄ to first order in the scramblings' spread only: at the
    # spread of a fast rule (~1e-3) the remainder is a residual of ~1e-4, more than the rule's
    # error on a large field, so x̄ is polished by a few evaluations of the pooled map
    # every pooled evaluation runs the dense check, so that the last one is the reported estimate
    # (another evaluation at the same point would cost as much as the polish's own)
    polish = _solve_scramble(qmc_map(model, channel, alpha, None, setting.gauge, dense_check=True), xbar,
                             dataclasses.replace(setting.prec, maxiter=POLISH), setting.floor)
    pooled = qmc_map(model, channel, alpha, None, gauge=False)
    ov, est, pooled_evaluations = polish.overlaps, polish.estimate, polish.evaluations
    O, W = alignment(ov, first.overlaps, blocks)
    if not (np.array_equal(O, np.eye(len(O))) and np.array_equal(W, np.eye(len(W)))):
        # the nodes are not invariant under the rotation: the channel is evaluated at the point reported
        ov = ov.rotated(O, W)
        est = channel.estimate(ov, alpha, dense_check=True)
        pooled_evaluations += 1
    est = dataclasses.replace(est, hats=subspace.isotropic(est.hats))
    residual = _matrix_residual(pooled.image(est), ov)
    return aligned, ov, est, pooled_evaluations, residual


def _error_bars(setting: _Setting, ov: MatrixOverlaps, est: ChannelEstimate, aligned: list, residual: float) -> tuple:
    """Every reported field at the pooled point and its error (one standard error over the
    scramblings plus the residual's share), with the quadrature's relative error of the overlaps:
    ``(value, error, quadrature)``."""
    spec, model, alpha, prec = setting.spec, setting.model, setting.alpha, setting.prec
    R = prec.rule.scrambles
    test_nodes = gaussian_nodes(model.shape, prec.rule.test_log2_points, prec.rule.test_scrambles,
                                prec.rule.seed + 1)
    # the test error from each scrambling of its own rule: their mean is reported, their spread is
    # the test quadrature's share of its error
    te = test_error_estimates(model, ov, test_nodes)
    value = _fields(model, alpha, ov, est.hats, est.mean_envelope, te.mean())
    # the scramblings' spread of the test error is that of their overlaps, measured on common test
    # nodes: the prefix of the test rule as long as a scrambling of the channel's rule suffices
    # for it (the integrand is smooth in the overlaps), the whole rule for the reported value only
    per = [_fields(model, alpha, *a, test_error_estimates(model, a[0], test_nodes, prec.rule.points).mean())
           for a in aligned]
    # the residual's share of each field's error: residual x the size of its matrix (of the field
    # itself for invariants, test error and training loss)
    sizes = {n: np.linalg.norm(getattr(record, name)) for record in (ov, est.hats) for name in record.NAMES
             for n in packing.names(name, spec.shape)}
    # one standard error of the mean over the scramblings: the comparisons quote multiples of it
    statistical = {key: float(np.std([p[key] for p in per], ddof=1)) / np.sqrt(R) for key in value}
    error = {key: statistical[key] + residual * sizes.get(key, abs(value[key])) for key in value}
    error["test_error"] += float(te.std(ddof=1)) / np.sqrt(len(te))
    # the pooled map's residual at the mean of the scramblings' fixed points is of second order in
    # their spread: it must be small against the quadrature error (or below the tolerance)
    quadrature = max(np.sqrt(sum(statistical[n] ** 2 for n in packing.names(name, spec.shape)))
                     / max(np.linalg.norm(getattr(ov, name)), 1e-300)
                     for name in MatrixOverlaps.NAMES if np.linalg.norm(getattr(ov, name)) > 0)
    return value, error, quadrature


def solve_qmc(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
              start: Optional[MatrixOverlaps] = None, gauge: bool = True, subspace: Optional[BranchSubspace] = None,
              model: Optional[GeneralModel] = None):
    """The fixed point of ``branch`` at ``alpha`` with the QMC integrator, with error bars (module
    docstring). Returns a :class:`~numerics.result.FixedPoint`.

    ``start``: the overlaps to start from (projected onto the subspace); by default
    :func:`default_start` (:func:`_on_subspace`). ``gauge``: compose the map with the canonical orientation (off only to
    test what it does). ``subspace``: a subspace other than the named branch's."""
    from numerics.result import FixedPoint

    t0 = time.perf_counter()
    setting = _Setting(spec, alpha, branch, precision, start, gauge, subspace, model)
    prec, model, subspace = setting.prec, setting.model, setting.subspace
    R = prec.rule.scrambles
    approach = setting.approach()
    defining = subspace.defining_overlap(approach.overlaps, spec.sigma)
    if defining < COLLAPSE:
        # the iteration fell to a smaller branch: reported as it is, not converged, without the
        # cost of the other scramblings
        log.info("alpha=%g %s: the approach collapsed (defining overlap %.2e)", alpha, subspace.name, defining)
        point = _collapsed(spec, alpha, subspace, prec, approach, defining, time.perf_counter() - t0, model)
        raise BranchNotFound(point.status, subspace.name, float(alpha), point)
    first = _solve_scramble(qmc_map(model, setting.channel, alpha, [0], setting.gauge),
                            approach.overlaps.pack()[setting.free], prec, setting.floor, history=approach.pairs)
    others, processes = _other_scramblings(setting, first)
    solutions = [first] + others
    aligned, ov, est, pooled_evaluations, residual = _pooled_point(setting, solutions)
    value, error, quadrature = _error_bars(setting, ov, est, aligned, residual)
    t_factor = float(stats.t.ppf(0.975, R - 1))
    converged = all(s.converged for s in solutions) and residual < max(prec.residual_tol, 0.25 * quadrature)
    defining = subspace.defining_overlap(ov, spec.sigma)
    # the branch counts as lost when its defining overlap is within the half-width of its 95% interval of zero
    defining_error = t_factor * float(np.std([subspace.defining_overlap(a[0], spec.sigma) for a in aligned],
                                             ddof=1)) / np.sqrt(R) if np.isfinite(defining) else 0.0
    status = "converged" if converged else (
        f"not converged: residual {residual:.2e} (accepted below {max(prec.residual_tol, 0.25 * quadrature):.2e}), "
        f"scramblings converged {sum(s.converged for s in solutions)} of {R}")
    lost = defining < COLLAPSE or defining <= defining_error
    if lost:
        # a branch whose defining overlap is zero within its error has not been found: the solve
        # fell, or is falling, to a smaller branch
        converged = False
        status = (f"{subspace.name} branch not found at alpha = {alpha:g}: its defining overlap is "
                  f"{defining:.2e} +- {defining_error:.1e}")
    diagnostics = {
        "integrator": "qmc",
        "scramble_residuals": [s.residual for s in solutions],
        "scramble_converged": [s.converged for s in solutions],
        "scramble_evaluations": [s.evaluations for s in solutions],
        # each scrambling's own fixed point, aligned with the reported one (numerics.branches.bifurcation
        # differentiates each scrambling's map there)
        "scramble_fixed_points": [a[0].pack().tolist() for a in aligned],
        "map_evaluations": sum(s.evaluations for s in solutions) + approach.evaluations,
        # processes that solved the scramblings after the first (numerics.fixed_points.workers)
        "processes": processes,
        "pooled_evaluations": pooled_evaluations,
        "full_searches": setting.channel.full_searches,
        "nodes": est.diagnostics["nodes"],
        "max_prox_gradient": est.diagnostics["max_prox_gradient"],
        "dense_nodes": est.diagnostics.get("dense_nodes"),
        "dense_improved_fraction": est.diagnostics.get("dense_improved_fraction"),
        "dense_missed_effect_over_se": est.diagnostics.get("dense_missed_effect_over_se", 0.0),
        "mean_envelope": est.mean_envelope,
        "other_form": {k: v.tolist() for k, v in est.other_forms.items()},
        "conjugate_form": prec.rule.form,
        "t_factor": t_factor,
        "quadrature_relative_error": quadrature,
        "defining_overlap": defining,
        "status": status,
    }
    point = FixedPoint(
        alpha=float(alpha), branch=subspace.name, model=spec, precision=prec.name, integrator="qmc",
        overlaps=ov, hats=est.hats, test_error=value["test_error"], train_loss=value["train_loss"],
        converged=bool(converged), iterations=sum(s.iterations for s in solutions), residual=residual,
        error=error, invariants=ov.invariants(), diagnostics=diagnostics, wall_time=time.perf_counter() - t0)
    if lost:
        raise BranchNotFound(status, subspace.name, float(alpha), point)
    return point

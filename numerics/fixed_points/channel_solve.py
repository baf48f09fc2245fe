"""The fixed point of a branch with any channel integrator (docs/extending.md, "Your own integrator").

An integrator is any object with ``estimate(overlaps, alpha)`` returning the channel side at
:class:`~numerics.matrix_overlaps.MatrixOverlaps` ``overlaps``: an object with the conjugates ``hats``
(:class:`~numerics.matrix_overlaps.MatrixHats`) and ``mean_envelope`` (``E[M]``), as
:class:`~numerics.channel.qmc.channel.ChannelEstimate` has them. :func:`solve_on_channel` iterates the
one fixed-point map (:class:`~numerics.fixed_points.saddle_map.SaddlePointMap`) with that channel
half-step and the model's generated prior half-step, on the branch's subspace, by the Anderson solver.

The record's errors are what this solve can defend: the map's residual at the reported point times
each field's size, and the test error's quadrature error (a scrambled Sobol rule of
:data:`TEST_ERROR_POINTS` nodes in :data:`TEST_ERROR_SCRAMBLES` scramblings, the spread of their
means). The integrator's own quadrature error is not known here and is not in the error bars: an
integrator that can estimate it (the line quadrature with two rules, QMC with its scramblings) has
its own solve, :func:`numerics.fixed_points.solve.solve`.
"""
from __future__ import annotations

import time
from typing import Optional


from derivations import ModelSpec

from numerics.channel.qmc.nodes import gaussian_nodes
from numerics.channel.qmc.test_error import test_error
from numerics.fixed_points.qmc import _drifting_blocks, _floor, _matrix_residual, _on_subspace, subspace_map
from numerics.fixed_points.subspaces import branch_subspace
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.model.general import bind_general
from numerics.result import FixedPoint
from numerics.solver.iteration import solve_fixed_point

#: the test error's rule: ``2^TEST_ERROR_LOG2_POINTS`` nodes in each of ``TEST_ERROR_SCRAMBLES`` scramblings
TEST_ERROR_LOG2_POINTS, TEST_ERROR_SCRAMBLES = 14, 8


def solve_on_channel(spec: ModelSpec, alpha: float, channel, branch: str = "semantic",
                     start: Optional[MatrixOverlaps] = None, tol: float = 1e-10, maxiter: int = 200,
                     name: str = "user") -> FixedPoint:
    """The fixed point of ``branch`` at ``alpha`` with ``channel``'s conjugates (module docstring), as a
    :class:`~numerics.result.FixedPoint` whose ``integrator`` is ``name``; ``converged=False`` with its
    residual where the solver does not reach ``tol`` in ``maxiter`` iterations. ``start``: matrix
    overlaps (default: the branch's default start)."""
    if not alpha > 0:
        raise ValueError(f"alpha: must be > 0, got {alpha}")
    t0 = time.perf_counter()
    model = bind_general(spec)
    subspace = branch_subspace(branch, spec.shape)
    start = _on_subspace(start, spec, subspace)
    F = subspace_map(model, subspace, alpha, lambda ov: channel.estimate(ov, alpha), bool(_drifting_blocks(subspace)))
    res = solve_fixed_point(F, start.pack()[F.free], tol=tol, maxiter=maxiter, damping=0.5, anderson=4,
                            floor=_floor(start, spec.rho, F.free))
    est = F.side_at(res.x)
    ov = F.overlaps(res.x)
    residual = _matrix_residual(F.image(est), ov)
    nodes = gaussian_nodes(model.shape, TEST_ERROR_LOG2_POINTS, TEST_ERROR_SCRAMBLES)
    te, te_error = test_error(model, ov, nodes)
    train_loss = model.prior_free_energy(ov.matrices(), est.hats.matrices()) + alpha * est.mean_envelope
    error = {k: residual * abs(v) for k, v in ov.as_dict().items()}
    error.update(test_error=te_error + residual * abs(te), train_loss=residual * abs(train_loss))
    converged = bool(res.converged)
    return FixedPoint(
        alpha=float(alpha), branch=branch, model=spec, precision=f"tol {tol:g}", integrator=name, overlaps=ov,
        hats=est.hats, test_error=te, train_loss=float(train_loss), converged=converged, iterations=res.iterations,
        residual=residual, error=error, invariants=ov.invariants(),
        diagnostics={"map_evaluations": F.evaluations, "mean_envelope": float(est.mean_envelope),
                     "status": "converged" if converged else f"not converged: {res.stopped or 'residual'} "
                                                               f"{res.residual:.2e} after {res.iterations} iterations",
                     "quadrature_error": "the integrator's own, not estimated"},
        wall_time=time.perf_counter() - t0)

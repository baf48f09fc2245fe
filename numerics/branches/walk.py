"""A branch along a grid of ``alpha`` by plain continuation (:func:`walk_branch`): the follower of
the quasi-Monte Carlo integrator, whose fixed points carry the scramblings' noise, so that the
end of a branch is where its solve first falls onto a smaller one on the grid, not a bisected
spinodal (the line quadrature's :func:`numerics.branches.follow.follow_branch` bisects its ends,
its records being deterministic in ``alpha``). Both return a
:class:`~numerics.branches.follow.BranchCurve`; :func:`numerics.api.follow` chooses by integrator.
"""
from __future__ import annotations

import logging
from typing import Sequence

from derivations import ModelSpec

from numerics.branches.follow import BranchCurve
from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.solve import solve
from numerics.result import as_matrices, failed_point
from numerics.solver.iteration import SolverError

log = logging.getLogger(__name__)


def walk_branch(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
                integrator: str = "auto", progress=None, start=None) -> BranchCurve:
    """``branch`` along ``alphas`` by continuation, as a :class:`BranchCurve` of matrix records
    (:func:`~numerics.result.as_matrices`; no spinodals, a note on where it was not found): each
    solve starts from the last point found on the branch; a solve from the previous point that does not converge, or falls to a smaller
    branch, is retried once from the default start. Alphas where the branch is not found (:class:`~numerics.fixed_points.errors.BranchNotFound`)
    are left out, and the next one starts afresh; a solve that raises :class:`~numerics.solver.iteration.SolverError`
    is kept as a failed point (:func:`~numerics.result.failed_point`). ``progress(alpha)`` is
    called after each alpha. ``start``: the overlaps the first solve starts from (a point of the
    branch near the grid; default: the default start)."""
    points = []
    for alpha in alphas:
        try:
            try:
                fp = as_matrices(solve(spec, float(alpha), branch, precision, integrator, start=start))
            except BranchNotFound as exc:
                if start is None:
                    raise
                # from the previous point the iteration can fall to a smaller branch where the default
                # start finds this one (the rank-2 mixed branch at alpha 2.2, draft, from 1.9): the
                # branch is absent only if that fails too
                log.info("%s; retried from the default start", exc)
                fp = as_matrices(solve(spec, float(alpha), branch, precision, integrator))
            if not fp.converged and start is not None:
                # the previous point can lie in the basin of another orbit of the map (a rank-2 mixed
                # solve at alpha 2.5 from the point at 1.5 does not converge, from the default start
                # it does): one retry from the default start, kept only if it converges
                log.info("%s from the previous point: %s; retried from the default start", branch, fp.status)
                try:
                    retry = as_matrices(solve(spec, float(alpha), branch, precision, integrator))
                    fp = retry if retry.converged else fp
                except BranchNotFound as exc:
                    log.info("%s", exc)
            points.append(fp)
            start = fp.overlaps if fp.converged else None
        except BranchNotFound as exc:
            log.info("%s", exc)
            start = None
        except SolverError as exc:
            # one failed solve is reported at its alpha (converged=False), and the branch goes on
            log.warning("%s at alpha = %g: %s", branch, alpha, exc)
            points.append(failed_point(spec, float(alpha), branch, precision, integrator, str(exc)))
            start = None
        if progress is not None:
            progress(alpha)
    absent = sorted(set(map(float, alphas)) - {p.alpha for p in points})
    note = f"{branch} branch not found at alpha = {', '.join(f'{a:g}' for a in absent)}" if absent else ""
    return BranchCurve(branch, points, [], note=note)

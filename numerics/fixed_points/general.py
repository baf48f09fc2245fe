"""Fixed points of the general model through one entry point, whichever channel integrator
(docs/numerics.md, section "The general model: QMC integrator").

:func:`solve_general` returns a :class:`~numerics.result.FixedPoint` for any shape
``(L, r, t, k)``: with the line quadrature (the two-token rank-one model; its solve is
:func:`numerics.fixed_points.lines.solve_branch`, errors from two rules) or with the quasi-Monte Carlo
integrator (:func:`numerics.fixed_points.qmc.solve_qmc`, errors from independent scramblings).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from derivations import ModelSpec

from numerics.channel.integrators import choose_integrator
from numerics.result import FixedPoint, as_matrices
from numerics.matrix_overlaps import MatrixOverlaps

log = logging.getLogger(__name__)


def solve_general(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                  integrator: str = "auto", start: Optional[MatrixOverlaps] = None,
                  roles: Optional[Sequence[str]] = None, gauge: bool = True) -> FixedPoint:
    """The fixed point of ``branch`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`) at ``alpha``.

    ``integrator``: ``auto`` (the line quadrature where it applies, :func:`choose_integrator`),
    ``lines`` or ``qmc``. ``precision``: the mode of that integrator (``numerics.precision.PRECISIONS``
    or ``numerics.channel.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from. ``roles``: the
    student directions' roles of a subspace other than the named branch's (QMC only,
    :func:`numerics.fixed_points.subspaces.subspace_of_roles`). ``gauge``: fix the orientation at each
    iteration (QMC; off only to study what it does)."""
    choice = choose_integrator(spec, "qmc" if roles is not None and integrator == "auto" else integrator, branch)
    if choice == "lines":
        from numerics.fixed_points.lines import solve_branch
        from numerics.overlaps import Overlaps

        scalar = None if start is None else Overlaps(*(float(getattr(start, n)[0, 0]) for n in ("q", "m", "V", "theta")))
        return as_matrices(solve_branch(spec, alpha, branch, precision, start=scalar))
    from numerics.fixed_points.qmc import solve_qmc
    from numerics.fixed_points.subspaces import subspace_of_roles

    subspace = None if roles is None else subspace_of_roles(roles, spec.shape, branch)
    return solve_qmc(spec, alpha, branch, precision, start=start, gauge=gauge, subspace=subspace)


def general_branches(spec: ModelSpec) -> tuple:
    """The branches of ``spec`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`; ``mixed`` needs rank >= 2)."""
    from numerics.fixed_points.subspaces import GENERAL_BRANCHES

    return tuple(b for b in GENERAL_BRANCHES if b != "mixed" or spec.rank >= 2)


def follow_general(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
                   integrator: str = "auto", progress=None) -> list:
    """``branch`` along ``alphas`` by continuation: each solve starts from the last point found on
    the branch; a solve from the previous point that does not converge, or falls to a smaller
    branch, is retried once from the default start. Alphas where the branch is not found (:class:`~numerics.fixed_points.lines.BranchNotFound`)
    are left out, and the next one starts afresh; a solve that raises :class:`~numerics.solver.iteration.SolverError`
    is kept as a failed point (:func:`~numerics.result.failed_point`). ``progress(alpha)`` is
    called after each alpha."""
    from numerics.fixed_points.lines import BranchNotFound
    from numerics.result import failed_point
    from numerics.solver.iteration import SolverError

    points, start = [], None
    for alpha in alphas:
        try:
            try:
                fp = solve_general(spec, float(alpha), branch, precision, integrator, start=start)
            except BranchNotFound as exc:
                if start is None:
                    raise
                # from the previous point the iteration can fall to a smaller branch where the default
                # start finds this one (the rank-2 mixed branch at alpha 2.2, draft, from 1.9): the
                # branch is absent only if that fails too
                log.info("%s; retried from the default start", exc)
                fp = solve_general(spec, float(alpha), branch, precision, integrator)
            if not fp.converged and start is not None:
                # the previous point can lie in the basin of another orbit of the map (a rank-2 mixed
                # solve at alpha 2.5 from the point at 1.5 does not converge, from the default start
                # it does): one retry from the default start, kept only if it converges
                log.info("%s from the previous point: %s; retried from the default start", branch, fp.status)
                try:
                    retry = solve_general(spec, float(alpha), branch, precision, integrator)
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
    return points

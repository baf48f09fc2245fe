"""Fixed points of the general model through one entry point, whichever channel integrator
(docs/numerics.md, section "The general model: QMC integrator").

:func:`solve_general` returns a :class:`~numerics.general_result.GeneralFixedPoint` for any shape
``(L, r, t, k)``: with the line quadrature (the two-token rank-one model; its solve is
:func:`numerics.fixed_point.solve_branch`, errors from two rules) or with the quasi-Monte Carlo
integrator (:func:`numerics.qmc.solve.solve_qmc`, errors from independent scramblings).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from derivations import ModelSpec

from .channel_integrators import choose_integrator
from .general_result import GeneralFixedPoint, from_line_fixed_point
from .matrix_overlaps import MatrixOverlaps

log = logging.getLogger(__name__)


def solve_general(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                  integrator: str = "auto", start: Optional[MatrixOverlaps] = None,
                  roles: Optional[Sequence[str]] = None, gauge: bool = True) -> GeneralFixedPoint:
    """The fixed point of ``branch`` (:data:`numerics.subspaces.GENERAL_BRANCHES`) at ``alpha``.

    ``integrator``: ``auto`` (the line quadrature where it applies, :func:`choose_integrator`),
    ``lines`` or ``qmc``. ``precision``: the mode of that integrator (``numerics.precision.PRECISIONS``
    or ``numerics.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from. ``roles``: the
    student directions' roles of a subspace other than the named branch's (QMC only,
    :func:`numerics.subspaces.subspace_of_roles`). ``gauge``: fix the orientation at each
    iteration (QMC; off only to study what it does)."""
    choice = choose_integrator(spec, "qmc" if roles is not None and integrator == "auto" else integrator, branch)
    if choice == "lines":
        from .fixed_point import solve_branch
        from .overlaps import Overlaps

        scalar = None if start is None else Overlaps(*(float(getattr(start, n)[0, 0]) for n in ("q", "m", "V", "theta")))
        return from_line_fixed_point(solve_branch(spec, alpha, branch, precision, start=scalar))
    from .qmc.solve import solve_qmc
    from .subspaces import subspace_of_roles

    subspace = None if roles is None else subspace_of_roles(roles, spec.shape, branch)
    return solve_qmc(spec, alpha, branch, precision, start=start, gauge=gauge, subspace=subspace)


def general_branches(spec: ModelSpec) -> tuple:
    """The branches of ``spec`` (:data:`numerics.subspaces.GENERAL_BRANCHES`; ``mixed`` needs rank >= 2)."""
    from .subspaces import GENERAL_BRANCHES

    return tuple(b for b in GENERAL_BRANCHES if b != "mixed" or spec.rank >= 2)


def _branch_rank(branch: str) -> tuple:
    from .subspaces import GENERAL_BRANCHES

    return (GENERAL_BRANCHES.index(branch), "") if branch in GENERAL_BRANCHES else (len(GENERAL_BRANCHES), branch)


def mark_global_minima(points: Sequence[GeneralFixedPoint]) -> list:
    """``global_minimum`` on each point: the lowest training loss among the converged points of its
    alpha (a minimum that differs from the next by less than their errors is still marked, and
    ``global_margin`` in its diagnostics says by how many stated errors it is lower)."""
    import dataclasses

    by_alpha = {}
    for p in points:
        if p.converged:
            by_alpha.setdefault(p.alpha, []).append(p)
    out = []
    for p in points:
        # equal training losses (a branch fallen onto another) are ordered as GENERAL_BRANCHES, so the
        # mark does not depend on the order of the points
        rivals = sorted(by_alpha.get(p.alpha, []), key=lambda x: (x.train_loss, _branch_rank(x.branch)))
        best = bool(rivals) and rivals[0] is p
        diagnostics = p.diagnostics
        if best and len(rivals) > 1:
            gap = rivals[1].train_loss - p.train_loss
            spread = p.error.get("train_loss", 0.0) + rivals[1].error.get("train_loss", 0.0)
            diagnostics = dict(diagnostics, global_margin=gap / spread if spread > 0 else float("inf"))
        out.append(dataclasses.replace(p, global_minimum=best if p.converged else False, diagnostics=diagnostics))
    return out


def solve_all_general(spec: ModelSpec, alpha: float, precision: str = "fast", integrator: str = "auto",
                      branches: Optional[Sequence[str]] = None) -> list:
    """Every branch of ``branches`` (default :func:`general_branches`) found at ``alpha``, with
    ``global_minimum`` on the lowest training loss among the converged ones. A branch whose solve
    falls to a smaller one is absent at this alpha and left out; one that did not converge is
    reported as it is."""
    from .fixed_point import BranchNotFound

    found = []
    for branch in branches or general_branches(spec):
        try:
            found.append(solve_general(spec, alpha, branch, precision, integrator))
        except BranchNotFound as exc:
            log.info("%s", exc)
    return mark_global_minima(found)


def follow_general(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
                   integrator: str = "auto", progress=None) -> list:
    """``branch`` along ``alphas`` by continuation: each solve starts from the last point found on
    the branch; a solve from the previous point that does not converge, or falls to a smaller
    branch, is retried once from the default start. Alphas where the branch is not found (:class:`~numerics.fixed_point.BranchNotFound`)
    are left out, and the next one starts afresh; a solve that raises :class:`~numerics.solver.SolverError`
    is kept as a failed point (:func:`~numerics.general_result.failed_point`). ``progress(alpha)`` is
    called after each alpha."""
    from .fixed_point import BranchNotFound
    from .general_result import failed_point
    from .solver import SolverError

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

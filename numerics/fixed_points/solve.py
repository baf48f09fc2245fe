"""The one solve of a fixed point, for every model, whichever channel integrator
(docs/numerics.md, section "The general model: QMC integrator").

:func:`solve` returns a :class:`~numerics.result.FixedPoint` (matrix overlaps) for any shape
``(L, r, t, k)``: with the line quadrature (the two-token rank-one model on the branches it knows,
its ``1 x 1`` case; its solve is :func:`numerics.fixed_points.lines.solve_branch`, errors from two
rules) or with the quasi-Monte Carlo integrator (:func:`numerics.fixed_points.qmc.solve_qmc`, errors
from independent scramblings).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from derivations import ModelSpec

from numerics.channel.integrators import method_for
from numerics.overlaps import Overlaps
from numerics.result import FixedPoint
from numerics.threads import one_blas_thread

log = logging.getLogger(__name__)


@one_blas_thread
def solve(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
          integrator: str = "auto", start=None, roles: Optional[Sequence[str]] = None,
          gauge: bool = True) -> FixedPoint:
    """The fixed point of ``branch`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`) at
    ``alpha``, with error estimates.

    ``integrator``: ``auto`` (the line quadrature where it applies,
    :func:`~numerics.channel.integrators.method_for`),
    ``lines`` or ``qmc``. ``precision``: the mode of that integrator (``numerics.precision.PRECISIONS``
    or ``numerics.channel.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from (scalar
    or matrix). ``roles``: the student directions' roles of a subspace other than the named branch's
    (QMC only, :func:`numerics.fixed_points.subspaces.subspace_of_roles`). ``gauge``: fix the
    orientation at each iteration (QMC; off only to study what it does). Raises
    :class:`~numerics.fixed_points.errors.BranchNotFound` where the solve falls onto a smaller branch."""
    chosen = "qmc" if roles is not None and integrator == "auto" else integrator
    if method_for(spec, (branch,), chosen).deterministic:
        from numerics.fixed_points.errors import BranchNotFound
        from numerics.fixed_points.lines import solve_branch

        try:
            return solve_branch(spec, alpha, branch, precision, start=start)
        except BranchNotFound as exc:
            if start is not None or branch not in CONTINUATION_GRID:
                raise
            return _by_continuation(spec, alpha, branch, precision, exc)
    from numerics.fixed_points.qmc import solve_qmc
    from numerics.fixed_points.subspaces import subspace_of_roles

    subspace = None if roles is None else subspace_of_roles(roles, spec.shape, branch)
    return solve_qmc(spec, alpha, branch, precision, start=start, gauge=gauge, subspace=subspace)


#: where the positional branch's solve at ``alpha`` falls to the trivial point from every start, the
#: branch is followed (draft) on these multiples of ``alpha``, from below, where it lives (it ends at
#: an upper spinodal), as ``curve`` and ``thresholds`` follow it: at omega = 0.3, lam = 0.0031 its
#: point at alpha = 0.8 is reached so (draft: m = 0.116) where all four starts fall to the trivial
#: point. The semantic branch is not continued so: no case is known where its starts miss it, and its
#: absence below its lower spinodal is common (a continuation there cost 48 s at draft).
CONTINUATION_GRID = {"positional": (0.4, 0.55, 0.7, 0.85, 1.0)}


def _by_continuation(spec: ModelSpec, alpha: float, branch: str, precision: str, absent) -> FixedPoint:
    """The branch at ``alpha`` reached by continuation (:data:`CONTINUATION_GRID`, draft), then solved
    at ``precision`` from there. Where it is not reached, ``absent`` (the :class:`BranchNotFound` of
    the direct solve) again, told where the continuation ended and how to follow the branch."""
    from numerics.branches.follow import follow_branch
    from numerics.fixed_points.errors import BranchNotFound
    from numerics.fixed_points.lines import solve_branch

    grid = [alpha * f for f in CONTINUATION_GRID[branch]]
    lo, hi = min(grid), max(grid)
    # where it ends, roughly, for the message: located, not classified
    curve = follow_branch(spec, grid, branch, "draft", bisections=1, classify_ends=False)
    reached = [p for p in curve.points if p.converged and abs(p.alpha - alpha) <= 1e-12 * alpha]
    follow = (f"attnphase curve --precision {precision} --alphas {lo:.4g}:{hi:.4g}:9 --branches {branch} "
              f"locates its end")
    if not reached:
        ends = [f"alpha = {e['alpha']:.4g} +- {e['alpha_error']:.1g}" for e in curve.spinodals]
        where = (f"; followed (draft) on alpha in [{lo:.4g}, {hi:.4g}] it ends at {', '.join(ends)}" if ends
                 else f"; nor found by continuation (draft) on alpha in [{lo:.4g}, {hi:.4g}]")
        raise BranchNotFound(f"{absent}{where}", branch, alpha, getattr(absent, "point", None)) from None
    log.info("alpha=%g %s: not found from the starts, reached by continuation on %s", alpha, branch, grid)
    if precision == "draft":
        return reached[0]
    try:
        return solve_branch(spec, alpha, branch, precision, start=reached[0].overlaps)
    except BranchNotFound as exc:
        reached_at = Overlaps.of(reached[0].overlaps)
        raise BranchNotFound(f"{absent}; the draft rule reaches it by continuation ({reached_at}), but "
                             f"the {precision} rule's solve from there falls to the trivial point: at {precision} "
                             f"precision the branch ends before alpha = {alpha:g} ({follow})", branch, alpha,
                             exc.point) from None


def branches(spec: ModelSpec) -> tuple:
    """The branches of ``spec`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`; ``mixed`` needs rank >= 2)."""
    from numerics.fixed_points.subspaces import GENERAL_BRANCHES

    return tuple(b for b in GENERAL_BRANCHES if b != "mixed" or spec.rank >= 2)

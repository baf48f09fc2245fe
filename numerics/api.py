"""The public theory API used by the command line, validation and the phase diagrams: one front
for every model (any ``L``, ``r``, ``t``, ``P``).

* :func:`solve` one branch at one ``alpha``, :func:`solve_all` every branch of the model there,
  :func:`follow` one branch along an ``alpha`` grid, :func:`thresholds` where the global minimum
  changes branch and where it beats the linear baseline;
* one record, :class:`FixedPoint` (matrices plus gauge invariants, with errors; the line
  quadrature's scalars as its ``1 x 1`` case), and one curve, :class:`BranchCurve`.

The channel integrator is chosen by :func:`numerics.channel.integrators.choose_integrator`: the line
quadrature where it applies (the paper's two-token rank-one model on the branches it knows),
quasi-Monte Carlo elsewhere. That choice is the one place where the model's shape decides a method.

Exceptions: :class:`BranchNotFound` (a solve for a branch fell onto the trivial point),
:class:`SolverError` (the solver failed), :class:`OutsideSolverRange` (``alpha`` or ``lam``
outside the solvable range; a ``ValueError``), :class:`ThresholdError` (no threshold:
:class:`BranchAbsent`, :class:`CrossingBeyondScan`), :class:`GeneralThresholdError` (no change of
the global branch on the scan) and :class:`RootFindingError`.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from derivations import ModelSpec

from numerics.baseline import Baseline, linear_baseline, linear_baseline_mp
from numerics.branches.follow import BranchCurve, follow_branch, is_on_branch
from numerics.channel.integrators import IntegratorError, choose_integrator
from numerics.fixed_points.lines import BranchNotFound, solve_branch
from numerics.fixed_points.general import solve_general  # noqa: F401  (the QMC solve, by its name in benchmarks)
from numerics.thresholds.general import GeneralThresholdError, GeneralThresholds, general_thresholds
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.overlaps import BRANCHES, COMPETING_BRANCHES, HatOverlaps, Overlaps
from numerics.precision import PRECISIONS
from numerics.result import FixedPoint, as_matrices, failed_point, from_row, mark_global_minima
from numerics.thresholds.lines import ThresholdError, Thresholds, scan_curves_from_rows
from numerics.thresholds.lines import thresholds as _line_thresholds

__all__ = ["Baseline", "linear_baseline", "linear_baseline_mp", "BranchCurve", "is_on_branch", "BRANCHES",
           "PRECISIONS", "FixedPoint", "HatOverlaps", "Overlaps", "MatrixOverlaps", "BranchNotFound",
           "IntegratorError", "ThresholdError", "Thresholds", "GeneralThresholdError", "GeneralThresholds",
           "scan_curves_from_rows", "from_row", "failed_point", "mark_global_minima", "branches", "integrator_for",
           "solve", "solve_all", "follow", "thresholds"]

log = logging.getLogger(__name__)


def branches(spec: ModelSpec) -> tuple:
    """The branches of ``spec`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`; ``mixed`` needs rank >= 2)."""
    from numerics.fixed_points.subspaces import GENERAL_BRANCHES

    return tuple(b for b in GENERAL_BRANCHES if b != "mixed" or spec.rank >= 2)


def integrator_for(spec: ModelSpec, names: Sequence[str], integrator: str = "auto") -> str:
    """The one integrator that solves every branch of ``names`` (``lines`` only if it applies to
    all of them; :class:`IntegratorError` for an integrator the model does not have)."""
    chosen = {choose_integrator(spec, integrator, b) for b in names}
    return "lines" if chosen == {"lines"} else "qmc"


def _scalars(start) -> Optional[Overlaps]:
    if start is None or isinstance(start, Overlaps):
        return start
    return Overlaps(*(float(getattr(start, n)[0, 0]) for n in ("q", "m", "V", "theta")))


def solve(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
          integrator: str = "auto", start=None, roles: Optional[Sequence[str]] = None,
          gauge: bool = True) -> FixedPoint:
    """The fixed point of ``branch`` at ``alpha``, with error estimates.

    ``integrator``: ``auto`` (:func:`choose_integrator`), ``lines`` or ``qmc``. ``precision``: the
    mode of that integrator (``numerics.precision.PRECISIONS`` or
    ``numerics.channel.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from. ``roles``: the
    student directions' roles of a subspace other than the named branch's (QMC,
    :func:`numerics.fixed_points.subspaces.subspace_of_roles`). ``gauge``: fix the orientation at each QMC
    iteration (off only to study what it does). Raises :class:`BranchNotFound` where the solve
    falls onto a smaller branch."""
    choice = choose_integrator(spec, "qmc" if roles is not None and integrator == "auto" else integrator, branch)
    if choice == "lines":
        return solve_branch(spec, alpha, branch, precision, start=_scalars(start))
    return solve_general(spec, alpha, branch, precision, "qmc", start=start, roles=roles, gauge=gauge)


def solve_all(spec: ModelSpec, alpha: float, precision: str = "fast", integrator: str = "auto",
              names: Optional[Sequence[str]] = None) -> list:
    """Every branch of ``names`` (default :func:`branches`) found at ``alpha``, with
    ``global_minimum`` on the lowest training loss among the converged ones
    (:func:`mark_global_minima`; docs/theory.md, section 3.1). A branch whose solve falls onto a
    smaller one (:class:`BranchNotFound`) is absent and left out; a branch whose solve did not
    converge is reported as it is (``converged=False`` with its residual), since a failure is not
    an absence."""
    found = []
    for branch in names or branches(spec):
        try:
            found.append(solve(spec, alpha, branch, precision, integrator))
        except BranchNotFound as exc:
            log.info("%s", exc)
    return mark_global_minima(found)


def follow(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
           integrator: str = "auto", progress=None) -> BranchCurve:
    """``branch`` along ``alphas`` by continuation, as a :class:`BranchCurve` (its points, the
    spinodals where the integrator locates them, and a note on where it was not found).

    The line quadrature (:func:`numerics.branches.follow.follow_branch`) solves from an anchor up and down
    the grid and bisects each end of the branch; the QMC integrator
    (:func:`numerics.fixed_points.general.follow_general`) walks the grid, each solve started from
    the last point found, and keeps a solve that raised as a failed point. ``progress(x)`` is
    called as the points come (its argument is not to be relied on)."""
    if integrator_for(spec, (branch,), integrator) == "lines":
        return follow_branch(spec, alphas, branch, precision, progress=progress)
    from numerics.fixed_points.general import follow_general

    points = follow_general(spec, alphas, branch, precision, "qmc", progress=progress)
    absent = sorted(set(map(float, alphas)) - {p.alpha for p in points})
    note = f"{branch} branch not found at alpha = {', '.join(f'{a:g}' for a in absent)}" if absent else ""
    return BranchCurve(branch, points, [], note=note)


def thresholds(spec: ModelSpec, precision: str = "fast", alphas: Optional[Sequence[float]] = None,
               integrator: str = "auto", names: Optional[Sequence[str]] = None, scan: Optional[dict] = None,
               progress=None, **options):
    """Where the global minimum changes branch (``alpha_c``) and where it beats the linear
    baseline (``alpha_l``), with error bars.

    ``alphas``: the bracketing scan (default 0.5..2.5 in 9 points); ``scan``: ``{branch:
    BranchCurve}`` already followed on it (e.g. by :func:`follow`), not solved again where it is
    at ``precision`` (the line root finder refines a draft scan itself); ``names``:
    the branches compared (default the model's competing pair where the line quadrature solves
    them, else :func:`branches`).

    Where the line quadrature solves the two competing branches, no other set is asked and the scan
    (if given) is of its records, the crossing of their training losses is found by Newton's method
    on the branches (:func:`numerics.thresholds.lines.thresholds`, a :class:`Thresholds` with the
    spinodals; ``options`` go to it); otherwise every change of the global branch on the scan is located
    (:func:`numerics.thresholds.general.general_thresholds`, a :class:`GeneralThresholds`;
    ``progress(n)`` told the solves done)."""
    compared = tuple(names or COMPETING_BRANCHES)
    matrices = scan is not None and any(not getattr(p, "scalar", True) for c in scan.values() for p in c.points)
    if (set(compared) == set(COMPETING_BRANCHES) and not matrices
            and integrator_for(spec, COMPETING_BRANCHES, integrator) == "lines"):
        # with a scan, its grid brackets the roots and the range searched for the ends of the branches
        # is the root finder's own (as the phase diagram's threshold tasks have always run it)
        scan_range = {} if alphas is None or scan is not None else {
            "alpha_min": float(alphas[0]), "alpha_max": float(alphas[-1]), "n_scan": len(alphas)}
        return _line_thresholds(spec, precision, progress=progress, scan_curves=scan, **scan_range, **options)
    compared = tuple(names or branches(spec))
    points = None
    if scan is not None:
        points = [as_matrices(p) for curve in scan.values() for p in curve.points]
        alphas = sorted({p.alpha for p in points}) if alphas is None else alphas
        if any(p.precision != precision for p in points):
            # the changes of the global branch are located from the scan's own points: a scan at
            # another precision (the draft curves of ``attnphase run``) is solved again
            points = None
    alphas = [0.5 + 0.25 * i for i in range(9)] if alphas is None else alphas
    return general_thresholds(spec, alphas, precision, integrator, compared, scan=points, progress=progress)

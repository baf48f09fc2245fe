"""The public theory API used by the command line, validation and the phase diagrams.

Exceptions: :class:`BranchNotFound` (a solve for a branch fell onto the trivial point),
:class:`SolverError` (the solver failed), :class:`OutsideSolverRange` (``alpha`` or ``lam``
outside the solvable range; a ``ValueError``), :class:`ThresholdError` (no threshold:
:class:`BranchAbsent`, :class:`CrossingBeyondScan`) and :class:`RootFindingError`.
"""
import logging

from .baseline import Baseline, linear_baseline, linear_baseline_mp
from .branches import BranchCurve, follow_branch, is_on_branch
from .fixed_point import BranchNotFound, solve_branch
from .general_fixed_point import follow_general, general_branches, mark_global_minima, solve_all_general, solve_general
from .general_result import GeneralFixedPoint
from .general_result import from_row as general_point_from_row
from .general_thresholds import GeneralThresholdError, GeneralThresholds, general_thresholds
from .overlaps import BRANCHES, HatOverlaps, Overlaps
from .precision import PRECISIONS
from .result import FixedPoint
from .thresholds import ThresholdError, Thresholds, scan_curves_from_rows, thresholds

__all__ = ["Baseline", "linear_baseline", "linear_baseline_mp", "BranchCurve", "follow_branch", "is_on_branch",
           "BRANCHES", "PRECISIONS", "FixedPoint", "solve_branch", "HatOverlaps", "Overlaps", "ThresholdError",
           "Thresholds", "thresholds", "scan_curves_from_rows", "solve_all", "solve_general",
           "solve_all_general", "follow_general", "mark_global_minima", "general_branches", "GeneralFixedPoint",
           "general_point_from_row", "GeneralThresholdError", "GeneralThresholds", "general_thresholds"]


def solve_all(spec, alpha, precision="fast"):
    """Every branch found at one alpha, with ``global_minimum`` set on the lowest training
    loss among the converged ones (docs/theory.md, section 3.1).

    A branch whose solve falls onto the trivial point (:class:`BranchNotFound`) is not
    there and is left out; a branch whose solve did not converge is reported as it is
    (``converged=False`` with its residual), since a failure is not an absence."""
    import dataclasses

    found = []
    for branch in BRANCHES:
        try:
            found.append(solve_branch(spec, alpha, branch, precision))
        except BranchNotFound as exc:
            logging.getLogger(__name__).info("%s", exc)
    best = min((p for p in found if p.converged), key=lambda p: p.train_loss, default=None)
    return [dataclasses.replace(p, global_minimum=(p is best)) for p in found]

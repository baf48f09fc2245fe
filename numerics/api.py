"""The public theory API used by the command line, validation and the phase diagrams."""
from .baseline import Baseline, linear_baseline, linear_baseline_mp
from .branches import BranchCurve, follow_branch, is_on_branch
from .fixed_point import solve_branch
from .general_fixed_point import follow_general, mark_global_minima, solve_all_general, solve_general
from .overlaps import BRANCHES, HatOverlaps, Overlaps
from .precision import PRECISIONS
from .result import FixedPoint
from .thresholds import ThresholdError, Thresholds, scan_curves_from_rows, thresholds

__all__ = ["Baseline", "linear_baseline", "linear_baseline_mp", "BranchCurve", "follow_branch", "is_on_branch",
           "BRANCHES", "PRECISIONS", "FixedPoint", "solve_branch", "HatOverlaps", "Overlaps", "ThresholdError",
           "Thresholds", "thresholds", "scan_curves_from_rows", "solve_all", "solve_general",
           "solve_all_general", "follow_general", "mark_global_minima"]


def solve_all(spec, alpha, precision="fast"):
    """Every branch at one alpha, with ``global_minimum`` set on the lowest training loss
    among the branches found (SPEC section 3)."""
    import dataclasses

    found = []
    for branch in BRANCHES:
        fp = solve_branch(spec, alpha, branch, precision)
        if branch == "trivial" or is_on_branch(fp, branch):
            found.append(fp)
    best = min((p for p in found if p.converged), key=lambda p: p.train_loss, default=None)
    return [dataclasses.replace(p, global_minimum=(p is best)) for p in found]

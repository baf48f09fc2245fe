"""The scan a threshold is located on (:mod:`numerics.thresholds.locate`): its default grid, the
geometric grids it is extended on, a phase diagram's rows read back as a scan
(:func:`scan_curves_from_rows`), and one branch near it (:class:`BranchNearScan`).

A branch near its scan is the points where it was found, each with the start it gives a solve (its
overlaps, handed back to the solver as they are), and the solves at new ``alpha`` that locating a
root needs, each warm-started from those points. The bookkeeping is the same for every integrator;
how a point is solved, and from which of the known ones, is the root-finding strategy's (a line
quadrature rule seeded from the previous rule's solution and the interpolated neighbours; a solve at
the locating precision from the nearest point), passed in as a function. The end of a branch
between a point where it is found and one where it is not is located by bisection
(:meth:`BranchNearScan.end`).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Optional

import numpy as np

from numerics.branches.follow import BranchCurve
from numerics.overlaps import COMPETING_BRANCHES, Overlaps
from numerics.thresholds.record import NotConverged
from tidyio import is_true, number

log = logging.getLogger(__name__)

#: the scan when none is given: 9 points on [0.5, 2.5]
DEFAULT_ALPHAS = tuple(float(a) for a in np.linspace(0.5, 2.5, 9))
#: the precision a scan is solved at: it brackets the roots, which are refined at the asked precision
SCAN_PRECISION = "draft"
#: where a scan is extended when a threshold lies beyond it: its end times these factors (a geometric
#: grid: continuation steps of 20-25%, which the draft rule follows)
EXTEND_UP = (1.2, 1.44, 1.73, 2.07, 2.49, 3.0)
EXTEND_DOWN = (0.8, 0.64, 0.51, 0.41, 0.33, 0.26, 0.2)
#: the width to which the end of a branch is located by bisection
END_XTOL = 4e-3


@dataclasses.dataclass(frozen=True)
class ScanPoint:
    """A solved point of a branch as the thresholds' bracketing needs it (a row of a
    phase diagram's ``theory.csv``, or a :class:`~numerics.result.FixedPoint`)."""

    alpha: float
    branch: str
    overlaps: Overlaps
    test_error: float
    train_loss: float
    precision: str
    continuation_pairs: tuple = ()


def scan_curves_from_rows(rows) -> dict:
    """``{branch: BranchCurve}`` of :class:`ScanPoint` from branch rows as the phase diagram
    writes them (``attnphase.sweeps.tasks``; values or their CSV text): the points where the branch
    exists and converged, and the spinodals of the ``spinodal_{lower,upper}_*`` columns.

    The phase diagram's threshold task starts from its column's branch rows, read back
    from ``theory.csv``, whether they were computed in this run or in an earlier one, so a
    resumed sweep gives the same thresholds as an uninterrupted one."""
    curves = {}
    for branch in COMPETING_BRANCHES:
        mine = sorted((r for r in rows if r.get("branch") == branch), key=lambda r: number(r["alpha"]))
        points = [ScanPoint(number(r["alpha"]), branch,
                            Overlaps(*(number(r[k]) for k in ("q", "m", "V", "theta"))),
                            number(r["test_error"]), number(r["train_loss"]), str(r.get("precision", "")))
                  for r in mine if is_true(r.get("exists")) and is_true(r.get("converged"))]
        spinodals = []
        for side in ("lower", "upper"):
            a = number(mine[0].get(f"spinodal_{side}_alpha")) if mine else float("nan")
            if not np.isfinite(a):
                continue
            err = number(mine[0].get(f"spinodal_{side}_alpha_error"))
            last = number(mine[0].get(f"spinodal_{side}_last_found"))
            if not np.isfinite(last):  # rows written before that column existed
                last = a + 0.5 * err if side == "lower" else a - 0.5 * err
            spinodals.append({"branch": branch, "alpha": a, "alpha_error": err, "side": side, "last_found": last})
        curves[branch] = BranchCurve(branch, points, spinodals, "" if points else f"no {branch} rows")
    return curves


class BranchNearScan:
    """One branch near its scan: ``known``, the start of every ``alpha`` where it was found (on the
    scan or by a solve here, the latest solve's), and ``points``, the solutions at the locating
    precision or rule.

    ``solve_at(branch, alpha)``: a new solution at ``alpha``, started from ``branch``'s known points
    as the strategy chooses; None where the branch is not found there; it raises where a solve fails.
    A solution already at ``alpha`` is returned as it is: the root finders come back to an ``alpha``
    they solved (``alpha_l``'s search starts at ``alpha_c``, where the crossing's solve was made)."""

    def __init__(self, name: str, solve_at: Callable, known: Optional[dict] = None,
                 points: Optional[dict] = None):
        self.name = name
        self._solve_at = solve_at
        self.known = dict(known or {})
        self.points = dict(points or {})

    def __contains__(self, alpha) -> bool:
        """Whether the branch was found at ``alpha`` (on the scan, or by a solve)."""
        return alpha in self.known

    def nearest(self, alpha: float, among=None):
        """The alpha of ``among`` (default: every known one) nearest ``alpha``, the first known on a tie;
        None where there is none."""
        among = self.known if among is None else among
        return min(among, key=lambda a: abs(a - alpha)) if among else None

    def solve(self, alpha: float):
        """The branch's solution at ``alpha`` (``solve_at``'s; None where it is not found)."""
        if alpha in self.points:
            return self.points[alpha]
        point = self._solve_at(self, alpha)
        if point is not None:
            self.known[alpha] = point.overlaps
            self.points[alpha] = point
        return point

    def end(self, inside: float, outside: float) -> tuple:
        """``(last alpha found, first alpha not found, note)`` between a point where the branch exists
        and one where it does not, by bisection to :data:`END_XTOL`. Near its end a branch's solve may
        not converge (the fixed point loses stability there); the bisection then stops and the end is
        known to the interval reached, which the note says."""
        while abs(outside - inside) > END_XTOL:
            mid = 0.5 * (inside + outside)
            try:
                found = self.solve(mid) is not None
            except NotConverged as exc:
                note = f"stopped at a width of {abs(outside - inside):.2g}: {exc}"
                log.info("%s end: %s", self.name, note)
                return inside, outside, note
            if found:
                inside = mid
            else:
                outside = mid
        return inside, outside, ""

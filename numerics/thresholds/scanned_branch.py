"""A branch as the threshold locator on a scan sees it (:mod:`numerics.thresholds.scan_changes`): its
solved points, solves at new ``alpha`` from the nearest of them, whether a solve reaches it at all
(next to a birth), and the bisection of its end."""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Sequence

from numerics.channel.qmc.precision import as_qmc_precision
from numerics.fixed_points.solve import solve
from numerics.result import FixedPoint
from numerics.thresholds.record import NotConverged

log = logging.getLogger(__name__)

#: the width to which the end of a branch is located by bisection
END_XTOL = 4e-3
#: the iterations per scrambling of the probe for a child below a birth's crossing: next to a birth
#: the child's map barely contracts, and a whole fast solve there ran every scrambling to its limit
#: (60, minutes) to end unconverged
PROBE_MAXITER = 15


class ScannedBranch:
    """The solved points of one branch, and solves at new alphas started from the nearest of them;
    ``mapper``: the scan's (:func:`~numerics.thresholds.scan_changes.scan_thresholds`), for the multipliers of a birth on it."""

    def __init__(self, spec, name, precision, integrator, points: Sequence[FixedPoint], progress, mapper=None):
        self.spec, self.name, self.precision, self.integrator = spec, name, precision, integrator
        self.mapper = mapper
        self.points = {p.alpha: p for p in points if p.converged and p.precision == precision}
        # the scan's points at another precision: starts only
        self.starts = {p.alpha: p.overlaps for p in points if p.converged}
        self.progress = progress

    def __contains__(self, alpha) -> bool:
        """Whether the branch was found at ``alpha`` (on the scan, or by a solve)."""
        return alpha in self.points or alpha in self.starts

    def _nearest_start(self, alpha: float):
        """The overlaps of the branch's point nearest ``alpha`` (solved here or on the scan); None if none."""
        starts = {**self.starts, **{a: p.overlaps for a, p in self.points.items()}}
        return starts[min(starts, key=lambda a: abs(a - alpha))] if starts else None

    def solve(self, alpha: float) -> Optional[FixedPoint]:
        """The branch at ``alpha``, or None where it is not found; raises where a solve fails."""
        from numerics.fixed_points.errors import BranchNotFound

        if alpha in self.points:
            return self.points[alpha]
        start = self._nearest_start(alpha)
        try:
            try:
                fp = solve(self.spec, alpha, self.name, self.precision, self.integrator, start=start)
            except BranchNotFound:
                if start is None:
                    raise
                fp = None
            if (fp is None or not fp.converged) and start is not None:
                # as in walk_branch: from the nearest point the iteration may fall to a smaller
                # branch or fail where the default start finds the branch
                fp = solve(self.spec, alpha, self.name, self.precision, self.integrator)
        except BranchNotFound as exc:
            log.info("%s", exc)
            return None
        finally:
            if self.progress:
                self.progress(1)
        if not fp.converged:
            raise NotConverged(f"{self.name} branch at alpha = {alpha:g}: {fp.status}", fp)
        self.points[alpha] = fp
        return fp

    def solve_on(self, precision, alpha: float) -> FixedPoint:
        """The branch at ``alpha`` on another QMC rule (a refinement), started from its nearest point;
        raises where it is not found or does not converge."""
        fp = solve(self.spec, alpha, self.name, precision, "qmc", start=self._nearest_start(alpha))
        if not fp.converged:
            raise NotConverged(f"{self.name} branch at alpha = {alpha:g} on the {precision.name} rule: {fp.status}", fp)
        return fp

    def reached(self, alpha: float) -> tuple:
        """``(found, note)``: whether the branch is found at ``alpha`` from its nearest point, tested
        first by the approach of a QMC solve alone (:func:`~numerics.fixed_points.qmc.approach_qmc`):
        where that falls to a smaller branch it is not found, where it does not settle ``(None,
        note)``; where it settles, at draft precision by a solve of at most :data:`PROBE_MAXITER`
        iterations per scrambling, found where it converges and ``(None, note)`` where it does not;
        at a finer precision ``(None, note)`` (that solve is not affordable there)."""
        from numerics.fixed_points.errors import BranchNotFound
        from numerics.fixed_points.qmc import approach_qmc

        start = self._nearest_start(alpha)
        reach = approach_qmc(self.spec, alpha, self.name, self.precision, start=start)
        log.info("%s at alpha = %g from the nearest point: approach %s (defining overlap %.2e, residual %.1e)",
                 self.name, alpha, "collapsed" if reach.collapsed else ("settled" if reach.converged else
                                                                        "did not settle"),
                 reach.defining, reach.residual)
        if reach.collapsed:
            return False, ""
        if not reach.converged:
            # a whole solve would not settle either, at a higher cost: with the cap below, at fast
            # precision one scrambling of the three-token child took 22-66 s and ended unconverged
            return None, (f"the approach from the nearest point did not settle in {reach.iterations} iterations "
                          f"(residual {reach.residual:.1e}, defining overlap {reach.defining:.2e})")
        if self.precision != "draft":
            # next to a birth the child's map contracts at a rate within a few 1e-3 of 1, so that a
            # settled approach is weak evidence and a capped solve rarely converges; at fast it cost
            # more than 10 minutes for the rank-2 mixed child (approach settled at 7e-3 below the
            # birth) and is left out, the birth standing with this note
            return None, (f"the approach from the nearest point settled (defining overlap {reach.defining:.2e}, "
                          f"residual {reach.residual:.1e}); the capped solve that would decide is run at draft "
                          f"precision only")
        capped = dataclasses.replace(as_qmc_precision(self.precision), maxiter=PROBE_MAXITER)
        try:
            fp = solve(self.spec, alpha, self.name, capped, "qmc", start=start)
        except BranchNotFound as exc:
            log.info("%s", exc)
            return False, ""
        finally:
            if self.progress:
                self.progress(1)
        if not fp.converged:
            return None, f"the probe did not converge in {PROBE_MAXITER} iterations per scrambling: {fp.status}"
        return True, ""

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

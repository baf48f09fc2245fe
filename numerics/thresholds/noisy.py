"""The noise-aware root-finding strategy of the threshold locator (:mod:`numerics.thresholds.locate`),
for any model and branches whose records carry quadrature noise (QMC; docs/theory.md, sections 3.4,
3.5 and 4.10). It applies to records without noise too (the line quadrature, with a stated noise of
zero or none), but does not bisect the ends of the branches on the scan.

The branches are walked on a scan of ``alpha`` at draft precision
(:func:`numerics.branches.follow.walk_branch`); at each scanned ``alpha`` the global minimum is the
converged branch of lowest training loss ``F``. Wherever it changes between two scanned points, the
change is located:

* ``crossing``: both branches exist across the interval and ``F`` crosses; the root of
  ``F_above - F_below`` by Brent's method (scipy), each value two fixed-point solves started from
  the nearest solved point of the branch;
* ``appearance`` / ``disappearance``: the branch global above the change does not exist at the lower
  end (or the one global below does not exist at the upper end). The end of that branch is found by
  bisection on whether its solve finds it; if it is already the lower one where it appears (or still
  the lower one where it ends), the change is at that end, to the bisection's width; otherwise the
  crossing lies between the end and the scan point and is found as above;
* ``bifurcation``: the branch grows continuously out of the global one (:mod:`.births`); looked for
  first, from the last scanned point without the branch (also where the branch is found at the lower
  end or its solve there did not converge: next to a birth the two ``F`` differ by less than a coarse
  rule's error, which can order them wrongly). Where that does not apply but the branch appears with
  the global one's ``F`` (within :data:`CONTINUOUS_GAP` stated errors), the onset is extrapolated
  from its defining overlap (:func:`~numerics.thresholds.births.onset`).

``alpha_c`` is the first change (in the paper's model the one change, positional to semantic); every
change is reported. A scan solved here (not given) is extended where it shows no change, one point
at a time on the geometric grids of :mod:`.scan`: first below it, unless the global branch at its
lower end is the trivial one (nothing is born below that), then above it, and above it too while the
global minimum's test error stays above the linear baseline's (``alpha_l`` beyond it); each
extension is noted in the record. ``alpha_l`` is where the global minimum's test error falls below
the linear baseline's: the root on the branch global there, or the ``alpha_c`` of a change where the
test error jumps across it.

Error bars. The stated errors of the QMC fixed points (docs/numerics.md, section 11) enter through
the slope: ``delta alpha = sqrt(e_1^2 + e_2^2) / |d(F_1 - F_2)/d alpha|`` (for ``alpha_l`` the test
error's errors and slope), plus the root finder's tolerance, which is set below that noise
(:func:`~numerics.thresholds.noisy_roots.root_within_noise`); an end of a branch is known to half the
bisection's last interval. A root on QMC solutions with an error above its mode's aim is refined once
on four times the points (:func:`~numerics.thresholds.noisy_roots.refined_root`).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Callable, Dict, Optional, Sequence

from numerics.branches.follow import walk_branch
from numerics.channel.integrators import is_noisy
from numerics.channel.qmc.precision import as_qmc_precision
from numerics.fixed_points.solve import branches as model_branches
from numerics.fixed_points.solve import solve
from numerics.result import FixedPoint, mark_global_minima
from numerics.thresholds.births import bifurcation, onset
from numerics.thresholds.noisy_roots import refined_root, root_within_noise, stated_error
from numerics.thresholds.record import NotConverged, ThresholdError, ThresholdLocationError, Transition
from numerics.thresholds.scan import DEFAULT_ALPHAS, EXTEND_DOWN, EXTEND_UP, SCAN_PRECISION, BranchNearScan

log = logging.getLogger(__name__)

#: a branch that appears within this many stated errors of the global one's F bifurcates from it
CONTINUOUS_GAP = 3.0


def _nearest(branch: BranchNearScan, alpha: float) -> FixedPoint:
    """The branch's solution at the locating precision nearest ``alpha``."""
    return branch.points[branch.nearest(alpha, branch.points)]


def _gap_at_end(pa, pb) -> dict:
    """``F_above - F_below`` at the last point where both exist next to a branch's end, in stated
    errors: near zero where one branch bifurcates from the other (a continuous change)."""
    if pa is None or pb is None:
        return {}
    gap = pa.train_loss - pb.train_loss
    spread = math.hypot(stated_error(pa, "train_loss"), stated_error(pb, "train_loss"))
    return {"train_loss_gap_at_end": gap, "train_loss_gap_at_end_in_errors": gap / spread if spread > 0 else math.nan}


def _with_status(located: tuple) -> tuple:
    root, error, details = located
    return root, error, "ok", details


def _global_branches(scan: Sequence[FixedPoint]) -> list:
    """``(alpha, branch, test error)`` of the global minimum at each scanned ``alpha``."""
    return sorted((p.alpha, p.branch, p.test_error) for p in mark_global_minima(list(scan)) if p.global_minimum)


def _extend(walk: Callable[[list, list], list], scan: list, alphas: Sequence[float], eps_lin: float) -> tuple:
    """The scan extended beyond ``alphas`` where it shows no change of the global branch, or (above)
    where the global minimum's test error has not fallen below ``eps_lin`` (module docstring);
    ``walk(grid, known)`` solves every branch on ``grid``, each from its point in ``known`` nearest
    the grid. Returns ``(scan, notes)``."""
    lo, hi = min(alphas), max(alphas)
    scan, added = list(scan), []

    def changes(g):
        return any(b0 != b1 for (_, b0, _), (_, b1, _) in zip(g, g[1:]))

    g = _global_branches(scan)
    for f in EXTEND_DOWN:
        if not g or changes(g) or g[0][1] == "trivial":
            break
        added.append(lo * f)
        scan += walk([lo * f], scan)
        g = _global_branches(scan)
    for f in EXTEND_UP:
        if not g or (changes(g) and g[-1][2] <= eps_lin):
            break
        added.append(hi * f)
        scan += walk([hi * f], scan)
        g = _global_branches(scan)
    notes = []
    if added:
        notes.append(f"extended the scan to alpha in [{min(lo, *added):.4g}, {max(hi, *added):.4g}]")
        log.info("%s", notes[0])
    return scan, notes


def _walk_points(spec, grid: tuple, precision: str, integrator: str, task: tuple) -> list:
    """The points of one branch walked on ``grid`` (``task``: the branch and its start), for a mapper."""
    branch, start = task
    return walk_branch(spec, grid, branch, precision, integrator, start=start).points


@dataclasses.dataclass
class _Changes:
    """The scan's points with the global minima marked, each branch near it, the global branch at
    each scanned ``alpha``, and the notes on the scan."""

    scan: list
    by: Dict[str, BranchNearScan]
    globals_: list
    notes: list


class Noisy:
    """The noise-aware strategy (module docstring) for the branches ``names`` of ``spec`` (default
    every branch of the model), located at ``precision`` with ``integrator``. ``progress(n)``: told
    the solves done. ``mapper(function, items)``: the results of ``function`` on each item, in order,
    computed as it chooses (a Dask client's ``map``, on workers); the branches of a scan are walked
    through it, each walk independent of the others (by default one after another here, with
    ``progress`` told each alpha), and the scramblings of a birth's multipliers
    (:func:`~numerics.branches.bifurcation.growth_multiplier`). Its root finders set their tolerance
    below the noise: an ``xtol`` is a ``ValueError``."""

    def __init__(self, spec, precision, integrator: str = "auto", names=None,
                 progress: Optional[Callable[[int], None]] = None, mapper: Optional[Callable] = None,
                 xtol: Optional[float] = None):
        if xtol is not None:
            raise ValueError("xtol: the noise-aware root finders set their tolerance below the noise")
        self.spec, self.precision, self.integrator = spec, precision, integrator
        self.names = tuple(names or model_branches(spec))
        self.progress, self.mapper = progress, mapper
        self.given, self.alphas = False, []

    def scan(self, alphas, given: Optional[dict]) -> list:
        """The scanned points: ``given``'s (``{branch: BranchCurve}``; on its alphas unless ``alphas``
        is given) where they are at the locating precision, else every branch walked on ``alphas``
        at draft precision (a given scan at another precision, such as the draft curves of
        ``attnphase run``, is solved again, since the changes are located from the scan's own points)."""
        points = None
        if given is not None:
            self.given = True
            points = [p for curve in given.values() for p in curve.points]
            alphas = sorted({p.alpha for p in points}) if alphas is None else alphas
            if any(p.precision != self.precision for p in points):
                points = None
        self.alphas = sorted(float(a) for a in (DEFAULT_ALPHAS if alphas is None else alphas))
        return self._walk(self.alphas) if points is None else points

    def _walk(self, grid: list, known=()) -> list:
        """Every branch walked on ``grid``, each from its point in ``known`` nearest the grid: from the
        default start the three-token trivial branch is not reached above alpha = 3, from its
        neighbour it is."""
        def start(b):
            near = [p for p in known if p.branch == b and p.converged]
            return min(near, key=lambda p: abs(p.alpha - grid[0])).overlaps if near else None

        if self.mapper is None:
            progress = (lambda _: self.progress(1)) if self.progress else None
            return [p for b in self.names for p in walk_branch(self.spec, grid, b, SCAN_PRECISION, self.integrator,
                                                               progress=progress, start=start(b)).points]
        walked = self.mapper(functools.partial(_walk_points, self.spec, tuple(grid), SCAN_PRECISION, self.integrator),
                             [(b, start(b)) for b in self.names])
        if self.progress:
            self.progress(len(grid) * len(self.names))
        return [p for points in walked for p in points]

    def bracket(self, scan: list, eps_lin: float, extend: bool) -> _Changes:
        """The global branch at each scanned ``alpha``, the scan extended where it shows no change or
        ``alpha_l`` lies beyond it (with ``extend``, never a given scan)."""
        notes = []
        if extend and not self.given:
            scan, notes = _extend(self._walk, scan, self.alphas, eps_lin)
        scan = mark_global_minima([p for p in scan if p.branch in self.names])
        by = {b: BranchNearScan(b, self._solve_at, known={p.alpha: p.overlaps for p in scan
                                                          if p.branch == b and p.converged},
                                points={p.alpha: p for p in scan if p.branch == b and p.converged
                                        and p.precision == self.precision})
              for b in self.names}
        notes += [f"{p.branch} at alpha = {p.alpha:g} did not converge ({p.status}); the global minimum "
                  f"there is the lowest of the converged branches" for p in scan if not p.converged]
        globals_ = [(a, b) for a, b, _ in _global_branches(scan)]
        if not globals_ and not scan:
            # every solve fell onto a smaller branch: none of them exists here, a fact of the model
            raise ThresholdError(f"no branch of {', '.join(self.names)} was found on the scan")
        if not globals_:
            raise ThresholdLocationError(f"no branch of {', '.join(self.names)} converged on the scan")
        return _Changes(scan, by, globals_, notes)

    def refine(self, found: _Changes, baseline) -> dict:
        """Every change of the global branch located, and ``alpha_l``: the
        :class:`~numerics.thresholds.record.Thresholds` fields of this strategy."""
        by, globals_ = found.by, found.globals_
        transitions = []
        for (a0, b0), (a1, b1) in zip(globals_, globals_[1:]):
            if b0 != b1:
                log.info("global minimum %s at %g, %s at %g: locating the change", b0, a0, b1, a1)
                # a birth is looked for from the last scanned point below a0 without the child, even
                # where the child is found at a0 or its solve there did not converge: next to a continuous
                # birth the child's F differs from its parent's by O(d^4) in its new overlap d, below a
                # coarse rule's error, which may order them wrongly at a0 (at omega = 0 a rank-2 draft scan
                # put the mixed point 5e-8 above the positional one where fast puts it 2e-6 below)
                birth_from = max((a for a, _ in globals_ if a < a0 and a not in by[b1]),
                                 default=None if a0 in by[b1] else a0)
                transitions.append(self._locate(by[b0], by[b1], a0, a1, birth_from))
        scanned = {(p.alpha, p.branch): p for p in found.scan}
        alpha_l, alpha_l_error, status, details = self._alpha_l(by, globals_, transitions, baseline, scanned)
        return dict(alpha_l=alpha_l, alpha_l_error=alpha_l_error, alpha_l_status=status,
                    transitions=tuple(transitions), scan=tuple(found.scan), notes=tuple(found.notes),
                    details={"alpha_l": details} if details else {})

    def start(self, branch: BranchNearScan, alpha: float):
        """The start of the branch's known point nearest ``alpha`` (on the scan or solved); None if none."""
        return branch.known[branch.nearest(alpha)] if branch.known else None

    def _solve_at(self, branch: BranchNearScan, alpha: float) -> Optional[FixedPoint]:
        """The branch at ``alpha`` from its nearest point, or None where it is not found; raises
        :class:`NotConverged` where the solve does not converge."""
        from numerics.fixed_points.errors import BranchNotFound

        start = self.start(branch, alpha)
        try:
            try:
                fp = solve(self.spec, alpha, branch.name, self.precision, self.integrator, start=start)
            except BranchNotFound:
                if start is None:
                    raise
                fp = None
            if (fp is None or not fp.converged) and start is not None:
                # as in walk_branch: from the nearest point the iteration may fall to a smaller
                # branch or fail where the default start finds the branch
                fp = solve(self.spec, alpha, branch.name, self.precision, self.integrator)
        except BranchNotFound as exc:
            log.info("%s", exc)
            return None
        finally:
            if self.progress:
                self.progress(1)
        if not fp.converged:
            raise NotConverged(f"{branch.name} branch at alpha = {alpha:g}: {fp.status}", fp)
        return fp

    def solve_on(self, branch: BranchNearScan, precision, alpha: float) -> FixedPoint:
        """The branch at ``alpha`` on another QMC rule (a refinement), started from its nearest point;
        raises where it is not found or does not converge."""
        fp = solve(self.spec, alpha, branch.name, precision, "qmc", start=self.start(branch, alpha))
        if not fp.converged:
            raise NotConverged(f"{branch.name} branch at alpha = {alpha:g} on the {precision.name} rule: {fp.status}",
                               fp)
        return fp

    def aim(self, branch: BranchNearScan, alpha: float) -> float:
        """The error a threshold on ``branch``'s QMC solutions near ``alpha`` aims at
        (:attr:`~numerics.channel.qmc.precision.QMCPrecision.threshold_aim`); none (inf) on the line
        quadrature's."""
        return as_qmc_precision(self.precision).threshold_aim if is_noisy(_nearest(branch, alpha).integrator) \
            else math.inf

    def _locate(self, below: BranchNearScan, above: BranchNearScan, a0: float, a1: float,
                birth_from: Optional[float] = None) -> Transition:
        """The change of the global minimum from ``below`` (global at ``a0``) to ``above`` (at ``a1``).
        ``birth_from``: where the birth of ``above`` on ``below`` is looked for from (None: it is not)."""
        kind, lo, hi, extra = "crossing", a0, a1, {}
        if birth_from is not None:
            born = bifurcation(self, below, above, birth_from, a1)
            if born is not None:
                return born
        if a0 not in above:
            found, missing, note = above.end(a1, a0)
            extra.update(above_appears_between=[missing, found], end_note=note)
            pa, pb = above.solve(found), below.solve(found)
            extra.update(_gap_at_end(pa, pb))
            if abs(extra.get("train_loss_gap_at_end_in_errors", math.inf)) <= CONTINUOUS_GAP:
                grown = onset(self, above, missing, a0)
                if grown is not None:
                    return Transition(grown[0], grown[1], below.name, above.name, "bifurcation", (a0, a1),
                                      {**extra, **grown[2]})
            if pb is None or pa.train_loss < pb.train_loss:
                # already the lower one where it appears: the change is at its end
                return Transition(0.5 * (found + missing), 0.5 * abs(found - missing), below.name, above.name,
                                  "appearance", (a0, a1), extra)
            lo = found
        if a1 not in below:
            found, missing, note = below.end(a0, a1)
            extra.update(below_ends_between=[found, missing], end_note=note)
            pa, pb = above.solve(found), below.solve(found)
            extra.update(_gap_at_end(pa, pb))
            if pa is None or pb.train_loss < pa.train_loss:
                return Transition(0.5 * (found + missing), 0.5 * abs(found - missing), below.name, above.name,
                                  "disappearance", (a0, a1), extra)
            hi = found
        alpha, error, details = self._crossing(below, above, lo, hi)
        return Transition(alpha, error, below.name, above.name, kind, (a0, a1), {**extra, **details})

    def _crossing(self, lower: BranchNearScan, upper: BranchNearScan, lo: float, hi: float) -> tuple:
        """Where ``F_upper - F_lower`` changes sign in ``[lo, hi]`` (both branches exist there)."""
        def dF(a):
            pl, pu = lower.solve(a), upper.solve(a)
            if pl is None or pu is None:
                raise ThresholdLocationError(f"{(lower if pl is None else upper).name} branch lost at alpha = {a:g} "
                                             f"while locating its crossing in [{lo:g}, {hi:g}]")
            return pu.train_loss - pl.train_loss

        def noise(a):
            return math.hypot(stated_error(_nearest(lower, a), "train_loss"),
                              stated_error(_nearest(upper, a), "train_loss"))

        def aim():
            return max(self.aim(lower, lo), self.aim(upper, lo))

        root, error, details = root_within_noise(dF, lo, hi, noise, aim)
        if error > aim():
            def fine_value(fine):
                pl, pu = self.solve_on(lower, fine, root), self.solve_on(upper, fine, root)
                return (pu.train_loss - pl.train_loss,
                        math.hypot(stated_error(pl, "train_loss"), stated_error(pu, "train_loss")),
                        {"train_loss_difference": pu.train_loss - pl.train_loss})

            root, error = refined_root(self.precision, root, error, details["samples"], fine_value, details)
        return root, error, details

    def _test_error_root(self, branch: BranchNearScan, lo: float, hi: float, baseline) -> tuple:
        """``(root, error, details)`` of the branch's test error minus the linear baseline's in ``[lo, hi]``,
        refined on a finer rule where its error is above the mode's aim (:func:`refined_root`)."""
        eps_lin, eps_err = baseline.test_error, baseline.error

        def g(a):
            p = branch.solve(a)
            if p is None:
                raise ThresholdLocationError(f"{branch.name} branch lost at alpha = {a:g} while locating alpha_l")
            return p.test_error - eps_lin

        def noise(a):
            return math.hypot(stated_error(_nearest(branch, a), "test_error"), eps_err)

        root, error, details = root_within_noise(g, lo, hi, noise, lambda: self.aim(branch, lo))
        if error > self.aim(branch, root):
            def fine_value(fine):
                p = self.solve_on(branch, fine, root)
                return (p.test_error - eps_lin, math.hypot(stated_error(p, "test_error"), eps_err),
                        {"test_error": p.test_error})

            root, error = refined_root(self.precision, root, error, details["samples"], fine_value, details)
        return root, error, details

    def _alpha_l(self, branches: Dict[str, BranchNearScan], globals_: list, transitions: list, baseline,
                 scanned: Dict[tuple, FixedPoint]):
        """``(alpha_l, error, status, details)`` (docs/theory.md, section 3.5); ``scanned``: the scan's point
        of each ``(alpha, branch)``, whose test errors bracket the root; ``details``: the root finder's
        (none where ``alpha_l`` is a change's)."""
        eps_lin = baseline.test_error
        above = [(a, b, scanned[a, b].test_error > eps_lin) for a, b in globals_]
        if not above[0][2]:
            return math.nan, math.nan, (f"not bracketed: the global minimum ({above[0][1]}) is already below the "
                                        f"linear baseline at the smallest scanned alpha, {above[0][0]:g}"), {}
        for (a0, b0, up0), (a1, b1, up1) in zip(above, above[1:]):
            if not up0 or up1:
                continue
            if b0 == b1:
                return _with_status(self._test_error_root(branches[b0], a0, a1, baseline))
            t = next(t for t in transitions if t.bracket == (a0, a1))
            at = t.alpha
            p0, p1 = branches[b0].solve(at), branches[b1].solve(at)
            if p1 is not None and p1.test_error > eps_lin:
                return _with_status(self._test_error_root(branches[b1], at, a1, baseline))
            if p0 is not None and p0.test_error < eps_lin:
                return _with_status(self._test_error_root(branches[b0], a0, at, baseline))
            return at, t.error, "ok", {}   # the test error jumps across the baseline at the change
        return math.nan, math.nan, (f"not bracketed: the global minimum never falls below the linear baseline on "
                                    f"alpha in [{above[0][0]:g}, {above[-1][0]:g}]"), {}

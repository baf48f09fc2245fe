"""The deterministic root-finding strategy of the threshold locator (:mod:`numerics.thresholds.locate`),
for the paper's two competing branches solved by the line quadrature, whose records are smooth
functions of ``alpha`` without quadrature noise (docs/theory.md, sections 3.4-3.6).

* **Scan.** Both branches are followed on the scan at draft precision by continuation, each end of a
  branch bisected to a spinodal (:func:`numerics.branches.follow.follow_branch`). Where the training
  losses share no sign change, both branches are also solved at the last ``alpha`` where each
  spinodal bisection still found its branch, and the draft scan is continued beyond its end where
  the crossing lies beyond it (once per side, on the geometric grids of :mod:`.scan`), and once more
  where the global minimiser never beats the linear baseline on it.
* **alpha_c**: the training losses of the positional and semantic branches cross. At a fixed point
  ``F`` is stationary in all eight order parameters, so ``dF/dalpha = E[M]`` (envelope theorem);
  Newton's method on ``F_pos - F_sem`` therefore costs one solve per branch and step.
* **alpha_l**: the global minimiser's test error falls below the linear baseline's; found by the
  secant method on the branch that is global there (or equal to ``alpha_c`` if the drop happens at
  the jump).

Both root finders are safeguarded (:mod:`numerics.solver.root_finding`): every solved point narrows
the bracket by its sign, and only the current rule's own signs count. Each threshold is found with
the precision mode's coarse and fine channel rules, each rule starting at the roots of the rule
before, from its solutions there (a draft rule first where the scan is a draft one; ``high`` mode
finds them with the fast rules first); the fine value is reported and the error is the difference
of the two plus the last step, the root-finding tolerance and the propagated test-error quadrature
error. An ``alpha_c`` that cannot be bracketed raises ``ThresholdError``; an ``alpha_l`` that cannot
(e.g. beyond the scan at large ``omega``) is NaN with the reason in ``Thresholds.alpha_l_status``, and
``alpha_c`` is kept.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Optional

import numpy as np

from numerics.branches.follow import COLLAPSE, try_solve, defining_overlap, follow_branch, is_on_branch
from numerics.channel.integrators import method_for
from numerics.fixed_points.lines import moved_seed, solve_with_rule
from numerics.model.bound import bind
from numerics.model.saddle_point import free_energy, test_error
from numerics.overlaps import COMPETING_BRANCHES, Overlaps
from numerics.precision import PRECISIONS
from numerics.result import NO_ESTIMATE
from numerics.solver.iteration import Budget, SolverError
from numerics.solver.root_finding import NoRootInRange, UndefinedAt, safeguarded_newton, safeguarded_secant
from numerics.thresholds.record import BranchAbsent, CrossingBeyondScan, ThresholdError, Transition
from numerics.thresholds.scan import DEFAULT_ALPHAS, EXTEND_DOWN, EXTEND_UP, SCAN_PRECISION, BranchNearScan

log = logging.getLogger(__name__)


class OffBranch(UndefinedAt):
    """A threshold solve fell onto the trivial point: the branch does not exist at that alpha."""


def _interpolated_start(branch: BranchNearScan, alpha: float, rho: float) -> Overlaps:
    """The start at ``alpha`` linear in ``alpha`` through the branch's two nearest known points,
    or the nearest one's where that lies outside the domain (or the two share an ``alpha``)."""
    near = sorted(branch.known, key=lambda a: abs(a - alpha))[:2]
    if len(near) == 1 or near[0] == near[1]:
        return branch.known[near[0]]
    a0, a1 = near
    x0, x1 = Overlaps.of(branch.known[a0]).as_array(), Overlaps.of(branch.known[a1]).as_array()
    interpolated = Overlaps.from_array(x0 + (alpha - a0) / (a1 - a0) * (x1 - x0))
    return interpolated if interpolated.inside(rho) else branch.known[a0]


def _predicted_start(branch: BranchNearScan, seeds: Optional[BranchNearScan], alpha: float, near: float,
                     rho: float) -> Optional[Overlaps]:
    """``branch``'s solution at ``near`` moved to ``alpha`` along the branch's secant through two
    solutions near ``alpha``: the two nearest of this rule (``branch.points``) or of the rule before
    (``seeds``, whose slope differs from this rule's by the derivative of their quadrature
    difference), whichever pair lies nearer (the farther of its two points; the secant's error grows
    with the branch's curvature over that distance); None where neither has two, or the prediction
    lies outside the domain.

    The root finders' last steps are short (1e-5 in ``alpha`` at the fast reporting rule's last
    ``alpha_c`` step): from the solution at the last ``alpha`` the solve starts that step times the
    slope away, above the tolerance (1e-7), and needs a second evaluation; moved along the coarse
    rule's secant it starts within 5e-9 (semantic, ``omega = 0.3``) and converges on the first."""
    pairs = []
    for source in (branch, seeds):
        solved = sorted(source.points, key=lambda a: abs(a - alpha))[:2] if source is not None else []
        if len(solved) == 2:
            pairs.append((abs(solved[1] - alpha), source, solved))
    if not pairs:
        return None
    _, source, (a0, a1) = min(pairs, key=lambda p: p[0])
    x0, x1 = (Overlaps.of(source.points[a].overlaps).as_array() for a in (a0, a1))
    predicted = Overlaps.from_array(Overlaps.of(branch.points[near].overlaps).as_array()
                                    + (alpha - near) * (x1 - x0) / (a1 - a0))
    return predicted if predicted.inside(rho) else None


def _on_rule(model, name: str, rule, prec, seeds: Optional[BranchNearScan], start_alpha: float,
             start, start_history: tuple = ()) -> BranchNearScan:
    """``name``'s branch solved with one line quadrature ``rule`` (``prec``: its tolerances and
    budget), known at first at ``start_alpha`` from ``start``. A solve at ``alpha`` starts from
    ``seeds``' solution there (another rule's on the same branch), which also seeds its Anderson
    history; else from its own nearest solution, whose history (the Jacobian at a nearby ``alpha``)
    carries over, shifted like a rule change, from that solution moved along the branch's slope
    (:func:`_predicted_start`, :func:`~numerics.fixed_points.lines.moved_seed`); else from the
    interpolated known points, with ``start_history`` (the Anderson pairs of the solve that found
    ``start``, where that was this rule's). Raises
    :class:`SolverError` where it does not converge and :class:`OffBranch` where it falls onto the
    trivial point."""
    def solve_at(branch: BranchNearScan, alpha: float):
        seed = seeds.points.get(alpha) if seeds is not None else None
        nearby, history = False, ()
        if seed is None:
            own = [a for a in branch.known if a in branch.points]
            if own:
                near = branch.nearest(alpha, own)
                seed, nearby = branch.points[near], True
                predicted = _predicted_start(branch, seeds, alpha, near, model.spec.rho)
                if predicted is not None:
                    seed = moved_seed(seed, name, predicted)
        if seed is not None:
            start_at = seed.overlaps
        else:
            start_at, history = _interpolated_start(branch, alpha, model.spec.rho), start_history
        budget = Budget(prec.max_evaluations, prec.time_limit)
        sol = solve_with_rule(model, alpha, name, rule, start_at, prec.tol, seed=seed, history=history,
                              accept_tol=prec.residual_tol, budget=budget)
        if not sol.converged and nearby:
            # a seed from another alpha is solved as the seed of a rule change, which makes one
            # attempt only: near a fold its history misled the solve (omega = 0, semantic, from
            # 0.55 to 0.62). Solved again as a continuation step: from the interpolated start,
            # with the history's attempts and the retries without it
            log.info("%s branch at alpha = %g: the seeded solve stalled (residual %.1e); solving as a continuation "
                     "step", name, alpha, sol.residual8)
            sol = solve_with_rule(model, alpha, name, rule, _interpolated_start(branch, alpha, model.spec.rho),
                                  prec.tol, history=seed.history, accept_tol=prec.residual_tol, budget=budget)
        if not sol.converged or sol.residual8 > prec.residual_tol:
            raise SolverError(f"{name} branch did not converge at alpha = {alpha} "
                              f"(residual {sol.residual8:.2e}{'; ' + sol.stopped if sol.stopped else ''})")
        # converged onto the trivial branch: this branch is not here
        if defining_overlap(sol.overlaps, name, model.spec.sigma) < COLLAPSE:
            raise OffBranch(f"{name} branch collapsed onto the trivial one at alpha = {alpha}")
        return sol

    return BranchNearScan(name, solve_at, known={start_alpha: start})


def _newton_alpha_c(model, pos: BranchNearScan, sem: BranchNearScan, a0: float, xtol: float, lo: float,
                    hi: float, positive_at_hi: bool):
    """Newton's method on ``F_pos - F_sem`` inside ``[lo, hi]`` (the scan's range), where
    the difference is positive above the root iff ``positive_at_hi``; its derivative is
    ``E[M]_pos - E[M]_sem`` (docs/theory.md, section 3.7). The method is safeguarded
    (:func:`~numerics.solver.root_finding.safeguarded_newton`): the signs come from this rule's
    own solves only, as the draft scan's bracket is not valid for finer rules (at
    ``omega = 0.1`` the fast root lies 0.018 above the draft one, beyond the draft
    bracket), and near a branch's fold ``F`` curves strongly (a plain Newton step
    left the bracket at ``omega = 0`` and stopped at a clip bound)."""
    def energy(branch, alpha):
        sol = branch.solve(alpha)
        return free_energy(model, sol.overlaps, sol.side.hats, alpha, sol.side.mean_envelope), sol.side.mean_envelope

    def difference(alpha):
        Fp, dFp = energy(pos, alpha)
        Fs, dFs = energy(sem, alpha)
        return Fp - Fs, dFp - dFs

    try:
        return safeguarded_newton(difference, a0, xtol, lo, hi, positive_at_hi, name="alpha_c",
                                  one_sign="F_pos - F_sem keeps one sign")
    except NoRootInRange as exc:
        raise CrossingBeyondScan(str(exc)) from None


def _secant_alpha_l(model, test_n: int, branch: BranchNearScan, a0: float, a1: Optional[float], eps_lin: float,
                    xtol: float, slope_guess: Optional[float] = None, bracket: Optional[tuple] = None):
    """The safeguarded secant method (:func:`~numerics.solver.root_finding.safeguarded_secant`) on
    ``test_error - eps_lin`` along ``branch``; with ``slope_guess`` (another rule's
    slope at a nearby root) the second point is the Newton step from ``a0``, which lands
    within the rules' difference in slope of the root. ``bracket = (lo, hi)``: the scanned
    range. As for ``alpha_c``, only this rule's own signs count. Returns the
    :class:`~numerics.solver.root_finding.SecantRoot` (the root, its last step, the slope and the last
    solved point)."""
    def g(alpha):
        return test_error(model, branch.solve(alpha).overlaps, test_n) - eps_lin

    try:
        # test error above the baseline: the root is above, so g is positive below it
        return safeguarded_secant(g, a0, a1, xtol, slope_guess, bracket, positive_at_hi=False, name="alpha_l",
                                  one_sign="the test error stays on one side of the baseline")
    except NoRootInRange as exc:
        raise CrossingBeyondScan(str(exc)) from None


def _train_loss_differences(by: dict):
    """``F_pos - F_sem`` where both branches were solved, and the indices of its sign changes."""
    common = sorted(set(by["semantic"]) & set(by["positional"]))
    dF = [by["positional"][a].train_loss - by["semantic"][a].train_loss for a in common]
    sign_change = [i for i in range(len(common) - 1) if dF[i] < 0 <= dF[i + 1] or dF[i] > 0 >= dF[i + 1]]
    return common, dF, sign_change


def _add_spinodal_points(spec, model, curves: dict, by: dict, alpha_min: float, alpha_max: float) -> bool:
    """Solve both branches (the scan's precision) at the ``last_found`` alpha of every
    spinodal the scan met, from each branch's nearest scan point; add what is found to
    ``by``. Returns whether any alpha was added to both branches."""
    added = False
    for sp in curves["semantic"].spinodals + curves["positional"].spinodals:
        a = float(sp.get("last_found", float("nan")))
        if not (alpha_min <= a <= alpha_max) or all(a in by[b] for b in by):
            continue
        found = {}
        for b in COMPETING_BRANCHES:
            if a in by[b]:
                found[b] = by[b][a]
                continue
            if not by[b]:
                break
            near = by[b][min(by[b], key=lambda x: abs(x - a))]
            fp = try_solve(spec, a, b, near.precision, near.overlaps, model, near)
            if fp is None or not is_on_branch(fp, b):
                break
            found[b] = fp
        if len(found) == 2:
            for b, fp in found.items():
                by[b][a] = fp
            added = True
            log.info("thresholds: both branches added at alpha = %.6g (a spinodal's last point)", a)
    return added


def _raise_on_failure(curves: dict) -> None:
    """A branch that could not be solved anywhere is a failure of the solver, not an absence."""
    for c in curves.values():
        if not c.points and getattr(c, "failure", ""):
            raise SolverError(f"thresholds: {c.failure}")


def _extension_directions(curves: dict, by: dict, dF: list) -> list:
    """Where the crossing of the training losses can lie beyond the scan, nearest first.

    Below ``alpha_c`` the positional branch is the global minimiser (docs/theory.md, section
    3.4): where ``F_pos - F_sem > 0`` on the whole common range the crossing lies below it,
    where it is negative, above. A branch missing from the scan may exist beyond it: the
    semantic one above (it starts at its lower spinodal), the positional one on either side
    (at small omega it ends below the scan; it may also start above it). A branch whose
    spinodal on a side lies inside the scan ends there, so the common range does not
    extend on that side."""
    ends = {b: {s["side"] for s in curves[b].spinodals} for b in curves}
    if dF:
        direction = -1 if dF[0] > 0 else +1
        side = "lower" if direction < 0 else "upper"
        return [] if any(side in ends[b] for b in curves) else [direction]
    if not by["semantic"] and not by["positional"]:
        return [+1, -1]
    if not by["semantic"]:
        return [] if "upper" in ends["positional"] else [+1]
    if not by["positional"]:
        return [-1, +1]
    return []  # both exist on the scan but never at the same alpha: they do not coexist there


def _extend_scan(spec, curves: dict, by: dict, direction: int, scanned: tuple) -> tuple:
    """Follow both branches (draft) beyond the end of ``scanned`` in ``direction``, from
    their points at that end (or from their anchors, for a branch not yet found), and add
    the points and spinodals to ``curves`` and ``by``. Returns the new scanned range."""
    lo, hi = scanned
    end = hi if direction > 0 else lo
    grid = [end * f for f in (EXTEND_UP if direction > 0 else EXTEND_DOWN)]
    side = "upper" if direction > 0 else "lower"
    for b in COMPETING_BRANCHES:
        if any(s["side"] == side for s in curves[b].spinodals):
            continue  # it ends inside the scan on that side
        known = sorted(by[b])
        if known:
            edge = known[-1] if direction > 0 else known[0]
            anchor = (edge, by[b][edge].overlaps)
            ext = follow_branch(spec, [edge] + grid, b, SCAN_PRECISION, anchor=anchor, bisections=2,
                                 classify_ends=False)
        else:
            ext = follow_branch(spec, grid, b, SCAN_PRECISION, bisections=2, classify_ends=False)
        new = [p for p in ext.points if p.alpha not in by[b]]
        curves[b].points = sorted(curves[b].points + new, key=lambda p: p.alpha)
        curves[b].spinodals = curves[b].spinodals + [s for s in ext.spinodals if s["side"] == side or not known]
        if not curves[b].points and ext.failure:
            curves[b].failure = "; ".join(f for f in (curves[b].failure, ext.failure) if f)
        by[b].update({p.alpha: p for p in new})
    return (min(lo, min(grid)), max(hi, max(grid)))


def _no_crossing(curves: dict, by: dict, common: list, dF: list, scanned: tuple) -> ThresholdError:
    """Why there is no ``alpha_c`` on the scanned range: a branch absent (with what the scan
    found of it), the branches never coexisting (with their spinodals), or both existing
    with ``F_pos - F_sem`` of one sign (the crossing beyond the scan)."""
    where = f"alpha in [{scanned[0]:.4g}, {scanned[1]:.4g}]"

    def ends(b):
        sp = [f"{s['side']} spinodal at {s['alpha']:.4g} +- {s['alpha_error']:.1g}" for s in curves[b].spinodals]
        return ", ".join(sp) if sp else "no spinodal on the scan"

    for b in COMPETING_BRANCHES:
        if not by[b]:
            return BranchAbsent(f"alpha_c: the {b} branch was not found on {where} (from its anchor start and "
                                f"searched starts: every start fell to the trivial point or wandered far from any "
                                f"fixed point), so the two branches' "
                                f"training losses cannot cross there")
    if not common:
        return BranchAbsent(f"alpha_c: the branches do not coexist on {where}: the positional branch exists on "
                            f"[{min(by['positional']):.4g}, {max(by['positional']):.4g}] ({ends('positional')}), "
                            f"the semantic one on [{min(by['semantic']):.4g}, {max(by['semantic']):.4g}] "
                            f"({ends('semantic')})")
    sign = "positive" if dF[0] > 0 else "negative"
    beyond = "below" if dF[0] > 0 else "above"
    b_end = [b for b in COMPETING_BRANCHES if curves[b].spinodals
             and any(s["side"] == ("lower" if dF[0] > 0 else "upper") for s in curves[b].spinodals)]
    if b_end:
        return BranchAbsent(f"alpha_c: F_pos - F_sem is {sign} wherever both branches exist on {where} "
                            f"([{common[0]:.4g}, {common[-1]:.4g}]), and the {b_end[0]} branch ends {beyond} "
                            f"that ({ends(b_end[0])}): the training losses do not cross")
    return CrossingBeyondScan(f"alpha_c: F_pos - F_sem is {sign} on {where} where both branches exist "
                              f"({len(common)} points): the crossing lies {beyond} the scan")


@dataclasses.dataclass
class _Bracket:
    """What the scan brackets: the sign change ``i`` of ``dF`` (``F_pos - F_sem`` on the ``common``
    alphas) and each branch's start there; ``first``, the first scanned alpha where the global
    minimiser is below the baseline, and ``prev`` the ones before it (``alpha_l``'s bracket, with its
    status); the scanned range and the scan's points ``by`` branch and alpha."""

    curves: dict
    by: dict
    common: list
    dF: list
    i: int
    start_alpha: dict
    scanned: tuple
    first: Optional[float] = None
    prev: list = dataclasses.field(default_factory=list)
    alpha_l_status: str = "ok"

    @property
    def a_guess(self) -> float:
        a_lo, a_hi, i = self.common[self.i], self.common[self.i + 1], self.i
        return a_lo - self.dF[i] * (a_hi - a_lo) / (self.dF[i + 1] - self.dF[i])

    def global_point(self, a):
        """The scan's global minimiser at ``a``: the branch of lowest training loss there."""
        return min((self.by[b][a] for b in self.by if a in self.by[b]), key=lambda p: p.train_loss)

    def below_baseline(self, eps_lin: float) -> tuple:
        """Every scanned alpha, and those where the global minimiser's test error is below ``eps_lin``."""
        alphas = sorted(set(self.by["semantic"]) | set(self.by["positional"]))
        return alphas, [a for a in alphas if self.global_point(a).test_error < eps_lin]


class Deterministic:
    """The deterministic strategy (module docstring) for ``spec``'s competing pair at ``precision``;
    ``xtol``: the root search stops once a step is below it (default 1e-6, and 1e-7 in ``high``
    mode; Newton's method returns its last solved point, the secant method the end of its last step,
    not solved, each with that step, which is added to the reported error in full, as is ``xtol``);
    ``progress(message)``: told each scan and root. Branches other than the pair, or an integrator
    whose records carry noise, are a ``ValueError``."""

    def __init__(self, spec, precision: str, integrator: str = "auto", names=None,
                 progress: Optional[Callable[[str], None]] = None, mapper=None, xtol: Optional[float] = None):
        if set(names or COMPETING_BRANCHES) != set(COMPETING_BRANCHES) or \
                not method_for(spec, COMPETING_BRANCHES, integrator).deterministic:
            raise ValueError("the deterministic threshold strategy locates the crossing of the competing pair "
                             f"{', '.join(COMPETING_BRANCHES)} on the line quadrature")
        self.spec, self.precision, self.prec = spec, precision, PRECISIONS[precision]
        self.xtol = (1e-7 if precision == "high" else 1e-6) if xtol is None else xtol
        self.model = bind(spec)
        self.note = progress or (lambda msg: None)
        self.given = False
        self.range = (DEFAULT_ALPHAS[0], DEFAULT_ALPHAS[-1])

    def scan(self, alphas, given: Optional[dict]) -> dict:
        """``{branch: BranchCurve}``: ``given`` (of FixedPoints or :class:`~numerics.thresholds.scan.ScanPoint`,
        whose grid brackets the roots inside the default range), else both branches followed on
        ``alphas`` (evenly spaced between its ends) at draft precision."""
        if given is not None:
            self.given = True
            return given
        alphas = DEFAULT_ALPHAS if alphas is None else alphas
        self.range = (float(alphas[0]), float(alphas[-1]))
        grid = np.linspace(*self.range, len(alphas))
        return {b: follow_branch(self.spec, grid, b, SCAN_PRECISION, bisections=2, classify_ends=False)
                for b in COMPETING_BRANCHES}

    def bracket(self, curves: dict, eps_lin: float, extend: bool) -> _Bracket:
        """The first sign change of ``F_pos - F_sem`` on the scan, and ``alpha_l``'s bracket; the scan
        extended where either lies beyond it (with ``extend``, never a given scan)."""
        extend = extend and not self.given
        if not extend:
            _raise_on_failure(curves)
        # otherwise a branch the solver failed to find on the scan may still be found beyond it
        self.note("scanned both branches")
        by = {b: {p.alpha: p for p in curves[b].points} for b in curves}
        common, dF, sign_change = _train_loss_differences(by)
        scanned = self.range
        if not sign_change:
            # the crossing may lie between a branch's end and the first scan point where both
            # exist (at small omega the semantic branch starts ~0.05 above the scan's first
            # point and alpha_c is just above that): add the last alphas where the scan's
            # spinodal bisections still found each branch
            if _add_spinodal_points(self.spec, self.model, curves, by, *scanned):
                common, dF, sign_change = _train_loss_differences(by)
        extended = set()
        if not sign_change and extend:
            for direction in _extension_directions(curves, by, dF):
                scanned = _extend_scan(self.spec, curves, by, direction, scanned)
                extended.add(direction)
                self.note(f"extended the scan to alpha in [{scanned[0]:.4g}, {scanned[1]:.4g}]")
                common, dF, sign_change = _train_loss_differences(by)
                if not sign_change and _add_spinodal_points(self.spec, self.model, curves, by, *scanned):
                    common, dF, sign_change = _train_loss_differences(by)
                if sign_change:
                    break
        if not sign_change:
            _raise_on_failure(curves)
            raise _no_crossing(curves, by, common, dF, scanned)
        i = sign_change[0]
        # each branch starts from the bracket end where its defining overlap is larger, i.e.
        # away from its own end: at omega = 0 the semantic branch at a_lo = 0.5 is at its
        # spinodal, and a solve at 0.55 from there fell onto the trivial branch
        start_alpha = {b: max((common[i], common[i + 1]),
                              key=lambda a: defining_overlap(by[b][a].overlaps, b, self.spec.sigma)) for b in by}
        found = _Bracket(curves, by, common, dF, i, start_alpha, scanned)
        self._bracket_alpha_l(found, eps_lin, extend, extended)
        return found

    def _bracket_alpha_l(self, found: _Bracket, eps_lin: float, extend: bool, extended: set) -> None:
        """Where the global minimiser's test error first drops below the baseline on the scan, the
        scan extended once more where that lies beyond it (with ``extend``, unless it was already in
        that direction, ``extended``); alpha_l may be off the scan while alpha_c is on it: alpha_c is
        then still found, and alpha_l is NaN with the reason."""
        all_alphas, below = found.below_baseline(eps_lin)
        direction = +1 if not below else (-1 if below[0] == all_alphas[0] else 0)
        if direction and extend and direction not in extended:
            found.scanned = _extend_scan(self.spec, found.curves, found.by, direction, found.scanned)
            self.note(f"extended the scan to alpha in [{found.scanned[0]:.4g}, {found.scanned[1]:.4g}] for alpha_l")
            _raise_on_failure(found.curves)
            all_alphas, below = found.below_baseline(eps_lin)
        alpha_min, alpha_max = found.scanned
        if not below:
            found.alpha_l_status = (f"not bracketed: the global minimiser never beats the linear baseline on alpha "
                                    f"in [{alpha_min:.4g}, {alpha_max:.4g}]")
            return
        found.first = below[0]
        found.prev = [a for a in all_alphas if a < found.first]
        if not found.prev:
            found.alpha_l_status = (f"not bracketed: already below the linear baseline at the smallest scanned "
                                    f"alpha, {alpha_min:.4g}")

    def _rules(self, curves: dict) -> list:
        """``(tag, rule, precision)`` of each link of the chain: each rule starts at the roots of the
        rule before, from its solutions there, so it needs a step or two of Newton's or the secant
        method, not a search: the search from the scan's bracket is done with the draft rule (high
        mode: then the fast rules)."""
        prec = self.prec
        if prec.rule == prec.check_rule:  # draft: one rule, so no error estimate can be made
            return [("fine", prec.check_rule, prec)]
        rules = [("coarse", prec.rule, prec), ("fine", prec.check_rule, prec)]
        if self.precision == "high":
            fast = PRECISIONS["fast"]
            rules = [("fast coarse", fast.rule, fast), ("fast fine", fast.check_rule, fast)] + rules
        if {p.precision for c in curves.values() for p in c.points} <= {"draft"}:
            draft = PRECISIONS["draft"]
            rules = [("draft", draft.rule, draft)] + rules
        return rules

    def refine(self, found: _Bracket, baseline) -> dict:
        """``alpha_c`` and ``alpha_l`` on each rule of the chain, and their errors: the
        :class:`~numerics.thresholds.record.Thresholds` fields of this strategy."""
        results, seeds, previous, status = {}, {}, None, found.alpha_l_status
        starts = {b: Overlaps.of(found.by[b][found.start_alpha[b]].overlaps) for b in found.by}
        lo, hi = found.common[0], found.common[-1]
        for tag, rule, rule_prec in self._rules(found.curves):
            # each rule starts where the one before converged, from its solutions (seeded); the first
            # from the scan's points, with their Anderson pairs where the scan solved them with this rule
            # (the draft link's first solves 2e-3 from a scan point: 14 and 9 evaluations without them)
            solvers = {b: _on_rule(self.model, b, rule, rule_prec, seeds.get(b), found.start_alpha[b], starts[b],
                                   () if seeds else self._scan_history(found.by[b][found.start_alpha[b]], rule))
                       for b in COMPETING_BRANCHES}
            guess = previous["alpha_c"] if previous else found.a_guess
            ac, ac_step = _newton_alpha_c(self.model, solvers["positional"], solvers["semantic"], guess, self.xtol,
                                          lo, hi, found.dF[found.i + 1] > 0)
            self.note(f"alpha_c ({tag} rule) = {ac:.10f}")
            results[tag] = dict(alpha_c=ac, alpha_c_step=ac_step, alpha_l=float("nan"), alpha_l_step=float("nan"),
                                alpha_l_solved=float("nan"), at_jump=False, branch_l="", slope=float("nan"))
            previous, seeds = results[tag], solvers
            if status == "ok":
                status = self._alpha_l_on_rule(tag, solvers, rule_prec.test_n, results, found, baseline.test_error)
        return self._fields(found, results, seeds, status, baseline)

    @staticmethod
    def _scan_history(point, rule) -> tuple:
        """The Anderson pairs of a scan point's solve where they are ``rule``'s: a point's pairs are its
        coarse rule's (a scan read back from a phase diagram's rows has none)."""
        pairs = point.continuation_pairs
        return tuple(pairs) if pairs and point.precision in PRECISIONS and PRECISIONS[point.precision].rule == rule \
            else ()

    def _alpha_l_on_rule(self, tag: str, solvers: dict, test_n: int, results: dict, found: _Bracket,
                         eps_lin: float) -> str:
        """``alpha_l`` on ``tag``'s rule, into ``results[tag]``, on the branch that is global just
        after the drop: ``alpha_c`` where the drop happens across the first-order jump and that
        branch is already below the baseline at ``alpha_c``, otherwise a root on that branch.
        Returns the status (not bracketed, with the rule's reason, where the root is not found)."""
        ac, ac_step = results[tag]["alpha_c"], results[tag]["alpha_c_step"]
        first, prev = found.first, found.prev
        branch_l = found.global_point(first).branch
        s = solvers[branch_l]
        jump = found.global_point(prev[-1]).branch != branch_l and prev[-1] < ac < first
        at_jump = jump and test_error(self.model, s.solve(ac).overlaps, test_n) < eps_lin
        slope = float("nan")
        if at_jump:
            al, al_step, al_solved = ac, ac_step, ac
        else:
            slope_guess = None
            before = [r for r in results.values() if r is not results[tag]]
            last = before[-1] if before else None
            if last and not last["at_jump"] and np.isfinite(last["slope"]) and last["slope"] != 0:
                # from the last point the previous rule solved: this rule's solve there is seeded by it
                a0, a1, slope_guess = last["alpha_l_solved"], None, last["slope"]
            else:
                a0, a1 = (max(prev[-1], ac) if jump else prev[-1]), first
            try:
                al, al_step, slope, al_solved = _secant_alpha_l(self.model, test_n, s, a0, a1, eps_lin, self.xtol,
                                                                slope_guess,
                                                                ((ac if jump else found.scanned[0]), found.scanned[1]))
            except ThresholdError as exc:
                return f"not bracketed with the {tag} rule: {exc}"
        self.note(f"alpha_l ({tag} rule) = {al:.10f}")
        results[tag].update(alpha_l=al, alpha_l_step=al_step, alpha_l_solved=al_solved, at_jump=at_jump,
                            branch_l=branch_l, slope=slope)
        return "ok"

    def _fields(self, found: _Bracket, results: dict, solvers: dict, status: str, baseline) -> dict:
        """The record's fields from the chain's ``results``: the fine rule's roots, with the error of
        the module docstring; the propagated test-error quadrature error for ``alpha_l`` is
        ``delta eps / |d eps / d alpha|``, with the slope from the secant iterations and ``delta eps``
        from two test-error rules."""
        prec, xtol = self.prec, self.xtol
        fine = results["fine"]
        single = prec.rule == prec.check_rule
        al_err_quad = 0.0
        if status != "ok":
            for r in results.values():
                r.update(alpha_l=float("nan"), alpha_l_step=float("nan"))
            log.warning("alpha_l %s; alpha_c is still reported", status)
        elif not fine["at_jump"] and not single:
            mid = solvers[fine["branch_l"]].known[fine["alpha_l_solved"]]
            d_eps = abs(test_error(self.model, mid, prec.test_check_n) - test_error(self.model, mid, prec.test_n))
            al_err_quad = (d_eps + baseline.error) / abs(fine["slope"])
        if single:
            ac_err = al_err = float("nan")
        else:
            ac_err = abs(results["fine"]["alpha_c"] - results["coarse"]["alpha_c"]) + fine["alpha_c_step"] + xtol
            al_err = (abs(results["fine"]["alpha_l"] - results["coarse"]["alpha_l"]) + fine["alpha_l_step"] + xtol
                      + al_err_quad)
        i, common = found.i, found.common
        below, above = ("positional", "semantic") if found.dF[i + 1] > 0 else ("semantic", "positional")
        crossing = Transition(fine["alpha_c"], ac_err, below, above, "crossing", (common[i], common[i + 1]), {})
        return dict(alpha_l=fine["alpha_l"], alpha_l_error=al_err, alpha_l_status=status, transitions=(crossing,),
                    spinodals=found.curves["semantic"].spinodals + found.curves["positional"].spinodals,
                    details={**results, "alpha_l_quadrature_error": al_err_quad,
                             "bracket": [common[i], common[i + 1]], "xtol": xtol, "scanned": list(found.scanned)},
                    error_reasons={"alpha_c_error": NO_ESTIMATE, "alpha_l_error": NO_ESTIMATE} if single else {})

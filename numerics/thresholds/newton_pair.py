"""The thresholds of the paper's two competing branches by Newton's method on the line quadrature
(docs/theory.md, sections 3.4-3.6), into the one record :class:`~numerics.thresholds.record.Thresholds`.

* ``alpha_c``: the training losses of the positional and semantic branches
  cross. At a fixed point ``F`` is stationary in all eight order parameters, so
  ``dF/dalpha = E[M]`` (envelope theorem); Newton's method on
  ``F_pos - F_sem`` therefore costs one solve per branch and step.
* ``alpha_l``: the global minimiser's test error falls below the linear
  baseline's; found by the secant method on the branch that is global there
  (or equal to ``alpha_c`` if the drop happens at the jump).

Each threshold is found twice, with the precision mode's coarse and fine
channel rules; the fine value is reported and the error is the difference of
the two plus the root-finding tolerance and the propagated test-error
quadrature error. (``high`` mode finds them with the fast rules first and
starts its own two from there.) An ``alpha_c`` that cannot be bracketed raises
``ThresholdError``; an ``alpha_l`` that cannot (e.g. beyond the scan at large
``omega``) is NaN with the reason in ``Thresholds.alpha_l_status``, and ``alpha_c``
is kept.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional

import numpy as np

from derivations import ModelSpec

from numerics.baseline import linear_baseline
from numerics.branches.follow import COLLAPSE, BranchCurve, try_solve, defining_overlap, follow_branch, is_on_branch
from tidyio import is_true, number
from numerics.fixed_points.lines import solve_with_rule
from numerics.precision import PRECISIONS, Precision
from numerics.solver.root_finding import NoRootInRange, UndefinedAt, safeguarded_newton, safeguarded_secant
from numerics.solver.iteration import Budget, SolverError
from numerics.model.bound import bind
from numerics.overlaps import COMPETING_BRANCHES, Overlaps
from numerics.result import NO_ESTIMATE
from numerics.thresholds.record import BranchAbsent, CrossingBeyondScan, ThresholdError, Thresholds, Transition
from numerics.model.saddle_point import free_energy, test_error

log = logging.getLogger(__name__)


class OffBranch(UndefinedAt):
    """A threshold solve fell onto the trivial point: the branch does not exist at that alpha."""


@dataclasses.dataclass(frozen=True)
class ScanPoint:
    """A solved point of a branch as the thresholds' bracketing needs it (a row of a
    phase diagram's ``theory.csv``, or a :class:`~numerics.fixed_points.lines.FixedPoint`)."""

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


class _BranchSolver:
    """Warm-started solves of one branch with one rule, remembering every solution.

    ``seeds``: another rule's solver on the same branch; where it has solved the
    same ``alpha``, its solution starts this one and seeds its Anderson history."""

    def __init__(self, model, branch, rule, prec: Precision, seeds: Optional["_BranchSolver"] = None):
        self.model, self.branch, self.rule, self.tol, self.test_n = model, branch, rule, prec.tol, prec.test_n
        self.residual_tol = prec.residual_tol
        self.max_evaluations, self.time_limit = prec.max_evaluations, prec.time_limit
        self.seeds = seeds
        self.known = {}  # alpha -> (overlaps, RuleSolution or None)

    def start_for(self, alpha, fallback: Overlaps) -> Overlaps:
        if not self.known:
            return fallback
        near = sorted(self.known, key=lambda a: abs(a - alpha))[:2]
        if len(near) == 1 or near[0] == near[1]:
            return self.known[near[0]][0]
        a0, a1 = near
        x0, x1 = self.known[a0][0].as_array(), self.known[a1][0].as_array()
        x = x0 + (alpha - a0) / (a1 - a0) * (x1 - x0)
        inside = x[0] > 0 and x[2] > 0 and x[3]**2 < self.model.spec.rho * x[0]
        return Overlaps.from_array(x) if inside else self.known[a0][0]

    def solve(self, alpha, fallback: Overlaps):
        seed = self.seeds.known.get(alpha, (None, None))[1] if self.seeds is not None else None
        nearby = False
        if seed is None:
            # the nearest own solution: started from it, its Anderson history (the
            # Jacobian at a nearby alpha) carries over, shifted like a rule change
            own = [a for a, (_, sol) in self.known.items() if sol is not None]
            if own:
                seed, nearby = self.known[min(own, key=lambda a: abs(a - alpha))][1], True
        start = seed.overlaps if seed is not None else self.start_for(alpha, fallback)
        budget = Budget(self.max_evaluations, self.time_limit)
        sol = solve_with_rule(self.model, alpha, self.branch, self.rule, start, self.tol, seed=seed,
                              accept_tol=self.residual_tol, budget=budget)
        if not sol.converged and nearby:
            # a seed from another alpha is solved as the seed of a rule change, which makes one
            # attempt only: near a fold its history misled the solve (omega = 0, semantic, from
            # 0.55 to 0.62). Solved again as a continuation step: from the interpolated start,
            # with the history's attempts and the retries without it
            log.info("%s branch at alpha = %g: the seeded solve stalled (residual %.1e); solving as a continuation "
                     "step", self.branch, alpha, sol.residual8)
            sol = solve_with_rule(self.model, alpha, self.branch, self.rule, self.start_for(alpha, fallback),
                                  self.tol, history=seed.history, accept_tol=self.residual_tol, budget=budget)
        if not sol.converged or sol.residual8 > self.residual_tol:
            raise SolverError(f"{self.branch} branch did not converge at alpha = {alpha} "
                              f"(residual {sol.residual8:.2e}{'; ' + sol.stopped if sol.stopped else ''})")
        # converged onto the trivial branch: this branch is not here
        if defining_overlap(sol.overlaps, self.branch, self.model.spec.sigma) < COLLAPSE:
            raise OffBranch(f"{self.branch} branch collapsed onto the trivial one at alpha = {alpha}")
        self.known[alpha] = (sol.overlaps, sol)
        F = free_energy(self.model, sol.overlaps, sol.side.hats, alpha, sol.side.mean_envelope)
        return sol, F, sol.side.mean_envelope


def _newton_alpha_c(pos: _BranchSolver, sem: _BranchSolver, a0: float, starts, xtol: float, lo: float, hi: float,
                    positive_at_hi: bool):
    """Newton's method on ``F_pos - F_sem`` inside ``[lo, hi]`` (the scan's range), where
    the difference is positive above the root iff ``positive_at_hi``; its derivative is
    ``E[M]_pos - E[M]_sem`` (docs/theory.md, section 3.7). The method is safeguarded
    (:func:`~numerics.solver.root_finding.safeguarded_newton`): the signs come from this rule's
    own solves only, as the draft scan's bracket is not valid for finer rules (at
    ``omega = 0.1`` the fast root lies 0.018 above the draft one, beyond the draft
    bracket), and near a branch's fold ``F`` curves strongly (a plain Newton step
    left the bracket at ``omega = 0`` and stopped at a clip bound)."""
    def difference(alpha):
        _, Fp, dFp = pos.solve(alpha, starts["positional"])
        _, Fs, dFs = sem.solve(alpha, starts["semantic"])
        return Fp - Fs, dFp - dFs

    try:
        return safeguarded_newton(difference, a0, xtol, lo, hi, positive_at_hi, name="alpha_c",
                                  one_sign="F_pos - F_sem keeps one sign")
    except NoRootInRange as exc:
        raise CrossingBeyondScan(str(exc)) from None


def _secant_alpha_l(solver: _BranchSolver, a0: float, a1: Optional[float], eps_lin: float, start, xtol: float,
                    slope_guess: Optional[float] = None, bracket: Optional[tuple] = None):
    """The safeguarded secant method (:func:`~numerics.solver.root_finding.safeguarded_secant`) on
    ``test_error - eps_lin`` along ``solver``'s branch; with ``slope_guess`` (another rule's
    slope at a nearby root) the second point is the Newton step from ``a0``, which lands
    within the rules' difference in slope of the root. ``bracket = (lo, hi)``: the scanned
    range. As for ``alpha_c``, only this rule's own signs count. Returns ``(root, last
    step, slope)``."""
    def g(alpha):
        sol, _, _ = solver.solve(alpha, start)
        return test_error(solver.model, sol.overlaps, solver.test_n) - eps_lin

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


#: where the scan is extended when the crossing lies beyond it: the scan's end times these
#: factors (a geometric grid: continuation steps of 20-25%, which the draft rule follows)
EXTEND_UP = (1.2, 1.44, 1.73, 2.07, 2.49, 3.0)
EXTEND_DOWN = (0.8, 0.64, 0.51, 0.41, 0.33, 0.26, 0.2)


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
            ext = follow_branch(spec, [edge] + grid, b, "draft", anchor=anchor, bisections=2)
        else:
            ext = follow_branch(spec, grid, b, "draft", bisections=2)
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


def newton_thresholds(spec: ModelSpec, precision: str = "fast", alpha_min: float = 0.5, alpha_max: float = 2.5,
               n_scan: int = 9, xtol: Optional[float] = None, progress: Optional[Callable[[str], None]] = None,
               scan_curves: Optional[dict] = None, extend: bool = True) -> Thresholds:
    """``alpha_c`` and ``alpha_l`` with error estimates, the linear baseline and the spinodals.

    ``scan_curves`` ({branch: BranchCurve}, e.g. the draft curves of ``attnphase run``, or a
    phase diagram's fast branch rows through :func:`scan_curves_from_rows`) replaces the
    bracketing scan, so the same branches are not solved twice. Curves solved with the
    precision's own rules need no draft search: their bracket is already that
    precision's, so the root-finding starts with the coarse rule.

    ``xtol``: the root search stops once a step is below it (default 1e-6, and 1e-7 in
    ``high`` mode). Newton's and the secant method's convergence is superlinear, so the
    remaining error is far below that last step, which is nevertheless added to the
    reported error in full, as is ``xtol``.

    ``high`` mode first finds both roots with the fast rules, then refines them with
    the high rules from there.

    ``extend``: where the crossing of the training losses, or the drop below the
    baseline, lies beyond ``[alpha_min, alpha_max]`` (the positional branch ends below the
    scan at small omega; the crossings rise above it at large omega), the draft scan is
    continued beyond that end, once on each side, to three times ``alpha_max`` above and a
    fifth of ``alpha_min`` below (``EXTEND_UP``, ``EXTEND_DOWN``); ``details["scanned"]``
    is the range finally scanned. Not with ``scan_curves``, whose grid is the caller's.

    No threshold for a reason of the model raises a :class:`ThresholdError`
    (:class:`BranchAbsent`, :class:`CrossingBeyondScan`) and a failure of the solver a
    :class:`~numerics.solver.iteration.SolverError`; an ``alpha_l`` beyond the scanned range is NaN
    with the reason in ``alpha_l_status`` (``alpha_c`` is kept)."""
    t0 = time.perf_counter()
    prec = PRECISIONS[precision]
    if xtol is None:
        xtol = 1e-7 if precision == "high" else 1e-6
    model = bind(spec)
    baseline = linear_baseline(spec)
    eps_lin = baseline.test_error
    note = progress or (lambda msg: None)

    # 1. bracket on a draft scan of both branches, extended where the crossing lies beyond it
    if scan_curves is None:
        scan = np.linspace(alpha_min, alpha_max, n_scan)
        curves = {b: follow_branch(spec, scan, b, "draft", bisections=2) for b in COMPETING_BRANCHES}
    else:
        curves = scan_curves
    if scan_curves is not None or not extend:
        _raise_on_failure(curves)
    # otherwise a branch the solver failed to find on the scan may still be found beyond it
    note("scanned both branches")
    by = {b: {p.alpha: p for p in curves[b].points} for b in curves}
    common, dF, sign_change = _train_loss_differences(by)
    scanned = (alpha_min, alpha_max)
    if not sign_change:
        # the crossing may lie between a branch's end and the first scan point where both
        # exist (at small omega the semantic branch starts ~0.05 above the scan's first
        # point and alpha_c is just above that): add the last alphas where the scan's
        # spinodal bisections still found each branch
        if _add_spinodal_points(spec, model, curves, by, alpha_min, alpha_max):
            common, dF, sign_change = _train_loss_differences(by)
    extended = set()
    if not sign_change and scan_curves is None and extend:
        for direction in _extension_directions(curves, by, dF):
            scanned = _extend_scan(spec, curves, by, direction, scanned)
            extended.add(direction)
            note(f"extended the scan to alpha in [{scanned[0]:.4g}, {scanned[1]:.4g}]")
            common, dF, sign_change = _train_loss_differences(by)
            if not sign_change and _add_spinodal_points(spec, model, curves, by, *scanned):
                common, dF, sign_change = _train_loss_differences(by)
            if sign_change:
                break
    if not sign_change:
        _raise_on_failure(curves)
        raise _no_crossing(curves, by, common, dF, scanned)
    alpha_min, alpha_max = scanned
    i = sign_change[0]
    a_lo, a_hi = common[i], common[i + 1]
    a_guess = a_lo - dF[i] * (a_hi - a_lo) / (dF[i + 1] - dF[i])
    # each branch starts from the bracket end where its defining overlap is larger, i.e.
    # away from its own end: at omega = 0 the semantic branch at a_lo = 0.5 is at its
    # spinodal, and a solve at 0.55 from there fell onto the trivial branch
    start_alpha = {b: max((a_lo, a_hi), key=lambda a: defining_overlap(by[b][a].overlaps, b, spec.sigma))
                   for b in by}
    starts = {b: Overlaps.of(by[b][start_alpha[b]].overlaps) for b in by}

    # global minimiser's test error on the scan: where does it first drop below the baseline?
    def global_point(a):
        cands = [by[b][a] for b in by if a in by[b]]
        return min(cands, key=lambda p: p.train_loss)

    def below_baseline():
        alphas = sorted(set(by["semantic"]) | set(by["positional"]))
        return alphas, [a for a in alphas if global_point(a).test_error < eps_lin]

    all_alphas, below = below_baseline()
    # the drop below the baseline may lie beyond the scan (above it at large omega)
    direction = +1 if not below else (-1 if below[0] == all_alphas[0] else 0)
    if direction and scan_curves is None and extend and direction not in extended:
        scanned = _extend_scan(spec, curves, by, direction, scanned)
        note(f"extended the scan to alpha in [{scanned[0]:.4g}, {scanned[1]:.4g}] for alpha_l")
        _raise_on_failure(curves)
        all_alphas, below = below_baseline()
        alpha_min, alpha_max = scanned
    # alpha_l may be off the scan while alpha_c is on it: alpha_c is then still found,
    # and alpha_l is NaN with the reason in ``alpha_l_status``
    alpha_l_status = "ok"
    if not below:
        alpha_l_status = (f"not bracketed: the global minimiser never beats the linear baseline on alpha in "
                          f"[{alpha_min:.4g}, {alpha_max:.4g}]")
        first, prev = None, []
    else:
        first = below[0]
        prev = [a for a in all_alphas if a < first]
        if not prev:
            alpha_l_status = (f"not bracketed: already below the linear baseline at the smallest scanned alpha, "
                              f"{alpha_min:.4g}")
    results = {}
    single = prec.rule == prec.check_rule  # draft: one rule, so no error estimate can be made
    rules = [("fine", prec.check_rule, prec)] if single else [("coarse", prec.rule, prec), ("fine", prec.check_rule, prec)]
    # each rule starts at the roots of the rule before, from its solutions there, so it
    # needs a step or two of Newton's or the secant method, not a search: the search
    # from the scan's bracket is done with the draft rule (high mode: then the fast rules)
    if precision == "high":
        fast = PRECISIONS["fast"]
        rules = [("fast coarse", fast.rule, fast), ("fast fine", fast.check_rule, fast)] + rules
    scan_precision = {p.precision for c in curves.values() for p in c.points}
    if not single and scan_precision <= {"draft"}:
        draft = PRECISIONS["draft"]
        rules = [("draft", draft.rule, draft)] + rules
    seeds = {}
    previous = None
    for tag, rule, rule_prec in rules:
        # each rule starts where the one before converged, from its solutions (seeded)
        solvers = {b: _BranchSolver(model, b, rule, rule_prec, seeds.get(b))
                   for b in COMPETING_BRANCHES}
        for b in solvers:
            solvers[b].known[start_alpha[b]] = (starts[b], None)
        guess = previous["alpha_c"] if previous else a_guess
        ac, ac_step = _newton_alpha_c(solvers["positional"], solvers["semantic"], guess, starts, xtol,
                                      common[0], common[-1], dF[i + 1] > 0)
        note(f"alpha_c ({tag} rule) = {ac:.10f}")
        results[tag] = dict(alpha_c=ac, alpha_c_step=ac_step, alpha_l=float("nan"), alpha_l_step=float("nan"),
                            at_jump=False, branch_l="", slope=float("nan"))
        previous = results[tag]
        seeds = solvers
        if alpha_l_status != "ok":
            continue
        # alpha_l: on the branch that is global just after the drop. If the drop happens
        # across the first-order jump and that branch is already below the baseline at
        # alpha_c, alpha_l = alpha_c; otherwise it is a root on that branch.
        branch_l = global_point(first).branch
        s = solvers[branch_l]
        jump = global_point(prev[-1]).branch != branch_l and prev[-1] < ac < first
        at_jump = False
        if jump:
            sol, _, _ = s.solve(ac, by[branch_l][first].overlaps)
            at_jump = test_error(model, sol.overlaps, rule_prec.test_n) < eps_lin
        slope = float("nan")
        if at_jump:
            al, al_step = ac, ac_step
        else:
            slope_guess = None
            before = [r for r in results.values() if r is not results[tag]]
            last = before[-1] if before else None
            if last and not last["at_jump"] and np.isfinite(last["slope"]) and last["slope"] != 0:
                a0, a1, slope_guess = last["alpha_l"], None, last["slope"]
            else:
                a0, a1 = (max(prev[-1], ac) if jump else prev[-1]), first
            try:
                al, al_step, slope = _secant_alpha_l(s, a0, a1, eps_lin, by[branch_l][first].overlaps, xtol,
                                                     slope_guess, ((ac if jump else alpha_min), alpha_max))
            except ThresholdError as exc:
                alpha_l_status = f"not bracketed with the {tag} rule: {exc}"
                continue
        note(f"alpha_l ({tag} rule) = {al:.10f}")
        results[tag].update(alpha_l=al, alpha_l_step=al_step, at_jump=at_jump, branch_l=branch_l, slope=slope)

    # propagated test-error quadrature error for alpha_l: delta eps / |d eps / d alpha|,
    # with the slope from the secant iterations and delta eps from two test-error rules
    fine = results["fine"]
    al_err_quad = 0.0
    if alpha_l_status != "ok":
        for r in results.values():
            r.update(alpha_l=float("nan"), alpha_l_step=float("nan"))
        log.warning("alpha_l %s; alpha_c is still reported", alpha_l_status)
    elif not fine["at_jump"] and not single:
        mid = seeds[fine["branch_l"]].known[fine["alpha_l"]][0]
        d_eps = abs(test_error(model, mid, prec.test_check_n) - test_error(model, mid, prec.test_n))
        al_err_quad = (d_eps + baseline.error) / abs(fine["slope"])
    if single:
        ac_err = al_err = float("nan")
    else:
        ac_err = abs(results["fine"]["alpha_c"] - results["coarse"]["alpha_c"]) + fine["alpha_c_step"] + xtol
        al_err = (abs(results["fine"]["alpha_l"] - results["coarse"]["alpha_l"]) + fine["alpha_l_step"] + xtol
                  + al_err_quad)
    spinodals = curves["semantic"].spinodals + curves["positional"].spinodals
    below, above = ("positional", "semantic") if dF[i + 1] > 0 else ("semantic", "positional")
    crossing = Transition(fine["alpha_c"], ac_err, below, above, "crossing", (a_lo, a_hi), {})
    return Thresholds(
        alpha_c=fine["alpha_c"], alpha_c_error=ac_err, alpha_l=fine["alpha_l"], alpha_l_error=al_err,
        linear_test_error=eps_lin, linear_test_error_error=baseline.error, spinodals=spinodals,
        precision=precision, model=spec, wall_time=time.perf_counter() - t0,
        details={**results, "alpha_l_quadrature_error": al_err_quad, "bracket": [a_lo, a_hi], "xtol": xtol,
                 "scanned": list(scanned)},
        alpha_l_status=alpha_l_status, transitions=(crossing,),
        error_reasons={"alpha_c_error": NO_ESTIMATE, "alpha_l_error": NO_ESTIMATE} if single else {},
    )

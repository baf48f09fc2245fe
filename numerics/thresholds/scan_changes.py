"""The thresholds of any model located on a scan of its branches (docs/theory.md, sections 3.4, 3.5
and 4.10), into the one record :class:`~numerics.thresholds.record.Thresholds`.

The branches are followed on a scan of ``alpha`` (:func:`numerics.branches.follow.walk_branch`);
at each scanned ``alpha`` the global minimum is the converged branch of lowest training loss ``F``.
Wherever it changes between two scanned points, the change is located:

* ``crossing``: both branches exist across the interval and ``F`` crosses; the root of
  ``F_above - F_below`` by Brent's method (scipy), each value two fixed-point solves started from
  the nearest solved point of the branch;
* ``appearance`` / ``disappearance``: the branch global above the change does not exist at the lower
  end (or the one global below does not exist at the upper end). The end of that branch is found by
  bisection on whether its solve finds it; if it is already the lower one where it appears (or still
  the lower one where it ends), the change is at that end, to the bisection's width; otherwise the
  crossing lies between the end and the scan point and is found as above;
* ``bifurcation``: the branch grows continuously out of the global one, born where the multiplier
  of its new direction on the parent crosses 1 (:func:`_bifurcation`); looked for first, from the
  last scanned point without the branch (also where the branch is found at the lower end or its
  solve there did not converge: next to a birth the two ``F`` differ by less than a coarse rule's
  error, which can order them wrongly). Where that does not apply but the branch appears with the global one's ``F``
  (within :data:`CONTINUOUS_GAP` stated errors), its defining overlap is below the noise next to the
  onset, so the onset is extrapolated from ``d^2`` linear in ``alpha`` (:func:`pitchfork_onset`).

``alpha_c`` is the first change (in the paper's model the one change, positional to semantic); every
change is reported. A scan solved here (not given) is extended where it shows no change, one point
at a time on the geometric grids of :mod:`~numerics.thresholds.newton_pair`: first below it, unless the
global branch at its lower end is the trivial one (nothing is born below that), then above it, and
above it too while the global minimum's test error stays above the linear baseline's (``alpha_l``
beyond it); each extension is noted in the record.
``alpha_l`` is where the global minimum's test error falls below the linear baseline's: the root on
the branch global there, or the ``alpha_c`` of a change where the test error jumps across it.

Error bars. The stated errors of the QMC fixed points (docs/numerics.md, section 11) enter through
the slope: ``delta alpha = sqrt(e_1^2 + e_2^2) / |d(F_1 - F_2)/d alpha|`` (for ``alpha_l`` the test
error's errors and slope), plus the root finder's tolerance, which is set below that noise; an end of
a branch is known to half the bisection's last interval. A root on QMC solutions with an error above
its mode's aim is refined once on four times the points (:func:`_refined_root`).
"""
from __future__ import annotations

import functools
import logging
import math
import time
from typing import Callable, Dict, Optional, Sequence


from derivations import ModelSpec, packing

from numerics.branches.follow import walk_branch
from numerics.fixed_points.solve import branches as model_branches
from numerics.result import FixedPoint, mark_global_minima
from numerics.thresholds.newton_pair import EXTEND_DOWN, EXTEND_UP
from numerics.channel.integrators import is_noisy
from numerics.channel.qmc.precision import as_qmc_precision, refined
from numerics.solver.iteration import SolverError
from numerics.thresholds.scanned_branch import ScannedBranch
from numerics.thresholds.noisy_roots import pitchfork_onset, root_within_noise, shifted_root
from numerics.thresholds.record import NotConverged, ThresholdError, ThresholdLocationError, Thresholds, Transition

log = logging.getLogger(__name__)

#: a branch that appears within this many stated errors of the global one's F bifurcates from it
CONTINUOUS_GAP = 3.0
#: an overlap this many scramblings' spreads above zero is resolved (fitted at an onset)
RESOLVED = 3.0
def _error(p: FixedPoint, field: str) -> float:
    """The stated error of ``field`` at ``p``; NaN where the precision mode states none (the line
    quadrature's draft mode), which makes the threshold's error NaN too."""
    e = p.error.get(field)
    return float(e) if e is not None else math.nan


def _nearest(branch: ScannedBranch, alpha: float) -> FixedPoint:
    return branch.points[min(branch.points, key=lambda a: abs(a - alpha))]


def _crossing(lower: ScannedBranch, upper: ScannedBranch, lo: float, hi: float) -> tuple:
    """Where ``F_upper - F_lower`` changes sign in ``[lo, hi]`` (both branches exist there)."""
    def dF(a):
        pl, pu = lower.solve(a), upper.solve(a)
        if pl is None or pu is None:
            raise ThresholdLocationError(f"{(lower if pl is None else upper).name} branch lost at alpha = {a:g} "
                                        f"while locating its crossing in [{lo:g}, {hi:g}]")
        return pu.train_loss - pl.train_loss

    def noise(a):
        return math.hypot(_error(_nearest(lower, a), "train_loss"), _error(_nearest(upper, a), "train_loss"))

    def aim():
        return max(_aim(lower, lo), _aim(upper, lo))

    root, error, details = root_within_noise(dF, lo, hi, noise, aim)
    if error > aim():
        def fine_value(fine):
            pl, pu = lower.solve_on(fine, root), upper.solve_on(fine, root)
            return (pu.train_loss - pl.train_loss, math.hypot(_error(pl, "train_loss"), _error(pu, "train_loss")),
                    {"train_loss_difference": pu.train_loss - pl.train_loss})

        root, error = _refined_root(lower.precision, root, error, details["samples"], fine_value, details)
    return root, error, details


def _scramblings(precision: str) -> float:
    """``sqrt(R)``: one scrambling's spread in stated errors (1 for the line quadrature's modes)."""
    from numerics.channel.qmc.precision import QMC_PRECISIONS

    mode = QMC_PRECISIONS.get(precision)
    return math.sqrt(mode.rule.scrambles) if mode is not None else 1.0


def _onset(branch: ScannedBranch, missing: float, lowest: float) -> Optional[tuple]:
    """``(alpha, error, details)`` of a continuous onset of ``branch`` (docs/theory.md, section 4.10)
    from its defining overlap (:meth:`numerics.fixed_points.subspaces.BranchSubspace.defining_overlap`) at the three
    solved points nearest the onset (:func:`pitchfork_onset`). None when fewer than three points, or a
    root outside ``[lowest, first point found]`` by more than its error (a solve near the onset may
    miss a branch whose overlap is below its noise, so the root may lie below ``missing``, and even
    below the scanned point where the branch was not found)."""
    from numerics.fixed_points.subspaces import branch_subspace

    sub = branch_subspace(branch.name, branch.spec.shape)
    sigma = branch.spec.sigma
    key = "theta_singular_values_1" if branch.name in ("semantic", "mixed") else "m_singular_values_1"
    scale = sigma**2 if key.startswith("theta") else 1.0

    def overlap(a):
        return sub.defining_overlap(branch.points[a].overlaps, sigma), _error(branch.points[a], key) / scale

    # the overlap is a singular value, so each scrambling's own fixed point has it >= 0 and their mean is
    # biased up by about one scrambling's spread (sqrt(R) stated errors), which the stated error does not
    # carry: draft points next to an onset put it too low. Only points above RESOLVED such spreads are fitted.
    spread = _scramblings(branch.precision)
    alphas = sorted(a for a in branch.points
                    if a > missing and overlap(a)[0] > RESOLVED * spread * overlap(a)[1])[:3]
    if len(alphas) < 3:
        return None
    d, d_err = zip(*(overlap(a) for a in alphas))
    root, error, three_point = pitchfork_onset(alphas, d, d_err)
    if not lowest - error <= root <= alphas[0]:
        return None
    return root, error, {"onset_fit_alphas": list(alphas), "defining_overlap": list(d),
                         "onset_three_point": three_point}


def _gap_at_end(pa, pb) -> dict:
    """``F_above - F_below`` at the last point where both exist next to a branch's end, in stated
    errors: near zero where one branch bifurcates from the other (a continuous change)."""
    if pa is None or pb is None:
        return {}
    gap = pa.train_loss - pb.train_loss
    spread = math.hypot(_error(pa, "train_loss"), _error(pb, "train_loss"))
    return {"train_loss_gap_at_end": gap, "train_loss_gap_at_end_in_errors": gap / spread if spread > 0 else math.nan}


def _bifurcation(parent: ScannedBranch, child: ScannedBranch, a0: float, a1: float) -> Optional[Transition]:
    """The birth of ``child`` out of ``parent`` in ``[a0, a1]``, located on the parent where the
    multiplier of the child's new direction crosses 1 (:mod:`numerics.branches.bifurcation`): the root in alpha
    (Brent, as :func:`root_within_noise`), its error the multiplier's stated error over its slope plus the
    tolerance. Where the multiplier is above 1 at ``a0`` already, the bracket is looked for a few
    steps below it. None where this does not apply: the child's subspace does not contain the
    parent's, the parent is not a QMC solution at both ends, the multiplier does not cross 1 there, or
    the child is found below the crossing (it then does not grow out of the parent there)."""
    from numerics.branches.bifurcation import embedding, growth_multiplier
    from numerics.fixed_points.subspaces import branch_subspace

    shape = packing.as_shape(parent.spec)
    if embedding(branch_subspace(parent.name, shape), branch_subspace(child.name, shape)) is None:
        return None
    def on_parent(a) -> bool:
        p = parent.solve(a)
        return p is not None and is_noisy(p.integrator)

    if not on_parent(a0):
        return None
    seen = {}

    def multiplier(a):
        if a not in seen:
            p = parent.solve(a)
            if p is None:
                raise ThresholdLocationError(f"{parent.name} branch lost at alpha = {a:g} while locating the "
                                            f"{child.name} branch's birth on it")
            seen[a] = growth_multiplier(parent.spec, p, child.name, parent.precision, mapper=parent.mapper)
            log.info("%s at alpha = %g: multiplier of the %s direction %.5f +- %.1e", parent.name, a, child.name,
                     seen[a].value, seen[a].error)
        return seen[a]

    g0 = multiplier(a0).value - 1.0
    if g0 >= 0:
        # the multiplier is above 1 already at a0 (the child's draft solve there, falling to the
        # parent, hid a birth just below): the bracket is looked for below a0 on the parent, on the
        # first steps of the downward extension grid (the multiplier at a1 is not needed then)
        g1 = g0
        for f in EXTEND_DOWN[:3]:
            try:
                if parent.solve(a0 * f) is None:
                    break
            except NotConverged:
                break
            a1, g1, a0, g0 = a0, g0, a0 * f, multiplier(a0 * f).value - 1.0
            if g0 < 0:
                break
    else:
        if not on_parent(a1):
            return None
        g1 = multiplier(a1).value - 1.0
    if not g0 < 0 < g1:
        log.info("the %s direction's multiplier on %s does not cross 1 on [%g, %g] (%.4f, %.4f)", child.name,
                 parent.name, a0, a1, g0 + 1, g1 + 1)
        return None
    root, error, details = root_within_noise(lambda a: multiplier(a).value - 1.0, a0, a1,
                                             lambda a: seen[min(seen, key=lambda x: abs(x - a))].error,
                                             lambda: _aim(parent, a0))
    # a child found below the crossing, beyond its error bar, coexists with the parent there (a fold,
    # not a birth); nearer, a draft solve can find a child whose overlap is its noise (at 1.3 errors
    # below a draft root it did). Where that lies below a0, the scan's a0 is the probe.
    probe = root - 3.0 * error
    # next to a birth the child's map barely contracts (its multiplier is near 1) and each scrambling
    # sees its own birth, a spread of the root's error apart: an unconverged probe is no evidence
    # either way, and its cost is capped (ScannedBranch.reached)
    found, probe_note = child.reached(probe) if probe > a0 else (False, "")
    if found:
        log.info("%s found at alpha = %g, below the crossing %g: not a continuous birth", child.name, probe, root)
        return None
    details.update(method="multiplier on the parent", multipliers=[m.to_dict() for _, m in sorted(seen.items())],
                   child_absent_at=max(probe, a0), probe_note=probe_note)
    if _above_aim(parent, root, error):
        root, error = _refined_birth(parent, child.name, root, error, seen, details)
    return Transition(root, error, parent.name, child.name, "bifurcation", (a0, a1), details)


def _aim(branch: ScannedBranch, alpha: float) -> float:
    """The error a threshold on ``branch``'s QMC solutions near ``alpha`` aims at
    (:attr:`~numerics.channel.qmc.precision.QMCPrecision.threshold_aim`); none (inf) on the line
    quadrature's."""
    return as_qmc_precision(branch.precision).threshold_aim if is_noisy(_nearest(branch, alpha).integrator) else math.inf


def _above_aim(branch: ScannedBranch, alpha: float, error: float) -> bool:
    """Whether a root located on ``branch``'s solutions has an error above the aim (:func:`_aim`)."""
    return error > _aim(branch, alpha)


def _refined_root(precision, root: float, error: float, samples: Sequence, fine_value: Callable,
                  details: dict) -> tuple:
    """A root located at ``precision`` with an error above that mode's aim, refined once:
    ``fine_value(rule)`` gives the located function, its stated error and a record for ``details`` at
    the root on :func:`~numerics.channel.qmc.precision.refined`'s rule (four times the points per
    scrambling, for the fixed point and the test error), and the root becomes :func:`shifted_root`'s:
    the shape of ``samples`` (``(alpha, value, error)`` on the located rule) through that value.
    Where the refining solve fails the located root stands, and ``details["refinement"]`` says why."""
    from numerics.fixed_points.errors import BranchNotFound

    fine = refined(precision)
    located = {"root": root, "error": error}
    try:
        value, value_error, record = fine_value(fine)
        # ThresholdLocationError (a SolverError) where the moved curve has no real root
        new_root, new_error = shifted_root(*zip(*samples), at=root, value=value, value_error=value_error)
    except (BranchNotFound, SolverError) as exc:
        log.info("the refinement of the root at %g on the %s rule failed: %s", root, fine.name, exc)
        details["refinement"] = {"rule": fine.name, "located": located, "status": f"not refined: {exc}"}
        return root, error
    log.info("refined on the %s rule: %g +- %.1e (located %g +- %.1e)", fine.name, new_root, new_error, root, error)
    details["refinement"] = {"rule": fine.name, "located": located, "value": value, "value_error": value_error,
                             **record, "status": "refined"}
    return new_root, new_error


def _refined_birth(parent: ScannedBranch, child: str, root: float, error: float, seen: dict, details: dict) -> tuple:
    """A birth refined (:func:`_refined_root`) on the multiplier of ``child``'s direction on the parent."""
    from numerics.branches.bifurcation import growth_multiplier

    def fine_value(fine):
        m = growth_multiplier(parent.spec, parent.solve_on(fine, root), child, fine, mapper=parent.mapper)
        log.info("%s at alpha = %g on the %s rule: multiplier of the %s direction %.5f +- %.1e", parent.name, root,
                 fine.name, child, m.value, m.error)
        return m.value - 1.0, m.error, {"multiplier": m.to_dict()}

    samples = [(a, g.value - 1.0, g.error) for a, g in sorted(seen.items())]
    return _refined_root(parent.precision, root, error, samples, fine_value, details)


def _locate(below: ScannedBranch, above: ScannedBranch, a0: float, a1: float, birth_from: Optional[float] = None) -> Transition:
    """The change of the global minimum from ``below`` (global at ``a0``) to ``above`` (at ``a1``).
    ``birth_from``: where the birth of ``above`` on ``below`` is looked for from (None: it is not)."""
    kind, lo, hi, extra = "crossing", a0, a1, {}
    if birth_from is not None:
        born = _bifurcation(below, above, birth_from, a1)
        if born is not None:
            return born
    if a0 not in above:
        found, missing, note = above.end(a1, a0)
        extra.update(above_appears_between=[missing, found], end_note=note)
        pa, pb = above.solve(found), below.solve(found)
        extra.update(_gap_at_end(pa, pb))
        if abs(extra.get("train_loss_gap_at_end_in_errors", math.inf)) <= CONTINUOUS_GAP:
            onset = _onset(above, missing, a0)
            if onset is not None:
                return Transition(onset[0], onset[1], below.name, above.name, "bifurcation", (a0, a1),
                                  {**extra, **onset[2]})
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
    alpha, error, details = _crossing(below, above, lo, hi)
    return Transition(alpha, error, below.name, above.name, kind, (a0, a1), {**extra, **details})


def _test_error_root(branch: ScannedBranch, lo: float, hi: float, eps_lin: float, eps_err: float) -> tuple:
    """``(root, error, details)`` of the branch's test error minus the linear baseline's in ``[lo, hi]``,
    refined on a finer rule where its error is above the mode's aim (:func:`_refined_root`)."""
    def g(a):
        p = branch.solve(a)
        if p is None:
            raise ThresholdLocationError(f"{branch.name} branch lost at alpha = {a:g} while locating alpha_l")
        return p.test_error - eps_lin

    root, error, details = root_within_noise(g, lo, hi, lambda a: math.hypot(_error(_nearest(branch, a), "test_error"),
                                                                              eps_err), lambda: _aim(branch, lo))
    if _above_aim(branch, root, error):
        def fine_value(fine):
            p = branch.solve_on(fine, root)
            return p.test_error - eps_lin, math.hypot(_error(p, "test_error"), eps_err), {"test_error": p.test_error}

        root, error = _refined_root(branch.precision, root, error, details["samples"], fine_value, details)
    return root, error, details


def _with_status(located: tuple) -> tuple:
    root, error, details = located
    return root, error, "ok", details


def _alpha_l(branches: Dict[str, ScannedBranch], globals_: list, transitions: list, eps_lin: float, eps_err: float,
             scanned: Dict[tuple, FixedPoint]):
    """``(alpha_l, error, status, details)`` (docs/theory.md, section 3.5); ``scanned``: the scan's point
    of each ``(alpha, branch)``, whose test errors bracket the root; ``details``: the root finder's
    (none where ``alpha_l`` is a change's)."""
    above = [(a, b, scanned[a, b].test_error > eps_lin) for a, b in globals_]
    if not above[0][2]:
        return math.nan, math.nan, (f"not bracketed: the global minimum ({above[0][1]}) is already below the linear "
                                    f"baseline at the smallest scanned alpha, {above[0][0]:g}"), {}
    for (a0, b0, up0), (a1, b1, up1) in zip(above, above[1:]):
        if not up0 or up1:
            continue
        if b0 == b1:
            return _with_status(_test_error_root(branches[b0], a0, a1, eps_lin, eps_err))
        t = next(t for t in transitions if t.bracket == (a0, a1))
        at = t.alpha
        p0, p1 = branches[b0].solve(at), branches[b1].solve(at)
        if p1 is not None and p1.test_error > eps_lin:
            return _with_status(_test_error_root(branches[b1], at, a1, eps_lin, eps_err))
        if p0 is not None and p0.test_error < eps_lin:
            return _with_status(_test_error_root(branches[b0], a0, at, eps_lin, eps_err))
        return at, t.error, "ok", {}   # the test error jumps across the baseline at the change
    return math.nan, math.nan, (f"not bracketed: the global minimum never falls below the linear baseline on "
                                f"alpha in [{above[0][0]:g}, {above[-1][0]:g}]"), {}


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


def _walk_points(spec: ModelSpec, grid: tuple, precision: str, integrator: str, task: tuple) -> list:
    """The points of one branch walked on ``grid`` (``task``: the branch and its start), for a mapper."""
    branch, start = task
    return walk_branch(spec, grid, branch, precision, integrator, start=start).points


def scan_thresholds(spec: ModelSpec, alphas: Sequence[float], precision: str = "draft",
                       integrator: str = "auto", branches: Optional[Sequence[str]] = None,
                       scan: Optional[Sequence[FixedPoint]] = None,
                       progress: Optional[Callable[[int], None]] = None,
                       scan_precision: str = "draft", extend: bool = False,
                       mapper: Optional[Callable] = None) -> Thresholds:
    """Every change of the global branch on ``alphas`` and ``alpha_l``, with error bars (module
    docstring). ``scan``: the branches already solved on ``alphas`` (e.g. by ``attnphase curve``),
    else they are followed here at ``scan_precision``, and with ``extend`` the scan is extended
    where the change or ``alpha_l`` lies beyond it; the changes and ``alpha_l`` are located at
    ``precision``, from the scan's points (reused where they are at ``precision``).
    ``progress(n)``: told the solves done. ``mapper(function, items)``: the results of
    ``function`` on each item, in order, computed as it chooses (a Dask client's ``map``, on
    workers); the branches of a scan are walked through it, each walk independent of the others
    (by default one after another here, with ``progress`` told each alpha), and the scramblings of
    a birth's multipliers (:func:`~numerics.branches.bifurcation.growth_multiplier`)."""
    from numerics.baseline import linear_baseline

    t0 = time.perf_counter()
    names = tuple(branches or model_branches(spec))
    alphas = sorted(float(a) for a in alphas)
    baseline = linear_baseline(spec)
    eps_lin, eps_err = baseline.test_error, baseline.error
    extension_notes = []
    if scan is None:
        def walk(grid, known=()):
            # each branch from its known point nearest the grid: from the default start the
            # three-token trivial branch is not reached above alpha = 3, from its neighbour it is
            def start(b):
                near = [p for p in known if p.branch == b and p.converged]
                return min(near, key=lambda p: abs(p.alpha - grid[0])).overlaps if near else None

            if mapper is None:
                return [p for b in names for p in walk_branch(spec, grid, b, scan_precision, integrator,
                                                              progress=(lambda _: progress(1)) if progress else None,
                                                              start=start(b)).points]
            walked = mapper(functools.partial(_walk_points, spec, tuple(grid), scan_precision, integrator),
                            [(b, start(b)) for b in names])
            if progress:
                progress(len(grid) * len(names))
            return [p for points in walked for p in points]

        scan = walk(alphas)
        if extend:
            scan, extension_notes = _extend(walk, scan, alphas, eps_lin)
    scan = mark_global_minima([p for p in scan if p.branch in names])
    by = {b: ScannedBranch(spec, b, precision, integrator, [p for p in scan if p.branch == b], progress, mapper)
          for b in names}
    notes = extension_notes + [f"{p.branch} at alpha = {p.alpha:g} did not converge ({p.status}); the global minimum "
                               f"there is the lowest of the converged branches" for p in scan if not p.converged]
    globals_ = [(a, b) for a, b, _ in _global_branches(scan)]
    if not globals_ and not scan:
        # every solve fell onto a smaller branch: none of them exists here, a fact of the model
        raise ThresholdError(f"no branch of {', '.join(names)} was found on the scan")
    if not globals_:
        raise ThresholdLocationError(f"no branch of {', '.join(names)} converged on the scan")
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
            transitions.append(_locate(by[b0], by[b1], a0, a1, birth_from))
    scanned = {(p.alpha, p.branch): p for p in scan}
    alpha_l, alpha_l_error, status, alpha_l_details = _alpha_l(by, globals_, transitions, eps_lin, eps_err, scanned)
    first = transitions[0] if transitions else None
    return Thresholds(alpha_c=first.alpha if first else math.nan, alpha_c_error=first.error if first else math.nan,
                      alpha_l=alpha_l, alpha_l_error=alpha_l_error, alpha_l_status=status,
                      linear_test_error=eps_lin, linear_test_error_error=eps_err, precision=precision, model=spec,
                      wall_time=time.perf_counter() - t0, transitions=tuple(transitions), scan=tuple(scan),
                      notes=tuple(notes), details={"alpha_l": alpha_l_details} if alpha_l_details else {})

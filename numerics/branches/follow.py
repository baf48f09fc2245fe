"""Branches followed by continuation in ``alpha`` (docs/theory.md, sections 3.1 and 3.6;
docs/numerics.md, section 5): :func:`follow_branch`, for every integrator.

How the end of a branch is found is the integrator's (:class:`~numerics.channel.integrators.Method`):
where its records are deterministic in ``alpha`` (the line quadrature), the branch is followed in both
directions from an anchor and each end bisected to a spinodal; where they carry quadrature noise
(QMC), the grid is walked (:func:`walk_branch`) and the branch ends where its solve first falls onto
a smaller one on the grid.

A branch is *lost* when the solver stops converging on it or when it collapses
onto the trivial branch (``theta -> 0`` for the semantic branch, ``m -> 0`` for
the positional one). The spinodal, where the branch stops existing, is then
bracketed between the last alpha where it was found and the first where it was
lost, and narrowed by bisection.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, List, Optional, Sequence

import numpy as np

from derivations import ModelSpec

from numerics.channel.integrators import method_for
from numerics.fixed_points.root_fallback import WANDERED as WANDERED_RESIDUAL
from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.solve import solve
from numerics.fixed_points.lines import (COLLAPSE, DEFAULT_START, defining_overlap, map_jacobian_eigenvalues,
                          solve_branch, start_for_model)
from numerics.precision import PRECISIONS
from numerics.result import FixedPoint, failed_point
from numerics.model.bound import bind
from numerics.overlaps import COMPETING_BRANCHES, Overlaps, value_with_error
from numerics.solver.iteration import OUTSIDE_DOMAIN, SolverError
from numerics.fixed_points.start_search import search_starts

log = logging.getLogger(__name__)

# where each branch is first looked for, and from which start (near the fixed points at alpha = 2 of docs/theory.md, section 3.8)
ANCHORS = {
    "semantic": (2.0, Overlaps(q=0.115, m=0.0, V=12.7, theta=0.158)),
    "positional": (2.0, Overlaps(q=0.050, m=0.259, V=14.0, theta=0.0)),
    "trivial": (1.0, DEFAULT_START["trivial"]),
}
# a solve is abandoned once an iterate is below 10 x COLLAPSE: it is collapsing (the
# branch's own value near its spinodals is 0.2 for theta/sigma^2, and m -> 0 only within
# ~1e-6 in alpha of the positional spinodal, far inside the bisection bracket)
LOST_BELOW_FACTOR = 10.0


@dataclasses.dataclass(repr=False)
class BranchCurve:
    """A branch followed along an ``alpha`` grid: its points, its spinodals, a ``note`` on
    where it was not found, and ``failure``: why the solver failed where no point was
    found at all because of a solver failure (``""`` otherwise; not found is not a failure)."""

    branch: str
    points: List[FixedPoint]
    spinodals: List[dict]
    note: str = ""
    failure: str = ""

    def __str__(self) -> str:
        """A summary a person reads: how many points on which alphas, how many converged, the
        spinodals, the note and the failure (``.points`` holds each point, ``to_frame()`` the table)."""
        alphas = sorted(p.alpha for p in self.points)
        where = f" on alpha in [{alphas[0]:g}, {alphas[-1]:g}]" if alphas else ""
        done = sum(p.converged for p in self.points)
        lines = [f"{self.branch} branch: {len(self.points)} points{where}, {done} converged"]
        lines += [f"spinodal: {s.get('side', '')} end at alpha = "
                  f"{value_with_error(s['alpha'], s.get('alpha_error', float('nan')))}" for s in self.spinodals]
        lines += [f"note: {self.note}"] * bool(self.note) + [f"failure: {self.failure}"] * bool(self.failure)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<BranchCurve {str(self).splitlines()[0]}>"

    def to_frame(self):
        """One row per point (:meth:`~numerics.result.FixedPoint.to_row`), in alpha order; the
        spinodals, note and failure in the frame's ``attrs``."""
        from tidyio import frame

        df = frame([p.to_row() for p in sorted(self.points, key=lambda p: p.alpha)], ("alpha", "branch"))
        df.attrs.update(branch=self.branch, spinodals=[dict(s) for s in self.spinodals], note=self.note,
                        failure=self.failure)
        return df


def is_on_branch(fp: FixedPoint, branch: str) -> bool:
    if not fp.converged:
        return False
    if branch in COMPETING_BRANCHES:
        return defining_overlap(fp.overlaps, branch, fp.model.sigma) > COLLAPSE
    return True


#: outcomes of :func:`attempt_solve`
FOUND, ABSENT, FAILED, WANDERED = "found", "absent", "failed", "wandered"


def attempt_solve(spec, alpha, branch, precision, start, model, near: Optional[FixedPoint] = None,
                  newton: bool = False) -> tuple:
    """A solve that may legitimately end off the branch where it does not exist:
    ``(point or None, outcome, why)``, the outcome ``FOUND``, ``ABSENT`` (the solve fell
    onto the trivial point), ``WANDERED`` (no convergence, and the residual never came
    below :data:`~numerics.fixed_points.root_fallback.WANDERED`: no fixed point was near) or ``FAILED``
    (the solver: an error, or no convergence near a point). Its non-convergence is logged at
    info level only: the caller tries again, and reports what its tries end in.
    ``near``: a solution at a nearby alpha whose solver history seeds this solve;
    ``newton``: a stalled solve finishes with Newton's method (``solve_branch``)."""
    try:
        fp = solve_branch(spec, alpha, branch, precision, start=start, model=model,
                          lost_below=LOST_BELOW_FACTOR * COLLAPSE,
                          history=near.continuation_pairs if near is not None else (), newton=newton, warn=False)
    except BranchNotFound as exc:
        log.info("alpha=%g %s: %s", alpha, branch, exc)
        return None, ABSENT, str(exc)
    except (SolverError,) + OUTSIDE_DOMAIN as exc:
        log.info("alpha=%g %s: solver failed (%s)", alpha, branch, exc)
        return None, FAILED, f"solver failed ({exc})"
    if is_on_branch(fp, branch):
        return fp, FOUND, ""
    far = not fp.converged and not fp.residual < WANDERED_RESIDUAL
    return fp, WANDERED if far else FAILED, fp.diagnostics.get("reason") or fp.status


def try_solve(spec, alpha, branch, precision, start, model, near: Optional[FixedPoint] = None
               ) -> Optional[FixedPoint]:
    """:func:`attempt_solve`'s point, or ``None`` where it raised. A continuation step:
    where the Anderson iteration stalls or collapses onto the trivial point, a root
    finder on ``x - F(x)`` looks again from the prediction and the best iterate (the
    iteration cannot converge on a fixed point that repels it, and its failure there is
    not the end of the branch). Where that fails, the solve is made again from ``near``'s
    point itself: near the positional branch's end at ``omega = 0.3``, ``alpha = 0.8``,
    ``lam = 0.00305``, the prediction lies in the trivial point's basin and the last point
    found does not (docs/studies/positional_small_lam.md). Where both fail, the branch has
    ended (folded, or merged with the trivial point: :func:`classify_end`) or is not found."""
    fp, outcome, _ = attempt_solve(spec, alpha, branch, precision, start, model, near, newton=True)
    if outcome != FOUND and near is not None and start is not None \
            and not np.array_equal(Overlaps.of(start).as_array(), Overlaps.of(near.overlaps).as_array()):
        fp = attempt_solve(spec, alpha, branch, precision, near.overlaps, model, near, newton=True)[0]
    return fp


def step_solve(spec, alpha, branch, precision, start, model, near: FixedPoint, bisections: int
               ) -> Optional[FixedPoint]:
    """A continuation step of :func:`follow_branch` to ``alpha``: :func:`try_solve` without its
    second attempt from ``near``'s point where a failed step is bisected (``bisections`` > 0). That
    attempt is then the bisection's first one, from the same point at half the step; the step's
    ``alpha`` is tried again, from the prediction and from the nearest point, where every shorter
    step found the branch (:func:`_bisect_spinodal`). So where the branch has ended, as at every
    spinodal, the farthest of the failed solves is made once, not twice: a lost solve is the
    most expensive one, 40-60 evaluations until every attempt has collapsed."""
    if bisections <= 0:
        return try_solve(spec, alpha, branch, precision, start, model, near)
    return attempt_solve(spec, alpha, branch, precision, start, model, near, newton=True)[0]


def extrapolate(points: List[FixedPoint], alpha: float) -> Overlaps:
    """Extrapolation of the last points: quadratic through the last three where its
    correction to the secant (linear, last two) is less than half the secant's own step
    (largest relative component of each), the secant otherwise (near a fold, where the
    branch turns, the quadratic term grows).

    On the phase diagram's grid (steps of 0.1 in alpha) the quadratic predictor starts
    the solve about ten times closer to the fixed point than the secant (relative
    error 3e-4 against 3e-3 on the smooth parts of both branches at omega = 0.3)."""
    if len(points) == 1 or points[-1].alpha == points[-2].alpha:
        return points[-1].overlaps
    a, b = points[-2], points[-1]
    xa, xb = Overlaps.of(a.overlaps).as_array(), Overlaps.of(b.overlaps).as_array()
    t = (alpha - b.alpha) / (b.alpha - a.alpha)
    x = xb + t * (xb - xa)
    if len(points) >= 3 and len({p.alpha for p in points[-3:]}) == 3:
        c = points[-3]
        # Newton's divided differences through (c, a, b), evaluated at alpha
        xc = Overlaps.of(c.overlaps).as_array()
        d1 = (xb - xa) / (b.alpha - a.alpha)
        d0 = (xa - xc) / (a.alpha - c.alpha)
        curvature = (d1 - d0) / (b.alpha - c.alpha)
        correction = curvature * (alpha - b.alpha) * (alpha - a.alpha)
        scale = np.maximum(np.abs(xb), 1e-6)
        if np.max(np.abs(correction) / scale) <= 0.5 * np.max(np.abs(x - xb) / scale):
            x = x + correction
    # a prediction outside the domain is no start (at sigma = 0.3 the semantic branch's
    # quadratic prediction from 7.5 and 6.2 to 5.2 had theta^2 > rho q)
    predicted = Overlaps.from_array(x)
    # rho enters only where theta is free (the semantic branch)
    return predicted if predicted.inside(b.model.rho if predicted.theta else 0.0) else b.overlaps


def follow_branch(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
                  anchor: Optional[tuple] = None, bisections: int = 4,
                  progress: Optional[Callable[[FixedPoint], None]] = None, integrator: str = "auto",
                  classify_ends: bool = True) -> BranchCurve:
    """Solve ``branch`` on every alpha of ``alphas`` by continuation from an anchor.

    Where ``integrator``'s records carry quadrature noise (QMC), the grid is walked instead
    (:func:`walk_branch`; ``anchor`` and ``bisections`` do not apply).

    The branch is first solved at the anchor alpha (by default the alpha = 2 values of docs/theory.md, section 3.8
    values as start; if it is not found there, at the grid points at half, a fifth and
    a tenth of the grid, from the same start; each candidate probed with the draft rule
    first, :func:`find_anchor`), then followed upward and downward through the grid. Where it is
    lost, the spinodal is bracketed and bisected ``bisections`` times; its error
    is the final bracket's width (see ``_bisect_spinodal``), and how the branch ends there is
    classified (:func:`end_evidence`) unless ``classify_ends`` is false (kind
    :data:`NOT_CLASSIFIED`: a scan that needs only where a branch exists, such as the thresholds',
    saves the classification's Jacobians and arclength steps, a tenth of its time).
    """
    if not method_for(spec, (branch,), integrator).deterministic:
        return walk_branch(spec, alphas, branch, precision, integrator, progress=progress)
    model = bind(spec)
    alphas = np.sort(np.asarray(alphas, dtype=float))
    if anchor is None:
        anchor_alpha, default = ANCHORS[branch]
        anchor_start = start_for_model(default, spec.rho)
    else:
        anchor_alpha, anchor_start = anchor
    # a branch may exist only on part of the grid (e.g. the positional one at small
    # omega): without an explicit anchor, grid points inside the grid are tried next
    candidates = [anchor_alpha] if anchor is not None else anchor_alphas(anchor_alpha, alphas)
    found = find_anchor(spec, model, branch, precision, candidates, anchor_start)
    if isinstance(found, AnchorFailure):
        if found.failed:
            failure = f"{branch} branch: the solver failed at every anchor ({found})"
            log.warning(failure)
            return BranchCurve(branch, [], [], failure, failure=failure)
        note = f"{branch} branch not found at the anchor from {anchor_start} ({found})"
        log.warning(note)
        return BranchCurve(branch, [], [], note)
    anchor_alpha, seed = found
    points, spinodals = [], []
    for direction in (+1, -1):
        grid = alphas[alphas >= anchor_alpha] if direction > 0 else alphas[alphas < anchor_alpha][::-1]
        trail = [seed]
        for alpha in grid:
            if alpha == anchor_alpha:
                points.append(seed)
                if progress:
                    progress(seed)
                continue
            # from the prediction alone: where it fails, the bisection's first step starts from the
            # last point found, as try_solve's second attempt would, at half the distance
            fp = step_solve(spec, float(alpha), branch, precision, extrapolate(trail, alpha), model, trail[-1],
                            bisections)
            if fp is None or not is_on_branch(fp, branch):
                end, between = _bisect_spinodal(spec, model, branch, precision, trail, float(alpha), bisections,
                                                classify_ends)
                if end is not None:
                    spinodals.append(end)
                    break
                # the step was too long, not past the end: the shorter steps reached alpha
                trail.extend(between[:-1])
                fp = between[-1]
            trail.append(fp)
            points.append(fp)
            if progress:
                progress(fp)
    points.sort(key=lambda p: p.alpha)
    return BranchCurve(branch, points, spinodals)


class AnchorFailure(str):
    """What each anchor attempt gave, where none found the branch; ``failed``: some attempt
    ended in a solver failure, or attempts only wandered and none fell onto the trivial
    point (so the branch's absence is not shown)."""

    failed: bool = False


def find_anchor(spec, model, branch, precision, candidates, start):
    """The first candidate alpha where ``branch`` is found from ``start``, and its solution;
    or, where none is, an :class:`AnchorFailure` saying what each attempt gave.

    Each candidate is first probed with the draft rule (about 5x cheaper per
    evaluation): where the draft solve does not find the branch, the candidate is
    skipped; where it does, the precision's solve starts from the draft solution. A
    failing fast solve at an anchor costs 15-18 s (it stalls: at omega <= 0.2 the
    positional branch ends below alpha = 2); a failing draft probe about a quarter of
    that. The draft rule's folds are not the fast rules' (they differ by ~0.01 in alpha
    near the positional ones), so if no probe succeeds, every candidate is tried again
    with the precision's own rules before the branch is declared not found. Before
    that, each candidate is probed from the starts of :func:`start_search.search_starts`
    (only where the anchor start has failed everywhere, so the softmax model's
    branches, found from their anchor starts, never pay for the search)."""
    failures, outcomes = [], set()

    def attempt(alpha, precision_, start_):
        # an anchor is looked for, not continued: a stall there is finished by Newton's
        # method before it counts as a failure
        fp, outcome, why = attempt_solve(spec, alpha, branch, precision_, start_, model, newton=True)
        if outcome == FOUND:
            return fp
        outcomes.add(outcome)
        failures.append(f"alpha = {alpha:g} ({precision_}): {why}")
        return None

    def failure():
        note = AnchorFailure("; ".join(failures))
        note.failed = FAILED in outcomes or ABSENT not in outcomes
        return note

    def probe_then_solve(alpha, start_):
        probe = attempt(alpha, "draft", start_)
        if probe is None or precision == "draft":
            return probe, probe
        return probe, attempt(alpha, precision, probe.overlaps)

    probed = set()
    for alpha in candidates:
        probe, fp = probe_then_solve(alpha, start)
        if fp is not None:
            return alpha, fp
        if probe is not None:
            probed.add(alpha)
    # the anchor start is the softmax model's; a regenerated model's branch may lie far
    # from it (numerics/fixed_points/start_search.py). Searched starts are tried before the precision's own
    # rules from the anchor start, which cost a failed full solve per candidate
    for alpha in candidates:
        for searched in search_starts(model, alpha, branch, PRECISIONS["draft"].rule):
            probe, fp = probe_then_solve(alpha, searched)
            if fp is not None:
                log.info("%s branch: anchor found at alpha = %g from the searched start %s", branch, alpha,
                         searched)
                return alpha, fp
            if probe is not None:
                probed.add(alpha)
                break
    if precision == "draft":
        return failure()
    for alpha in candidates:
        if alpha in probed:
            continue  # already solved with the precision's rules, from the draft solution
        fp = attempt(alpha, precision, start)
        if fp is not None:
            return alpha, fp
    return failure()


# where in the grid a branch is looked for after the anchor. At omega = 0 the positional
# branch exists only on alpha ~ 0.10-0.92: the thresholds' scan [0.5, 2.5] meets it only
# at its second point (a tenth of the way). At sigma = 0.3 (omega = 0.3) the semantic
# branch starts near alpha = 4.7 and exists above: of the thresholds' extended scan
# (3.0 .. 7.5) only its top points hold it, so the grid's end is tried last
ANCHOR_GRID_FRACTIONS = (0.5, 0.2, 0.1, 1.0)


def anchor_alphas(anchor_alpha: float, alphas: np.ndarray) -> list:
    """The anchor, then the grid points at ``ANCHOR_GRID_FRACTIONS`` of the grid.

    The anchor is moved to the nearest grid point: its solution is then one of the
    reported points, not an extra full solve that only seeds the continuation (one solve
    per branch and column of a phase diagram, whose default grid does not contain
    alpha = 2). An anchor outside the grid is moved to the grid's nearer end: a
    continuation from alpha = 1 to a grid on [20, 60] (linear attention's semantic
    branch) failed on its last long step and reported a spinodal of the trivial branch
    at 19.4 +- 1.2 where that branch exists (solved at 18, 19, ..., 26)."""
    out = [float(alphas[np.argmin(np.abs(alphas - anchor_alpha))]) if alphas.size else float(anchor_alpha)]
    if alphas.size:
        for fraction in ANCHOR_GRID_FRACTIONS:
            a = float(alphas[int(round(fraction * (alphas.size - 1)))])
            if all(abs(a - b) > 1e-12 for b in out):
                out.append(a)
    return out


def _bisect_spinodal(spec, model, branch, precision, trail, lost_alpha, bisections, classify: bool = True) -> tuple:
    """Bisect between the last grid point where the branch was found and the first where
    it was lost; existence is decided by the full solve (both rules), not by the coarse
    rule alone: near the positional fold at ``omega = 0`` the two fast rules differ by 3%
    in ``m`` and the coarse rule's branch reaches at least 0.003 further in ``alpha``
    (docs/numerics.md, section 5). The end is then classified (:func:`end_evidence`), with ``classify``.
    The probes go by :func:`_bisection`, first by the precision's ``probe_precision``.

    Returns ``(end, [])``, or ``(None, points)`` where the branch did not end: every
    shorter step found it and so did ``lost_alpha`` from the nearest of them (``points``:
    those found beyond the trail, ``lost_alpha``'s last)."""
    probe = PRECISIONS[precision].probe_precision
    bracket = _bisection(spec, model, branch, precision, trail, lost_alpha, bisections, probe) if probe else None
    if bracket is None:
        bracket = _bisection(spec, model, branch, precision, trail, lost_alpha, bisections)
    lo, hi, good, found = bracket
    if hi == lost_alpha and lo != trail[-1].alpha:
        # every shorter step found the branch: the first failure may be the long step's
        # (a prediction from far lands in another fixed point's basin), so lost_alpha is
        # tried again from the nearest point found
        fp = try_solve(spec, lost_alpha, branch, precision, extrapolate(found, lost_alpha), model, good)
        if fp is not None and is_on_branch(fp, branch):
            log.info("%s branch: alpha = %g reached in shorter steps", branch, lost_alpha)
            return None, found[len(trail[-2:]):] + [fp]
    side = "lower" if lost_alpha < trail[0].alpha else "upper"
    # the error is the whole final bracket, not half of it: whether a solve converges
    # within ~1e-3 of a fold depends on the solver's path. At omega = 0.25 (semantic) two
    # versions of the solver ended in adjacent brackets; a finer bisection puts
    # the end at 0.66908 +- 0.0004, at their shared edge, which half a bracket does not cover
    if classify:
        kind, evidence = end_evidence(model, branch, PRECISIONS[precision].rule, found, hi, abs(hi - lo))
    else:
        kind, evidence = NOT_CLASSIFIED, {"first_not_found": float(hi)}
    log.info("%s branch ends near alpha = %.6g (+- %.2g, %s end): %s", branch, 0.5 * (lo + hi), abs(hi - lo), side,
             kind)
    return {"branch": branch, "alpha": 0.5 * (lo + hi), "alpha_error": abs(hi - lo), "side": side,
            "last_found": good.alpha, "kind": kind, "evidence": evidence}, []


def _bisection(spec, model, branch, precision, trail, lost_alpha, bisections, probe: Optional[str] = None):
    """The bisection's final bracket: ``(lo, hi, good, found)``, ``lo`` the last ``alpha`` where the branch
    was found (``good`` its point), ``hi`` the first where it was lost, ``found`` the trail's last two
    points and those found on the way. Each probe starts from the last point found.

    With ``probe`` (a cheaper precision), a probe is first solved at that precision: where it loses the
    branch, the probe counts as lost without this precision's solve; where it finds it, this precision's
    solve decides. A cheaper precision's branch near a spinodal usually reaches further than this one's
    (at ``omega = 0.3`` the draft semantic branch is found at ``alpha = 0.71875``, where the fast one is
    lost; both are lost at 0.6875), so its losses are this one's. A final lost end that the cheaper precision
    alone decided is confirmed by this precision's solve from the point it would have started from; where
    that finds the branch, the cheaper precision lost it first (its decisions and this one's disagree,
    and so may the path), and None is returned: the caller bisects again without ``probe``. Otherwise
    every point found and the ends are this precision's, and the bracket that of the bisection without
    ``probe`` wherever the two precisions' decisions agree."""
    good = trail[-1]
    found = list(trail[-2:])
    lo, hi = good.alpha, lost_alpha
    unconfirmed = None  # where the final lost end was decided by ``probe`` alone: the point found before it
    for _ in range(bisections):
        mid = 0.5 * (lo + hi)
        if probe is not None:
            cheap = try_solve(spec, mid, branch, probe, good.overlaps, model, good)
            if cheap is None or not is_on_branch(cheap, branch):
                hi, unconfirmed = mid, good
                continue
        fp = try_solve(spec, mid, branch, precision, good.overlaps, model, good)
        if fp is not None and is_on_branch(fp, branch):
            good, lo = fp, mid
            found.append(fp)
        else:
            hi, unconfirmed = mid, None
    if unconfirmed is not None:
        fp = try_solve(spec, hi, branch, precision, unconfirmed.overlaps, model, unconfirmed)
        if fp is not None and is_on_branch(fp, branch):
            log.info("%s branch: found at alpha = %g, where the %s precision lost it; bisecting again without it",
                     branch, hi, probe)
            return None
    return lo, hi, good, found


#: how a branch ends (:func:`classify_end`)
FOLD, VANISHING, UNEXPLAINED = "fold", "vanishing", "not found"
#: the kind of an end located but not classified (``follow_branch(..., classify_ends=False)``)
NOT_CLASSIFIED = "not classified"
#: an extrapolated zero counts as the end's if it lies between the last point found and the
#: first point lost, widened on each side by this fraction of the final bracket
END_SLACK = 0.25


def _extrapolated_zero(params, values, power: float) -> float:
    """Where ``values**power``, linear in the parameter through the last two points, is zero
    (NaN where it does not fall toward zero)."""
    (p1, p2), (v1, v2) = params[-2:], np.abs(values[-2:]) ** power
    if not v2 < v1 or p1 == p2:
        return float("nan")
    return float(p2 - v2 * (p2 - p1) / (v2 - v1))


def classify_end(params, overlaps, eigenvalues, end: float, width: float) -> tuple:
    """How a branch followed in a parameter ends, from its last points found (``params``,
    ordered toward the end, at least two), their defining overlap (``overlaps``) and the
    smallest modulus of an eigenvalue of ``I - DF`` there (``eigenvalues``); ``end``: the
    first parameter where it was not found, ``width``: the final bracket.

    ``VANISHING``: the overlap, as a square root, extrapolates to zero at the end (the
    branch meets the trivial one in a pitchfork; the linear extrapolation is in the
    evidence only); ``FOLD``: the overlap stays finite and the
    eigenvalue extrapolates to zero there as a square root (the branch turns back);
    ``UNEXPLAINED``: neither (a branch not found there, by every start the solver tried).
    Returns ``(kind, evidence)``, the evidence a JSON-safe dict."""
    params = np.asarray(params, dtype=float)
    last, direction = params[-1], np.sign(end - params[-1]) or 1.0
    slack = END_SLACK * abs(width)

    def near_end(p0):
        # the branch ends between the last point found and the first lost: a zero elsewhere
        # is not its end. The extrapolation is only as good as the last two points are near
        # the end: from points 0.25 apart (the draft scan's semantic end at omega = 0.3,
        # bracket [0.6875, 0.75]) it said fold, where the fast continuation's points near
        # 0.717 show theta vanishing
        return bool(np.isfinite(p0) and -slack <= direction * (p0 - last) <= abs(end - last) + slack)

    zeros = {"overlap_linear": _extrapolated_zero(params, overlaps, 1.0),
             "overlap_square_root": _extrapolated_zero(params, overlaps, 2.0),
             "eigenvalue_square_root": _extrapolated_zero(params, eigenvalues, 2.0)}
    # only the square-root law decides: near a fold the overlap also changes like a square
    # root, from a finite value, and its linear extrapolation can reach zero near the end
    # (the semantic end at omega = 0.3, theta/sigma^2 ~ 0.2 there, looked vanishing by it)
    if near_end(zeros["overlap_square_root"]):
        kind = VANISHING
    elif near_end(zeros["eigenvalue_square_root"]):
        kind = FOLD
    else:
        kind = UNEXPLAINED
    evidence = {"parameters": [float(p) for p in params[-2:]],
                "defining_overlap": [float(abs(v)) for v in overlaps[-2:]],
                "smallest_eigenvalue_of_I_minus_DF": [float(v) for v in np.abs(eigenvalues[-2:])],
                "extrapolated_zero": {k: (v if np.isfinite(v) else None) for k, v in zeros.items()},
                "first_not_found": float(end)}
    return kind, evidence


def end_evidence(model, branch: str, rule, found: Sequence[FixedPoint], end: float, width: float) -> tuple:
    """:func:`classify_end` for a branch followed in ``alpha``: at its last two points
    found, the defining overlap and the eigenvalues of ``I - DF`` (with ``rule``). Also
    records the spectral radius of the map's Jacobian there (above one, the iteration
    cannot converge on the point: it was found by the root finder)."""
    pts = sorted({p.alpha: p for p in found}.values(), key=lambda p: abs(end - p.alpha), reverse=True)[-2:]
    if len(pts) < 2:
        return UNEXPLAINED, {"note": "a single point found: nothing to extrapolate", "first_not_found": float(end)}
    eig = [map_jacobian_eigenvalues(model, p.alpha, branch, rule, p.overlaps) for p in pts]
    kind, evidence = classify_end([p.alpha for p in pts],
                                  [defining_overlap(p.overlaps, branch, model.spec.sigma) for p in pts],
                                  [abs(e[0]) for e in eig], end, width)
    evidence["map_spectral_radius"] = [float(np.max(np.abs(1.0 - e))) for e in eig]
    if kind != VANISHING:
        kind = _arclength_end(model, branch, rule, pts[-1], end, END_SLACK * abs(width), kind, evidence)
    return kind, evidence


#: the arclength continuation that checks an end: its first step (in log alpha and the domain
#: coordinates of the overlaps), and the points it may add
ARC_STEP, ARC_POINTS = 0.05, 8


def _arclength_end(model, branch: str, rule, last: FixedPoint, end: float, slack: float, kind: str,
                   evidence: dict) -> str:
    """The end seen by pseudo-arclength continuation from the last point found
    (:func:`numerics.branches.arclength.follow_through_fold`), where the extrapolations did not say
    vanishing: where the branch turns back before ``end`` (or within ``slack`` beyond it), ``FOLD``
    (its overlap keeps its sign) or ``VANISHING`` (a pitchfork: it goes through the trivial point
    onto its mirror image); where it goes on beyond ``end``, turning or not, ``UNEXPLAINED`` (the
    solver lost a branch that exists there: a turn further on is that branch's end, not this one);
    otherwise ``kind`` unchanged. The curve's turn goes in ``evidence["arclength"]``."""
    from numerics.branches.arclength import follow_through_fold

    direction = np.sign(end - last.alpha) or 1.0
    curve = follow_through_fold(model.spec, last.alpha, branch, last.overlaps, "alpha", direction, rule=rule,
                                step=ARC_STEP, max_points=ARC_POINTS, past_fold=1)
    folds = curve.folds()
    params = [pt.parameter for pt in curve.points]
    evidence["arclength"] = {"turns": folds, "parameters": params, "stopped": curve.stopped,
                             "evaluations": curve.evaluations}
    if folds and direction * (folds[0]["turn"] - end) <= slack:
        return FOLD if folds[0]["kind"] == "fold" else VANISHING
    if params and direction * (max(params, key=lambda p: direction * p) - end) > 0:
        return UNEXPLAINED
    return kind


def walk_branch(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
                integrator: str = "auto", progress=None, start=None) -> BranchCurve:
    """``branch`` along ``alphas`` by continuation, as a :class:`BranchCurve` (no spinodals, a note on
    where it was not found): each
    solve starts from the last point found on the branch; a solve from the previous point that does not converge, or falls to a smaller
    branch, is retried once from the default start. Alphas where the branch is not found (:class:`~numerics.fixed_points.errors.BranchNotFound`)
    are left out, and the next one starts afresh; a solve that raises :class:`~numerics.solver.iteration.SolverError`
    is kept as a failed point (:func:`~numerics.result.failed_point`). ``progress(alpha)`` is
    called after each alpha. ``start``: the overlaps the first solve starts from (a point of the
    branch near the grid; default: the default start)."""
    points = []
    for alpha in alphas:
        try:
            try:
                fp = solve(spec, float(alpha), branch, precision, integrator, start=start)
            except BranchNotFound as exc:
                if start is None:
                    raise
                # from the previous point the iteration can fall to a smaller branch where the default
                # start finds this one (the rank-2 mixed branch at alpha 2.2, draft, from 1.9): the
                # branch is absent only if that fails too
                log.info("%s; retried from the default start", exc)
                fp = solve(spec, float(alpha), branch, precision, integrator)
            if not fp.converged and start is not None:
                # the previous point can lie in the basin of another orbit of the map (a rank-2 mixed
                # solve at alpha 2.5 from the point at 1.5 does not converge, from the default start
                # it does): one retry from the default start, kept only if it converges
                log.info("%s from the previous point: %s; retried from the default start", branch, fp.status)
                try:
                    retry = solve(spec, float(alpha), branch, precision, integrator)
                    fp = retry if retry.converged else fp
                except BranchNotFound as exc:
                    log.info("%s", exc)
            points.append(fp)
            start = fp.overlaps if fp.converged else None
        except BranchNotFound as exc:
            log.info("%s", exc)
            start = None
        except SolverError as exc:
            # one failed solve is reported at its alpha (converged=False), and the branch goes on
            log.warning("%s at alpha = %g: %s", branch, alpha, exc)
            points.append(failed_point(spec, float(alpha), branch, precision, integrator, str(exc)))
            start = None
        if progress is not None:
            progress(alpha)
    absent = sorted(set(map(float, alphas)) - {p.alpha for p in points})
    note = f"{branch} branch not found at alpha = {', '.join(f'{a:g}' for a in absent)}" if absent else ""
    return BranchCurve(branch, points, [], note=note)

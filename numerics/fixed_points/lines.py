"""Fixed points of the saddle-point equations, branch by branch (docs/theory.md, sections 3.1-3.2).

A branch is an invariant subspace of the equations:

* ``semantic``: ``m = 0`` (the flip ``(xi, y) -> (-xi, -y)`` makes ``mhat = 0``);
* ``positional``: ``theta = 0`` (at ``theta = 0`` the teacher ``T(h*)`` is even in
  ``h* = sqrt(rho) y``, so ``y -> -y`` makes ``thetahat = 0`` for any ``A``);
* ``trivial``: ``m = theta = 0``;
* ``free``: nothing imposed (to test the stability of a branch).

The solver iterates only the free components but the reported residual is the
undamped residual of all eight order parameters, including the imposed ones.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Optional

import numpy as np

from derivations import ModelSpec

from numerics.model.bound import BoundModel, bind
from numerics.channel.lines.rule import ChannelRule
from numerics.overlaps import ALL_NAMES, COLLAPSE, COMPETING_BRANCHES, FIXED_ZERO, Overlaps
from numerics.precision import PRECISIONS, Precision
from numerics.result import CONVERGED, FixedPoint, assess
from numerics.fixed_points.errors import BranchLost, BranchNotFound
from numerics.fixed_points.root_fallback import WANDERED, root_fallback
from numerics.fixed_points.saddle_map import SaddlePointMap
from numerics.channel.lines.expectations import update_hat_overlaps
from numerics.model.saddle_point import free_energy, test_error, update_overlaps
from numerics.solver.iteration import OUTSIDE_DOMAIN, Budget, SolverError, solve_fixed_point
from numerics.solver_range import check_solver_range
from numerics.fixed_points.start_search import search_starts

log = logging.getLogger(__name__)

DEFAULT_START = {
    "semantic": Overlaps(q=0.11, m=0.0, V=12.0, theta=0.15),
    "positional": Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0),
    "trivial": Overlaps(q=0.01, m=0.0, V=20.0, theta=0.0),
}
#: the scale of (q, m, V, theta) below which a residual is absolute, not relative
FLOOR = np.array([1e-8, 1e-6, 1e-8, 1e-6])
#: the model (``rho = sigma^2``) whose orders of magnitude the default starts are
START_RHO = 0.25


def start_for_model(start: Overlaps, rho: float) -> Overlaps:
    """A default start made valid for a model with ``rho = sigma^2``: ``theta`` keeps its
    fraction of the Cauchy-Schwarz bound ``sqrt(rho q)`` (docs/theory.md, section 2.2),
    i.e. it is scaled by ``sqrt(rho / START_RHO)``. At ``sigma = 0.3`` the default
    model's semantic start ``theta = 0.158`` lies outside the domain (``theta^2 >=
    rho q = 0.0104``); scaled, it is 0.095, at the same 93% of the bound as in the
    default model. The default model's starts are unchanged."""
    return dataclasses.replace(start, theta=start.theta * float(np.sqrt(rho / START_RHO)))



def _line_overlaps(rho: float):
    def overlaps_of(x: np.ndarray) -> Overlaps:
        ov = Overlaps.from_array(x)
        ov.validate()
        if not ov.inside(rho):
            # Cauchy-Schwarz for the Gaussian pair (h, h*) of docs/theory.md, section 2.2: outside, the
            # covariance is not positive (numpy would warn and return NaN); the solver
            # shortens a step that lands here
            raise FloatingPointError(f"theta^2 >= rho q at {ov}: the covariance is not positive")
        return ov
    return overlaps_of


def line_map(model: BoundModel, alpha: float, branch: str, rule: ChannelRule) -> SaddlePointMap:
    """The fixed-point map of ``branch`` with the line quadrature's half-steps
    (:func:`~numerics.channel.lines.expectations.update_hat_overlaps`,
    :func:`~numerics.model.saddle_point.update_overlaps`), over the branch's free scalars of
    ``(q, m, V, theta)``."""
    return SaddlePointMap(alpha, _free(branch), np.zeros(4), _line_overlaps(model.spec.rho),
                          Overlaps.as_array, functools.partial(update_hat_overlaps, model, alpha=alpha, rule=rule),
                          lambda side: update_overlaps(model, side.hats), label=branch, deterministic=True)


def _free(branch: str) -> list:
    """The indices in ``(q, m, V, theta)`` of ``branch``'s free scalars, the coordinates of its map."""
    zero = [("q", "m", "V", "theta").index(n) for n in FIXED_ZERO[branch]]
    return [i for i in range(4) if i not in zero]


def moved_seed(seed: "RuleSolution", branch: str, overlaps: Overlaps) -> "RuleSolution":
    """``seed``, a solution of ``branch`` with a rule at a nearby ``alpha``, moved to ``overlaps`` (its
    prediction at the new ``alpha``): its Anderson pairs translated with it, so that a solve from
    ``overlaps`` seeded with it starts with the same differences, the same Jacobian estimate, and
    shifts them by the map's residual there as a seed from another rule is shifted
    (:func:`solve_on_map`). Extrapolating the pairs' secant model instead (a continuation's
    ``history``) amplifies their noise: the pairs of a converged high solve differ by about 1e-10,
    and a move of 1e-6 took 10 evaluations where 2 do."""
    move = (Overlaps.of(overlaps).as_array() - Overlaps.of(seed.overlaps).as_array())[_free(branch)]
    return dataclasses.replace(seed, overlaps=Overlaps.of(overlaps),
                               history=tuple((np.asarray(x, dtype=float) + move, g) for x, g in seed.history))


@dataclasses.dataclass(frozen=True)
class RuleSolution:
    """A fixed point solved with one quadrature rule."""

    overlaps: Overlaps
    side: object              # ChannelSide at ``overlaps``
    converged: bool
    iterations: int
    residual8: float          # undamped relative residual of all eight order parameters
    evaluations: int
    history: tuple = ()       # the solver's last (x, F(x) - x) pairs, to seed a related solve
    # the global-prox checks moved the fixed point: the checked phase needed more than
    # one evaluation (solve_with_rule)
    checks_moved: bool = False
    # converged at the map's noise floor: the residual stopped falling above ``tol`` but
    # below the acceptance tolerance (solver.solve_fixed_point)
    at_floor: bool = False
    stopped: str = ""         # why the solve stopped unconverged ("" if it converged)


# a solve gives up once its residual has not halved in this many iterations. Healthy
# solves halve it every 1-3 iterations (Anderson) or ~every 7 (the damped retry);
# solves that stall are those past a fold, which otherwise spent up to 80 + 240
# evaluations failing (docs/numerics.md, section 4)
STALL_WINDOW = 20


def defining_overlap(overlaps: Overlaps, branch: str, sigma: float) -> float:
    """The overlap that vanishes when ``branch`` merges with the trivial one:
    ``|theta|/sigma^2`` (semantic) or ``|m|`` (positional)."""
    overlaps = Overlaps.of(overlaps)
    return abs(overlaps.theta) / sigma**2 if branch == "semantic" else abs(overlaps.m)


def solve_with_rule(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, start: Overlaps,
                    tol: float, maxiter: int = 80, damping: float = 0.5,
                    seed: Optional["RuleSolution"] = None, lost_below: Optional[float] = None,
                    history: tuple = (), accept_tol: Optional[float] = None,
                    budget: Optional[Budget] = None, newton: bool = False,
                    root_after_collapse: bool = True) -> RuleSolution:
    """Solve the branch's fixed point with one channel rule (no error estimate).

    In two phases when the rule checks the global prox (``rule.check_global``): the
    fixed point is approached with the checks off (the map of the located switches,
    2.5x cheaper per evaluation), then the solve continues with the checks on from
    there, seeded with the approach's Anderson history. Where the checks find nothing
    the two maps agree to ~1e-11 and the second phase stops after one evaluation; on
    the positional branch at omega = 0.3 they move the conjugates by ~5e-5 relative and
    it takes one or two more (near the positional folds at small omega they move ``m``
    by up to 14%, and it takes more). A solve seeded by another rule's solution on
    which the checks moved the fixed point (``seed.checks_moved``) skips the approach:
    there, two or three checked evaluations from the seed cost less than the approach
    plus those (measured on the positional branch at omega = 0.3). Every converged
    result is therefore a fixed point of the checked map, judged on its undamped
    residual. The approach makes one attempt; where it fails
    (:class:`BranchLost`, a stall, the solver), the solve is done again from ``start``
    with the checks on, so that only the checked map decides that a branch is lost.

    Arguments are those of :func:`solve_on_map`, which does one phase.
    """
    bounds = dict(accept_tol=accept_tol, budget=budget, newton=newton, root_after_collapse=root_after_collapse)

    def checked_from_start(skip_history_attempt=False):
        return solve_on_map(model, alpha, branch, rule, start, tol, maxiter, damping, seed, lost_below, history,
                             skip_history_attempt=skip_history_attempt, **bounds)

    if not rule.check_global or (seed is not None and seed.checks_moved):
        return dataclasses.replace(checked_from_start(), checks_moved=seed is not None and seed.checks_moved)
    try:
        approach = solve_on_map(model, alpha, branch, dataclasses.replace(rule, check_global=False), start, tol,
                                 maxiter, damping, seed, lost_below, history, first_attempt_only=True, **bounds)
    except (BranchLost, SolverError):
        approach = None
    if budget is not None and budget.exhausted() and (approach is None or not approach.converged):
        return approach if approach is not None else _unsolved(model, alpha, branch, rule, start,
                                                               budget.exhausted())
    if approach is None or not approach.converged:
        # only the checked map decides that there is no fixed point: near the positional
        # folds at small omega the checks move m by up to 14% and the unchecked map's fold
        # lies ~0.02 in alpha before the checked one's (omega = 0.15). The approach has
        # just made the borrowed-history attempt on a map close to this one, so the
        # checked solve goes on with the retries (no history, then more damped): repeating
        # that attempt cost about 6 s per lost solve in the spinodal bisections. Not for a
        # solve seeded by another rule at the same alpha: there the first attempt, with
        # that rule's Jacobian from the same point, is the only attempt made when it stalls
        sol = checked_from_start(skip_history_attempt=seed is None)
        spent = approach.evaluations if approach is not None else 0
        return dataclasses.replace(sol, evaluations=sol.evaluations + spent)
    checked = solve_on_map(model, alpha, branch, rule, approach.overlaps, tol, maxiter, damping, seed=approach,
                            lost_below=lost_below, **bounds)
    return dataclasses.replace(checked, iterations=approach.iterations + checked.iterations,
                               evaluations=approach.evaluations + checked.evaluations,
                               checks_moved=checked.evaluations > 1)


def _attempts(damping: float, maxiter: int, history: tuple, skip_history_attempt: bool,
              first_attempt_only: bool) -> list:
    """The attempts of :func:`solve_on_map`, in order: ``(damping, Anderson depth, iterations,
    history)``.

    A borrowed history can mislead: across a long continuation step (the thresholds' draft scan
    steps 0.25 in alpha) its first Anderson step once collapsed the positional branch at omega = 0,
    which then looked like a spinodal. So a seeded attempt that fails is repeated without it. The
    positional iteration oscillates (Jacobian eigenvalues below -1): if the accelerated iteration
    fails, it is retried more heavily damped with a short history. (A solve that starts from
    another rule's solution at the same alpha starts within that rule's quadrature error of its
    fixed point: if it stalls there, this rule has no fixed point nearby (past its fold), and
    retrying cost up to 80 evaluations of the reporting rule at the positional folds. Such a solve
    normally converges in 2-5 evaluations, so :func:`solve_on_map` also gives it half the stall
    window.)"""
    attempts = ([(damping, 4, maxiter, history)] if history else []) + [(damping, 4, maxiter, ()),
                                                                         (0.2, 2, 3 * maxiter, ())]
    if skip_history_attempt and history:
        attempts = attempts[1:]
    return attempts[:1] if first_attempt_only else attempts


def _rule_solution(F: SaddlePointMap, model: BoundModel, res) -> RuleSolution:
    """The :class:`RuleSolution` at the solver's last iterate ``res.x`` of the map ``F`` (the channel
    side of its last evaluation where that was at ``res.x``)."""
    ov = Overlaps.from_array(F.full(res.x))
    if F.last is not None and np.array_equal(F.last[0], res.x):
        side = F.last[1]
    else:
        side = F.channel_side(ov)
    return RuleSolution(ov, side, bool(res.converged), res.iterations, _residual8(model, ov, side), F.evaluations,
                        res.pairs, at_floor=res.at_floor, stopped=res.stopped)


def solve_on_map(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, start: Overlaps,
                  tol: float, maxiter: int = 80, damping: float = 0.5,
                  seed: Optional["RuleSolution"] = None, lost_below: Optional[float] = None,
                  history: tuple = (), first_attempt_only: bool = False,
                  skip_history_attempt: bool = False, accept_tol: Optional[float] = None,
                  budget: Optional[Budget] = None, newton: bool = False,
                  root_after_collapse: bool = True) -> RuleSolution:
    """Solve the branch's fixed point of one map (one channel rule, checks on or off).

    ``first_attempt_only``: no retries (without the borrowed history, more damped); a
    failure raises or returns ``converged=False`` at once. ``skip_history_attempt``:
    only the retries (for a solve whose first attempt was just made on a nearby map).

    ``seed``: a solution of the same branch with another rule, started from its
    overlaps. Its Anderson history is reused, shifted by the difference of the two
    maps at the start (the maps differ by a nearly constant quadrature error), so
    the finer solve starts with the coarse Jacobian information.

    ``history``: Anderson pairs of a related solve that need not end at ``start``
    (the same rule at the previous ``alpha`` of a continuation); used likewise, after
    extrapolating their secant model to ``start`` (``solver._seeded_history``).

    ``accept_tol``: a solve whose residual stops falling below it is converged at the
    map's noise floor (``at_floor``); ``budget``: the bound on evaluations and time
    shared by every attempt (once it is spent no further attempt is made). ``newton``:
    where every attempt stalls or collapses, a root finder on ``x - F(x)`` from the best
    iterate and from ``start`` (:func:`_root_fallback`); ``root_after_collapse=False``:
    after a stall only (a start far from the branch, which is expected to collapse where
    the branch is absent).

    ``lost_below``: raise :class:`BranchLost` as soon as an iterate's ``theta/sigma^2``
    (semantic) or ``|m|`` (positional) is below it. A solve that collapses onto the
    trivial branch otherwise spends most of its evaluations converging that overlap
    to zero.

    The reported point is ``P = (x, hats(x))`` at the solver's last iterate ``x``;
    its undamped residual is ``update_overlaps(hats(x)) - x`` in all four overlaps
    (the imposed zeros included) and exactly zero in the four conjugates, so it
    costs no extra evaluation of the map.
    """
    F = line_map(model, alpha, branch, rule)
    x0 = start.as_array()[F.free]
    floor = FLOOR[F.free]
    if seed is not None and seed.history and np.array_equal(seed.history[-1][0], x0):
        history = seed.history
    final_stall = seed is not None
    attempts = _attempts(damping, maxiter, history, skip_history_attempt, first_attempt_only)
    fallback = newton and not first_attempt_only
    res, lost = None, None
    for k, (beta, depth, iters, hist) in enumerate(attempts):
        try:
            res_k = solve_fixed_point(F, x0, tol=tol, maxiter=iters, damping=beta, anderson=depth, floor=floor,
                                      history=hist, callback=_lost_check(F, model, branch, lost_below),
                                      stall_window=STALL_WINDOW // 2 if final_stall else STALL_WINDOW,
                                      accept_tol=accept_tol, budget=budget)
        except BranchLost as exc:
            if hist and not first_attempt_only:
                log.debug("alpha=%g %s: lost from the seeded start; retrying without the history", alpha, branch)
                continue
            if not (fallback and root_after_collapse):
                raise
            # the iteration may collapse from a fixed point that repels it: the root
            # finder decides, from the start
            lost = exc
            break
        except SolverError:
            if k == len(attempts) - 1 and not (fallback and res is not None):
                raise
            continue
        if res is None or res_k.converged or res_k.residual < res.residual:
            res = res_k
        if res.converged or (res.stalled and final_stall) or (budget is not None and budget.exhausted()):
            break
    if fallback and (res is None or not res.converged) and not (budget is not None and budget.exhausted()):
        res = root_fallback(F, model.spec.rho, branch, res, x0, tol, accept_tol, budget, floor,
                            _lost_check(F, model, branch, lost_below), lost)
    elif res is None:
        raise lost
    return _rule_solution(F, model, res)


def _residual8(model: BoundModel, ov: Overlaps, side) -> float:
    """The undamped relative residual of all eight order parameters at ``(ov, side.hats)``:
    ``update_overlaps(hats) - ov`` (the conjugates are exact by construction)."""
    x = ov.as_array()
    scale = np.maximum(np.abs(x), FLOOR)
    return float(np.max(np.abs(update_overlaps(model, side.hats).as_array() - x) / scale))


def _unsolved(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, start: Overlaps,
              reason: str) -> RuleSolution:
    """The start as an unconverged solution, for a solve that had no budget left to run."""
    ov = _on_branch(start, branch)
    side = update_hat_overlaps(model, ov, alpha, rule)
    return RuleSolution(ov, side, False, 0, _residual8(model, ov, side), 1, stopped=reason)


def map_jacobian_eigenvalues(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, overlaps: Overlaps,
                             step: float = 1e-4) -> np.ndarray:
    """The eigenvalues of ``I - DF`` at ``overlaps`` over the branch's free overlaps
    (forward differences, steps ``step * |x_j|``), smallest modulus first. One of them
    crosses zero where the branch folds, or where it meets another (the trivial one,
    as its defining overlap vanishes); the map's own eigenvalues ``1 - e`` say whether
    the iteration can converge there (modulus below one)."""
    F = line_map(model, alpha, branch, rule)
    x = Overlaps.of(overlaps).as_array()[F.free]
    g = F(x) - x
    J = np.empty((x.size, x.size))
    for j in range(x.size):
        h = step * max(abs(x[j]), 1e-3)
        e = np.zeros(x.size)
        e[j] = h
        J[:, j] = (F(x + e) - (x + e) - g) / h
    eig = np.linalg.eigvals(-J)
    return eig[np.argsort(np.abs(eig))]


def _lost_check(F: SaddlePointMap, model: BoundModel, branch: str, lost_below: Optional[float]):
    if lost_below is None or branch not in COMPETING_BRANCHES:
        return None
    sigma2 = model.spec.sigma**2

    def check(iteration, x, residual):
        q, m, V, theta = F.full(x)
        value = abs(theta) / sigma2 if branch == "semantic" else abs(m)
        if value < lost_below:
            raise BranchLost(f"{branch} branch lost at alpha = {F.alpha}: iterate {value:.2e} < {lost_below:g} "
                             f"after {iteration} iterations", branch, F.alpha)
    return check


def _on_branch(start, branch: str) -> Overlaps:
    """``start`` (scalars or ``1 x 1`` matrices) with the overlaps ``branch`` holds at zero set so."""
    start = Overlaps.of(start)
    return Overlaps.from_array([start.as_array()[i] if n not in FIXED_ZERO[branch] else 0.0
                                for i, n in enumerate(("q", "m", "V", "theta"))])


def _coarse_solve(model: BoundModel, alpha: float, branch: str, prec: Precision, start: Optional[Overlaps],
                  lost_below: Optional[float], history: tuple, budget: Budget, newton: Optional[bool]) -> tuple:
    """The coarse-rule solve of :func:`solve_branch`, and what each start gave.

    With a ``start``, from there only. Without one, from the branch's default start and,
    where that fails (an error, ``converged=False``, or a fall onto the trivial point),
    from the best starts of :func:`start_search.search_starts` in turn (multi-start; the
    default starts are the softmax model's, see that module). Returns ``(solution,
    attempts)``: the first solution on the branch; else the best unconverged one (a
    failure, not an absence), unless it wandered (residual above :data:`WANDERED`) while
    other starts fell onto the trivial point; else the first that fell onto the trivial
    point (the caller reports that the branch is not there). A start that stops unconverged
    with its defining overlap below ``COLLAPSE`` (merged with the trivial point, where a
    searched start is abandoned) has fallen too; it is no failure near the branch. Where every start was
    abandoned while collapsing (``lost_below``) there is no point: :class:`BranchLost`. Where every start
    raised: :class:`~numerics.solver.iteration.SolverError`."""
    tol = prec.coarse_tol or prec.tol
    bounds = dict(accept_tol=prec.residual_tol, budget=budget)
    if start is not None:
        begin = _on_branch(start, branch)
        seeded = _seeded_solve(model, alpha, branch, prec, begin, tol, lost_below, budget, newton) \
            if not history else None
        if seeded is not None:
            return seeded, []
        return solve_with_rule(model, alpha, branch, prec.rule, begin, tol,
                               lost_below=lost_below, history=history, newton=newton, **bounds), []
    bounds["newton"] = newton is not False
    default = start_for_model(DEFAULT_START.get(branch, DEFAULT_START["semantic"]), model.spec.rho)
    candidates = [("default start", _on_branch(default, branch))]
    attempts, unconverged, collapsed, errors, lost_starts = [], None, None, 0, 0
    searched = False
    while candidates:
        name, candidate = candidates.pop(0)
        # the default start runs to its end (where it falls, it gives the point that is
        # reported); a searched start is abandoned once an iterate is as close to the
        # trivial point as COLLAPSE, whatever the caller's ``lost_below``
        lost = lost_below if name == "default start" else max(lost_below or 0.0, COLLAPSE)
        seeded = _seeded_solve(model, alpha, branch, prec, candidate, tol, lost, budget, False) \
            if name == "default start" and not history else None
        if seeded is not None and _on_its_branch(seeded.overlaps, branch, model.spec.sigma):
            return seeded, attempts
        try:
            sol = solve_with_rule(model, alpha, branch, prec.rule, candidate, tol, lost_below=lost,
                                  history=history if name == "default start" else (),
                                  root_after_collapse=name == "default start", **bounds)
        except BranchLost as exc:
            attempts.append(f"{name}: {exc}")
            lost_starts += 1
            sol = None
        except (SolverError,) + OUTSIDE_DOMAIN as exc:
            attempts.append(f"{name}: solver failed ({exc})")
            errors += 1
            sol = None
        if sol is not None and sol.converged:
            if _on_its_branch(sol.overlaps, branch, model.spec.sigma):
                if name != "default start":
                    log.info("alpha=%g %s: solved from the %s %s", alpha, branch, name, candidate)
                return sol, attempts
            attempts.append(f"{name}: fell to the trivial point")
            collapsed = collapsed or sol
        elif sol is not None and not _on_its_branch(sol.overlaps, branch, model.spec.sigma):
            # stopped unconverged where the branch has merged with the trivial point (its defining
            # overlap below COLLAPSE, where a searched start is abandoned as fallen): a fall, not a
            # failure near the branch
            attempts.append(f"{name}: fell toward the trivial point, not converged there (residual "
                            f"{sol.residual8:.2e}{'; ' + sol.stopped if sol.stopped else ''})")
            lost_starts += 1
        elif sol is not None:
            attempts.append(f"{name}: not converged (residual {sol.residual8:.2e}"
                            f"{'; ' + sol.stopped if sol.stopped else ''})")
            if unconverged is None or sol.residual8 < unconverged.residual8:
                unconverged = sol
        if budget.exhausted():
            attempts.append(budget.exhausted())
            break
        if not candidates and not searched:
            searched = True
            # a start needs no precision: the draft rule ranks the grid (about 5x cheaper than the fast coarse rule)
            candidates = [("searched start", c) for c in search_starts(model, alpha, branch, PRECISIONS["draft"].rule)]
    log.info("alpha=%g %s: no start reached the branch (%s)", alpha, branch, "; ".join(attempts))
    fell = collapsed is not None or lost_starts > 0
    if unconverged is not None and not (fell and unconverged.residual8 >= WANDERED):
        return unconverged, attempts
    if budget.exhausted() or errors == len(attempts):
        raise SolverError(f"alpha={alpha:g} {branch}: no start converged ({'; '.join(attempts)})")
    # every start that ran to an end fell onto the trivial point (a start where the map
    # could not be evaluated says nothing either way)
    if collapsed is not None:
        return collapsed, attempts
    raise BranchLost(f"{branch} branch not found at alpha = {alpha:g}: every start collapsed onto the trivial "
                     f"point or wandered far from any fixed point ({'; '.join(attempts)})", branch, alpha)


def _seeded_solve(model: BoundModel, alpha: float, branch: str, prec: Precision, start: Overlaps, tol: float,
                  lost_below: Optional[float], budget: Budget, newton) -> Optional[RuleSolution]:
    """``prec``'s coarse solve seeded by the fixed point of the coarse rule of ``prec.seed_precision``
    (without the checks) from ``start``: its overlaps and Anderson history, shifted by the difference of
    the two maps (:func:`solve_on_map`). For the high rules, whose evaluations cost 20 times the fast
    coarse rule's, the high coarse solve from a warm start then takes 4 evaluations instead of 7.
    None where the precision has no seed, or the seed's solve or the seeded one failed, did not
    converge or (the seed) fell onto the trivial point: the caller then solves from ``start``."""
    if prec.seed_precision is None:
        return None
    seeding = PRECISIONS[prec.seed_precision]
    try:
        seed = solve_on_map(model, alpha, branch, dataclasses.replace(seeding.rule, check_global=False), start,
                            seeding.coarse_tol or seeding.tol, lost_below=lost_below, first_attempt_only=True,
                            accept_tol=seeding.residual_tol, budget=budget)
        if not seed.converged or not _on_its_branch(seed.overlaps, branch, model.spec.sigma):
            return None
        sol = solve_with_rule(model, alpha, branch, prec.rule, seed.overlaps, tol, seed=seed, lost_below=lost_below,
                              newton=newton, accept_tol=prec.residual_tol, budget=budget)
    except (BranchLost, SolverError) + OUTSIDE_DOMAIN as exc:
        log.info("alpha=%g %s: no solve seeded by the %s rule (%s); solved from the start", alpha, branch,
                 prec.seed_precision, exc)
        return None
    if not sol.converged:
        log.info("alpha=%g %s: the solve seeded by the %s rule did not converge (residual %.1e); solved from the "
                 "start", alpha, branch, prec.seed_precision, sol.residual8)
        return None
    return dataclasses.replace(sol, evaluations=sol.evaluations + seed.evaluations)


def _on_its_branch(overlaps: Overlaps, branch: str, sigma: float) -> bool:
    """The point lies on ``branch`` and not on the trivial one (its defining overlap is not
    below ``COLLAPSE``); the trivial and free branches hold every point."""
    return branch not in COMPETING_BRANCHES or defining_overlap(overlaps, branch, sigma) > COLLAPSE


def solve_branch(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                 start: Optional[Overlaps] = None, model: Optional[BoundModel] = None,
                 lost_below: Optional[float] = None, history: tuple = (),
                 newton: Optional[bool] = None, warn: bool = True) -> FixedPoint:
    """Solve one branch at one ``alpha`` with error estimates.

    The fixed point is solved with the precision mode's coarse rule, then again
    with its finer rule from there; the finer values are reported and the
    difference is their error estimate (plus the test-error quadrature error and
    the solver residual). ``converged`` requires both solves to converge, every
    value and estimate to be finite, and every estimate to be below its value
    (:func:`assess`); ``status`` and ``diagnostics["reason"]`` say which failed.

    ``history``: the ``continuation_pairs`` of a solution at a nearby ``alpha``; the
    coarse solve starts with their Jacobian information.

    ``start``: where the coarse solve starts; by default the branch's
    ``DEFAULT_START`` and, if the solve from there fails, searched starts
    (:func:`_coarse_solve`).

    ``newton``: a coarse solve whose Anderson attempts all stall or collapse finishes with
    a root finder on ``x - F(x)`` (:func:`_root_fallback`); by default only without a ``start`` (a solve that
    searches for a branch, not a continuation step, where a stall past a fold is the
    expected end and Newton would cost 30-60 evaluations more).

    ``warn``: a point that does not converge is logged as a warning (else at info level, for a
    caller that tries again and reports the outcome of its tries).

    The work is bounded by the precision's ``max_evaluations`` and ``time_limit`` for all
    starts and both rules together. Raises :class:`BranchNotFound` where the solve ends on
    the trivial point (the branch is not there; the exception carries that point,
    labelled ``trivial``), and :class:`~numerics.solver_range.OutsideSolverRange` for an
    ``alpha`` or ``lam`` outside the solvable range.
    """
    if branch not in FIXED_ZERO:
        raise ValueError(f"branch: unknown branch {branch!r}; choose from {', '.join(FIXED_ZERO)}")
    check_solver_range(spec, alpha)
    prec = PRECISIONS[precision]
    model = model or bind(spec)
    t_start = time.perf_counter()
    budget = Budget(prec.max_evaluations, prec.time_limit)
    coarse, attempts = _coarse_solve(model, alpha, branch, prec, start, lost_below, history, budget, newton)
    if coarse.converged and not _on_its_branch(coarse.overlaps, branch, spec.sigma):
        # reported as what it is: the trivial point, from the coarse rule alone
        point = _fixed_point(model, spec, alpha, "trivial", prec, coarse, coarse, time.perf_counter() - t_start)
        what = f"theta = {coarse.overlaps.theta:.1g}" if branch == "semantic" else f"m = {coarse.overlaps.m:.1g}"
        tried = f" from all {len(attempts)} starts" if len(attempts) > 1 else ""
        log.info("alpha=%g %s: %s", alpha, branch, "; ".join(attempts))
        raise BranchNotFound(f"{branch} branch not found at alpha = {alpha:g}: the solve fell to the trivial point "
                             f"({what}){tried}", branch, alpha, point)
    # a coarse solve that did not converge (stalled past a fold, say) gives no start
    # for the fine one: the point is reported as it is, not converged, with no estimate
    single = prec.rule == prec.check_rule or not coarse.converged
    fine = coarse if single else solve_with_rule(model, alpha, branch, prec.check_rule, coarse.overlaps, prec.tol,
                                                 seed=coarse, accept_tol=prec.residual_tol, budget=budget,
                                                 newton=bool(newton))
    fp = _fixed_point(model, spec, alpha, branch, prec, coarse, fine, time.perf_counter() - t_start)
    if fp.converged and not _on_its_branch(fp.overlaps, branch, spec.sigma):
        raise BranchNotFound(f"{branch} branch not found at alpha = {alpha:g}: the fine rule's solve fell to the "
                             f"trivial point", branch, alpha, dataclasses.replace(fp, branch="trivial"))
    if not fp.converged:
        # a caller that tries again (a continuation step) reports what its tries end in instead
        log.log(logging.WARNING if warn else logging.INFO, "alpha=%g %s: %s", alpha, branch,
                fp.diagnostics["reason"])
    return fp


def _fixed_point(model: BoundModel, spec: ModelSpec, alpha: float, branch: str, prec: Precision,
                 coarse: RuleSolution, fine: RuleSolution, wall_time: float) -> FixedPoint:
    """The reported fixed point: the fine rule's values, the error estimates of
    :func:`solve_branch`, and its status (:func:`assess`)."""
    single = coarse is fine
    outputs = {}
    for tag, sol in (("c", coarse), ("f", fine)):
        ov, side = sol.overlaps, sol.side
        outputs[tag] = {
            **dict(zip(ALL_NAMES, np.concatenate([ov.as_array(), side.hats.as_array()]))),
            "test_error": test_error(model, ov, prec.test_n),
            "train_loss": free_energy(model, ov, side.hats, alpha, side.mean_envelope),
        }
    ov_f, side_f, r8_f = fine.overlaps, fine.side, fine.residual8
    te_check = test_error(model, ov_f, prec.test_check_n)
    error = {k: (float("nan") if single else abs(outputs["f"][k] - outputs["c"][k])) for k in outputs["f"]}
    error["test_error"] += abs(te_check - outputs["f"]["test_error"])
    # the solver's own contribution: residual times the scale of each component
    for k in ALL_NAMES:
        error[k] += r8_f * max(abs(outputs["f"][k]), 1e-12)
    values = {**outputs["f"], "test_error": te_check}
    solved = bool(coarse.converged and fine.converged and r8_f < prec.residual_tol)
    stopped = fine.stopped or coarse.stopped
    status, reason = assess(branch, values, error, r8_f, solved, prec, stopped, estimated=not single)
    at_floor = solved and (coarse.at_floor or fine.at_floor)
    return FixedPoint(
        alpha=float(alpha), branch=branch, overlaps=ov_f, hats=side_f.hats,
        test_error=te_check, train_loss=outputs["f"]["train_loss"],
        converged=status == CONVERGED,
        iterations=coarse.iterations + (0 if single else fine.iterations), residual=r8_f, error=error,
        diagnostics={
            "thetahat_other_form": side_f.thetahat_other_form,
            "Vhat_other_form": side_f.Vhat_other_form,
            "unresolved_weight": side_f.channel.unresolved_weight,
            "max_prox_gradient": side_f.channel.max_gradient_norm,
            "switch_fraction": side_f.channel.switch_fraction,
            "map_evaluations": coarse.evaluations + (0 if single else fine.evaluations),
            "mean_envelope": side_f.mean_envelope,
            "coarse_residual": coarse.residual8,
            "reason": reason,
            # converged at the map's noise floor: the residual stopped falling between the
            # solver's tol and the precision's acceptance tolerance (still below the latter)
            "at_floor": at_floor,
        },
        model=spec, precision=prec.name, wall_time=wall_time, status=status,
        continuation_pairs=coarse.history,
    )

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
import logging
import time
from typing import Optional

import numpy as np

from derivations import ModelSpec

from .bound_model import BoundModel, bind
from .channel.rule import ChannelRule
from .overlaps import ALL_NAMES, COMPETING_BRANCHES, FIXED_ZERO, Overlaps
from .precision import PRECISIONS, Precision
from .result import FixedPoint
from .saddle_point import free_energy, test_error, update_hat_overlaps, update_overlaps
from .solver import SolverError, solve_fixed_point
from .start_search import search_starts

log = logging.getLogger(__name__)

DEFAULT_START = {
    "semantic": Overlaps(q=0.11, m=0.0, V=12.0, theta=0.15),
    "positional": Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0),
    "trivial": Overlaps(q=0.01, m=0.0, V=20.0, theta=0.0),
}


class _Map:
    """``x -> F(x)`` over the free overlaps of a branch; remembers the last channel side."""

    def __init__(self, model: BoundModel, alpha: float, branch: str, rule: ChannelRule):
        self.model, self.alpha, self.rule = model, alpha, rule
        self.zero = [("q", "m", "V", "theta").index(n) for n in FIXED_ZERO[branch]]
        self.free = [i for i in range(4) if i not in self.zero]
        self.evaluations = 0
        self.last = None  # (x_free, channel side) of the last evaluation

    def full(self, x_free) -> np.ndarray:
        x = np.zeros(4)
        x[self.free] = x_free
        return x

    def __call__(self, x_free):
        ov = Overlaps.from_array(self.full(x_free))
        ov.validate()
        if ov.theta**2 >= self.model.spec.rho * ov.q:
            # Cauchy-Schwarz for the Gaussian pair (h, h*) of docs/theory.md, section 2.2: outside, the
            # covariance is not positive (numpy would warn and return NaN); the solver
            # shortens a step that lands here
            raise FloatingPointError(f"theta^2 >= rho q at {ov}: the covariance is not positive")
        side = update_hat_overlaps(self.model, ov, self.alpha, self.rule)
        self.evaluations += 1
        self.last = (np.array(x_free, dtype=float), side)
        new = update_overlaps(self.model, side.hats).as_array()
        return new[self.free]


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


# a solve gives up once its residual has not halved in this many iterations. Healthy
# solves halve it every 1-3 iterations (Anderson) or ~every 7 (the damped retry);
# solves that stall are those past a fold, which otherwise spent up to 80 + 240
# evaluations failing (docs/numerics.md, section 4)
STALL_WINDOW = 20


class BranchLost(RuntimeError):
    """The iteration left the branch: its defining overlap fell below ``lost_below``."""


def solve_with_rule(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, start: Overlaps,
                    tol: float, maxiter: int = 80, damping: float = 0.5,
                    seed: Optional["RuleSolution"] = None, lost_below: Optional[float] = None,
                    history: tuple = ()) -> RuleSolution:
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
    def checked_from_start(skip_history_attempt=False):
        return solve_on_map(model, alpha, branch, rule, start, tol, maxiter, damping, seed, lost_below, history,
                             skip_history_attempt=skip_history_attempt)

    if not rule.check_global or (seed is not None and seed.checks_moved):
        return dataclasses.replace(checked_from_start(), checks_moved=seed is not None and seed.checks_moved)
    try:
        approach = solve_on_map(model, alpha, branch, dataclasses.replace(rule, check_global=False), start, tol,
                                 maxiter, damping, seed, lost_below, history, first_attempt_only=True)
    except (BranchLost, SolverError):
        approach = None
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
                            lost_below=lost_below)
    return dataclasses.replace(checked, iterations=approach.iterations + checked.iterations,
                               evaluations=approach.evaluations + checked.evaluations,
                               checks_moved=checked.evaluations > 1)


def solve_on_map(model: BoundModel, alpha: float, branch: str, rule: ChannelRule, start: Overlaps,
                  tol: float, maxiter: int = 80, damping: float = 0.5,
                  seed: Optional["RuleSolution"] = None, lost_below: Optional[float] = None,
                  history: tuple = (), first_attempt_only: bool = False,
                  skip_history_attempt: bool = False) -> RuleSolution:
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

    ``lost_below``: raise :class:`BranchLost` as soon as an iterate's ``theta/sigma^2``
    (semantic) or ``|m|`` (positional) is below it. A solve that collapses onto the
    trivial branch otherwise spends most of its evaluations converging that overlap
    to zero.

    The reported point is ``P = (x, hats(x))`` at the solver's last iterate ``x``;
    its undamped residual is ``update_overlaps(hats(x)) - x`` in all four overlaps
    (the imposed zeros included) and exactly zero in the four conjugates, so it
    costs no extra evaluation of the map.
    """
    F = _Map(model, alpha, branch, rule)
    x0 = start.as_array()[F.free]
    floor = np.array([1e-8, 1e-6, 1e-8, 1e-6])[F.free]
    if seed is not None and seed.history and np.array_equal(seed.history[-1][0], x0):
        history = seed.history
    # A borrowed history can mislead: across a long continuation step (the thresholds'
    # draft scan steps 0.25 in alpha) its first Anderson step once collapsed the
    # positional branch at omega = 0, which then looked like a spinodal. So a seeded
    # attempt that fails is repeated without it. The positional iteration oscillates
    # (Jacobian eigenvalues below -1): if the accelerated iteration fails, retry more
    # heavily damped with a short history. A solve that starts from another rule's
    # solution at the same alpha (``seed``) starts within that rule's quadrature error
    # of its fixed point: if it stalls there, this rule has no fixed point nearby (past
    # its fold), and retrying cost up to 80 evaluations of the reporting rule at the
    # positional folds. Such a solve normally converges in 2-5 evaluations, so it is
    # also given half the stall window.
    final_stall = seed is not None
    attempts = ([(damping, 4, maxiter, history)] if history else []) + [(damping, 4, maxiter, ()),
                                                                         (0.2, 2, 3 * maxiter, ())]
    if skip_history_attempt and history:
        attempts = attempts[1:]
    attempts = attempts[:1] if first_attempt_only else attempts
    for k, (beta, depth, iters, hist) in enumerate(attempts):
        try:
            res = solve_fixed_point(F, x0, tol=tol, maxiter=iters, damping=beta, anderson=depth, floor=floor,
                                    history=hist, callback=_lost_check(F, model, branch, lost_below),
                                    stall_window=STALL_WINDOW // 2 if final_stall else STALL_WINDOW)
        except BranchLost:
            if not hist or first_attempt_only:
                raise
            log.debug("alpha=%g %s: lost from the seeded start; retrying without the history", alpha, branch)
            continue
        except SolverError:
            if k == len(attempts) - 1:
                raise
            continue
        if res.converged or (res.stalled and final_stall):
            break
    ov = Overlaps.from_array(F.full(res.x))
    if F.last is not None and np.array_equal(F.last[0], res.x):
        side = F.last[1]
    else:
        side = update_hat_overlaps(model, ov, alpha, rule)
    ov_next = update_overlaps(model, side.hats).as_array()
    x = ov.as_array()
    scale = np.maximum(np.abs(x), np.array([1e-8, 1e-6, 1e-8, 1e-6]))
    residual8 = float(np.max(np.abs(ov_next - x) / scale))
    return RuleSolution(ov, side, bool(res.converged), res.iterations, residual8, F.evaluations, res.pairs)


def _lost_check(F: "_Map", model: BoundModel, branch: str, lost_below: Optional[float]):
    if lost_below is None or branch not in COMPETING_BRANCHES:
        return None
    sigma2 = model.spec.sigma**2

    def check(iteration, x, residual):
        q, m, V, theta = F.full(x)
        value = abs(theta) / sigma2 if branch == "semantic" else abs(m)
        if value < lost_below:
            raise BranchLost(f"{branch} branch lost at alpha = {F.alpha}: iterate {value:.2e} < {lost_below:g} "
                             f"after {iteration} iterations")
    return check


def _on_branch(start: Overlaps, branch: str) -> Overlaps:
    return Overlaps.from_array([start.as_array()[i] if n not in FIXED_ZERO[branch] else 0.0
                                for i, n in enumerate(("q", "m", "V", "theta"))])


def _coarse_solve(model: BoundModel, alpha: float, branch: str, prec: Precision, start: Optional[Overlaps],
                  lost_below: Optional[float], history: tuple) -> RuleSolution:
    """The coarse-rule solve of :func:`solve_branch`. Without a ``start``, from the
    branch's default start and, where that fails (an error or ``converged=False``),
    from the best starts of :func:`start_search.search_starts` in turn (multi-start; the
    default starts are the softmax model's, see that module)."""
    tol = prec.coarse_tol or prec.tol
    if start is not None:
        return solve_with_rule(model, alpha, branch, prec.rule, _on_branch(start, branch), tol,
                               lost_below=lost_below, history=history)
    default = _on_branch(DEFAULT_START.get(branch, DEFAULT_START["semantic"]), branch)
    failures = []
    try:
        coarse = solve_with_rule(model, alpha, branch, prec.rule, default, tol, lost_below=lost_below,
                                 history=history)
        if coarse.converged:
            return coarse
        failures.append(f"default start: not converged (residual {coarse.residual8:.2e})")
    except (SolverError, FloatingPointError) as exc:
        coarse = None
        failures.append(f"default start: {exc}")
    # a start needs no precision: the draft rule ranks the grid (about 5x cheaper than the fast coarse rule)
    for searched in search_starts(model, alpha, branch, PRECISIONS["draft"].rule):
        try:
            sol = solve_with_rule(model, alpha, branch, prec.rule, searched, tol, lost_below=lost_below)
        except (SolverError, FloatingPointError) as exc:
            failures.append(f"searched start {searched}: {exc}")
            continue
        if sol.converged:
            log.info("alpha=%g %s: default start failed, solved from the searched start %s", alpha, branch,
                     searched)
            return sol
        failures.append(f"searched start {searched}: not converged (residual {sol.residual8:.2e})")
        coarse = coarse or sol
    if coarse is None:
        raise SolverError(f"alpha={alpha} {branch}: no start converged ({'; '.join(failures)})")
    log.info("alpha=%g %s: no start converged (%s)", alpha, branch, "; ".join(failures))
    return coarse


def solve_branch(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                 start: Optional[Overlaps] = None, model: Optional[BoundModel] = None,
                 lost_below: Optional[float] = None, history: tuple = ()) -> FixedPoint:
    """Solve one branch at one ``alpha`` with error estimates.

    The fixed point is solved with the precision mode's coarse rule, then again
    with its finer rule from there; the finer values are reported and the
    difference is their error estimate (plus the test-error quadrature error and
    the solver residual). ``converged`` requires both solves to converge.

    ``history``: the ``continuation_pairs`` of a solution at a nearby ``alpha``; the
    coarse solve starts with their Jacobian information.

    ``start``: where the coarse solve starts; by default the branch's
    ``DEFAULT_START`` and, if the solve from there fails, searched starts
    (:func:`_coarse_solve`).
    """
    if branch not in FIXED_ZERO:
        raise ValueError(f"branch: unknown branch {branch!r}; choose from {', '.join(FIXED_ZERO)}")
    if not alpha > 0:
        raise ValueError(f"alpha: must be > 0, got {alpha}")
    prec = PRECISIONS[precision]
    model = model or bind(spec)
    t_start = time.perf_counter()
    coarse = _coarse_solve(model, alpha, branch, prec, start, lost_below, history)
    # a coarse solve that did not converge (stalled past a fold, say) gives no start
    # for the fine one: the point is reported as it is, not converged, with no estimate
    single = prec.rule == prec.check_rule or not coarse.converged
    fine = coarse if single else solve_with_rule(model, alpha, branch, prec.check_rule, coarse.overlaps, prec.tol,
                                                 seed=coarse)
    ov_c, side_c, r8_c = coarse.overlaps, coarse.side, coarse.residual8
    ov_f, side_f, r8_f = fine.overlaps, fine.side, fine.residual8
    outputs = {}
    for tag, ov, side in (("c", ov_c, side_c), ("f", ov_f, side_f)):
        outputs[tag] = {
            **dict(zip(ALL_NAMES, np.concatenate([ov.as_array(), side.hats.as_array()]))),
            "test_error": test_error(model, ov, prec.test_n),
            "train_loss": free_energy(model, ov, side.hats, alpha, side.mean_envelope),
        }
    te_check = test_error(model, ov_f, prec.test_check_n)
    error = {k: (float("nan") if single else abs(outputs["f"][k] - outputs["c"][k])) for k in outputs["f"]}
    error["test_error"] += abs(te_check - outputs["f"]["test_error"])
    # the solver's own contribution: residual times the scale of each component
    for k in ALL_NAMES:
        error[k] += r8_f * max(abs(outputs["f"][k]), 1e-12)
    fp = FixedPoint(
        alpha=float(alpha), branch=branch, overlaps=ov_f, hats=side_f.hats,
        test_error=te_check, train_loss=outputs["f"]["train_loss"],
        converged=bool(coarse.converged and fine.converged and r8_f < prec.residual_tol),
        iterations=coarse.iterations + (0 if single else fine.iterations), residual=r8_f, error=error,
        diagnostics={
            "thetahat_other_form": side_f.thetahat_other_form,
            "Vhat_other_form": side_f.Vhat_other_form,
            "unresolved_weight": side_f.channel.unresolved_weight,
            "max_prox_gradient": side_f.channel.max_gradient_norm,
            "switch_fraction": side_f.channel.switch_fraction,
            "map_evaluations": coarse.evaluations + (0 if single else fine.evaluations),
            "mean_envelope": side_f.mean_envelope,
            "coarse_residual": r8_c,
        },
        model=spec, precision=precision, wall_time=time.perf_counter() - t_start,
        continuation_pairs=coarse.history,
    )
    if not fp.converged:
        log.warning("alpha=%g %s: not converged (residual %.2e)", alpha, branch, fp.residual)
    return fp

"""Failures of the solver are reported as what they are: a point under its own name, a
bounded solve, an error estimate that is a result, finite numbers, a range that is stated,
and a threshold or a reason why there is none (docs/numerics.md, sections 4-6)."""
import dataclasses
import json
import math
import subprocess
import sys
import time
import numpy as np
import pytest

from derivations import ModelSpec
from numerics.api import BranchNotFound, FixedPoint, Overlaps, solve, solve_all
from numerics.precision import PRECISIONS
from numerics.result import CONVERGED, NON_FINITE, NOT_CONVERGED, UNRESOLVED, assess
from numerics.solver.root_finding import NoRootInRange, RootFindingError, UndefinedAt, safeguarded_newton, safeguarded_secant
from numerics.solver.iteration import Budget, solve_fixed_point
from numerics.solver_range import ALPHA_MAX, OutsideSolverRange

SPEC = ModelSpec()
SEMANTIC_START = Overlaps(q=0.06, m=0.0, V=20.0, theta=0.07)


# --- a result under its own name -------------------------------------------------------------

def test_a_semantic_solve_below_its_spinodal_raises_with_the_trivial_point():
    """Below the semantic spinodal (~0.51) the semantic solve falls onto theta = 0: that is
    the trivial point, reported as such, not a semantic result."""
    with pytest.raises(BranchNotFound) as caught:
        solve(SPEC, 0.3, "semantic", "draft", start=SEMANTIC_START)
    exc = caught.value
    assert str(exc).startswith("semantic branch not found at alpha = 0.3: the solve fell to the trivial point")
    assert exc.branch == "semantic" and exc.alpha == 0.3
    assert exc.point.branch == "trivial" and abs(exc.point.overlaps.theta) < 1e-8 and exc.point.overlaps.m == 0
    assert "theta = " in str(exc)


def test_solve_all_leaves_out_a_branch_not_found_and_keeps_a_failed_one(monkeypatch):
    """``solve_all`` lists the branches found; a branch whose solve failed to converge is
    reported (``converged=False``), since a failure is not an absence."""
    from numerics import api

    @dataclasses.dataclass(frozen=True)
    class Point:
        alpha: float
        branch: str
        converged: bool
        train_loss: float = 1.0
        global_minimum: object = None
        error: dict = dataclasses.field(default_factory=dict)
        diagnostics: dict = dataclasses.field(default_factory=dict)

    def fake(spec, alpha, branch, precision, integrator="auto", start=None):
        if branch == "semantic":
            raise BranchNotFound("semantic branch not found at alpha = 0.3", branch, alpha)
        return Point(alpha, branch, converged=branch == "trivial")

    monkeypatch.setattr(api, "solve", fake)
    points = solve_all(SPEC, 0.3, "draft")
    assert [p.branch for p in points] == ["positional", "trivial"]
    assert [p.global_minimum for p in points] == [False, True]


# --- error estimates, non-finite numbers -----------------------------------------------------

def _values(**changes):
    values = dict(q=0.1, m=0.0, V=12.0, theta=0.15, qhat=1e-3, mhat=0.0, Vhat=0.08, thetahat=0.07,
                  test_error=1e-3, train_loss=3e-3)
    values.update(changes)
    return values


def test_an_error_estimate_at_or_above_its_value_is_not_a_result():
    fast = PRECISIONS["fast"]
    values = _values()
    error = {k: 1e-6 * abs(v) for k, v in values.items()}
    error["m"] = error["mhat"] = 1e-18  # exact zeros on the semantic branch: their estimate is no concern
    assert assess("semantic", values, error, 1e-8, True, fast) == (CONVERGED, "")
    status, reason = assess("semantic", values, {**error, "Vhat": 0.08}, 1e-8, True, fast)
    assert status == UNRESOLVED and "Vhat = 0.08 +- 0.08" in reason
    # on the positional branch m is not zero by symmetry: an estimate above it is unresolved
    status, reason = assess("positional", values, error, 1e-8, True, fast)
    assert status == UNRESOLVED and reason.startswith("error estimate at or above the value: m = 0")
    status, reason = assess("semantic", {**values, "q": math.nan}, error, 1e-8, True, fast)
    assert status == NON_FINITE and "q" in reason
    status, reason = assess("semantic", values, error, 3e-5, False, fast, "stalled")
    assert status == NOT_CONVERGED and "residual 3.00e-05" in reason and "stalled" in reason
    # draft has one rule: no estimate (NaN) is not a non-finite estimate
    nan_error = {k: math.nan for k in values}
    assert assess("semantic", values, nan_error, 1e-8, True, PRECISIONS["draft"])[0] == CONVERGED


# --- bounded work ----------------------------------------------------------------------------

def _noisy_contraction(noise):
    """``x -> 0.5 x + 1`` plus a deterministic rough term of relative size ``noise``: a map
    that is smooth only to ``noise``, like the quadrature's (docs/numerics.md, section 4)."""
    calls = {"n": 0}

    def F(x):
        calls["n"] += 1
        return 0.5 * x + 1.0 + noise * np.sin(1e9 * x)

    return F, calls


def test_a_solve_that_stalls_below_the_acceptance_tolerance_is_converged_at_the_floor():
    F, _ = _noisy_contraction(1e-7)
    res = solve_fixed_point(F, np.zeros(1), tol=1e-10, maxiter=200, anderson=0, damping=1.0, stall_window=10,
                            accept_tol=1e-5)
    assert res.converged and res.at_floor and res.stopped == "" and 1e-10 < res.residual < 1e-5
    strict = solve_fixed_point(F, np.zeros(1), tol=1e-10, maxiter=200, anderson=0, damping=1.0, stall_window=10,
                               accept_tol=1e-9)
    assert not strict.converged and strict.stopped == "stalled" and not strict.at_floor


def test_a_budget_bounds_the_evaluations_and_returns_the_best_iterate():
    slow = lambda x: 0.999 * x + 0.001  # noqa: E731  (converges, but in ~20000 steps)
    budget = Budget(max_evaluations=50)
    res = solve_fixed_point(slow, np.zeros(1), tol=1e-12, maxiter=10**6, anderson=0, budget=budget)
    assert not res.converged and budget.evaluations == 50
    assert res.stopped == "evaluation budget of 50 map evaluations spent"
    assert res.residual == min(res.history)  # the best iterate, with its residual
    timed = Budget(seconds=0.2)
    t0 = time.monotonic()

    def sleepy(x):
        time.sleep(0.01)
        return slow(x)

    res = solve_fixed_point(sleepy, np.zeros(1), tol=1e-12, maxiter=10**6, anderson=0, budget=timed)
    assert not res.converged and res.stopped.startswith("time limit") and time.monotonic() - t0 < 1.0


def test_a_solve_branch_out_of_budget_is_reported_not_converged_with_its_residual(monkeypatch):
    """With the precision's evaluation budget cut to 3, a solve from a far start stops
    there: ``converged=False``, the residual, and the reason; no other start is tried."""
    from numerics.fixed_points import lines as fixed_point

    tight = dataclasses.replace(PRECISIONS["draft"], max_evaluations=3)
    monkeypatch.setitem(fixed_point.PRECISIONS, "draft", tight)
    fp = fixed_point.solve_branch(SPEC, 2.0, "semantic", "draft")
    assert fp.status == NOT_CONVERGED and not fp.converged
    assert "evaluation budget of 3 map evaluations spent" in fp.diagnostics["reason"]
    assert fp.residual > 1e-5 and fp.diagnostics["map_evaluations"] <= 4


def test_alpha_and_lam_outside_the_solvable_range_are_refused_at_once():
    t0 = time.perf_counter()
    with pytest.raises(OutsideSolverRange) as caught:
        solve(SPEC, 1e9, "semantic", "draft")
    assert caught.value.parameter == "alpha" and f"alpha <= {ALPHA_MAX:g}" in str(caught.value)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(OutsideSolverRange) as caught:
        solve(ModelSpec(lam=0.0), 0.5, "positional", "draft")
    assert caught.value.parameter == "lam" and "lam > 0" in str(caught.value)
    assert time.perf_counter() - t0 < 1.0


def test_the_command_line_refuses_alpha_out_of_range_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "attnphase.cli", "solve", "--alpha", "1e9", "--precision", "draft"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "alpha" in proc.stderr and "Traceback" not in proc.stderr


# --- root finding where a branch ends --------------------------------------------------------

def test_root_finding_cuts_the_range_where_the_function_is_undefined():
    """``F_pos - F_sem`` exists only where both branches do: a step beyond a branch's end
    cuts the range there instead of failing; a root beyond that end is not in the range."""
    end = 0.7

    def difference(alpha, root=0.65):
        if alpha > end:
            raise UndefinedAt(f"the positional branch ends below alpha = {alpha:.3g}")
        d = alpha - root
        return d + 3 * d**2, 0.05  # a derivative 20 times too small: every Newton step overshoots

    alpha, step = safeguarded_newton(difference, 0.55, 1e-9, 0.5, 1.0, True)
    assert abs(alpha - 0.65) < 1e-8
    with pytest.raises(NoRootInRange, match="where the positional branch ends"):
        safeguarded_newton(lambda a: difference(a, root=0.8), 0.55, 1e-9, 0.5, 1.0, True)
    root = safeguarded_secant(lambda a: difference(a)[0], 0.55, 0.6, 1e-9, bracket=(0.5, 1.0),
                              positive_at_hi=True).root
    assert abs(root - 0.65) < 1e-8


def test_the_secant_stops_without_solving_at_its_last_steps_end():
    """Each value costs a solve, so the secant method stops once the next step is below ``xtol``
    without solving at the step's end: that end is the root, far closer to the true one than the step
    reported as its error, and the last solved point lies that step away."""
    calls = []

    def g(alpha):
        calls.append(alpha)
        return (1.3 - alpha) * (1.0 + 0.4 * (alpha - 1.3))  # positive below the root

    for start in [dict(a1=1.5), dict(a1=None, slope_guess=-0.9)]:
        calls.clear()
        root, step, _, solved = safeguarded_secant(g, 1.0, xtol=1e-6, bracket=(0.5, 2.0), **start)
        assert calls[-1] == solved and abs(root - solved) == pytest.approx(step, rel=1e-12)
        assert step < 1e-6 and abs(root - 1.3) < 1e-3 * step


def test_a_secant_started_at_its_root_solves_once():
    """With another rule's slope, a start whose Newton step is already below ``xtol`` needs no second
    point: the step's end is the root, the step its error, after one solve (a second point solved
    only for the slope cost a solve of the reporting rule). A slope 5% off moves the end by 5% of
    the step."""
    calls = []

    def g(alpha):
        calls.append(alpha)
        return (1.3 - alpha) * (1.0 + 0.4 * (alpha - 1.3))  # slope -1 at the root

    start = 1.3 + 2e-8
    root, step, slope, solved = safeguarded_secant(g, start, None, 1e-6, slope_guess=-0.95, bracket=(0.5, 2.0))
    assert calls == [start] and solved == start and slope == -0.95
    assert 0 < step < 1e-6 and abs(root - 1.3) < 0.06 * step
    # a start farther than xtol from the root still takes the secant's steps
    calls.clear()
    root, step, _, _ = safeguarded_secant(g, 1.3 + 2e-5, None, 1e-6, slope_guess=-0.95, bracket=(0.5, 2.0))
    assert len(calls) > 1 and abs(root - 1.3) < 1e-9


def test_the_secant_stops_where_the_function_no_longer_resolves_the_step():
    """Near a root, a fixed-point solve whose start already meets its tolerance returns the
    same point, so ``g`` takes one value at two alphas (at sigma = 0.3 the test error at
    alpha = 71.833 over a step of 6e-6). The root is then known to that step: returned with it
    as its error where the step is below the resolved spacing, not a failure; a flat function
    far from any root still fails."""
    root = 71.83301

    def resolved(alpha, resolution=1e-5):
        return -1e-7 * round((alpha - root) / resolution) * resolution

    a, step, _, _ = safeguarded_secant(resolved, 71.8315, None, 1e-9, slope_guess=-1e-7, bracket=(68.0, 75.0))
    assert abs(a - root) <= 1e-5 and 0 < step < 1e-5 and abs(a - root) <= 2 * step + 1e-5
    with pytest.raises(RootFindingError):
        safeguarded_secant(lambda a: 1.0, 1.0, 2.0, 1e-9, bracket=(0.5, 3.0))


# --- a solve stalled at the map's noise floor ------------------------------------------------

def test_a_draft_solve_stalled_at_the_noise_floor_is_converged():
    """At omega = 0 the draft semantic solve at alpha = 2 stalls near 4e-7, below draft's
    acceptance tolerance 1e-5 but above its solver tolerance 1e-8: a converged solve at that
    precision, said so in the diagnostics."""
    fp = solve(ModelSpec(omega=0.0), 2.0, "semantic", "draft")
    assert fp.converged and fp.status == CONVERGED
    assert fp.residual < PRECISIONS["draft"].residual_tol
    if fp.residual > PRECISIONS["draft"].tol:
        assert fp.diagnostics["at_floor"]


def test_fixed_point_to_dict_is_json_safe_for_non_finite_values():
    base = solve(SPEC, 2.0, "semantic", "draft", start=Overlaps(q=0.115, m=0.0, V=12.7, theta=0.158))
    broken = dataclasses.replace(base, test_error=math.nan, status=NON_FINITE, converged=False)
    d = broken.to_dict()
    assert d["test_error"] is None and d["null_reasons"]["test_error"] == "not finite (nan)"
    json.dumps(d, allow_nan=False)
    assert isinstance(base, FixedPoint)


def test_the_root_finder_converges_where_the_fixed_point_repels_the_iteration():
    """Eigenvalues 2.5 and -2 of the map's Jacobian: the plain iteration runs away from the
    fixed point, the root finder on x - F(x) (a noisy map, smooth only to 1e-9) converges to it."""
    from numerics.solver.iteration import root_fixed_point

    A = np.array([[2.0, 1.0], [1.5, -1.5]])  # eigenvalues 2.5 and -2
    b = np.array([0.3, -0.2])
    exact = np.linalg.solve(np.eye(2) - A, b)

    def F(x):
        return A @ x + b + 1e-9 * np.sin(1e9 * x)

    picard = solve_fixed_point(F, np.zeros(2), tol=1e-8, maxiter=60, anderson=0, stall_window=20)
    assert not picard.converged
    res = root_fixed_point(F, np.zeros(2), tol=1e-7, max_evaluations=30, scale=np.ones(2))
    assert res.converged and np.allclose(res.x, exact, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("residual, stands", [(0.7, True), (3e-3, False)])
def test_a_collapse_stands_where_the_root_search_comes_near_no_fixed_point(monkeypatch, residual, stands):
    """After the iteration collapsed onto the trivial point, the root finder looks for a fixed point
    that repelled it. A search that stops far from every fixed point (residual above WANDERED) found
    none, and the collapse stands (BranchLost); one that stalls near a point is a failure there, its
    best point returned unconverged."""
    from numerics.fixed_points import root_fallback as rf
    from numerics.fixed_points.errors import BranchLost
    from numerics.fixed_points.lines import line_map
    from numerics.model.bound import bind
    from numerics.solver.iteration import FixedPointResult

    def wandering(G, z0, **kw):
        return FixedPointResult(z0, z0, False, 40, residual, stopped="40 evaluations of the root finder spent")

    monkeypatch.setattr(rf, "root_fixed_point", wandering)
    F = line_map(bind(SPEC), 1.0, "positional", PRECISIONS["draft"].rule)
    lost = BranchLost("positional branch lost", "positional", 1.0)
    call = lambda: rf.root_fallback(F, SPEC.rho, "positional", None, np.array([0.05, 0.259, 14.0]), 1e-8,  # noqa: E731
                                    1e-5, None, np.full(3, 1e-8), None, lost)
    if stands:
        with pytest.raises(BranchLost):
            call()
    else:
        res = call()
        assert not res.converged and res.residual == residual


def test_the_root_search_after_a_failed_iteration_starts_from_the_maps_first_evaluation(monkeypatch):
    """A deterministic map (the line quadrature's) answers its first point again from memory, and the
    root finder's first evaluation is at the start itself (not its round trip through the domain
    coordinates): after an iteration from ``x0`` failed, the root search from ``x0`` costs one
    evaluation fewer, with the value the map gave there."""
    from numerics.fixed_points import root_fallback as rf
    from numerics.fixed_points.lines import line_map
    from numerics.model.bound import bind
    from numerics.solver.iteration import FixedPointResult

    F = line_map(bind(SPEC), 1.0, "positional", PRECISIONS["draft"].rule)
    x0 = np.array([0.05, 0.259, 14.0])
    first = F(x0)
    assert F.evaluations == 1
    assert np.array_equal(F(x0), first) and F.evaluations == 1
    F(x0 * (1 + 1e-9))
    assert F.evaluations == 2
    seen = []

    def one_evaluation(G, z0, **kw):
        seen.append(G(z0))
        return FixedPointResult(z0, seen[0], False, 1, 0.7, stopped="one evaluation")

    monkeypatch.setattr(rf, "root_fixed_point", one_evaluation)
    rf.root_fallback(F, SPEC.rho, "positional", None, x0, 1e-8, 1e-5, None, np.full(3, 1e-8), None, None)
    assert F.evaluations == 2
    coords = rf.DomainCoordinates.of(F, SPEC.rho)
    assert np.array_equal(seen[0], coords.to_z(first))


def test_the_positional_branch_at_sigma_1_falls_from_its_anchor_start_and_is_not_found():
    """At ``sigma = 1`` (``omega = 0.25``, ``lam = 0.01``) the positional iteration from its anchor start
    falls onto ``m = 0``, flipping the sign of ``m`` at every step, and the root finder from the start
    comes near no fixed point: the attempt ends absent, not failed."""
    from numerics.branches.follow import ABSENT, ANCHORS, attempt_solve
    from numerics.fixed_points.lines import start_for_model
    from numerics.model.bound import bind

    spec = ModelSpec(sigma=1.0, lam=0.01, omega=0.25, A=((0.6, 0.4), (0.4, 0.6)))
    _, outcome, why = attempt_solve(spec, 3.0, "positional", "draft", start_for_model(ANCHORS["positional"][1], spec.rho),
                                    bind(spec), newton=True)
    assert outcome == ABSENT, why
    assert "positional branch lost" in why


def test_a_branch_the_solver_failed_to_find_is_a_failure_not_an_absence(monkeypatch):
    """The thresholds need both branches: a branch whose every anchor attempt fell onto the
    trivial point is absent (BranchAbsent, a reason); one where the solver failed is a
    SolverError, even after the scan is extended on both sides."""
    from numerics.thresholds import deterministic
    from numerics.branches.follow import BranchCurve
    from numerics.solver.iteration import SolverError
    from numerics.thresholds.locate import locate_thresholds
    from numerics.thresholds.record import BranchAbsent
    from numerics.thresholds.scan import ScanPoint

    def point(alpha):
        return ScanPoint(alpha, "semantic", Overlaps(0.1, 0.0, 12.0, 0.15), 1e-3, 3e-3, "draft")

    def fake_follow(failure):
        def follow(spec, alphas, branch, precision, anchor=None, bisections=4, progress=None, **kw):
            if branch == "semantic":
                return BranchCurve(branch, [point(a) for a in alphas], [])
            return BranchCurve(branch, [], [], "positional branch not found", failure=failure)
        return follow

    monkeypatch.setattr(deterministic, "follow_branch", fake_follow("the solver failed at every anchor (stalled)"))
    with pytest.raises(SolverError, match="the solver failed at every anchor"):
        locate_thresholds(SPEC, "draft")
    monkeypatch.setattr(deterministic, "follow_branch", fake_follow(""))
    with pytest.raises(BranchAbsent, match="positional branch was not found on alpha in"):
        locate_thresholds(SPEC, "draft")


@pytest.mark.parametrize("residual, absent", [(0.6, True), (3e-3, False)])
def test_a_start_that_wanders_far_from_any_fixed_point_does_not_hide_an_absence(monkeypatch, residual, absent):
    """The default start falls onto the trivial point and the one searched start stops
    unconverged: at a residual of 0.6 it never came near a fixed point and the branch is not
    found (BranchNotFound); at 3e-3 it may be near one, so the solve is a failure reported
    as it is (``converged=False``)."""
    from numerics.fixed_points import lines as fpm

    real_solve_with_rule = fpm.solve_with_rule

    def fake_solve_with_rule(model, alpha, branch, rule, start, tol, lost_below=None, **kwargs):
        if start.m == 0.259:  # the default positional start
            raise fpm.BranchLost("positional branch lost", branch, alpha)
        base = real_solve_with_rule(model, alpha, branch, rule, start, tol, maxiter=1)
        return dataclasses.replace(base, converged=False, residual8=residual, stopped="stalled")

    monkeypatch.setattr(fpm, "solve_with_rule", fake_solve_with_rule)
    monkeypatch.setattr(fpm, "search_starts", lambda *a, **k: [Overlaps(q=0.3, m=0.5, V=3.0, theta=0.0)])
    monkeypatch.setattr(fpm, "DEFAULT_START", {**fpm.DEFAULT_START,
                                               "positional": Overlaps(q=0.05, m=0.259, V=14.0, theta=0.0)})
    if absent:
        with pytest.raises(BranchNotFound, match="wandered far from any fixed point"):
            solve(SPEC, 1.0, "positional", "draft")
    else:
        fp = solve(SPEC, 1.0, "positional", "draft")
        assert not fp.converged and fp.status == NOT_CONVERGED


def test_a_start_that_stops_unconverged_at_the_trivial_point_has_fallen(monkeypatch):
    """The default start falls onto the trivial point and the one searched start stops unconverged
    near a fixed point (residual 3e-3) but with ``|m|`` below ``COLLAPSE``, where the branch has
    merged with the trivial point: that start fell too, and the branch is not found."""
    from numerics.fixed_points import lines as fpm
    from numerics.overlaps import COLLAPSE

    real_solve_with_rule = fpm.solve_with_rule

    def fake_solve_with_rule(model, alpha, branch, rule, start, tol, lost_below=None, **kwargs):
        if start.m == 0.259:  # the default positional start
            raise fpm.BranchLost("positional branch lost", branch, alpha)
        base = real_solve_with_rule(model, alpha, branch, rule, start, tol, maxiter=1)
        ov = Overlaps.of(base.overlaps)
        return dataclasses.replace(base, overlaps=Overlaps(q=ov.q, m=0.5 * COLLAPSE, V=ov.V, theta=0.0),
                                   converged=False, residual8=3e-3, stopped="stalled")

    monkeypatch.setattr(fpm, "solve_with_rule", fake_solve_with_rule)
    monkeypatch.setattr(fpm, "search_starts", lambda *a, **k: [Overlaps(q=0.3, m=0.5, V=3.0, theta=0.0)])
    monkeypatch.setattr(fpm, "DEFAULT_START", {**fpm.DEFAULT_START,
                                               "positional": Overlaps(q=0.05, m=0.259, V=14.0, theta=0.0)})
    with pytest.raises(BranchNotFound, match="fell toward the trivial point, not converged there"):
        solve(SPEC, 1.0, "positional", "draft")


@pytest.mark.parametrize("outcomes, failed", [(("absent", "wandered"), False), (("wandered",), True),
                                              (("absent", "failed"), True)])
def test_anchor_attempts_that_only_wander_beside_falls_onto_the_trivial_point_show_an_absence(
        monkeypatch, outcomes, failed):
    """Along the anchor search, a start that wandered far from any fixed point says nothing;
    the branch is absent where other starts fell onto the trivial point, and a failure
    where none did or where the solver failed near a point."""
    from numerics.branches import follow as branches

    calls = {"n": 0}

    def fake_attempt(spec, alpha, branch, precision, start, model, near=None, newton=False):
        outcome = outcomes[min(calls["n"], len(outcomes) - 1)]
        calls["n"] += 1
        return None, outcome, outcome

    monkeypatch.setattr(branches, "attempt_solve", fake_attempt)
    monkeypatch.setattr(branches, "search_starts", lambda *a, **k: [])
    curve = branches.follow_branch(SPEC, [1.0, 2.0], "positional", "draft")
    assert curve.points == []
    assert bool(curve.failure) is failed


def test_a_coarse_solve_seeded_by_a_cheaper_rule_reaches_the_same_point_in_fewer_evaluations(monkeypatch):
    """A precision with a ``seed_precision`` solves that precision's coarse rule (without the checks)
    first, from the given start, and starts its own coarse solve there with that history: the same
    fixed point to the solver's tolerance, in fewer evaluations of its own coarse rule. (The fast rules
    seeded by the draft one stand in for the high rules seeded by the fast ones.)"""
    import numerics.channel.lines.expectations as expectations

    fast = PRECISIONS["fast"]
    seeded = dataclasses.replace(fast, name="fast seeded by draft", seed_precision="draft")
    monkeypatch.setitem(PRECISIONS, seeded.name, seeded)
    counts = {}
    evaluate = expectations.channel_expectations

    def counted(model, ov, rule):
        counts[rule.n_eta] = counts.get(rule.n_eta, 0) + 1
        return evaluate(model, ov, rule)

    monkeypatch.setattr(expectations, "channel_expectations", counted)
    for start in (Overlaps(q=0.1, m=0.0, V=14.0, theta=0.14), None):  # a given start, the default one
        points = {}
        for name in (fast.name, seeded.name):
            counts.clear()
            points[name] = solve(SPEC, 2.0, "semantic", name, start=start), dict(counts)
        (plain, plain_counts), (fp, seeded_counts) = points[fast.name], points[seeded.name]
        assert plain.converged and fp.converged
        assert seeded_counts[PRECISIONS["draft"].rule.n_eta] > 0
        assert seeded_counts[fast.rule.n_eta] < plain_counts[fast.rule.n_eta]
        for name, value in plain.values.items():
            assert fp.values[name] == pytest.approx(value, rel=1e-6, abs=1e-12), name

"""Identities and pinned references for numerics (docs/theory.md, sections 2-3).

Each test can fail: the tolerances are the code's own error estimates or
quadrature-independent identities, never loosened to pass.
"""
import dataclasses
import json
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from derivations import ModelSpec
from numerics.baseline import teacher_moments, linear_baseline, linear_baseline_mp
from numerics.channel.lines import ChannelRule, channel_expectations
from numerics.fixed_points.lines import solve_branch, solve_with_rule
from numerics.model.bound import bind
from numerics.overlaps import HatOverlaps, Overlaps
from numerics.prox.scalar import global_prox, newton_prox
from numerics.solver.iteration import SolverError, solve_fixed_point
from numerics.channel.lines.expectations import update_hat_overlaps
from numerics.model.saddle_point import free_energy
from numerics.model.saddle_point import test_error as generalisation_error

SPEC = ModelSpec()
SMALL = ChannelRule(n_eta=16, n_r=8, n_u=6, n_t=16)
SEMANTIC_REF = Overlaps(q=0.114816, m=0.0, V=12.6686, theta=0.158157)  # docs/theory.md, section 3.8


@pytest.fixture(scope="module")
def model():
    return bind(SPEC)


@pytest.mark.parametrize("attention, q, m, V, newton_from_w_fails", [
    ("softmax", 0.05, 0.09, 24.0, True),  # the theta = 0 point where Newton from w alone fails most
    ("linear", 0.53, 0.0, 4.08, False),   # linear attention's trivial point at alpha = 1.5
])
def test_global_prox_matches_dense_grid_search(attention, q, m, V, newton_from_w_fails):
    """The disk bound |h - w| <= sqrt(2 V l(w)) makes a dense grid an exact reference."""
    model = bind(ModelSpec(attention=attention))
    rng = np.random.default_rng(0)
    n = 2000
    xi, y = rng.standard_normal((2, n)), rng.standard_normal((2, n))
    w1, w2, hs1, hs2 = model.preactivations(xi[0], xi[1], y[0], y[1], q, m, 0.0)
    h1, h2, f, gn = global_prox(model, w1, w2, hs1, hs2, V)
    radius = np.sqrt(2 * V * model.loss(w1, w2, hs1, hs2))
    g = np.linspace(-1, 1, 121)
    gx, gy = np.meshgrid(g, g)
    inside = gx**2 + gy**2 <= 1
    best = np.full(n, np.inf)
    b1, b2 = np.zeros(n), np.zeros(n)
    for a, b in zip(gx[inside], gy[inside]):
        c1, c2 = w1 + radius * a, w2 + radius * b
        with np.errstate(over="ignore"):  # exp overflow far out on the grid is the correct limit (0 or 1)
            fc = model.prox_objective(c1, c2, w1, w2, hs1, hs2, V)
        better = fc < best
        best, b1, b2 = np.where(better, fc, best), np.where(better, c1, b1), np.where(better, c2, b2)
    r1, r2, _, _ = newton_prox(model, b1, b2, w1, w2, hs1, hs2, V)
    ref = model.prox_objective(r1, r2, w1, w2, hs1, hs2, V)
    assert np.all(f <= ref + 1e-14)
    assert np.max(gn) < 1e-10
    # and Newton from w alone is not enough for the softmax (the reason for the safeguard)
    n1, n2, _, _ = newton_prox(model, w1, w2, w1, w2, hs1, hs2, V)
    assert np.any(model.prox_objective(n1, n2, w1, w2, hs1, hs2, V) > ref + 1e-10) == newton_from_w_fails


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_newton_terms_returned_and_reflected(attention):
    """``newton_prox`` returns the objective's terms at its result, and those at the reflected point
    ``-b`` follow from them (the loss is even in ``h``): ``f(-b) = f(b) + 2 b.w/V``,
    ``g(-b) = -2 w/V - g(b)``, ``H(-b) = H(b)``."""
    bound = bind(ModelSpec(attention=attention, A=((0.3, 0.7), (0.8, 0.2))))
    assert bound.loss_is_even
    rng = np.random.default_rng(7)
    w1, w2, hs1, hs2 = rng.standard_normal((4, 300))
    V = 5.0
    b1, b2, gn, f, terms = newton_prox(bound, w1, w2, w1, w2, hs1, hs2, V, tol=1e-12, return_terms=True)
    np.testing.assert_allclose(f, terms[0], rtol=1e-13, atol=1e-15)
    direct = bound.prox_newton(b1, b2, w1, w2, hs1, hs2, V)
    for got, want in zip(terms, direct):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gn, np.maximum(np.abs(terms[1]), np.abs(terms[2])), rtol=1e-12, atol=1e-15)
    f, g1, g2, H11, H12, H22 = terms
    reflected = bound.prox_newton(-b1, -b2, w1, w2, hs1, hs2, V)
    predicted = (f + 2 * (b1 * w1 + b2 * w2) / V, -2 * w1 / V - g1, -2 * w2 / V - g2, H11, H12, H22)
    for got, want in zip(predicted, reflected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_an_evaluation_with_the_checks_reuses_the_sides_followed_without_them(model, monkeypatch):
    """An evaluation with the global-prox checks at the overlaps of the last evaluation without them
    (where the solver confirms the fixed point it approached) does not follow the sides again, and
    gives the expectations of an evaluation from scratch to the bit; at other overlaps, or with
    another rule, the sides are followed afresh."""
    import numerics.channel.lines.accumulation as accumulation

    calls = []
    follow = accumulation.follow_paths
    monkeypatch.setattr(accumulation, "follow_paths", lambda *a, **k: calls.append(1) or follow(*a, **k))
    checked = dataclasses.replace(SMALL, band_split=True)
    unchecked = dataclasses.replace(checked, check_global=False)
    other = Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)
    for ov in (SEMANTIC_REF, other):
        channel_expectations(model, other if ov is SEMANTIC_REF else SEMANTIC_REF, checked)
        fresh = channel_expectations(model, ov, checked)  # another point before it: from scratch
        assert calls
        channel_expectations(model, ov, unchecked)
        calls.clear()
        again = channel_expectations(model, ov, checked)
        assert not calls
        assert again.expectations == fresh.expectations
        assert (again.unresolved_weight, again.max_gradient_norm, again.n_nodes) == \
            (fresh.unresolved_weight, fresh.max_gradient_norm, fresh.n_nodes)
        channel_expectations(model, ov, dataclasses.replace(checked, n_t=checked.n_t + 2))
        assert calls


def test_a_checked_evaluation_sums_again_only_the_blocks_whose_checks_changed_a_node(model, monkeypatch):
    """After an evaluation without the checks at the same overlaps, an evaluation with them evaluates
    the integrands only of the blocks of nodes where a check changed the prox, and gives the
    expectations of an evaluation from scratch to the bit, whichever blocks changed."""
    import numerics.channel.lines.accumulation as accumulation

    checked = dataclasses.replace(SMALL, band_split=True)
    unchecked = dataclasses.replace(checked, check_global=False)
    monkeypatch.setattr(accumulation, "BLOCK_NODES", 4096)  # several blocks of sides
    calls = []
    weighted_sums = accumulation._weighted_sums
    monkeypatch.setattr(accumulation, "_weighted_sums", lambda *a: calls.append(1) or weighted_sums(*a))
    check = accumulation._checked
    for flagged in (set(), {1}):
        seen = []

        def flagging(*a):
            # the same prox, reported as changed in the blocks ``flagged`` (by the first chunk of each)
            out = check(*a)
            seen.append(a[3].b1.size)
            return out[:4] + (out[4] or len(seen) - 1 in flagged,)

        channel_expectations(model, Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0), checked)
        fresh = channel_expectations(model, SEMANTIC_REF, checked)
        channel_expectations(model, SEMANTIC_REF, unchecked)
        calls.clear()
        monkeypatch.setattr(accumulation, "_checked", flagging)
        again = channel_expectations(model, SEMANTIC_REF, checked)
        monkeypatch.setattr(accumulation, "_checked", check)
        assert again.expectations == fresh.expectations
        assert (again.unresolved_weight, again.max_gradient_norm, again.n_nodes) == \
            (fresh.unresolved_weight, fresh.max_gradient_norm, fresh.n_nodes)
        assert fresh.unresolved_weight == 0.0  # no check changed a node here
        assert len(seen) > 2  # chunks of several blocks
        assert len(calls) == len(flagged)


def test_the_integrands_split_over_threads_give_the_same_sums(model, monkeypatch):
    """The channel integrands, and the global-minimum checks, evaluated in blocks side by side in the
    kernels' threads give the channel expectations of one thread to the bit (elementwise, summed
    chunk by chunk as before)."""
    import numerics.channel.lines.accumulation as accumulation

    for rule in (SMALL, dataclasses.replace(SMALL, check_global=False)):
        monkeypatch.setattr(accumulation, "CHUNK", 700)  # several blocks of checks
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "1")
        one = channel_expectations(model, SEMANTIC_REF, rule)
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "3")
        monkeypatch.setattr(accumulation, "PARALLEL_INTEGRANDS", 500)
        split = channel_expectations(model, SEMANTIC_REF, rule)
        monkeypatch.undo()
        assert split.expectations == one.expectations
        assert (split.unresolved_weight, split.max_gradient_norm) == (one.unresolved_weight, one.max_gradient_norm)


def test_the_sides_integrated_in_blocks_give_the_one_pass_expectations(model, monkeypatch):
    """The lines' sides followed and summed in blocks (``accumulation.side_blocks``: bounded
    temporaries for the high rules) give the one-pass channel expectations to rounding, at a
    switched semantic point and a positional one; each block holds at most its budget of nodes,
    and every side of every line is in exactly one block, with its own nodes, weights and start."""
    import numerics.channel.lines.accumulation as accumulation

    rule = dataclasses.replace(SMALL, use_symmetry=False)
    for ov in (SEMANTIC_REF, Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)):
        one = channel_expectations(model, ov, rule)
        monkeypatch.setattr(accumulation, "BLOCK_NODES", 3000)
        blocked = channel_expectations(model, ov, rule)
        monkeypatch.undo()
        assert blocked.n_nodes == one.n_nodes and blocked.unresolved_weight == one.unresolved_weight
        for name, value in one.expectations.items():
            assert blocked.expectations[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    rng = np.random.default_rng(3)
    pieces = []
    for K, n, switched in ((40, 90, True), (25, 130, False), (7, 11, True)):
        idx = rng.permutation(1000)[:n]
        start = (rng.normal(size=n), rng.normal(size=n)) if switched else None
        pieces.append((idx, rng.normal(size=(K, n)), rng.normal(size=(K, n)), start))
    assert accumulation.side_blocks(pieces, 10**6) == [pieces]
    blocks = accumulation.side_blocks(pieces, 1000)
    assert len(blocks) > 3 and all(max(p[1].shape[0] for p in b) * sum(p[0].size for p in b) <= 1000
                                   for b in blocks)
    def by_line(parts):
        return {(int(i), p[1].shape[0]): (tuple(p[1][:, j]), tuple(p[2][:, j]),
                                          None if p[3] is None else (p[3][0][j], p[3][1][j]))
                for p in parts for j, i in enumerate(p[0])}
    split = [p for b in blocks for p in b]
    assert sum(p[0].size for p in split) == sum(p[0].size for p in pieces) and by_line(split) == by_line(pieces)


def test_channel_two_forms_of_thetahat_agree_within_error_estimate(model):
    coarse = channel_expectations(model, SEMANTIC_REF, dataclasses.replace(SMALL, use_symmetry=False)).expectations
    fine_rule = ChannelRule(n_eta=24, n_r=10, n_u=8, n_t=20, use_symmetry=False)
    fine = channel_expectations(model, SEMANTIC_REF, fine_rule).expectations
    estimate = abs(fine["thetahat_y"] - coarse["thetahat_y"]) + abs(fine["thetahat_dl"] - coarse["thetahat_dl"])
    assert estimate < 1e-3 * abs(fine["thetahat_y"])
    assert abs(fine["thetahat_y"] - fine["thetahat_dl"]) <= estimate
    # m = 0 is an exact symmetry of the semantic branch, which the unfolded rule keeps
    assert abs(fine["mhat"]) < 1e-14


def test_positional_thetahat_vanishes_for_any_A():
    """At theta = 0 the teacher is even in h* = sqrt(rho) y, so thetahat = 0 for any A
    (docs/theory.md, section 3.2; here the non-symmetric A of the paper's second example)."""
    spec = ModelSpec(A=((0.3, 0.7), (0.8, 0.2)))
    # unfolded: this checks the quadrature itself (with folding the zero is imposed; tests/test_symmetry.py)
    rule = dataclasses.replace(SMALL, use_symmetry=False)
    e = channel_expectations(bind(spec), Overlaps(q=0.05, m=0.25, V=12.0, theta=0.0), rule).expectations
    assert abs(e["thetahat_y"]) < 1e-13 and abs(e["thetahat_dl"]) < 1e-13
    assert abs(e["mhat"]) > 1e-4


STATIONARITY_RULE = ChannelRule(n_eta=28, n_r=12, n_u=8, n_t=24)


@pytest.fixture(scope="module")
def semantic_fixed_point(model):
    sol = solve_with_rule(model, 2.0, "semantic", STATIONARITY_RULE, SEMANTIC_REF, tol=1e-11)
    assert sol.converged and sol.residual8 < 1e-6
    return sol


def test_free_energy_is_stationary_at_the_fixed_point(model, semantic_fixed_point):
    """dF/dp = 0 for the overlaps, by central differences of prior part + alpha E[M]
    at a fixed point solved with the same rule (the conjugates enter F only through
    the closed-form prior part). The identity is exact for the exact integrals; for
    this rule the derivative of its E[M] was measured to match the envelope-theorem
    conjugates to ~5e-6 relative (docs/numerics.md), so 1e-4 is a real check."""
    alpha, sol = 2.0, semantic_fixed_point
    ov, hats = sol.overlaps, sol.side.hats

    def F(x):
        o = Overlaps.from_array(x)
        envelope = channel_expectations(model, o, STATIONARITY_RULE).expectations["envelope"]
        return free_energy(model, o, hats, alpha, envelope)

    x0 = ov.as_array()
    # (index, step, balancing conjugate, factor): dF/dq = -Vhat/2 + ..., dF/dV = qhat/2 - ...,
    # dF/dtheta = thetahat + ...
    for i, h, j, factor in ((0, 2e-4, 2, 0.5), (2, 4e-2, 0, 0.5), (3, 2e-4, 3, 1.0)):
        e = np.zeros(4)
        e[i] = h
        dF = (F(x0 + e) - F(x0 - e)) / (2 * h)
        assert abs(dF) < 1e-4 * factor * abs(hats.as_array()[j]), (i, dF, hats)


def test_fixed_point_matches_the_independent_reference(model, semantic_fixed_point):
    """docs/theory.md, section 3.8: omega=0.3, alpha=2, semantic branch (3 scrambled-Sobol replicates,
    +- their spread). Our rule is the fast mode's reporting rule; its own error is below
    1e-5 relative by the convergence study, so 3 spreads + 2e-5 relative must hold."""
    sol, alpha = semantic_fixed_point, 2.0
    ov = sol.overlaps
    ours = {"q": ov.q, "V": ov.V, "theta": ov.theta, "test_error": generalisation_error(model, ov, 24),
            "train_loss": free_energy(model, ov, sol.side.hats, alpha, sol.side.mean_envelope)}
    ref = {"q": (0.114816, 6e-6), "V": (12.6686, 1.1e-3), "theta": (0.158157, 7e-6),
           "test_error": (0.0014041, 1.2e-7), "train_loss": (0.0035906, 7e-8)}
    for k, (v, spread) in ref.items():
        assert abs(ours[k] - v) <= 3 * spread + 2e-5 * abs(v), (k, ours[k], v)


def test_solve_branch_result_object():
    fp = solve_branch(SPEC, 2.0, "semantic", precision="draft", start=SEMANTIC_REF)
    assert fp.converged and fp.residual < 1e-6
    assert abs(fp.overlaps.m) == 0.0 and fp.overlaps.theta > 0.1
    d = fp.to_dict()
    for key in ("alpha", "branch", "q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error",
                "train_loss", "converged", "status", "iterations", "residual", "error", "global_minimum", "model",
                "wall_time"):
        assert key in d
    # draft precision has no error estimate: NaN in the record, null with its reason in JSON
    assert np.isnan(fp.error["q"]) and d["error"]["q"] is None and "no error estimate" in d["null_reasons"]["error.q"]
    json.dumps(d, allow_nan=False)


@pytest.mark.slow  # about 22 s; the softmax's searched start is tested by default
def test_linear_attention_is_solved_from_a_searched_start():
    """Linear attention (``S = h h^T``) has its loss concave around ``h = 0``: from the
    softmax model's default start the map sends ``V`` below zero and the solve fails.
    Without a start, ``solve_branch`` then searches one (``numerics/fixed_points/start_search.py``) and
    reaches the trivial fixed point, a fixed point of the map on all eight parameters,
    at which the free energy is stationary in ``q`` and ``V`` (central differences of
    prior part + alpha E[M] against the conjugates, as for the softmax model)."""
    from numerics.fixed_points.lines import DEFAULT_START
    from numerics.precision import PRECISIONS
    from numerics.fixed_points.start_search import map_displacement, search_starts

    spec, alpha = ModelSpec(attention="linear"), 1.5
    lin = bind(spec)
    rule = PRECISIONS["draft"].rule
    assert map_displacement(lin, alpha, DEFAULT_START["trivial"], rule) == np.inf  # the undamped V < 0
    try:
        assert not solve_with_rule(lin, alpha, "trivial", rule, DEFAULT_START["trivial"], tol=1e-8).converged
    except (SolverError, FloatingPointError):
        pass
    fp = solve_branch(spec, alpha, "trivial", "draft", model=lin)
    assert fp.converged and fp.residual < 1e-6
    ov, hats = Overlaps.of(fp.overlaps), HatOverlaps.of(fp.hats)  # the record's 1 x 1 matrices as scalars
    assert hats.Vhat > 0 and ov.m == 0 and ov.theta == 0
    # the searched start is a start, not the answer: the solve moved it
    best = search_starts(lin, alpha, "trivial", rule)[0]
    assert abs(best.q / ov.q - 1) > 0.05 or abs(best.V / ov.V - 1) > 0.05

    def F(x):
        o = Overlaps.from_array(x)
        envelope = channel_expectations(lin, o, rule).expectations["envelope"]
        return free_energy(lin, o, hats, alpha, envelope)

    x0 = ov.as_array()
    for i, h, j in ((0, 1e-3, 2), (2, 1e-2, 0)):  # dF/dq = -Vhat/2 + ..., dF/dV = qhat/2 - ...
        e = np.zeros(4)
        e[i] = h
        dF = (F(x0 + e) - F(x0 - e)) / (2 * h)
        assert abs(dF) < 1e-4 * 0.5 * abs(hats.as_array()[j]), (i, dF, hats)


def test_a_searched_start_reaches_the_softmax_fixed_point(model):
    """The start search is not tuned to linear attention: on the softmax model its best
    start for the semantic branch at alpha = 2 leads to the fixed point that the
    reference values of docs/theory.md, section 3.8 lead to."""
    from numerics.precision import PRECISIONS
    from numerics.fixed_points.start_search import search_starts

    rule = PRECISIONS["draft"].rule
    best = search_starts(model, 2.0, "semantic", rule)[0]
    assert abs(best.q / SEMANTIC_REF.q - 1) > 0.1  # a start, not the answer
    from_search = solve_with_rule(model, 2.0, "semantic", rule, best, tol=1e-10)
    from_ref = solve_with_rule(model, 2.0, "semantic", rule, SEMANTIC_REF, tol=1e-10)
    assert from_search.converged and from_ref.converged
    assert np.allclose(from_search.overlaps.as_array(), from_ref.overlaps.as_array(), rtol=1e-7, atol=0)


def test_a_seed_moved_along_the_branch_converges_on_its_first_evaluation(model):
    """A solve at a nearby alpha seeded by the solution at the last alpha, moved along the branch's
    secant with its Anderson pairs (``moved_seed``), reaches the fixed point the unmoved seed reaches
    (within the tolerance), in one evaluation without the checks instead of two: the prediction
    starts it within the tolerance. The pairs keep their differences (the Jacobian estimate)."""
    from numerics.fixed_points.lines import moved_seed
    from numerics.precision import PRECISIONS

    prec = PRECISIONS["draft"]
    rule = prec.rule
    a0, a1, a2 = 1.5, 1.501, 1.50101
    s0 = solve_with_rule(model, a0, "semantic", rule, SEMANTIC_REF, prec.tol)
    s1 = solve_with_rule(model, a1, "semantic", rule, s0.overlaps, prec.tol, history=s0.history)
    x0, x1 = s0.overlaps.as_array(), s1.overlaps.as_array()
    predicted = Overlaps.from_array(x1 + (a2 - a1) * (x1 - x0) / (a1 - a0))
    seed = moved_seed(s1, "semantic", predicted)
    free = [0, 2, 3]  # the semantic map's coordinates: q, V, theta
    assert np.array_equal(seed.history[-1][0], predicted.as_array()[free])
    for (xa, ga), (xb, gb), (ya, _), (yb, _) in zip(s1.history, s1.history[1:], seed.history, seed.history[1:]):
        assert np.allclose(yb - ya, np.asarray(xb) - np.asarray(xa), rtol=0, atol=1e-15)
    plain = solve_with_rule(model, a2, "semantic", rule, s1.overlaps, prec.tol, seed=s1)
    moved = solve_with_rule(model, a2, "semantic", rule, predicted, prec.tol, seed=seed)
    assert plain.converged and moved.converged
    assert np.allclose(moved.overlaps.as_array(), plain.overlaps.as_array(), rtol=10 * prec.tol, atol=0)
    assert (plain.evaluations, moved.evaluations) == (3, 2)  # (unchecked, checked): (2, 1) and (1, 1)


def test_small_alpha_tends_to_uniform_attention(model):
    """As alpha -> 0 the solution is trivial and the test error is that of uniform
    attention S = 1/2: (sigma^2/2)(E|T|_F^2 - 1), since T's rows sum to one."""
    _, ET2 = teacher_moments(SPEC, 64)
    uniform = 0.5 * SPEC.sigma**2 * (ET2 - 1.0)
    gaps, v_gaps = [], []
    for alpha in (1e-2, 1e-3):
        sol = solve_with_rule(model, alpha, "trivial", SMALL, Overlaps(q=1e-3, m=0, V=20.0, theta=0), tol=1e-11)
        assert sol.converged
        gaps.append(abs(generalisation_error(model, sol.overlaps) - uniform))
        v_gaps.append(abs(sol.overlaps.V - SPEC.sigma**2 / SPEC.lam))  # V -> sigma^2/lam as the hats vanish
    assert gaps[1] < gaps[0] and gaps[1] < 1e-3 * uniform
    assert v_gaps[1] < 0.5 * v_gaps[0]  # measured: ~sqrt(alpha)


@pytest.mark.slow  # about 23 s (the mpmath quadrature at 20 digits)
def test_linear_baseline_float64_agrees_with_mpmath():
    b = linear_baseline(SPEC)
    value, n = linear_baseline_mp(SPEC, dps=20)
    assert abs(float(value) - b.test_error) <= 4e-16 * b.test_error + b.error
    assert b.error < 1e-15
    assert mpmath.mpf("0.00197138") - value < 1e-8  # docs/theory.md, section 3.8: all digits shown are converged


def test_solver_converges_and_reports_failure_honestly():
    A = np.array([[0.5, 0.2], [0.1, 0.3]])
    b = np.array([1.0, 2.0])
    exact = np.linalg.solve(np.eye(2) - A, b)
    res = solve_fixed_point(lambda x: A @ x + b, np.zeros(2), tol=1e-12)
    assert res.converged and np.allclose(res.x, exact, rtol=1e-11)
    # an oscillating map (eigenvalue -1.8) needs damping; Anderson + damping handles it
    res = solve_fixed_point(lambda x: -1.8 * x + 1.0, np.array([0.0]), tol=1e-12, damping=0.3)
    assert res.converged and abs(res.x[0] - 1 / 2.8) < 1e-11
    # no fixed point: converged is False with the residual reported, not an exception
    res = solve_fixed_point(lambda x: x + 1.0, np.array([0.0]), tol=1e-12, maxiter=5, anderson=0)
    assert not res.converged and res.residual > 0.1


@pytest.mark.parametrize("argv", [
    ["solve", "--alpha", "-1"],
    ["solve", "--alpha", "2", "--omega", "1.5"],
    ["curve", "--alpha", "1:2"],
    ["thresholds", "--A", "0.6,0.4,0.4"],
    ["solve", "--alpha", "2", "--attention", "cubic"],
    ["curve", "--alpha", "1:2:2", "--figure", "--compare", "/nonexistent/curve.csv"],
    ["curve", "--alpha", "1:2:2", "--compare", "other.csv"],
    ["thresholds", "--alpha", "1:2:2"],
])
def test_cli_bad_input_is_one_line_exit_2(argv):
    proc = subprocess.run([sys.executable, "-m", "attnphase.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_thresholds_without_a_branch_exit_1_with_one_line(monkeypatch, capsys):
    """A model whose branches do not both exist (linear attention has no positional
    branch) gets exit status 1 and the reason, not a traceback; JSON keeps the baseline."""
    from attnphase.cli import main
    from numerics import api
    from numerics.thresholds.record import ThresholdError

    def no_branch(spec, precision, progress=None):
        raise ThresholdError("alpha_c: the positional branch was not found on alpha in [0.5, 2.5]")

    def scan_of(alphas):
        return dict(alpha_min=float(alphas[0]), alpha_max=float(alphas[-1]), n_scan=len(alphas))

    monkeypatch.setattr(api, "thresholds", lambda spec, precision, alphas, integrator="auto", names=None, scan=None,
                        progress=None, mapper=None: no_branch(spec, precision, progress)
                        if scan_of(alphas) == dict(alpha_min=0.5, alpha_max=2.5, n_scan=9) else None)
    assert main(["thresholds", "--attention", "linear"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnphase thresholds: error: alpha_c: the positional branch was not found on alpha in [0.5, 2.5]"]
    assert main(["thresholds", "--attention", "linear", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["alpha_c"] is None and "positional branch was not found" in out["error"]
    assert out["linear_test_error"] == pytest.approx(linear_baseline(ModelSpec(attention="linear")).test_error)
    # --alpha sets the bracketing scan (sigmoid attention's alpha_c = 4.068 lies beyond 2.5)
    seen = {}
    monkeypatch.setattr(api, "thresholds", lambda spec, precision, alphas, integrator="auto", names=None, scan=None,
                        progress=None, mapper=None: (seen.update(scan_of(alphas)), no_branch(spec, precision))[1])
    assert main(["thresholds", "--alpha", "0.5:6:12"]) == 1
    assert seen == dict(alpha_min=0.5, alpha_max=6.0, n_scan=12)


def test_run_draws_the_trivial_branch_when_a_branch_is_missing(monkeypatch, tmp_path, capsys):
    """``attnphase run`` on a model without the semantic or positional branch (linear
    attention on [0.05, 2.5]) follows the trivial one too, so that its CSV and figure
    are not empty; the missing threshold gives exit status 1."""
    from attnphase.cli import main
    from numerics import api
    from numerics.branches.follow import BranchCurve
    from numerics.result import FixedPoint
    from numerics.overlaps import HatOverlaps
    from numerics.thresholds.record import ThresholdError

    followed = []

    def follow(spec_, alphas, branch, precision="fast", progress=None, **kw):
        followed.append(branch)
        if branch != "trivial":
            return BranchCurve(branch, [], [], f"{branch} branch not found")
        return BranchCurve(branch, [FixedPoint(
            alpha=float(a), branch=branch, overlaps=Overlaps(0.5, 0.0, 4.0, 0.0), hats=HatOverlaps(0.1, 0, 0.2, 0),
            test_error=0.2, train_loss=0.05 * a, converged=True, iterations=3, residual=0.0, error={},
            diagnostics={}, model=spec_, precision=precision, wall_time=0.1) for a in alphas], [])

    def no_threshold(spec_, precision, alphas=None, integrator="auto", names=None, scan=None, progress=None):
        raise ThresholdError("alpha_c: the semantic branch was not found")

    monkeypatch.setattr(api, "follow_branch", follow)
    monkeypatch.setattr(api, "thresholds", no_threshold)
    assert main(["run", "--attention", "linear", "--alpha", "0.5:1.5:3", "--out", str(tmp_path)]) == 1
    assert followed == ["semantic", "positional", "trivial"]
    with open(tmp_path / "curve.csv") as fh:
        rows = fh.read().strip().splitlines()
    assert len(rows) == 1 + 3 and all(",trivial," in r for r in rows[1:])
    assert (tmp_path / "branches.png").stat().st_size > 10_000


def test_curve_figure_draws_two_models_from_their_csvs(tmp_path):
    """``curve --figure --compare``: each CSV is read back, labelled by the model in its
    rows, and drawn with that model's linear baseline."""
    from attnphase.figures import plot_curve_files
    from numerics.result import FixedPoint
    from numerics.overlaps import HatOverlaps
    from tidyio import write_rows

    def rows(spec, branch, q):
        return [FixedPoint(alpha=a, branch=branch, overlaps=Overlaps(q, 0.0, 5.0, 0.0), hats=HatOverlaps(0, 0, 0, 0),
                           test_error=0.1, train_loss=0.01 * a, converged=True, iterations=3, residual=0.0,
                           error={}, diagnostics={}, model=spec, precision="draft", wall_time=0.1).to_row()
                for a in (0.5, 1.0, 1.5)]

    linear, softmax = ModelSpec(attention="linear"), ModelSpec()
    write_rows(str(tmp_path / "linear.csv"), rows(linear, "trivial", 0.5))
    write_rows(str(tmp_path / "softmax.csv"), rows(softmax, "trivial", 0.05))
    paths = plot_curve_files([str(tmp_path / "linear.csv"), str(tmp_path / "softmax.csv")], str(tmp_path / "linear"))
    assert paths == [str(tmp_path / "linear.png"), str(tmp_path / "linear.pdf")]
    assert all((tmp_path / p).stat().st_size > 10_000 for p in ("linear.png", "linear.pdf"))


@pytest.mark.parametrize("centre", [-1.6, 0.3, 2.5, -6.6])
def test_line_rule_resolves_a_cube_root_singularity(centre):
    """The split line rule (numerics.channel.lines.geometry.side_rule, 2 x 28 nodes) integrates
    |t - c|^(1/3) and a smooth function against the Gaussian to 2e-8 (measured: at most
    8e-9), wherever the split c lies; Gauss-Hermite with as many nodes misses the
    singular one by 4e-4 to 3e-3 when c is in the bulk (docs/numerics.md, section 3)."""
    from numpy.polynomial.hermite_e import hermegauss
    from scipy.integrate import quad

    from numerics.channel.lines.geometry import FAR_SPLIT, side_rule

    rule = ChannelRule(n_t=20, n_near=8)
    phi = lambda t: np.exp(-0.5 * t**2) / np.sqrt(2 * np.pi)  # noqa: E731
    for f in (lambda t: np.abs(t - centre) ** (1 / 3), lambda t: np.cos(t) + t**2):
        exact = sum(quad(lambda t: f(t) * phi(t), a, b, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
                    for a, b in ((-rule.t_max, centre), (centre, rule.t_max)))
        total = 0.0
        for side, end in ((0, -rule.t_max), (1, rule.t_max)):
            cut = (centre > FAR_SPLIT and side == 0) or (centre < -FAR_SPLIT and side == 1)
            t, w = side_rule(np.array([centre]), end, rule, cut)
            total += float(np.sum(w[:, 0] * f(t[:, 0]) * phi(t[:, 0])))
        assert abs(total - exact) < 2e-8 * abs(exact)
    if abs(centre) > 4:
        return
    x, wx = hermegauss(2 * (rule.n_t + rule.n_near))
    gh = float(np.sum(wx / np.sqrt(2 * np.pi) * np.abs(x - centre) ** (1 / 3)))
    exact = sum(quad(lambda t: np.abs(t - centre) ** (1 / 3) * phi(t), a, b, epsabs=1e-15, limit=200)[0]
                for a, b in ((-rule.t_max, centre), (centre, rule.t_max)))
    assert abs(gh - exact) > 1e-4 * exact


def _lines_and_switches(model, ov, rule):
    """The lines of the channel quadrature at ``ov`` and the switches located on them."""
    from numerics.channel.lines.expectations import channel_lines
    from numerics.channel.lines.switches import locate_switches
    from numerics.channel.lines.teacher_nodes import gaussian_factor, polar_teacher_nodes

    factor = gaussian_factor(model, ov)
    lines = channel_lines(model, ov, rule, factor, polar_teacher_nodes(model, ov.V, factor.L_hh, rule))
    found = locate_switches(model, rule, ov.V, lines.w_of, lines.t0, lines.hs1, lines.hs2, lines.has_pair)
    return factor, lines, found


def test_switch_location_agrees_with_a_dense_scan_along_the_lines(model):
    """Every line that carries a switch of the global minimiser (found here by the global
    prox on a dense grid of t) has it located, at the place where the scan sees the
    jump, and no located switch is spurious. Newton's method on D(t) from t0 -+ 1, a
    simpler location, lost the switches on lines towards the ends of the switching
    segments (jumps of 0.2-0.6 in h on 30% of the lines of some teacher nodes here)."""
    ov = Overlaps(q=0.03, m=0.19, V=15.0, theta=0.0)
    rule = ChannelRule(n_eta=8, n_r=3, n_u=24, n_t=10, n_near=4, use_symmetry=False)
    _, lines, found = _lines_and_switches(model, ov, rule)
    chosen = np.nonzero(lines.has_pair)[0]
    chosen = np.random.default_rng(3).choice(chosen, size=60, replace=False)
    grid = np.linspace(-rule.t_max, rule.t_max, 2001)
    step = grid[1] - grid[0]
    n_switched = 0
    for line in chosen:
        idx = np.full(grid.size, line)
        w1, w2 = lines.w_of(grid, idx=idx)
        h1, h2, _, _ = global_prox(model, w1, w2, lines.hs1[idx], lines.hs2[idx], ov.V)
        jumps = np.hypot(np.diff(h1), np.diff(h2))
        k = int(np.argmax(jumps))
        if found.switched[line]:
            n_switched += 1
            # the scan sees the jump where the switch was located
            assert jumps[k] > 0.05 and abs(found.t_split[line] - (grid[k] + 0.5 * step)) < step, line
        else:
            assert jumps[k] < 0.2, (line, jumps[k], grid[k])
    assert n_switched > 20


def _half_of_the_switches_hidden(switches):
    """The switches with every other located one reported as none, as a location that
    loses switches would (the checks then have work to do)."""
    switched = switches.switched.copy()
    switched[::2] = False
    return switches._replace(switched=switched)


def _hide_half_of_the_switches(monkeypatch):
    """Make the channel quadrature's switch location (numerics.channel.lines.switches, which
    the solve reaches only through the channel map) lose every other switch."""
    from numerics.channel.lines import switches

    locate = switches.locate_switches
    monkeypatch.setattr(switches, "locate_switches", lambda *a, **k: _half_of_the_switches_hidden(locate(*a, **k)))


def test_reflected_check_alone_catches_lost_switches(model):
    """The fast rules check each node from the reflected branch only (``check_from_w``
    off). Where switches go unlocated (half of them hidden here), that check alone
    finds the lower minimum on the nodes the two checks together find (at least 99%
    of their weight); with the switches located it changes nothing measurable."""
    from numerics.channel.lines import integrate_lines

    ov = Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4)
    located = [channel_expectations(model, ov, dataclasses.replace(rule, check_from_w=w)) for w in (True, False)]
    for name, value in located[0].expectations.items():
        assert abs(located[1].expectations[name] - value) <= 1e-8 * abs(value), name
    factor, lines, found = _lines_and_switches(model, ov, rule)
    hidden = _half_of_the_switches_hidden(found)
    both, reflected = (integrate_lines(model, ov, dataclasses.replace(rule, check_from_w=w), factor, lines, hidden)
                       for w in (True, False))
    assert both.unresolved_weight > 1e-5
    assert reflected.unresolved_weight >= 0.99 * both.unresolved_weight


def test_draft_map_is_continuous_where_a_far_switch_leaves_the_line():
    """Regression: near the semantic fixed point at alpha = 2.5 some far-out switches
    cross t_max between these two overlaps. Before the long side of a far split was
    cut at t = 0, qhat jumped by 2.1e-3 relative at such an event (the smooth change is
    1.3e-4). (The event sits where the bracketed switch location puts it; a plain Newton
    location, which lost switches, put it 4.2e-4 earlier along q and theta.)"""
    model = bind(SPEC)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4)
    a = Overlaps(q=0.1321257319770129, m=0.0, V=10.374281057395875, theta=0.17473307699358955)
    b = Overlaps(q=a.q + 5e-6, m=0.0, V=a.V, theta=a.theta + 5e-6)
    ra, rb = channel_expectations(model, a, rule), channel_expectations(model, b, rule)
    assert ra.switch_fraction > rb.switch_fraction  # the event this test is about: switches leave
    for name in ("qhat", "thetahat_y", "Vhat_y"):
        x, y = ra.expectations[name], rb.expectations[name]
        assert abs(y - x) < 5e-4 * abs(x), name


def test_seeded_anderson_history_converges_to_the_same_fixed_point_faster():
    """A solve seeded with a related map's history (shifted by the maps' difference)
    reaches the same fixed point as an unseeded one, in fewer evaluations."""
    rng = np.random.default_rng(5)
    J = 0.6 * np.linalg.qr(rng.standard_normal((4, 4)))[0] @ np.diag([0.9, -0.8, 0.5, 0.2])
    b = rng.standard_normal(4)
    coarse = lambda x: J @ x + b  # noqa: E731
    offset = 1e-3 * rng.standard_normal(4)
    counts = {"n": 0}

    def fine(x):
        counts["n"] += 1
        return J @ x + b + offset

    first = solve_fixed_point(coarse, np.zeros(4), tol=1e-12, anderson=4, damping=0.5, maxiter=200)
    assert first.converged
    plain = solve_fixed_point(fine, first.x, tol=1e-12, anderson=4, damping=0.5, maxiter=200)
    n_plain, counts["n"] = counts["n"], 0
    seeded = solve_fixed_point(fine, first.x, tol=1e-12, anderson=4, damping=0.5, maxiter=200, history=first.pairs)
    exact = np.linalg.solve(np.eye(4) - J, b + offset)
    assert seeded.converged and plain.converged
    np.testing.assert_allclose(seeded.x, exact, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(plain.x, exact, rtol=1e-10, atol=1e-10)
    assert counts["n"] < n_plain


def test_history_from_a_nearby_map_at_another_point_seeds_a_continuation_step():
    """Continuation: the pairs of the previous alpha's solve do not end at the new start
    (the predictor); extrapolated to it and shifted (``_seeded_history``), they still
    give the same fixed point in fewer evaluations than an unseeded solve."""
    rng = np.random.default_rng(7)
    J = 0.6 * np.linalg.qr(rng.standard_normal((3, 3)))[0] @ np.diag([0.9, -0.8, 0.4])
    b = rng.standard_normal(3)
    previous = solve_fixed_point(lambda x: J @ x + b, np.zeros(3), tol=1e-12, anderson=4, damping=0.5,
                                 maxiter=200)
    db = 0.05 * rng.standard_normal(3)  # the map at the next alpha
    counts = {"n": 0}

    def nxt(x):
        counts["n"] += 1
        return J @ x + b + db + 1e-3 * np.sin(x)  # and slightly nonlinear

    start = previous.x + 0.02 * rng.standard_normal(3)  # a predictor, not the old solution
    plain = solve_fixed_point(nxt, start, tol=1e-12, anderson=4, damping=0.5, maxiter=200)
    n_plain, counts["n"] = counts["n"], 0
    seeded = solve_fixed_point(nxt, start, tol=1e-12, anderson=4, damping=0.5, maxiter=200, history=previous.pairs)
    assert plain.converged and seeded.converged
    np.testing.assert_allclose(seeded.x, plain.x, rtol=1e-10, atol=1e-10)
    assert counts["n"] < n_plain


def test_a_solve_whose_residual_stops_falling_is_stopped_as_stalled():
    """Undamped Picard on ``F(x) = 3 - x`` cycles between 0.5 and 2.5 for ever: the
    residual never halves after the second iterate, so with ``stall_window`` the solve
    stops after that many more iterations, not ``maxiter``; a slowly but steadily
    converging solve (rate 0.97 per step) is not stopped."""
    calls = {"n": 0}

    def cycling(x):
        calls["n"] += 1
        return 3.0 - x

    res = solve_fixed_point(cycling, np.full(1, 0.5), tol=1e-10, maxiter=500, anderson=0, stall_window=20)
    assert not res.converged and res.stalled
    assert res.iterations == 21 and calls["n"] == 22
    slow = solve_fixed_point(lambda x: 0.97 * x + 0.03, np.zeros(1), tol=1e-8, maxiter=2000, anderson=0,
                             stall_window=30)
    assert slow.converged and not slow.stalled
    np.testing.assert_allclose(slow.x, 1.0, rtol=1e-8 / 0.03 * 1.2)  # residual / (1 - rate)


def test_a_collapsing_solve_is_abandoned_as_lost():
    """Below the semantic spinodal (~0.70) the semantic start collapses onto theta = 0;
    with ``lost_below`` the solve stops early with BranchLost instead of converging
    theta to zero, and follow_branch records the spinodal from such losses."""
    from numerics.fixed_points.errors import BranchLost

    model = bind(SPEC)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4)
    start = Overlaps(q=0.06, m=0.0, V=20.0, theta=0.07)
    with pytest.raises(BranchLost):
        solve_with_rule(model, 0.5, "semantic", rule, start, tol=1e-8, lost_below=1e-3)
    plain = solve_with_rule(model, 0.5, "semantic", rule, start, tol=1e-8)
    assert plain.converged and abs(plain.overlaps.theta) < 1e-8  # what it would have spent its time on


def _patch_solves(monkeypatch, fake, outcome_of_none="absent"):
    """Replace the solves of ``numerics.branches.follow`` by ``fake(spec, alpha, branch, precision,
    start, model, near=None)``, which returns a point on the branch or ``None`` (the solve
    fell to the trivial point, or with ``outcome_of_none="failed"`` the solver failed)."""
    from numerics.branches import follow as branches

    def attempt(*args, newton=False, **kwargs):
        fp = fake(*args, **kwargs)
        if fp is not None:
            return fp, branches.FOUND, ""
        return None, outcome_of_none, "fell to the trivial point" if outcome_of_none == "absent" else "solver failed"

    monkeypatch.setattr(branches, "try_solve", fake)
    monkeypatch.setattr(branches, "attempt_solve", attempt)
    # the fake points have no map whose Jacobian could classify an end
    monkeypatch.setattr(branches, "end_evidence", lambda *a, **k: (branches.UNEXPLAINED, {}))


def test_follow_branch_looks_for_a_branch_inside_the_grid_when_the_anchor_fails(monkeypatch):
    """A branch that exists only below alpha = 1 (as the positional one may at small
    omega) is missed at the anchor alpha = 2 and found at a grid point; it is then followed
    down the grid and its upper end bisected. With an explicit anchor nothing else is tried."""
    from types import SimpleNamespace

    from numerics.branches import follow as branches

    tried = []

    def fake_solve(spec, alpha, branch, precision, start, model, near=None):
        tried.append(alpha)
        if alpha >= 1.0:
            return None  # the solver fails where the branch does not exist
        return SimpleNamespace(alpha=alpha, converged=True, overlaps=Overlaps(q=0.03, m=0.2, V=20.0, theta=0.0),
                               model=SPEC, continuation_pairs=())

    _patch_solves(monkeypatch, fake_solve)
    monkeypatch.setattr(branches, "bind", lambda spec: None)
    searched = Overlaps(0.3, 0.5, 2.0, 0.0)
    monkeypatch.setattr(branches, "search_starts", lambda model, alpha, branch, rule: [searched])
    grid = np.linspace(0.1, 2.5, 13)  # 0.1, 0.3, ..., 2.5
    curve = branches.follow_branch(SPEC, grid, "positional", "draft", bisections=1)
    # the anchor alpha = 2 lies inside the grid: it is moved to the nearest grid point
    # (1.9 and 2.1 are equally near; in floating point 2.1 is nearer by 4e-16)
    assert tried[:3] == [pytest.approx(2.1), pytest.approx(1.3), pytest.approx(0.5)]
    assert [round(p.alpha, 6) for p in curve.points] == [0.1, 0.3, 0.5, 0.7, 0.9]
    assert [s["side"] for s in curve.spinodals] == ["upper"]
    assert 0.9 <= curve.spinodals[0]["alpha"] <= 1.1
    tried.clear()
    explicit = branches.follow_branch(SPEC, grid, "positional", "draft", anchor=(2.0, Overlaps(0.05, 0.25, 14.0, 0.0)))
    # the anchor start failed: the searched start is tried before the branch is declared not found
    assert tried == [2.0, 2.0] and explicit.points == [] and "not found at the anchor" in explicit.note
    # an anchor outside the grid is moved to the grid's nearer end: no continuation step
    # crosses the gap between them
    assert branches.anchor_alphas(1.0, np.linspace(20.0, 60.0, 9)) == [20.0, 40.0, 30.0, 25.0, 60.0]


def test_anchor_candidates_are_probed_with_the_draft_rule(monkeypatch):
    """Each anchor candidate is first solved with the draft rule; the precision's solve
    runs only where the draft one found the branch, and starts from its solution. If no
    probe finds the branch, each candidate is probed from the searched starts
    (``start_search.search_starts``), then every candidate is tried again with the precision's
    rules from the anchor start (the draft rule's folds are not the fast ones')."""
    from types import SimpleNamespace

    from numerics.branches import follow as branches

    tried = []
    draft_solution = Overlaps(q=0.031, m=0.21, V=19.0, theta=0.0)
    limit = {}

    def fake_solve(spec, alpha, branch, precision, start, model, near=None):
        tried.append((alpha, precision, start))
        if alpha < limit.get(precision, 0.0):
            return SimpleNamespace(alpha=alpha, converged=True, overlaps=draft_solution, model=SPEC,
                                   continuation_pairs=())
        return None

    _patch_solves(monkeypatch, fake_solve)
    searched = [Overlaps(0.3, 0.5, 2.0, 0.0), Overlaps(0.5, 0.7, 1.0, 0.0)]
    monkeypatch.setattr(branches, "search_starts", lambda model, alpha, branch, rule: searched)
    start = Overlaps(0.05, 0.25, 14.0, 0.0)
    limit.update(draft=1.0, fast=1.0)
    alpha, fp = branches.find_anchor(SPEC, None, "positional", "fast", [2.0, 0.5, 0.2], start)
    assert alpha == 0.5 and [t[:2] for t in tried] == [(2.0, "draft"), (0.5, "draft"), (0.5, "fast")]
    assert tried[-1][2] is draft_solution  # the fast solve starts from the draft solution
    tried.clear()
    limit.update(draft=0.0, fast=1.0)  # no draft probe finds the branch
    alpha, fp = branches.find_anchor(SPEC, None, "positional", "fast", [2.0, 0.5, 0.2], start)
    from_anchor_start = [(a, "draft", start) for a in (2.0, 0.5, 0.2)]
    from_searched = [(a, "draft", s) for a in (2.0, 0.5, 0.2) for s in searched]
    assert alpha == 0.5 and tried == from_anchor_start + from_searched + [(2.0, "fast", start), (0.5, "fast", start)]
    tried.clear()
    limit.update(draft=0.0, fast=0.0)
    # the draft rule finds the branch from the second searched start only
    _patch_solves(monkeypatch, lambda spec, alpha, branch, precision, start_, model, near=None: (
        tried.append((alpha, precision, start_)) or (SimpleNamespace(
            alpha=alpha, converged=True, overlaps=draft_solution, model=SPEC, continuation_pairs=())
            if start_ is searched[1] or precision == "fast" else None)))
    alpha, fp = branches.find_anchor(SPEC, None, "positional", "fast", [2.0, 0.5], start)
    assert alpha == 2.0 and tried == [(2.0, "draft", start), (0.5, "draft", start), (2.0, "draft", searched[0]),
                                      (2.0, "draft", searched[1]), (2.0, "fast", draft_solution)]
    tried.clear()
    limit.clear()
    _patch_solves(monkeypatch, fake_solve)
    note = branches.find_anchor(SPEC, None, "positional", "fast", [2.0, 0.5], start)
    assert isinstance(note, str) and "alpha = 2 (draft)" in note and "alpha = 0.5 (fast)" in note
    assert not note.failed  # every attempt fell to the trivial point: the branch is absent, not a failure


@pytest.mark.slow
def test_alpha_l_off_the_scan_is_found_on_the_extended_scan():
    # slow (42 s, the longest of the default suite, which ran 10.6 minutes with it)
    """At large omega alpha_l can lie beyond the scan while alpha_c is on it. Emulated at
    omega = 0.3 by ending the scan at 1.4, between alpha_c ~ 1.25 and alpha_l ~ 1.49: the scan
    is continued above 1.4 (the default) and alpha_l is found there."""
    from numerics.thresholds.locate import locate_thresholds

    extended = locate_thresholds(SPEC, "draft", np.linspace(0.9, 1.4, 6))
    assert extended.alpha_l_status == "ok" and 1.4 < extended.alpha_l < 1.7
    assert extended.details["scanned"][1] > 1.4
    assert 1.2 < extended.alpha_c < 1.3


@pytest.mark.slow
def test_alpha_l_off_the_scan_keeps_alpha_c_without_the_extension():
    # slow (27 s): a second run of the scan above, without the extension
    from numerics.thresholds.locate import locate_thresholds

    short = locate_thresholds(SPEC, "draft", np.linspace(0.9, 1.4, 6), extend=False)
    extended = locate_thresholds(SPEC, "draft", np.linspace(0.9, 1.4, 6))
    assert short.alpha_l_status.startswith("not bracketed") and "[0.9, 1.4]" in short.alpha_l_status
    assert np.isnan(short.alpha_l) and short.to_dict()["alpha_l"] is None
    assert short.details["scanned"] == [0.9, 1.4] and 1.2 < short.alpha_c < 1.3
    assert abs(short.alpha_c - extended.alpha_c) < 2e-6  # Newton to xtol = 1e-6 from the same bracket


def test_alpha_c_newton_is_safeguarded_by_the_scan_bracket():
    """Near a branch's fold ``F_pos - F_sem`` curves strongly; at omega = 0 the plain
    Newton step left the scan's bracket and stopped at a clip bound. With a derivative
    that is 20 times too small (every Newton step overshoots), the safeguarded method
    still returns the root, and never solves outside the range. A root beyond the
    range (the draft bracket at omega = 0.1 did not hold for the fast rules) is an
    error, not the range's end."""
    from numerics.solver.root_finding import RootFindingError, safeguarded_newton

    visited = []
    root = 0.8

    def difference(alpha):
        """F_pos - F_sem near a fold, and a derivative 20 times too small."""
        visited.append(alpha)
        d = alpha - root
        return d**3 + 0.01 * d, (3 * d**2 + 0.01) / 20.0

    with pytest.raises(RootFindingError, match="alpha_c: F_pos - F_sem keeps one sign up to alpha"):
        safeguarded_newton(difference, 0.55, 1e-9, 0.5, 0.75, True, name="alpha_c", one_sign="F_pos - F_sem keeps one sign")
    root = 0.6
    alpha, step = safeguarded_newton(difference, 0.55, 1e-9, 0.5, 0.75, True)
    assert abs(alpha - root) < 1e-8 and step < 1e-8
    assert all(0.5 <= a <= 0.75 for a in visited)


@pytest.mark.slow
def test_a_two_phase_solve_ends_on_a_fixed_point_of_the_checked_map(model, monkeypatch):
    """``solve_with_rule`` approaches with the global-prox checks off and finishes with
    them on: its result is a fixed point of the checked map (undamped residual below
    the tolerance, recomputed here from scratch), the same one a single checked solve
    finds, and the approach map really is a different map.

    The located switches leave the checks almost nothing to find on the default model
    (unresolved weight below 1e-12 here), so half of them are hidden from the
    integration, as a switch location that loses switches would: the checks then
    matter, which is the case the two phases exist for."""
    from numerics.fixed_points.lines import solve_on_map
    from numerics.model.saddle_point import update_overlaps

    from numerics.precision import PRECISIONS

    _hide_half_of_the_switches(monkeypatch)
    rule = PRECISIONS["fast"].rule
    start = Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)
    two = solve_with_rule(model, 1.5, "positional", rule, start, tol=1e-9)
    one = solve_on_map(model, 1.5, "positional", rule, start, tol=1e-9)
    unchecked = solve_on_map(model, 1.5, "positional", dataclasses.replace(rule, check_global=False), start,
                              tol=1e-9)
    assert two.converged and one.converged and unchecked.converged
    side = update_hat_overlaps(model, two.overlaps, 1.5, rule)
    x, new = two.overlaps.as_array(), update_overlaps(model, side.hats).as_array()
    assert np.max(np.abs(new - x)[[0, 1, 2]] / np.abs(x[[0, 1, 2]])) < 1e-9 and new[3] == 0.0
    # the same fixed point as the single checked solve, to the tolerance times the
    # iteration's amplification (a few units here)
    np.testing.assert_allclose(two.overlaps.as_array(), one.overlaps.as_array(), rtol=1e-8, atol=1e-12)
    # the checks matter on this branch: the approach map's fixed point is elsewhere
    assert side.channel.unresolved_weight > 0
    assert np.max(np.abs(unchecked.overlaps.as_array() - x)[[0, 1, 2]] / x[[0, 1, 2]]) > 1e-7
    assert two.checks_moved


def test_a_seeded_solve_that_stalls_is_not_retried(model, monkeypatch):
    """A solve started from another rule's solution (``seed``) that stalls has no fixed
    point nearby (past that rule's fold): it is reported not converged after one
    attempt with half the stall window. Unseeded, the same stall is retried more
    heavily damped (two attempts)."""
    from numerics.fixed_points import lines as fixed_point
    from numerics.solver.iteration import FixedPointResult

    calls = []

    def stalling(F, x0, **kw):
        calls.append(kw["stall_window"])
        x = np.asarray(x0, dtype=float)
        return FixedPointResult(x, x, False, kw["stall_window"], 1e-3, stalled=True)

    monkeypatch.setattr(fixed_point, "solve_fixed_point", stalling)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4, check_global=False)
    start = Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)
    plain = solve_with_rule(model, 1.5, "positional", rule, start, tol=1e-9)
    assert not plain.converged and calls == [fixed_point.STALL_WINDOW] * 2
    calls.clear()
    seed = dataclasses.replace(plain, history=())
    seeded = solve_with_rule(model, 1.5, "positional", rule, start, tol=1e-9, seed=seed)
    assert not seeded.converged and calls == [fixed_point.STALL_WINDOW // 2]


def test_only_the_checked_map_decides_that_a_branch_is_lost(model, monkeypatch):
    """Where the approach (checks off) fails, the solve is repeated with the checks on
    from the same start: near the positional folds at small omega the unchecked map's
    fold comes ~0.02 in alpha earlier than the checked map's."""
    from numerics.fixed_points import lines as fixed_point
    from numerics.fixed_points.errors import BranchLost
    from numerics.fixed_points.lines import RuleSolution

    calls = []

    def fake(model_, alpha, branch, rule, start, tol, *args, **kw):
        calls.append(rule.check_global)
        if not rule.check_global:
            raise BranchLost("collapsed on the unchecked map")
        return RuleSolution(start, None, True, 3, 1e-10, 3)

    monkeypatch.setattr(fixed_point, "solve_on_map", fake)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4)
    sol = solve_with_rule(model, 1.5, "positional", rule, Overlaps(0.05, 0.25, 14.0, 0.0), tol=1e-9)
    assert calls == [False, True] and sol.converged


def test_after_a_failed_approach_the_checked_solve_runs_only_the_retries(model, monkeypatch):
    """The approach (checks off) makes the first attempt, with the borrowed history; when
    it fails, the checked solve goes on with the retries (no history first) instead of
    repeating that attempt on a map that differs only by the checks."""
    from numerics.fixed_points import lines as fixed_point
    from numerics.fixed_points.errors import BranchLost
    from numerics.fixed_points.lines import RuleSolution

    calls, checks = [], []
    line_map = fixed_point.line_map

    def recording_map(model_, alpha, branch, rule_):
        checks.append(rule_.check_global)
        return line_map(model_, alpha, branch, rule_)

    def collapsing(F, x0, **kw):
        calls.append((checks[-1], len(kw["history"])))
        raise BranchLost("collapsed")

    monkeypatch.setattr(fixed_point, "line_map", recording_map)
    monkeypatch.setattr(fixed_point, "solve_fixed_point", collapsing)
    rule = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4)
    history = ((np.array([0.05, 0.25, 14.0]), np.zeros(3)), (np.array([0.051, 0.25, 14.1]), np.zeros(3)))
    with pytest.raises(BranchLost):
        solve_with_rule(model, 1.5, "positional", rule, Overlaps(0.05, 0.25, 14.0, 0.0), tol=1e-9, history=history)
    assert calls == [(False, 2), (True, 0)]
    # a solve seeded by another rule's solution keeps that rule's history for its checked
    # solve: on a stall that is its only attempt
    calls.clear()
    seed = RuleSolution(Overlaps(0.05, 0.25, 14.0, 0.0), None, True, 3, 1e-10, 3, history=history[::-1])
    with pytest.raises(BranchLost):
        solve_with_rule(model, 1.5, "positional", rule, Overlaps(0.05, 0.25, 14.0, 0.0), tol=1e-9, seed=seed)
    assert calls == [(False, 2), (True, 2), (True, 0)]


def test_continuation_predictor_is_quadratic_where_the_branch_is_smooth():
    """``branches.extrapolate``: exact on a quadratic path; the secant where the quadratic
    correction exceeds half the secant step (a branch turning at a fold)."""
    from types import SimpleNamespace

    from numerics.branches import follow as branches

    def path(a, curvature):
        return SimpleNamespace(alpha=a, overlaps=Overlaps(q=0.1 + 0.01 * a + curvature * a**2, m=0.2 - 0.01 * a,
                                                          V=10.0 + a, theta=0.0))

    for curvature in (0.002, 0.0):
        trail = [path(a, curvature) for a in (1.3, 1.2, 1.1)]
        got = branches.extrapolate(trail, 1.0).as_array()
        np.testing.assert_allclose(got, path(1.0, curvature).overlaps.as_array(), rtol=1e-12)
    # q turns near alpha = 1.05 (a fold-like turn): the quadratic term is as large as the
    # secant step, so the secant is used
    trail = [SimpleNamespace(alpha=a, overlaps=Overlaps(q=0.1 + (a - 1.05)**2, m=0.2, V=10.0 + a, theta=0.0))
             for a in (1.3, 1.2, 1.1)]
    x1, x2 = trail[-1].overlaps.as_array(), trail[-2].overlaps.as_array()
    np.testing.assert_allclose(branches.extrapolate(trail, 1.0).as_array(), 2 * x1 - x2, rtol=1e-12)
    # two points: the secant
    np.testing.assert_allclose(branches.extrapolate(trail[:2], 1.1).as_array(),
                               2 * trail[1].overlaps.as_array() - trail[0].overlaps.as_array(), rtol=1e-12)


SEM1 = Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858)  # fast fixed point, semantic, alpha = 1


def _one_teacher_node(model, hs):
    """The channel's teacher rule restricted to the node ``h* = hs`` at ``SEM1``, with weight 1.
    Returns ``|p0|``, the norm of the prox at ``w = 0`` there, and a function that gives
    ``(qhat, Vhat, thetahat)`` of that node's line integrals for a rule."""
    from numerics.channel.lines import teacher_node_expectations
    from numerics.channel.lines.teacher_nodes import gaussian_factor

    hs = np.asarray(hs, dtype=float)
    p1, p2, _, _ = global_prox(model, np.zeros(1), np.zeros(1), hs[:1], hs[1:], SEM1.V)
    factor = gaussian_factor(model, SEM1)
    eta = np.linalg.solve(factor.L_hh, hs)
    node = (np.array([eta[0]]), np.array([eta[1]]), np.array([1.0]))

    def line_integrals(**rule):
        e = teacher_node_expectations(model, SEM1, ChannelRule(use_symmetry=False, **rule), factor, node).expectations
        return np.array([e["qhat"], e["Vhat_y"], e["thetahat_y"]])

    return float(np.hypot(p1, p2)[0]), line_integrals


def _coarse_fine_gap(line_integrals, coarse_lines, **option):
    """Relative gap between a coarse line rule ``(n_u, n_t, n_near)`` and 112/48/48."""
    n_u, n_t, n_near = coarse_lines
    coarse = line_integrals(n_u=n_u, n_t=n_t, n_near=n_near, **option)
    fine = line_integrals(n_u=112, n_t=48, n_near=48, **option)
    return np.abs(coarse - fine) / np.abs(fine)


def test_soft_lines_resolve_the_band_of_a_teacher_node_without_a_pair(model):
    """Inside the pitchfork radius ``h = 0`` is a shallow minimum at ``w = 0`` and the
    integrands change steeply across a band through ``w = 0`` (docs/studies/soft_direction_lines.md). With the lines along the soft direction a coarse and a
    fine line rule agree on that teacher node's integral; along a fixed axis they do
    not (measured 2e-7 against 0.17 relative in ``Vhat``)."""
    p0, line_integrals = _one_teacher_node(model, [-0.421, 0.421])
    assert p0 < 1e-7  # no pair of minima at w = 0
    assert _coarse_fine_gap(line_integrals, (12, 16, 8), soft_lines=True).max() < 1e-5
    assert _coarse_fine_gap(line_integrals, (12, 16, 8), soft_lines=False)[1] > 1e-2


def test_band_split_resolves_the_band_beyond_the_cusp_ends(model):
    """A teacher node with a pair (``|p0| = 0.23``): beyond the ends of its switching
    segment the band of the prox curves away from ``t_c``. Split where each unswitched
    line crosses it, a coarse and a fine line rule agree; split at ``t_c`` they do not
    (measured 1.2e-6 against 1.8e-4 relative in ``Vhat``; docs/studies/band_beyond_cusp_ends.md)."""
    p0, line_integrals = _one_teacher_node(model, [-0.047, 0.844])
    assert p0 > 0.1  # a pair of minima at w = 0
    assert _coarse_fine_gap(line_integrals, (28, 20, 16), band_split=True).max() < 1e-5
    assert _coarse_fine_gap(line_integrals, (28, 20, 16), band_split=False)[1] > 5e-5


@pytest.mark.parametrize("minima, expected", [
    # minima quadratic in t: from the fourth node on, the quadratic through the three before is exact
    (lambda t: np.stack([1 + 0.3 * t - 0.01 * t**2, 0.5 * t - 0.02 * t**2], axis=-1), "exact"),
    # a jump between the third and fourth node: the quadratic's correction to the secant exceeds half
    # the secant's step, and the fifth node starts from the secant
    (lambda t: np.stack([(t > 2.5).astype(float), np.zeros_like(t)], axis=-1), "secant"),
])
def test_the_continuation_predicts_a_node_by_the_quadratic_through_the_three_before(monkeypatch, minima, expected):
    """Each node of a path starts from a prediction by the minima before it: the first two from the one
    before, the third from the secant, the others from the quadratic through the three before, except
    across a kink of the minimum (``numerics.prox.newton.follow_paths``)."""
    from types import SimpleNamespace

    from numerics.prox import newton as prox_newton

    S, K = 4, 6
    t = np.tile(np.arange(K, dtype=float)[:, None], (1, S)) * (1 + 0.1 * np.arange(S))[None, :]
    starts = []

    def exact_minimum(model, h, w, c, V, tol, maxiter):  # the minimum of node k, whatever the start
        k = len(starts)
        starts.append(h.copy())
        return minima(t[k]), np.zeros(len(h)), np.zeros(len(h))

    monkeypatch.setattr(prox_newton, "newton", exact_minimum)
    prox_newton.follow_paths(SimpleNamespace(backend="numpy"), minima(t[0]), t, np.zeros((K, S, 2)),
                             np.zeros((S, 4)), np.full(K, S), 1.0)
    exact = [minima(t[k]) for k in range(K)]
    secant = exact[3] + (t[4] - t[3])[:, None] / (t[3] - t[2])[:, None] * (exact[3] - exact[2])
    assert np.array_equal(starts[1], exact[0])
    if expected == "exact":
        assert not np.allclose(starts[2], exact[2], rtol=0, atol=1e-6)  # the secant's error, O(dt^2)
        for k in range(3, K):
            assert np.allclose(starts[k], exact[k], rtol=1e-12, atol=1e-12)
    else:
        assert np.array_equal(starts[4], secant)

"""The general model's numerics: matrix order parameters, branch subspaces, the gauge, the global prox
and the quasi-Monte Carlo integrator (docs/numerics.md, section "The general model: QMC integrator").

Identities and behaviour: packing round trips and gauge invariants; each branch subspace is the fixed
subspace of its sign flips, the moments odd under them vanish numerically without folding; the
canonical orientation is the same for every point of an orbit; the integrator's conjugates are dF = 0
against finite differences of its own E[M] (common random numbers) at generic points of (3, 1, 1) and
(2, 2, 1); at (2, 1, 1) the integrator agrees with the line quadrature, at one point of the map and
at fixed points, with stated errors small enough to mean something; a rotated start ends on the same
invariants.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from derivations import ModelSpec, packing
from numerics.api import solve
from numerics.channel.integrators import IntegratorError, LineChannel, choose_integrator
from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.gauge import alignment, canonical
from numerics.model.general import bind_general
from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps, from_scalars
from numerics.prox.matrix import GlobalProx
from numerics.prox.newton import cholesky_factors, cholesky_solve, positive_definite
from numerics.overlaps import FIXED_ZERO
from numerics.channel.qmc.channel import QMCChannel, SingularCovariance, moment_parities
from numerics.channel.qmc.nodes import preactivations
from numerics.channel.qmc.precision import QMC_PRECISIONS
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import GENERAL_BRANCHES, branch_subspace, free_subspace, subspace_of_roles

#: a small rule for tests of the machinery (not of accuracy)
TINY = dataclasses.replace(QMC_PRECISIONS["draft"], name="tiny",
                           rule=dataclasses.replace(QMC_PRECISIONS["draft"].rule, log2_points=10,
                                                    test_log2_points=10, dense_nodes=256))


def random_overlaps(shape, rng, rho=0.25) -> MatrixOverlaps:
    """A generic point: every component nonzero, Sigma and V positive definite."""
    L, r, t, k = shape
    A = rng.normal(size=(r, r))
    q = 0.05 * (A @ A.T) / r + 0.06 * np.eye(r)
    theta = 0.3 * np.linalg.cholesky(q) @ rng.normal(size=(r, t)) * math.sqrt(rho) / math.sqrt(t + r)
    B = rng.normal(size=(r, r))
    V = 2.0 * (B @ B.T) / r + 8.0 * np.eye(r)
    return MatrixOverlaps(shape, q=q, m=0.2 * rng.normal(size=(k, r)), V=V, theta=theta)


def random_rotation(n, rng):
    Q, R = np.linalg.qr(rng.normal(size=(n, n)))
    return Q * np.sign(np.diag(R))


# ---------------------------------------------------------------------------
# order parameters, subspaces, gauge
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 1, 1, 1), (2, 2, 1, 1), (3, 2, 2, 3)])
def test_packing_round_trip_and_invariants(shape):
    rng = np.random.default_rng(1)
    ov = random_overlaps(shape, rng)
    flat = ov.pack()
    assert MatrixOverlaps.component_names(shape) == packing.parameter_names(shape, packing.OVERLAPS)
    back = MatrixOverlaps.unpack(shape, flat)
    for name in ov.NAMES:
        np.testing.assert_array_equal(getattr(back, name), getattr(ov, name))
    assert list(ov.as_dict()) == list(MatrixOverlaps.component_names(shape))
    O, W = random_rotation(shape[1], rng), random_rotation(shape[2], rng)
    rotated = ov.rotated(O, W)
    for key, values in ov.invariants().items():
        np.testing.assert_allclose(rotated.invariants()[key], values, rtol=1e-12, atol=1e-15)
    hats = MatrixHats.unpack(shape, rng.normal(size=len(packing.parameter_names(shape, packing.CONJUGATES))))
    assert np.array_equal(MatrixHats.unpack(shape, hats.pack()).pack(), hats.pack())


def test_named_branches_of_the_two_token_rank_one_model_are_its_branches():
    for branch in ("semantic", "positional", "trivial"):
        sub = branch_subspace(branch, (2, 1, 1, 1))
        zero = [name for name, free in zip(packing.OVERLAPS, sub.free_mask((2, 1, 1, 1))) if not free]
        assert tuple(zero) == FIXED_ZERO[branch]
    with pytest.raises(ValueError, match="rank >= 2"):
        branch_subspace("mixed", (2, 1, 1, 1))


@pytest.mark.parametrize("shape", [(2, 2, 1, 1), (2, 2, 2, 1), (3, 3, 2, 3), (2, 1, 2, 1)])
def test_each_branch_is_the_fixed_subspace_of_its_flips(shape):
    for branch in GENERAL_BRANCHES:
        if branch == "mixed" and shape[1] < 2:
            continue
        sub = branch_subspace(branch, shape)
        sub.check(shape)  # raises unless exactly the fixed subspace
        free = sub.free_mask(shape)
        for flip in sub.symmetries(shape):
            assert np.all(sub.characters(flip, shape)[free] == 1)
    # the mixed branch of docs/theory.md, section 4.10: direction 1 semantic, direction 2 positional
    mixed = branch_subspace("mixed", (2, 2, 1, 1))
    zero = dict(zip(packing.parameter_names((2, 2, 1, 1), packing.OVERLAPS), ~mixed.free_mask((2, 2, 1, 1))))
    assert zero["m_1_1"] and zero["theta_2_1"] and zero["q_12"] and zero["V_12"]
    assert not (zero["m_1_2"] or zero["theta_1_1"] or zero["q_11"] or zero["q_22"])
    with pytest.raises(ValueError, match="semantic directions"):
        subspace_of_roles(("semantic", "semantic"), (2, 2, 1, 1))


def test_odd_moments_vanish_without_folding_on_the_mixed_subspace():
    """The mixed subspace is invariant: at a point of it, the conjugates that must vanish there are
    zero within four standard errors when nothing is folded, and the folded map sets them to zero."""
    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    sub = branch_subspace("mixed", spec.shape)
    ov = sub.project(random_overlaps(spec.shape, np.random.default_rng(4)))
    rule = QMCRule(log2_points=11, scrambles=8, dense_nodes=256)
    odd = moment_parities(model, sub)
    assert odd.any() and not odd.all()
    free_hats = sub.free_mask(spec.shape, packing.CONJUGATES)
    unfolded = QMCChannel(model, rule, sub, fold=False).estimate(ov, 1.5)
    values, se = unfolded.hats.pack(), unfolded.standard_error.pack()
    imposed = ~free_hats
    assert np.all(np.abs(values[imposed]) <= 4 * se[imposed] + 1e-14), (values[imposed], se[imposed])
    assert np.all(np.abs(values[free_hats]) > 4 * se[free_hats])  # the test has teeth: the free ones do not vanish
    folded = QMCChannel(model, rule, sub).estimate(ov, 1.5)
    assert np.all(folded.hats.pack()[imposed] == 0.0)


def test_canonical_orientation_is_one_point_per_orbit():
    rng = np.random.default_rng(2)
    for shape, blocks in (((3, 3, 1, 3), None), ((2, 2, 1, 2), None), ((3, 3, 2, 3), [(0,), (1, 2)])):
        ov = random_overlaps(shape, rng)
        if blocks is not None:  # a subspace with a semantic direction alone and a rotating pair
            ov = subspace_of_roles(("semantic", "positional", "positional"), shape).project(ov)
        base = canonical(ov, blocks)
        for _ in range(3):
            O = np.zeros((shape[1],) * 2)
            for b in (blocks or [tuple(range(shape[1]))]):
                O[np.ix_(b, b)] = random_rotation(len(b), rng)
            again = canonical(ov.rotated(O), blocks)
            np.testing.assert_allclose(again.pack(), base.pack(), atol=1e-12)
    # the alignment finds a rotation of student and teacher back
    ov = random_overlaps((2, 2, 2, 2), rng)
    O, W = random_rotation(2, rng), random_rotation(2, rng)
    Oa, Wa = alignment(ov.rotated(O, W), ov, teacher=True)
    np.testing.assert_allclose(ov.rotated(O, W).rotated(Oa, Wa).pack(), ov.pack(), atol=1e-6)


# ---------------------------------------------------------------------------
# the global prox
# ---------------------------------------------------------------------------

def test_global_prox_is_never_worse_than_a_dense_search():
    """Warm starts, flips and a few ellipsoid points find the global minimum wherever 48 more starts
    per node do, at a point of (2, 2, 1) with sizeable competing minima (large V)."""
    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    ov = MatrixOverlaps(spec.shape, q=np.array([[0.2, 0.02], [0.02, 0.12]]), m=np.array([[0.2, 0.05]]),
                        V=np.array([[120.0, 3.0], [3.0, 156.0]]), theta=np.array([[0.1], [0.03]]))
    rule = QMCRule(log2_points=11, scrambles=1)
    channel = QMCChannel(model, rule, free_subspace(spec.shape))
    zeta, hs, w = preactivations(channel.nodes, ov, spec.rho, model.positional_mean(ov.m))
    prox = GlobalProx(model, len(w), n_ellipsoid=1, first_ellipsoid=2)
    h, obj, gn = prox(w, hs, ov.V)
    assert np.max(gn) < 1e-9
    check = prox.dense_check(w, hs, ov.V, np.arange(len(w)), obj, n_starts=48)
    assert check.improved_fraction == 0.0
    # the same after a step of the overlaps, with the light (warm) search only
    moved = MatrixOverlaps(spec.shape, q=ov.q * 1.05, m=ov.m * 0.95, V=ov.V * 1.1, theta=ov.theta * 1.05)
    zeta, hs, w = preactivations(channel.nodes, moved, spec.rho, model.positional_mean(moved.m))
    h, obj, gn = prox(w, hs, moved.V, full=False)
    assert prox.dense_check(w, hs, moved.V, np.arange(len(w)), obj, n_starts=48).improved_fraction == 0.0
    # two minima compete at a sizeable fraction of the nodes: the check is not vacuous
    assert np.mean(~np.isnan(prox.second[:, 0])) > 0.1
    # without the sign flips (as between searches) the runner-ups still cover the competing minima
    smaller = MatrixOverlaps(spec.shape, q=moved.q * 1.01, m=moved.m, V=moved.V * 1.01, theta=moved.theta)
    zeta, hs, w = preactivations(channel.nodes, smaller, spec.rho, model.positional_mean(smaller.m))
    h, obj, gn = prox(w, hs, smaller.V, full=False, flips=False)
    assert np.max(gn) < 1e-9
    assert prox.dense_check(w, hs, smaller.V, np.arange(len(w)), obj, n_starts=48).improved_fraction == 0.0


def _sorted_selection(n, candidates):
    """The global prox's selection by a stable sort of the candidates by (node, objective): per node the
    lowest objective (the first candidate on a tie), and the lowest candidate at least 1e-3 from it."""
    rows, h, obj, gn = (np.concatenate(x) for x in zip(*candidates))
    order = np.lexsort((obj, rows))
    rows, h, obj, gn = rows[order], h[order], obj[order], gn[order]
    first = np.searchsorted(rows, np.arange(n))
    best = h[first]
    far = (np.max(np.abs(h - best[rows]), axis=1) > 1e-3) & np.isfinite(obj)
    runner = np.full_like(best, np.nan)
    node_of, first_of = np.unique(rows[far], return_index=True)
    runner[node_of] = h[np.nonzero(far)[0][first_of]]
    return best, obj[first], gn[first], runner


def test_the_global_prox_selects_the_lowest_candidate_and_the_lowest_far_runner_up():
    """The selection of each node's minimum among the starts' candidates is the stable sort's: on
    ties (equal objectives, near-equal points, infinite objectives of failed starts) the first
    candidate wins, and the runner-up is the lowest candidate 1e-3 away from the minimum."""
    rng = np.random.default_rng(3)
    n = 500

    def candidate(rows):
        h = rng.choice([-1.0, 0.0, 1.0], size=(len(rows), 2)) + rng.choice([0.0, 5e-4, 0.1], size=(len(rows), 1))
        obj = rng.choice([0.0, 0.5, 1.0, np.inf], size=len(rows), p=[0.3, 0.3, 0.3, 0.1])
        return rows, h, obj, rng.random(len(rows))

    everyone = np.arange(n)
    some = np.sort(rng.choice(n, n // 3, replace=False))
    candidates = [candidate(everyone), candidate(np.concatenate([some, everyone, everyone])), candidate(everyone)]
    mine = GlobalProx._select(n, candidates)
    for got, want in zip(mine, _sorted_selection(n, candidates)):
        assert np.array_equal(got, want, equal_nan=True)
    # the ties and the runner-ups are not vacuous here
    assert np.isnan(mine[3][:, 0]).any() and (~np.isnan(mine[3][:, 0])).any()
    with pytest.raises(ValueError, match="without a candidate"):
        GlobalProx._select(n + 1, candidates)


def test_qmc_nodes_and_test_error_do_not_depend_on_the_kernel_threads(monkeypatch):
    """The nodes are drawn and the test error is evaluated in blocks side by side in the kernels'
    threads: one thread gives the same numbers to the last bit."""
    from numerics.channel.qmc.nodes import gaussian_nodes
    from numerics.channel.qmc.test_error import TEST_BLOCK, test_error_estimates

    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    ov = random_overlaps(spec.shape, np.random.default_rng(4), spec.rho)
    log2 = int(np.log2(TEST_BLOCK)) + 1  # two blocks per scrambling
    runs = []
    for threads in ("1", "2"):
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", threads)
        nodes = gaussian_nodes(spec.shape, log2, 3, seed=7)
        runs.append((nodes.y, nodes.xi, test_error_estimates(model, ov, nodes),
                     test_error_estimates(model, ov, nodes, points=2**(log2 - 2))))
    for one, two in zip(*runs):
        assert np.array_equal(one, two)
    # the test error's blocks are the per-node integrand's, at the per-node pre-activations
    zeta, hs, _ = preactivations(nodes, ov, spec.rho, model.positional_mean(ov.m))
    whole = model.test_error_integrand(zeta, hs, ov.m).reshape(3, -1)
    assert np.array_equal(runs[1][2], whole.mean(axis=1))
    assert np.array_equal(runs[1][3], whole[:, :2**(log2 - 2)].mean(axis=1))


def test_the_prox_search_in_blocks_side_by_side_in_threads_gives_the_same_estimates(monkeypatch):
    """The channel's prox search and moments run in blocks of nodes side by side in the kernels'
    threads: a first evaluation (no warm starts), a warm one nearby and one with the dense check give
    the estimates of one thread in one block to the last bit, with several uneven blocks."""
    import numerics.channel.qmc.channel as qmc_channel

    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    ov = random_overlaps(spec.shape, np.random.default_rng(6), spec.rho)
    moved = MatrixOverlaps.unpack(spec.shape, ov.pack() * (1 + 1e-3))
    rule = QMCRule(log2_points=9, scrambles=3, dense_nodes=128)
    runs, blocks = [], []
    calls = GlobalProx.__call__

    def counted(self, w, *args, **kwargs):
        blocks.append(len(w))
        return calls(self, w, *args, **kwargs)

    monkeypatch.setattr(GlobalProx, "__call__", counted)
    for threads, chunk in (("1", 2**20), ("2", 160)):
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", threads)
        monkeypatch.setattr(qmc_channel, "CHUNK", chunk)
        monkeypatch.setattr(qmc_channel, "PARALLEL_NODES", 64)
        channel = QMCChannel(model, rule, free_subspace(spec.shape))
        del blocks[:]
        estimates = [channel.estimate(ov, 1.5, dense_check=False), channel.estimate(moved, 1.5, dense_check=False),
                     channel.estimate(moved, 1.5, dense_check=True)]
        runs.append(([e.hats.pack() for e in estimates] + [e.standard_error.pack() for e in estimates]
                     + [e.scramble_envelopes for e in estimates] + [channel.prox.best, channel.prox.second],
                     [e.diagnostics for e in estimates], list(blocks)))
    (one, one_report, one_blocks), (two, two_report, two_blocks) = runs
    for a, b in zip(one, two):
        assert np.array_equal(a, b, equal_nan=True)
    assert one_report == two_report
    assert set(one_blocks) == {3 * 2**9} and len(set(two_blocks)) > 1 and max(two_blocks) <= 160


def test_preactivations_are_the_per_node_map():
    """``zeta_l = theta h*_l / rho + S^{1/2} xi_l``, ``h*_l = sqrt(rho) y_l``, ``w = P m + zeta``, node by
    node, for a range of nodes (taken as a view), a set of them and all."""
    from numerics.channel.qmc.nodes import gaussian_nodes, schur_root

    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    ov = random_overlaps(spec.shape, np.random.default_rng(5), spec.rho)
    nodes = gaussian_nodes(spec.shape, 6, 2)
    Pm = model.positional_mean(ov.m)
    root = schur_root(ov, spec.rho)
    L, r, t, _ = spec.shape
    for rows in (np.arange(64, 128), np.array([3, 70, 5]), slice(None)):
        zeta, hs, w = preactivations(nodes, ov, spec.rho, Pm, rows)
        y, xi = nodes.y[rows], nodes.xi[rows]
        for k in range(len(y)):
            for l in range(L):
                hs_l = np.sqrt(spec.rho) * y[k, l]
                z_l = ov.theta @ hs_l / spec.rho + root @ xi[k, l]
                assert np.allclose(zeta[k, l * r:(l + 1) * r], z_l, rtol=1e-14, atol=1e-15)
                assert np.array_equal(hs[k, l * t:(l + 1) * t], hs_l)
        assert np.array_equal(w, zeta + Pm[None, :])
    # a node's numbers do not depend on the rows taken with it: the channel takes its nodes in
    # blocks, and the dense check its subsample, with the map of the whole set
    whole = preactivations(nodes, ov, spec.rho, Pm)
    for rows in (slice(1, 2), slice(5, 83), np.array([0, 2, 3, 100]), np.arange(127, -1, -1)):
        part = preactivations(nodes, ov, spec.rho, Pm, rows, root=root)
        for a, b in zip(whole, part):
            assert np.array_equal(a[rows], b)


@pytest.mark.parametrize("branch", ["semantic", pytest.param("positional", marks=pytest.mark.slow)])
def test_an_evaluation_between_searches_equals_a_full_search_at_its_point(branch):
    """The channel's evaluation after a small move (no full search, no dense check, so no sign flips
    of the last minimisers) gives the minima and conjugates of a fresh channel that searches every
    node from scratch at the moved point, to rounding: on the fixed-point iteration's steps the flips
    find no other minimum."""
    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    rule = QMCRule(log2_points=11, scrambles=2)
    subspace = branch_subspace(branch, spec.shape)
    # a large V, where two prox minima compete at many nodes
    point = random_overlaps(spec.shape, np.random.default_rng(3))
    start = subspace.project(dataclasses.replace(point, V=10 * point.V))
    step = subspace.project(MatrixOverlaps(spec.shape, q=start.q * 1.02, m=start.m * 0.98, V=start.V * 1.03,
                                           theta=start.theta * 1.02))
    warm = QMCChannel(model, rule, subspace)
    warm.estimate(start, 1.5)
    between = warm.estimate(step, 1.5, dense_check=False)
    assert not between.diagnostics["full_search"]
    assert np.mean(~np.isnan(warm.prox.second[:, 0])) > 0.05
    # the reference searches from more random starts than the rule's two: with two, the positional
    # point's fresh search missed a lower minimum at one node of 4096 that the warm one keeps
    reference = QMCChannel(model, dataclasses.replace(rule, first_ellipsoid=8), subspace)
    fresh = reference.estimate(step, 1.5, dense_check=True)
    assert fresh.diagnostics["dense_improved_fraction"] == 0.0
    assert np.all(np.max(np.abs(warm.prox.best - reference.prox.best), axis=1) < 1e-6)  # the same minima
    np.testing.assert_allclose(between.hats.pack(), fresh.hats.pack(), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------
# the integrator's conjugates: dF = 0 against its own E[M]
# ---------------------------------------------------------------------------

# the rank-2 shape takes about 30 s; slow, to keep the default suite's time
@pytest.mark.parametrize("shape", [(3, 1, 1, 3), pytest.param((2, 2, 1, 1), marks=pytest.mark.slow)])
def test_conjugates_are_dF_zero_against_finite_differences_of_the_integrators_envelope(shape):
    """F = prior_free_energy(overlaps, hats) + alpha E[M](overlaps), with E[M] the integrator's own
    estimate on its fixed nodes (common random numbers) and the hats of the same nodes at the point.
    For m and V (envelope theorem) the central differences vanish node by node; for q and theta the
    Stein forms (both the reported dl form and the f form) are another estimator of the same
    expectation, so dF/dp averages to zero within four standard errors over the scramblings, and
    those errors are small against the derivative tested."""
    L, r, t, k = shape
    spec = ModelSpec(tokens=L, rank=r, teacher_rank=t)
    model = bind_general(spec)
    ov = random_overlaps(spec.shape, np.random.default_rng(5))
    alpha, eps = 1.5, 1e-5
    names = packing.parameter_names(spec.shape, packing.OVERLAPS)
    checked = 0
    for form in ("dl", "f"):
        rule = QMCRule(log2_points=11, scrambles=8, form=form)
        channel = QMCChannel(model, rule, free_subspace(spec.shape))
        at = channel.estimate(ov, alpha, dense_check=True)
        assert at.diagnostics["dense_improved_fraction"] == 0.0
        flat = ov.pack()
        for p, name in enumerate(names):
            shifted = {}
            for sign in (1, -1):
                x = flat.copy()
                x[p] += sign * eps
                shifted[sign] = MatrixOverlaps.unpack(spec.shape, x)
            em = {sign: channel.estimate(shifted[sign], alpha, dense_check=False).scramble_envelopes
                  for sign in (1, -1)}
            D = []
            for j, hats in enumerate(at.scramble_hats):
                prior = {sign: model.prior_free_energy(shifted[sign].matrices(), hats.matrices()) for sign in (1, -1)}
                D.append((prior[1] - prior[-1]) / (2 * eps) + alpha * (em[1][j] - em[-1][j]) / (2 * eps))
            D = np.array(D)
            derivative = abs(alpha * np.mean(em[1] - em[-1]) / (2 * eps))
            mean, se = float(D.mean()), float(D.std(ddof=1) / math.sqrt(len(D)))
            if name.startswith(("m", "V")):
                assert abs(mean) < 1e-6 * (1 + derivative), (form, name, mean)
            else:
                assert abs(mean) < 4 * se + 1e-10, (form, name, mean, se)
                assert se < 0.1 * max(derivative, 1e-3 * np.max(np.abs(flat))), (form, name, se, derivative)
            checked += 1
    assert checked == 2 * len(names)


# ---------------------------------------------------------------------------
# against the line quadrature at (2, 1, 1)
# ---------------------------------------------------------------------------

def test_the_channel_agrees_with_the_line_quadrature_at_one_point():
    """One evaluation of the map at the semantic and positional fast fixed points (alpha = 2): every
    conjugate and E[M] within four QMC standard errors of the line quadrature's (whose error is a
    hundred times smaller), and the standard errors of 2^13 x 8 points below 5e-3 relative."""
    spec = ModelSpec()
    model = bind_general(spec)
    lines = LineChannel(spec)
    for branch, ov in (("semantic", from_scalars(0.1148173, 0.0, 12.66840, 0.1581585)),
                       ("positional", from_scalars(0.0510709, 0.2582290, 11.36879, 0.0))):
        est = QMCChannel(model, QMCRule(log2_points=13, scrambles=8), branch_subspace(branch, spec.shape)).estimate(ov, 2.0)
        ref = lines.estimate(ov, 2.0)
        value, se, exact = est.hats.pack(), est.standard_error.pack(), ref.hats.pack()
        nonzero = exact != 0
        assert np.all(value[~nonzero] == 0.0)
        assert np.all(np.abs(value - exact)[nonzero] <= 4 * se[nonzero]), (branch, value, exact, se)
        assert np.all(se[nonzero] < 5e-3 * np.abs(exact[nonzero]))
        se_env = np.std(est.scramble_envelopes, ddof=1) / math.sqrt(8)
        assert abs(est.mean_envelope - ref.mean_envelope) <= 4 * se_env


COMPARED = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")


def compare_with_lines(spec, alpha, branch, precision, max_relative):
    lines = solve(spec, alpha, branch, "fast", integrator="lines")
    qmc = solve(spec, alpha, branch, precision, integrator="qmc")
    assert lines.converged and qmc.converged
    assert qmc.diagnostics["dense_improved_fraction"] == 0.0
    for field in COMPARED:
        a, b, err = lines.values[field], qmc.values[field], qmc.error[field]
        if a == 0:
            assert b == 0 and err == 0, field  # zero by symmetry, exactly
            continue
        assert abs(a - b) <= 3 * err, (branch, alpha, field, a, b, err)
        assert err <= max_relative * abs(b), (branch, alpha, field, err / abs(b))


def test_fixed_point_agrees_with_the_line_quadrature():
    """The fast, small version: the draft rule (errors of a few per cent) at the semantic point alpha = 2."""
    compare_with_lines(ModelSpec(), 2.0, "semantic", "draft", 5e-2)


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["semantic", "positional"])
@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
def test_fixed_points_agree_with_the_line_quadrature_to_stated_errors_below_2e_3(branch, alpha):
    compare_with_lines(ModelSpec(), alpha, branch, "high", 2e-3)


# ---------------------------------------------------------------------------
# solves: gauge, dispatch, records, loud failures
# ---------------------------------------------------------------------------

def test_a_rotated_start_ends_on_the_same_invariants():
    """(2, 2, 1), semantic: the same start rotated by a random O(2) x O(1) ends on the same gauge
    invariants within their stated errors (the start is brought back to the branch's orientation,
    and the iteration is oriented canonically at every step, so it cannot drift along the orbit)."""
    spec = ModelSpec(rank=2)
    rng = np.random.default_rng(6)
    start = MatrixOverlaps(spec.shape, q=np.diag([0.09, 0.03]), m=np.zeros((1, 2)), V=np.diag([17.0, 37.0]),
                           theta=np.array([[0.13], [0.0]]))
    plain = solve(spec, 2.0, "semantic", TINY, integrator="qmc", start=start)
    rotated = solve(spec, 2.0, "semantic", TINY, integrator="qmc",
                            start=start.rotated(random_rotation(2, rng), -np.eye(1)))
    assert plain.converged and rotated.converged
    for key, values in plain.invariants.items():
        for i, (a, b) in enumerate(zip(values, rotated.invariants[key])):
            err = plain.error[f"{key}_{i + 1}"] + rotated.error[f"{key}_{i + 1}"]
            assert abs(a - b) <= err + 1e-15, (key, a, b, err)


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_a_converged_point_solves_the_prior_equations_in_its_own_gauge(branch):
    """The map's image of a converged point is the point itself, not a rotated or sign-flipped copy:
    an orientation fixed at every iteration also makes fixed points of two-cycles x -> g x -> x of
    the map (at (3, 1, 1), positional, alpha = 2, such a point has m = -mhat K and a negative
    training loss), and those must not pass. The semantic solve converges (the check is not vacuous)."""
    spec = ModelSpec(tokens=3)
    try:
        fp = solve(spec, 2.0, branch, TINY)
    except BranchNotFound as exc:  # the positional solve may fall to the trivial point: absent, not wrong
        assert branch == "positional" and exc.point.overlaps.m.any()
        return
    if branch == "semantic":
        assert fp.converged
    if fp.converged:
        image = bind_general(spec).prior_updates(**fp.hats.matrices())
        for name in MatrixOverlaps.NAMES:
            value = getattr(fp.overlaps, name)
            assert np.linalg.norm(image[name] - value) <= max(fp.residual, 1e-3) * np.linalg.norm(value) + 1e-12
        assert fp.train_loss >= 0.0


def test_integrator_choice_and_the_general_record():
    assert choose_integrator(ModelSpec()) == "lines"
    assert choose_integrator(ModelSpec(tokens=3)) == "qmc"
    assert choose_integrator(ModelSpec(), "qmc") == "qmc"
    with pytest.raises(IntegratorError, match="integrator"):
        choose_integrator(ModelSpec(rank=2), "lines")
    with pytest.raises(IntegratorError, match="unknown"):
        choose_integrator(ModelSpec(), "cubature")
    fp = solve(ModelSpec(tokens=3), 2.0, "semantic", TINY)
    assert fp.integrator == "qmc" and fp.converged
    d = json.loads(json.dumps(fp.to_dict()))
    assert d["q"] == [[fp.overlaps.q[0, 0]]] and d["m"] == fp.overlaps.m.tolist()
    row = fp.to_row()
    for name in packing.parameter_names(fp.overlaps.shape):
        assert name in row and f"{name}_error" in row
    assert "q_eigenvalues_1" in row and "theta_singular_values_1_error" in row
    assert row["m_1_1"] == 0.0 and row["m_1_1_error"] == 0.0  # zero by symmetry, exactly


def test_a_singular_covariance_fails_loudly():
    spec = ModelSpec(rank=2)
    model = bind_general(spec)
    channel = QMCChannel(model, QMCRule(log2_points=8, scrambles=2), branch_subspace("semantic", spec.shape))
    unused = MatrixOverlaps(spec.shape, q=np.diag([0.1, 0.0]), m=np.zeros((1, 2)), V=np.diag([12.0, 30.0]),
                            theta=np.array([[0.15], [0.0]]))
    with pytest.raises(SingularCovariance, match="singular"):
        channel.estimate(unused, 2.0)


def test_the_continuation_retries_a_point_that_fails_from_the_previous_one(monkeypatch):
    """walk_branch: a solve started from the previous point that does not converge, or does not
    find the branch, is solved again from the default start (and replaced if that converges); a branch
    not found from either is left out and the next alpha starts afresh (the solver is replaced by a
    fake that records its starts)."""
    import numerics.branches.follow as walk

    calls = []

    def fake(spec, alpha, branch, precision, integrator, start=None):
        calls.append((alpha, start is not None))
        if alpha == 3.0:
            raise BranchNotFound("not found", branch, alpha)
        converged = start is None or alpha != 2.0
        return dataclasses.replace(record, alpha=alpha, converged=converged)

    record = solve(ModelSpec(), 2.0, "semantic", "draft")
    monkeypatch.setattr(walk, "solve", fake)
    points = walk.walk_branch(ModelSpec(), [1.0, 2.0, 3.0, 4.0], "semantic").points
    assert calls == [(1.0, False), (2.0, True), (2.0, False), (3.0, True), (3.0, False), (4.0, False)]
    assert [(p.alpha, p.converged) for p in points] == [(1.0, True), (2.0, True), (4.0, True)]


def test_positive_definite_agrees_with_the_smallest_eigenvalue():
    """The per-matrix Cholesky test of the prox's Newton step says what the spectrum says, for
    stacks of 1 x 1 to 6 x 6 matrices straddling definiteness (Wishart matrices shifted by their
    median smallest eigenvalue)."""
    rng = np.random.default_rng(3)
    for n in range(1, 7):
        M = rng.normal(size=(2000, n, n))
        W = M @ M.transpose(0, 2, 1)
        S = W - np.median(np.linalg.eigvalsh(W)[:, 0]) * np.eye(n)
        smallest = np.linalg.eigvalsh(S)[:, 0]
        clear = np.abs(smallest) > 1e-9  # the factorisation and the spectrum may differ only at a zero eigenvalue
        got = positive_definite(S)
        assert 0 < got.sum() < len(got)
        np.testing.assert_array_equal(got[clear], smallest[clear] > 0)


def test_the_newton_step_from_the_cholesky_factors_solves_the_system():
    """The prox's Newton step solves ``(H - floor I) d = -g`` by substitution with the factors of
    the definiteness test: the same solution as numpy's ``solve``, to rounding, for 1 x 1 to 6 x 6
    positive definite stacks, some of them ill-conditioned."""
    rng = np.random.default_rng(4)
    for n in range(1, 7):
        M = rng.normal(size=(2000, n, n))
        S = M @ M.transpose(0, 2, 1) + np.logspace(-8, 0, 2000)[:, None, None] * np.eye(n)
        b = rng.normal(size=(2000, n))
        L, ok = cholesky_factors(S)
        assert ok.all()
        expected = np.linalg.solve(S, b[..., None])[..., 0]
        residual = np.einsum("nij,nj->ni", S, cholesky_solve(L, b)) - b
        assert np.max(np.abs(residual)) < 1e-9 * np.max(np.abs(b))
        np.testing.assert_allclose(cholesky_solve(L, b), expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())


def test_the_approach_alone_settles_on_the_branch_it_starts_on():
    # the cheap first stage of a solve (an eighth of one scrambling), which tests below a birth
    # whether the child is reached at all: from a point of the branch it stays there
    from numerics.fixed_points.qmc import approach_qmc

    spec = ModelSpec(omega=0.3, tokens=3)
    fp = solve(spec, 0.4, "semantic", "draft")
    reach = approach_qmc(spec, 0.4, "semantic", "fast", start=fp.overlaps)
    assert reach.converged and not reach.collapsed
    defining = branch_subspace("semantic", spec.shape).defining_overlap(fp.overlaps, spec.sigma)
    assert reach.defining == pytest.approx(defining, rel=0.05)


def test_a_fixed_point_that_repels_the_iteration_is_reached_by_the_root_finder():
    # the three-token trivial branch at alpha = 6.225, from its point at alpha = 2: the map's
    # Jacobian there has an eigenvalue below -2 (-3.8 at alpha = 4), and the damped Anderson
    # iteration left the domain (V < 0)
    from numerics.fixed_points.qmc import _Setting, qmc_map

    spec = ModelSpec(omega=0.3, tokens=3)
    alpha = 6.225
    far = solve(spec, 2.0, "trivial", "draft")
    fp = solve(spec, alpha, "trivial", "draft", start=far.overlaps)
    assert fp.converged
    setting = _Setting(spec, alpha, "trivial", "draft", fp.overlaps, True, None, None)
    F = qmc_map(setting.model, setting.channel, alpha, None, setting.gauge)
    x = fp.overlaps.pack()[setting.free]
    J = np.column_stack([(F(x + h) - F(x - h)) / (2 * h[j]) for j, h in enumerate(np.diag(1e-4 * np.abs(x)))])
    assert np.min(np.linalg.eigvals(J).real) < -2  # repelling: out of the damped iteration's reach
    assert np.allclose(F(x), x, rtol=1e-3)


def test_scramblings_solved_in_other_processes_give_the_same_fixed_point():
    # each scrambling after the first is solved from the first one's fixed point on its own nodes,
    # with its own searches and dense checks: in two worker processes exactly as here
    from numerics.api import scramble_workers

    spec = ModelSpec(omega=0.3, rank=2)
    here = solve(spec, 2.0, "mixed", TINY)
    with scramble_workers(2):
        there = solve(spec, 2.0, "mixed", TINY)
    assert there.converged and here.converged
    assert (here.diagnostics["processes"], there.diagnostics["processes"]) == (1, 2)
    assert there.values == here.values and there.error == here.error
    for key in ("scramble_fixed_points", "scramble_evaluations", "full_searches", "map_evaluations"):
        assert there.diagnostics[key] == here.diagnostics[key]
    with pytest.raises(ValueError, match="workers: must be a positive integer"):
        with scramble_workers(0):
            pass

"""Thresholds from paired finite-size runs (validation.crossings): estimators on synthetic data
with a known crossing and a known finite-size law, and the paired run's snapshots."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from derivations.spec import ModelSpec
from validation import crossings as cr
from validation.simulate import make_problem, summary_statistics, train, train_loss


def _paired_curves(alpha0, slope, alphas, runs, noise, shared, rng):
    """Per-(alpha, run) values ``slope (alpha - alpha0)`` plus a per-run offset shared by all alphas
    (common random numbers) and independent noise."""
    a = np.asarray(alphas)[:, None]
    return slope * (a - alpha0) + shared * rng.standard_normal(runs)[None, :] \
        + noise * rng.standard_normal((len(alphas), runs))


def test_crossing_recovers_a_known_root_within_its_error_bar():
    rng = np.random.default_rng(3)
    alphas = np.round(np.arange(0.45, 0.851, 0.025), 4)
    pulls = []
    for _ in range(30):
        values = _paired_curves(0.6148, 4e-4, alphas, 16, 2e-6, 4e-6, rng)
        c = cr.alpha_c(alphas, values, n_boot=200, rng=rng)
        assert c.runs == 16
        pulls.append((c.estimate - 0.6148) / c.std)
    pulls = np.array(pulls)
    # the bootstrap error is the spread of the estimate: pulls centred on 0 with median |pull| near 0.67
    # (medians, because with 16 runs the pull has the heavier tails of a t distribution)
    assert abs(np.median(pulls)) < 0.6
    assert 0.45 < np.median(np.abs(pulls)) < 1.1


def test_crossing_direction_and_absence():
    alphas = np.linspace(0.5, 0.8, 7)
    falling = np.tile((0.7 - alphas)[:, None], (1, 4)) + 1e-3 * np.arange(4)[None, :]
    c = cr.alpha_l(alphas, falling, n_boot=50)
    assert c.estimate == pytest.approx(0.7 + 1.5e-3, abs=1e-12)  # the runs' mean offset moves the root
    assert c.no_crossing_fraction == 0.0
    # the same curve never rises through zero: alpha_c finds nothing, and says so
    c = cr.alpha_c(alphas, falling, n_boot=50)
    assert math.isnan(c.estimate) and c.sign_changes == 0 and c.no_crossing_fraction == 1.0


def test_quadratic_local_fit_removes_the_curvature_bias_of_the_linear_one():
    alphas = np.round(np.arange(0.5, 0.801, 0.05), 4)
    root = 0.63
    curve = (alphas - root) + 8.0 * (alphas - root) ** 2
    values = np.tile(curve[:, None], (1, 3))
    linear = cr.curve_root(alphas, curve, rising=True, half_width=2, degree=1)[0]
    quadratic = cr.curve_root(alphas, curve, rising=True, half_width=2, degree=2)[0]
    assert abs(linear - root) > 1e-3
    assert quadratic == pytest.approx(root, abs=1e-10)
    assert cr.crossing(alphas, values, rising=True, degree=2, n_boot=10).estimate == pytest.approx(root, abs=1e-10)


def test_missing_runs_are_left_out_of_the_means():
    alphas = np.array([0.5, 0.6, 0.7])
    values = np.array([[-1.0, -1.0, np.nan], [1.0, -3.0, 100.0], [3.0, 3.0, np.nan]])
    # at 0.6 the mean over the three present runs is +32.67; over the first two it would be -1
    c = cr.alpha_c(alphas, values, n_boot=20, half_width=1)
    assert c.estimate == pytest.approx(0.5 + 0.1 * 1.0 / (1.0 + 98.0 / 3.0))


def test_extrapolation_recovers_a_known_limit_and_rejects_a_wrong_law():
    rng = np.random.default_rng(5)
    ds = np.array([500.0, 1000.0, 2000.0, 4000.0])
    errors = np.array([0.004, 0.004, 0.005, 0.006])
    zs, chi2s = [], []
    for _ in range(200):
        y = 0.6148 - 25.0 / ds + errors * rng.standard_normal(4)
        fit = cr.extrapolate(ds, y, errors, "1/d")
        zs.append((fit.a - 0.6148) / fit.a_se)
        chi2s.append(fit.chi2)
    assert abs(np.mean(zs)) < 0.25 and 0.8 < np.std(zs) < 1.2
    assert np.mean(chi2s) == pytest.approx(2.0, abs=0.5)  # chi2 with 4 - 2 degrees of freedom
    # data following 1/sqrt(d) with small errors: the 1/d law fails its goodness of fit
    y = 0.6148 - 3.0 / np.sqrt(ds)
    bad = cr.extrapolate(ds, y, np.full(4, 1e-3), "1/d")
    good = cr.extrapolate(ds, y, np.full(4, 1e-3), "1/sqrt(d)")
    assert bad.p_value < 1e-6 and bad.a_se_scaled > bad.a_se
    assert good.a == pytest.approx(0.6148, abs=1e-9) and good.chi2 < 1e-12
    three = cr.extrapolations(ds, y, np.full(4, 1e-3))
    assert set(three) == {"1/d", "1/d+1/d^2", "1/sqrt(d)"} and three["1/d+1/d^2"].dof == 1


def test_extrapolation_rejects_unusable_input():
    with pytest.raises(cr.CrossingError):
        cr.extrapolate([500, 1000], [0.6, np.nan], [0.01, 0.01])
    with pytest.raises(cr.CrossingError):
        cr.extrapolate([500, 1000], [0.6, 0.61], [0.01, 0.01], "1/d+1/d^2")
    with pytest.raises(cr.CrossingError):
        cr.crossing([0.5, 0.6], np.zeros((2, 1)), rising=True)


def test_paired_run_snapshots_continue_one_trajectory():
    spec = ModelSpec(omega=0.0)
    record = cr.paired_run(spec, 60, 0.8, seed=11, run_index=2, snapshots=(30, 90), n_test=200,
                           dtype=torch.float64)
    snaps = {(s["start"], s["steps"]): s for s in record["snapshots"]}
    assert set(snaps) == {(s, t) for s in cr.STARTS for t in (30, 90)}
    # the 90-step snapshot equals a single 90-step run from the same start on the same data
    problem = make_problem(spec, 60, 0.8, 11, 2, 200, torch.float64)
    for start in cr.STARTS:
        Q = train(problem, start, 90, record_points=1).Q
        assert snaps[(start, 90)]["train_loss"] == pytest.approx(train_loss(Q, problem), rel=1e-12)
        assert snaps[(start, 90)]["m"] == pytest.approx(summary_statistics(Q, problem)["m"], rel=1e-12)
    rows = cr.tidy_rows(record)
    alphas, runs, arr = cr.paired_matrices(rows, 90)
    assert list(alphas) == [0.8] and list(runs) == [2]
    f_sem, f_pos = snaps[("semantic", 90)]["train_loss"], snaps[("positional", 90)]["train_loss"]
    assert arr["delta_f"][0, 0] == pytest.approx(f_pos - f_sem)
    winner = "semantic" if f_sem <= f_pos else "positional"
    assert arr["excess_test"][0, 0] == pytest.approx(snaps[(winner, 90)]["test_error"] - record["linear_test_error"])
    with pytest.raises(cr.CrossingError):
        cr.paired_run(spec, 60, 0.8, seed=11, snapshots=(90, 30))


def test_crossing_shift_cancels_the_noise_common_to_both_curves():
    rng = np.random.default_rng(9)
    alphas = np.round(np.arange(0.45, 0.851, 0.05), 4)
    before = _paired_curves(0.60, 4e-4, alphas, 10, 0.0, 3e-5, rng)
    after = before - 4e-4 * 0.01  # every curve moves down by the same amount: the root moves by +0.01
    single = cr.alpha_c(alphas, before, half_width=1, n_boot=300, rng=np.random.default_rng(1))
    shift = cr.crossing_shift(alphas, before, after, rising=True, half_width=1, n_boot=300,
                              rng=np.random.default_rng(1))
    assert shift["shift"] == pytest.approx(0.01, abs=1e-9)
    # the seed offsets (3e-5, i.e. 0.075 in alpha per run) dominate each estimate but not the shift
    assert single.std > 0.01 and shift["std"] < 1e-9
    with pytest.raises(cr.CrossingError):
        cr.crossing_shift(alphas, before, after[:, :5], rising=True)


def test_extrapolation_survives_very_unequal_errors():
    # one size with a tiny error pins the fit there; the fit must stay solvable, not fail on conditioning
    fit = cr.extrapolate([500, 1000], [0.58, 0.60], [0.02, 1e-9], "1/d")
    assert fit.a == pytest.approx(0.62, abs=1e-7) and fit.dof == 0
    with pytest.raises(cr.CrossingError):
        cr.extrapolate([500, 500, 1000], [0.58, 0.59, 0.60], [0.01, 0.01, 0.01], "1/d+1/d^2")

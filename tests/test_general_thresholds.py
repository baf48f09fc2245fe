"""The thresholds and the linear baseline of the general model (the noisy strategy of
numerics.thresholds.locate, numerics.baseline), checked on the two-token rank-one model, where the
general path and the special one compute the same functions."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import numerics.baseline as baseline_module
from attnphase import cli
from derivations import ModelSpec
from numerics.baseline import linear_baseline
from numerics.fixed_points.solve import solve
from numerics.result import from_row
from numerics.thresholds.locate import locate_thresholds
from tidyio import read_rows, write_rows


def on_scan(spec, alphas, integrator="auto", branches=None, **options):
    """The thresholds located by the noisy strategy at draft precision on ``alphas``, not extended
    unless ``extend=True``."""
    return locate_thresholds(spec, "draft", alphas, integrator, branches, strategy="noisy",
                             **{"extend": False, **options})


def test_a_rank_two_student_has_the_baseline_of_its_teacher():
    # the baseline depends on the teacher only: a rank-2 student has the default model's
    default, rank2 = linear_baseline(ModelSpec()), linear_baseline(ModelSpec(rank=2))
    assert rank2.test_error == pytest.approx(default.test_error, rel=1e-12)
    assert rank2.B == pytest.approx(default.B, rel=1e-12)
    assert rank2.error < 1e-12


def test_the_scrambled_sobol_baseline_agrees_with_the_tensor_rule(monkeypatch):
    spec = ModelSpec(tokens=3)
    tensor = linear_baseline.__wrapped__(spec)
    assert tensor.error < 1e-10
    monkeypatch.setattr(baseline_module, "MAX_TENSOR_DIMENSION", 2)  # three Gaussian variables by QMC
    sobol = linear_baseline.__wrapped__(spec)
    assert 0 < sobol.error < 1e-6
    assert abs(sobol.test_error - tensor.test_error) < 4 * sobol.error


def test_a_fixed_point_reads_back_from_its_curve_row(tmp_path):
    fp = solve(ModelSpec(), 1.5, "semantic", "fast", "lines")
    path = tmp_path / "curve.csv"
    write_rows(str(path), [fp.to_row()])
    back = from_row(read_rows(str(path))[0])
    assert back.model == fp.model and back.branch == fp.branch and back.converged
    assert back.overlaps.pack() == pytest.approx(fp.overlaps.pack(), rel=1e-15)
    assert back.train_loss == fp.train_loss and back.test_error == fp.test_error
    assert back.error["train_loss"] == fp.error["train_loss"]
    assert back.error["q"] == fp.error["q"] and "test" not in back.error


def test_the_global_branch_changes_where_the_training_losses_cross(capsys):
    # the branches are walked through a mapper, as on the workers of --scheduler: each walk shipped
    # (pickled) and run apart from the others, here in reverse order
    import pickle

    spec = ModelSpec()
    calls = []

    def mapper(function, items):
        calls.append(len(items))
        function, items = pickle.loads(pickle.dumps((function, list(items))))
        return [function(item) for item in items[::-1]][::-1]

    th = on_scan(spec, [1.0, 1.5], "lines", ("semantic", "positional"), mapper=mapper)
    assert calls == [2]
    assert [(t.below, t.above, t.kind) for t in th.transitions] == [("positional", "semantic", "crossing")]
    a = th.alpha_c
    assert 1.0 < a < 1.5
    # the definition: F_sem - F_pos changes sign across alpha_c
    signs = []
    for x in (a - 2e-3, a + 2e-3):
        sem, pos = (solve(spec, x, b, "draft", "lines") for b in ("semantic", "positional"))
        signs.append(sem.train_loss - pos.train_loss)
    assert signs[0] > 0 > signs[1]
    # alpha_l: the semantic test error meets the baseline on the scan
    assert th.alpha_l_status == "ok" and a <= th.alpha_l < 1.5
    sem = solve(spec, th.alpha_l, "semantic", "draft", "lines")
    assert sem.test_error == pytest.approx(th.linear_test_error, rel=1e-4)
    assert cli.main(["thresholds", "--tokens", "3", "--workers", "0"]) == 2
    assert "--workers: must be >= 1" in capsys.readouterr().err
    assert cli.main(["solve", "--tokens", "3", "--alpha", "1", "--workers", "0"]) == 2
    assert "--workers: must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_scan_above_the_change_is_extended_down_to_it_and_says_so():
    """The global branch is semantic on [1.5, 2]: the change lies below the scan. Extended (one
    point at a time below it), the scan finds it where a scan around it does; not extended, it
    finds none."""
    spec = ModelSpec()
    pair = ("semantic", "positional")
    short = on_scan(spec, [1.5, 2.0], "lines", pair)
    assert not short.transitions and {b for _, b in short.global_branches()} == {"semantic"}
    extended = on_scan(spec, [1.5, 2.0], "lines", pair, extend=True)
    assert [(t.below, t.above) for t in extended.transitions] == [("positional", "semantic")]
    lowest = extended.global_branches()[0]
    assert lowest[1] == "positional" and lowest[0] == pytest.approx(1.2)  # the first point below, 0.8 x 1.5
    assert any(n.startswith("extended the scan to alpha in [1.2, 2]") for n in extended.notes)
    around = on_scan(spec, [1.0, 1.5], "lines", pair)
    assert extended.alpha_c == pytest.approx(around.alpha_c, abs=1e-5)
    assert extended.alpha_l == pytest.approx(around.alpha_l, abs=1e-5)


@pytest.mark.slow
def test_the_general_path_finds_the_thresholds_of_the_special_one():
    # the same functions (line quadrature, draft rules), the two root-finding strategies
    spec = ModelSpec()
    special = locate_thresholds(spec, "draft", [1.0, 1.25, 1.5, 1.75], strategy="deterministic")
    general = on_scan(spec, [1.0, 1.25, 1.5, 1.75], "lines", ("semantic", "positional"))
    assert general.alpha_c == pytest.approx(special.alpha_c, abs=1e-5)
    assert general.alpha_l == pytest.approx(special.alpha_l, abs=1e-5)
    assert math.isnan(general.alpha_c_error)  # draft line solves state no errors


def test_thresholds_refuses_a_scan_file_that_is_not_a_curve(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("alpha,branch\n1,semantic\n")
    assert cli.main(["thresholds", "--rank", "2", "--scan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--scan" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_of_the_general_path_writes_curve_thresholds_and_figure(tmp_path, capsys):
    import json

    out = tmp_path / "run"
    code = cli.main(["run", "--integrator", "qmc", "--alpha", "1:1.5:3", "--precision", "draft", "--json",
                     "--out", str(out)])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary.get("error")
    assert summary["status"] == "complete"
    assert [(t["below"], t["above"]) for t in summary["thresholds"]["transitions"]] == [("positional", "semantic")]
    assert 1.0 < summary["alpha_c"] < 1.5 and summary["alpha_c_error"] > 0
    assert (out / "curve.csv").exists() and all(Path(f).exists() for f in summary["figures"])


def test_the_onset_of_a_pitchfork_is_where_the_square_of_its_overlap_vanishes():
    from numerics.thresholds.noisy_roots import pitchfork_onset

    alphas = [0.55, 0.6, 0.7]
    exact = [0.3 * math.sqrt(a - 0.52) for a in alphas]
    root, error, three = pitchfork_onset(alphas, exact, [0.0] * 3)
    assert root == pytest.approx(0.52, abs=1e-12) and error < 1e-12
    # a curved d^2: the stated error covers the true onset
    curved = [0.3 * math.sqrt(a - 0.52) * (1 + 2 * (a - 0.52)) for a in alphas]
    root, error, three = pitchfork_onset(alphas, curved, [1e-3] * 3)
    assert abs(root - 0.52) <= error and error < 0.05
    assert math.isnan(pitchfork_onset(alphas, exact[::-1], [0.0] * 3)[0])  # not growing: no onset


def test_a_root_is_located_to_its_noise_and_no_further():
    """On a line ``1.7 (a - r)`` plus a bounded deterministic noise (at most the stated noise), the
    root finder stops at the first point where the value is zero within its noise, and the root it
    reports from there lies within its stated error of the true one; without noise it is Brent's."""
    from numerics.thresholds.noisy_roots import root_within_noise

    r, slope = 0.314611, 1.7
    for noise in (5e-4, 1e-3, 3e-3):
        for phase in np.linspace(0.0, 6.0, 7):
            calls = []

            def f(a):
                calls.append(a)
                return slope * (a - r) + noise * math.sin(4000.0 * a + phase)

            root, error, details = root_within_noise(f, 0.256, 0.32, lambda a: noise)
            assert abs(root - r) <= error, (noise, phase, root, error)
            assert error < 2.5 * noise / slope
            assert len(calls) <= 5 and "stopped_within_noise_at" in details
    root, error, details = root_within_noise(lambda a: slope * (a - r) * (1 + a), 0.256, 0.32, lambda a: 0.0)
    assert root == pytest.approx(r, abs=2e-4) and abs(root - r) <= error
    assert "stopped_within_noise_at" not in details


def test_a_root_refined_on_a_finer_rule_lies_within_its_stated_error_as_often_as_stated():
    """Points of a curved multiplier (``g - 1 = 0.99 (a - r) - 0.4 (a - r)^2``) as a refined birth has
    them: five points across the bracket on one rule, whose errors move together (an offset common to
    them and a slowly varying part, as the same nodes at every alpha give), and one at the located
    root on a finer rule with half their error. Over many draws the root's deviation from the true
    one, in units of its stated error, has a spread of one (within its sampling error), and the fine
    point sets the error: below its own error over the slope times 1.1. (A weighted fit through all
    six as independent points states errors 1.38 times too small here.) Exact points give the exact
    root."""
    from numerics.thresholds.noisy_roots import shifted_root

    r, at, fine_error = 0.56825, 0.5682, 1.1e-3
    alphas = np.array([0.5, 0.568404, 0.573454, 0.58, 0.75])
    errors = np.array([2.3e-3, 2.2e-3, 2.2e-3, 2.2e-3, 2.0e-3])

    def g(a):
        return 0.99 * (a - r) - 0.4 * (a - r) ** 2

    rng = np.random.default_rng(7)
    z = []
    for _ in range(400):
        offset, drift = 2.2e-3 * rng.standard_normal(2)
        coarse = g(alphas) + offset + 0.1 * drift * (alphas - at) / 0.25 + 1e-2 * errors * rng.standard_normal(5)
        root, error = shifted_root(alphas, coarse, errors, at, g(at) + fine_error * rng.standard_normal(),
                                   fine_error)
        assert error < 1.1 * fine_error / 0.99
        z.append((root - r) / error)
    z = np.array(z)
    assert abs(np.mean(z)) < 0.2 and 0.85 < np.std(z) < 1.15
    root, _ = shifted_root(alphas, g(alphas), errors, at, g(at), fine_error)
    assert root == pytest.approx(r, abs=1e-12)
    # a curve moved away from zero has no root to report: an error, which the refinement turns into
    # the located root standing with its reason
    from numerics.thresholds.record import ThresholdLocationError

    with pytest.raises(ThresholdLocationError, match="no real root"):
        shifted_root(alphas, -1.0 - (alphas - at) ** 2, errors, at, -1.0, fine_error)


def test_a_solve_that_raised_is_a_failed_point_of_its_alpha_not_a_lost_curve():
    from numerics.result import mark_global_minima
    from numerics.result import failed_point

    spec = ModelSpec(tokens=3)
    p = failed_point(spec, 4.5, "trivial", "draft", "qmc", "map not evaluable near x = [0.02 0.02]")
    assert not p.converged and p.status.startswith("failed: map not evaluable")
    row = p.to_row()
    assert row["converged"] is False and math.isnan(row["train_loss"]) and row["alpha"] == 4.5
    assert mark_global_minima([p])[0].global_minimum is False


def test_the_isotropic_part_is_the_average_over_rotations_of_the_trivial_block():
    import numpy as np

    from numerics.matrix_overlaps import MatrixOverlaps
    from numerics.fixed_points.subspaces import branch_subspace

    shape = (2, 3, 1, 1)
    sub = branch_subspace("semantic", shape)  # one semantic direction, two trivial ones
    assert sub.isotropic_blocks() == ((1, 2),)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    ov = sub.project(MatrixOverlaps(shape, q=A @ A.T, m=rng.standard_normal((1, 3)), V=A.T @ A + np.eye(3),
                                    theta=rng.standard_normal((3, 1))))
    # the Haar average over the rotations of the block, by a quadrature exact for quadratic forms
    average = 0
    for phi in np.linspace(0, 2 * np.pi, 8, endpoint=False):
        O = np.eye(3)
        O[1:, 1:] = [[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]]
        average = average + ov.rotated(O).pack() / 8
    assert sub.isotropic(ov).pack() == pytest.approx(average, abs=1e-13)
    assert branch_subspace("positional", (2, 2, 1, 1)).isotropic_blocks() == ()


def test_the_rank_two_trivial_branch_converges_on_its_isotropic_point():
    # two trivial directions rotate into each other: without the reduction the pooled map's residual
    # stayed at 1e-2 (the scramblings' noise anisotropy, turned by their alignment)
    fp = solve(ModelSpec(rank=2), 2.0, "trivial", "draft")
    assert fp.converged, fp.status
    q = fp.overlaps.q
    assert q[0, 1] == 0 and q[0, 0] == q[1, 1] > 0


def test_a_parent_is_embedded_in_the_branch_that_grows_out_of_it():
    from numerics.branches.bifurcation import embedding
    from numerics.fixed_points.subspaces import branch_subspace

    shape = (2, 2, 1, 1)
    mixed = branch_subspace("mixed", shape)  # direction 1 semantic, direction 2 positional
    assert embedding(branch_subspace("positional", shape), mixed) == (1, 0)
    assert embedding(branch_subspace("semantic", shape), mixed) == (0, 1)
    assert embedding(branch_subspace("mixed", shape), branch_subspace("positional", shape)) is None
    assert embedding(branch_subspace("trivial", (3, 1, 1, 1)), branch_subspace("semantic", (3, 1, 1, 1))) == (0,)


def test_a_multiplier_computed_scrambling_by_scrambling_elsewhere_is_the_same():
    """Each scrambling's multiplier is a function of its (picklable) arguments alone: computed in
    reverse order through a pickle round trip, as a worker would, it is the same to the bit."""
    import pickle

    from numerics.branches.bifurcation import growth_multiplier

    spec = ModelSpec(tokens=3, omega=0.3)
    parent = solve(spec, 0.3, "trivial", "draft")
    here = growth_multiplier(spec, parent, "semantic", "draft")

    def elsewhere(function, items):
        shipped = pickle.loads(pickle.dumps((function, list(items))))
        return [shipped[0](item) for item in shipped[1][::-1]][::-1]

    there = growth_multiplier(spec, parent, "semantic", "draft", mapper=elsewhere)
    assert there == here and 0.5 < here.value < 1.5


@pytest.mark.slow
def test_the_mixed_branch_is_born_where_the_old_extrapolation_put_it():
    # the birth located on the positional branch (the multiplier of the semantic direction crosses 1)
    # against the onset extrapolated from the mixed branch's own overlap, within their errors
    from numerics.branches.bifurcation import growth_multiplier
    from numerics.thresholds.noisy_roots import pitchfork_onset

    spec = ModelSpec(rank=2, omega=0.3)
    lo, hi = (growth_multiplier(spec, solve(spec, a, "positional", "draft"), "mixed", "draft")
              for a in (0.45, 0.7))
    assert lo.value + 3 * lo.error < 1 < hi.value - 3 * hi.error
    assert lo.step_change < 0.1 * lo.statistical  # the likelihood-ratio difference is smooth
    slope = (hi.value - lo.value) / (hi.alpha - lo.alpha)
    birth = lo.alpha + (1 - lo.value) / slope
    birth_error = max(lo.error, hi.error) / slope
    alphas = [0.7, 0.8, 0.9]
    points = [solve(spec, a, "mixed", "draft") for a in alphas]
    d = [p.invariants["theta_singular_values"][0] / spec.sigma**2 for p in points]
    d_error = [p.error["theta_singular_values_1"] / spec.sigma**2 for p in points]
    onset, onset_error, _ = pitchfork_onset(alphas, d, d_error)
    assert abs(birth - onset) < 3 * math.hypot(birth_error, onset_error)


@pytest.mark.slow
def test_a_birth_is_located_on_the_parent_where_the_coarse_rule_orders_the_child_wrongly():
    # at omega = 0 the draft scan finds the mixed branch at alpha = 0.5 and puts it 5e-8 above the
    # positional one (the global minimum there on the scan), where fast precision puts it 2e-6 below
    # (docs/phase_diagram.md, "The rank-2 diagram"): the change is the birth, located on the
    # positional branch from the last scanned point without the mixed one, below 0.5
    spec = ModelSpec(rank=2, omega=0.0)
    th = on_scan(spec, [0.25, 0.5, 0.75], branches=("positional", "mixed"))
    first = th.transitions[0]
    assert (first.below, first.above, first.kind) == ("positional", "mixed", "bifurcation")
    assert first.details["method"] == "multiplier on the parent"
    assert 0.25 < th.alpha_c < 0.5 and th.alpha_c_error < 0.1


def test_no_branch_on_the_scan_is_an_absence_and_no_converged_point_a_solver_failure():
    """A scan on which every solve fell onto a smaller branch holds no point: no threshold, for a
    reason of the model (ThresholdError). A scan whose points exist but none converged is a failure
    of the solver (ThresholdLocationError, a SolverError), never reported as an absence."""
    import dataclasses

    from numerics.branches.follow import BranchCurve
    from numerics.solver.iteration import SolverError
    from numerics.thresholds.record import ThresholdError, ThresholdLocationError
    from tests.fakes import FakeGeneralTheoryAPI

    spec = ModelSpec(tokens=3)
    with pytest.raises(ThresholdError, match="no branch of semantic was found on the scan"):
        on_scan(spec, [1.0, 2.0], "qmc", ("semantic",), scan={})
    stuck = [dataclasses.replace(FakeGeneralTheoryAPI().fixed_point(spec, a, "semantic", "draft"), converged=False,
                                 status="max_iterations") for a in (1.0, 2.0)]
    with pytest.raises(ThresholdLocationError, match="no branch of semantic converged on the scan") as caught:
        on_scan(spec, [1.0, 2.0], "qmc", ("semantic",), scan={"semantic": BranchCurve("semantic", stuck, [])})
    assert isinstance(caught.value, SolverError) and not isinstance(caught.value, ThresholdError)


@pytest.mark.slow
def test_a_birth_located_above_its_modes_aim_is_refined_on_four_times_the_points(monkeypatch):
    """With the draft mode aiming at an error it cannot reach, the rank-2 birth located at draft is
    refined once: the parent solved at the root on 2^13 x 4 points, its multiplier there, and the
    root of the fit through every multiplier, with a smaller error, within the located root's error."""
    import dataclasses

    from numerics.channel.qmc import precision as qmc_precision

    draft = qmc_precision.QMC_PRECISIONS["draft"]
    monkeypatch.setitem(qmc_precision.QMC_PRECISIONS, "draft", dataclasses.replace(draft, threshold_aim=1e-4))
    spec = ModelSpec(rank=2, omega=0.3)
    th = on_scan(spec, [0.5, 0.75], branches=("positional", "mixed"))
    birth = th.transitions[0]
    assert birth.kind == "bifurcation"
    refinement = birth.details["refinement"]
    assert refinement["status"] == "refined" and refinement["rule"] == "draft, 2^13 points"
    located = refinement["located"]
    assert birth.error < located["error"]
    assert abs(birth.alpha - located["root"]) < located["error"] + birth.error


@pytest.mark.slow
def test_an_alpha_l_located_above_its_modes_aim_is_refined_and_meets_the_line_quadratures(monkeypatch):
    """With the draft mode aiming at an error it cannot reach, the two-token model's ``alpha_l`` located
    by the QMC integrator at draft is refined once on 2^13 x 4 points: a smaller error, and within
    three of them of the line quadrature's ``alpha_l`` (``attnphase thresholds --omega 0.3 --precision
    fast``: 1.492271 +- 1.3e-5)."""
    import dataclasses

    from numerics.channel.qmc import precision as qmc_precision

    draft = qmc_precision.QMC_PRECISIONS["draft"]
    monkeypatch.setitem(qmc_precision.QMC_PRECISIONS, "draft", dataclasses.replace(draft, threshold_aim=1e-4))
    th = on_scan(ModelSpec(omega=0.3), [1.0, 1.5], "qmc", ("semantic",))
    refinement = th.details["alpha_l"]["refinement"]
    assert refinement["status"] == "refined" and refinement["rule"] == "draft, 2^13 points"
    assert th.alpha_l_error < refinement["located"]["error"]
    assert abs(th.alpha_l - 1.492271) < 3 * th.alpha_l_error


@pytest.mark.slow
def test_a_crossing_located_above_its_modes_aim_is_refined_and_meets_the_line_quadratures(monkeypatch):
    """The same for the two-token model's crossing of the positional and semantic training losses
    (``alpha_c``), against the line quadrature's (``attnphase thresholds --omega 0.3 --precision fast``:
    1.251535 +- 1.7e-5)."""
    import dataclasses

    from numerics.channel.qmc import precision as qmc_precision

    draft = qmc_precision.QMC_PRECISIONS["draft"]
    monkeypatch.setitem(qmc_precision.QMC_PRECISIONS, "draft", dataclasses.replace(draft, threshold_aim=1e-4))
    th = on_scan(ModelSpec(omega=0.3), [1.0, 1.5], "qmc", ("positional", "semantic"))
    crossing = th.transitions[0]
    assert crossing.kind == "crossing"
    refinement = crossing.details["refinement"]
    assert refinement["status"] == "refined" and refinement["rule"] == "draft, 2^13 points"
    assert crossing.error < refinement["located"]["error"]
    assert abs(th.alpha_c - 1.251535) < 3 * crossing.error

"""``attnphase validate`` for the general model (docs/theory.md, section 4): branch of each run from its
invariants, z-scores with the theory's stated error, the theory's global minimum, the d-scan, and the
two-token rank-one model's rows from its signed overlaps."""
from __future__ import annotations

import json
import math
import os
import types

import numpy as np
import pytest

from derivations.spec import ModelSpec
from numerics.fixed_points.errors import BranchNotFound
from tidyio import read_rows
from tests.fakes import FakeInvariantSolve
from validation import runs, statistics, theory_cache
from validation.simulate import simulate

RANK2 = ModelSpec(rank=2, omega=0.3)
TOKENS3 = ModelSpec(tokens=3, omega=0.3)
D = 1000
SIGMA2 = RANK2.sigma ** 2


def _linear(spec):
    """As ``numerics.api.linear_baseline``: the two-token rank-one model only."""
    spec.require_two_token_rank_one("the linear baseline")
    return types.SimpleNamespace(test_error=0.002)


def _theory(error=1e-4, absent=()):
    fake = FakeInvariantSolve(error, absent)
    return theory_cache.Theory(fake, _linear, "draft"), fake


def _run(q=(0.1, 0.05), m=0.0, theta=0.0, te=0.0014, tl=0.0030):
    """One rank-2 record (L = 2, t = 1): invariants as ``validation.simulate.summary_statistics`` names them;
    ``theta`` is theta/sigma^2."""
    return {"q_eig_1": q[0], "q_eig_2": q[1], "m_sv_1": m, "theta_sv_1": theta * SIGMA2,
            "m_col_max": m, "m_col_min": 0.0, "theta_over_sigma2_col_max": theta, "theta_over_sigma2_col_min": 0.0,
            "test_error": te, "train_loss": tl, "linear_test_error": 0.002}


def _result(runs_, alpha=1.0, init="random", spec=RANK2, d=D):
    return {"model": spec.to_dict(), "d": d, "alpha": alpha, "init": init, "steps": 10, "lr": 0.15,
            "optimizer": "gd", "dtype": "float32", "seed": 0, "n_test": 10, "runs": runs_}


# --------------------------------------------------------------------------- branch of a run


def test_each_run_is_put_on_the_branch_its_invariants_say():
    assert statistics.run_branch(_run(theta=0.6), RANK2, D) == "semantic"
    assert statistics.run_branch(_run(m=0.25), RANK2, D) == "positional"
    assert statistics.run_branch(_run(m=0.25, theta=0.6), RANK2, D) == "mixed"
    assert statistics.run_branch(_run(), RANK2, D) == "trivial"
    # overlaps at the level a direction of norm sqrt(q_eig_1) has by chance are not a branch:
    # q = 0.45 at d = 100 gives 3 x 0.134 = 0.40
    assert statistics.run_branch(_run(q=(0.45, 0.1), m=0.3, theta=0.3), RANK2, 100) == "trivial"
    # a rank-one student with both overlaps (L = 3: three positional directions) takes the larger
    one = {"q_eig_1": 0.07, "m_sv_1": 0.3, "theta_sv_1": 0.1 * SIGMA2, "test_error": 0.0, "train_loss": 0.0}
    assert statistics.run_branch(one, TOKENS3, D) == "positional"
    # below the cut: 3 x sqrt(3 q / (sigma^2 d)) = 0.087 for m over three positional directions
    assert statistics.run_branch(dict(one, m_sv_1=0.08), TOKENS3, D) == "semantic"
    assert statistics.run_branch(dict(one, m_sv_1=0.08, theta_sv_1=0.04 * SIGMA2), TOKENS3, D) == "trivial"


def test_the_runs_of_one_start_are_compared_per_branch_they_reached():
    th, _ = _theory()
    res = _result([_run(m=0.25, theta=0.6), _run(m=0.25, theta=0.61), _run(m=0.25, q=(0.06, 0.001), tl=0.0036)])
    rows = statistics.compare(res, RANK2, th)
    assert {r["branch"]: r["n_seeds"] for r in rows} == {"mixed": 2, "positional": 1}
    assert {r["quantity"] for r in rows} == {"q_eig_1", "q_eig_2", "m_sv_1", "theta_sv_1", "test_error", "train_loss"}
    # one run on a branch: no z-score (no spread to compare with)
    assert all(math.isnan(r["z"]) for r in rows if r["branch"] == "positional")


# --------------------------------------------------------------------------- z-scores


def test_z_score_carries_the_theorys_stated_error():
    th, _ = _theory(error=3e-3)
    rng = np.random.default_rng(1)
    ms = 0.25 + 1e-3 * rng.standard_normal(4)
    res = _result([_run(m=float(x), theta=0.6, q=(0.1, 0.06)) for x in ms], init="mixed")
    rows = {r["quantity"]: r for r in statistics.compare(res, RANK2, th)}
    row = rows["m_sv_1"]
    sem = np.std(ms, ddof=1) / 2
    assert row["sim_sem"] == pytest.approx(sem)
    assert row["theory"] == 0.25 and row["theory_error"] == 3e-3
    assert row["z"] == pytest.approx((ms.mean() - 0.25) / math.sqrt(sem ** 2 + 3e-3 ** 2))
    # the same simulation against a theory without a stated error: the seed-only z-score
    bare = statistics.stats_row(ms, 0.25)
    assert bare["z"] == pytest.approx((ms.mean() - 0.25) / sem) and bare["theory_error"] == 0.0
    # a wrong theory value fails, by the combined error
    far = statistics.stats_row(ms, 0.25 + 0.05, 3e-3)
    assert statistics.failing([far], 3.0) and abs(far["z"]) == pytest.approx(0.05 / math.hypot(sem, 3e-3), rel=0.05)


def test_a_branch_the_theory_does_not_have_gives_rows_without_z_and_is_unmatched():
    th, _ = _theory(absent=("mixed",))
    res = _result([_run(m=0.25, theta=0.6), _run(m=0.26, theta=0.6)], alpha=0.5)
    rows = statistics.compare(res, RANK2, th)
    assert rows and all(math.isnan(r["z"]) and r["theory_on_branch"] is False for r in rows)
    assert [(u["alpha"], u["branch"]) for u in statistics.unmatched(rows)] == [(0.5, "mixed")]


# --------------------------------------------------------------------------- memo on disk


def test_invariant_solves_are_memoized_on_disk_absent_branches_included(tmp_path):
    th, fake = _theory(absent=("mixed",))
    for _ in range(2):  # a second validate: a fresh memo reading the same folder
        memo = theory_cache.memoized(th, str(tmp_path))
        point = theory_cache.invariant_point(memo, RANK2, 1.0, "semantic")
        assert point["values"]["theta_sv_1"] == 0.15 and point["errors"]["theta_sv_1"] == 1e-4
        assert not theory_cache.invariant_point(memo, RANK2, 1.0, "mixed")["present"]
        with pytest.raises(BranchNotFound):
            memo.solve(RANK2, 1.0, "mixed", precision="draft")
    assert sorted(fake.calls) == [(1.0, "mixed", "draft"), (1.0, "semantic", "draft")]


def _fixed_point(spec, alpha, branch, precision):
    """As ``numerics.api.solve``: a :class:`~numerics.result.FixedPoint` with scalar overlaps for the
    two-token rank-one model, matrix ones (the mixed branch of ``FakeInvariantSolve``) for rank 2."""
    from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps
    from numerics.overlaps import HatOverlaps, Overlaps
    from numerics.result import FixedPoint

    if spec == ModelSpec():
        overlaps, hats = Overlaps(q=0.1, m=0.0, V=5.0, theta=0.15), HatOverlaps(1.0, 0.0, 0.5, 0.0)
        error = {"q": 1e-4, "m": 1e-4, "V": 1e-4, "theta": 2e-4}
    else:
        overlaps = MatrixOverlaps(spec.shape, q=np.diag([0.1, 0.06]), m=[[0.0, 0.25]], V=np.eye(2),
                                  theta=[[0.15], [0.0]])
        hats = MatrixHats(spec.shape, qhat=np.eye(2), mhat=[[0.0, 0.0]], Vhat=np.eye(2), thetahat=[[0.0], [0.0]])
        error = {"q_eigenvalues_1": 1e-4, "q_eigenvalues_2": 1e-4, "m_singular_values_1": 3e-4,
                 "theta_singular_values_1": 2e-4}
    return FixedPoint(alpha=alpha, branch=branch, overlaps=overlaps, hats=hats, test_error=0.0014, train_loss=0.0028,
                      converged=True, iterations=5, residual=1e-12, error=dict(error, test_error=1e-5, train_loss=1e-5),
                      diagnostics={}, model=spec, precision=precision, wall_time=0.01)


def test_one_memoized_theory_serves_the_scalar_and_the_invariant_comparisons(tmp_path):
    """One solver for every model (``numerics.api.solve``), one memo: a two-token rank-one point is
    compared through its signed scalar overlaps, a rank-2 point through its invariants with their
    stated errors, from the same remembered solves, in the validate that solved them and in a
    repeated one that reads them from disk."""
    calls = []

    def solve(spec, alpha, branch, precision="fast"):
        calls.append((spec.rank, branch))
        return _fixed_point(spec, alpha, branch, precision)

    theory = theory_cache.Theory(solve, _linear, "draft")
    sign = np.array([1.0, -1.0, 1.0, -1.0])
    theta = sign * (0.6 + np.array([1e-3, -2e-3, 0.0, 1e-3]))
    paper = _result([{"test_error": 0.0014, "train_loss": 0.0028, "q": 0.1, "m_signed": m, "m": abs(m),
                      "theta_over_sigma2_signed": th, "theta_over_sigma2": abs(th), "linear_test_error": 0.002}
                     for th, m in zip(theta, [0.01, -0.02, 0.0, 0.01])], spec=ModelSpec())
    rank2 = _result([_run(m=0.25 + x, theta=0.6, q=(0.1, 0.06), tl=0.0028) for x in (-1e-3, 0.0, 1e-3)])
    for _ in range(2):  # a fresh memo reading the same folder: no solve again
        memo = theory_cache.memoized(theory, str(tmp_path))
        scalar = {r["quantity"]: r for r in statistics.compare(paper, ModelSpec(), memo)}
        assert set(scalar) == set(theory_cache.QUANTITIES) and {r["branch"] for r in scalar.values()} == {"semantic"}
        assert scalar["theta_over_sigma2"]["theory"] == pytest.approx(0.6) and scalar["q"]["theory"] == 0.1
        assert scalar["theta_over_sigma2"]["sim_mean"] == pytest.approx(0.6)  # sign-fixed, not |theta|
        assert all(r["theory_error"] == 0 and r["theory_on_branch"] is True for r in scalar.values())
        invariant = {r["quantity"]: r for r in statistics.compare(rank2, RANK2, memo)}
        assert {r["branch"] for r in invariant.values()} == {"mixed"}
        assert {q: r["theory"] for q, r in invariant.items()} == pytest.approx(
            {"q_eig_1": 0.1, "q_eig_2": 0.06, "m_sv_1": 0.25, "theta_sv_1": 0.15, "test_error": 0.0014,
             "train_loss": 0.0028})
        assert invariant["m_sv_1"]["theory_error"] == 3e-4 and invariant["theta_sv_1"]["theory_error"] == 2e-4
        # the scalar model's remembered solve holds its invariants too: the invariant view reads it
        point = theory_cache.invariant_point(memo, ModelSpec(), 1.0, "semantic")
        assert point["values"]["theta_sv_1"] == pytest.approx(0.15) and point["errors"]["theta_sv_1"] == 2e-4
    assert calls == [(1, "semantic"), (2, "mixed")]
    assert len(list(tmp_path.glob("theory_*.json"))) == 2


# --------------------------------------------------------------------------- run_validate, d-scan


def _fake_simulate(spec, d, alpha, init, **kw):
    """Random starts: two runs reach the mixed branch, one the positional; other starts their own branch."""
    rng = np.random.default_rng(int(10 * alpha))
    if init == "random":
        runs_ = [_run(m=0.25 + 1e-3 * rng.standard_normal(), theta=0.6 + 1e-3 * rng.standard_normal(),
                      q=(0.1, 0.06), tl=0.0028) for _ in range(2)] + [_run(m=0.25, q=(0.06, 0.001), tl=0.0036)]
    else:
        runs_ = [_run(m=0.25 + 1e-3 * rng.standard_normal(), q=(0.06, 0.001), tl=0.0036) for _ in range(3)]
    return {**_result(runs_, alpha, init, spec, d), "seed": kw.get("seed", 0)}


def test_run_validate_reports_every_row_and_the_theorys_global_minimum(tmp_path):
    th, fake = _theory(absent=("semantic",))
    summary = runs.run_validate(RANK2, [1.0, 2.0], ["positional", "random"], D, {"seeds": 3, "seed": 0},
                                str(tmp_path), theory=th, simulate_fn=_fake_simulate, curve_points=0)
    rows = read_rows(str(tmp_path / "validate.csv"))
    assert "theory_error" in rows[0]
    # per alpha: positional (3 runs), random on mixed (2) and positional (1), 6 quantities each; the linear row
    assert len(rows) == 2 * (3 * 6 + 1)
    linear = [r for r in rows if r["branch"] == "linear"]
    assert all(r["theory"] == "nan" for r in linear)  # no linear-baseline theory for a rank-2 student
    glob = {(g["alpha"], g["init"]): g for g in summary["global_minimum"]}
    g = glob[(1.0, "random")]
    assert g["theory_global"] == "mixed" and g["reached"] == {"positional": 1, "mixed": 2}
    assert g["runs_at_global"] == 2 and g["theory_train_loss"]["semantic"] == {"absent": True}
    assert g["theory_train_loss"]["mixed"]["train_loss"] == 0.0028
    assert glob[(2.0, "positional")]["runs_at_global"] == 0
    stored = json.loads((tmp_path / "validate.json").read_text())
    assert stored["global_minimum"] and stored["status"] == "complete"
    assert os.path.exists(tmp_path / "validate.png")
    assert {c["branch"] for c in read_rows(str(tmp_path / "theory_curves.csv"))} == {"positional", "trivial", "mixed"}
    solved = len(fake.calls)
    runs.run_validate(RANK2, [1.0, 2.0], ["positional", "random"], D, {"seeds": 3, "seed": 0}, str(tmp_path),
                      theory=_theory(absent=("semantic",))[0], simulate_fn=_fake_simulate, curve_points=0)
    assert solved == 8  # four branches at two alphas, once


def test_dscan_of_the_general_model_fits_each_invariant_and_uses_the_theory_error(tmp_path):
    th, _ = _theory(error=2e-3)

    def simulate(spec, d, alpha, init, **kw):
        rng = np.random.default_rng(d)
        return _result([_run(m=0.25 + 0.5 / d + 1e-3 * rng.standard_normal(), q=(0.06, 0.001), tl=0.0036)
                        for _ in range(4)], alpha, init, spec, d)

    out = runs.run_dscan(RANK2, 2.0, ["positional"], [100, 200, 400], {"seeds": 4, "seed": 0}, str(tmp_path),
                         theory=th, simulate_fn=simulate)
    fit = next(f for f in out["fits"] if f["quantity"] == "m_sv_1")
    assert fit["branch"] == "positional" and fit["theory"] == 0.25 and fit["theory_error"] == 2e-3
    assert fit["z"] == pytest.approx((fit["a"] - 0.25) / math.hypot(fit["a_se_scaled"], 2e-3))


# --------------------------------------------------------------------------- the default model unchanged


def test_the_two_token_models_rows_follow_from_the_runs(tmp_path):
    """A tiny real run with a fixed fake theory: every row of validate.csv is recomputed here from
    the runs (``simulate`` again, same seeds) by its definition: ``Q``'s sign fixed so that the
    branch's own overlap is positive, the mean and sample std over seeds, and
    ``z = (mean - theory) / (std / sqrt(seeds))``; they agree to a relative 1e-9 (the same sums,
    perhaps in another order)."""
    theory = {"semantic": dict(q=0.1, m=0.0, theta=0.15, test_error=0.0014, train_loss=0.0036),
              "positional": dict(q=0.1, m=0.25, theta=0.0, test_error=0.0035, train_loss=0.0036)}

    def solve(spec, alpha, branch, precision="fast"):
        return types.SimpleNamespace(**theory[branch], V=1.0, converged=True)

    th = theory_cache.Theory(solve, lambda spec: types.SimpleNamespace(test_error=0.002))
    kw = {"seeds": 2, "seed": 3, "steps": 30, "lr": None, "optimizer": "gd", "dtype": "float32", "device": "cpu",
          "n_test": 50}
    runs.run_validate(ModelSpec(), [1.0], ["semantic", "positional"], 40, kw, str(tmp_path), theory=th,
                      curve_points=0)
    got = {(r["init"], r["quantity"]): r for r in read_rows(str(tmp_path / "validate.csv"))}
    assert len(got) == 11

    def check(key, values, expected):
        row = got[key]
        mean, std = float(np.mean(values)), float(np.std(values, ddof=1))
        assert float(row["sim_mean"]) == pytest.approx(mean, rel=1e-9, abs=1e-15), key
        assert float(row["z"]) == pytest.approx((mean - expected) / (std / math.sqrt(len(values))), rel=1e-9), key
        assert float(row["theory_error"]) == 0

    for init in ("semantic", "positional"):
        result = simulate(ModelSpec(), 40, 1.0, init, **kw)
        rs = result["runs"]
        assert got[(init, "q")]["branch"] == init  # both runs stay on the branch they started from
        own = "theta_over_sigma2_signed" if init == "semantic" else "m_signed"
        sign = np.sign([r[own] for r in rs])
        per_run = {"test_error": [r["test_error"] for r in rs], "train_loss": [r["train_loss"] for r in rs],
                   "q": [r["q"] for r in rs], "m": sign * [r["m_signed"] for r in rs],
                   "theta_over_sigma2": sign * [r["theta_over_sigma2_signed"] for r in rs]}
        t = dict(theory[init], theta_over_sigma2=theory[init]["theta"] / ModelSpec().sigma ** 2)
        for quantity, values in per_run.items():
            check((init, quantity), values, t[quantity])
        if init == "semantic":  # the baseline's rows come from the first start's runs
            check(("linear", "test_error"), [r["linear_test_error"] for r in rs], 0.002)


# --------------------------------------------------------------------------- the command line


def test_cli_validate_rank2_with_a_fake_general_theory(tmp_path, capsys, monkeypatch):
    from attnphase.cli import main

    fake = FakeInvariantSolve(absent=("semantic",))
    monkeypatch.setattr(theory_cache, "default_theory", lambda precision: theory_cache.Theory(
        fake, _linear, precision))
    status = main(["validate", "--rank", "2", "--inits", "mixed,random", "--alphas", "1", "--d", "60", "--seeds",
                   "2", "--steps", "20", "--n-test", "50", "--curve-points", "0", "--tolerance", "1e9", "--out",
                   str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    assert {p for _, _, p in fake.calls} == {"draft"}  # the general model's default precision
    assert "GLOBAL alpha=1 init=mixed" in out and "theory global minimum mixed" in out
    quantities = {r["quantity"] for r in read_rows(str(tmp_path / "validate.csv"))}
    assert {"q_eig_1", "q_eig_2", "m_sv_1", "theta_sv_1", "test_error", "train_loss"} <= quantities


@pytest.mark.parametrize("argv, flag", [
    (["--tokens", "3", "--inits", "semantic,mixed"], "--inits"),
    (["--tokens", "3", "--d", "3"], "--d"),
    (["--tokens", "4", "--d-scan", "--d-values", "100,4"], "--d-values"),
    (["--rank", "2", "--precision", "exact"], "--precision"),
])
def test_cli_validate_refuses_bad_combinations_in_one_line(argv, flag, tmp_path, capsys):
    from attnphase.cli import main

    status = main(["validate", *argv, "--out", str(tmp_path / "v")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 2 and len(err) == 1 and err[0].startswith("attnphase validate: ") and flag in err[0], err
    assert not os.path.exists(tmp_path / "v")


def test_final_loss_fall_is_the_relative_fall_over_the_last_steps():
    run = {"loss_curve": [[0, 2.0], [50, 1.5], [90, 1.1], [95, 1.05], [100, 1.0]]}
    assert statistics.final_loss_fall(run) == pytest.approx(0.1)
    assert statistics.final_loss_fall(run, 0.5) == pytest.approx(0.5)

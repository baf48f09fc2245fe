"""Finite-size simulations (validation.simulate) and their comparison with theory (validation.statistics,
theory_cache, runs)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from derivations.spec import ModelSpec
from tidyio import read_rows
from validation import runs, statistics, theory_cache
from validation import simulate as sim

CPU = torch.device("cpu")
SPEC = ModelSpec()


def _gen(seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


# --------------------------------------------------------------------------- generator


def test_generator_statistics_match_spec():
    d, n = 200, 4000
    Qstar = torch.randn(d, generator=_gen(1), dtype=torch.float64)
    X, Y, Z = sim.sample_raw(SPEC, d, n, Qstar, _gen(2))
    # x_l = mu_l / sqrt(d) + z_l with mu_1 = ones = -mu_2
    torch.testing.assert_close(X - Z, torch.stack([torch.ones(d), -torch.ones(d)])[None].double().expand(n, 2, d)
                               / math.sqrt(d))
    zs = Z.reshape(-1)
    assert abs(float(zs.mean())) < 4 * SPEC.sigma / math.sqrt(zs.numel())
    assert float(zs.var()) == pytest.approx(SPEC.sigma ** 2, rel=4 * math.sqrt(2 / zs.numel()))
    # tokens independent: correlation of z_1 and z_2 coordinates ~ 0
    c = float((Z[:, 0] * Z[:, 1]).mean()) / SPEC.sigma ** 2
    assert abs(c) < 4 / math.sqrt(n * d)
    # teacher sees only the semantic part: Y = T Z, T = (1-omega) softmax(h* h*^T) + omega A
    hs = (Z.numpy() @ Qstar.numpy()) / math.sqrt(d)
    logits = hs[:, :, None] * hs[:, None, :]
    sm = np.exp(logits - logits.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    T = (1 - SPEC.omega) * sm + SPEC.omega * np.array(SPEC.A)
    np.testing.assert_allclose(Y.numpy(), T @ Z.numpy(), rtol=1e-12, atol=1e-12)
    # h* has variance sigma^2 |Q*|^2 / d ~ rho
    assert float(np.var(hs)) == pytest.approx(SPEC.sigma ** 2 * float(Qstar @ Qstar) / d, rel=0.1)


def test_batch_layout_and_statistics():
    d, n = 40, 300
    Qstar = torch.randn(d, generator=_gen(3), dtype=torch.float64)
    X, Y, _ = sim.sample_raw(SPEC, d, n, Qstar, _gen(4))
    b = sim.make_batch(SPEC, d, n, Qstar, _gen(4), torch.float64, CPU, chunk=70)  # several chunks
    torch.testing.assert_close(b.X3, X)
    torch.testing.assert_close(b.X[:n], X[:, 0])  # token-major
    torch.testing.assert_close(b.G, X @ X.transpose(1, 2))
    torch.testing.assert_close(b.C, Y @ X.transpose(1, 2))
    torch.testing.assert_close(b.yy, (Y * Y).sum((1, 2)))


def test_initialisations():
    p = sim.make_problem(SPEC, 50, 1.0, seed=5, n_test=10, dtype=torch.float64, device=CPU)
    torch.testing.assert_close(sim.initial_Q(p, "semantic"), p.Qstar)
    torch.testing.assert_close(sim.initial_Q(p, "positional"), torch.full((50,), 1 / math.sqrt(50)).double())
    r1, r2 = sim.initial_Q(p, "random"), sim.initial_Q(p, "random")
    torch.testing.assert_close(r1, r2)  # its own stream: repeatable
    assert 0.05 < float(r1.std()) < 0.15
    st = sim.summary_statistics(sim.initial_Q(p, "positional"), p)
    assert st["m"] == pytest.approx(1 / math.sqrt(50))  # m = mu_1 . Q / d


def test_device_chosen_at_run_time():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert sim.choose_device().type == expected
    assert sim.choose_device("cpu").type == "cpu"


# --------------------------------------------------------------------------- gradient


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_analytic_gradient_matches_autograd(attention):
    spec = SPEC.replace(attention=attention)
    d, n = 30, 80
    Qstar = torch.randn(d, generator=_gen(6), dtype=torch.float64)
    X, Y, _ = sim.sample_raw(spec, d, n, Qstar, _gen(7))
    batch = sim.make_batch(spec, d, n, Qstar, _gen(7), torch.float64, CPU)
    for scale in (0.3, 1.0, 3.0):
        Q = scale * torch.randn(d, generator=_gen(int(10 * scale)), dtype=torch.float64)
        Qg = Q.clone().requires_grad_(True)
        R_ref = sim.risk_autograd(Qg, X, Y, spec.lam, attention)
        R_ref.backward()
        R, grad = sim.risk_and_grad(Q, batch, spec.lam, attention)
        assert float(R) == pytest.approx(float(R_ref.detach()), rel=1e-12)
        torch.testing.assert_close(grad, Qg.grad, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(sim.per_sample_loss(Q, batch, attention).sum() + 0.5 * spec.lam * Q @ Q, R)


def test_float32_gradient_close_to_float64():
    p64 = sim.make_problem(SPEC, 100, 2.0, seed=1, n_test=10, dtype=torch.float64, device=CPU)
    p32 = sim.make_problem(SPEC, 100, 2.0, seed=1, n_test=10, dtype=torch.float32, device=CPU)
    Q = p64.Qstar
    _, g64 = sim.risk_and_grad(Q, p64.train, SPEC.lam)
    _, g32 = sim.risk_and_grad(Q.float(), p32.train, SPEC.lam)
    assert float((g32.double() - g64).norm() / g64.norm()) < 1e-4


# --------------------------------------------------------------------------- training


def _strip_times(rec):
    return {k: v for k, v in rec.items() if k not in ("train_time", "step_time", "wall_time")}


def test_validate_trains_the_starts_of_each_run_together_with_the_results_of_each_alone(tmp_path):
    """``cached_simulate`` simulates the starts not cached as one batch per run: each result is
    :func:`validation.simulate.simulate`'s for that start alone; a cached start is read back."""
    kw = dict(seeds=2, seed=4, steps=15, device="cpu", n_test=40)
    alone = {init: sim.simulate(SPEC, 30, 1.5, init, **kw) for init in ("semantic", "positional")}
    first = runs.cached_simulate(SPEC, 30, 1.5, ["positional"], kw, str(tmp_path))
    both = runs.cached_simulate(SPEC, 30, 1.5, ["semantic", "positional"], kw, str(tmp_path))
    assert both["positional"] == first["positional"]  # read back, not simulated again
    for init, res in both.items():
        assert [_strip_times(r) for r in res["runs"]] == [_strip_times(r) for r in alone[init]["runs"]]
        assert {k: v for k, v in res.items() if k.endswith(("_mean", "_std"))} == \
            {k: v for k, v in alone[init].items() if k.endswith(("_mean", "_std"))}


def test_fixed_seed_is_bit_identical_on_cpu():
    kw = dict(steps=60, device=CPU, n_test=200)
    a = sim.run_one(SPEC, 60, 1.5, "random", seed=3, run_index=1, **kw)
    b = sim.run_one(SPEC, 60, 1.5, "random", seed=3, run_index=1, **kw)
    assert _strip_times(a) == _strip_times(b)
    c = sim.run_one(SPEC, 60, 1.5, "random", seed=3, run_index=2, **kw)
    assert c["test_error"] != a["test_error"]
    # the aggregate call reproduces the individual runs
    agg = sim.simulate(SPEC, 60, 1.5, "random", seeds=3, seed=3, steps=60, device="cpu", n_test=200)
    assert _strip_times(agg["runs"][1]) == _strip_times(a)


def test_gd_decreases_risk_and_adam_runs():
    p = sim.make_problem(SPEC, 80, 2.0, seed=0, n_test=100, dtype=torch.float64, device=CPU)
    res = sim.train(p, "positional", steps=300, record_points=30)
    curve = [v for _, v in res.loss_curve]
    assert curve[-1] < curve[0]
    assert all(b <= a + 1e-12 for a, b in zip(curve, curve[1:]))  # small lr: monotone
    assert res.loss_curve[-1][0] == 300
    assert curve[-1] == pytest.approx(sim.train_loss(res.Q, p))
    res_adam = sim.train(p, "positional", steps=300, optimizer="adam", lr=0.01)
    assert res_adam.loss_curve[-1][1] < res_adam.loss_curve[0][1]


def test_semantic_start_stays_semantic_and_beats_linear_at_large_alpha():
    rec = sim.run_one(SPEC, 200, 3.0, "semantic", seed=0, steps=1500, device=CPU, n_test=2000)
    assert rec["theta_over_sigma2"] > 5 * rec["m"]
    assert rec["test_error"] < rec["linear_test_error"]


# --------------------------------------------------------------------------- linear baseline


def test_closed_form_linear_baseline_equals_gradient_descent():
    p = sim.make_problem(SPEC, 50, 2.0, seed=2, n_test=10, dtype=torch.float64, device=CPU)
    b = p.train
    B_closed = sim.fit_linear_baseline(b)
    B = torch.zeros(2, 2, dtype=torch.float64)
    lr = 1.0 / float(torch.linalg.eigvalsh(b.G.sum(0) / b.d).max())
    for _ in range(2000):
        _, grad = sim.linear_risk_and_grad(B, b)
        B = B - lr * grad
    torch.testing.assert_close(B, B_closed, rtol=1e-9, atol=1e-12)
    # the closed form is a stationary point of the risk, checked by autograd as well
    Bg = B_closed.clone().requires_grad_(True)
    R, _ = sim.linear_risk_and_grad(Bg, b)
    R.backward()
    assert float(Bg.grad.abs().max()) < 1e-9
    # rows of B ~ E[T] (docs/theory.md, section 1.7): the linear model is essentially Yhat = B Z
    assert float(B_closed.sum(1).sub(1).abs().max()) < 0.05


# --------------------------------------------------------------------------- CLI


def _cli(*args):
    code = "import sys; from attnphase.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, word", [
    (["simulate", "--d", "1"], "--d"),
    (["simulate", "--alpha", "-1"], "--alpha"),
    (["simulate", "--seeds", "0"], "--seeds"),
    (["simulate", "--steps", "-5"], "--steps"),
    (["simulate", "--lr", "0"], "--lr"),
    (["simulate", "--init", "bogus"], "--init"),
    (["simulate", "--sigma", "-1"], "sigma"),
    (["validate", "--alphas", "1,x"], "--alphas"),
    (["validate", "--tolerance", "0"], "--tolerance"),
    (["validate", "--inits", "semantic,foo"], "--inits"),
    (["validate", "--d-scan", "--d-values", "100,1"], "--d-values"),
])
def test_cli_bad_input_exits_2(args, word):
    r = _cli(*args)
    assert r.returncode == 2, r.stderr
    assert word in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_simulate_json():
    import json

    r = _cli("simulate", "--d", "40", "--alpha", "1", "--seeds", "2", "--steps", "20", "--n-test", "50", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("runs", "test_error_mean", "test_error_std", "train_loss_mean", "train_loss_std", "m_mean", "m_std",
                "theta_over_sigma2_mean", "theta_over_sigma2_std", "q_mean", "linear_test_error_mean", "wall_time"):
        assert key in out
    assert len(out["runs"]) == 2 and out["runs"][0]["loss_curve"][-1][0] == 20


# --------------------------------------------------------------------------- comparison logic (fake theory)


def _fake_theory(**values):
    base = dict(q=0.1, m=0.0, V=1.0, theta=0.15, test_error=0.0014, train_loss=0.0036, converged=True)

    def solve(spec, alpha, branch, precision="fast"):
        v = dict(base, **values)
        if branch == "positional":
            v.update(m=0.25, theta=0.0, test_error=0.0035)
        return types.SimpleNamespace(**v)

    return theory_cache.Theory(solve, lambda spec: types.SimpleNamespace(test_error=0.002))


def _fake_result(alpha, init, k=5, seed=0):
    """Per-seed records whose scatter has exactly zero mean about the fake theory's values."""
    rng = np.random.default_rng(seed)

    def noise(scale):
        e = rng.standard_normal(k)
        return scale * (e - e.mean())

    semantic = init == "semantic"
    sign = np.array([1 if i % 2 else -1 for i in range(k)])  # random global sign of Q
    te = (0.0014 if semantic else 0.0035) + noise(1e-5)
    tl = 0.0036 + noise(1e-5)
    q = 0.1 + noise(1e-3)
    m = sign * (noise(0.01) if semantic else 0.25 + noise(1e-3))
    th = sign * (0.6 + noise(1e-3) if semantic else noise(0.01))
    lin = 0.002 + noise(1e-6)
    runs = [{"test_error": te[i], "train_loss": tl[i], "q": q[i], "m_signed": m[i], "m": abs(m[i]),
             "theta_over_sigma2_signed": th[i], "theta_over_sigma2": abs(th[i]), "linear_test_error": lin[i]}
            for i in range(k)]
    return {"model": SPEC.to_dict(), "d": 100, "alpha": alpha, "init": init, "steps": 10, "lr": 0.15,
            "optimizer": "gd", "dtype": "float32", "seed": seed, "n_test": 10, "runs": runs}


def test_branch_and_sign_fixing():
    sem, pos = _fake_result(1.0, "semantic"), _fake_result(1.0, "positional")
    assert statistics.branch_of(sem) == "semantic" and statistics.branch_of(pos) == "positional"
    v = statistics.sign_fixed(sem["runs"], "semantic")
    assert (v["theta_over_sigma2"] > 0).all()
    assert (v["m"] < 0).any() and (v["m"] > 0).any()  # signed, not absolute
    v = statistics.sign_fixed(pos["runs"], "positional")
    assert (v["m"] > 0).all()
    # overlaps at the level a vector of that norm has by chance are trivial: linear
    # attention at d = 100 has q ~ 0.45 and |theta|/sigma^2 ~ 0.1 by chance (cut 3 x 0.134)
    chance = _fake_result(1.0, "semantic")
    for r in chance["runs"]:
        r.update(q=0.45, theta_over_sigma2=0.1 + 0.01 * r["theta_over_sigma2"])
    assert statistics.branch_of(chance) == "trivial"
    for r in chance["runs"]:  # a small semantic overlap at the softmax model's norm (cut 3 x 0.063) is not
        r.update(q=0.1, theta_over_sigma2=0.25)
    assert statistics.branch_of(chance) == "semantic"


def test_compare_point_z_scores():
    res = _fake_result(2.0, "semantic")
    rows = statistics.compare_point(res, SPEC, _fake_theory())
    row = next(r for r in rows if r["quantity"] == "test_error")
    vals = np.array([r["test_error"] for r in res["runs"]])
    sem = vals.std(ddof=1) / math.sqrt(5)
    assert row["sim_sem"] == pytest.approx(sem)
    assert row["z"] == pytest.approx((vals.mean() - 0.0014) / sem)
    th = next(r for r in rows if r["quantity"] == "theta_over_sigma2")
    assert th["theory"] == pytest.approx(0.15 / 0.25)
    assert not statistics.failing(rows, 1e6)
    bad = statistics.compare_point(res, SPEC, _fake_theory(test_error=0.0020))
    assert [r["quantity"] for r in statistics.failing(bad, 3.0)] == ["test_error"]


def test_no_z_score_against_a_theory_off_its_branch():
    res = _fake_result(0.5, "semantic")
    rows = statistics.compare_point(res, SPEC, _fake_theory(theta=0.0))  # the semantic solve collapsed
    assert all(math.isnan(r["z"]) for r in rows)
    assert rows[0]["theory_on_branch"] is False
    assert [u["alpha"] for u in statistics.unmatched(rows)] == [0.5]
    assert not statistics.unmatched(statistics.compare_point(res, SPEC, _fake_theory()))


def test_crossing_alpha_and_finite_size_fit():
    alphas = [1.0, 1.5, 2.0]
    lin = [np.full(4, 0.002)] * 3
    test = [np.array([0.003, 0.0031, 0.0029, 0.003]), np.array([0.0015, 0.0016, 0.0014, 0.0015]),
            np.array([0.001] * 4)]
    c = statistics.crossing_alpha(alphas, test, lin, n_boot=200)
    assert c["alpha_cross"] == pytest.approx(1.0 + 0.5 * 0.001 / 0.0015)
    assert 0 < c["alpha_cross_std"] < 0.1
    ds = [100, 200, 400, 800]
    fit = statistics.fit_finite_size(ds, [1.0 + 5.0 / d for d in ds], [0.01] * 4)
    assert fit["a"] == pytest.approx(1.0) and fit["b"] == pytest.approx(5.0)
    assert fit["chi2_dof"] == pytest.approx(0.0, abs=1e-12)


def test_theory_crossing_skips_missing_branch():
    def solve(spec, alpha, branch, precision="fast"):
        if alpha < 0.6:
            raise RuntimeError("below the spinodal")
        return types.SimpleNamespace(test_error=0.003 - 0.001 * alpha, converged=True)

    theory = theory_cache.Theory(solve, lambda spec: types.SimpleNamespace(test_error=0.002))
    assert theory_cache.theory_crossing(theory, SPEC, np.linspace(0.5, 2.0, 7)) == pytest.approx(1.0, abs=2e-3)
    assert theory_cache.theory_crossing(theory, SPEC, [0.5, 0.8, 1.4], refine=False) == pytest.approx(1.0)


def test_memoized_theory_solves_each_point_once(tmp_path):
    calls = []

    def solve(spec, alpha, branch, precision="fast"):
        calls.append((alpha, branch))
        if alpha < 0.6:
            raise RuntimeError("below the spinodal")
        return types.SimpleNamespace(q=0.1, m=0.0, V=2.0, theta=0.1, test_error=0.001, train_loss=0.002,
                                     converged=True)

    raw = theory_cache.Theory(solve, lambda spec: types.SimpleNamespace(test_error=0.002))
    # in memory; on disk (first fills the folder); on disk again: every solve is a hit
    for cache_dir, expected_calls in ((None, 2), (str(tmp_path), 2), (str(tmp_path), 0)):
        calls.clear()
        theory = theory_cache.memoized(raw, cache_dir)
        for _ in range(3):
            assert theory.solve(SPEC, 1.0, "semantic").theta == 0.1
            with pytest.raises(RuntimeError, match="spinodal"):
                theory.solve(SPEC, 0.5, "semantic")
        assert len(calls) == expected_calls


def test_run_validate_with_fake_theory_and_simulation(tmp_path):
    calls = []

    def fake_simulate(spec, d, alpha, init, **kw):
        calls.append((alpha, init))
        return _fake_result(alpha, init, seed=int(10 * alpha))

    kw = {"seeds": 5, "seed": 0}
    summary = runs.run_validate(SPEC, [1.0, 2.0], ["semantic", "positional"], 100, kw, str(tmp_path),
                                theory=_fake_theory(), simulate_fn=fake_simulate, curve_points=5)
    assert len(calls) == 4
    for name in ("validate.csv", "validate.png", "validate.json", "theory_curves.csv"):
        assert os.path.exists(tmp_path / name)
    rows = read_rows(str(tmp_path / "validate.csv"))
    assert len(rows) == 2 * (2 * len(theory_cache.QUANTITIES) + 1)
    assert {"sim_mean", "sim_std", "sim_sem", "theory", "z"} <= set(rows[0])
    assert summary["failing"] == []
    # resumed: nothing recomputed
    runs.run_validate(SPEC, [1.0, 2.0], ["semantic", "positional"], 100, kw, str(tmp_path),
                      theory=_fake_theory(), simulate_fn=fake_simulate, curve_points=5)
    assert len(calls) == 4
    bad = runs.run_validate(SPEC, [1.0, 2.0], ["semantic"], 100, kw, str(tmp_path / "b"),
                            theory=_fake_theory(train_loss=0.01), simulate_fn=fake_simulate, curve_points=3)
    assert {f["quantity"] for f in bad["failing"]} == {"train_loss"}


def test_the_theory_point_of_the_solver_itself_is_numbers():
    """The solver's records hold the two-token model's overlaps as ``1 x 1`` matrices: the theory point
    a simulation is compared with reads their entries (the semantic branch at alpha = 2, draft)."""
    point = theory_cache.theory_point(theory_cache.default_theory("draft"), SPEC, 2.0, "semantic")
    assert point["present"] and point["converged"] and point["on_branch"]
    assert all(isinstance(point[k], float) for k in ("theta_over_sigma2", "m", "q", "test_error"))
    assert point["theta_over_sigma2"] > 0.1 and point["m"] == 0.0 and point["q"] > 0


# --------------------------------------------------------------------------- slow: real agreement


@pytest.mark.slow
def test_agreement_with_theory_at_d400():
    """d = 400, alpha = 2, semantic start, 4 seeds, compared with numerics.api.

    Tolerances are set from the finite-size trend (O(1/d) corrections of a few per
    cent at d = 400, see docs/validation.md), not from the seed spread alone.
    """
    theory = theory_cache.default_theory("fast")
    res = sim.simulate(SPEC, 400, 2.0, "semantic", seeds=4, seed=0, n_test=5000)
    rows = {r["quantity"]: r for r in statistics.compare_point(res, SPEC, theory)}
    assert statistics.branch_of(res) == "semantic"
    for qty, rel in (("test_error", 0.10), ("train_loss", 0.10), ("theta_over_sigma2", 0.10), ("q", 0.15)):
        r = rows[qty]
        assert abs(r["sim_mean"] - r["theory"]) < rel * abs(r["theory"]) + 3 * r["sim_sem"], r
    assert abs(rows["m"]["sim_mean"]) < 0.05


def test_dscan_uses_independent_seeds_per_d(tmp_path):
    seeds = {}

    def fake_simulate(spec, d, alpha, init, **kw):
        seeds[d] = kw["seed"]
        res = _fake_result(alpha, init, seed=d)
        res["d"] = d
        return res

    out = runs.run_dscan(SPEC, 2.0, ["semantic"], [100, 200, 400], {"seeds": 5, "seed": 7}, str(tmp_path),
                         theory=_fake_theory(), simulate_fn=fake_simulate)
    assert len(set(seeds.values())) == 3
    assert seeds[100] == runs.scan_seed(7, 100)
    fit = next(f for f in out["fits"] if f["quantity"] == "test_error" and f["init"] == "semantic")
    assert fit["a"] == pytest.approx(0.0014) and abs(fit["z"]) < 1e-6
    assert os.path.exists(tmp_path / "dscan.png")

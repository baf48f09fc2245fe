"""The simulator of the general model (docs/theory.md, section 4.1): L tokens, student rank r,
teacher rank t, positional matrix P; and the two-token rank-one model it contains."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from derivations.spec import ModelSpec, ModelSpecError
from validation import simulate as sim

CPU = torch.device("cpu")
SHAPES = [(2, 1, 1), (3, 1, 1), (2, 2, 1), (3, 2, 2)]


def _problem(L=2, r=1, t=1, d=30, alpha=2.0, seed=1, dtype=torch.float64, **spec_kw):
    spec = ModelSpec(tokens=L, rank=r, teacher_rank=t, **spec_kw)
    return sim.make_problem(spec, d, alpha, seed=seed, n_test=50, dtype=dtype, device=CPU)


def _random_Q(d, r, scale, seed):
    g = torch.Generator().manual_seed(seed)
    Q = scale * torch.randn(d, r, generator=g, dtype=torch.float64)
    return Q[:, 0] if r == 1 else Q


# --------------------------------------------------------------------------- positions and data


@pytest.mark.parametrize("d", [5, 8, 64, 1000])
def test_positions_are_orthonormal_with_e1_uniform(d):
    E = sim.position_basis(d, d - 1)
    torch.testing.assert_close(E.t() @ E, torch.eye(d - 1, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(E[:, 0], torch.full((d,), 1.0 / math.sqrt(d), dtype=torch.float64))


def test_position_offsets_give_the_spec_embeddings():
    d = 40
    # two tokens: mu_1 = (1, ..., 1) = -mu_2, exactly
    off = sim.position_offsets(ModelSpec(), d)
    assert torch.equal(off, torch.tensor([[1.0], [-1.0]], dtype=torch.float64) / math.sqrt(d) * torch.ones(d))
    # P = I_3: mu_l = sqrt(d) e_l, orthogonal, |mu_l|^2 = d
    mu = math.sqrt(d) * sim.position_offsets(ModelSpec(tokens=3), d)
    torch.testing.assert_close(mu @ mu.t(), d * torch.eye(3, dtype=torch.float64), rtol=0, atol=1e-10)
    # a general P: mu_l = sqrt(d) sum_a P[l, a] e_a
    P = ((1.0, 0.5), (0.0, -1.0), (-1.0, 0.25))
    E = sim.position_basis(d, 2)
    off = sim.position_offsets(ModelSpec(tokens=3, positions=P), d)
    torch.testing.assert_close(off, torch.tensor(P, dtype=torch.float64) @ E.t(), rtol=0, atol=0)


def test_generator_of_the_general_model():
    L, t, d, n = 3, 2, 50, 400
    spec = ModelSpec(tokens=L, teacher_rank=t, omega=0.4)
    Qstar = torch.randn(d, t, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    X, Y, Z = sim.sample_raw(spec, d, n, Qstar, torch.Generator().manual_seed(2))
    assert X.shape == Y.shape == Z.shape == (n, L, d)
    torch.testing.assert_close(X - Z, sim.position_offsets(spec, d)[None].expand(n, L, d), rtol=0, atol=1e-15)
    # Y = T Z with T = (1 - omega) softmax_rows(h* h*^T) + omega A, h*_l = Q*^T z_l / sqrt(d)
    hs = np.einsum("nld,dt->nlt", Z.numpy(), Qstar.numpy()) / math.sqrt(d)
    logits = np.einsum("nat,nbt->nab", hs, hs)
    sm = np.exp(logits - logits.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    T = (1 - spec.omega) * sm + spec.omega * np.array(spec.A)
    np.testing.assert_allclose(Y.numpy(), T @ Z.numpy(), rtol=1e-12, atol=1e-12)


def test_teacher_of_rank_t_is_a_matrix_and_batch_statistics_hold():
    p = _problem(L=3, r=2, t=2, d=20, alpha=3.0)
    assert p.Qstar.shape == (20, 2) and p.train.X.shape == (3 * p.n, 20)
    X, Y = sim.raw_training_set(p)
    torch.testing.assert_close(p.train.X3, X)
    torch.testing.assert_close(p.train.G, X @ X.transpose(1, 2))
    torch.testing.assert_close(p.train.C, Y @ X.transpose(1, 2))
    assert p.train.Gt.shape == (3, 3, p.n)


# --------------------------------------------------------------------------- gradient


def _check_against_autograd(p, attention, fn):
    X, Y = sim.raw_training_set(p)
    lam = p.spec.lam
    for scale, seed in ((0.3, 3), (1.0, 4), (3.0, 5)):
        Q = _random_Q(p.d, p.spec.rank, scale, seed)
        Qg = Q.clone().requires_grad_(True)
        R_ref = sim.risk_autograd(Qg, X, Y, lam, attention)
        R_ref.backward()
        R, grad = fn(Q, p.train, lam, attention)
        assert grad.shape == Q.shape
        assert float(R) == pytest.approx(float(R_ref.detach()), rel=1e-12)
        scale_g = float(Qg.grad.abs().max())
        assert float((grad - Qg.grad).abs().max()) <= 1e-10 * scale_g


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "L%d-r%d-t%d" % s)
def test_analytic_gradient_equals_autograd(shape):
    p = _problem(*shape, d=30, alpha=80 / 30)
    _check_against_autograd(p, "softmax", sim.risk_and_grad)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
@pytest.mark.parametrize("shape", [(3, 2, 2), (2, 1, 1)], ids=lambda s: "L%d-r%d-t%d" % s)
def test_analytic_gradient_equals_autograd_for_each_attention(shape, attention):
    p = _problem(*shape, d=30, alpha=80 / 30, attention=attention)
    _check_against_autograd(p, attention, sim.risk_and_grad)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_a_vector_and_a_one_column_matrix_are_the_same_student(attention):
    """30 steps of GD from the same start, ``Q`` as a vector and as a ``d x 1`` matrix: the same
    numbers bit for bit, each gradient of the shape it was given."""
    spec = ModelSpec(attention=attention)
    p = sim.make_problem(spec, 64, 1.0, seed=0, n_test=200, dtype=torch.float64, device=CPU)
    lr = 0.15 if attention == "softmax" else 0.05
    Q_vec = sim.initial_Q(p, "random").clone()
    Q_mat = Q_vec[:, None].clone()
    with torch.inference_mode():
        for _ in range(30):
            R_vec, g_vec = sim.risk_and_grad(Q_vec, p.train, spec.lam, attention)
            R_mat, g_mat = sim.risk_and_grad(Q_mat, p.train, spec.lam, attention)
            assert g_vec.shape == Q_vec.shape and g_mat.shape == Q_mat.shape
            assert torch.equal(R_vec, R_mat) and torch.equal(g_vec, g_mat[:, 0])
            Q_vec.add_(g_vec, alpha=-lr)
            Q_mat.add_(g_mat, alpha=-lr)
    assert torch.equal(sim.per_sample_loss(Q_mat, p.test, attention), sim.per_sample_loss(Q_vec, p.test, attention))


# --------------------------------------------------------------------------- the default model, by another path

#: ``dtype/kind/init``: kind is the attention (gradient descent) or ``adam`` (softmax attention)
CASES = ("float32/softmax/semantic", "float32/softmax/positional", "float32/softmax/random", "float64/softmax/random",
         "float32/linear/random", "float32/sigmoid/random", "float32/adam/random")
#: relative tolerance, or of the run's largest statistic for one near zero. The runs differ from the
#: float64 reference by rounding only: measured at most 2.5e-6 relative (1.3e-7 of the largest
#: statistic) in float32, 1.3e-14 (9.4e-16) in float64
TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


def _reference_run(spec, init, run_index, optimizer, lr, steps=30, d=64, n_test=200):
    """One run of :func:`validation.simulate.simulate` in float64 by a plainly written path: the
    whole-batch risk differentiated by autograd, torch.optim's SGD or Adam, and each statistic
    from its definition (docs/theory.md, sections 1.5-1.7) on the raw or the stored data."""
    p = sim.make_problem(spec, d, 1.0, seed=0, run_index=run_index, n_test=n_test, dtype=torch.float64, device=CPU)
    X, Y = sim.raw_training_set(p)
    Q = sim.initial_Q(p, init).clone().requires_grad_(True)
    opt = torch.optim.SGD([Q], lr=lr) if optimizer == "gd" else torch.optim.Adam([Q], lr=lr, eps=1e-8)
    for _ in range(steps):
        opt.zero_grad()
        sim.risk_autograd(Q, X, Y, spec.lam, spec.attention).backward()
        opt.step()
    opt.zero_grad()
    R = sim.risk_autograd(Q, X, Y, spec.lam, spec.attention)
    R.backward()
    grad_norm = float(Q.grad.norm()) / math.sqrt(d)
    Q = Q.detach()
    t = p.test  # |Y - S X|_F^2 = |Y|^2 - 2 <S, Y X^T> + <S, S X X^T>, from the test set's statistics

    def test_loss(S):
        return float((t.yy - 2 * (S * t.C).sum((1, 2)) + (S * (S @ t.G)).sum((1, 2))).mean()) / (2 * d)

    # the linear baseline: ridge least squares of Y_i^T = X_i^T B^T over the stacked tokens
    design = torch.cat([X.transpose(1, 2).reshape(-1, 2), math.sqrt(d * sim.LINEAR_RIDGE) * torch.eye(2)])
    target = torch.cat([Y.transpose(1, 2).reshape(-1, 2), torch.zeros(2, 2)])
    B = torch.linalg.lstsq(design, target).solution.T
    s2 = spec.sigma ** 2
    return {"test_error": test_loss(sim.attention_matrix(t.X3 @ Q / math.sqrt(d), spec.attention)),
            "train_loss": float(R.detach()) / d, "m_signed": float(Q.sum()) / d,
            "theta_over_sigma2_signed": float(p.Qstar @ Q) / d, "q": s2 * float(Q @ Q) / d,
            "linear_test_error": test_loss(B.expand(t.n, 2, 2)), "final_grad_norm": grad_norm}


@pytest.mark.parametrize("case", CASES)
def test_default_model_runs_agree_with_a_plainly_written_reference(case):
    dtype, kind, init = case.split("/")
    optimizer = "adam" if kind == "adam" else "gd"
    attention = "softmax" if kind == "adam" else kind
    lr = 0.01 if optimizer == "adam" else (0.15 if attention == "softmax" else 0.05)
    spec = ModelSpec(attention=attention)
    res = sim.simulate(spec, 64, 1.0, init, seeds=2, seed=0, steps=30, lr=lr, optimizer=optimizer, dtype=dtype,
                       device="cpu", n_test=200)
    for k, run in enumerate(res["runs"]):
        ref = _reference_run(spec, init, k, optimizer, lr)
        scale = max(abs(v) for v in ref.values())  # an overlap near zero is compared on the run's scale
        for key, expected in ref.items():
            assert run[key] == pytest.approx(expected, rel=TOLERANCE[dtype], abs=TOLERANCE[dtype] * scale), \
                (case, k, key)
        assert run["m"] == abs(run["m_signed"])
        assert run["loss_curve"][-1][1] == run["train_loss"]


# --------------------------------------------------------------------------- starts


def test_starts_of_a_rank_two_student():
    d = 40
    p = _problem(L=3, r=2, t=1, d=d)
    E = sim.position_basis(d, 3)
    rand = sim.initial_Q(p, "random")
    assert rand.shape == (d, 2)
    torch.testing.assert_close(rand, sim.initial_Q(p, "random"))  # its own stream: repeatable
    assert 0.05 < float(rand.std()) < 0.15
    sem = sim.initial_Q(p, "semantic")  # Q* padded with the random start's columns
    assert torch.equal(sem[:, 0], p.Qstar) and torch.equal(sem[:, 1], rand[:, 1])
    pos = sim.initial_Q(p, "positional")  # e_1, e_2 (k = 3 >= r)
    assert torch.equal(pos, E[:, :2])
    mixed = sim.initial_Q(p, "mixed")
    assert torch.equal(mixed[:, 0], p.Qstar) and torch.equal(mixed[:, 1], E[:, 0])
    st = sim.summary_statistics(pos, p)  # m = E^T Q / sqrt(d): singular values 1/sqrt(d), twice
    assert st["m_sv_1"] == pytest.approx(1 / math.sqrt(d)) and st["m_sv_2"] == pytest.approx(1 / math.sqrt(d))


def test_semantic_start_cut_and_positional_start_padded():
    d = 30
    p = _problem(L=2, r=1, t=2, d=d)  # r < t: the first teacher column
    assert torch.equal(sim.initial_Q(p, "semantic"), p.Qstar[:, 0])
    p = _problem(L=2, r=3, t=2, d=d)  # k = 1 < r: e_1, then the random start's columns
    pos, rand = sim.initial_Q(p, "positional"), sim.initial_Q(p, "random")
    assert torch.equal(pos[:, 0], sim.position_basis(d, 1)[:, 0]) and torch.equal(pos[:, 1:], rand[:, 1:])
    sem = sim.initial_Q(p, "semantic")
    assert torch.equal(sem[:, :2], p.Qstar) and torch.equal(sem[:, 2], rand[:, 2])


# --------------------------------------------------------------------------- statistics


def test_summary_statistics_of_the_general_model():
    d, s2 = 60, 0.25
    p = _problem(L=3, r=2, t=2, d=d)
    Q = _random_Q(d, 2, 1.0, 7)
    st = sim.summary_statistics(Q, p)
    E, Qn, Qs = sim.position_basis(d, 3).numpy(), Q.numpy(), p.Qstar.numpy()
    q = s2 * Qn.T @ Qn / d
    m = E.T @ Qn / math.sqrt(d)
    theta = s2 * Qn.T @ Qs / d
    np.testing.assert_allclose([st["q_eig_1"], st["q_eig_2"]], np.sort(np.linalg.eigvalsh(q))[::-1], rtol=1e-12)
    np.testing.assert_allclose([st["m_sv_1"], st["m_sv_2"]], np.linalg.svd(m, compute_uv=False), rtol=1e-12)
    np.testing.assert_allclose([st["theta_sv_1"], st["theta_sv_2"]], np.linalg.svd(theta, compute_uv=False),
                               rtol=1e-12)
    assert st["m_col_max"] == pytest.approx(np.linalg.norm(m, axis=0).max(), rel=1e-12)
    assert st["m_col_min"] == pytest.approx(np.linalg.norm(m, axis=0).min(), rel=1e-12)
    assert st["theta_over_sigma2_col_max"] == pytest.approx(np.linalg.norm(Qn.T @ Qs / d, axis=1).max(), rel=1e-12)
    assert "m" not in st and "q" not in st  # the scalar overlaps exist for r = t = k = 1 only
    # the invariants do not change under Q -> Q O (docs/theory.md, section 4.9)
    c, s = math.cos(0.7), math.sin(0.7)
    rotated = sim.summary_statistics(Q @ torch.tensor([[c, -s], [s, c]], dtype=torch.float64), p)
    for key in ("q_eig_1", "q_eig_2", "m_sv_1", "m_sv_2", "theta_sv_1", "theta_sv_2"):
        assert rotated[key] == pytest.approx(st[key], rel=1e-12)


def test_new_statistics_of_the_default_model_are_its_overlaps():
    p = _problem(d=50)
    st = sim.summary_statistics(_random_Q(50, 1, 1.0, 8), p)
    assert st["q_eig_1"] == pytest.approx(st["q"], rel=1e-12)
    for key in ("m_sv_1", "m_col_max", "m_col_min"):
        assert st[key] == pytest.approx(st["m"], rel=1e-12)
    assert st["theta_sv_1"] == pytest.approx(0.25 * st["theta_over_sigma2"], rel=1e-12)
    assert st["theta_over_sigma2_col_min"] == pytest.approx(st["theta_over_sigma2"], rel=1e-12)


def test_simulate_general_model_aggregates_flat_keys():
    spec = ModelSpec(tokens=3, rank=2, teacher_rank=2)
    res = sim.simulate(spec, 30, 2.0, "mixed", seeds=3, seed=4, steps=20, device="cpu", n_test=50)
    runs = res["runs"]
    keys = sim.aggregated_keys(runs[0])
    assert keys[:2] == ["test_error", "train_loss"] and "m" not in keys
    for key in ("q_eig_2", "m_sv_2", "theta_sv_2", "m_col_min", "theta_over_sigma2_col_max", "linear_test_error"):
        vals = np.array([r[key] for r in runs])
        assert res[f"{key}_mean"] == pytest.approx(vals.mean())
        assert res[f"{key}_std"] == pytest.approx(vals.std(ddof=1))
    assert all(np.isscalar(v) for k, v in res.items() if k.endswith(("_mean", "_std")))
    assert runs[0]["test_error"] < runs[0]["linear_test_error"] * 10  # a finite, sane record


def test_general_training_decreases_risk_and_adam_runs():
    p = _problem(L=3, r=2, t=2, d=40, alpha=2.0)
    res = sim.train(p, "mixed", steps=200, lr=0.05, record_points=20)
    curve = [v for _, v in res.loss_curve]
    assert all(b <= a + 1e-12 for a, b in zip(curve, curve[1:]))  # small lr: monotone
    assert curve[-1] < curve[0] and curve[-1] == pytest.approx(sim.train_loss(res.Q, p))
    res_adam = sim.train(p, "random", steps=100, optimizer="adam")
    assert res_adam.loss_curve[-1][1] < res_adam.loss_curve[0][1]


def test_linear_baseline_of_three_tokens_is_the_stationary_point():
    p = _problem(L=3, d=30, alpha=4.0)
    B = sim.fit_linear_baseline(p.train).clone().requires_grad_(True)
    R, grad = sim.linear_risk_and_grad(B, p.train)
    R.backward()
    assert float(B.grad.abs().max()) < 1e-9 and float(grad.detach().abs().max()) < 1e-9
    X, Y = sim.raw_training_set(p)
    with torch.no_grad():
        per_sample = ((Y - B @ X) ** 2).sum((1, 2)) / (2 * p.d)
    assert sim.linear_test_error(B.detach(), p.train) == pytest.approx(float(per_sample.mean()), rel=1e-12)


# --------------------------------------------------------------------------- errors


def _one_line(exc_info, word):
    text = str(exc_info.value)
    assert "\n" not in text and text.startswith(word), text


@pytest.mark.parametrize("changes, word", [
    ({"tokens": 1}, "tokens"),
    ({"rank": 0}, "rank"),
    ({"teacher_rank": 1.5}, "teacher_rank"),
    ({"tokens": 3, "positions": ((1.0,), (-1.0,))}, "positions"),
    ({"tokens": 2, "positions": ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))}, "positions"),
    ({"tokens": 3}, None),  # valid: the default A and P of three tokens
])
def test_bad_shapes_raise_one_line_model_errors(changes, word):
    if word is None:
        assert ModelSpec(**changes).shape == (3, 1, 1, 3)
        return
    with pytest.raises(ModelSpecError) as exc:
        ModelSpec(**changes)
    _one_line(exc, word)


def test_bad_simulation_options_raise_one_line_errors():
    spec3 = ModelSpec(tokens=3)
    with pytest.raises(ValueError) as exc:
        sim.make_problem(spec3, 3, 1.0, device=CPU)  # k = 3 positions need d > 3
    _one_line(exc, "d:")
    with pytest.raises(ValueError) as exc:
        sim.make_problem(ModelSpec(), 10, 0.01, device=CPU)
    _one_line(exc, "alpha:")
    with pytest.raises(ValueError) as exc:
        sim.simulate(ModelSpec(), 20, 1.0, "mixed", steps=1, device="cpu")
    _one_line(exc, "init:")
    with pytest.raises(ValueError) as exc:
        sim.simulate(ModelSpec(), 20, 1.0, "bogus", steps=1, device="cpu")
    _one_line(exc, "init:")
    with pytest.raises(ValueError) as exc:
        sim.simulate(ModelSpec(), 20, 1.0, "random", steps=1, dtype="float16", device="cpu")
    _one_line(exc, "dtype:")
    p = _problem(L=2, r=2, d=20)
    for kw, word in (({"optimizer": "sgd"}, "optimizer:"), ({"lr": -1.0}, "lr:"), ({"steps": -1}, "steps:"),
                     ({"Q0": torch.zeros(20)}, "Q0:")):
        with pytest.raises(ValueError) as exc:
            sim.train(p, "random", **kw)
        _one_line(exc, word)


@pytest.mark.parametrize("shape", [(2, 1, 1), (3, 2, 1)], ids=lambda s: "L%d-r%d-t%d" % s)
@pytest.mark.parametrize("optimizer, lr", [("gd", 5.0), ("adam", 1e10)])
def test_divergent_learning_rate_raises_with_seed_and_first_step(shape, optimizer, lr):
    L, r, t = shape
    spec = ModelSpec(tokens=L, rank=r, teacher_rank=t, attention="linear")
    p = sim.make_problem(spec, 40, 1.0, seed=3, run_index=1, n_test=10, dtype=torch.float32, device=CPU)
    with pytest.raises(sim.SimulationDiverged) as exc:
        sim.train(p, "random", steps=300, lr=lr, optimizer=optimizer, record_points=3)
    err = exc.value
    assert (err.seed, err.run_index) == (3, 1) and 0 < err.step < 300
    assert "\n" not in str(err) and "seed 3" in str(err) and f"step {err.step}" in str(err)
    # the step is the first non-finite one: one step fewer trains to a finite Q
    res = sim.train(p, "random", steps=err.step - 1, lr=lr, optimizer=optimizer, record_points=3)
    assert bool(torch.isfinite(res.Q).all()) and math.isfinite(res.loss_curve[-1][1])
    with pytest.raises(sim.SimulationDiverged) as again:
        sim.train(p, "random", steps=err.step, lr=lr, optimizer=optimizer, record_points=1)
    assert again.value.step == err.step
    # through simulate: no record with NaN, the run named
    with pytest.raises(sim.SimulationDiverged) as exc:
        sim.simulate(spec, 40, 1.0, "random", seeds=2, seed=3, steps=300, lr=lr, optimizer=optimizer,
                     device="cpu", n_test=10)
    assert exc.value.seed == 3 and exc.value.run_index == 0


# --------------------------------------------------------------------------- batches and early stops


@pytest.mark.parametrize("shape, inits, optimizer", [
    ((2, 1, 1), ("semantic", "positional", "random"), "gd"),
    ((2, 1, 1), ("random", "semantic"), "adam"),
    ((3, 2, 2), ("mixed", "random", "positional"), "gd"),
], ids=("default-gd", "default-adam", "L3-r2-t2-gd"))
def test_a_batch_of_starts_gives_each_run_the_numbers_of_training_it_alone(shape, inits, optimizer):
    p = _problem(*shape, d=40, alpha=1.5, dtype=torch.float32)
    batch = sim.train_batch(p, inits, steps=60, lr=0.05, optimizer=optimizer, record_points=6)
    for init, b in zip(inits, batch):
        a = sim.train(p, init, steps=60, lr=0.05, optimizer=optimizer, record_points=6)
        assert torch.equal(a.Q, b.Q) and a.loss_curve == b.loss_curve and a.grad_norm == b.grad_norm, init
        assert (b.batch_runs, a.batch_runs, b.steps_run) == (len(inits), 1, 60)
    # and the records of run_starts are those of run_one, timings apart
    spec = p.spec
    recs = sim.run_starts(spec, 40, 1.5, inits, seed=1, steps=20, lr=0.05, optimizer=optimizer, n_test=50,
                          device=CPU)
    for init, rec in zip(inits, recs):
        alone = sim.run_one(spec, 40, 1.5, init, seed=1, steps=20, lr=0.05, optimizer=optimizer, n_test=50,
                            device=CPU)
        timing = ("train_time", "step_time", "wall_time")
        assert {k: v for k, v in rec.items() if k not in timing} == {k: v for k, v in alone.items() if k not in timing}


def test_runs_of_other_optimisers_share_a_batch_and_keep_the_numbers_of_training_alone():
    """Gradient descent and Adam (one with the early stop, which leaves the batch) in one batch:
    each run's result is its run alone, bit for bit."""
    p = _problem(2, 1, 1, d=40, alpha=1.5, dtype=torch.float32)
    rule = sim.StopRule(loss_rtol=1e-3, grad_tol=1.0, patience=2)
    runs = [("semantic", 0.05, "gd", None), ("random", 0.01, "adam", rule), ("positional", 0.1, "gd", None),
            ("random", 0.02, "adam", None)]
    batch = sim.train_batch(p, [r[0] for r in runs], steps=400, lr=[r[1] for r in runs],
                            optimizer=[r[2] for r in runs], record_points=8, stop=[r[3] for r in runs])
    assert batch[1].stopped == "converged" and batch[1].steps_run < 400  # it left the batch early
    for (init, lr, optimizer, stop), b in zip(runs, batch):
        a = sim.train(p, init, steps=400, lr=lr, optimizer=optimizer, record_points=8, stop=stop)
        assert torch.equal(a.Q, b.Q) and a.loss_curve == b.loss_curve and a.grad_norm == b.grad_norm, init
        assert (a.steps_run, a.stopped) == (b.steps_run, b.stopped)
    with pytest.raises(ValueError, match="one per start"):
        sim.train_batch(p, ["semantic", "random"], steps=5, optimizer=["gd"])


def test_a_diverging_run_is_reported_and_leaves_the_rest_of_its_batch_alone():
    spec = ModelSpec(attention="linear")
    p = sim.make_problem(spec, 40, 1.0, seed=3, run_index=1, n_test=10, dtype=torch.float32, device=CPU)
    start = sim.initial_Q(p, "random")
    starts = [start, 30.0 * start]  # the second one's quartic loss throws it out at lr 0.5
    out = sim.train_batch(p, [], steps=200, lr=0.5, record_points=4, Q0=starts)
    assert isinstance(out[1], sim.SimulationDiverged) and not isinstance(out[0], Exception)
    with pytest.raises(sim.SimulationDiverged) as alone:
        sim.train(p, steps=200, lr=0.5, record_points=4, Q0=starts[1])
    assert 0 < out[1].step == alone.value.step and (out[1].seed, out[1].run_index) == (3, 1)
    first = sim.train(p, steps=200, lr=0.5, record_points=4, Q0=starts[0])
    assert torch.equal(first.Q, out[0].Q) and first.loss_curve == out[0].loss_curve


def _plain_gd(p, Q, steps, lr):
    with torch.inference_mode():
        for _ in range(steps):
            _, g = sim.risk_and_grad(Q, p.train, p.spec.lam, p.spec.attention)
            Q = Q - lr * g
    return Q


def test_gradient_descent_stops_at_a_float_fixed_point_with_the_full_run_s_numbers():
    """A strongly convex risk (lam = 1) in float32: gradient descent reaches a Q that a step leaves
    unchanged to the last bit, stops there, and its record is that of running every step."""
    spec = ModelSpec(lam=1.0)
    p = sim.make_problem(spec, 30, 1.0, seed=0, n_test=20, dtype=torch.float32, device=CPU)
    res = sim.train(p, "random", steps=3000, lr=0.3, record_points=30)
    assert res.stopped == "fixed point" and res.steps_run < 3000
    full = _plain_gd(p, sim.initial_Q(p, "random"), 3000, 0.3)
    assert torch.equal(res.Q, full)
    with torch.inference_mode():
        R, g = sim.risk_and_grad(full, p.train, spec.lam, spec.attention)
    assert res.loss_curve[-1] == [3000, float(R) / p.d] and res.grad_norm == float(g.norm()) / math.sqrt(p.d)
    assert len(res.loss_curve) == 31 and len({v for s, v in res.loss_curve if s >= res.steps_run}) == 1


def test_the_stop_rule_stops_a_settled_run_where_its_loss_and_gradient_meet_it():
    spec = ModelSpec()
    p = sim.make_problem(spec, 40, 2.0, seed=2, n_test=20, dtype=torch.float64, device=CPU)
    rule = sim.StopRule(loss_rtol=1e-10, grad_tol=1e-6, patience=3)
    # recorded every 50 steps: the looks at the stop rule (CHECK_EVERY) are the recorded steps
    res = sim.train(p, "semantic", steps=4000, lr=0.01, optimizer="adam", record_points=80, stop=rule)
    assert sim.CHECK_EVERY == 50 and res.stopped == "converged" and 0 < res.steps_run < 4000
    # the criterion held over the last `patience` looks
    R = [v * p.d for _, v in res.loss_curve]
    changes = [abs(b - a) / abs(b) for a, b in zip(R, R[1:])]
    assert all(c <= rule.loss_rtol for c in changes[-rule.patience:])
    assert res.grad_norm <= rule.grad_tol
    # the stopped run is the full run's first steps_run steps, bit for bit
    part = sim.train(p, "semantic", steps=res.steps_run, lr=0.01, optimizer="adam", record_points=1)
    assert torch.equal(part.Q, res.Q) and part.loss_curve[-1] == res.loss_curve[-1]
    # a rule nothing meets changes nothing
    never = sim.StopRule(loss_rtol=0.0, grad_tol=0.0)
    a = sim.train(p, "semantic", steps=300, lr=0.01, optimizer="adam", record_points=30, stop=never)
    b = sim.train(p, "semantic", steps=300, lr=0.01, optimizer="adam", record_points=30)
    assert a.stopped == b.stopped == "" and torch.equal(a.Q, b.Q) and a.loss_curve == b.loss_curve


@pytest.mark.parametrize("kw", [{"loss_rtol": -1.0}, {"grad_tol": float("nan")}, {"patience": 0}])
def test_a_bad_stop_rule_is_refused_in_one_line(kw):
    with pytest.raises(ValueError) as exc:
        sim.StopRule(**kw)
    _one_line(exc, "stop:")

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
    _check_against_autograd(p, "softmax", sim.risk_and_grad_general)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
@pytest.mark.parametrize("shape", [(3, 2, 2), (2, 1, 1)], ids=lambda s: "L%d-r%d-t%d" % s)
def test_analytic_gradient_equals_autograd_for_each_attention(shape, attention):
    p = _problem(*shape, d=30, alpha=80 / 30, attention=attention)
    _check_against_autograd(p, attention, sim.risk_and_grad_general)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_general_path_on_the_default_shape_equals_the_two_token_path(attention):
    """30 steps of GD along each path from the same start, in float64: same trajectory."""
    spec = ModelSpec(attention=attention)
    p = sim.make_problem(spec, 64, 1.0, seed=0, n_test=200, dtype=torch.float64, device=CPU)
    lr = 0.15 if attention == "softmax" else 0.05
    Q_fast = sim.initial_Q(p, "random").clone()
    Q_gen = Q_fast.clone()
    with torch.inference_mode():
        for _ in range(30):
            R_fast, g_fast = sim.risk_and_grad_two_token(Q_fast, p.train, spec.lam, attention)
            R_gen, g_gen = sim.risk_and_grad_general(Q_gen, p.train, spec.lam, attention)
            assert float(R_gen) == pytest.approx(float(R_fast), rel=1e-12)
            torch.testing.assert_close(g_gen, g_fast, rtol=1e-12, atol=1e-12 * float(g_fast.abs().max()))
            Q_fast.add_(g_fast, alpha=-lr)
            Q_gen.add_(g_gen, alpha=-lr)
    assert float((Q_gen - Q_fast).norm() / Q_fast.norm()) < 1e-12
    # the test error: a (d, 1) matrix takes the general path, a vector the two-token one
    te_gen = sim.per_sample_loss(Q_gen[:, None], p.test, attention)
    te_fast = sim.per_sample_loss(Q_fast, p.test, attention)
    torch.testing.assert_close(te_gen, te_fast, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- the default model, unchanged

# simulate(ModelSpec(attention=...), d=64, alpha=1, init, seeds=2, seed=0, steps=30, n_test=200) on the
# CPU, per run: test_error, train_loss, m_signed, theta_over_sigma2_signed, q, linear_test_error,
# final_grad_norm, as computed by the two-token simulator before it was generalised.
PINNED = {
    "float32/softmax/semantic": (
        (0.0008291417743886454, 0.004259836817740577, 0.03935589225147851, 0.7598652132536597, 0.17986212601288282,
         0.001801322776367209, 0.010271388106048107),
        (0.0012340206745348771, 0.006086167244459665, 0.06107614788925275, 1.052959604845567, 0.24789623379744363,
         0.002678807732829067, 0.013179229572415352),
    ),
    "float32/softmax/positional": (
        (0.002910292755027827, 0.0020916942177192726, 0.14401038468349725, 0.010531901390122837, 0.005218189442796891,
         0.001801322776367209, 0.0050130607560276985),
        (0.004116069354427579, 0.004354201092801623, 0.15698258124757558, -0.0004521120282802134,
         0.006338455458344137, 0.002678807732829067, 0.00992906279861927),
    ),
    "float32/softmax/random": (
        (0.0035867371044901943, 0.002548526886755155, 0.007927230719360523, -0.003901413640830735,
         0.0032454716174097667, 0.001801322776367209, 0.000970020133536309),
        (0.00497332215235511, 0.005211020866221461, 0.010192182853643317, -0.020374016828507008,
         0.0018607024503530213, 0.002678807732829067, 0.0021388730965554714),
    ),
    "float64/softmax/random": (
        (0.0035867370974539425, 0.0025485268902711612, 0.007927231190826195, -0.0039014142408412946,
         0.0032454719050050273, 0.001801322776367209, 0.0009700201599658358),
        (0.00497332215097523, 0.005211020864579896, 0.010192181370784337, -0.020374019426386843,
         0.0018607023944888753, 0.002678807732829067, 0.002138873139700751),
    ),
    "float32/linear/random": (
        (0.12487634740981733, 0.12365710819354538, 0.005539105350180762, -0.0007829761004004218,
         0.0056590971796734255, 0.001801322776367209, 0.04131515324115753),
        (0.128341397780161, 0.12772229157464043, 0.013256412768896553, -0.03317048362789074, 0.0030225917010939,
         0.002678807732829067, 0.030390121042728424),
    ),
    "float32/sigmoid/random": (
        (0.0036152536182442064, 0.002566214577540157, 0.007600336990435608, -0.0038616282365259843,
         0.0033319630049374717, 0.001801322776367209, 0.000977054238319397),
        (0.004996327465822852, 0.005238659837799183, 0.005470994709867227, -0.018663600248812574,
         0.0018283320317752827, 0.002678807732829067, 0.0009445823379792273),
    ),
    "float32/adam/random": (
        (0.002449141759339675, 0.001785043071341028, 0.21918684278352885, 0.02458724941004708, 0.015226968911181233,
         0.001801322776367209, 0.0033768306020647287),
        (0.003869008831137402, 0.003210149116671556, 0.21301358516211621, -0.07885576974502587,
         0.022010425938088798, 0.002678807732829067, 0.006241729948669672),
    ),
}
PINNED_KEYS = ("test_error", "train_loss", "m_signed", "theta_over_sigma2_signed", "q", "linear_test_error",
               "final_grad_norm")


@pytest.mark.parametrize("case", sorted(PINNED))
def test_default_model_outputs_are_unchanged_to_the_last_bit(case):
    dtype, kind, init = case.split("/")
    optimizer = "adam" if kind == "adam" else "gd"
    attention = "softmax" if kind == "adam" else kind
    lr = None if optimizer == "adam" else (0.15 if attention == "softmax" else 0.05)
    res = sim.simulate(ModelSpec(attention=attention), 64, 1.0, init, seeds=2, seed=0, steps=30, lr=lr,
                       optimizer=optimizer, dtype=dtype, device="cpu", n_test=200)
    for run, expected in zip(res["runs"], PINNED[case]):
        assert tuple(run[k] for k in PINNED_KEYS) == expected
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
    assert "\n" not in str(err) and f"seed 3" in str(err) and f"step {err.step}" in str(err)
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

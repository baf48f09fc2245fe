"""Message passing on finite instances (docs/gamp.md): the exact per-sample loss, the fixed point as
a stationary point of the empirical risk, gradient descent's minimum on the same data, the faults,
and the state evolution and stability against the instance."""
from __future__ import annotations

import math

import numpy as np
import pytest

from derivations import ModelSpec
from numerics.api import GampError, SampleLoss, run_gamp, state_evolution
from numerics.gamp.sample_prox import empirical_risk
from numerics.matrix_overlaps import MatrixOverlaps
from validation import instances
from validation.instances import draw_instance, initial_Q, overlaps, position_basis


def _raw_loss(spec, X3, Y3, Q):
    """|Y - S(h) X|_F^2 / (2d) per sample, written plainly from the tokens (softmax of h h^T)."""
    d = X3.shape[2]
    h = X3 @ Q / math.sqrt(d)                             # (n, L, r)
    s = h @ np.transpose(h, (0, 2, 1))
    S = np.exp(s - s.max(axis=2, keepdims=True))
    S /= S.sum(axis=2, keepdims=True)
    return np.sum((Y3 - S @ X3) ** 2, axis=(1, 2)) / (2 * d)


@pytest.mark.parametrize("shape", [dict(), dict(tokens=3), dict(rank=2)])
def test_the_exact_sample_loss_and_its_gradient_are_those_of_the_tokens(shape):
    from validation.instances import _chunks, coefficients

    spec = ModelSpec(**shape)
    d, n = 40, 64
    rng = np.random.default_rng(1)
    Qstar = rng.standard_normal((d, spec.teacher_rank))
    _, _, X3, Y3 = next(_chunks(spec, d, n, Qstar, rng))
    coef = coefficients(X3, Y3)
    Q = rng.standard_normal((d, spec.rank))
    loss = SampleLoss(spec)
    h = (X3 @ Q / math.sqrt(d)).reshape(n, -1)
    values, grad = loss.loss_and_grad(h, coef)
    assert np.allclose(values, _raw_loss(spec, X3, Y3, Q), rtol=1e-11, atol=1e-13)
    e = 1e-6
    for j in range(h.shape[1]):
        step = np.zeros_like(h)
        step[:, j] = e
        fd = (loss.loss(h + step, coef) - loss.loss(h - step, coef)) / (2 * e)
        assert np.allclose(grad[:, j], fd, rtol=1e-6, atol=1e-9)


def test_the_position_basis_is_the_simulators():
    import torch  # noqa: F401  (the simulator's basis is a torch tensor)

    from validation.simulate import position_basis as simulator_basis

    for d, k in ((50, 1), (51, 4)):
        E = position_basis(d, k)
        assert np.allclose(E.T @ E, np.eye(k), atol=1e-14)
        assert np.array_equal(simulator_basis(d, k).numpy(), E)


@pytest.fixture(scope="module")
def semantic_run():
    spec = ModelSpec()
    inst = draw_instance(spec, 300, 2.0, seed=3)
    track = (lambda Q: {k: float(abs(v[0, 0])) for k, v in overlaps(inst, Q).items()})
    return spec, inst, run_gamp(spec, inst.X, inst.coef, initial_Q(inst, "semantic"), track=track)


def test_the_fixed_point_is_a_stationary_point_of_the_empirical_risk(semantic_run):
    spec, inst, res = semantic_run
    assert res.residual < 1e-9 and res.risk_gradient_norm < 1e-6
    loss = SampleLoss(spec)
    R, grad, data = empirical_risk(loss, inst.X, inst.coef, res.Q, spec.lam)
    # independently of the reported norm: the risk does not change to first order along any direction
    rng = np.random.default_rng(0)
    for _ in range(3):
        u = rng.standard_normal(res.Q.shape)
        u /= np.linalg.norm(u)
        e = 1e-4
        slope = (empirical_risk(loss, inst.X, inst.coef, res.Q + e * u, spec.lam)[0]
                 - empirical_risk(loss, inst.X, inst.coef, res.Q - e * u, spec.lam)[0]) / (2 * e)
        assert abs(slope) < 1e-6 * spec.lam * np.linalg.norm(res.Q)
    # and the data term is not small by itself: it balances the ridge
    assert data > 0.5 * spec.lam * np.linalg.norm(res.Q)
    assert R / inst.d == pytest.approx(res.train_risk, rel=1e-12)


def test_gradient_descent_on_the_same_data_ends_at_the_same_minimum(semantic_run):
    from validation.instances import to_problem
    from validation.simulate import train, train_loss

    spec, inst, res = semantic_run
    problem = to_problem(inst)
    gd = train(problem, "semantic", steps=5000)
    assert train_loss(gd.Q, problem) == pytest.approx(res.train_risk, rel=2e-6)
    Qgd = gd.Q.double().numpy().reshape(inst.d, -1)
    assert np.linalg.norm(Qgd - res.Q) / np.linalg.norm(res.Q) < 1e-2
    # the test error on the run's test set, here and in the simulator
    from validation.simulate import test_error as simulator_test_error

    assert instances.test_error(inst, Qgd, SampleLoss(spec).loss) == pytest.approx(simulator_test_error(gd.Q, problem), rel=1e-5)


def test_a_run_that_cannot_converge_names_its_damping_and_iteration():
    spec = ModelSpec()
    inst = draw_instance(spec, 100, 2.0)
    with pytest.raises(GampError) as info:
        run_gamp(spec, inst.X, inst.coef, initial_Q(inst, "semantic"), dampings=(0.5,), maxiter=4)
    message = str(info.value)
    assert "damping 0.5" in message and "not converged in 4 iterations" in message and "at iteration" in message
    assert len(info.value.history) == 4


def test_the_state_evolution_stays_at_a_fixed_point_of_the_theory():
    from numerics.api import solve

    spec = ModelSpec()
    fp = solve(spec, 2.0, "semantic", "fast")
    path = state_evolution(spec, 2.0, fp.overlaps, 1, precision="fast")
    for name in ("q", "V", "theta"):
        assert float(getattr(path[1], name)[0, 0]) == pytest.approx(float(getattr(fp.overlaps, name)[0, 0]), rel=1e-5)
    assert float(path[1].m[0, 0]) == 0.0
    # outside the domain (theta^2 > q rho) it stops with the points so far
    bad = MatrixOverlaps(spec.shape, q=0.05, m=0.0, V=12.0, theta=0.2)
    assert len(state_evolution(spec, 2.0, bad, 3, precision="draft")) == 1


def test_a_run_that_wanders_stalls_at_each_damping():
    # the positional branch at alpha = 1: a few samples switch their prox minimum at every iteration
    spec = ModelSpec()
    inst = draw_instance(spec, 300, 1.0)
    with pytest.raises(GampError) as info:
        run_gamp(spec, inst.X, inst.coef, initial_Q(inst, "positional"), dampings=(0.5, 0.25), stall_window=8,
                 maxiter=60)
    assert [a["damping"] for a in info.value.attempts] == [0.5, 0.25]
    assert all("stalled" in a["reason"] for a in info.value.attempts)
    assert max(h["switched"] for h in info.value.history[-8:]) > 0


def _gamp_cli(capsys, *argv):
    from attnphase.cli import main

    status = main(["gamp", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_prints_a_table_and_refuses_bad_sizes(capsys):
    status, out, err = _gamp_cli(capsys, "--d", "100", "--seeds", "2")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[1].split()[:4] == ["run", "test_error", "train_loss", "q"]
    assert lines[4].startswith("mean") and "nan" not in out.lower()
    for bad in (("--d", "1"), ("--alpha", "0"), ("--seeds", "0"), ("--damping", "1.5")):
        status, out, err = _gamp_cli(capsys, *bad)
        assert status == 2 and len(err.strip().splitlines()) == 1, (bad, err)


def test_the_command_fails_in_one_line_where_gamp_diverges(capsys):
    # plain GAMP at the semantic start: the positional direction's multiplier is -2.5, and the
    # variance leaves the domain within a few tens of iterations
    status, out, err = _gamp_cli(capsys, "--d", "150", "--damping", "1")
    assert status == 1 and out == ""
    line = err.strip()
    assert len(line.splitlines()) == 1 and "damping 1:" in line and "at iteration" in line
    assert "nan" not in line.lower()


def test_the_command_runs_without_torch(tmp_path):
    from tests.test_light_install import _without_torch

    proc = _without_torch("gamp", "--d", "100", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

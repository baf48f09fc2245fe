"""The simulator's products with the data (validation/simulator/products.py): the compiled pass over
the rows of ``X`` gives BLAS's products within float rounding, and each column's numbers do not
depend on the other columns of its batch."""
import numpy as np
import pytest
import torch

from derivations.spec import ModelSpec
from validation import simulate as sim
from validation.simulator import products

CPU = torch.device("cpu")


def _data(dtype, m, seed=0):
    p = sim.make_problem(ModelSpec(omega=0.3), 200, 1.5, seed=seed, n_test=10, dtype=dtype, device=CPU)
    g = torch.Generator().manual_seed(seed)
    V = torch.randn(m, p.d, generator=g, dtype=dtype)
    G = torch.randn(m, p.train.X.shape[0], generator=g, dtype=dtype)
    return p.train.X, V, G


#: float rounding of sums of a few hundred to a few thousand terms, relative to the largest entry
ROUNDING = {torch.float32: 2e-5, torch.float64: 1e-13}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_products_equal_blas_within_rounding(dtype):
    X, V, G = _data(dtype, 3)
    h = {c: torch.empty(3, X.shape[0], dtype=dtype) for c in (True, False)}
    g = {c: torch.empty(3, X.shape[1], dtype=dtype) for c in (True, False)}
    for c in (True, False):
        products.times_columns(X, V, h[c], compiled=c)
        products.transpose_times_columns(X, G, g[c], compiled=c)
    for out in (h, g):
        scale = float(out[False].abs().max())
        assert float((out[True] - out[False]).abs().max()) <= ROUNDING[dtype] * scale
        # and the comparison can fail: a changed column is seen
        assert float((out[True][1:] - out[False][:-1]).abs().max()) > 1e3 * ROUNDING[dtype] * scale


@pytest.mark.parametrize("compiled", [True, False])
def test_each_column_is_computed_as_if_alone(compiled):
    X, V, G = _data(torch.float32, 4, seed=1)
    h = torch.empty(4, X.shape[0])
    g = torch.empty(4, X.shape[1])
    products.times_columns(X, V, h, compiled=compiled)
    products.transpose_times_columns(X, G, g, compiled=compiled)
    for j in range(4):
        h1, g1 = torch.empty(1, X.shape[0]), torch.empty(1, X.shape[1])
        products.times_columns(X, V[j:j + 1], h1, compiled=compiled)
        products.transpose_times_columns(X, G[j:j + 1], g1, compiled=compiled)
        assert torch.equal(h1[0], h[j]) and torch.equal(g1[0], g[j])


def test_a_training_step_is_the_same_with_either_product_within_rounding(monkeypatch):
    """One gradient of a batch of two students, compiled and BLAS: equal within float32 rounding."""
    p = sim.make_problem(ModelSpec(omega=0.3), 200, 1.5, seed=2, n_test=10, dtype=torch.float32, device=CPU)
    W = torch.stack([sim.initial_Q(p, "semantic"), sim.initial_Q(p, "positional")])[:, None, :].contiguous()
    out = {}
    for c in (True, False):
        monkeypatch.setattr(products, "COMPILED", c)
        out[c] = sim.batch_risk_and_grad(W, p.train, 0.01)
    assert np.allclose(out[True][0].numpy(), out[False][0].numpy(), rtol=1e-5, atol=0)
    assert float((out[True][1] - out[False][1]).abs().max()) <= 1e-5 * float(out[False][1].abs().max())


def test_a_failing_compiled_product_gives_blas_numbers_and_one_line(monkeypatch, caplog):
    """A damaged cache or an unsupported dtype: numpy's BLAS serves from then on, said once."""
    X, V, G = _data(torch.float32, 2, seed=3)
    want_h, want_g = torch.empty(2, X.shape[0]), torch.empty(2, X.shape[1])
    products.times_columns(X, V, want_h, compiled=False)
    products.transpose_times_columns(X, G, want_g, compiled=False)

    def broken(*args):
        raise ValueError("damaged cache")

    monkeypatch.setattr(products, "_rows_times", broken)
    monkeypatch.setattr(products, "_transpose_times", broken)
    monkeypatch.setattr(products, "_failed", "")
    h, g = torch.full((2, X.shape[0]), float("nan")), torch.full((2, X.shape[1]), float("nan"))
    with caplog.at_level("WARNING", logger=products.__name__):
        for _ in range(2):
            products.times_columns(X, V, h)
            products.transpose_times_columns(X, G, g)
    assert torch.equal(h, want_h) and torch.equal(g, want_g)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "damaged cache" in lines[0] and "BLAS" in lines[0]


def test_without_numba_the_products_are_blas_and_one_line_says_so(monkeypatch, caplog):
    X, V, _ = _data(torch.float32, 2, seed=4)
    want = torch.empty(2, X.shape[0])
    products.times_columns(X, V, want, compiled=False)
    monkeypatch.setattr(products, "numba", None)
    monkeypatch.setattr(products, "_UNAVAILABLE", "ModuleNotFoundError: No module named 'numba'")
    monkeypatch.setattr(products, "_failed", "")
    got = torch.empty(2, X.shape[0])
    with caplog.at_level("WARNING", logger=products.__name__):
        products.times_columns(X, V, got)
        products.times_columns(X, V, got)
    assert torch.equal(got, want)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "numba cannot be imported" in lines[0]

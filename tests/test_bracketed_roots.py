"""numerics.solver.bracketed_roots: scipy's find_root step for step, so the same roots to the bit."""
import numpy as np
import pytest
from scipy.optimize.elementwise import find_root

from derivations import ModelSpec
from numerics.channel.lines.teacher_nodes import bifurcation_margin
from numerics.model.bound import bind
from numerics.solver.bracketed_roots import find_roots


def _same(ref, got):
    return np.array_equal(ref.x, got.x, equal_nan=True) and np.array_equal(ref.success, got.success)


@pytest.mark.parametrize("seed, xatol", [(0, None), (1, None), (2, None), (3, None), (4, 1e-10), (5, 1e-6)])
def test_roots_of_random_functions_equal_scipy_to_the_bit(seed, xatol):
    """Cubics with a kink of tanh, brackets with and without a sign change, some of zero width; with
    scipy's default tolerances and with an absolute one on the root."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(1, 40))
        coef = rng.standard_normal((4, n))

        def f(x, a3, a2, a1, a0):
            return ((a3 * x + a2) * x + a1) * x + a0 + np.tanh(3 * x) * a1

        lo = rng.uniform(-5, 0, n)
        hi = lo + rng.uniform(0.01, 6, n)
        hi[::3] = lo[::3]
        if xatol is None:
            ref, got = find_root(f, (lo, hi), args=tuple(coef)), find_roots(f, lo, hi, args=tuple(coef))
        else:
            ref = find_root(f, (lo, hi), args=tuple(coef), tolerances={"xatol": xatol})
            got = find_roots(f, lo, hi, args=tuple(coef), xatol=xatol)
        assert _same(ref, got)


def test_pitchfork_radii_equal_scipy_to_the_bit():
    """The roots the line quadrature asks for: the bifurcation margin along the teacher rays."""
    model = bind(ModelSpec())
    rng = np.random.default_rng(5)
    beta = 2 * np.pi * (np.arange(24) + 0.5) / 24
    c, s = np.cos(beta), np.sin(beta)
    grid = np.linspace(0.0, 8.5, 65)
    tested = 0
    for _ in range(40):
        V = rng.uniform(2.0, 40.0)
        L_hh = np.linalg.cholesky(np.array([[1.0, 0.3], [0.3, 1.0]]) * rng.uniform(0.5, 2.0))
        margin = bifurcation_margin(model, V, L_hh, c[None], s[None], grid[:, None])
        rays = np.nonzero((margin < 0).any(axis=0) & (margin[0] > 0))[0]
        first = (margin < 0).argmax(axis=0)[rays]

        def f(r, c_, s_):
            return bifurcation_margin(model, V, L_hh, c_, s_, r)

        lo, hi = grid[first - 1], grid[first]
        assert _same(find_root(f, (lo, hi), args=(c[rays], s[rays])), find_roots(f, lo, hi, args=(c[rays], s[rays])))
        tested += rays.size
    assert tested > 200

"""The linear positional baseline (docs/theory.md, sections 3.5 and 4.12).

``Yhat = B X`` with the best fixed ``L x L`` matrix ``B* = E[T(h*)]``,
``h* ~ N(0, rho I_{L t})``; its test error is ``(sigma^2/2)(E|T|_F^2 - |B*|_F^2)``.
The integrand is smooth, so tensor Gauss-Hermite converges exponentially in
float64 (the error estimate is the change to a finer rule); beyond
:data:`MAX_TENSOR_DIMENSION` Gaussian variables (``L t``) a tensor rule is too
large and scrambled Sobol points are used instead, the error then being the
standard error over the scramblings. The 30-digit value of the two-token
rank-one model uses mpmath's Gauss-Hermite rules on the derived mpmath backend.
"""
from __future__ import annotations

import dataclasses
import functools

import mpmath
import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from derivations import ModelSpec

from numerics.model.general import bind_general


@dataclasses.dataclass(frozen=True)
class Baseline:
    test_error: float
    error: float          # the change to the coarser rule (tensor) or the scramblings' standard error (Sobol)
    B: tuple              # B* = E[T], row-major


#: the largest ``L t`` integrated by a tensor Gauss-Hermite rule (rules of RULES_BY_DIMENSION)
MAX_TENSOR_DIMENSION = 3
#: the two tensor rules per dimension: the value is the finer one's, the error their difference
RULES_BY_DIMENSION = {1: (48, 64), 2: (48, 64), 3: (32, 40)}
#: scrambled Sobol points (log2) and scramblings above it
QMC_LOG2_POINTS, QMC_SCRAMBLES = 16, 8


def _moments(spec: ModelSpec, hs: np.ndarray, weight: np.ndarray):
    """``(E[T], E|T|_F^2)`` from the model's teacher at nodes ``hs`` (``(N, L t)``)."""
    T = bind_general(spec).teacher(hs)
    return T.T @ weight, float(np.dot((T**2).sum(axis=1), weight))


def teacher_moments(spec: ModelSpec, n: int):
    """``(E[T], E|T|_F^2)`` over ``h* ~ N(0, rho I_{L t})`` by the ``n``-point Gauss-Hermite rule
    in each of the ``L t`` directions (``E[T]`` row-major)."""
    dim = spec.tokens * spec.teacher_rank
    x, w = hermegauss(n)
    w = w / np.sqrt(2 * np.pi)
    hs = np.sqrt(spec.rho) * np.stack([g.ravel() for g in np.meshgrid(*([x] * dim), indexing="ij")], axis=1)
    weight = np.prod(np.stack([g.ravel() for g in np.meshgrid(*([w] * dim), indexing="ij")]), axis=0)
    return _moments(spec, hs, weight)


def _test_error(spec: ModelSpec, B: np.ndarray, ET2: float) -> float:
    return 0.5 * spec.sigma**2 * (ET2 - float(np.dot(B, B)))


@functools.lru_cache(maxsize=64)
def linear_baseline(spec: ModelSpec) -> Baseline:
    """Float64 linear-baseline test error of a model of any shape, with an error estimate (module
    docstring): the finer of two tensor rules and their difference up to
    :data:`MAX_TENSOR_DIMENSION` Gaussian variables, scrambled Sobol points above."""
    dim = spec.tokens * spec.teacher_rank
    if dim <= MAX_TENSOR_DIMENSION:
        coarse, fine = (teacher_moments(spec, n) for n in RULES_BY_DIMENSION[dim])
        value = _test_error(spec, *fine)
        return Baseline(test_error=value, error=abs(value - _test_error(spec, *coarse)),
                        B=tuple(float(b) for b in fine[0]))
    from scipy.stats import norm, qmc

    estimates, Bs = [], []
    for seed in range(QMC_SCRAMBLES):
        u = qmc.Sobol(dim, scramble=True, seed=seed).random_base2(QMC_LOG2_POINTS)
        B, ET2 = _moments(spec, np.sqrt(spec.rho) * norm.ppf(u), np.full(len(u), 1.0 / len(u)))
        Bs.append(B)
        estimates.append(_test_error(spec, B, ET2))
    # |B|^2 of one scrambling's mean is biased by its variance; the spread over scramblings bounds it
    value = float(np.mean(estimates))
    error = float(np.std(estimates, ddof=1) / np.sqrt(len(estimates)))
    return Baseline(test_error=value, error=error, B=tuple(float(b) for b in np.mean(Bs, axis=0)))


def linear_baseline_mp(spec: ModelSpec, dps: int = 30, n_start: int = 60, n_step: int = 40, n_max: int = 400):
    """The linear-baseline test error to ``dps`` digits with mpmath.

    Tensor Gauss-Hermite rules computed in mpmath (``mp.gauss_quadrature``) of
    increasing order until two successive values agree to ``10^-(dps+2)``
    relative; the integrand (the derived mpmath teacher) is analytic, so the
    convergence is geometric. Raises ``ArithmeticError`` if ``n_max`` is reached.
    Returns ``(value, n_used)``.
    """
    from derivations import generated_functions

    gm = generated_functions(spec, backend="mpmath")
    with mpmath.workdps(dps + 15):
        params = gm.params(spec)
        sigma, rho = params[0], params[3]
        scale = mpmath.sqrt(2 * rho)  # weight exp(-x^2): h* = sqrt(2 rho) x
        previous = None
        n = n_start
        while n <= n_max:
            X, W = mpmath.mp.gauss_quadrature(n, "hermite")
            W = [w / mpmath.sqrt(mpmath.pi) for w in W]
            B = [mpmath.mpf(0)] * 4
            ET2 = mpmath.mpf(0)
            for xa, wa in zip(X, W):
                for xb, wb in zip(X, W):
                    T = gm.teacher(scale * xa, scale * xb, *params)
                    w = wa * wb
                    B = [b + w * t for b, t in zip(B, T)]
                    ET2 += w * sum(t * t for t in T)
            value = sigma**2 / 2 * (ET2 - sum(b * b for b in B))
            if previous is not None and abs(value - previous) <= abs(value) * mpmath.mpf(10) ** (-(dps + 2)):
                return +value, n
            previous = value
            n += n_step
    raise ArithmeticError(f"linear baseline: no {dps}-digit agreement up to {n_max} Gauss-Hermite nodes")

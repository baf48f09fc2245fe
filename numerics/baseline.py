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

from numerics.model.bound import bind


@dataclasses.dataclass(frozen=True)
class Baseline:
    test_error: float
    error: float          # |value(n) - value(n + 16)|, the float64 rule's error estimate
    B: tuple              # B* = E[T], row-major


def teacher_moments(spec: ModelSpec, n: int):
    """``(E[T], E|T|_F^2)`` over ``h* ~ N(0, rho I_2)`` by an ``n x n`` Gauss-Hermite rule
    (``E[T]`` row-major)."""
    model = bind(spec)
    x, w = hermegauss(n)
    w = w / np.sqrt(2 * np.pi)
    e1, e2 = (a.ravel() for a in np.meshgrid(x, x, indexing="ij"))
    weight = np.outer(w, w).ravel()
    s = np.sqrt(spec.rho)
    T = np.array(model.teacher(s * e1, s * e2))  # (4, nodes)
    B = T @ weight
    ET2 = float(np.dot((T**2).sum(axis=0), weight))
    return B, ET2


#: the largest ``L t`` integrated by a tensor Gauss-Hermite rule (rules of RULES_BY_DIMENSION)
MAX_TENSOR_DIMENSION = 3
RULES_BY_DIMENSION = {1: (48, 64), 2: (48, 64), 3: (32, 40)}
#: scrambled Sobol points (log2) and scramblings above it
QMC_LOG2_POINTS, QMC_SCRAMBLES = 16, 8


def _general_moments(spec: ModelSpec, hs: np.ndarray, weight: np.ndarray):
    """``(E[T], E|T|_F^2)`` from the general model's teacher at nodes ``hs`` (``(N, L t)``)."""
    from numerics.model.general import bind_general

    T = bind_general(spec).teacher(hs)
    return T.T @ weight, float(np.dot((T**2).sum(axis=1), weight))


def _general_baseline(spec: ModelSpec) -> Baseline:
    """The baseline of a model of any shape (module docstring)."""
    dim = spec.tokens * spec.teacher_rank
    s = np.sqrt(spec.rho)
    if dim <= MAX_TENSOR_DIMENSION:
        values = []
        for n in RULES_BY_DIMENSION[dim]:
            x, w = hermegauss(n)
            w = w / np.sqrt(2 * np.pi)
            grids = np.meshgrid(*([x] * dim), indexing="ij")
            hs = s * np.stack([g.ravel() for g in grids], axis=1)
            weight = np.prod(np.stack([g.ravel() for g in np.meshgrid(*([w] * dim), indexing="ij")]), axis=0)
            B, ET2 = _general_moments(spec, hs, weight)
            values.append((0.5 * spec.sigma**2 * (ET2 - float(np.dot(B, B))), B))
        (v, _), (v2, B) = values
        return Baseline(test_error=v2, error=abs(v2 - v), B=tuple(float(b) for b in B))
    from scipy.stats import norm, qmc

    estimates, Bs = [], []
    for seed in range(QMC_SCRAMBLES):
        u = qmc.Sobol(dim, scramble=True, seed=seed).random_base2(QMC_LOG2_POINTS)
        hs = s * norm.ppf(u)
        weight = np.full(len(hs), 1.0 / len(hs))
        B, ET2 = _general_moments(spec, hs, weight)
        Bs.append(B)
        estimates.append(0.5 * spec.sigma**2 * (ET2 - float(np.dot(B, B))))
    # |B|^2 of one scrambling's mean is biased by its variance; the spread over scramblings bounds it
    value = float(np.mean(estimates))
    error = float(np.std(estimates, ddof=1) / np.sqrt(len(estimates)))
    return Baseline(test_error=value, error=error, B=tuple(float(b) for b in np.mean(Bs, axis=0)))


@functools.lru_cache(maxsize=64)
def linear_baseline(spec: ModelSpec, n: int = 48) -> Baseline:
    """Float64 linear-baseline test error with an error estimate from a finer rule (any shape:
    :func:`_general_baseline` for all but the two-token rank-one model)."""
    if not spec.is_two_token_rank_one:
        return _general_baseline(spec)
    values = []
    for k in (n, n + 16):
        B, ET2 = teacher_moments(spec, k)
        values.append((0.5 * spec.sigma**2 * (ET2 - float(np.dot(B, B))), B))
    (v, B), (v2, _) = values
    return Baseline(test_error=v2, error=abs(v2 - v), B=tuple(float(b) for b in B))


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

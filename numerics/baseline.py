"""The linear positional baseline (SPEC section 2, outputs).

``Yhat = B X`` with the best fixed ``L x L`` matrix ``B* = E[T(h*)]``,
``h* ~ N(0, rho I_2)``; its test error is ``(sigma^2/2)(E|T|_F^2 - |B*|_F^2)``.
The integrand is smooth, so tensor Gauss-Hermite converges exponentially in
float64; the 30-digit value uses mpmath's tanh-sinh quadrature on the
derived mpmath backend.
"""
from __future__ import annotations

import dataclasses
import functools

import mpmath
import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from derivations import ModelSpec

from .bound_model import bind


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


@functools.lru_cache(maxsize=64)
def linear_baseline(spec: ModelSpec, n: int = 48) -> Baseline:
    """Float64 linear-baseline test error with an error estimate from a finer rule."""
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

"""Symbolic model pieces built from a :class:`ModelSpec` (SPEC sections 1-2).

All expressions are built from exact rationals and symbols, never float
literals, so that the mpmath backend carries full precision (sympy issues 8818
and 14974).  The structural part of the spec (attention, teacher, regulariser)
selects the expressions; the numbers ``sigma, lam, omega, A`` stay symbols.
"""
from __future__ import annotations

import logging
from typing import Sequence

import sympy as sp

from . import symbols as S
from .spec import ModelSpec

log = logging.getLogger(__name__)


class DerivationError(ValueError):
    """The symbolic derivation cannot handle this model."""


class Logistic(sp.Function):
    """``1/(1 + exp(-x))`` as an opaque function whose derivative is ``Logistic (1 - Logistic)``.

    Used only for code generation of the prox derivatives (``logistic=True``
    below): every derivative of the loss is then a polynomial in a few logistic
    values, which CSE shares, instead of a sum of distinct exponentials (measured:
    the fused prox Newton terms run 2.7 times faster). The exported equations keep
    the plain ``exp`` form.
    """

    nargs = 1

    def fdiff(self, argindex=1):
        return Logistic(self.args[0]) * (1 - Logistic(self.args[0]))

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sp.exp(-x))

    def _eval_evalf(self, prec):
        return (1 / (1 + sp.exp(-self.args[0])))._eval_evalf(prec)

    def _numpycode(self, printer):
        return f"(1/(1 + {printer._module_format('numpy.exp')}(-({printer._print(self.args[0])}))))"

    def _mpmathcode(self, printer):
        return f"(1/(1 + {printer._module_format('mpmath.exp')}(-({printer._print(self.args[0])}))))"


def sigmoid(x, logistic: bool = False):
    """Logistic function ``1/(1 + exp(-x))`` as a SymPy expression (opaque :class:`Logistic` if asked)."""
    return Logistic(x) if logistic else 1 / (1 + sp.exp(-x))


def softmax_rows(scores: sp.Matrix, logistic: bool = False) -> sp.Matrix:
    """Row softmax written as ``1/sum_k exp(s_ik - s_ij)``.

    Mathematically identical to ``exp(s_ij)/sum_k exp(s_ik)``; this form never
    evaluates ``inf/inf`` in floating point (an overflowing exponential gives 0).
    With ``logistic`` and two columns the same row is ``(Logistic(d), Logistic(-d))``,
    ``d = s_i1 - s_i2``.
    """
    n, k = scores.shape
    if logistic and k == 2:
        return sp.Matrix(n, k, lambda i, j: Logistic(scores[i, j] - scores[i, 1 - j]))
    return sp.Matrix(n, k, lambda i, j: 1 / sum(sp.exp(scores[i, l] - scores[i, j]) for l in range(k)))


def attention_matrix(spec: ModelSpec, h: Sequence[sp.Expr], logistic: bool = False) -> sp.Matrix:
    """Student attention ``S(h)`` (SPEC section 2), ``h`` the L pre-activations."""
    hv = sp.Matrix(h)
    scores = hv * hv.T
    if spec.attention == "softmax":
        return softmax_rows(scores, logistic)
    if spec.attention == "linear":
        return scores
    if spec.attention == "sigmoid":
        return scores.applyfunc(lambda x: sigmoid(x, logistic))
    raise DerivationError(f"attention: no symbolic form for {spec.attention!r}")


def teacher_matrix(spec: ModelSpec, hs: Sequence[sp.Expr], logistic: bool = False) -> sp.Matrix:
    """Teacher ``T(h*) = (1 - omega) softmax_rows(h* h*^T) + omega A`` (SPEC section 1)."""
    if spec.teacher != "softmax":
        raise DerivationError(f"teacher: no symbolic form for {spec.teacher!r}")
    hv = sp.Matrix(hs)
    return (1 - S.omega) * softmax_rows(hv * hv.T, logistic) + S.omega * S.A


def loss(spec: ModelSpec, h: Sequence[sp.Expr] = S.H, hs: Sequence[sp.Expr] = S.HS, logistic: bool = False) -> sp.Expr:
    """Per-sample loss ``l(h; h*) = (sigma^2/2) |S(h) - T(h*)|_F^2`` (SPEC section 2)."""
    D = attention_matrix(spec, h, logistic) - teacher_matrix(spec, hs, logistic)
    return S.sigma**2 / 2 * sum(D[i, j] ** 2 for i in range(D.rows) for j in range(D.cols))


def prox_objective(spec: ModelSpec, logistic: bool = False) -> sp.Expr:
    """``|h - w|^2/(2V) + l(h; h*)``, whose minimum over h is the Moreau envelope M."""
    return sum((h - w) ** 2 for h, w in zip(S.H, S.W)) / (2 * S.V) + loss(spec, logistic=logistic)


def preactivations() -> dict:
    """``w_l``, ``h*_l`` in terms of the Gaussians ``xi, y`` and ``q, m, theta`` (SPEC section 2).

    Position signs follow ``mu_2 = -mu_1``: ``w_1 = m + sqrt(q) xi_1``,
    ``w_2 = -m + sqrt(q) xi_2``, ``h*_l = theta/sqrt(q) xi_l + sqrt(rho - theta^2/q) y_l``.
    """
    signs = (1, -1)
    s = sp.sqrt(S.rho - S.theta**2 / S.q)
    out = {}
    for l in range(2):
        out[S.W[l]] = signs[l] * S.m + sp.sqrt(S.q) * S.XI[l]
        out[S.HS[l]] = S.theta / sp.sqrt(S.q) * S.XI[l] + s * S.Y[l]
    return out


def regulariser_penalty(spec: ModelSpec, Q: sp.Symbol = S.Qw) -> sp.Expr:
    """Per-coordinate penalty ``r(Q)`` of the student weights (ridge: ``lam/2 Q^2``)."""
    if spec.regulariser == "ridge":
        return S.lam / 2 * Q**2
    raise DerivationError(f"regulariser: no symbolic form for {spec.regulariser!r}")

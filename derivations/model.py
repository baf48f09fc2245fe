"""Symbolic model pieces built from a :class:`ModelSpec` (docs/theory.md, sections 1.8, 2.1 and 4).

All expressions are built from exact rationals and symbols, never float
literals, so that the mpmath backend carries full precision (sympy issues 8818
and 14974).  The structural part of the spec (shape, positions, attention, teacher,
regulariser) selects the expressions; the numbers ``sigma, lam, omega, A`` stay symbols.
Per-token quantities are ``L x n`` matrices of symbols (:func:`derivations.symbols.matrix_symbols`);
for the two-token rank-one model they are the columns ``(h1, h2)``, ``(hs1, hs2)``, ... of section 2.
"""
from __future__ import annotations

import logging

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

    def _pythoncode(self, printer):
        return f"(1/(1 + {printer._module_format('math.exp')}(-({printer._print(self.args[0])}))))"


class Softmax(sp.Function):
    """Entry ``j`` of the softmax of a row ``(s_1, ..., s_n)``, ``Softmax(j, s_1, ..., s_n)``, as an
    opaque function whose derivative in ``s_k`` is ``Softmax_j (delta_jk - Softmax_k)``.

    The counterpart of :class:`Logistic` for rows of more than two entries, for code generation
    only: the derivatives of the loss are then polynomials in the softmax values, which CSE shares,
    and :func:`explicit_softmax` writes the values themselves in the form of :func:`softmax_rows`.
    """

    def fdiff(self, argindex=1):
        j, row = self.args[0], self.args[1:]
        k = argindex - 2
        if k < 0:
            raise sp.ArgumentIndexError(self, argindex)
        return self * ((1 if k == j else 0) - Softmax(k, *row))

    def _eval_rewrite_as_exp(self, j, *row, **kwargs):
        return 1 / sum(sp.exp(s - row[int(j)]) for s in row)

    def _eval_evalf(self, prec):
        return self.rewrite(sp.exp)._eval_evalf(prec)


def explicit_softmax(expr):
    """``expr`` with every :class:`Softmax` written as ``1/sum_k exp(s_k - s_j)`` (see :func:`softmax_rows`)."""
    return expr.replace(lambda e: isinstance(e, Softmax), lambda e: e._eval_rewrite_as_exp(*e.args))


def sigmoid(x, logistic: bool = False):
    """Logistic function ``1/(1 + exp(-x))`` as a SymPy expression (opaque :class:`Logistic` if asked)."""
    return Logistic(x) if logistic else 1 / (1 + sp.exp(-x))


def softmax_rows(scores: sp.Matrix, logistic: bool = False) -> sp.Matrix:
    """Row softmax written as ``1/sum_k exp(s_ik - s_ij)``.

    Mathematically identical to ``exp(s_ij)/sum_k exp(s_ik)``; this form never
    evaluates ``inf/inf`` in floating point (an overflowing exponential gives 0).
    With ``logistic`` (opaque functions for code generation) a row of two entries is
    ``(Logistic(d), Logistic(-d))``, ``d = s_i1 - s_i2``, and a longer one ``Softmax(j, s_i1, ...)``.
    """
    n, k = scores.shape
    if logistic and k == 2:
        return sp.Matrix(n, k, lambda i, j: Logistic(scores[i, j] - scores[i, 1 - j]))
    if logistic:
        return sp.Matrix(n, k, lambda i, j: Softmax(j, *scores.row(i)))
    return sp.Matrix(n, k, lambda i, j: 1 / sum(sp.exp(scores[i, l] - scores[i, j]) for l in range(k)))


def _rows(h) -> sp.Matrix:
    """``h`` as an ``L x n`` matrix (a flat sequence is one column: the rank-one case)."""
    return h if isinstance(h, sp.MatrixBase) else sp.Matrix(list(h))


def attention_of_scores(text: str, scores: sp.Matrix, role: str, beta: float = 1.0, logistic: bool = False) -> sp.Matrix:
    """The attention ``text`` (a built-in name or a canonical expression, :mod:`derivations.attention`)
    of the ``n x L`` matrix of ``scores``, row by row.

    The built-ins are their row expressions written in the forms above, which code generation
    shares and which never evaluate ``inf/inf``: the softmax as :func:`softmax_rows` of ``beta``
    times the scores (exactly ``exp(beta h1) / sum_l exp(beta hl)`` per row), the sigmoid by
    :func:`sigmoid`. An expression is applied by :func:`derivations.attention.attention_rows`, its
    quotients of exponentials in the same forms."""
    from . import attention

    if text == "softmax":
        b = sp.Rational(repr(float(beta))) if role == "attention" else sp.Integer(1)
        return softmax_rows(scores if b == 1 else b * scores, logistic)
    if text == "linear":
        return scores
    if text == "sigmoid":
        return scores.applyfunc(lambda x: sigmoid(x, logistic))
    return attention.attention_rows(text, scores, role, beta, logistic)


def attention_matrix(spec: ModelSpec, h, logistic: bool = False) -> sp.Matrix:
    """Student attention ``S(h)`` of ``h h^T`` (docs/theory.md, sections 2.1 and 4.1), ``h`` the ``L x r``
    pre-activations (a sequence of ``L`` numbers when ``r = 1``)."""
    hv = _rows(h)
    return attention_of_scores(spec.attention, hv * hv.T, "attention", spec.beta, logistic)


def teacher_matrix(spec: ModelSpec, hs, logistic: bool = False) -> sp.Matrix:
    """Teacher ``T(h*) = (1 - omega) T0(h* h*^T) + omega A`` (docs/theory.md, sections 1.2 and 4.1), ``T0``
    the teacher's attention (default the softmax)."""
    hv = _rows(hs)
    return (1 - S.omega) * attention_of_scores(spec.teacher, hv * hv.T, "teacher", 1.0, logistic) \
        + S.omega * S.matrix_symbols(spec.shape).A


def loss(spec: ModelSpec, h=None, hs=None, logistic: bool = False, teacher=None) -> sp.Expr:
    """Per-sample loss ``l(h; h*) = (sigma^2/2) |S(h) - T(h*)|_F^2`` (docs/theory.md, sections 2.1 and 4.3).

    ``h`` and ``hs`` default to the spec's symbols (``h1, h2`` and ``hs1, hs2`` for two tokens of rank one).
    ``teacher``: an ``L x L`` matrix standing for ``T(h*)`` (e.g. the symbols
    :attr:`~derivations.symbols.MatrixSymbols.T`), for the loss as a function of the teacher's matrix."""
    ms = S.matrix_symbols(spec.shape)
    T = teacher_matrix(spec, ms.hs if hs is None else hs, logistic) if teacher is None else teacher
    D = attention_matrix(spec, ms.h if h is None else h, logistic) - T
    return S.sigma**2 / 2 * sum(D[i, j] ** 2 for i in range(D.rows) for j in range(D.cols))


def inverse(matrix: sp.Matrix) -> sp.Matrix:
    """The inverse of a small symbolic matrix (the adjugate over the determinant; ``1/x`` for ``1 x 1``)."""
    if matrix.shape == (1, 1):
        return sp.Matrix([[1 / matrix[0, 0]]])
    return matrix.adjugate() / matrix.det()


def prox_objective(spec: ModelSpec, logistic: bool = False, teacher=None) -> sp.Expr:
    """``1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + l(h; h*)``, whose minimum over ``h`` is the Moreau
    envelope ``M`` (docs/theory.md, sections 2.3 and 4.3); ``teacher`` as in :func:`loss`."""
    ms = S.matrix_symbols(spec.shape)
    Vinv = inverse(ms.V)
    quad = sum(((ms.h[l, :] - ms.w[l, :]) * Vinv * (ms.h[l, :] - ms.w[l, :]).T)[0, 0] for l in range(ms.shape.L))
    return quad / 2 + loss(spec, logistic=logistic, teacher=teacher)


def positions(spec: ModelSpec) -> sp.Matrix:
    """The positional matrix ``P`` (``L x k``) as exact rationals (the decimal the user wrote, not the double)."""
    return sp.Matrix([[sp.Rational(repr(float(x))) for x in row] for row in spec.positions])


def positional_mean(spec: ModelSpec) -> sp.Matrix:
    """``P m`` (``L x r``): the positional part of the student pre-activations (docs/theory.md, section 4.2)."""
    return positions(spec) * S.matrix_symbols(spec.shape).m


def regulariser_penalty(spec: ModelSpec, Q: sp.Symbol = S.Qw) -> sp.Expr:
    """Per-coordinate penalty ``pen(Q)`` of the student weights: ridge ``lam/2 Q^2``, or the typed
    ``c(lam) Q^2`` (:func:`derivations.regulariser.penalty`, in the derivation's symbol ``lam``)."""
    if spec.regulariser == "ridge":
        return S.lam / 2 * Q**2
    from .regulariser import penalty

    return penalty(spec.regulariser, Q)

"""The SymPy symbols of the theory, with the names used in output (docs/theory.md, sections 2 and 4).

The scalar symbols below are those of the two-token rank-one model (docs/theory.md, section 2);
:func:`matrix_symbols` gives the matrices of symbols of the general model, named by
:mod:`derivations.packing`, which at ``(L, r, t, k) = (2, 1, 1, 1)`` are these same symbols.

Every generated function takes the model parameters last, in the fixed order
:data:`PARAMS` = ``(sigma, lam, omega, rho, a11, a12, a21, a22)`` (``a11, ..., aLL`` for ``L``
tokens).  ``rho`` is a separate argument (``rho = sigma**2``, docs/theory.md, section 2.2) so that
the teacher variance can be varied independently in checks.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Tuple

import sympy as sp

from . import packing

# order parameters and their conjugates
q = sp.Symbol("q", positive=True)
m = sp.Symbol("m", real=True)
V = sp.Symbol("V", positive=True)
theta = sp.Symbol("theta", real=True)
qhat = sp.Symbol("qhat", real=True)
mhat = sp.Symbol("mhat", real=True)
Vhat = sp.Symbol("Vhat", real=True)
thetahat = sp.Symbol("thetahat", real=True)

# model parameters
alpha = sp.Symbol("alpha", positive=True)
sigma = sp.Symbol("sigma", positive=True)
lam = sp.Symbol("lam", nonnegative=True)
rho = sp.Symbol("rho", positive=True)
omega = sp.Symbol("omega", real=True)
a11, a12, a21, a22 = sp.symbols("a11 a12 a21 a22", real=True)
A = sp.Matrix([[a11, a12], [a21, a22]])

#: trailing arguments of every generated function, in this order
PARAMS = (sigma, lam, omega, rho, a11, a12, a21, a22)
PARAM_NAMES = tuple(s.name for s in PARAMS)

# Gaussian quadrature variables (xi, y ~ N(0, I_2), independent)
xi1, xi2, y1, y2 = sp.symbols("xi1 xi2 y1 y2", real=True)
XI = (xi1, xi2)
Y = (y1, y2)
GAUSSIANS = (xi1, xi2, y1, y2)

# student pre-activations, prox point, teacher pre-activations
w1, w2 = sp.symbols("w1 w2", real=True)
h1, h2 = sp.symbols("h1 h2", real=True)
hs1, hs2 = sp.symbols("hs1 hs2", real=True)
W = (w1, w2)
H = (h1, h2)
HS = (hs1, hs2)

# stand-ins inside expectations: f_l = (prox_l - w_l)/V, g_l = dl/dhs_l at the prox
f1, f2, g1, g2 = sp.symbols("f1 f2 g1 g2", real=True)
F_ = (f1, f2)
G_ = (g1, g2)

#: the Moreau envelope M(w, hs; V), an undefined function of its five arguments
M = sp.Function("M")
M_ARGS = (w1, w2, hs1, hs2, V)
M_OF = M(*M_ARGS)

#: expectation over (xi, y), an unevaluated function. Not ``E`` (Euler's number
#: in ``sympify``).
Expect = sp.Function("Expect")

# auxiliary symbols of the prior (regulariser) integral; never in output
Qw = sp.Symbol("Qw", real=True)          # one coordinate of the student weights
Qstar = sp.Symbol("Qstar", real=True)    # one coordinate of the teacher weights
xi0 = sp.Symbol("xi0", real=True)        # Gaussian field of the prior term
beta = sp.Symbol("beta_", positive=True)  # inverse temperature (zero-temperature limit)

#: symbols that are random under ``Expect`` (everything else is a coefficient)
RANDOM = GAUSSIANS + F_ + G_ + W + HS + H

OVERLAPS = (q, m, V, theta)
CONJUGATES = (qhat, mhat, Vhat, thetahat)


# ----------------------------------------------------------------------------
# the general model: matrices of symbols (docs/theory.md, section 4)
# ----------------------------------------------------------------------------

#: names of the symbols that are random under ``Expect`` (per-token quantities and the
#: standard normals of section 2.2), e.g. ``f1``, ``hs_2_1``, ``zeta_1_2``, ``xi1``, ``y2``
_RANDOM_NAME = re.compile(r"^(xi|y|f|g|w|hs|h|zeta)(\d+|_\d+_\d+)$")


def is_random(symbol) -> bool:
    """Whether ``symbol`` is random under ``Expect`` (decided by its name, which survives caching)."""
    return isinstance(symbol, sp.Symbol) and bool(_RANDOM_NAME.match(symbol.name))


def _matrix(name: str, rows: int, cols: int, symmetric: bool = False, positive_diagonal: bool = False) -> sp.Matrix:
    """A matrix of symbols named by :mod:`derivations.packing` (a symmetric one shares its symbols)."""
    names = packing.matrix_names(name, rows, cols, symmetric)
    index = packing.matrix_index(rows, cols, symmetric)
    out = sp.zeros(rows, cols)
    for n, (i, j) in zip(names, index):
        s = sp.Symbol(n, positive=True) if positive_diagonal and i == j else sp.Symbol(n, real=True)
        out[i, j] = s
        if symmetric:
            out[j, i] = s
    return out


def components(matrix: sp.Matrix, symmetric: bool = False) -> Tuple[sp.Expr, ...]:
    """The packed components of ``matrix`` (upper triangle, row-major, if symmetric)."""
    return tuple(matrix[i, j] for i, j in packing.matrix_index(matrix.rows, matrix.cols, symmetric))


@dataclasses.dataclass(frozen=True)
class MatrixSymbols:
    """Every symbol of the general model of one shape ``(L, r, t, k)`` (docs/theory.md, section 4).

    Names follow :mod:`derivations.packing`; at ``(2, 1, 1, 1)`` they are the symbols of section 2
    (``q``, ``m``, ``w1``, ``hs2``, ...), so the two-token rank-one model is this object at one size.
    ``zeta`` is the semantic part ``omega_l`` of ``w_l`` in docs/theory.md, section 4.2 (renamed:
    ``omega`` is the teacher's mixing weight). ``K`` stands for ``(lam I + sigma^2 Vhat)^{-1}``
    and ``Sigmainv`` for the inverse of the covariance ``Sigma`` of ``x_l = (zeta_l, h*_l)``; ``T``
    (``L x L``, components ``T_1_1, T_1_2, ...``) for the teacher's matrix ``T(h*)``, through which
    alone the loss depends on ``h*``.
    """

    shape: packing.Shape
    q: sp.Matrix
    V: sp.Matrix
    m: sp.Matrix
    theta: sp.Matrix
    qhat: sp.Matrix
    Vhat: sp.Matrix
    mhat: sp.Matrix
    thetahat: sp.Matrix
    A: sp.Matrix
    h: sp.Matrix
    w: sp.Matrix
    zeta: sp.Matrix
    hs: sp.Matrix
    f: sp.Matrix
    g: sp.Matrix
    K: sp.Matrix
    Sigmainv: sp.Matrix
    T: sp.Matrix
    params: Tuple[sp.Symbol, ...]

    @property
    def rho_matrix(self) -> sp.Matrix:
        """``rho I_t``: the teacher's covariance (``rho = sigma^2``, a separate symbol)."""
        return rho * sp.eye(self.shape.t)

    @property
    def Sigma(self) -> sp.Matrix:
        """``[[q, theta], [theta^T, rho I_t]]``, the covariance of ``x_l = (zeta_l, h*_l)``."""
        return sp.BlockMatrix([[self.q, self.theta], [self.theta.T, self.rho_matrix]]).as_explicit()

    def x(self, l: int) -> sp.Matrix:
        """``x_l = (zeta_l, h*_l)`` as a column (token ``l`` 0-based)."""
        return sp.Matrix.vstack(self.zeta[l, :].T, self.hs[l, :].T)

    @property
    def M_args(self) -> Tuple[sp.Symbol, ...]:
        """The arguments of ``M``: ``w`` and ``h*`` token by token, then the packed ``V``."""
        return components(self.w) + components(self.hs) + components(self.V, symmetric=True)

    @property
    def M_of(self) -> sp.Expr:
        return M(*self.M_args)

    def packed(self, name: str) -> Tuple[sp.Symbol, ...]:
        """The independent symbols of an order parameter (``q``, ``m``, ..., ``thetahat``), in packing order."""
        return components(getattr(self, name), symmetric=packing.ORDER_PARAMETERS[name][2])


@functools.lru_cache(maxsize=None)
def matrix_symbols(shape) -> MatrixSymbols:
    """The :class:`MatrixSymbols` of ``shape = (L, r, t, k)``."""
    s = packing.as_shape(shape)
    L, r, t, k = s
    mats = {}
    for name, (rows, cols, sym) in packing.ORDER_PARAMETERS.items():
        mats[name] = _matrix(name, getattr(s, rows), getattr(s, cols), sym, positive_diagonal=name in ("q", "V"))
    A_ = sp.Matrix(L, L, [sp.Symbol(n, real=True) for n in packing.param_names(L)[len(packing.SCALAR_PARAMS):]])
    tok = {name: sp.Matrix(L, getattr(s, width), [sp.Symbol(n, real=True) for n in packing.token_names(name, s)])
           for name, width in packing.PER_TOKEN.items()}
    return MatrixSymbols(shape=s, A=A_, K=_matrix("K", r, r, symmetric=True),
                         Sigmainv=_matrix("Sigmainv", r + t, r + t, symmetric=True), T=_matrix("T", L, L),
                         params=(sigma, lam, omega, rho) + tuple(A_), **mats, **tok)

"""Channel moments: per-node token sums whose averages give every conjugate (docs/theory.md, section 4.6).

The channel conjugates of :class:`~derivations.replica.MatrixDerivation` are linear in the
expectations of

    ff = sum_l f_l f_l^T               (r x r, symmetric)
    pf = sum_l P[l, :]^T f_l^T         (k x r: row a is sum_l P[l, a] f_l)
    fx = sum_l f_l x_l^T               (r x (r + t)),   x_l = (zeta_l, h*_l)
    gx = sum_l g_l x_l^T               (t x (r + t))
    envelope = M                       (the Moreau envelope at the prox; F = prior part + alpha E[M])

A quadrature evaluates these per node (:func:`per_node`, generated as ``channel_moments``), averages
them, and :func:`in_moments` rewrites each conjugate in the averages (generated as
``conjugates_from_moments``), so no equation is written twice. Names follow
:mod:`derivations.packing` (``ff_12``, ``pf_1_1``, ``fx_1_3``, ...; a ``1 x 1`` one is bare).
"""
from __future__ import annotations

import functools
from typing import Dict, Tuple

import sympy as sp

from . import packing
from . import symbols as S
from .model import DerivationError, positions
from .expectations import expect_terms
from .spec import ModelSpec

#: the moment matrices, in the order of the generated functions' arguments and outputs
KINDS = ("ff", "pf", "fx", "gx", "envelope")


def dimensions(shape) -> Dict[str, Tuple[int, int, bool]]:
    """``{kind: (rows, columns, symmetric)}`` of each moment for ``shape``."""
    L, r, t, k = packing.as_shape(shape)
    return {"ff": (r, r, True), "pf": (k, r, False), "fx": (r, r + t, False), "gx": (t, r + t, False),
            "envelope": (1, 1, False)}


def names(shape) -> Tuple[str, ...]:
    """The packed moment names, kind by kind (:data:`KINDS`)."""
    return tuple(n for kind, (rows, cols, sym) in dimensions(shape).items()
                 for n in packing.matrix_names(kind, rows, cols, sym))


@functools.lru_cache(maxsize=None)
def matrices(shape) -> Dict[str, sp.Matrix]:
    """``{kind: matrix of symbols}`` (a symmetric one shares its symbols)."""
    out = {}
    for kind, (rows, cols, sym) in dimensions(shape).items():
        m = sp.zeros(rows, cols)
        for n, (i, j) in zip(packing.matrix_names(kind, rows, cols, sym), packing.matrix_index(rows, cols, sym)):
            m[i, j] = sp.Symbol(n, real=True)
            if sym:
                m[j, i] = m[i, j]
        out[kind] = m
    return out


def symbols(shape) -> Tuple[sp.Symbol, ...]:
    """The packed moment symbols, in the order of :func:`names`."""
    return tuple(sp.Symbol(n, real=True) for n in names(shape))


def per_node(spec: ModelSpec) -> Tuple[sp.Expr, ...]:
    """Each moment as a function of one node: ``f``, ``g``, ``zeta``, ``h*`` and ``M``, in the order of :func:`names`."""
    ms = S.matrix_symbols(spec.shape)
    L = ms.shape.L
    P = positions(spec)
    x = [ms.x(l) for l in range(L)]
    ff = sum((ms.f[l, :].T * ms.f[l, :] for l in range(L)), sp.zeros(ms.shape.r, ms.shape.r))
    pf = sum((P[l, :].T * ms.f[l, :] for l in range(L)), sp.zeros(ms.shape.k, ms.shape.r))
    fx = sum((ms.f[l, :].T * x[l].T for l in range(L)), sp.zeros(*dimensions(spec.shape)["fx"][:2]))
    gx = sum((ms.g[l, :].T * x[l].T for l in range(L)), sp.zeros(*dimensions(spec.shape)["gx"][:2]))
    out = S.components(ff, True) + S.components(pf) + S.components(fx) + S.components(gx) + (ms.M_of,)
    return tuple(sp.expand(e) for e in out)


def _patterns(spec: ModelSpec):
    """``{symbol: (kind, token, component)}`` for ``f``, ``g`` and ``x`` (``zeta`` and ``h*``) of each token."""
    ms = S.matrix_symbols(spec.shape)
    L, r, t, _ = ms.shape
    out = {}
    for l in range(L):
        for i in range(r):
            out[ms.f[l, i]] = ("f", l, i)
            out[ms.zeta[l, i]] = ("x", l, i)
        for j in range(t):
            out[ms.g[l, j]] = ("g", l, j)
            out[ms.hs[l, j]] = ("x", l, r + j)
    return out


def _pattern(monomial: sp.Expr, lookup) -> Tuple[tuple, int]:
    """``(sorted (kind, component) factors, token)`` of a per-token monomial."""
    factors, tokens = [], set()
    for factor in sp.Mul.make_args(monomial):
        base, exponent = factor.as_base_exp()
        if base not in lookup or not (exponent.is_Integer and exponent > 0):
            raise DerivationError(f"not a per-token monomial of f, g, zeta, h*: {monomial}")
        kind, l, c = lookup[base]
        factors += [(kind, c)] * int(exponent)
        tokens.add(l)
    if len(tokens) != 1:
        raise DerivationError(f"a monomial across tokens: {monomial}")
    return tuple(sorted(factors)), tokens.pop()


def _definitions(spec: ModelSpec):
    """``{pattern: [(moment symbol, weights over tokens)]}`` from the definitions of the moments."""
    L, r, t, k = spec.shape
    mats = matrices(spec.shape)
    P = positions(spec)
    ones = [1] * L
    out: Dict[tuple, list] = {}

    def add(pattern, symbol, weights):
        out.setdefault(tuple(sorted(pattern)), []).append((symbol, weights))

    for i in range(r):
        for j in range(i, r):
            add([("f", i), ("f", j)], mats["ff"][i, j], ones)
        for a in range(k):
            add([("f", i)], mats["pf"][a, i], [P[l, a] for l in range(L)])
        for c in range(r + t):
            add([("f", i), ("x", c)], mats["fx"][i, c], ones)
    for j in range(t):
        for c in range(r + t):
            add([("g", j), ("x", c)], mats["gx"][j, c], ones)
    return out


def in_moments(expr: sp.Expr, spec: ModelSpec) -> sp.Expr:
    """``expr`` (linear in ``Expect``) with each expectation written in the moment symbols.

    Monomials are grouped by their per-token pattern; the coefficients over tokens are matched
    exactly with the weights of the moments of that pattern (all ones, or the columns of ``P``).
    Raises :class:`DerivationError` if an expectation is not a combination of the moments."""
    det, terms = expect_terms(expr)
    lookup = _patterns(spec)
    definitions = _definitions(spec)
    L = spec.L
    grouped: Dict[tuple, list] = {}
    out = det
    for monomial, c in terms.items():
        if monomial == S.matrix_symbols(spec.shape).M_of:
            out += c * matrices(spec.shape)["envelope"][0, 0]
            continue
        pattern, l = _pattern(monomial, lookup)
        grouped.setdefault(pattern, [sp.S.Zero] * L)[l] += c
    for pattern, coefficients in grouped.items():
        if pattern not in definitions:
            raise DerivationError(f"no moment for the pattern {pattern}")
        symbols_, weights = zip(*definitions[pattern])
        W = sp.Matrix(L, len(weights), lambda l, n: weights[n][l])
        c = sp.Matrix(coefficients)
        beta = W.pinv() * c
        if any(sp.simplify(e) != 0 for e in W * beta - c):
            raise DerivationError(f"the expectations {pattern} with coefficients {coefficients} are not "
                                  f"a combination of the moments {symbols_}")
        out += sum(sp.simplify(b) * s for b, s in zip(beta, symbols_))
    return out

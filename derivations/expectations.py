"""Gaussian expectations as SymPy sees them (docs/theory.md, sections 4.2-4.6): a linear normal form in
which two expectations are compared (:func:`expect_terms`, :func:`normal_form`, :func:`expect_equal`),
and Stein's lemma in any frame of jointly Gaussian variables (:class:`GaussianFrame`,
:func:`integrate_by_parts`), the per-token frame ``x_l = (zeta_l, h*_l)`` of the general derivation
among them (:func:`x_frame`)."""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import sympy as sp

from . import symbols as S
from .model import DerivationError, positional_mean
from .spec import ModelSpec


# ----------------------------------------------------------------------------
# expectations: linear normal form
# ----------------------------------------------------------------------------

_S_STD = sp.sqrt(S.rho - S.theta**2 / S.q)
_S_SYM = sp.Symbol("s_", positive=True)


def _simplify(c: sp.Expr) -> sp.Expr:
    """Simplify a coefficient, keeping ``sqrt(rho - theta^2/q)`` (assumed > 0) as one block."""
    if not (c.has(S.rho) and c.has(S.theta)):
        return sp.simplify(c)
    # write rho = s^2 + theta^2/q: every sqrt(rho - theta^2/q) becomes s
    out = sp.simplify(c.subs(S.rho, _S_SYM**2 + S.theta**2 / S.q))
    return out.subs(_S_SYM, _S_STD)


def _random_symbols(expr) -> Tuple[sp.Symbol, ...]:
    return tuple(sorted((s for s in expr.free_symbols if S.is_random(s)), key=sp.default_sort_key))


def _is_random(expr) -> bool:
    return any(S.is_random(s) for s in expr.free_symbols) or expr.has(S.M)


def expect_terms(expr: sp.Expr) -> Tuple[sp.Expr, Dict[sp.Expr, sp.Expr]]:
    """Split ``expr`` into ``deterministic + sum_k c_k Expect(r_k)``.

    Uses linearity of the expectation: returns ``(deterministic, {r_k: c_k})``
    with each ``r_k`` a monomial in the random quantities and ``c_k`` simplified
    and nonzero.  Two expressions are equal as expectations iff the normal form of
    their difference is empty.
    """
    det = sp.S.Zero
    terms: Dict[sp.Expr, sp.Expr] = {}
    expr = canonical_derivatives(expr)
    for term in sp.Add.make_args(sp.expand(expr)):
        ex = [a for a in term.atoms(S.Expect)]
        if not ex:
            det += term
            continue
        if len(ex) != 1:
            raise DerivationError(f"non-linear in expectations: {term}")
        (e,) = ex
        coeff = term / e
        if _is_random(coeff) or coeff.has(S.Expect):
            raise DerivationError(f"non-linear in expectations: {term}")
        for t in sp.Add.make_args(sp.expand(e.args[0])):
            c, r = t.as_independent(*_random_symbols(t), S.M, as_Add=False)
            if not _is_random(r):  # E[constant] = constant
                det += coeff * c * r
                continue
            terms[r] = terms.get(r, 0) + coeff * c
    terms = {r: _simplify(c) for r, c in terms.items()}
    return _simplify(det), {r: c for r, c in terms.items() if c != 0}


def canonical_derivatives(expr: sp.Expr) -> sp.Expr:
    """Order mixed partial derivatives of M as its arguments.

    Partial derivatives of M commute (M is smooth where the prox is unique);
    SymPy keeps an undefined function's differentiation order as written.
    """
    def canon(e):
        order = {v: i for i, v in enumerate(e.expr.args)}
        counts: Dict[sp.Symbol, int] = {}
        for v, k in e.variable_count:
            counts[v] = counts.get(v, 0) + k
        return sp.Derivative(e.expr, *sorted(counts.items(), key=lambda vk: order[vk[0]]))

    return expr.replace(lambda e: isinstance(e, sp.Derivative) and getattr(e.expr, "func", None) == S.M, canon)


def expect_from_terms(det: sp.Expr, terms: Dict[sp.Expr, sp.Expr]) -> sp.Expr:
    """Readable inverse of :func:`expect_terms`: terms with equal coefficients share one ``Expect``."""
    groups: Dict[sp.Expr, sp.Expr] = {}
    for r, c in terms.items():
        if c.could_extract_minus_sign():
            c, r = -c, -r
        groups[c] = groups.get(c, 0) + r
    out = det
    for c, r in groups.items():
        if r.could_extract_minus_sign():
            c, r = -c, -r
        out += c * S.Expect(r)
    return out


def normal_form(expr: sp.Expr) -> sp.Expr:
    """``expr`` rewritten through :func:`expect_terms` and :func:`expect_from_terms`."""
    return expect_from_terms(*expect_terms(expr))


def expect_equal(a: sp.Expr, b: sp.Expr) -> bool:
    """Whether ``a == b`` follows from linearity of ``Expect`` and simplification."""
    det, terms = expect_terms(a - b)
    return det == 0 and not terms


def integrand_of(expr: sp.Expr, scale: sp.Expr = S.alpha) -> sp.Expr:
    """The integrand ``I`` with ``expr == scale * Expect(I)`` (``expr`` linear in Expect, no constant)."""
    det, terms = expect_terms(expr)
    if det != 0:
        raise DerivationError(f"expected a pure expectation, got deterministic part {det}")
    return sp.Add(*[_simplify(c / scale) * r for r, c in terms.items()])


# ----------------------------------------------------------------------------
# Gaussian frames: Stein's lemma in any set of Gaussian variables
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GaussianFrame:
    """Zero-mean jointly Gaussian ``variables`` with ``covariance``, and the arguments of ``M`` as
    functions of them (``arguments``: M-argument symbol -> expression).

    The frame of the general derivation (:func:`x_frame`) has the variables ``x_l = (zeta_l, h*_l)``
    with covariance ``Sigma`` per token; the two-token rank-one model also uses the standard normals
    ``xi, y`` of docs/theory.md, section 2.2 (:func:`derivations.reduction.line_frame`).
    """

    symbols: S.MatrixSymbols
    variables: Tuple[sp.Symbol, ...]
    covariance: sp.Matrix
    arguments: Tuple[Tuple[sp.Symbol, sp.Expr], ...]

    def total_derivative(self, expr: sp.Expr, z: sp.Symbol) -> sp.Expr:
        """``d expr/dz`` with the arguments of ``M`` depending on ``z``."""
        out = sp.diff(expr, z)
        for u, of in self.arguments:
            if u == z:  # the variable is itself an argument of M: sp.diff has done it
                continue
            du = sp.diff(of, z)
            if du != 0:
                out += du * sp.diff(expr, u)
        return out


def x_frame(spec: ModelSpec) -> GaussianFrame:
    """The per-token Gaussian ``x_l = (zeta_l, h*_l) ~ N(0, Sigma)``, ``w_l = (P m)_l + zeta_l``
    (docs/theory.md, section 4.2)."""
    ms = S.matrix_symbols(spec.shape)
    L = ms.shape.L
    variables = tuple(v for l in range(L) for v in ms.x(l))
    covariance = sp.diag(*[ms.Sigma] * L)
    Pm = positional_mean(spec)
    args = tuple((ms.w[l, i], Pm[l, i] + ms.zeta[l, i]) for l in range(L) for i in range(ms.shape.r))
    args += tuple((ms.hs[l, j], ms.hs[l, j]) for l in range(L) for j in range(ms.shape.t))
    return GaussianFrame(ms, variables, covariance, args)


def to_M_space(expr: sp.Expr, ms: S.MatrixSymbols) -> sp.Expr:
    """``f`` and ``g`` as derivatives of ``M`` (``f_l = -dM/dw_l``, ``g_l = dM/dh*_l``: the envelope theorem)."""
    sub = {ms.f[l, i]: -sp.Derivative(ms.M_of, ms.w[l, i]) for l in range(ms.shape.L) for i in range(ms.shape.r)}
    sub.update({ms.g[l, j]: sp.Derivative(ms.M_of, ms.hs[l, j]) for l in range(ms.shape.L) for j in range(ms.shape.t)})
    return expr.xreplace(sub)


def _explicit_factor(monomial: sp.Expr, variables) -> Optional[sp.Symbol]:
    """A frame variable that is an explicit factor of ``monomial`` (not merely an argument of ``M``)."""
    for factor in sp.Mul.make_args(monomial):
        base, exponent = factor.as_base_exp()
        if base in variables and exponent.is_Integer and exponent > 0:
            return base
    return None


def integrate_by_parts(expr: sp.Expr, frame: GaussianFrame) -> sp.Expr:
    """Remove every explicit Gaussian factor: ``E[z_a phi] -> sum_c Cov_ac E[d phi/dz_c]`` (Stein's lemma).

    The result is written in derivatives of ``M`` only.
    """
    variables = set(frame.variables)
    index = {v: i for i, v in enumerate(frame.variables)}
    det, terms = expect_terms(to_M_space(expr, frame.symbols))
    out = det
    pending = list(terms.items())
    while pending:
        r, c = pending.pop()
        z = _explicit_factor(r, variables)
        if z is None:
            out += c * S.Expect(r)
            continue
        phi = sp.expand(r / z)
        a = index[z]
        for zc, cov in zip(frame.variables, frame.covariance.row(a)):
            if cov == 0:
                continue
            for t in sp.Add.make_args(sp.expand(frame.total_derivative(phi, zc))):
                cc, rr = t.as_independent(*_random_symbols(t), S.M, as_Add=False)
                pending.append((rr, c * cov * cc))
    return normal_form(out)

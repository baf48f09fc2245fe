"""The replica free energy and its saddle-point equations, derived by SymPy (SPEC section 2).

Nothing of the final equations is typed in:

* the prior (regulariser) term is the zero-temperature limit of a Gaussian
  integral, computed by ``sympy.integrate`` and ``sympy.limit`` and averaged over
  the Gaussian field with ``sympy.integrate``;
* the channel term is ``alpha * Expect(M(w1, w2, hs1, hs2, V))`` with ``M`` an
  undefined function; its derivatives follow from an explicit chain rule through
  the pre-activations of :func:`derivations.model.preactivations`, followed by the
  envelope theorem (``dM/dw_l = -f_l``, ``dM/dV = -(f1^2 + f2^2)/2``,
  ``dM/dhs_l = g_l``);
* each equation is ``dF/d(parameter) = 0`` solved for the conjugate parameter;
* the ``y`` form of ``thetahat`` is obtained from the ``dl/dh*`` form by Gaussian
  integration by parts (:func:`integrate_by_parts`), and both forms are reduced to
  the same expression in second derivatives of ``M``.

The result is a :class:`Derivation`.  Derivations depend on the spec only through
its regulariser (the channel is kept abstract here; the attention and teacher
enter at code generation), and are memoised in-process.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Dict, Tuple

import sympy as sp

from . import symbols as S
from .cache import cache_dir, package_source_hash, write_atomic
from .model import DerivationError, preactivations, regulariser_penalty
from .spec import ModelSpec

log = logging.getLogger(__name__)

_GAUSS_PDF = lambda z: sp.exp(-z**2 / 2) / sp.sqrt(2 * sp.pi)  # noqa: E731


# ----------------------------------------------------------------------------
# prior / regulariser side
# ----------------------------------------------------------------------------

def prior_term(spec: ModelSpec) -> sp.Expr:
    """Prior part of F, from the per-coordinate Gaussian integral.

    Per coordinate, ``E(Q) = r(Q) + sigma^2 Vhat/2 Q^2 - b Q`` with
    ``b = sigma sqrt(qhat) xi + mhat + sigma sqrt(rho) thetahat Q*`` and ``r`` the
    regulariser penalty (ridge ``lam/2 Q^2``).  The term is
    ``E_{xi,Q*}[ lim_{beta->inf} -(1/beta) log int exp(-beta E(Q)) dQ ]``.
    """
    Q = S.Qw
    pen = sp.expand(regulariser_penalty(spec, Q))
    poly = sp.Poly(pen, Q)
    if poly.degree() != 2:
        raise DerivationError(
            f"regulariser: the prior integral is done in closed form only for a quadratic penalty, got {pen}")
    r2, r1, r0 = (poly.coeff_monomial(Q**k) for k in (2, 1, 0))
    c_expr = 2 * r2 + S.sigma**2 * S.Vhat          # curvature of E(Q)
    c = sp.Symbol("c_", positive=True)            # assumed > 0 (the integral exists)
    b = sp.Symbol("b_", real=True)
    energy = c / 2 * Q**2 - (b - r1) * Q + r0
    Z = sp.simplify(sp.integrate(sp.exp(-S.beta * energy), (Q, -sp.oo, sp.oo)))
    logZ = sp.expand_log(sp.log(Z), force=True)
    per_field = sp.limit(-logZ / S.beta, S.beta, sp.oo)
    if per_field.has(S.beta) or per_field.has(sp.oo) or isinstance(per_field, sp.Limit):
        raise DerivationError(f"regulariser: zero-temperature limit failed: {per_field}")
    field = S.sigma * sp.sqrt(S.qhat) * S.xi0 + S.mhat + S.sigma * sp.sqrt(S.rho) * S.thetahat * S.Qstar
    avg = gaussian_average(gaussian_average(per_field.subs(b, field), S.xi0), S.Qstar)
    out = sp.factor_terms(sp.simplify(avg.subs(c, c_expr)))
    log.debug("prior term: %s", out)
    return out


def gaussian_average(expr: sp.Expr, z: sp.Symbol) -> sp.Expr:
    """``E_z[expr]`` for ``z ~ N(0, 1)`` and ``expr`` polynomial in ``z``.

    Each moment ``E[z^k]`` is computed by ``sympy.integrate`` against the Gaussian
    density (monomial by monomial: much faster than integrating the whole
    expression at once).
    """
    poly = sp.Poly(sp.expand(expr), z)
    return sp.expand(sum(coeff * _gaussian_moment(k) for (k,), coeff in poly.terms()))


def _gaussian_moment(k: int) -> sp.Expr:
    z = sp.Symbol("z_", real=True)
    return sp.integrate(z**k * _GAUSS_PDF(z), (z, -sp.oo, sp.oo))


def bilinear_term() -> sp.Expr:
    """``-1/2 (Vhat q - qhat V) + m mhat + theta thetahat`` (SPEC section 2)."""
    return -(S.Vhat * S.q - S.qhat * S.V) / 2 + S.m * S.mhat + S.theta * S.thetahat


# ----------------------------------------------------------------------------
# expectations: linear normal form
# ----------------------------------------------------------------------------

_S_STD = sp.sqrt(S.rho - S.theta**2 / S.q)
_S_SYM = sp.Symbol("s_", positive=True)


def _simplify(c: sp.Expr) -> sp.Expr:
    """Simplify a coefficient, keeping ``sqrt(rho - theta^2/q)`` (assumed > 0) as one block."""
    if not c.has(S.rho):
        return sp.simplify(c)
    # write rho = s^2 + theta^2/q: every sqrt(rho - theta^2/q) becomes s
    out = sp.simplify(c.subs(S.rho, _S_SYM**2 + S.theta**2 / S.q))
    return out.subs(_S_SYM, _S_STD)


def _is_random(expr) -> bool:
    return bool(expr.free_symbols & set(S.RANDOM)) or expr.has(S.M)


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
        coeff = _simplify(term / e)
        if _is_random(coeff) or coeff.has(S.Expect):
            raise DerivationError(f"non-linear in expectations: {term}")
        for t in sp.Add.make_args(sp.expand(e.args[0])):
            c, r = t.as_independent(*S.RANDOM, S.M, as_Add=False)
            if not _is_random(r):  # E[constant] = constant
                det += coeff * c * r
                continue
            terms[r] = terms.get(r, 0) + coeff * c
    terms = {r: _simplify(c) for r, c in terms.items()}
    return _simplify(det), {r: c for r, c in terms.items() if c != 0}


def canonical_derivatives(expr: sp.Expr) -> sp.Expr:
    """Order mixed partial derivatives of M as its arguments ``(w1, w2, hs1, hs2, V)``.

    Partial derivatives of M commute (M is smooth where the prox is unique);
    SymPy keeps an undefined function's differentiation order as written.
    """
    order = {v: i for i, v in enumerate(S.M_ARGS)}

    def canon(e):
        counts: Dict[sp.Symbol, int] = {}
        for v, k in e.variable_count:
            counts[v] = counts.get(v, 0) + k
        return sp.Derivative(e.expr, *sorted(counts.items(), key=lambda vk: order[vk[0]]))

    return expr.replace(lambda e: isinstance(e, sp.Derivative) and e.expr == S.M_OF, canon)


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
# channel side: chain rule, envelope theorem, integration by parts
# ----------------------------------------------------------------------------

def _arg_maps() -> Dict[sp.Symbol, sp.Expr]:
    """Each argument of ``M(w1, w2, hs1, hs2, V)`` as a function of the order parameters."""
    maps = preactivations()
    maps[S.V] = S.V
    return maps


def chain_rule(param: sp.Symbol) -> sp.Expr:
    """Integrand of ``d/dparam E[M(w, h*; V)]``: ``sum_k dM/du_k du_k/dparam``, ``u = (w1, w2, hs1, hs2, V)``."""
    maps = _arg_maps()
    return sum(sp.Derivative(S.M_OF, u) * sp.diff(maps[u], param) for u in S.M_ARGS)


def envelope_substitution() -> Dict[sp.Expr, sp.Expr]:
    """Envelope theorem at the prox point: first derivatives of M in terms of ``f``, ``g``."""
    sub = {sp.Derivative(S.M_OF, S.V): -(S.f1**2 + S.f2**2) / 2}
    for l in range(2):
        sub[sp.Derivative(S.M_OF, S.W[l])] = -S.F_[l]
        sub[sp.Derivative(S.M_OF, S.HS[l])] = S.G_[l]
    return sub


def to_M_space(expr: sp.Expr) -> sp.Expr:
    """Inverse of the envelope substitution for ``f`` and ``g`` (``f_l = -dM/dw_l``, ``g_l = dM/dhs_l``)."""
    sub = {}
    for l in range(2):
        sub[S.F_[l]] = -sp.Derivative(S.M_OF, S.W[l])
        sub[S.G_[l]] = sp.Derivative(S.M_OF, S.HS[l])
    return expr.xreplace(sub)


def gaussian_derivative(expr: sp.Expr, z: sp.Symbol) -> sp.Expr:
    """Total derivative ``d/dz`` of ``expr``, with ``M``'s arguments depending on ``z``.

    ``d/dxi_l = d/dxi_l|explicit + sqrt(q) d/dw_l + theta/sqrt(q) d/dhs_l`` and
    ``d/dy_l = d/dy_l|explicit + sqrt(rho - theta^2/q) d/dhs_l``.
    """
    maps = _arg_maps()
    out = sp.diff(expr, z)
    for u in S.M_ARGS:
        du = sp.diff(maps[u], z)
        if du != 0:
            out += du * sp.diff(expr, u)
    return out


def integrate_by_parts(expr: sp.Expr) -> sp.Expr:
    """Remove every explicit Gaussian factor: ``E[z phi] -> E[d phi/dz]`` (Stein's lemma).

    The result is written in derivatives of ``M`` only.
    """
    det, terms = expect_terms(to_M_space(expr))
    out = det
    pending = list(terms.items())
    while pending:
        r, c = pending.pop()
        z = next((g for g in S.GAUSSIANS if r.has(g)), None)
        if z is None:
            out += c * S.Expect(r)
            continue
        phi = sp.expand(r / z)
        for t in sp.Add.make_args(sp.expand(gaussian_derivative(phi, z))):
            cc, rr = t.as_independent(*S.RANDOM, S.M, as_Add=False)
            pending.append((rr, c * cc))
    det, terms = expect_terms(out)
    return expect_from_terms(det, terms)


def peel_hstar_derivative(expr: sp.Expr) -> sp.Expr:
    """Inverse Stein step in ``y``: ``E[c d/dhs_l phi] = (c/s) E[y_l phi]``, ``s = sqrt(rho - theta^2/q)``.

    Applied to every term that carries an ``hs_l`` derivative of M; the
    envelope theorem then rewrites the remaining first derivatives.
    """
    s = sp.sqrt(S.rho - S.theta**2 / S.q)
    det, terms = expect_terms(expr)
    out = det
    for r, c in terms.items():
        if not isinstance(r, sp.Derivative):
            raise DerivationError(f"cannot peel an h* derivative off {r}")
        counts = dict(r.variable_count)
        hs = next((v for v in S.HS if counts.get(v, 0) > 0), None)
        if hs is None:
            raise DerivationError(f"no h* derivative in {r}")
        counts[hs] -= 1
        rest = [(v, k) for v, k in counts.items() if k > 0]
        phi = sp.Derivative(S.M_OF, *rest) if rest else S.M_OF
        y = S.Y[S.HS.index(hs)]
        out += c / s * S.Expect(y * phi)
    return out.xreplace(envelope_substitution())


# ----------------------------------------------------------------------------
# the full derivation
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Derivation:
    """The free energy and the saddle-point equations (SPEC section 2), as SymPy expressions.

    Attributes
    ----------
    prior_term : prior part of F from the Gaussian ridge integral.
    prior_free_energy : ``F`` without ``alpha E[M]`` (bilinear + prior terms).
    free_energy : ``prior_free_energy + alpha*Expect(M(w1, w2, hs1, hs2, V))``.
    dF : ``{parameter: dF/d(parameter)}`` for all eight parameters (chain rule +
        envelope theorem on the channel side).
    overlaps : ``{V, q, m, theta: closed form in the conjugates}`` (prior side).
    conjugates : the forms of docs/theory.md, section 2.5, ``{qhat, mhat, Vhat, thetahat}``; ``thetahat`` is the
        ``y`` form, ``Vhat`` contains the symbol ``thetahat``.
    thetahat_dl : ``thetahat`` through ``dl/dh*`` (``g``), straight from ``dF/dtheta = 0``.
    Vhat_dl : ``Vhat = 2 alpha d E[M]/dq`` straight from ``dF/dq = 0`` (no ``thetahat`` symbol).
    Vhat_y : ``Vhat`` with ``thetahat`` replaced by its ``y`` form.
    thetahat_second_order : both ``thetahat`` forms after integration by parts,
        in second derivatives of M (they agree).
    integrands : ``{name: I}`` with ``conjugate = alpha E[I]``, in ``f, g, xi, y``:
        names ``qhat, mhat, thetahat_y, thetahat_dl, Vhat_y, Vhat_dl``.
    """

    prior_term: sp.Expr
    prior_free_energy: sp.Expr
    free_energy: sp.Expr
    dF: Dict[sp.Symbol, sp.Expr]
    overlaps: Dict[sp.Symbol, sp.Expr]
    conjugates: Dict[sp.Symbol, sp.Expr]
    thetahat_dl: sp.Expr
    Vhat_dl: sp.Expr
    Vhat_y: sp.Expr
    thetahat_second_order: Tuple[sp.Expr, sp.Expr]
    integrands: Dict[str, sp.Expr]


def derive(spec: ModelSpec) -> Derivation:
    """Derive F and the eight saddle-point equations for ``spec`` (memoised per regulariser)."""
    spec.require_two_token_rank_one("the symbolic derivation")
    return _derive(spec.regulariser, spec)


_MEMO: Dict[str, Derivation] = {}


def _derive(key: str, spec: ModelSpec) -> Derivation:
    if key not in _MEMO:
        path = cache_dir() / f"derivation_{key}_{package_source_hash()}_sympy{sp.__version__}.json"
        d = _load_derivation(path)
        if d is None:
            d = _derive_uncached(spec)
            write_atomic(path, _dump_derivation(d))
        _MEMO[key] = d
    return _MEMO[key]


def _dump_derivation(d: Derivation) -> str:
    out = {}
    for field in dataclasses.fields(d):
        value = getattr(d, field.name)
        if isinstance(value, dict):
            out[field.name] = {"dict": [[sp.srepr(k) if isinstance(k, sp.Basic) else k, sp.srepr(v)]
                                        for k, v in value.items()]}
        elif isinstance(value, tuple):
            out[field.name] = {"tuple": [sp.srepr(v) for v in value]}
        else:
            out[field.name] = sp.srepr(value)
    return json.dumps(out, indent=1)


def _load_derivation(path) -> "Derivation | None":
    """A derivation from its ``srepr`` dump, or None (missing or unreadable: re-derive)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable cache file %s (%s)", path, exc)
        return None
    try:
        parse = sp.sympify
        fields = {}
        for name, value in raw.items():
            if isinstance(value, dict) and "dict" in value:
                fields[name] = {(parse(k) if k.startswith(("Symbol", "Dummy")) else k): parse(v)
                                for k, v in value["dict"]}
            elif isinstance(value, dict):
                fields[name] = tuple(parse(v) for v in value["tuple"])
            else:
                fields[name] = parse(value)
        d = Derivation(**fields)
    except Exception as exc:  # corrupt or foreign: re-derive
        log.warning("ignoring unreadable cache file %s (%s)", path, exc)
        return None
    log.debug("loaded the derivation from %s", path)
    return d


def _solve_linear(eq: sp.Expr, x: sp.Symbol) -> sp.Expr:
    sol = sp.solve(eq, x)
    if len(sol) != 1:
        raise DerivationError(f"expected one solution of {eq} = 0 for {x}, got {sol}")
    return sol[0]


def _derive_uncached(spec: ModelSpec) -> Derivation:
    log.info("deriving the free energy and saddle-point equations (regulariser %s)", spec.regulariser)
    prior = prior_term(spec)
    F_det = bilinear_term() + prior
    F = F_det + S.alpha * S.Expect(S.M_OF)

    env = envelope_substitution()
    dF = {}
    for p in S.CONJUGATES:
        dF[p] = sp.diff(F_det, p)
    for p in S.OVERLAPS:
        dF[p] = sp.diff(F_det, p) + S.alpha * S.Expect(sp.expand(chain_rule(p)).xreplace(env))

    # prior side: dF/d(conjugate) = 0 solved for the overlap
    pairs_prior = {S.qhat: S.V, S.Vhat: S.q, S.mhat: S.m, S.thetahat: S.theta}
    overlaps = {x: sp.factor(sp.simplify(_solve_linear(dF[p], x))) for p, x in pairs_prior.items()}

    # channel side: dF/d(overlap) = 0 solved for the conjugate
    def conj(p, x):
        det, terms = expect_terms(_solve_linear(dF[p], x))
        return expect_from_terms(det, terms)

    qhat = conj(S.V, S.qhat)
    mhat = conj(S.m, S.mhat)
    thetahat_dl = conj(S.theta, S.thetahat)
    Vhat_dl = conj(S.q, S.Vhat)

    # Vhat = (part in f.xi) + theta/q * thetahat  (d h*/dq = -(theta/2q) d h*/dtheta)
    rest = sp.expand(Vhat_dl - S.theta / S.q * thetahat_dl)
    det, terms = expect_terms(rest)
    if any(r.has(*S.G_) for r in terms):
        raise DerivationError(f"Vhat: the h* part is not proportional to thetahat: {rest}")
    Vhat_spec = expect_from_terms(det, terms) + S.theta / S.q * S.thetahat

    # thetahat, y form: integrate the dl form by parts, then peel one h* derivative back to y
    second_dl = integrate_by_parts(thetahat_dl)
    thetahat_y = peel_hstar_derivative(second_dl)
    det, terms = expect_terms(thetahat_y)
    thetahat_y = expect_from_terms(det, terms)
    second_y = integrate_by_parts(thetahat_y)
    if not expect_equal(second_dl, second_y):
        raise DerivationError("thetahat: the y form and the dl form disagree after integration by parts")
    Vhat_y = Vhat_spec.xreplace({S.thetahat: thetahat_y})

    conjugates = {S.qhat: qhat, S.mhat: mhat, S.Vhat: Vhat_spec, S.thetahat: thetahat_y}
    integrands = {
        "qhat": integrand_of(qhat),
        "mhat": integrand_of(mhat),
        "thetahat_y": integrand_of(thetahat_y),
        "thetahat_dl": integrand_of(thetahat_dl),
        "Vhat_y": integrand_of(Vhat_y),
        "Vhat_dl": integrand_of(Vhat_dl),
    }
    return Derivation(prior_term=prior, prior_free_energy=F_det, free_energy=F, dF=dF,
                      overlaps=overlaps, conjugates=conjugates, thetahat_dl=thetahat_dl,
                      Vhat_dl=Vhat_dl, Vhat_y=Vhat_y, thetahat_second_order=(second_dl, second_y),
                      integrands=integrands)

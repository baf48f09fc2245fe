"""The replica free energy and its saddle-point equations for any ``(L, r, t, k)``, derived by SymPy
(docs/theory.md, sections 4.2-4.6).

Nothing of the final equations is typed in:

* the prior (regulariser) term is the zero-temperature limit of the Gaussian integral over one
  row of ``Q``: SymPy reads the curvature ``C`` and the field of the quadratic row energy, solves
  its stationarity, and averages the minimum over the Gaussian fields through their second
  moments (:func:`prior_term`); ``K = C^{-1}`` stays a matrix of symbols, differentiated by
  ``dK = -K dC K``;
* the channel term is ``alpha * Expect(M(w, hs, V))`` with ``M`` an undefined function of the
  per-token arguments ``w_l = (P m)_l + zeta_l`` and ``h*_l``, and of ``V``. ``m`` and ``V`` are
  differentiated by the chain rule; ``q`` and ``theta``, entries of the covariance ``Sigma`` of
  ``x_l = (zeta_l, h*_l)``, by Price's theorem (:func:`price_derivative`), which gives Hessian
  averages of ``M``;
* the envelope theorem (:func:`envelope_substitution`, itself derived from the prox objective)
  writes first derivatives of ``M`` as ``-f``, ``g`` and ``-1/2 sum_l f_l^T dV f_l``;
* Stein's lemma turns Hessian averages into first-derivative (Stein) forms
  (:func:`stein_first_derivatives`) with ``Sigma^{-1}`` as a matrix of symbols ``Sigmainv``; which
  derivative is kept decides the form: ``f`` (the ``G`` forms) or ``g`` (the ``dl/dh*`` form of
  ``thetahat``);
* each channel equation is ``dF/d(overlap) = 0`` solved for the conjugate, each prior equation
  ``dF/d(conjugate) = 0`` solved for the overlap.

Expectations are compared in a linear normal form (:func:`expect_terms`). The result is a
:class:`MatrixDerivation`, memoised in-process and cached on disk per shape, positions and
regulariser (the attention and the teacher enter only at code generation).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from typing import Dict, Tuple

import sympy as sp

from . import packing
from . import symbols as S
from .cache import cache_dir, dump_dataclass, load_dataclass, package_source_hash, write_atomic
from .expectations import expect_terms, normal_form, x_frame
from .model import DerivationError, inverse, regulariser_penalty
from .spec import ModelSpec

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------
# the envelope theorem, Price's theorem and the Stein forms in the x frame
# ----------------------------------------------------------------------------

def envelope_substitution(spec: ModelSpec) -> Dict[sp.Expr, sp.Expr]:
    """First derivatives of ``M`` at the prox, derived from the prox objective (envelope theorem).

    ``M = min_h 1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + l(h; h*)``: each derivative of ``M`` in
    ``w``, ``V`` is that of the coupling at fixed ``h``, rewritten with ``h_l = w_l + V f_l``; each
    derivative in ``h*`` is ``dl/dh*`` at the prox, ``g``.
    """
    return dict(_envelope_substitution(tuple(spec.shape)))


@functools.lru_cache(maxsize=None)
def _envelope_substitution(shape) -> Dict[sp.Expr, sp.Expr]:
    ms = S.matrix_symbols(shape)
    L, r, t, _ = ms.shape
    Vinv = inverse(ms.V)
    coupling = sum(((ms.h[l, :] - ms.w[l, :]) * Vinv * (ms.h[l, :] - ms.w[l, :]).T)[0, 0] for l in range(L)) / 2
    at_prox = {ms.h[l, i]: ms.w[l, i] + (ms.V * ms.f[l, :].T)[i, 0] for l in range(L) for i in range(r)}
    sub = {}
    for u in S.components(ms.w) + ms.packed("V"):
        sub[sp.Derivative(ms.M_of, u)] = sp.factor(sp.cancel(sp.diff(coupling, u).xreplace(at_prox)))
    for l in range(L):
        for j in range(t):
            sub[sp.Derivative(ms.M_of, ms.hs[l, j])] = ms.g[l, j]
    return sub


def _coordinate(ms: S.MatrixSymbols, u: sp.Symbol) -> Tuple[int, int]:
    """``(token, index in x_l)`` of the argument ``u`` of ``M`` (``w_l_i`` -> ``zeta_l_i``)."""
    L, r, t, _ = ms.shape
    for l in range(L):
        for i in range(r):
            if ms.w[l, i] == u:
                return l, i
        for j in range(t):
            if ms.hs[l, j] == u:
                return l, r + j
    raise DerivationError(f"{u} is not a Gaussian argument of M")


def _argument(ms: S.MatrixSymbols, l: int, a: int) -> sp.Symbol:
    """The argument of ``M`` that moves with coordinate ``a`` of ``x_l``."""
    r = ms.shape.r
    return ms.w[l, a] if a < r else ms.hs[l, a - r]


def price_derivative(spec: ModelSpec, p: sp.Symbol) -> sp.Expr:
    """``d E[M]/dp`` for an entry ``p`` of ``Sigma`` (Price): ``1/2 sum_l sum_ab dSigma_ab/dp E[d^2 M/dx_la dx_lb]``.

    ``p`` is a symbol of ``q`` or ``theta``; a symmetric pair of entries shares one symbol, so an
    off-diagonal entry counts twice.
    """
    ms = S.matrix_symbols(spec.shape)
    dSigma = sp.diff(ms.Sigma, p)
    n = dSigma.rows
    out = sp.S.Zero
    for l in range(ms.shape.L):
        for a in range(n):
            for b in range(n):
                if dSigma[a, b] != 0:
                    out += dSigma[a, b] / 2 * sp.Derivative(ms.M_of, _argument(ms, l, a), _argument(ms, l, b))
    return out


def chain_derivative(spec: ModelSpec, p: sp.Symbol) -> sp.Expr:
    """``d M/dp`` for ``p`` in ``m`` or ``V``, which enter only through the arguments of ``M``."""
    ms = S.matrix_symbols(spec.shape)
    frame = x_frame(spec)
    out = sum(sp.diff(of, p) * sp.Derivative(ms.M_of, u) for u, of in frame.arguments)
    if p in ms.packed("V"):
        out += sp.Derivative(ms.M_of, p)
    return out


#: which derivative Stein's lemma keeps in a mixed ``(zeta, h*)`` Hessian entry: ``"f"`` keeps
#: ``d/dw`` (giving ``f``, the ``G`` forms), ``"g"`` keeps ``d/dh*`` (giving ``g``, the dl/dh* form)
STEIN_FORMS = ("f", "g")


def stein_first_derivatives(expr: sp.Expr, spec: ModelSpec, keep: str = "f") -> sp.Expr:
    """Hessian averages of ``M`` as first-derivative forms (Stein's lemma, docs/theory.md, section 4.6).

    ``E[d^2 M/dx_la dx_lb] = sum_c Sigmainv_ac E[x_lc dM/dx_lb]`` peels coordinate ``a``, keeps ``b``.
    Two coordinates of the same kind (both ``zeta`` or both ``h*``) are peeled half each way, so
    that ``Vhat`` comes out symmetrised; in a mixed pair ``keep`` chooses the kept derivative. The
    kept first derivative is then written by the envelope theorem.
    """
    if keep not in STEIN_FORMS:
        raise ValueError(f"keep: choose from {STEIN_FORMS}, got {keep!r}")
    ms = S.matrix_symbols(spec.shape)
    r = ms.shape.r
    env = envelope_substitution(spec)
    det, terms = expect_terms(expr)
    out = det

    def peel(l, a, b):
        kept = env[sp.Derivative(ms.M_of, _argument(ms, l, b))]
        return sum(ms.Sigmainv[a, c] * ms.x(l)[c] for c in range(ms.Sigmainv.cols)) * kept

    for mono, c in terms.items():
        if not (isinstance(mono, sp.Derivative) and sum(k for _, k in mono.variable_count) == 2):
            out += c * S.Expect(mono)
            continue
        (u, v) = [x for x, k in mono.variable_count for _ in range(k)]
        (l, a), (l2, b) = _coordinate(ms, u), _coordinate(ms, v)
        if l != l2:
            raise DerivationError(f"a Hessian entry across tokens: {mono}")
        if (a < r) == (b < r):
            integrand = (peel(l, a, b) + peel(l, b, a)) / 2
        else:
            keep_b = (b < r) == (keep == "f")  # keep the zeta coordinate for "f", the h* one for "g"
            integrand = peel(l, a, b) if keep_b else peel(l, b, a)
        out += c * S.Expect(sp.expand(integrand))
    return normal_form(out)


# ----------------------------------------------------------------------------
# prior / regulariser side
# ----------------------------------------------------------------------------

def gaussian_average_quadratic(expr: sp.Expr, b, covariance: sp.Matrix) -> sp.Expr:
    """``E_b[expr]`` for a zero-mean Gaussian vector ``b`` with ``covariance`` and ``expr`` of degree <= 2 in ``b``.

    Read off the polynomial in ``b``: odd moments vanish, ``E[b_i b_j] = covariance_ij``."""
    poly = sp.Poly(sp.expand(expr), *b)
    if poly.total_degree() > 2:
        raise DerivationError(f"regulariser: the prior average needs a quadratic form in the field, got {expr}")
    out = sp.S.Zero
    for powers, coeff in poly.terms():
        idx = [i for i, k in enumerate(powers) for _ in range(k)]
        if len(idx) == 0:
            out += coeff
        elif len(idx) == 2:
            out += coeff * covariance[idx[0], idx[1]]
    return sp.expand(out)


def prior_term(spec: ModelSpec) -> Tuple[sp.Expr, sp.Matrix]:
    """The prior part of ``F`` in terms of ``K``, and the curvature ``C`` with ``K = C^{-1}`` (docs/theory.md, section 4.4).

    One row ``Q_i`` of ``Q`` has the energy ``sum_a pen(Q_ia) + (sigma^2/2) Q_i^T Vhat Q_i - b^T Q_i``
    (``pen`` the per-entry regulariser penalty). SymPy reads its curvature ``C`` and linear part,
    solves the stationarity condition, checks that the minimum is the completed square
    ``c_0 - 1/2 g^T C^{-1} g``, and averages it over the field ``b``: a Gaussian of covariance
    ``sigma^2 qhat``, the positional field ``mhat^T e`` (``E[e e^T] = I_k`` over rows) and the teacher
    field ``sigma sqrt(rho) thetahat Q*_i`` (``Q*_i ~ N(0, I_t)``); only second moments enter.
    """
    ms = S.matrix_symbols(spec.shape)
    L, r, t, k = ms.shape
    Q = sp.Matrix(sp.symbols(f"Qw_1:{r + 1}", real=True)) if r > 1 else sp.Matrix([S.Qw])
    b = sp.Matrix(sp.symbols(f"b_1:{r + 1}", real=True))
    energy = sp.expand(sum(regulariser_penalty(spec, Q[a]) for a in range(r))
                       + S.sigma**2 / 2 * (Q.T * ms.Vhat * Q)[0, 0] - (b.T * Q)[0, 0])
    # is_polynomial first: Poly of an Abs or exp of a weight raises instead of answering
    if not energy.is_polynomial(*Q) or sp.Poly(energy, *Q).total_degree() != 2:
        raise DerivationError(
            f"regulariser: the prior integral is done in closed form only for a quadratic penalty, got {energy}")
    C = sp.hessian(energy, list(Q))
    at0 = {x: 0 for x in Q}
    g0 = sp.Matrix([sp.diff(energy, x).xreplace(at0) for x in Q])
    c0 = energy.xreplace(at0)
    # zero temperature: -(1/beta) log int exp(-beta E) -> min E, at the stationary point
    (solution,) = sp.linsolve([sp.diff(energy, x) for x in Q], *Q)
    minimum = energy.xreplace(dict(zip(Q, solution)))
    completed = c0 - (g0.T * inverse(C) * g0)[0, 0] / 2
    if sp.simplify(sp.cancel(minimum - completed)) != 0:
        raise DerivationError(f"regulariser: the minimum {minimum} is not the completed square {completed}")
    per_field = c0 - (g0.T * ms.K * g0)[0, 0] / 2
    rho_half = sp.sqrt(S.rho)
    fields = ((S.sigma * sp.eye(r), ms.qhat), (ms.mhat.T, sp.eye(k)), (S.sigma * rho_half * ms.thetahat, sp.eye(t)))
    covariance = sp.zeros(r, r)
    for loading, cov in fields:
        covariance += loading * cov * loading.T
    out = gaussian_average_quadratic(per_field, list(b), covariance.applyfunc(sp.expand))
    log.debug("prior term: %s", out)
    return out, C


def bilinear_term(ms: S.MatrixSymbols) -> sp.Expr:
    """``-1/2 tr(Vhat q) + 1/2 tr(qhat V) + tr(mhat^T m) + tr(thetahat^T theta)`` (docs/theory.md, section 4.4)."""
    return sp.expand(-(ms.Vhat * ms.q).trace() / 2 + (ms.qhat * ms.V).trace() / 2 + (ms.mhat.T * ms.m).trace()
                     + (ms.thetahat.T * ms.theta).trace())


def _prior_derivative(expr: sp.Expr, p: sp.Symbol, ms: S.MatrixSymbols, C: sp.Matrix) -> sp.Expr:
    """``d expr/dp`` with ``K = C^{-1}`` depending on ``p``: ``dK = -K dC K``."""
    out = sp.diff(expr, p)
    dC = sp.diff(C, p)
    if dC != sp.zeros(*C.shape):
        dK = -ms.K * dC * ms.K
        for (i, j), Kij in zip(packing.matrix_index(*ms.K.shape, True), S.components(ms.K, True)):
            out += sp.diff(expr, Kij) * dK[i, j]
    return sp.expand(out)


# ----------------------------------------------------------------------------
# the full derivation
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MatrixDerivation:
    """The free energy and the saddle-point equations of the general model (docs/theory.md, sections 4.4-4.6).

    Keys are the symbols of :func:`derivations.symbols.matrix_symbols` (one per independent
    component). Expectations are over ``x_l = (zeta_l, h*_l) ~ N(0, Sigma)``, ``Sigmainv`` stands for
    ``Sigma^{-1}`` and ``K`` for ``curvature^{-1} = (k I + sigma^2 Vhat)^{-1}`` (``k = lam`` for the ridge,
    ``2 c(lam)`` for a typed penalty ``c(lam) w**2``).

    Attributes
    ----------
    shape, positions : ``(L, r, t, k)`` and ``P``.
    curvature : ``C = k I + sigma^2 Vhat``, read off the row energy of the prior integral.
    prior_term : the prior part of ``F``, in ``K``.
    prior_free_energy : ``F`` without ``alpha E[M]`` (bilinear + prior terms), in ``K``.
    free_energy : ``prior_free_energy + alpha*Expect(M(w, hs, V))``.
    dF : ``{component: dF/d(component)}`` for every order parameter; for ``q`` and ``theta`` the Price
        form (Hessian averages of ``M``), for ``m``, ``V`` the envelope theorem, for the conjugates
        the prior side (in ``K``).
    overlaps : prior side, ``{V, q, m, theta components: closed form in K and the conjugates}``.
    conjugates : channel side, Stein ``f`` forms: ``qhat``, ``mhat``, ``Vhat = -G[:, :r]``
        (symmetrised), ``thetahat = G[:, r:]``.
    thetahat_dl : ``thetahat`` in the ``g`` (dl/dh*) form.
    Vhat_thetahat : ``Vhat = -(alpha sum_l E[f_l zeta_l^T] - thetahat theta^T) q^{-1}`` (symmetrised),
        with the symbols ``thetahat``; ``G Sigma = alpha sum_l E[f_l x_l^T]`` eliminates ``Sigma^{-1}``.
    Vhat_dl : ``Vhat_thetahat`` with ``thetahat`` in its ``g`` form.
    second_order : ``{Vhat, thetahat components: Price form}`` (Hessian averages of ``M``).
    """

    shape: Tuple[int, int, int, int]
    positions: Tuple[Tuple[float, ...], ...]
    curvature: sp.Matrix
    prior_term: sp.Expr
    prior_free_energy: sp.Expr
    free_energy: sp.Expr
    dF: Dict[sp.Symbol, sp.Expr]
    overlaps: Dict[sp.Symbol, sp.Expr]
    conjugates: Dict[sp.Symbol, sp.Expr]
    thetahat_dl: Dict[sp.Symbol, sp.Expr]
    Vhat_thetahat: Dict[sp.Symbol, sp.Expr]
    Vhat_dl: Dict[sp.Symbol, sp.Expr]
    second_order: Dict[sp.Symbol, sp.Expr]

    @property
    def symbols(self) -> S.MatrixSymbols:
        return S.matrix_symbols(self.shape)

    def explicit(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with ``K`` and ``Sigmainv`` replaced by the inverses they stand for."""
        ms = self.symbols
        sub = dict(zip(S.components(ms.K, True), S.components(inverse(self.curvature), True)))
        sub.update(zip(S.components(ms.Sigmainv, True), S.components(inverse(ms.Sigma), True)))
        return expr.xreplace(sub)


def derive(spec: ModelSpec) -> MatrixDerivation:
    """Derive ``F`` and every saddle-point equation for ``spec`` (memoised per shape, positions and regulariser)."""
    key = json.dumps({"shape": list(spec.shape), "positions": [list(p) for p in spec.positions],
                      "regulariser": spec.regulariser}, sort_keys=True)
    if key not in _MEMO:
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        path = cache_dir() / (f"derivation_L{spec.L}r{spec.rank}t{spec.teacher_rank}k{spec.k}_"
                              f"{spec.regulariser_label()}_{digest}_{package_source_hash()}_sympy{sp.__version__}.json")
        d = load_dataclass(MatrixDerivation, path)
        if d is None:
            d = _derive_uncached(spec)
            write_atomic(path, dump_dataclass(d))
        _MEMO[key] = d
    return _MEMO[key]


_MEMO: Dict[str, MatrixDerivation] = {}


def _solve_linear(eq: sp.Expr, x: sp.Symbol) -> sp.Expr:
    sol = sp.solve(eq, x)
    if len(sol) != 1:
        raise DerivationError(f"expected one solution of {eq} = 0 for {x}, got {sol}")
    return sol[0]


def _derive_uncached(spec: ModelSpec) -> MatrixDerivation:
    log.info("deriving the free energy and saddle-point equations for (L, r, t, k) = %s, regulariser %s",
             spec.shape, spec.regulariser)
    ms = S.matrix_symbols(spec.shape)
    prior, C = prior_term(spec)
    F_det = bilinear_term(ms) + prior
    F = F_det + S.alpha * S.Expect(ms.M_of)
    env = envelope_substitution(spec)

    dF = {}
    for name in ("qhat", "mhat", "Vhat", "thetahat"):
        for p in ms.packed(name):
            dF[p] = _prior_derivative(F_det, p, ms, C)
    for name in ("m", "V"):
        for p in ms.packed(name):
            dF[p] = normal_form(sp.diff(F_det, p)
                                + S.alpha * S.Expect(sp.expand(chain_derivative(spec, p)).xreplace(env)))
    for name in ("q", "theta"):
        for p in ms.packed(name):
            dF[p] = normal_form(sp.diff(F_det, p) + S.alpha * S.Expect(price_derivative(spec, p)))

    # prior side: dF/d(conjugate) = 0 solved for the overlap
    pairs = (("qhat", "V"), ("Vhat", "q"), ("mhat", "m"), ("thetahat", "theta"))
    overlaps = {}
    for hat, x in pairs:
        for p, v in zip(ms.packed(hat), ms.packed(x)):
            overlaps[v] = sp.factor(_solve_linear(dF[p], v))

    # channel side: dF/d(overlap) = 0 solved for the conjugate
    def solved(p, hat):
        return normal_form(_solve_linear(dF[p], hat))

    conjugates, thetahat_dl, second = {}, {}, {}
    for x, hat in (("V", "qhat"), ("m", "mhat")):
        for p, c in zip(ms.packed(x), ms.packed(hat)):
            conjugates[c] = solved(p, c)
    for x, hat in (("q", "Vhat"), ("theta", "thetahat")):
        for p, c in zip(ms.packed(x), ms.packed(hat)):
            second[c] = solved(p, c)
            conjugates[c] = stein_first_derivatives(second[c], spec, keep="f")
            if hat == "thetahat":
                thetahat_dl[c] = stein_first_derivatives(second[c], spec, keep="g")

    Vhat_thetahat = _vhat_through_thetahat(spec)
    Vhat_dl = {c: normal_form(e.xreplace(thetahat_dl)) for c, e in Vhat_thetahat.items()}
    return MatrixDerivation(shape=tuple(spec.shape), positions=tuple(tuple(p) for p in spec.positions),
                            curvature=C, prior_term=prior, prior_free_energy=F_det, free_energy=F, dF=dF,
                            overlaps=overlaps, conjugates=conjugates, thetahat_dl=thetahat_dl,
                            Vhat_thetahat=Vhat_thetahat, Vhat_dl=Vhat_dl, second_order=second)


def _vhat_through_thetahat(spec: ModelSpec) -> Dict[sp.Symbol, sp.Expr]:
    """``Vhat`` with ``Sigma^{-1}`` eliminated in favour of ``thetahat`` (docs/theory.md, section 4.6).

    ``G = alpha sum_l E[f_l x_l^T] Sigma^{-1}`` means ``G Sigma = alpha sum_l E[f_l x_l^T]``; its first
    ``r`` columns read ``G[:, :r] q + G[:, r:] theta^T = alpha sum_l E[f_l zeta_l^T]``. Solved for
    ``G[:, :r]`` with ``G[:, r:] = thetahat``, and ``Vhat = -G[:, :r]`` symmetrised.
    """
    ms = S.matrix_symbols(spec.shape)
    L, r, t, _ = ms.shape
    unknown = sp.Matrix(r, r, lambda i, j: sp.Dummy(f"G{i}{j}"))
    Fzeta = sp.Matrix(r, r, lambda i, j: S.alpha * S.Expect(sum(ms.f[l, i] * ms.zeta[l, j] for l in range(L))))
    equations = unknown * ms.q + ms.thetahat * ms.theta.T - Fzeta
    (solution,) = sp.linsolve(list(equations), list(unknown))
    G = sp.Matrix(r, r, list(solution))
    Vhat = -(G + G.T) / 2
    return {c: normal_form(Vhat[i, j]) for c, (i, j) in zip(ms.packed("Vhat"), packing.matrix_index(r, r, True))}

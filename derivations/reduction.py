"""The two-token rank-one model as the general derivation seen at one size (docs/theory.md, section 4.8).

At ``(L, r, t, k) = (2, 1, 1, 1)`` with ``P = [[1], [-1]]`` the symbols of the general derivation
(:func:`derivations.replica.derive`) are those of docs/theory.md, section 2 (``q, m, V, theta``,
``w1, w2, hs1, hs2``, ``f1, f2, g1, g2``). The change of Gaussian variables

    zeta_l = sqrt(q) xi_l,     h*_l = theta/sqrt(q) xi_l + sqrt(rho - theta^2/q) y_l,

with ``xi, y`` independent standard normals, writes its Stein forms in the variables of section 2.2:
the ``G`` form of ``thetahat`` becomes the ``y`` form of section 2.5, its ``g`` form the ``dl/dh*``
form of section 2.6, and ``Vhat`` the form of section 2.5 with the symbol ``thetahat``. Nothing is
derived a second time here: :func:`derive_lines` only substitutes, and checks that Stein's lemma in
``xi, y`` (:func:`line_frame`) takes both forms of ``thetahat`` and ``Vhat`` back to the general
Hessian (Price) forms. The line quadrature of numerics integrates these forms.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Dict, Tuple

import sympy as sp

from . import symbols as S
from .cache import cache_dir, package_source_hash, write_atomic
from .model import DerivationError, positional_mean
from .cache import dump_dataclass, load_dataclass
from .expectations import GaussianFrame, expect_equal, integrand_of, integrate_by_parts, normal_form
from .replica import derive
from .spec import ModelSpec

log = logging.getLogger(__name__)

#: ``sqrt(rho - theta^2/q)``, the standard deviation of ``h*_l`` given ``zeta_l``
S_STD = sp.sqrt(S.rho - S.theta**2 / S.q)


def change_of_variables() -> Dict[sp.Symbol, sp.Expr]:
    """``zeta_l`` and ``h*_l`` in the standard normals ``xi, y`` (docs/theory.md, sections 2.2 and 4.8)."""
    out = {}
    for l in range(2):
        out[S.matrix_symbols((2, 1, 1, 1)).zeta[l, 0]] = sp.sqrt(S.q) * S.XI[l]
        out[S.HS[l]] = S.theta / sp.sqrt(S.q) * S.XI[l] + S_STD * S.Y[l]
    return out


def preactivations(spec: ModelSpec = None) -> Dict[sp.Symbol, sp.Expr]:
    """``w_l = (P m)_l + sqrt(q) xi_l`` and ``h*_l`` in ``xi, y`` (docs/theory.md, section 2.2).

    Position signs follow ``mu_2 = -mu_1``: ``w_1 = m + sqrt(q) xi_1``, ``w_2 = -m + sqrt(q) xi_2``."""
    spec = ModelSpec() if spec is None else spec
    spec.require_two_token_rank_one("the variables xi, y")
    Pm = positional_mean(spec)
    cov = change_of_variables()
    ms = S.matrix_symbols(spec.shape)
    out = {}
    for l in range(2):
        out[S.W[l]] = Pm[l, 0] + cov[ms.zeta[l, 0]]
        out[S.HS[l]] = cov[S.HS[l]]
    return out


def line_frame(spec: ModelSpec = None) -> GaussianFrame:
    """The standard normals ``xi1, xi2, y1, y2`` and the arguments of ``M`` in them (Stein's lemma in section 2's variables)."""
    spec = ModelSpec() if spec is None else spec
    pre = preactivations(spec)
    return GaussianFrame(S.matrix_symbols(spec.shape), S.GAUSSIANS, sp.eye(4),
                         tuple((u, pre[u]) for u in S.W + S.HS))


def in_line_variables(expr: sp.Expr) -> sp.Expr:
    """``expr`` with the explicit factors ``zeta_l``, ``h*_l`` inside each ``Expect`` written in ``xi, y``.

    The arguments of ``M`` keep their names (``w1, hs1``, ...): they are the pre-activations of
    :func:`preactivations`."""
    mapping = change_of_variables()

    def inside(arg):
        masks = {d: sp.Dummy() for d in arg.atoms(sp.Derivative)}
        masked = arg.xreplace(masks)
        more = {a: sp.Dummy() for a in masked.atoms(sp.Function) if a.func == S.M}
        masked = masked.xreplace(more).xreplace(mapping)
        back = {v: k for k, v in {**masks, **more}.items()}
        return masked.xreplace(back)

    return expr.replace(lambda e: getattr(e, "func", None) == S.Expect, lambda e: S.Expect(inside(e.args[0])))


@dataclasses.dataclass(frozen=True)
class Derivation:
    """The free energy and the eight saddle-point equations of the two-token rank-one model in the
    variables ``xi, y`` of docs/theory.md, section 2 (SymPy expressions).

    Attributes
    ----------
    prior_term : prior part of F (the general one with ``K = 1/(k + sigma^2 Vhat)``, ``k`` the ridge strength:
        ``lam``, or ``2 c(lam)`` for a typed ``c(lam) w**2``).
    prior_free_energy : ``F`` without ``alpha E[M]`` (bilinear + prior terms).
    free_energy : ``prior_free_energy + alpha*Expect(M(w1, w2, hs1, hs2, V))``.
    dF : ``{parameter: dF/d(parameter)}`` for all eight parameters; for ``q`` and ``theta`` the
        Price form (Hessian averages of ``M``), for ``m`` and ``V`` the envelope theorem.
    overlaps : ``{V, q, m, theta: closed form in the conjugates}`` (prior side).
    conjugates : the forms of section 2.5 ``{qhat, mhat, Vhat, thetahat}``; ``thetahat`` is the
        ``y`` form, ``Vhat`` contains the symbol ``thetahat``.
    thetahat_dl : ``thetahat`` through ``dl/dh*`` (``g``), section 2.6.
    Vhat_dl : ``Vhat`` with ``thetahat`` in its ``dl/dh*`` form.
    Vhat_y : ``Vhat`` with ``thetahat`` in its ``y`` form.
    thetahat_second_order : both ``thetahat`` forms after integration by parts in ``xi, y``,
        in second derivatives of M (they agree, and equal the general Price form).
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


_MEMO: Dict[str, Derivation] = {}


def derive_lines(spec: ModelSpec) -> Derivation:
    """The general derivation for the two-token rank-one ``spec``, in ``xi, y`` (memoised, cached on disk)."""
    spec.require_two_token_rank_one("the equations in the variables xi, y")
    key = json.dumps({"positions": [list(p) for p in spec.positions], "regulariser": spec.regulariser},
                     sort_keys=True)
    if key not in _MEMO:
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        path = cache_dir() / (f"derivation_lines_{spec.regulariser_label()}_{digest}_{package_source_hash()}"
                              f"_sympy{sp.__version__}.json")
        d = load_dataclass(Derivation, path)
        if d is None:
            d = _derive_lines_uncached(spec)
            write_atomic(path, dump_dataclass(d))
        _MEMO[key] = d
    return _MEMO[key]


def _derive_lines_uncached(spec: ModelSpec) -> Derivation:
    log.info("writing the general derivation at (2, 1, 1, 1) in the variables xi, y")
    md = derive(spec)

    def lines(expr):
        return normal_form(in_line_variables(md.explicit(expr)))

    prior = sp.factor_terms(sp.simplify(md.explicit(md.prior_term)))
    F_det = sp.expand(md.explicit(md.prior_free_energy) - md.explicit(md.prior_term)) + prior
    F = F_det + S.alpha * S.Expect(S.M_OF)
    dF = {p: md.explicit(v) for p, v in md.dF.items()}
    overlaps = {x: sp.factor(sp.simplify(md.explicit(v))) for x, v in md.overlaps.items()}

    thetahat_y = lines(md.conjugates[S.thetahat])
    thetahat_dl = lines(md.thetahat_dl[S.thetahat])
    Vhat_thetahat = lines(md.Vhat_thetahat[S.Vhat])
    Vhat_y = normal_form(Vhat_thetahat.xreplace({S.thetahat: thetahat_y}))
    Vhat_dl = normal_form(Vhat_thetahat.xreplace({S.thetahat: thetahat_dl}))

    frame = line_frame(spec)
    second_dl = integrate_by_parts(thetahat_dl, frame)
    second_y = integrate_by_parts(thetahat_y, frame)
    for name, form, general in (("thetahat (dl/dh* form)", second_dl, S.thetahat),
                                ("thetahat (y form)", second_y, S.thetahat),
                                ("Vhat (dl/dh* form)", integrate_by_parts(Vhat_dl, frame), S.Vhat),
                                ("Vhat (y form)", integrate_by_parts(Vhat_y, frame), S.Vhat)):
        if not expect_equal(form, md.second_order[general]):
            raise DerivationError(f"{name}: integration by parts in xi, y does not give the Price form")
    conjugates = {S.qhat: normal_form(md.conjugates[S.qhat]), S.mhat: normal_form(md.conjugates[S.mhat]),
                  S.Vhat: Vhat_thetahat, S.thetahat: thetahat_y}
    for form in (*conjugates.values(), thetahat_dl, Vhat_y, Vhat_dl):
        if any(s.name.startswith("zeta") for s in form.free_symbols):
            raise DerivationError(f"the change of variables left a zeta in {form}")
    integrands = {
        "qhat": integrand_of(conjugates[S.qhat]),
        "mhat": integrand_of(conjugates[S.mhat]),
        "thetahat_y": integrand_of(thetahat_y),
        "thetahat_dl": integrand_of(thetahat_dl),
        "Vhat_y": integrand_of(Vhat_y),
        "Vhat_dl": integrand_of(Vhat_dl),
    }
    return Derivation(prior_term=prior, prior_free_energy=F_det, free_energy=F, dF=dF, overlaps=overlaps,
                      conjugates=conjugates, thetahat_dl=thetahat_dl, Vhat_dl=Vhat_dl, Vhat_y=Vhat_y,
                      thetahat_second_order=(second_dl, second_y), integrands=integrands)

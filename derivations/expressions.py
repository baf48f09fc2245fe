"""What is generated for a model: every function's arguments, expression(s) and description, built from
the derivation (:mod:`derivations.replica`, :mod:`derivations.reduction`) and the model's
expressions (:mod:`derivations.model`), before any code is printed (:mod:`derivations.codegen`).

Every model, of any shape ``(L, r, t, k)``, gets the functions of :data:`MATRIX_FUNCTION_NAMES`; the
two-token rank-one model also gets those of :data:`LINE_FUNCTION_NAMES`, in the standard normals
``xi, y`` of docs/theory.md, section 2.2. The prox's derivatives are taken through shared logistic
values (:func:`shared_logistics`, :func:`prox_derivatives`), which CSE then computes once."""
from __future__ import annotations

import functools
import json
from typing import Dict, Tuple

from . import packing
from .spec import ModelSpec


#: names and order of :meth:`GeneratedModel.channel_integrands` outputs (two-token rank-one model)
CHANNEL_NAMES = ("qhat", "mhat", "thetahat_y", "thetahat_dl", "Vhat_y", "Vhat_dl", "envelope")

#: the outputs of ``conjugates_from_moments``, each a packed matrix: the Stein ``f`` forms of
#: ``qhat, mhat, Vhat, thetahat`` (docs/theory.md, section 4.6), then the ``g`` (dl/dh*) form of
#: ``thetahat`` and ``Vhat`` with it
CONJUGATE_FORMS = ("qhat", "mhat", "Vhat", "thetahat", "thetahat_dl", "Vhat_dl")

#: functions generated for every shape
MATRIX_FUNCTION_NAMES = ("loss", "dloss_dhstar", "teacher", "attention", "prox_objective", "prox_grad", "prox_hess",
                         "prox_newton", "prox_objective_of_T", "prox_newton_of_T", "positional_mean",
                         "channel_moments", "conjugates_from_moments", "test_error_integrand_x", "prior_updates",
                         "prior_free_energy", "free_energy")
#: functions in the variables ``xi, y`` of the two-token rank-one model (the line quadrature's)
LINE_FUNCTION_NAMES = ("preactivations", "channel_integrands", "test_error_integrand") + tuple(
    "integrand_" + n for n in CHANNEL_NAMES)

_CHANNEL_DOC = {
    "qhat": "f1**2 + f2**2  (qhat = alpha E[.])",
    "mhat": "f1 - f2  (mhat = alpha E[.])",
    "thetahat_y": "(f1 y1 + f2 y2)/sqrt(rho - theta**2/q)  (thetahat = alpha E[.], docs/theory.md, section 2.5)",
    "thetahat_dl": "-(g1 dhs1/dtheta + g2 dhs2/dtheta), g_l = dl/dhs_l at h  (thetahat = alpha E[.], dl/dh* form, "
                   "section 2.6)",
    "Vhat_y": "-(f1 xi1 + f2 xi2)/sqrt(q) + theta/q * [thetahat_y integrand]  (Vhat = alpha E[.])",
    "Vhat_dl": "-(f1 xi1 + f2 xi2)/sqrt(q) + theta/q * [thetahat_dl integrand]  (Vhat = alpha E[.])",
    "envelope": "|h - w|**2/(2V) + l(h; hs), the Moreau envelope M at the prox point h (F = prior_free_energy + "
                "alpha E[.])",
}


def argument_list(args) -> str:
    """The names of the symbols ``args``, comma-separated (a generated function's documentation)."""
    return ", ".join(a.name for a in args)


def function_names(spec: ModelSpec) -> Tuple[str, ...]:
    """The names of the functions generated for ``spec``."""
    return MATRIX_FUNCTION_NAMES + (LINE_FUNCTION_NAMES if spec.is_two_token_rank_one else ())


def moment_names(shape) -> Tuple[str, ...]:
    """The outputs of ``channel_moments`` (:mod:`derivations.moments`), packed kind by kind."""
    from .moments import names

    return names(shape)


def conjugate_output_names(shape) -> Tuple[str, ...]:
    """The outputs of ``conjugates_from_moments``: :data:`CONJUGATE_FORMS`, each packed like its conjugate."""
    out = []
    for form in CONJUGATE_FORMS:
        base = form.split("_")[0]
        out += [form + n[len(base):] for n in packing.names(base, shape)]
    return tuple(out)


def shared_logistics(expr):
    """``expr`` with every :class:`~derivations.model.Logistic` written over a canonical
    argument: the argument expanded, and ``Logistic(-a) = 1 - Logistic(a)`` where ``-a``
    has the leading minus sign. The softmax rows, the chain rule and the teacher give the
    same logistic in up to four spellings (``h1**2 - h1*h2``, ``h1*(h1 - h2)``, and their
    negatives); once they are one symbol CSE shares it, and the prox Newton terms of the
    two-token softmax need 4 exponentials instead of 16 (1.35-1.5x faster,
    ``benchmarks/kernels.py prox-forms``). The form
    ``1 - Logistic(a)`` is exact in exact arithmetic; in float64 it is accurate in
    absolute terms (to ~1e-16), which is how the prox uses it: gradients are compared
    with an absolute tolerance and objectives with each other."""
    import sympy as sp

    from .model import Logistic

    replacements = {}
    for atom in expr.atoms(Logistic):
        argument = sp.expand(atom.args[0])
        if argument.could_extract_minus_sign():
            replacements[atom] = 1 - Logistic(sp.expand(-argument))
        else:
            replacements[atom] = Logistic(argument)
    return expr.xreplace(replacements)


def prox_derivatives(objective, h):
    """Gradient and Hessian (upper triangle, row-major) of ``objective`` in the variables ``h``,
    by the chain rule through its logistic and softmax values.

    Each opaque value ``A_k(a_k(h))`` (:class:`~derivations.model.Logistic` or
    :class:`~derivations.model.Softmax`) is replaced by a symbol ``u_k``; the total derivative is
    ``D_i E = dE/dh_i + sum_k dE/du_k dA_k/dh_i``, with ``dA_k/dh_i`` (``u_k (1 - u_k) da_k/dh_i``
    for a logistic) itself written in the ``u``. The result is the same function as ``sympy.diff``
    gives, but grouped by the factors ``dE/du_k``, which CSE then computes once: for the two-token
    softmax the prox Newton terms take about 199 arithmetic operations instead of 313 (about 4x
    faster than ``sympy.diff`` of the unshared form, ``benchmarks/kernels.py prox-forms``).
    Without opaque values this is plain differentiation. Softmax values are written out by
    :func:`~derivations.model.explicit_softmax` at the end."""
    import sympy as sp

    from .model import Logistic, Softmax, explicit_softmax

    atoms = sorted((a for a in objective.atoms(Logistic, Softmax) if a.free_symbols & set(h)),
                   key=sp.default_sort_key)
    u = [sp.Dummy(f"u{k}") for k in range(len(atoms))]
    to_u = dict(zip(atoms, u))

    def slope(atom, i):
        start = 1 if isinstance(atom, Softmax) else 0  # a Softmax's first argument is its index
        return sp.Add(*[atom.fdiff(m + 1) * sp.diff(arg, h[i])
                        for m, arg in enumerate(atom.args) if m >= start]).xreplace(to_u)

    d_atoms = [[slope(a, i) for i in range(len(h))] for a in atoms]

    def total(expr, i):
        return sp.diff(expr, h[i]) + sp.Add(*[sp.diff(expr, uk) * da[i] for uk, da in zip(u, d_atoms)])

    phi = objective.xreplace(to_u)
    grad = [total(phi, i) for i in range(len(h))]
    hess = [total(grad[i], j) for i in range(len(h)) for j in range(i, len(h))]
    back = dict(zip(u, atoms))
    return (tuple(explicit_softmax(g.xreplace(back)) for g in grad),
            tuple(explicit_softmax(e.xreplace(back)) for e in hess))


def build_expressions(spec: ModelSpec) -> Dict[str, Tuple[tuple, object, str]]:
    """``{name: (arguments, expression(s), description)}``; memoised per structural key (see :func:`_build`)."""
    return dict(_build(json.dumps(spec.structural_key(), sort_keys=True)))


@functools.lru_cache(maxsize=None)
def _build(structure: str) -> Dict[str, Tuple[tuple, object, str]]:
    """``{name: (arguments, expression or tuple of expressions, description)}`` for every generated function.

    The model parameters are appended to every argument list. ``f_l = V^{-1} (h_l - w_l)``,
    ``w_l = (P m)_l + zeta_l`` and ``g_l = dl/dhs_l`` at ``(h, hs)``, with ``h`` the prox point.
    """
    spec = ModelSpec(**json.loads(structure))
    out = _matrix_expressions(spec)
    if spec.is_two_token_rank_one:
        out.update(_line_expressions(spec))
    return out


def _matrix_expressions(spec: ModelSpec) -> Dict[str, Tuple[tuple, object, str]]:
    import sympy as sp

    from . import moments
    from . import symbols as S
    from .model import (attention_matrix, explicit_softmax, inverse, loss, positional_mean, prox_objective,
                        teacher_matrix)
    from .replica import derive

    ms = S.matrix_symbols(spec.shape)
    L, r, t, k = ms.shape
    d = derive(spec)
    P = ms.params
    H, W, HS, ZETA = (S.components(x) for x in (ms.h, ms.w, ms.hs, ms.zeta))
    packed = {name: ms.packed(name) for name in packing.ORDER_PARAMETERS}
    overlaps = sum((packed[n] for n in packing.OVERLAPS), ())
    conjugates = sum((packed[n] for n in packing.CONJUGATES), ())
    prior_outputs = sum((packed[n] for n in ("V", "q", "m", "theta")), ())

    l = loss(spec)
    obj = prox_objective(spec)
    # the prox derivatives are generated from the same objective written with opaque logistic
    # and softmax values (derivations.model.Logistic, Softmax): equal expressions, cheaper code
    obj_opaque = shared_logistics(prox_objective(spec, logistic=True))
    grad, hess = prox_derivatives(obj_opaque, H)
    obj_fast = explicit_softmax(obj_opaque)
    # the same terms in the teacher's matrix T instead of h*: a Newton iteration at fixed nodes
    # computes T(h*) once, where the terms in h* recompute the teacher's softmax at every step
    # (a third of the terms' cost at (3, 1, 1), benchmarks/kernels.py prox-forms)
    TT = tuple(ms.T)
    obj_T_opaque = shared_logistics(prox_objective(spec, logistic=True, teacher=ms.T))
    grad_T, hess_T = prox_derivatives(obj_T_opaque, H)
    obj_T_fast = explicit_softmax(obj_T_opaque)
    Pm = positional_mean(spec)
    w_of = {ms.w[i, j]: Pm[i, j] + ms.zeta[i, j] for i in range(L) for j in range(r)}
    Vinv = inverse(ms.V)
    f_of = {ms.f[i, j]: (Vinv * (ms.h[i, :] - ms.w[i, :]).T)[j, 0] for i in range(L) for j in range(r)}
    g_of = {ms.g[i, j]: sp.diff(l, ms.hs[i, j]) for i in range(L) for j in range(t)}
    node = {**f_of, **g_of, ms.M_of: obj}
    per_node = tuple(e.xreplace(node).xreplace(w_of) for e in moments.per_node(spec))
    mom = moments.symbols(spec.shape)
    forms = (d.conjugates, d.conjugates, d.conjugates, d.conjugates, d.thetahat_dl, d.Vhat_dl)
    conj = tuple(d.explicit(moments.in_moments(forms[n][c], spec))
                 for n, form in enumerate(CONJUGATE_FORMS) for c in packed[form.split("_")[0]])
    hess_names = ", ".join(f"H[{i},{j}]" for i in range(len(H)) for j in range(i, len(H)))
    F_prior = d.explicit(d.prior_free_energy)
    envelope = mom[-1]
    return {
        "loss": (H + HS + P, l, "l(h; hs) = (sigma**2/2) |S(h) - T(hs)|_F**2 (docs/theory.md, sections 2.1 and 4.3)"),
        "dloss_dhstar": (H + HS + P, tuple(g_of.values()), "g = dl/dhs, packed like hs"),
        "teacher": (HS + P, tuple(teacher_matrix(spec, ms.hs)),
                    "T (row-major), T = (1-omega) T0(hs hs^T) + omega A, T0 the teacher's attention"),
        "attention": (H + P, tuple(attention_matrix(spec, ms.h)), f"S (row-major), student attention S(h) "
                                                                 f"({spec.attention})"),
        "prox_objective": (H + W + HS + ms.packed("V") + P, obj_fast,
                           "1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + l(h; hs) (docs/theory.md, section 4.3)"),
        "prox_grad": (H + W + HS + ms.packed("V") + P, grad, f"d/d({argument_list(H)}) of the prox objective"),
        "prox_hess": (H + W + HS + ms.packed("V") + P, hess,
                      f"Hessian of the prox objective in h = ({argument_list(H)}), upper triangle row-major: {hess_names}"),
        "prox_newton": (H + W + HS + ms.packed("V") + P, (obj_fast,) + grad + hess,
                        "(objective, gradient..., Hessian upper triangle...) in one call: one Newton step's terms"
                        " share their subexpressions (CSE), which is most of the prox cost"),
        "prox_objective_of_T": (H + W + TT + ms.packed("V") + P, obj_T_fast,
                                "prox_objective with the teacher's matrix T(hs) (row-major, as teacher returns it) "
                                "in place of hs"),
        "prox_newton_of_T": (H + W + TT + ms.packed("V") + P, (obj_T_fast,) + grad_T + hess_T,
                             "prox_newton with the teacher's matrix T(hs) (row-major, as teacher returns it) in "
                             "place of hs: an iteration at fixed nodes computes T once"),
        "positional_mean": (packed["m"] + P, S.components(Pm), "P m, packed like w (docs/theory.md, section 4.2)"),
        "channel_moments": (H + ZETA + HS + packed["m"] + packed["V"] + P, per_node,
                            "per-node moments " + ", ".join(moments.names(spec.shape))
                            + " (derivations.moments): with f_l = V^{-1}(h_l - w_l), w_l = (P m)_l + zeta_l,"
                              " x_l = (zeta_l, hs_l), g_l = dl/dhs_l at the prox point h: ff = sum_l f_l f_l^T,"
                              " pf = sum_l P[l, :]^T f_l^T, fx = sum_l f_l x_l^T, gx = sum_l g_l x_l^T, envelope ="
                              " the prox objective at h (M)"),
        "conjugates_from_moments": ((S.alpha,) + mom[:-1] + packed["q"] + packed["theta"] + P, conj,
                                    "the conjugates " + ", ".join(conjugate_output_names(spec.shape))
                                    + " from the averaged moments (docs/theory.md, section 4.6): Stein f forms of"
                                      " qhat, mhat, Vhat (symmetrised), thetahat; the g (dl/dh*) form of thetahat"
                                      " and Vhat with it"),
        "test_error_integrand_x": (ZETA + HS + packed["m"] + P,
                                   loss(spec, h=ms.w.xreplace(w_of), hs=ms.hs),
                                   "(sigma**2/2) |S(w) - T(hs)|_F**2, w_l = (P m)_l + zeta_l (docs/theory.md, "
                                   "section 4.12)"),
        "prior_updates": (conjugates + P, tuple(d.explicit(d.overlaps[x]) for x in prior_outputs),
                          "(V, q, m, theta), packed, from the conjugates (prior side, docs/theory.md, section 4.5)"),
        "prior_free_energy": (overlaps + conjugates + P, F_prior,
                              "F without alpha E[M]: -tr(Vhat q)/2 + tr(qhat V)/2 + tr(mhat^T m) + "
                              "tr(thetahat^T theta) + prior term (docs/theory.md, section 4.4)"),
        "free_energy": ((S.alpha, envelope) + overlaps + conjugates + P, F_prior + S.alpha * envelope,
                        "F = prior_free_energy + alpha * envelope, envelope = E[M] (the averaged moment)"),
    }


def _line_expressions(spec: ModelSpec) -> Dict[str, Tuple[tuple, object, str]]:
    import sympy as sp

    from . import symbols as S
    from .model import loss, prox_objective
    from .reduction import derive_lines, preactivations

    _CHANNEL_ARGS = (S.h1, S.h2, S.xi1, S.xi2, S.y1, S.y2, S.q, S.m, S.V, S.theta)
    d = derive_lines(spec)
    pre = preactivations(spec)
    l = loss(spec)
    obj = prox_objective(spec)
    P = S.PARAMS

    fg = {}
    for k in range(2):
        fg[S.F_[k]] = (S.H[k] - S.W[k]) / S.V
        fg[S.G_[k]] = sp.diff(l, S.HS[k])

    def channel(expr):
        return expr.xreplace(fg).xreplace(pre)

    integrands = {name: channel(d.integrands[name]) for name in CHANNEL_NAMES[:-1]}
    integrands["envelope"] = obj.xreplace(pre)
    w_of, hs_of = tuple(pre[w] for w in S.W), tuple(pre[h] for h in S.HS)
    ex = {
        "preactivations": ((S.xi1, S.xi2, S.y1, S.y2, S.q, S.m, S.theta) + P, w_of + hs_of,
                           "(w1, w2, hs1, hs2): w_l = +-m + sqrt(q) xi_l, hs_l = theta/sqrt(q) xi_l + "
                           "sqrt(rho - theta**2/q) y_l (docs/theory.md, section 2.2)"),
        "channel_integrands": (_CHANNEL_ARGS + P, tuple(integrands[n] for n in CHANNEL_NAMES),
                               "tuple in the order CHANNEL_NAMES = " + ", ".join(CHANNEL_NAMES)
                               + "; each WITHOUT the factor alpha; (h1, h2) is the prox point"),
        "test_error_integrand": ((S.xi1, S.xi2, S.y1, S.y2, S.q, S.m, S.theta) + P, loss(spec, h=w_of, hs=hs_of),
                                 "(sigma**2/2) |S(h) - T(hs)|_F**2 at h = (m + sqrt(q) xi1, -m + sqrt(q) xi2) "
                                 "(docs/theory.md, section 2.7)"),
    }
    for name in CHANNEL_NAMES:
        ex["integrand_" + name] = (_CHANNEL_ARGS + P, integrands[name], "channel integrand " + _CHANNEL_DOC[name])
    return ex

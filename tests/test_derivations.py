"""Tests of derivations/: the free energy, the saddle-point equations and the generated code.

Each saddle-point equation must be dF/d(parameter) = 0 rearranged (docs/theory.md, section 2.5):
checked symbolically and by central finite differences of F at an interior point
with a fixed Gauss-Hermite quadrature.
"""
from __future__ import annotations

import inspect
import math
import time

import mpmath
import numpy as np
import pytest
import sympy as sp
from numpy.polynomial.hermite_e import hermegauss

from derivations import (CHANNEL_NAMES, DerivationError, ModelSpec, ModelSpecError, derive, derive_lines,
                         generated_functions)
from derivations import cache, codegen, reduction, replica
from derivations import symbols as S
from derivations.expectations import expect_equal, integrate_by_parts

Ex = S.Expect
sq = sp.sqrt
ASYM_A = ((0.3, 0.7), (0.8, 0.2))


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """A private cache directory for the whole module."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path_factory.mktemp("attnphase_cache")))
    codegen.clear_memo()
    yield
    codegen.clear_memo()
    mp.undo()


@pytest.fixture(scope="module")
def d(cache_env):
    """Derived afresh (private cache dir, in-process memos cleared), in the variables xi, y."""
    replica._MEMO.clear()
    reduction._MEMO.clear()
    return derive_lines(ModelSpec())


LINES = reduction.line_frame()  # Stein's lemma in xi, y


def gm_for(attention="softmax", backend="numpy", cse=True):
    return generated_functions(ModelSpec(attention=attention), backend=backend, cse=cse)


# ---------------------------------------------------------------------------
# symbolic: docs/theory.md, section 2.5
# ---------------------------------------------------------------------------

def spec_forms():
    """The equations of docs/theory.md, section 2.5, typed in (the derivation must reproduce these)."""
    c = S.lam + S.sigma**2 * S.Vhat
    s = sq(S.rho - S.theta**2 / S.q)
    return {
        "prior": -(S.sigma**2 * S.qhat + S.mhat**2 + S.sigma**2 * S.rho * S.thetahat**2) / (2 * c),
        S.V: S.sigma**2 / c,
        S.q: S.sigma**2 * (S.sigma**2 * S.qhat + S.mhat**2 + S.sigma**2 * S.rho * S.thetahat**2) / c**2,
        S.m: S.mhat / c,
        S.theta: S.sigma**2 * S.rho * S.thetahat / c,
        S.qhat: S.alpha * Ex(S.f1**2 + S.f2**2),
        S.mhat: S.alpha * Ex(S.f1 - S.f2),
        S.thetahat: S.alpha * Ex(S.f1 * S.y1 + S.f2 * S.y2) / s,
        S.Vhat: -S.alpha * Ex(S.f1 * S.xi1 + S.f2 * S.xi2) / sq(S.q) + S.theta * S.thetahat / S.q,
    }


def test_prior_term_equals_spec(d):
    assert sp.simplify(d.prior_term - spec_forms()["prior"]) == 0


@pytest.mark.parametrize("x", ["V", "q", "m", "theta"])
def test_prior_updates_equal_spec_closed_forms(d, x):
    sym = getattr(S, x)
    assert sp.simplify(d.overlaps[sym] - spec_forms()[sym]) == 0


@pytest.mark.parametrize("x", ["qhat", "mhat", "Vhat", "thetahat"])
def test_channel_conjugates_equal_spec(d, x):
    sym = getattr(S, x)
    assert expect_equal(d.conjugates[sym], spec_forms()[sym])


def test_expect_equal_can_fail(d):
    assert not expect_equal(d.conjugates[S.qhat], S.alpha * Ex(S.f1**2 - S.f2**2))
    assert not expect_equal(d.conjugates[S.thetahat], d.thetahat_dl)  # equal only after integration by parts


@pytest.mark.parametrize("hat, x", [("qhat", "V"), ("mhat", "m"), ("Vhat", "q"), ("thetahat", "theta")])
def test_prior_equations_are_stationarity(d, hat, x):
    """dF/d(hat) vanishes exactly when the overlap takes its derived value."""
    hat, x = getattr(S, hat), getattr(S, x)
    dF = sp.diff(d.free_energy, hat)
    assert sp.simplify(dF.subs(x, d.overlaps[x])) == 0
    assert sp.simplify(dF) != 0


def test_channel_equations_are_stationarity(d):
    """dF/d(overlap) = 0 with the derived conjugate substituted. dF/dq and dF/dtheta are Hessian
    averages of M (Price); the first-derivative forms (dl and y) satisfy them through Gaussian
    integration by parts in xi, y, and only through it."""
    assert expect_equal(d.dF[S.V].subs(S.qhat, d.conjugates[S.qhat]), 0)
    assert expect_equal(d.dF[S.m].subs(S.mhat, d.conjugates[S.mhat]), 0)
    assert expect_equal(d.dF[S.theta].subs(S.thetahat, d.thetahat_second_order[0]), 0)
    for thetahat in (d.thetahat_dl, d.conjugates[S.thetahat]):
        assert not expect_equal(d.dF[S.theta].subs(S.thetahat, thetahat), 0)
        assert expect_equal(integrate_by_parts(d.dF[S.theta].subs(S.thetahat, thetahat), LINES), 0)
    vhat = d.conjugates[S.Vhat].subs(S.thetahat, d.thetahat_dl)
    for form in (vhat, d.Vhat_dl, d.Vhat_y):
        assert not expect_equal(d.dF[S.q].subs(S.Vhat, form), 0)
        assert expect_equal(integrate_by_parts(d.dF[S.q].subs(S.Vhat, form), LINES), 0)


def test_price_rule_by_direct_differentiation(d):
    """The channel part of each dF/d(overlap) (Price's theorem for q and theta, the chain rule for m
    and V, derived in the Gaussian x_l = (zeta_l, h*_l)) equals SymPy's own derivative of
    E[M(w(q, m, xi), h*(q, theta, xi, y), V)] in the variables xi, y, after integration by parts
    (and the envelope theorem for dM/dV)."""
    pre = reduction.preactivations()
    args = [pre[S.w1], pre[S.w2], pre[S.hs1], pre[S.hs2], S.V]

    def in_M_space(e):
        """SymPy writes dM/du at u = args as Subs(Derivative(M(..., _u, ...), _u), _u, arg): name every
        argument of M by its position (w1, w2, hs1, hs2, V)."""
        def named(derivative):
            by_position = dict(zip(derivative.expr.args, S.M_ARGS))
            return sp.Derivative(S.M_OF, *[(by_position[v], k) for v, k in derivative.variable_count])

        is_M_derivative = lambda x: isinstance(x, sp.Derivative) and x.expr.func == S.M  # noqa: E731
        e = e.replace(lambda x: isinstance(x, sp.Subs) and is_M_derivative(x.expr), lambda x: named(x.expr))
        return e.replace(is_M_derivative, named)

    for p, hat in ((S.q, S.Vhat), (S.m, S.mhat), (S.V, S.qhat), (S.theta, S.thetahat)):
        direct = in_M_space(sp.diff(S.M(*args), p).doit())
        assert not direct.has(sp.Subs) and direct.has(S.M_OF), p
        direct = direct.xreplace(replica.envelope_substitution(ModelSpec()))
        channel = d.dF[p] - sp.diff(d.prior_free_energy, p)  # alpha E[dM/dp] as derived
        assert expect_equal(integrate_by_parts(S.alpha * S.Expect(direct), LINES),
                            integrate_by_parts(channel, LINES)), p
        assert not expect_equal(integrate_by_parts(S.alpha * S.Expect(direct), LINES), 0), p


def test_vhat_from_theta_derivative(d):
    """Vhat = -alpha E[f.xi]/sqrt(q) + theta/q * thetahat holds with either form of thetahat."""
    rhs = -S.alpha * Ex(S.f1 * S.xi1 + S.f2 * S.xi2) / sq(S.q) + S.theta / S.q * d.thetahat_dl
    assert expect_equal(d.Vhat_dl, rhs)
    assert expect_equal(d.Vhat_y, d.conjugates[S.Vhat].subs(S.thetahat, d.conjugates[S.thetahat]))


def test_both_thetahat_forms_reduce_to_same_second_derivatives(d):
    Mw1h1 = sp.Derivative(S.M_OF, S.w1, S.hs1)
    Mw2h2 = sp.Derivative(S.M_OF, S.w2, S.hs2)
    target = -S.alpha * Ex(Mw1h1 + Mw2h2)
    dl, y = d.thetahat_second_order
    assert expect_equal(dl, target)
    assert expect_equal(y, target)
    assert expect_equal(integrate_by_parts(d.conjugates[S.thetahat], LINES), target)
    assert expect_equal(integrate_by_parts(d.thetahat_dl, LINES), target)


def test_integration_by_parts_rule():
    """Stein's lemma with the chain rule through w and h*."""
    s = sq(S.rho - S.theta**2 / S.q)
    out = integrate_by_parts(Ex(S.xi1 * S.M_OF) + Ex(S.y2 * S.M_OF) + Ex(S.xi1**2), LINES)
    expected = (sq(S.q) * Ex(sp.Derivative(S.M_OF, S.w1)) + S.theta / sq(S.q) * Ex(sp.Derivative(S.M_OF, S.hs1))
                + s * Ex(sp.Derivative(S.M_OF, S.hs2)) + 1)
    assert expect_equal(out, expected)


def test_non_quadratic_regulariser_fails_clearly(monkeypatch):
    monkeypatch.setattr(replica, "regulariser_penalty", lambda spec, Q: S.lam / 4 * Q**4)
    with pytest.raises(DerivationError, match="regulariser"):
        replica.prior_term(ModelSpec())


# ---------------------------------------------------------------------------
# bad specifications
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, param", [
    ({"A": ((0.5, 0.5),)}, "A"),
    ({"A": ((0.5, 0.5, 0.0), (0.5, 0.5, 0.0))}, "A"),
    ({"A": ((float("nan"), 0.5), (0.5, 0.5))}, "A"),
    ({"A": ((float("inf"), 0.5), (0.5, 0.5))}, "A"),
    ({"sigma": 0.0}, "sigma"),
    ({"sigma": -0.5}, "sigma"),
    ({"lam": -1e-3}, "lam"),
    ({"omega": -0.1}, "omega"),
    ({"omega": 1.5}, "omega"),
    ({"attention": "relu"}, "attention"),
])
def test_bad_specs_fail_clearly(kwargs, param):
    with pytest.raises(ModelSpecError) as err:
        ModelSpec(**kwargs)
    assert err.value.parameter == param
    assert param in str(err.value)


def test_unknown_backend(cache_env):
    with pytest.raises(ValueError, match="backend"):
        generated_functions(ModelSpec(), backend="torch")


# ---------------------------------------------------------------------------
# generated code
# ---------------------------------------------------------------------------

RNG = np.random.default_rng(20240205)


def random_point(rng, n=None):
    """Interior point: (h, xi, y, q, m, V, theta) with rho - theta^2/q > 0."""
    size = n
    u = lambda lo, hi: rng.uniform(lo, hi, size)  # noqa: E731
    point = dict(h1=u(-1, 1), h2=u(-1, 1), xi1=rng.normal(size=size), xi2=rng.normal(size=size),
                 y1=rng.normal(size=size), y2=rng.normal(size=size), q=u(0.05, 0.4), m=u(-0.4, 0.4),
                 V=u(0.3, 3.0), theta=u(0.0, 0.1), w1=u(-1, 1), w2=u(-1, 1), hs1=u(-1, 1), hs2=u(-1, 1),
                 qhat=u(0.0, 1.0), mhat=u(-0.5, 0.5), Vhat=u(0.1, 2.0), thetahat=u(-0.5, 0.5))
    # the arguments of the general functions at this shape (channel moments, their averages)
    point.update(zeta1=rng.normal(size=size), zeta2=rng.normal(size=size), alpha=u(0.5, 3.0),
                 envelope=u(0.0, 0.1), **{n: u(-1, 1) for n in ("ff", "pf", "fx_1_1", "fx_1_2", "gx_1_1", "gx_1_2")},
                 **{n: u(0.0, 1.0) for n in ("T_1_1", "T_1_2", "T_2_1", "T_2_2")})  # a teacher's matrix
    return point


def call(gm, name, point, params):
    f = getattr(gm, name)
    names = list(inspect.signature(f).parameters)[:-len(S.PARAMS)]
    return f(*[point[n] for n in names], *params)


def as_tuple(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def test_no_float_literals_in_expressions(cache_env):
    for attention in ("softmax", "linear", "sigmoid"):
        for name, expr in gm_for(attention).expressions.items():
            for e in as_tuple(expr):
                assert not e.atoms(sp.Float), (attention, name)


def test_docstrings_list_argument_order(cache_env):
    gm = gm_for()
    for name, f in gm.functions.items():
        args = ", ".join(inspect.signature(f).parameters)
        assert f.__doc__.startswith(f"{name}({args})")
        assert f"Arguments, in order: {args}." in f.__doc__
        assert args.endswith("sigma, lam, omega, rho, a11, a12, a21, a22")
    assert gm.arguments["channel_integrands"][:10] == ("h1", "h2", "xi1", "xi2", "y1", "y2", "q", "m", "V", "theta")
    assert gm.arguments["preactivations"][:7] == ("xi1", "xi2", "y1", "y2", "q", "m", "theta")
    assert gm.arguments["prior_updates"][:4] == ("qhat", "mhat", "Vhat", "thetahat")
    assert gm.arguments["prior_free_energy"][:8] == ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat")
    assert gm.arguments["prox_hess"][:7] == ("h1", "h2", "w1", "w2", "hs1", "hs2", "V")


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_numpy_and_mpmath_agree(cache_env, attention):
    spec = ModelSpec(attention=attention, A=ASYM_A, omega=0.4)
    gn = generated_functions(spec, "numpy")
    gp = generated_functions(spec, "mpmath")
    rng = np.random.default_rng(1)
    pn = gn.params(spec)
    with mpmath.workdps(40):
        for _ in range(5):
            point = {k: float(v) for k, v in random_point(rng).items()}
            pm = tuple(mpmath.mpf(x) for x in pn)  # the same binary inputs
            for name in gn.functions:
                a = as_tuple(call(gn, name, point, pn))
                b = as_tuple(call(gp, name, {k: mpmath.mpf(v) for k, v in point.items()}, pm))
                assert len(a) == len(b)
                # float64 evaluates a sum of terms to eps times the terms' size, so an
                # output that cancels (a Hessian entry near 0) is judged on the scale of
                # the function's outputs, never looser than before for the others
                out_scale = max(abs(float(y)) for y in b)
                for x, y in zip(a, b):
                    scale = max(abs(float(y)), 1e-6, 1e-2 * out_scale)
                    assert abs(float(x) - float(y)) <= 1e-13 * scale, (name, x, y)


def test_mpmath_backend_carries_50_digits(cache_env):
    spec = ModelSpec()
    gp = generated_functions(spec, "mpmath")
    exprs = gp.expressions
    vals = dict(h1=sp.Rational(3, 7), h2=sp.Rational(-2, 9), xi1=sp.Rational(1, 3), xi2=sp.Rational(-5, 4),
                y1=sp.Rational(7, 10), y2=sp.Rational(-1, 6), q=sp.Rational(2, 11), m=sp.Rational(1, 5),
                V=sp.Rational(17, 3), theta=sp.Rational(1, 13), w1=sp.Rational(1, 7), w2=sp.Rational(-3, 5),
                hs1=sp.Rational(2, 3), hs2=sp.Rational(-1, 9), qhat=sp.Rational(3, 4), mhat=sp.Rational(1, 8),
                Vhat=sp.Rational(5, 2), thetahat=sp.Rational(2, 7))
    params = dict(sigma=sp.Rational(1, 2), lam=sp.Rational(1, 100), omega=sp.Rational(3, 10), rho=sp.Rational(1, 4),
                  a11=sp.Rational(3, 5), a12=sp.Rational(2, 5), a21=sp.Rational(2, 5), a22=sp.Rational(3, 5))
    allv = {**vals, **params}
    subs = {sp.Symbol(k, **sym.assumptions0): v for k, v in allv.items()
            for sym in [next(s for s in (S.PARAMS + S.RANDOM + S.OVERLAPS + S.CONJUGATES) if s.name == k)]}
    with mpmath.workdps(60):
        mp_args = {k: mpmath.mpf(v.p) / v.q for k, v in allv.items()}
        for name in ("channel_integrands", "prox_hess", "prox_newton", "loss", "test_error_integrand", "prior_updates",
                     "prior_free_energy", "dloss_dhstar"):
            got = as_tuple(call(gp, name, mp_args, tuple(mp_args[n] for n in S.PARAM_NAMES)))
            for g, e in zip(got, as_tuple(exprs[name])):
                ref = e.evalf(60, subs=subs)
                assert abs(g - mpmath.mpf(str(ref))) <= mpmath.mpf(10) ** -50 * max(1, abs(g)), (name, g, ref)


@pytest.mark.parametrize("attention", ["softmax", "sigmoid"])
def test_cse_and_plain_agree(cache_env, attention):
    spec = ModelSpec(attention=attention)
    a, b = generated_functions(spec, cse=True), generated_functions(spec, cse=False)
    assert a.cache_file != b.cache_file
    rng = np.random.default_rng(2)
    point = random_point(rng, 50)
    for name in a.functions:
        for x, y in zip(as_tuple(call(a, name, point, a.params(spec))), as_tuple(call(b, name, point, b.params(spec)))):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_prox_grad_and_hessian_match_finite_differences(cache_env, attention):
    spec = ModelSpec(attention=attention, A=ASYM_A)
    gm = generated_functions(spec)
    P = gm.params(spec)
    rng = np.random.default_rng(3)
    pt = random_point(rng, 20)
    args = lambda h1, h2: (h1, h2, pt["w1"], pt["w2"], pt["hs1"], pt["hs2"], pt["V"], *P)  # noqa: E731
    h1, h2, eps = pt["h1"], pt["h2"], 1e-5
    g1, g2 = gm.prox_grad(*args(h1, h2))
    H11, H12, H22 = gm.prox_hess(*args(h1, h2))
    obj = gm.prox_objective
    fd1 = (obj(*args(h1 + eps, h2)) - obj(*args(h1 - eps, h2))) / (2 * eps)
    fd2 = (obj(*args(h1, h2 + eps)) - obj(*args(h1, h2 - eps))) / (2 * eps)
    np.testing.assert_allclose(g1, fd1, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(g2, fd2, rtol=1e-7, atol=1e-9)
    d11 = (gm.prox_grad(*args(h1 + eps, h2))[0] - gm.prox_grad(*args(h1 - eps, h2))[0]) / (2 * eps)
    d12 = (gm.prox_grad(*args(h1, h2 + eps))[0] - gm.prox_grad(*args(h1, h2 - eps))[0]) / (2 * eps)
    d21 = (gm.prox_grad(*args(h1 + eps, h2))[1] - gm.prox_grad(*args(h1 - eps, h2))[1]) / (2 * eps)
    d22 = (gm.prox_grad(*args(h1, h2 + eps))[1] - gm.prox_grad(*args(h1, h2 - eps))[1]) / (2 * eps)
    for exact, fd in ((H11, d11), (H12, d12), (H12, d21), (H22, d22)):
        np.testing.assert_allclose(exact, fd, rtol=1e-7, atol=1e-9)
    # the fused Newton terms (generated from the opaque-logistic form) equal the separate ones
    fused = gm.prox_newton(*args(h1, h2))
    for got, want in zip(fused, (obj(*args(h1, h2)), g1, g2, H11, H12, H22)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("attention", ["softmax", "linear", "sigmoid"])
def test_chain_rule_prox_terms_equal_plain_differentiation(cache_env, attention):
    """The generated prox terms (logistic values shared, derivatives by the chain rule
    through them) equal ``sympy.diff`` of the plain exp-form objective, evaluated
    without CSE."""
    import sympy as sp

    from derivations import symbols as S
    from derivations.model import prox_objective

    spec = ModelSpec(attention=attention, A=ASYM_A)
    gm = generated_functions(spec)
    plain = prox_objective(spec)
    exprs = (plain,) + tuple(sp.diff(plain, h) for h in S.H) + (
        sp.diff(plain, S.h1, S.h1), sp.diff(plain, S.h1, S.h2), sp.diff(plain, S.h2, S.h2))
    args = (S.h1, S.h2, S.w1, S.w2, S.hs1, S.hs2, S.V) + S.PARAMS
    reference = sp.lambdify(args, exprs, modules="numpy", cse=False)
    pt = random_point(np.random.default_rng(11), 40)
    values = (pt["h1"], pt["h2"], pt["w1"], pt["w2"], pt["hs1"], pt["hs2"], pt["V"], *gm.params(spec))
    for got, want in zip(gm.prox_newton(*values), reference(*values)):
        np.testing.assert_allclose(got, np.broadcast_to(want, np.shape(got)), rtol=1e-11, atol=1e-13)


def test_loss_pieces_consistent(cache_env):
    """loss = (sigma^2/2)|S - T|^2 from the generated S and T; dl/dh* by FD; test error = loss at h = w."""
    spec = ModelSpec(A=ASYM_A, omega=0.45)
    gm = generated_functions(spec)
    P = gm.params(spec)
    pt = random_point(np.random.default_rng(4), 30)
    Smat = np.array(gm.attention(pt["h1"], pt["h2"], *P))
    Tmat = np.array(gm.teacher(pt["hs1"], pt["hs2"], *P))
    np.testing.assert_allclose(Smat[0] + Smat[1], 1, rtol=1e-14)  # softmax rows sum to one
    np.testing.assert_allclose(Tmat[0] + Tmat[1], 1, rtol=1e-14)  # and so does the teacher (A row-stochastic)
    l = gm.loss(pt["h1"], pt["h2"], pt["hs1"], pt["hs2"], *P)
    np.testing.assert_allclose(l, spec.sigma**2 / 2 * ((Smat - Tmat) ** 2).sum(axis=0), rtol=1e-13)
    eps = 1e-6
    g1, g2 = gm.dloss_dhstar(pt["h1"], pt["h2"], pt["hs1"], pt["hs2"], *P)
    fd = (gm.loss(pt["h1"], pt["h2"], pt["hs1"] + eps, pt["hs2"], *P)
          - gm.loss(pt["h1"], pt["h2"], pt["hs1"] - eps, pt["hs2"], *P)) / (2 * eps)
    np.testing.assert_allclose(g1, fd, rtol=1e-6, atol=1e-10)
    w1, w2, hs1, hs2 = gm.preactivations(pt["xi1"], pt["xi2"], pt["y1"], pt["y2"], pt["q"], pt["m"], pt["theta"], *P)
    np.testing.assert_allclose(w1, pt["m"] + np.sqrt(pt["q"]) * pt["xi1"])
    np.testing.assert_allclose(w2, -pt["m"] + np.sqrt(pt["q"]) * pt["xi2"])
    te = gm.test_error_integrand(pt["xi1"], pt["xi2"], pt["y1"], pt["y2"], pt["q"], pt["m"], pt["theta"], *P)
    np.testing.assert_allclose(te, gm.loss(w1, w2, hs1, hs2, *P), rtol=1e-13)
    ch = gm.channel_integrands(*(pt[n] for n in gm.arguments["channel_integrands"][:10]), *P)
    assert len(ch) == len(CHANNEL_NAMES) == 7
    for name, value in zip(CHANNEL_NAMES, ch):
        single = getattr(gm, "integrand_" + name)(*(pt[n] for n in gm.arguments["channel_integrands"][:10]), *P)
        np.testing.assert_allclose(value, single, rtol=1e-14)
    env = ch[CHANNEL_NAMES.index("envelope")]
    obj = gm.prox_objective(pt["h1"], pt["h2"], w1, w2, hs1, hs2, pt["V"], *P)
    np.testing.assert_allclose(env, obj, rtol=1e-13)
    f1 = (pt["h1"] - w1) / pt["V"]
    f2 = (pt["h2"] - w2) / pt["V"]
    np.testing.assert_allclose(ch[0], f1**2 + f2**2, rtol=1e-12)
    np.testing.assert_allclose(ch[1], f1 - f2, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------
# finite differences of F at a fixed quadrature
# ---------------------------------------------------------------------------

def test_prior_side_finite_differences(cache_env):
    """dF/d(hat) by central differences equals the residual of the derived overlap update."""
    spec = ModelSpec(sigma=0.7, lam=0.05)
    gm = generated_functions(spec)
    P = gm.params(spec)
    x = dict(q=0.21, m=0.13, V=1.7, theta=0.08, qhat=0.9, mhat=0.3, Vhat=1.3, thetahat=0.4)
    V_, q_, m_, th_ = gm.prior_updates(x["qhat"], x["mhat"], x["Vhat"], x["thetahat"], *P)
    expected = {"qhat": (x["V"] - V_) / 2, "Vhat": -(x["q"] - q_) / 2, "mhat": x["m"] - m_,
                "thetahat": x["theta"] - th_}
    F = lambda **kw: gm.prior_free_energy(*({**x, **kw}[n] for n in ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat")), *P)  # noqa: E731,E501
    eps = 1e-6
    for hat, value in expected.items():
        fd = (F(**{hat: x[hat] + eps}) - F(**{hat: x[hat] - eps})) / (2 * eps)
        assert abs(fd - value) < 1e-8, hat
        assert abs(value) > 1e-3  # a generic point: the check has teeth
    # at the derived overlaps every dF/d(hat) vanishes
    x.update(V=V_, q=q_, m=m_, theta=th_)
    for hat in expected:
        fd = (F(**{hat: x[hat] + eps}) - F(**{hat: x[hat] - eps})) / (2 * eps)
        assert abs(fd) < 1e-8, hat


def local_prox(gm, w1, w2, hs1, hs2, V, P, iters=60):
    """Newton iteration from h = w. At small V the prox objective is strongly convex near w,
    so this is a smooth branch of stationary points: all the envelope theorem needs."""
    h1, h2 = w1.copy(), w2.copy()
    for _ in range(iters):
        g1, g2 = gm.prox_grad(h1, h2, w1, w2, hs1, hs2, V, *P)
        a, b, c = gm.prox_hess(h1, h2, w1, w2, hs1, hs2, V, *P)
        det = a * c - b * b
        h1, h2 = h1 - (c * g1 - b * g2) / det, h2 - (a * g2 - b * g1) / det
    g1, g2 = gm.prox_grad(h1, h2, w1, w2, hs1, hs2, V, *P)
    a, b, c = gm.prox_hess(h1, h2, w1, w2, hs1, hs2, V, *P)
    assert np.max(np.abs(g1)) + np.max(np.abs(g2)) < 1e-12
    assert np.all(a > 0) and np.all(a * c - b * b > 0)  # a strict local minimum
    return h1, h2


def gauss_hermite_4d(n):
    x, w = hermegauss(n)
    w = w / math.sqrt(2 * math.pi)
    grids = np.meshgrid(x, x, x, x, indexing="ij")
    weights = np.prod(np.meshgrid(w, w, w, w, indexing="ij"), axis=0).ravel()
    return [g.ravel() for g in grids], weights


@pytest.mark.parametrize("attention, A", [("softmax", ASYM_A), ("softmax", ((0.6, 0.4), (0.4, 0.6))),
                                          ("linear", ASYM_A), ("sigmoid", ASYM_A)])
def test_channel_side_finite_differences(cache_env, attention, A):
    """d(alpha E[M])/d(q, m, V, theta) by central differences vs the derived conjugates.

    F = prior_free_energy + alpha E[M]; the channel half of each stationarity condition is
    dF/dV = qhat/2 - (alpha/2) E[f^2], dF/dm = mhat - alpha E[f1 - f2],
    dF/dtheta = thetahat - (thetahat from dl form), dF/dq = -Vhat/2 + (Vhat from dl form)/2.
    The y forms follow by integration by parts, exact for the true expectation; the
    quadrature makes them agree only to its own accuracy.
    """
    spec = ModelSpec(attention=attention, A=A, omega=0.35, sigma=0.5)
    gm = generated_functions(spec)
    P = gm.params(spec)
    alpha = 1.7
    (xi1, xi2, y1, y2), weights = gauss_hermite_4d(9)

    def channel(q, m, V, theta):
        w1, w2, hs1, hs2 = gm.preactivations(xi1, xi2, y1, y2, q, m, theta, *P)
        h1, h2 = local_prox(gm, w1, w2, hs1, hs2, V, P)
        vals = gm.channel_integrands(h1, h2, xi1, xi2, y1, y2, q, m, V, theta, *P)
        return {name: alpha * weights @ np.broadcast_to(v, weights.shape) for name, v in zip(CHANNEL_NAMES, vals)}

    x = dict(q=0.3, m=0.2, V=0.6, theta=0.12)
    at = channel(**x)
    eps = 1e-5
    fd = {}
    for p in x:
        up = channel(**{**x, p: x[p] + eps})["envelope"]
        dn = channel(**{**x, p: x[p] - eps})["envelope"]
        fd[p] = (up - dn) / (2 * eps)
    tol = dict(rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fd["V"], -at["qhat"] / 2, **tol)
    np.testing.assert_allclose(fd["m"], -at["mhat"], **tol)
    np.testing.assert_allclose(fd["theta"], -at["thetahat_dl"], **tol)
    np.testing.assert_allclose(fd["q"], at["Vhat_dl"] / 2, **tol)
    assert abs(at["mhat"]) > 1e-3 and abs(at["thetahat_dl"]) > 1e-3  # nonzero: the checks have teeth
    # y forms: equal in expectation (integration by parts), close at this quadrature order
    np.testing.assert_allclose(at["thetahat_y"], at["thetahat_dl"], rtol=2e-3, atol=1e-5)
    np.testing.assert_allclose(at["Vhat_y"], at["Vhat_dl"], rtol=2e-3, atol=1e-5)


# ---------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------

def test_disk_cache_hit_and_regeneration(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path))
    codegen.clear_memo()
    try:
        spec = ModelSpec()
        gm = generated_functions(spec)
        files = sorted(p.name for p in (tmp_path / "derivations").glob("*.py"))
        assert len(files) == 1 and "softmax" in files[0]
        # numbers are arguments: another sigma/omega/A is the same function (in-process memo)
        assert generated_functions(ModelSpec(sigma=0.3, omega=0.9, A=ASYM_A)) is gm
        # a fresh process would read the file: forbid regeneration and time the load
        codegen.clear_memo()

        def boom(*a, **k):
            raise AssertionError("regenerated despite a cache file")
        monkeypatch.setattr(codegen, "generate_source", boom)
        t0 = time.perf_counter()
        again = generated_functions(spec)
        elapsed = time.perf_counter() - t0
        assert again is not gm and again.cache_file == gm.cache_file
        assert elapsed < 0.2, elapsed
        P = gm.params(spec)
        args = (0.3, -0.2, 0.1, 0.4, P)
        assert again.loss(*args[:4], *P) == gm.loss(*args[:4], *P)
        # a structural change regenerates: linear and sigmoid attention
        monkeypatch.undo()
        monkeypatch.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path))
        lin = generated_functions(ModelSpec(attention="linear"))
        sig = generated_functions(ModelSpec(attention="sigmoid"))
        assert len({gm.cache_file, lin.cache_file, sig.cache_file}) == 3
        assert len(list((tmp_path / "derivations").glob("*.py"))) == 3
        h = (0.3, -0.2)
        S_soft = gm.attention(*h, *P)
        S_lin = lin.attention(*h, *P)
        S_sig = sig.attention(*h, *P)
        np.testing.assert_allclose(S_lin, (0.09, -0.06, -0.06, 0.04))
        np.testing.assert_allclose(S_sig, 1 / (1 + np.exp(-np.array(S_lin))))
        np.testing.assert_allclose(S_soft[0], 1 / (1 + np.exp(-(0.09 + 0.06))))
        # edited derivation code never reuses a stale cache
        key = codegen.cache_key(spec, "numpy", True)
        codegen.package_source_hash.cache_clear()
        monkeypatch.setattr(codegen, "package_source_hash", lambda: "edited")
        assert codegen.cache_key(spec, "numpy", True) != key
    finally:
        codegen.clear_memo()


def test_corrupt_cache_file_is_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path))
    codegen.clear_memo()
    try:
        gm = generated_functions(ModelSpec(attention="linear"))
        with open(gm.cache_file, "w") as fh:
            fh.write("this is not python(\n")
        codegen.clear_memo()
        again = generated_functions(ModelSpec(attention="linear"))
        assert again.loss(0.1, 0.2, 0.3, 0.4, *again.params(ModelSpec())) > 0
    finally:
        codegen.clear_memo()


def test_vectorised_over_arrays(cache_env):
    spec = ModelSpec()
    gm = gm_for()
    P = gm.params(spec)
    pt = random_point(np.random.default_rng(5), (3, 4))
    out = gm.channel_integrands(*(pt[n] for n in gm.arguments["channel_integrands"][:10]), *P)
    assert all(np.shape(v) == (3, 4) for v in out)


@pytest.mark.parametrize("which", ["lines", "matrix"])
def test_derivation_cache_round_trip(tmp_path, monkeypatch, which):
    """The on-disk derivation (srepr) loads back to identical SymPy expressions."""
    import dataclasses as dc
    monkeypatch.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path))
    # memoised in-process; write it out and read it back
    fresh = derive_lines(ModelSpec()) if which == "lines" else derive(ModelSpec(tokens=2, rank=2))
    path = tmp_path / "d.json"
    path.write_text(cache.dump_dataclass(fresh))
    loaded = cache.load_dataclass(type(fresh), path)
    for field in dc.fields(fresh):
        assert getattr(loaded, field.name) == getattr(fresh, field.name), field.name
    path.write_text("{not json")
    assert cache.load_dataclass(type(fresh), path) is None


def test_cache_hit_in_fresh_process_is_fast_and_sympy_free(cache_env):
    """A second process loads the cached module without importing SymPy, in milliseconds."""
    import os
    import subprocess
    import sys
    env = dict(os.environ)  # the module's private cache dir (the derivation is already there)
    code = ("import sys, time, numpy\n"
            "t = time.perf_counter()\n"
            "from derivations import generated_functions, ModelSpec\n"
            "gm = generated_functions(ModelSpec(attention='linear'))\n"
            "print(time.perf_counter() - t, 'sympy' in sys.modules, gm.loss(0.1, 0.2, 0.3, 0.4, *gm.params(ModelSpec())))\n")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    t1, sympy1, v1 = first.stdout.split()
    t2, sympy2, v2 = second.stdout.split()
    assert sympy2 == "False"
    assert v1 == v2
    assert float(t2) < 0.5, t2  # typically ~0.02 s including the package import


def test_generated_functions_take_the_parameters_last_in_one_order(cache_env):
    n = len(S.PARAM_NAMES)
    for attention in ("softmax", "linear"):
        for name, arguments in gm_for(attention).arguments.items():
            assert arguments[-n:] == S.PARAM_NAMES, (attention, name)

"""The derivation of the general model (L tokens, student rank r, teacher rank t, positions P).

Symbolic: the derived equations are the matrix forms of docs/theory.md, sections 4.4-4.6, each is
dF/d(component) = 0, and at (L, r, t, k) = (2, 1, 1, 1) they are the equations of section 2 after
the change of variables of section 4.8. Numeric: each equation is dF = 0 by central differences of
F = prior part + alpha * (average of M at the global prox over fixed Gaussian nodes), with the
conjugates from the same nodes; the generated kernels agree with their definitions and across
backends.
"""
from __future__ import annotations

import inspect
import math

import mpmath
import numpy as np
import pytest
import sympy as sp

from derivations import ModelSpec, derive, generated_functions, packing
from derivations import codegen, expectations, expressions, moments, reduction, replica
from derivations import symbols as S
from derivations.model import positions
from derivations.expectations import expect_equal, integrate_by_parts, x_frame

Ex = S.Expect
SHAPES = [(3, 1, 1), (2, 2, 1), (2, 1, 2)]


def spec_of(shape, **kw):
    L, r, t = shape
    return ModelSpec(tokens=L, rank=r, teacher_rank=t, **kw)


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path_factory.mktemp("attnphase_cache")))
    codegen.clear_memo()
    replica._MEMO.clear()
    yield
    codegen.clear_memo()
    mp.undo()


# ---------------------------------------------------------------------------
# symbolic: docs/theory.md, sections 4.4-4.6, typed in as matrices
# ---------------------------------------------------------------------------

def typed(spec):
    """The matrix forms of docs/theory.md, sections 4.4-4.6 (the derivation must reproduce these)."""
    ms = S.matrix_symbols(spec.shape)
    L, r, t, k = ms.shape
    P = positions(spec)
    B = S.sigma**2 * ms.qhat + ms.mhat.T * ms.mhat + S.sigma**2 * ms.thetahat * ms.rho_matrix * ms.thetahat.T
    K = ms.K
    Fx = sp.Matrix(r, r + t, lambda i, c: S.alpha * Ex(sum(ms.f[l, i] * ms.x(l)[c] for l in range(L))))
    Gx = sp.Matrix(t, r + t, lambda j, c: S.alpha * Ex(sum(ms.g[l, j] * ms.x(l)[c] for l in range(L))))
    G = Fx * ms.Sigmainv
    Gg = Gx * ms.Sigmainv
    return {
        "prior": -(K * B).trace() / 2,
        "curvature": S.lam * sp.eye(r) + S.sigma**2 * ms.Vhat,
        "V": S.sigma**2 * K, "q": S.sigma**2 * K * B * K, "m": ms.mhat * K,
        "theta": S.sigma**2 * K * ms.thetahat * ms.rho_matrix,
        "qhat": sp.Matrix(r, r, lambda i, j: S.alpha * Ex(sum(ms.f[l, i] * ms.f[l, j] for l in range(L)))),
        "mhat": sp.Matrix(k, r, lambda a, i: S.alpha * Ex(sum(P[l, a] * ms.f[l, i] for l in range(L)))),
        "Vhat": -(G[:, :r] + G[:, :r].T) / 2,
        "thetahat": G[:, r:],
        "thetahat_dl": -Gg[:, :r].T,
    }


def entries(name, matrix, ms):
    rows, cols, sym = packing.dimensions(name, ms.shape)
    return [matrix[i, j] for i, j in packing.matrix_index(rows, cols, sym)]


@pytest.mark.parametrize("shape", SHAPES + [pytest.param((3, 2, 2), marks=pytest.mark.slow)])
def test_prior_side_equals_the_matrix_forms(cache_env, shape):
    spec = spec_of(shape)
    d, ms, want = derive(spec), S.matrix_symbols(spec.shape), typed(spec)
    assert sp.expand(d.prior_term - want["prior"]) == 0
    assert d.curvature == want["curvature"]
    for name in ("V", "q", "m", "theta"):
        for c, e in zip(ms.packed(name), entries(name, want[name], ms)):
            assert sp.expand(d.overlaps[c] - e) == 0, c
    # K is the inverse of the curvature the prior integral read off
    assert sp.simplify(d.explicit(ms.K) * d.curvature - sp.eye(ms.shape.r)) == sp.zeros(ms.shape.r)


@pytest.mark.parametrize("shape", SHAPES + [pytest.param((3, 2, 2), marks=pytest.mark.slow)])
def test_channel_side_equals_the_stein_forms(cache_env, shape):
    spec = spec_of(shape)
    d, ms, want = derive(spec), S.matrix_symbols(spec.shape), typed(spec)
    for name in packing.CONJUGATES:
        for c, e in zip(ms.packed(name), entries(name, want[name], ms)):
            assert expect_equal(d.conjugates[c], e), c
    for c, e in zip(ms.packed("thetahat"), entries("thetahat", want["thetahat_dl"], ms)):
        assert expect_equal(d.thetahat_dl[c], e), c
        assert not expect_equal(d.thetahat_dl[c], d.conjugates[c])  # equal only through Stein's lemma


def vanishes(expr, d):
    """Whether ``expr`` is zero as expectations once ``Sigmainv`` and ``K`` are the inverses they stand for."""
    det, terms = expectations.expect_terms(expr)
    return all(sp.cancel(d.explicit(c)) == 0 for c in (det, *terms.values()))


@pytest.mark.parametrize("shape", SHAPES)
def test_each_equation_is_stationarity(cache_env, shape):
    """dF/d(component) = 0: exactly for the prior side and the Hessian (Price) forms; for the Stein
    forms after integration by parts in x_l ~ N(0, Sigma), and not before."""
    spec = spec_of(shape)
    d, ms = derive(spec), S.matrix_symbols(spec.shape)
    for hat, x in (("qhat", "V"), ("Vhat", "q"), ("mhat", "m"), ("thetahat", "theta")):
        for p, v in zip(ms.packed(hat), ms.packed(x)):
            dF = replica._prior_derivative(d.prior_free_energy, p, ms, d.curvature)
            assert sp.expand(dF.xreplace({v: d.overlaps[v]})) == 0, p
            assert sp.expand(dF) != 0
    for x, hat in (("V", "qhat"), ("m", "mhat")):
        for p, c in zip(ms.packed(x), ms.packed(hat)):
            assert expect_equal(d.dF[p].xreplace({c: d.conjugates[c]}), 0), p
    frame = x_frame(spec)
    for x, hat in (("q", "Vhat"), ("theta", "thetahat")):
        for p, c in zip(ms.packed(x), ms.packed(hat)):
            assert expect_equal(d.dF[p].xreplace({c: d.second_order[c]}), 0), p
            forms = [d.conjugates[c]] + ([d.thetahat_dl[c]] if hat == "thetahat" else [d.Vhat_dl[c]])
            for form in forms:
                residual = d.dF[p].xreplace({c: form})
                assert not expect_equal(residual, 0), p
                assert vanishes(integrate_by_parts(residual, frame), d), p


@pytest.mark.parametrize("shape", SHAPES)
def test_vhat_through_thetahat_is_the_g_form_of_vhat(cache_env, shape):
    """Eliminating Sigma^{-1} with thetahat leaves Vhat unchanged (G Sigma = alpha sum_l E[f_l x_l^T])."""
    spec = spec_of(shape)
    d, ms = derive(spec), S.matrix_symbols(spec.shape)
    for c in ms.packed("Vhat"):
        via = d.Vhat_thetahat[c].xreplace(d.conjugates)
        assert vanishes(via - d.conjugates[c], d), c
        assert not vanishes(via - d.conjugates[c].xreplace({S.alpha: 2 * S.alpha}), d)


# ---------------------------------------------------------------------------
# the reduction to the two-token rank-one model (docs/theory.md, section 4.8)
# ---------------------------------------------------------------------------

def test_general_equations_reduce_to_the_two_token_rank_one_equations(cache_env):
    """At (2, 1, 1, 1), P = [[1], [-1]], with zeta_l = sqrt(q) xi_l and h*_l = theta/sqrt(q) xi_l + s y_l,
    every general equation is the equation of docs/theory.md, section 2 (typed in), as expectations."""
    spec = ModelSpec()
    d = derive(spec)

    def lines(e):
        return reduction.in_line_variables(d.explicit(e))

    s = sp.sqrt(S.rho - S.theta**2 / S.q)
    c = S.lam + S.sigma**2 * S.Vhat
    B = S.sigma**2 * S.qhat + S.mhat**2 + S.sigma**2 * S.rho * S.thetahat**2
    f_xi = Ex(S.f1 * S.xi1 + S.f2 * S.xi2)
    thetahat_y = S.alpha * Ex(S.f1 * S.y1 + S.f2 * S.y2) / s
    dhs = [S.XI[l] / sp.sqrt(S.q) - S.theta * S.Y[l] / (S.q * s) for l in range(2)]
    thetahat_dl = -S.alpha * Ex(S.g1 * dhs[0] + S.g2 * dhs[1])
    section2 = {
        S.V: S.sigma**2 / c, S.q: S.sigma**2 * B / c**2, S.m: S.mhat / c, S.theta: S.sigma**2 * S.rho * S.thetahat / c,
        S.qhat: S.alpha * Ex(S.f1**2 + S.f2**2), S.mhat: S.alpha * Ex(S.f1 - S.f2),
        S.thetahat: thetahat_y, S.Vhat: -S.alpha * f_xi / sp.sqrt(S.q) + S.theta / S.q * thetahat_y,
    }
    for x in (S.V, S.q, S.m, S.theta):
        assert sp.simplify(d.explicit(d.overlaps[x]) - section2[x]) == 0, x
    for x in (S.qhat, S.mhat, S.thetahat, S.Vhat):
        assert expect_equal(lines(d.conjugates[x]), section2[x]), x
    assert expect_equal(lines(d.thetahat_dl[S.thetahat]), thetahat_dl)
    assert expect_equal(lines(d.Vhat_dl[S.Vhat]), -S.alpha * f_xi / sp.sqrt(S.q) + S.theta / S.q * thetahat_dl)
    assert expect_equal(lines(d.Vhat_thetahat[S.Vhat]), -S.alpha * f_xi / sp.sqrt(S.q) + S.theta / S.q * S.thetahat)
    F = (-(S.Vhat * S.q - S.qhat * S.V) / 2 + S.m * S.mhat + S.theta * S.thetahat - B / (2 * c)
         + S.alpha * Ex(S.M_OF))
    assert expect_equal(d.explicit(d.free_energy), F)
    # and the forms differ where they should: the change of variables is not the identity
    assert not expect_equal(lines(d.thetahat_dl[S.thetahat]), thetahat_y)


# ---------------------------------------------------------------------------
# generated kernels
# ---------------------------------------------------------------------------

def random_A(rng, L):
    A = rng.uniform(0.1, 1.0, (L, L))
    return tuple(tuple(row) for row in A / A.sum(axis=1, keepdims=True))


def random_point(spec, rng, n):
    """Per-node arrays and order parameters (q, V positive definite, Sigma positive definite)."""
    L, r, t, k = spec.shape
    Q = rng.normal(size=(r, r)) * 0.15
    q = 0.15 * np.eye(r) + Q @ Q.T
    Vm = rng.normal(size=(r, r)) * 0.2
    V = 0.7 * np.eye(r) + Vm @ Vm.T
    theta = rng.normal(size=(r, t)) * 0.05
    m = rng.normal(size=(k, r)) * 0.25
    point = {}
    for name, value in (("q", q), ("V", V), ("theta", theta), ("m", m)):
        point.update(packing.as_dict(name, packing.pack(name, value, spec.shape), spec.shape))
    for name in ("h", "w", "zeta", "hs"):
        point.update({component: rng.normal(size=n) for component in packing.token_names(name, spec.shape)})
    # a teacher's matrix for the functions written in it (rows of a convex mixture of attentions)
    point.update({component: rng.uniform(0.0, 1.0, size=n) for component in packing.matrix_names("T", L, L)})
    return point, dict(q=q, V=V, theta=theta, m=m)


def call(gm, name, point, params):
    f = getattr(gm, name)
    names = list(inspect.signature(f).parameters)[:-len(params)]
    return f(*[point[n] for n in names], *params)


def unpack_tokens(values, L, n):
    return np.stack([np.asarray(v, dtype=float) for v in values], axis=-1).reshape(*np.shape(values[0]), L, n)


@pytest.mark.parametrize("shape", SHAPES)
def test_prox_gradient_and_hessian_match_finite_differences(cache_env, shape):
    spec = spec_of(shape, A=random_A(np.random.default_rng(1), shape[0]), omega=0.4)
    gm = generated_functions(spec)
    P = gm.params(spec)
    point, _ = random_point(spec, np.random.default_rng(2), 25)
    H = packing.token_names("h", spec.shape)
    n = len(H)

    def evaluate(name, **shift):
        return call(gm, name, {**point, **{h: point[h] + shift.get(h, 0.0) for h in H}}, P)

    grad = np.array(evaluate("prox_grad"))
    hess = np.array(evaluate("prox_hess"))
    newton = evaluate("prox_newton")
    eps = 1e-5
    upper = list(zip(*np.triu_indices(n)))
    for i, hi in enumerate(H):
        up, dn = evaluate("prox_objective", **{hi: eps}), evaluate("prox_objective", **{hi: -eps})
        np.testing.assert_allclose(grad[i], (up - dn) / (2 * eps), rtol=1e-7, atol=1e-9)
        gup, gdn = np.array(evaluate("prox_grad", **{hi: eps})), np.array(evaluate("prox_grad", **{hi: -eps}))
        for j in range(n):
            e = upper.index((min(i, j), max(i, j)))
            np.testing.assert_allclose(hess[e], (gup[j] - gdn[j]) / (2 * eps), rtol=1e-6, atol=1e-8)
    for got, want in zip(newton, (evaluate("prox_objective"), *grad, *hess)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # the same terms written in the teacher's matrix, at the teacher's matrix of h*
    T = call(gm, "teacher", point, P)
    at_T = {**point, **dict(zip(packing.matrix_names("T", spec.L, spec.L), T))}
    for got, want in zip(call(gm, "prox_newton_of_T", at_T, P), newton):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(call(gm, "prox_objective_of_T", at_T, P), evaluate("prox_objective"), rtol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_channel_moments_and_conjugates_follow_their_definitions(cache_env, shape):
    """channel_moments and conjugates_from_moments against numpy from the definitions of
    docs/theory.md, sections 4.3 and 4.6 (f = V^{-1}(h - w), G = alpha sum E[f x^T] Sigma^{-1}, ...)."""
    spec = spec_of(shape, A=random_A(np.random.default_rng(3), shape[0]), omega=0.3, sigma=0.6)
    L, r, t, k = spec.shape
    gm = generated_functions(spec)
    P = gm.params(spec)
    rng = np.random.default_rng(4)
    point, mats = random_point(spec, rng, 40)
    h = unpack_tokens([point[n] for n in packing.token_names("h", spec.shape)], L, r)
    zeta = unpack_tokens([point[n] for n in packing.token_names("zeta", spec.shape)], L, r)
    hs = unpack_tokens([point[n] for n in packing.token_names("hs", spec.shape)], L, t)
    Pm = np.array(spec.positions) @ mats["m"]
    w = Pm + zeta
    f = (h - w) @ np.linalg.inv(mats["V"])
    g = unpack_tokens(call(gm, "dloss_dhstar", point, P), L, t)
    x = np.concatenate([zeta, hs], axis=-1)
    want = {"ff": np.einsum("nli,nlj->nij", f, f), "pf": np.einsum("la,nli->nai", np.array(spec.positions), f),
            "fx": np.einsum("nli,nlc->nic", f, x), "gx": np.einsum("nlj,nlc->njc", g, x)}
    got = call(gm, "channel_moments", point, P)
    names = gm.moment_names
    assert len(got) == len(names) and names[-1] == "envelope"
    index = {n: i for i, n in enumerate(names)}
    for kind, (rows, cols, sym) in moments.dimensions(spec.shape).items():
        if kind == "envelope":
            continue
        for name, (i, j) in zip(packing.matrix_names(kind, rows, cols, sym), packing.matrix_index(rows, cols, sym)):
            np.testing.assert_allclose(got[index[name]], want[kind][:, i, j], rtol=1e-12, atol=1e-13)
    wpoint = {**point, **dict(zip(packing.token_names("w", spec.shape), np.moveaxis(w.reshape(-1, L * r), 1, 0)))}
    np.testing.assert_allclose(got[-1], call(gm, "prox_objective", wpoint, P), rtol=1e-13)
    # conjugates from the averaged moments
    alpha = 1.3
    avg = {n: float(np.mean(v)) for n, v in zip(names, got)}
    conj = gm.conjugates_from_moments(alpha, *(avg[n] for n in names[:-1]),
                                      *packing.pack("q", mats["q"], spec.shape),
                                      *packing.pack("theta", mats["theta"], spec.shape), *P)
    Sigma = np.block([[mats["q"], mats["theta"]], [mats["theta"].T, spec.rho * np.eye(t)]])
    mean = {kind: np.mean(v, axis=0) for kind, v in want.items()}
    G = alpha * mean["fx"] @ np.linalg.inv(Sigma)
    Gg = alpha * mean["gx"] @ np.linalg.inv(Sigma)
    thetahat_dl = -Gg[:, :r].T
    Vhat_dl = -(alpha * mean["fx"][:, :r] - thetahat_dl @ mats["theta"].T) @ np.linalg.inv(mats["q"])
    forms = {"qhat": alpha * mean["ff"], "mhat": alpha * mean["pf"], "Vhat": -(G[:, :r] + G[:, :r].T) / 2,
             "thetahat": G[:, r:], "thetahat_dl": thetahat_dl, "Vhat_dl": (Vhat_dl + Vhat_dl.T) / 2}
    expected = [v for form in expressions.CONJUGATE_FORMS
                for v in packing.pack(form.split("_")[0], forms[form], spec.shape)]
    assert len(conj) == len(expected) == len(gm.conjugate_names)
    np.testing.assert_allclose(conj, expected, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
def test_prior_side_finite_differences(cache_env, shape):
    """dF/d(conjugate) by central differences of the generated prior_free_energy equals the residual
    of the generated prior update, and vanishes at it."""
    spec = spec_of(shape, sigma=0.7, lam=0.05)
    gm = generated_functions(spec)
    P = gm.params(spec)
    rng = np.random.default_rng(5)
    values = {n: rng.uniform(-0.3, 0.3) for n in packing.parameter_names(spec.shape)}
    for name in ("q", "V", "qhat", "Vhat"):  # positive definite
        r = spec.rank
        A = rng.normal(size=(r, r)) * 0.3
        values.update(packing.as_dict(name, packing.pack(name, np.eye(r) + A @ A.T, spec.shape), spec.shape))
    hats = [n for name in packing.CONJUGATES for n in packing.names(name, spec.shape)]
    overlaps = [n for name in packing.OVERLAPS for n in packing.names(name, spec.shape)]
    out_names = [n for name in ("V", "q", "m", "theta") for n in packing.names(name, spec.shape)]

    def F(vals):
        return gm.prior_free_energy(*(vals[n] for n in overlaps + hats), *P)

    def dF(vals, eps=1e-6):
        return {n: (F({**vals, n: vals[n] + eps}) - F({**vals, n: vals[n] - eps})) / (2 * eps) for n in hats}

    updated = dict(zip(out_names, gm.prior_updates(*(values[n] for n in hats), *P)))
    residual = dF(values)
    assert max(abs(v) for v in residual.values()) > 1e-2  # a generic point: the check has teeth
    at_fixed_point = dF({**values, **updated})
    assert max(abs(v) for v in at_fixed_point.values()) < 1e-8
    # the free energy as generated: prior part plus alpha times the averaged envelope
    alpha, envelope = 1.7, 0.031
    total = gm.free_energy(alpha, envelope, *(values[n] for n in overlaps + hats), *P)
    assert total == pytest.approx(F(values) + alpha * envelope, rel=1e-14)


# one code generator serves every shape: (3, 1, 1) checks it by default, (2, 2, 1) (11 s more) in the slow run
@pytest.mark.parametrize("shape", [pytest.param((2, 2, 1), marks=pytest.mark.slow), (3, 1, 1)])
def test_numpy_and_mpmath_agree_with_and_without_cse(cache_env, shape):
    spec = spec_of(shape, A=random_A(np.random.default_rng(6), shape[0]), omega=0.4)
    rng = np.random.default_rng(7)
    point, _ = random_point(spec, rng, 1)
    point = {n: float(np.ravel(v)[0]) for n, v in point.items()}
    point.update(alpha=1.4, envelope=0.02, **{n: rng.uniform(-1, 1) for n in moments.names(spec.shape)[:-1]})
    conj = {n: rng.uniform(-0.4, 0.4) for n in packing.parameter_names(spec.shape, packing.CONJUGATES)}
    for name in ("qhat", "Vhat"):
        conj.update(packing.as_dict(name, packing.pack(name, np.eye(spec.rank) * 0.8, spec.shape), spec.shape))
    point.update(conj)
    reference = generated_functions(spec, "mpmath", cse=True)
    assert set(reference.functions) == set(expressions.MATRIX_FUNCTION_NAMES)
    pm = tuple(mpmath.mpf(x) for x in generated_functions(spec).params(spec))  # the same binary inputs
    with mpmath.workdps(40):
        want = {name: call(reference, name, {k: mpmath.mpf(v) for k, v in point.items()}, pm)
                for name in reference.functions}
        for backend, cse in (("numpy", True), ("numpy", False), ("mpmath", False)):
            gm = generated_functions(spec, backend, cse=cse)
            params = pm if backend == "mpmath" else tuple(float(x) for x in pm)
            for name in reference.functions:
                got = call(gm, name, {k: (mpmath.mpf(v) if backend == "mpmath" else v) for k, v in point.items()},
                           params)
                got, ref = (got if isinstance(got, tuple) else (got,)), want[name]
                ref = ref if isinstance(ref, tuple) else (ref,)
                scale = max(abs(float(y)) for y in ref)
                tol = 1e-30 if backend == "mpmath" else 1e-13
                for x, y in zip(got, ref):
                    assert abs(float(x - y) if backend == "mpmath" else float(x) - float(y)) \
                        <= tol * max(abs(float(y)), 1e-6, 1e-2 * scale), (backend, cse, name, x, y)


def test_docstrings_list_arguments_and_outputs(cache_env):
    spec = spec_of((2, 2, 1))
    gm = generated_functions(spec)
    for name, f in gm.functions.items():
        args = ", ".join(inspect.signature(f).parameters)
        assert f.__doc__.startswith(f"{name}({args})")
        assert f"Arguments, in order: {args}." in f.__doc__
        assert args.endswith(", ".join(packing.param_names(2)))
    assert gm.arguments["prox_newton"][:13] == ("h_1_1", "h_1_2", "h_2_1", "h_2_2", "w_1_1", "w_1_2", "w_2_1",
                                                "w_2_2", "hs1", "hs2", "V_11", "V_12", "V_22")
    assert gm.arguments["prior_updates"][:10] == ("qhat_11", "qhat_12", "qhat_22", "mhat_1_1", "mhat_1_2",
                                                  "Vhat_11", "Vhat_12", "Vhat_22", "thetahat_1_1", "thetahat_2_1")
    assert gm.arguments["conjugates_from_moments"][:4] == ("alpha", "ff_11", "ff_12", "ff_22")
    for name in gm.moment_names[:-1] + gm.conjugate_names:
        assert name in gm.channel_moments.__doc__ + gm.conjugates_from_moments.__doc__
    assert "H[0,1]" in gm.prox_hess.__doc__


def test_packing_round_trip_and_names():
    shape = (3, 2, 2, 3)
    q = [[1.0, 0.2], [0.2, 2.0]]
    assert packing.names("q", shape) == ("q_11", "q_12", "q_22")
    assert packing.pack("q", q, shape) == (1.0, 0.2, 2.0)
    assert packing.unpack("q", (1.0, 0.2, 2.0), shape) == q
    theta = [[1.0, 2.0], [3.0, 4.0]]
    assert packing.names("thetahat", shape) == ("thetahat_1_1", "thetahat_1_2", "thetahat_2_1", "thetahat_2_2")
    assert packing.unpack("theta", packing.pack("theta", theta, shape), shape) == theta
    assert packing.names("q", (2, 1, 1, 1)) == ("q",) and packing.pack("m", 0.3, (2, 1, 1, 1)) == (0.3,)
    assert packing.token_names("h", (2, 1, 1, 1)) == ("h1", "h2")
    assert packing.param_names(2) == ("sigma", "lam", "omega", "rho", "a11", "a12", "a21", "a22")
    with pytest.raises(ValueError, match="expected 3 components"):
        packing.unpack("q", (1.0, 2.0), shape)


def test_each_shape_has_its_own_cache_file(cache_env):
    files = {generated_functions(spec_of(shape)).cache_file for shape in SHAPES}
    assert len(files) == len(SHAPES)
    other_P = ModelSpec(tokens=3, positions=((1.0,), (0.0,), (-1.0,)))
    assert generated_functions(other_P).cache_file not in files
    assert codegen.cache_key(other_P, "numpy", True) != codegen.cache_key(spec_of((3, 1, 1)), "numpy", True)


# ---------------------------------------------------------------------------
# dF = 0 by finite differences of F with common random numbers
# ---------------------------------------------------------------------------

class Prox:
    """A brute-force global prox for tests: damped Newton from w and from points on rays to the
    ellipsoid bound 1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) <= l(w; h*) (docs/theory.md, section 4.3),
    keeping every converged local minimum; the global minimum is the smallest."""

    def __init__(self, gm, spec, n_rays=8, seed=11):
        self.gm, self.P, self.spec = gm, gm.params(spec), spec
        self.n = spec.L * spec.rank
        rays = np.random.default_rng(seed).normal(size=(n_rays, self.n))
        self.rays = rays / np.linalg.norm(rays, axis=1, keepdims=True)

    def terms(self, h, w, hs, Vp):
        with np.errstate(over="ignore"):  # a logistic of a far start saturates: exp overflows to 1/inf = 0
            out = [np.broadcast_to(np.asarray(o, dtype=float), h.shape[:1])
                   for o in self.gm.prox_newton(*h.T, *w.T, *hs.T, *Vp, *self.P)]
        H = np.zeros(h.shape[:1] + (self.n, self.n))
        for e, (i, j) in enumerate(zip(*np.triu_indices(self.n))):
            H[:, i, j] = H[:, j, i] = out[1 + self.n + e]
        return out[0], np.stack(out[1:1 + self.n], axis=-1), H

    def objective(self, h, w, hs, Vp):
        with np.errstate(over="ignore"):
            return np.broadcast_to(self.gm.prox_objective(*h.T, *w.T, *hs.T, *Vp, *self.P), h.shape[:1])

    def newton(self, h, w, hs, Vp, steps=60):
        """Levenberg-damped Newton with backtracking, on the nodes that have not converged yet."""
        active = np.arange(len(h))
        for _ in range(steps):
            obj, grad, H = self.terms(h[active], w[active], hs[active], Vp)
            moving = np.abs(grad).max(axis=1) > 1e-13
            active, obj, grad, H = active[moving], obj[moving], grad[moving], H[moving]
            if not len(active):
                break
            lowest = np.linalg.eigvalsh(H)[:, 0]
            shift = np.maximum(0.0, 1e-3 - lowest)[:, None, None] * np.eye(self.n)
            step = -np.linalg.solve(H + shift, grad[..., None])[..., 0]
            # backtracking in one call: the first of t = 1, 1/2, 1/4, ... that decreases the objective
            t = 0.5 ** np.arange(12)
            trial = self.objective((h[active][None] + t[:, None, None] * step[None]).reshape(-1, self.n),
                                   np.tile(w[active], (len(t), 1)), np.tile(hs[active], (len(t), 1)), Vp)
            slope = np.einsum("ni,ni->n", grad, step)
            accept = trial.reshape(len(t), -1) <= obj + 1e-4 * t[:, None] * slope
            # close to a minimum the objective's rounding hides the decrease: take the Newton step
            final = (lowest > 1e-3) & (np.abs(grad).max(axis=1) < 1e-7)
            t = np.where(accept.any(axis=0), t[np.argmax(accept, axis=0)], np.where(final, 1.0, 0.0))
            h[active] = h[active] + t[:, None] * step
        obj, grad, H = self.terms(h, w, hs, Vp)
        ok = (np.abs(grad).max(axis=1) < 1e-9) & (np.linalg.eigvalsh(H)[:, 0] > 0)
        return h, obj, ok

    def starts(self, w, hs, V):
        """w, and the points at the ellipsoid bound along +-each ray."""
        bound = np.sqrt(2 * np.maximum(np.broadcast_to(self.gm.loss(*w.T, *hs.T, *self.P), w.shape[:1]), 0.0))
        root = np.kron(np.eye(self.spec.L), np.linalg.cholesky(V))  # maps the unit ball onto the ellipsoid
        return [w] + [w + s * bound[:, None] * (root @ u) for u in self.rays for s in (-1.0, 1.0)]

    def solve(self, w, hs, V, starts):
        """(global minimum value, the two best minimisers) per node."""
        Vp = packing.pack("V", V, self.spec.shape)
        found = [self.newton(h0.copy(), w, hs, Vp) for h0 in starts]
        obj = np.stack([np.where(ok, o, np.inf) for _, o, ok in found])
        assert np.isfinite(obj).mean() > 0.95 and np.isfinite(obj.min(axis=0)).all()
        order = np.argsort(obj, axis=0)
        hs_ = np.stack([h for h, _, _ in found])
        return obj.min(axis=0), [hs_[order[i], np.arange(len(w))] for i in range(min(2, len(found)))]


@pytest.mark.parametrize("shape, n_nodes, teeth", [(shape, 1200, 0.25) for shape in SHAPES] + [
    pytest.param(shape, 6000, 0.1, marks=pytest.mark.slow) for shape in SHAPES])
def test_every_equation_is_dF_zero_by_finite_differences(cache_env, shape, n_nodes, teeth):
    """F = prior_free_energy + alpha * mean_nodes M(global prox), nodes x_l = chol(Sigma) z_l with fixed z.

    For V and m (envelope theorem) the central differences equal the derived conjugates of the same
    nodes to finite-difference accuracy. For q and theta the Stein forms are another estimator of
    the same expectation as the (pathwise) finite differences: per node, D = dF/dp (differences of
    M, with that node's conjugates in the prior part) must average to zero within 4 standard errors,
    and the standard errors must be small (``teeth``) against the largest derivative tested."""
    spec = spec_of(shape, A=random_A(np.random.default_rng(8), shape[0]), omega=0.35, sigma=1.0, lam=0.05)
    L, r, t, k = spec.shape
    gm = generated_functions(spec)
    P = gm.params(spec)
    rng = np.random.default_rng(9)
    _, mats = random_point(spec, rng, 1)
    # correlated student directions and a sizeable teacher overlap: derivatives in q and theta that
    # stand well above the Monte Carlo error of the Stein forms
    mats["m"] = mats["m"] + 0.3
    mats["q"] = 0.5 * np.eye(r) + 0.2
    mats["theta"] = 0.35 * np.sign(rng.normal(size=(r, t)))
    assert np.linalg.eigvalsh(np.block([[mats["q"], mats["theta"]], [mats["theta"].T, spec.rho * np.eye(t)]]))[0] > 0
    alpha = 1.5
    z = rng.normal(size=(n_nodes, L, r + t))
    prox = Prox(gm, spec)
    params = {name: np.array(mats[name], dtype=float) for name in ("q", "m", "theta", "V")}

    def nodes(par):
        Sigma = np.block([[par["q"], par["theta"]], [par["theta"].T, spec.rho * np.eye(t)]])
        x = z @ np.linalg.cholesky(Sigma).T
        zeta, hs = x[..., :r], x[..., r:]
        w = np.array(spec.positions) @ par["m"] + zeta
        return zeta.reshape(n_nodes, -1), hs.reshape(n_nodes, -1), w.reshape(n_nodes, -1)

    zeta, hs, w = nodes(params)
    M0, local_minima = prox.solve(w, hs, params["V"], prox.starts(w, hs, params["V"]))
    h0 = local_minima[0]
    flat = lambda name, par: packing.pack(name, par[name], spec.shape)  # noqa: E731
    moms = gm.channel_moments(*h0.T, *zeta.T, *hs.T, *flat("m", params), *flat("V", params), *P)
    moms = [np.broadcast_to(np.asarray(v, dtype=float), (n_nodes,)) for v in moms]
    np.testing.assert_allclose(moms[-1], M0, rtol=1e-12)
    per_node = dict(zip(gm.conjugate_names, gm.conjugates_from_moments(
        alpha, *moms[:-1], *flat("q", params), *flat("theta", params), *P)))

    def conjugates(form):
        """Per-node conjugates (arrays) with thetahat and Vhat in the f or the g form."""
        out = {}
        for name in packing.CONJUGATES:
            source = name + ("_dl" if form == "g" and name in ("thetahat", "Vhat") else "")
            for n in packing.names(name, spec.shape):
                out[n] = np.broadcast_to(per_node[source + n[len(name):]], (n_nodes,))
        return out

    overlap_names = [n for name in packing.OVERLAPS for n in packing.names(name, spec.shape)]
    hat_names = [n for name in packing.CONJUGATES for n in packing.names(name, spec.shape)]

    def prior_part(par, hats):
        values = {}
        for name in packing.OVERLAPS:
            values.update(packing.as_dict(name, flat(name, par), spec.shape))
        return gm.prior_free_energy(*(values[n] for n in overlap_names), *(hats[n] for n in hat_names), *P)

    def M_at(par):
        zeta_, hs_, w_ = nodes(par)
        return prox.solve(w_, hs_, par["V"], local_minima)[0]

    eps = 1e-5
    checked, errors, scale = 0, [], 0.0
    for name in packing.OVERLAPS:
        rows, cols, sym = packing.dimensions(name, spec.shape)
        for comp, (i, j) in zip(packing.names(name, spec.shape), packing.matrix_index(rows, cols, sym)):
            shifted = {}
            for sign in (+1, -1):
                par = {key: value.copy() for key, value in params.items()}
                par[name][i, j] += sign * eps
                if sym:
                    par[name][j, i] = par[name][i, j]
                shifted[sign] = par
            dM = alpha * (M_at(shifted[1]) - M_at(shifted[-1])) / (2 * eps)
            for form in (("f",) if name in ("m", "V") else ("f", "g")):
                hats = conjugates(form)
                D = (prior_part(shifted[1], hats) - prior_part(shifted[-1], hats)) / (2 * eps) + dM
                mean, se = float(np.mean(D)), float(np.std(D) / math.sqrt(n_nodes))
                if name in ("m", "V"):  # exact node by node (envelope theorem)
                    assert abs(mean) < 1e-6 * (1 + float(np.mean(np.abs(dM)))), (comp, mean)
                else:
                    assert abs(mean) < 4 * se + 1e-9, (comp, form, mean, se)
                    errors.append(se)
                    scale = max(scale, abs(float(np.mean(dM))))
                checked += 1
    assert checked == sum(len(packing.names(n, spec.shape)) for n in ("m", "V")) \
        + 2 * sum(len(packing.names(n, spec.shape)) for n in ("q", "theta"))
    # the statistical checks have teeth: their errors are small against the derivatives they test
    assert max(errors) < teeth * scale, (max(errors), scale)

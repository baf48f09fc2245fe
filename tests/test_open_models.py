"""Open models: attentions given as expressions of one row of scores (docs/extending.md).

Identities that can fail: the softmax typed as an expression is the built-in; the student softmax
at inverse temperature ``beta`` is the paper's model at ``lam / beta`` with ``Q' = sqrt(beta) Q``
(docs/theory.md, section "Inverse temperature"); a teacher attention equal to the default is
today's model; a changed expression or ``beta`` never reuses another model's generated code."""
import math

import numpy as np
import pytest
import sympy as sp
import torch

from derivations import ModelSpec, ModelSpecError, generated_functions
from derivations.codegen import cache_key

SOFTMAX_TEXT = "exp(h1)/(exp(h1) + exp(h2))"
SOFTMAX_BETA_TEXT = "exp(beta*h1)/(exp(beta*h1) + exp(beta*h2))"
#: the same softmax written so that doubles do not overflow (exp(h1)/(...) gives inf/inf beyond
#: scores of 709, which the channel integrators reach: the solve then reports non-convergence)
SOFTMAX_STABLE = "1/(1 + exp(h2 - h1))"
SQUAREPLUS = "(h1 + sqrt(h1**2 + 4))/(h1 + sqrt(h1**2 + 4) + h2 + sqrt(h2**2 + 4))"


def _points(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return 1.5 * rng.standard_normal((4, n))


def _loss(spec, h1, h2, hs1, hs2):
    gm = generated_functions(spec)
    return np.asarray(gm.loss(h1, h2, hs1, hs2, *gm.params(spec)), dtype=float)


# ------------------------------------------------------------------ parsing and the spec


def test_text_and_sympy_expressions_give_one_canonical_model():
    h1, h2 = sp.symbols("h1 h2")
    from_text = ModelSpec(attention=SQUAREPLUS)
    from_sympy = ModelSpec(attention=(h1 + sp.sqrt(h1**2 + 4)) / (h1 + sp.sqrt(h1**2 + 4) + h2 + sp.sqrt(h2**2 + 4)))
    assert from_text == from_sympy and hash(from_text) == hash(from_sympy)
    assert ModelSpec(attention=" softmax ").attention == "softmax"
    row = {k: str(v) for k, v in ModelSpec(attention=SOFTMAX_BETA_TEXT, beta=2.5, teacher=SQUAREPLUS).to_columns().items()}
    assert ModelSpec.from_columns(row) == ModelSpec(attention=SOFTMAX_BETA_TEXT, beta=2.5, teacher=SQUAREPLUS)


def test_the_default_model_keeps_its_records():
    """beta = 1 is left out of the dict, the columns and the structural key: the paper's model's
    records and hashes are those of a spec without beta."""
    assert "beta" not in ModelSpec().to_dict() and "beta" not in ModelSpec().structural_key()
    assert ModelSpec(beta=2).to_dict()["beta"] == 2.0 and ModelSpec(beta=2).structural_key()["beta"] == 2.0


@pytest.mark.parametrize("changes, parameter, message", [
    (dict(attention="h1/(h1 - h2)"), "attention", "not finite"),
    (dict(attention="1/(h1 - 0.3)"), "attention", "pole"),
    (dict(attention="sqrt(h1)"), "attention", "not real"),
    (dict(attention="log(h1)"), "attention", "not finite"),
    (dict(attention="h1 + h3"), "attention", "unknown symbol 'h3'"),
    (dict(attention="foo(h1)"), "attention", "unknown symbol 'foo'"),
    (dict(attention="__import__('os').getcwd()"), "attention", "unknown symbol '__import__'"),
    (dict(attention="h1.real"), "attention", "'.' is not allowed"),
    (dict(attention="h1 +"), "attention", "cannot parse"),
    (dict(attention="2"), "attention", "does not depend on the scores"),
    (dict(attention=sp.Symbol("x")), "attention", "unknown symbol 'x'"),
    (dict(attention=["h1"]), "attention", "must be a name"),
    (dict(teacher=sp.Function("g")(sp.Symbol("h1"))), "teacher", "unknown function 'g'"),
    (dict(teacher="beta*h1"), "teacher", "unknown symbol 'beta'"),
    (dict(beta=0), "beta", "> 0"),
    (dict(beta=-1.0), "beta", "> 0"),
    (dict(beta=float("nan")), "beta", "> 0"),
    (dict(attention="linear", beta=2), "beta", "does not use beta"),
])
def test_bad_attentions_are_refused_naming_the_parameter(changes, parameter, message):
    with pytest.raises(ModelSpecError) as info:
        ModelSpec(**changes)
    assert info.value.parameter == parameter and message in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ never stale


def test_cache_key_follows_beta_and_the_expression():
    keys = {cache_key(s, "numpy", True) for s in (
        ModelSpec(), ModelSpec(beta=2), ModelSpec(beta=3), ModelSpec(attention=SOFTMAX_TEXT),
        ModelSpec(attention=SOFTMAX_BETA_TEXT, beta=2), ModelSpec(attention=SQUAREPLUS), ModelSpec(teacher=SQUAREPLUS))}
    assert len(keys) == 7
    assert cache_key(ModelSpec(attention=SQUAREPLUS), "numpy", True) == \
        cache_key(ModelSpec(attention=SQUAREPLUS.replace(" ", "")), "numpy", True)


def test_changing_beta_under_one_name_changes_the_numbers():
    """The stale-cache case: two inverse temperatures under the name softmax in one process."""
    h1, h2, hs1, hs2 = _points()
    two, three = (_loss(ModelSpec(beta=b), h1, h2, hs1, hs2) for b in (2.0, 3.0))
    assert np.max(np.abs(two - three)) > 1e-3
    # and each is the paper's loss at sqrt(beta) h (the identity of the inverse temperature)
    for b, values in ((2.0, two), (3.0, three)):
        r = math.sqrt(b)
        np.testing.assert_allclose(values, _loss(ModelSpec(), r * h1, r * h2, hs1, hs2), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("text, builtin, beta", [(SOFTMAX_TEXT, "softmax", 1.0), (SOFTMAX_STABLE, "softmax", 1.0),
                                                 (SOFTMAX_BETA_TEXT, "softmax", 2.0),
                                                 ("h1", "linear", 1.0), ("1/(1 + exp(-h1))", "sigmoid", 1.0)])
def test_a_builtin_typed_as_an_expression_gives_the_builtins_functions(text, builtin, beta):
    typed, named = ModelSpec(attention=text, beta=beta), ModelSpec(attention=builtin, beta=beta)
    assert cache_key(typed, "numpy", True) != cache_key(named, "numpy", True)
    h1, h2, hs1, hs2 = _points()
    V, w1, w2 = 3.0, 0.3 * h2, -0.2 * h1
    gt, gn = generated_functions(typed), generated_functions(named)
    np.testing.assert_allclose(_loss(typed, h1, h2, hs1, hs2), _loss(named, h1, h2, hs1, hs2), rtol=1e-12, atol=1e-15)
    for a, b in zip(gt.prox_newton(h1, h2, w1, w2, hs1, hs2, V, *gt.params(typed)),
                    gn.prox_newton(h1, h2, w1, w2, hs1, hs2, V, *gn.params(named))):
        np.testing.assert_allclose(np.broadcast_to(a, h1.shape), np.broadcast_to(b, h1.shape), rtol=1e-10, atol=1e-13)


def test_a_teacher_equal_to_the_default_is_todays_model():
    h1, h2, hs1, hs2 = _points()
    np.testing.assert_allclose(_loss(ModelSpec(teacher=SOFTMAX_TEXT), h1, h2, hs1, hs2),
                               _loss(ModelSpec(), h1, h2, hs1, hs2), rtol=1e-12, atol=1e-15)
    assert np.max(np.abs(_loss(ModelSpec(teacher=SQUAREPLUS), h1, h2, hs1, hs2)
                         - _loss(ModelSpec(), h1, h2, hs1, hs2))) > 1e-4


def test_more_tokens_apply_the_row_expression_cyclically():
    spec = ModelSpec(tokens=3, attention="exp(h1)/(exp(h1) + exp(h2) + exp(h3))")
    gm, ref = generated_functions(spec), generated_functions(ModelSpec(tokens=3))
    rng = np.random.default_rng(1)
    h = tuple(rng.standard_normal(3))
    np.testing.assert_allclose(gm.attention(*h, *gm.params(spec)), ref.attention(*h, *ref.params(ModelSpec(tokens=3))),
                               rtol=1e-13)


# ------------------------------------------------------------------ the simulator


def _problem(spec, seed=3, d=40, alpha=1.5):
    import validation.simulate as sim

    return sim.make_problem(spec, d, alpha, seed=seed, dtype=torch.float64, n_test=200)


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(beta=2.5), ModelSpec(attention="linear"),
                                  ModelSpec(attention="sigmoid"), ModelSpec(tokens=3, rank=2, beta=0.7),
                                  ModelSpec(tokens=3, attention="sigmoid")], ids=str)
def test_hand_written_attentions_equal_the_generated_ones(spec):
    """The built-ins' hand-written risk and gradient are those computed from the row expression."""
    import validation.simulate as sim

    p = _problem(spec)
    Q = 0.8 * torch.randn((40,) if spec.rank == 1 else (40, spec.rank), dtype=torch.float64,
                          generator=torch.Generator().manual_seed(0))
    R1, g1 = sim.risk_and_grad(Q, p.train, spec.lam, sim.student_attention(spec))
    R2, g2 = sim.risk_and_grad(Q, p.train, spec.lam, sim.student_attention(spec, generated=True))
    torch.testing.assert_close(R1, R2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("spec", [ModelSpec(attention=SQUAREPLUS, teacher=SQUAREPLUS),
                                  ModelSpec(tokens=3, attention="(1 + h1**2)/(3 + h1**2 + h2**2 + h3**2)")], ids=str)
def test_generated_gradient_matches_autograd_of_the_plain_risk(spec):
    import validation.simulate as sim

    p = _problem(spec)
    Q = 0.8 * torch.randn(40, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    R, g = sim.risk_and_grad(Q, p.train, spec.lam, sim.student_attention(spec))
    X, Y = sim.raw_training_set(p)
    Qg = Q.clone().requires_grad_(True)
    ref = sim.risk_autograd(Qg, X, Y, spec.lam, sim.student_attention(spec))
    ref.backward()
    torch.testing.assert_close(R, ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g, Qg.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["softmax", SOFTMAX_BETA_TEXT])
@pytest.mark.parametrize("beta", [2.0, 0.5])
def test_inverse_temperature_is_the_papers_model_at_lam_over_beta_in_simulation(attention, beta):
    """Gradient descent at (beta, lam, lr) from Q0 is the paper's model at (lam / beta, beta lr) from
    sqrt(beta) Q0, step by step: same test error and training loss to float precision."""
    import validation.simulate as sim

    hot = ModelSpec(attention=attention, beta=beta)
    paper = ModelSpec(lam=hot.lam / beta)
    p_hot, p_paper = _problem(hot), _problem(paper)
    torch.testing.assert_close(p_hot.train.G, p_paper.train.G, rtol=0, atol=0)  # the same data
    Q0 = sim.initial_Q(p_hot, "random") + p_hot.Qstar
    lr = 0.1
    a = sim.train(p_hot, steps=50, lr=lr, Q0=Q0, record_points=5)
    b = sim.train(p_paper, steps=50, lr=beta * lr, Q0=math.sqrt(beta) * Q0, record_points=5)
    torch.testing.assert_close(math.sqrt(beta) * a.Q, b.Q, rtol=1e-10, atol=1e-12)
    assert sim.test_error(a.Q, p_hot) == pytest.approx(sim.test_error(b.Q, p_paper), rel=1e-10)
    assert sim.train_loss(a.Q, p_hot) == pytest.approx(sim.train_loss(b.Q, p_paper), rel=1e-10)
    assert abs(sim.test_error(a.Q, p_hot) - sim.test_error(Q0, p_hot)) > 1e-6  # training moved


def test_an_expression_teacher_generates_the_data():
    import validation.simulate as sim

    hs = torch.randn(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    same = sim.teacher_matrix(hs, ModelSpec(teacher=SOFTMAX_TEXT))
    torch.testing.assert_close(same, sim.teacher_matrix(hs, ModelSpec()), rtol=1e-13, atol=1e-15)
    other = sim.teacher_matrix(hs, ModelSpec(teacher=SQUAREPLUS))
    torch.testing.assert_close(other.sum(-1), torch.ones(50, 2, dtype=torch.float64))
    assert (other - same).abs().max() > 1e-3


# ------------------------------------------------------------------ the theory (slow: a few solves)


def _assert_same_point(a, b, scale, names=("q", "m", "V", "theta")):
    """``a`` maps to ``b`` with ``b.x = scale[x] a.x``, within 4 combined error estimates (+ 1e-9)."""
    for name in names + ("test_error", "train_loss"):
        s = scale.get(name, 1.0)
        va, vb = (getattr(x.overlaps, name) if name in names else getattr(x, name) for x in (a, b))
        ea, eb = a.error.get(name, 0.0), b.error.get(name, 0.0)
        tol = 4 * math.hypot(s * ea, eb) + 1e-9 * max(1.0, abs(vb))
        assert abs(s * va - vb) <= tol, (name, va, vb, s, ea, eb)


@pytest.mark.slow
@pytest.mark.parametrize("beta", [2.0, 0.5])
def test_inverse_temperature_is_the_papers_model_at_lam_over_beta_in_theory(beta):
    from numerics.api import solve

    hot = solve(ModelSpec(beta=beta), 1.0, "semantic", "fast")
    paper = solve(ModelSpec(lam=0.01 / beta), 1.0, "semantic", "fast")
    assert hot.converged and paper.converged
    _assert_same_point(hot, paper, {"q": beta, "V": beta, "m": math.sqrt(beta), "theta": math.sqrt(beta)})


def _typed_softmax(beta: float) -> str:
    return f"exp({beta:g}*h1)/(exp({beta:g}*h1) + exp({beta:g}*h2))"


#: the rescaling of the inverse temperature: the paper's model at lam / beta has these fields times beta's
RESCALED = {"q": 1.0, "V": 1.0, "m": 0.5, "theta": 0.5}


def _assert_typed_softmax_identity(beta: float, alpha: float, branch: str, text: str = ""):
    """The typed softmax at ``beta`` (``text``, by default :func:`_typed_softmax`) is the built-in at
    ``beta`` (the same generated form: equal to rounding) and the paper's model at ``lam / beta`` (the
    rescaling identity) to relative 1e-6."""
    from numerics.api import solve

    typed, named, paper = (solve(spec, alpha, branch, "draft")
                           for spec in (ModelSpec(attention=text or _typed_softmax(beta)), ModelSpec(beta=beta),
                                        ModelSpec(lam=0.01 / beta)))
    assert typed.converged and named.converged and paper.converged
    for name, power in RESCALED.items():
        t, n, p = (getattr(x.overlaps, name) for x in (typed, named, paper))
        assert abs(t - n) <= 1e-12 * max(1.0, abs(n)), (name, t, n)
        assert abs(beta ** power * t - p) <= 1e-6 * max(abs(p), 1e-3), (name, t, p)
    for name in ("test_error", "train_loss"):
        t, n, p = (getattr(x, name) for x in (typed, named, paper))
        assert abs(t - n) <= 1e-12 * abs(n) and abs(t - p) <= 1e-6 * abs(p), (name, t, n, p)


@pytest.mark.parametrize("beta", [2.0, 3.0])
@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_the_softmax_typed_at_an_inverse_temperature_is_the_builtin_and_the_papers_model(beta, alpha):
    """``exp(2*h1)/(exp(2*h1) + exp(2*h2))`` overflowed to inf/inf in the integrands at alpha = 2 (no
    start converged); written in the built-in's form it is the built-in at --beta 2."""
    _assert_typed_softmax_identity(beta, alpha, "semantic")


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_the_softmax_typed_at_temperature_3_is_the_builtin_and_the_papers_model(branch):
    """Temperature 3, beta = 1/3 (the scores divided, as written by hand): at alpha = 2 both
    branches exist for all three models (a few seconds each)."""
    _assert_typed_softmax_identity(1 / 3, 2.0, branch, "exp(h1/3)/(exp(h1/3) + exp(h2/3))")


@pytest.mark.slow
def test_the_typed_softmax_on_the_positional_branch_is_the_builtin_and_the_papers_model():
    """About a minute: three positional solves, each searching its starts."""
    _assert_typed_softmax_identity(2.0, 1.0, "positional")


@pytest.mark.slow
@pytest.mark.parametrize("beta, alpha", [(2.0, 2.0), (3.0, 1.0), (3.0, 2.0)])
def test_where_the_positional_branch_is_absent_it_is_absent_for_all_three(beta, alpha):
    """There the paper's model at lam / beta has no positional branch either (it ends between alpha =
    1 and 1.5 at lam = 0.005, docs/studies/positional_small_lam.md): each of the three says so."""
    from numerics.api import BranchNotFound, solve

    for spec in (ModelSpec(attention=_typed_softmax(beta)), ModelSpec(beta=beta), ModelSpec(lam=0.01 / beta)):
        with pytest.raises(BranchNotFound):
            solve(spec, alpha, "positional", "draft")


@pytest.mark.slow
@pytest.mark.parametrize("beta", [2.0, 3.0])
def test_the_typed_softmax_has_the_thresholds_of_the_papers_model_at_lam_over_beta(beta):
    """At lam = 0.01 beta, the typed softmax at beta is the paper's model at lam = 0.01: the same
    thresholds (draft: 1.5 to 2.5 minutes each on a shared 2-core machine)."""
    from numerics.api import thresholds

    typed = thresholds(ModelSpec(attention=_typed_softmax(beta), lam=0.01 * beta), "draft")
    paper = thresholds(ModelSpec(), "draft")
    assert typed.transitions and paper.transitions
    assert abs(typed.alpha_c - paper.alpha_c) <= 1e-6 and abs(typed.alpha_l - paper.alpha_l) <= 1e-6


def test_a_quotient_of_exponentials_is_generated_in_the_builtins_form():
    """The typed softmax and sigmoid give the built-ins' numbers where the text as written gives
    inf/inf (scores of 1000), and the same numbers elsewhere."""
    from numerics.model.bound import bind

    h1, h2 = np.array([1000.0, -1000.0, 0.3, 2.0]), np.array([-1000.0, 1000.0, -0.2, 2.5])
    hs1, hs2 = np.array([0.5, -0.5, 1.0, 0.1]), np.array([0.2, 0.7, -1.0, 0.4])
    for typed, named in ((ModelSpec(attention=_typed_softmax(2.0)), ModelSpec(beta=2.0)),
                         (ModelSpec(attention="exp(h1)/(1 + exp(h1))"), ModelSpec(attention="sigmoid"))):
        a, b = (np.asarray(bind(s).loss(h1, h2, hs1, hs2), dtype=float) for s in (typed, named))
        assert np.isfinite(a).all() and np.allclose(a, b, rtol=1e-13, atol=0), (a, b)


@pytest.mark.slow
def test_softmax_typed_as_an_expression_and_as_the_teacher_solve_to_the_builtins_point():
    from numerics.api import solve

    named = solve(ModelSpec(), 1.0, "semantic", "fast")
    for spec in (ModelSpec(attention=SOFTMAX_STABLE), ModelSpec(teacher=SOFTMAX_TEXT)):
        typed = solve(spec, 1.0, "semantic", "fast")
        assert typed.converged
        _assert_same_point(typed, named, {})


def test_the_integrators_assumption_holds_for_an_expression():
    """Both channel integrators use that the loss is even in h (it depends on h h^T only)."""
    from numerics.model.bound import bind

    assert bind(ModelSpec(attention=SQUAREPLUS, teacher=SQUAREPLUS)).loss_is_even


def test_simulate_command_trains_an_expression_attention(capsys):
    import json

    from attnphase import cli

    status = cli.main(["simulate", "--attention", SQUAREPLUS, "--teacher-attention", SQUAREPLUS, "--d", "20",
                       "--steps", "5", "--n-test", "50", "--seeds", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and math.isfinite(out["test_error_mean"])
    assert ModelSpec(**{k: v for k, v in out["model"].items() if k != "rho"}).attention == \
        ModelSpec(attention=SQUAREPLUS).attention

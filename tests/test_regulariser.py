"""Typed regularisers (docs/extending.md, "Your own regulariser").

Identities that can fail: a penalty ``c(lam) w**2`` is the ridge of strength ``2 c(lam)``, in the
theory (the same fixed point, the same training loss) and in the simulator (the same trajectory);
``lam/2*w**2`` is ``ridge`` itself; a penalty that is not ``c(lam) w**2`` is refused in one line by
the API and the CLI; every cache file is keyed and named by the canonical expression."""
import math
import re

import pytest
import sympy as sp
import torch

from derivations import ModelSpec, ModelSpecError
from derivations.codegen import _cache_path, cache_key
from tests.test_cli_inputs import no_work, run

#: the quantities of a fixed point that must agree between two models with the same equations
OVERLAPS = ("q", "m", "V", "theta")
HATS = ("qhat", "mhat", "Vhat", "thetahat")


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


# ------------------------------------------------------------------ the spec


@pytest.mark.parametrize("text", ["lam/2*w**2", "w**2*lam/2", " 0.5*lam*w**2 ", "lam*abs(w)**2/2"])
def test_the_ridge_typed_as_an_expression_is_the_ridge(text):
    """The same spec, so the same structural key, the same cached code and the same numbers."""
    typed = ModelSpec(regulariser=text)
    assert typed == ModelSpec() and typed.regulariser == "ridge"
    assert cache_key(typed, "numpy", True) == cache_key(ModelSpec(), "numpy", True)


def test_text_and_sympy_give_one_canonical_regulariser_that_reads_back():
    lam, w = sp.symbols("lam w")
    from_text = ModelSpec(regulariser="w**2 * lam")
    assert from_text == ModelSpec(regulariser=lam * w**2) and from_text.regulariser == "lam*w**2"
    assert from_text.ridge_strength == 0.02 and ModelSpec(regulariser="(lam + 0.001)*w**2").ridge_strength == 0.022
    row = {k: str(v) for k, v in ModelSpec(regulariser="(lam + 0.001)*w**2").to_columns().items()}
    assert ModelSpec.from_columns(row) == ModelSpec(regulariser="(lam + 0.001)*w**2")


@pytest.mark.parametrize("text, reason", [
    ("lam*abs(w)", "not a quadratic penalty c(lam)*w**2 (the prior integral over a row of Q is done in closed "
                   "form only for a quadratic row energy"),
    ("lam*w**4", "not a quadratic penalty c(lam)*w**2"),
    ("lam*(w**2 + w**4)", "not a quadratic penalty c(lam)*w**2"),
    ("lam*log(1 + w**2)", "not a quadratic penalty c(lam)*w**2"),
    ("lam*w**2 + 0.1*w", "a linear term in w"),
    ("lam*w**2 + 1", "a constant term"),
    ("lam", "does not depend on the weight entry w"),
    ("-lam*w**2", "its strength k = 2 c(lam) is -0.02 at lam = 0.01"),
    ("sqrt(lam - 1)*w**2", "its strength k = 2 c(lam) is not real"),
    ("lam*x**2", "unknown symbol 'x'"),
    ("w**2*9**9**9", "the exponent 3.8742e+08 exceeds 64"),
])
def test_a_penalty_other_than_c_lam_w2_is_refused_in_one_line(text, reason):
    with pytest.raises(ModelSpecError) as info:
        ModelSpec(regulariser=text)
    message = str(info.value)
    assert message.startswith(f"regulariser: {reason}") and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("text, reason", [
    ("lam*abs(w)", "not a quadratic penalty c(lam)*w**2"),
    ("lam*w**4", "not a quadratic penalty c(lam)*w**2"),
])
def test_the_cli_refuses_a_non_quadratic_penalty_in_one_line(text, reason, capsys, monkeypatch):
    no_work(monkeypatch)
    status, _, line = run(["solve", "--alpha", "1", "--precision", "draft", "--regulariser", text], capsys)
    assert status == 2 and line.startswith(f"attnphase solve: error: regulariser: {reason}"), line


def test_the_derivation_refuses_a_non_quadratic_row_energy_too(monkeypatch):
    """A second guard behind the spec's: the prior integral itself checks the degree."""
    from derivations import replica
    from derivations import symbols as S
    from derivations.model import DerivationError

    monkeypatch.setattr(replica, "regulariser_penalty", lambda spec, Q: S.lam * sp.Abs(Q) ** 3)
    with pytest.raises(DerivationError, match="regulariser: the prior integral is done in closed form only"):
        replica.prior_term(ModelSpec(regulariser="lam*w**2"))


def test_every_cache_is_keyed_and_named_by_the_canonical_expression():
    specs = [ModelSpec(), ModelSpec(regulariser="lam*w**2"), ModelSpec(regulariser="2*lam*w**2"),
             ModelSpec(regulariser="(lam + 0.001)*w**2")]
    assert len({cache_key(s, "numpy", True) for s in specs}) == len(specs)
    assert len({s.regulariser_label() for s in specs}) == len(specs)
    for s in specs[1:]:
        assert re.fullmatch(r"expr[0-9a-f]{10}", s.regulariser_label())
        assert re.fullmatch(r"[A-Za-z0-9_.]+", _cache_path(s, "numpy", True, cache_key(s, "numpy", True)).name)


def test_the_curvature_of_a_rank_two_student_is_twice_the_ridges():
    """Per entry, so isotropic in the student's columns: ``C = 2 lam I + sigma^2 Vhat``."""
    from derivations import replica
    from derivations import symbols as S

    _, ridge = replica.prior_term(ModelSpec(rank=2))
    _, typed = replica.prior_term(ModelSpec(rank=2, regulariser="lam*w**2"))
    assert sp.simplify(typed - ridge - S.lam * sp.eye(2)) == sp.zeros(2, 2)


def test_a_zero_strength_is_outside_the_solvable_range():
    from numerics.api import check_model_range
    from numerics.solver_range import OutsideSolverRange

    with pytest.raises(OutsideSolverRange, match="strength k = 0, outside the solvable range k > 0"):
        check_model_range(ModelSpec(regulariser="lam**2*w**2", lam=0.0))


# ------------------------------------------------------------------ the identity in theory and in simulation


def test_lam_w2_at_lam_is_the_ridge_at_twice_lam_in_theory():
    """``lam*w**2`` at ``lam = 0.01`` is ``0.02/2 w**2``: the empirical risk, penalty included, is the
    same function of ``Q``, so its fixed point (overlaps and conjugates), its test error and its
    training loss (which carries the penalty's value) must be equal. The generated code differs
    only in ``2*lam`` for ``lam`` and ``2 * 0.01 == 0.02`` in doubles: the numbers are equal to the
    last bit; asserted to ``1e-9`` relative, the solver's precision."""
    from numerics.api import solve

    typed = solve(ModelSpec(regulariser="lam*w**2", lam=0.01), 1.0, "semantic", "draft")
    ridge = solve(ModelSpec(lam=0.02), 1.0, "semantic", "draft")
    assert typed.converged and ridge.converged
    for name in OVERLAPS:
        assert _close(getattr(typed.overlaps, name), getattr(ridge.overlaps, name)), name
    for name in HATS:
        assert _close(getattr(typed.hats, name), getattr(ridge.hats, name)), name
    for name in ("test_error", "train_loss"):
        assert _close(getattr(typed, name), getattr(ridge, name)), name


def test_lam_w2_at_lam_is_the_ridge_at_twice_lam_in_simulation():
    """The simulator's penalty is ``ModelSpec.ridge_strength``: the same data, the same trajectory."""
    from validation.simulate import make_problem, train

    runs = []
    for spec in (ModelSpec(regulariser="lam*w**2", lam=0.01), ModelSpec(lam=0.02)):
        problem = make_problem(spec, 40, 1.0, seed=3, n_test=20, dtype=torch.float64)
        runs.append(train(problem, "semantic", steps=30, lr=0.5, record_points=3))
    (typed, ridge) = runs
    assert torch.equal(typed.Q, ridge.Q)
    assert [p[1] for p in typed.loss_curve] == [p[1] for p in ridge.loss_curve]
    assert all(math.isfinite(p[1]) for p in typed.loss_curve)


def test_lam_w2_at_lam_is_the_ridge_at_twice_lam_in_gamp():
    """GAMP's linear denoiser and its empirical risk use ``ModelSpec.ridge_strength``: on one
    instance the two models run the same iterations (four here; the data do not depend on lam)."""
    from numerics.api import GampError, run_gamp
    from validation.instances import draw_instance, initial_Q

    histories = []
    for spec in (ModelSpec(regulariser="lam*w**2", lam=0.01), ModelSpec(lam=0.02)):
        inst = draw_instance(spec, 100, 2.0, seed=5)
        with pytest.raises(GampError) as info:
            run_gamp(spec, inst.X, inst.coef, initial_Q(inst, "semantic"), dampings=(0.5,), maxiter=4)
        histories.append([(h["residual"], h["switched"], float(h["V"][0, 0]), float(h["Lam"][0, 0]))
                          for h in info.value.history])
    assert len(histories[0]) == 4 and histories[0] == histories[1]

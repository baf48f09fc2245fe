"""``attnphase derive``: formats, round-trip through sympify, bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sympy as sp

from attnphase.cli import main
from derivations import derive_lines, ModelSpec
from derivations import symbols as S

EQUATIONS = ["V", "q", "m", "theta", "qhat", "mhat", "Vhat", "thetahat"]
ORDER = {"q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "alpha", "sigma", "lam", "rho", "omega"}
INTERNALS = {"f1", "f2", "g1", "g2", "xi1", "xi2", "y1", "y2", "w1", "w2", "hs1", "hs2"}


def run_json(capsys, *argv):
    assert main(["derive", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_parses_and_sympifies(capsys):
    out = run_json(capsys, "--format", "json")
    assert list(out["equations"]) == EQUATIONS
    assert out["model"] == ModelSpec().to_dict()
    d = derive_lines(ModelSpec())
    by_name = {s.name: s for s in S.OVERLAPS + S.CONJUGATES}
    for name, text in out["equations"].items():
        expr = sp.sympify(text)
        assert {s.name for s in expr.free_symbols} <= ORDER | INTERNALS, name
        # the parsed string is the derived expression (names match, assumptions aside)
        derived = {**d.overlaps, **d.conjugates}[by_name[name]]
        assert str(expr) == str(sp.sympify(str(derived)))
    F = sp.sympify(out["free_energy"])
    assert {s.name for s in F.free_symbols} <= ORDER | {"w1", "w2", "hs1", "hs2"}
    assert F.has(sp.Function("Expect"))
    for text in out["equivalent_forms"].values():
        sp.sympify(text)
    assert {"f1, f2", "g1, g2", "Expect", "w1", "hs1"} <= set(out["definitions"])
    # outside the expectations only the order parameters and model parameters appear
    for name in ("V", "q", "m", "theta"):
        assert {s.name for s in sp.sympify(out["equations"][name]).free_symbols} <= ORDER
    vhat = sp.sympify(out["equations"]["Vhat"])
    outside = vhat.replace(lambda e: getattr(e, "func", None) == sp.Function("Expect"), lambda e: sp.Integer(1))
    assert {s.name for s in outside.free_symbols} <= ORDER


def test_json_alias_and_model_options(capsys):
    out = run_json(capsys, "--json", "--attention", "linear", "--sigma", "0.7", "--omega", "0.1",
                   "--A", "0.3,0.7,0.8,0.2", "--lam", "0.02")
    assert out["model"]["attention"] == "linear"
    assert out["model"]["A"] == [[0.3, 0.7], [0.8, 0.2]]
    assert out["model"]["sigma"] == 0.7
    loss = sp.sympify(out["loss"])
    assert not loss.has(sp.exp(sp.Symbol("h1") ** 2))  # linear attention: no exponential of h in S(h)
    soft = run_json(capsys, "--json")
    assert soft["loss"] != out["loss"]
    sig = run_json(capsys, "--json", "--attention", "sigmoid")
    assert len({soft["loss"], out["loss"], sig["loss"]}) == 3


@pytest.mark.parametrize("fmt, marker", [("text", "thetahat = alpha*Expect(f1*y1 + f2*y2)"),
                                         ("latex", r"\hat{\theta} &=")])
def test_text_and_latex(capsys, fmt, marker):
    assert main(["derive", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert marker in out
    # the model in words first, not a dict or dataclass repr
    first = out.lstrip().splitlines()[0]
    assert "{'" not in first and "ModelSpec(" not in first, first
    if fmt == "text":
        assert first.startswith("Model: sigma = 0.5, lam = 0.01, omega = 0.3, A = [0.6, 0.4; 0.4, 0.6], attention "
                                "softmax"), first
    for name in EQUATIONS:
        assert (f"  {name} = " in out) if fmt == "text" else True
    if fmt == "latex":
        assert out.count(r"\mathbb{E}") >= 4 and r"\begin{align}" in out


@pytest.mark.parametrize("argv, param", [
    (["--sigma", "-1"], "sigma"),
    (["--sigma", "0"], "sigma"),
    (["--lam", "-0.1"], "lam"),
    (["--omega", "1.2"], "omega"),
    (["--A", "0.5,0.5,0.5"], "A"),
    (["--A", "nan,0.5,0.5,0.5"], "A"),
])
def test_bad_input_one_line_exit_2(capsys, argv, param):
    assert main(["derive", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and param in err and "Traceback" not in err


def test_unknown_attention_is_rejected():
    proc = subprocess.run([sys.executable, "-m", "attnphase.cli", "derive", "--attention", "relu"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "attention" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

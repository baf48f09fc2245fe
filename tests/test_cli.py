"""The command-line program: its commands, its shared parsers, and how errors become exit statuses."""
from __future__ import annotations

import numpy as np
import pytest

from attnphase import cli
from attnphase.commands import theory
from attnphase.errors import UsageError
from attnphase.options import model_from_args, parse_list, parse_range
from derivations.spec import ModelSpec, ModelSpecError

COMMANDS = ("derive", "solve", "curve", "thresholds", "run", "simulate", "validate", "gamp", "phase-diagram", "plot",
            "histogram", "paper")


def test_every_command_is_registered():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert tuple(sub.choices) == COMMANDS


def test_range_parser_gives_each_value_as_the_decimal_it_is():
    """0.75 on the grid 0.05:2.5:50 is 0.75 (numpy.linspace gives 0.7500000000000001): a CSV row
    written with it is found by ``alpha == 0.75``; within a rounding of linspace's values."""
    values = parse_range("0.1:2.5:25", "--alpha")
    assert values == [round(0.1 * k, 10) for k in range(1, 26)]
    assert np.allclose(values, np.linspace(0.1, 2.5, 25), rtol=1e-15, atol=0)
    assert 0.75 in parse_range("0.05:2.5:50", "--alpha") and 0.75 not in list(np.linspace(0.05, 2.5, 50))
    assert parse_range("0:1:4", "--alpha") == list(np.linspace(0, 1, 4))
    assert parse_range("2", "--alpha") == [2.0]
    with pytest.raises(UsageError, match="--alpha: every value must be a positive number"):
        parse_range("0:1:3", "--alpha", positive=True)
    with pytest.raises(UsageError, match="--alpha: N = 1 needs START = STOP"):
        parse_range("1:2:1", "--alpha")


def test_list_parser():
    assert parse_list(" semantic, positional ,", "--branches", choices=("semantic", "positional")) == [
        "semantic", "positional"]
    assert parse_list("100,200", "--d-values", item=int) == [100, 200]
    assert parse_list("", "--compare", allow_empty=True) == []
    for text, kwargs, what in (("", {}, "--x: empty list"), ("1,a", {"item": float}, "--x: expected comma-separated "
                                                                                     "numbers"),
                               ("gif", {"choices": ("png",)}, "--x: unknown value 'gif'; choose from png")):
        with pytest.raises(UsageError, match=what):
            parse_list(text, "--x", **kwargs)


def _model_args(*argv):
    return cli.build_parser().parse_args(["solve", "--alpha", "1", *argv])


def test_model_options_build_the_model_spec():
    assert model_from_args(_model_args()) == ModelSpec()
    assert model_from_args(_model_args("--A", "0.7,0.3;0.2,0.8")) == model_from_args(_model_args("--A",
                                                                                                  "0.7,0.3,0.2,0.8"))
    general = model_from_args(_model_args("--tokens", "3", "--rank", "2", "--teacher-rank", "1",
                                          "--positions", "1,0;0,1;-1,-1"))
    assert general.shape == (3, 2, 1, 2) and general.A == ((0.6, 0.2, 0.2), (0.2, 0.6, 0.2), (0.2, 0.2, 0.6))
    with pytest.raises(ModelSpecError, match="^A: "):
        model_from_args(_model_args("--tokens", "3", "--A", "0.6,0.4,0.4,0.6"))


def test_what_the_general_model_does_not_have_is_bad_input(capsys):
    for argv, start in ((["solve", "--alpha", "2", "--tokens", "3", "--integrator", "lines"],
                         "attnphase solve: error: --integrator: the line quadrature handles L = 2 tokens"),
                        (["solve", "--alpha", "2", "--branch", "mixed"],
                         "attnphase solve: error: --branch: the mixed branch needs --rank >= 2"),
                        (["thresholds", "--rank", "2", "--branches", "semantic,mixed,diagonal"],
                         "attnphase thresholds: error: --branches: "),
                        (["run", "--tokens", "3", "--integrator", "lines"],
                         "attnphase run: error: --integrator: the line quadrature handles L = 2 tokens"),
                        (["phase-diagram", "--tokens", "3", "--branches", "semantic,mixed", "--out", "unused"],
                         "attnphase phase-diagram: error: --branches: 'mixed' is not a branch of this model")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(start), err


def test_solve_and_curve_of_the_general_model(capsys, tmp_path):
    """The quasi-Monte Carlo path of solve and curve: JSON with matrices as nested lists and the
    gauge invariants; a curve CSV with packed components, invariants and their errors, and a figure."""
    import json

    from tidyio import read_rows

    argv = ["solve", "--alpha", "2", "--tokens", "3", "--branch", "semantic", "--precision", "draft", "--json"]
    assert cli.main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert np.shape(d["q"]) == (1, 1) and np.shape(d["m"]) == (3, 1) and d["m"] == [[0.0], [0.0], [0.0]]
    # one branch asked is not compared with the others
    assert d["status"] == "converged" and d["global_minimum"] is None and d["integrator"] == "qmc"
    assert d["invariants"]["q_eigenvalues"] == [d["q"][0][0]] and d["error"]["test_error"] > 0
    out = tmp_path / "curve.csv"
    argv = ["curve", "--alpha", "1.5:2:2", "--rank", "2", "--branches", "semantic", "--precision", "draft",
            "--out", str(out), "--figure"]
    assert cli.main(argv) == 0
    rows = read_rows(out)
    assert [float(r["alpha"]) for r in rows] == [1.5, 2.0] and {r["branch"] for r in rows} == {"semantic"}
    for column in ("q_11", "q_12", "q_22", "theta_1_1", "q_eigenvalues_2", "theta_singular_values_1_error",
                   "test_error_error", "rank"):
        assert column in rows[0], column
    assert (tmp_path / "curve.png").exists()


def test_a_failed_computation_is_one_line_and_exit_1_with_a_traceback_only_under_v(monkeypatch, capsys):
    from numerics.solver.iteration import SolverError

    def failing(args):
        raise SolverError("alpha=2 semantic: no start converged")

    monkeypatch.setattr(theory, "cmd_solve", failing)
    line = "attnphase solve: error: SolverError: alpha=2 semantic: no start converged"
    assert cli.main(["solve", "--alpha", "2"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert cli.main(["-v", "solve", "--alpha", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "Traceback (most recent call last):" and err[-1] == line

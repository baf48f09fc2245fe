"""One front and one record for every model (``numerics.api``): the line quadrature's scalars are the
``1 x 1`` case of the matrices, the integrator is chosen in one place, and the global minimum is
marked one way."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from derivations import ModelSpec
from numerics import api
from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps
from numerics.overlaps import HatOverlaps, Overlaps
from numerics.result import as_matrices


def scalar_point(spec=ModelSpec(), alpha=1.0, branch="semantic", train_loss=3e-3, converged=True, **kw):
    error = {k: 1e-7 for k in ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error",
                               "train_loss")}
    return api.FixedPoint(alpha=alpha, branch=branch, overlaps=Overlaps(0.1, -0.2, 12.0, 0.15),
                          hats=HatOverlaps(1e-3, 0.0, 0.08, 0.07), test_error=1e-3, train_loss=train_loss,
                          converged=converged, iterations=5, residual=1e-9, error=kw.pop("error", error),
                          diagnostics=kw.pop("diagnostics", {}), model=spec, precision="fast", wall_time=0.1, **kw)


def test_the_scalars_are_the_one_by_one_case_of_the_matrices():
    p = scalar_point()
    assert p.scalar and p.integrator == "lines"
    # the invariants of 1 x 1 matrices: q and V themselves, the moduli of m and theta
    assert p.invariants == {"q_eigenvalues": [0.1], "V_eigenvalues": [12.0], "m_singular_values": [0.2],
                            "theta_singular_values": [0.15]}
    assert p.invariant_errors() == {"q_eigenvalues_1": 1e-7, "V_eigenvalues_1": 1e-7, "m_singular_values_1": 1e-7,
                                    "theta_singular_values_1": 1e-7}
    m = as_matrices(p)
    assert not m.scalar and m.invariants == p.invariants and m.overlaps.shape == (2, 1, 1, 1)
    # the bare names keep their values and errors; the matrices add the invariants
    assert {k: v for k, v in m.values.items() if k in p.values} == p.values
    assert set(m.values) - set(p.values) == {f"{k}_1" for k in p.invariants}
    assert {k: m.error[k] for k in p.error} == p.error
    # JSON: scalars for the line quadrature's record, nested lists and the integrator for matrices
    assert p.to_dict()["q"] == 0.1 and "integrator" not in p.to_dict()
    assert m.to_dict()["q"] == [[0.1]] and m.to_dict()["integrator"] == "lines"
    assert as_matrices(m) is m


def test_a_record_that_did_not_converge_says_why():
    shape = (3, 1, 1, 3)
    ov = MatrixOverlaps.unpack(shape, np.linspace(0.1, 0.9, len(MatrixOverlaps.component_names(shape))))
    hats = MatrixHats.unpack(shape, np.ones(len(MatrixHats.component_names(shape))))
    p = api.FixedPoint(alpha=1.0, branch="semantic", overlaps=ov, hats=hats, test_error=1e-3, train_loss=3e-3,
                       converged=False, iterations=9, residual=0.3, error={}, diagnostics={"status": "max_iterations"},
                       model=ModelSpec(tokens=3), precision="draft", wall_time=0.1, integrator="qmc")
    assert p.status == "max_iterations" and p.invariants == ov.invariants()
    failed = api.failed_point(ModelSpec(rank=2), 2.0, "mixed", "draft", "qmc", "no start converged")
    assert not failed.converged and failed.status == "failed: no start converged"
    assert all(math.isnan(v) for v in failed.invariants["q_eigenvalues"])


def test_the_global_minimum_is_the_lowest_converged_and_a_near_tie_says_so():
    a = scalar_point(branch="semantic", train_loss=1.0)
    b = scalar_point(branch="positional", train_loss=0.5, converged=False, status="not converged")
    c = scalar_point(branch="trivial", train_loss=2.0)
    marked = api.mark_global_minima([a, b, c])
    assert [p.global_minimum for p in marked] == [True, False, False]
    assert all("global_margin" not in p.diagnostics for p in marked)  # a clear winner
    close = scalar_point(branch="trivial", train_loss=1.0 + 1e-7)
    first = api.mark_global_minima([a, close])[0]
    assert first.global_minimum and first.diagnostics["global_margin"] == pytest.approx(0.5)
    # equal losses: the order of the branches decides, not the order of the points
    tie = scalar_point(branch="positional", train_loss=1.0)
    assert [p.global_minimum for p in api.mark_global_minima([tie, a])] == [False, True]


def test_the_integrator_is_chosen_once_for_every_command():
    assert api.branches(ModelSpec()) == ("semantic", "positional", "trivial")
    assert api.branches(ModelSpec(rank=2))[-1] == "mixed"
    line = api.method(ModelSpec(), ("semantic", "positional"))
    assert line.integrator == "lines" and line.deterministic and line.scalar_records and line.precision == "fast"
    assert api.method(ModelSpec(), ("semantic",), "qmc").integrator == "qmc"
    qmc = api.method(ModelSpec(tokens=3), ("semantic",))
    assert qmc.integrator == "qmc" and not qmc.deterministic and qmc.precision == "draft"
    # the branches compared by default: the paper's pair where the line quadrature solves it
    assert api.method(ModelSpec()).branches == api.default_branches(ModelSpec()) == ("semantic", "positional")
    assert api.method(ModelSpec(tokens=3)).branches == api.branches(ModelSpec(tokens=3))
    assert api.default_branches(ModelSpec(), "qmc") == api.branches(ModelSpec())
    with pytest.raises(api.IntegratorError):
        api.method(ModelSpec(rank=2), ("semantic",), "lines")


def test_follow_gives_one_curve_for_every_model(monkeypatch):
    """The QMC side of :func:`numerics.api.follow` is a :class:`BranchCurve` too, with a note on the
    alphas where the branch was not found."""
    import numerics.branches.follow as walk

    point = dataclasses.replace(as_matrices(scalar_point(ModelSpec(tokens=3))), integrator="qmc")

    def solve(spec, alpha, branch, precision, integrator, start=None):
        if alpha < 1.0:
            raise api.BranchNotFound("fell onto the trivial point", branch, alpha)
        return dataclasses.replace(point, alpha=float(alpha))

    monkeypatch.setattr(walk, "solve", solve)
    curve = api.follow(ModelSpec(tokens=3), [0.5, 1.0, 1.5], "semantic", "draft")
    assert isinstance(curve, api.BranchCurve) and [p.alpha for p in curve.points] == [1.0, 1.5]
    assert curve.spinodals == [] and curve.note == "semantic branch not found at alpha = 0.5"


def test_run_and_thresholds_of_a_general_model_take_the_same_path(monkeypatch, tmp_path, capsys):
    """``run`` and ``thresholds`` of a three-token model through the front (the toy physics of
    ``tests.fakes.FakeGeneralTheoryAPI``): every branch followed, the changes of the global branch
    in the summary, the curve of matrix records with its figure."""
    import json

    from attnphase.cli import main
    from tests.fakes import FakeGeneralTheoryAPI
    from tidyio import read_rows

    fake = FakeGeneralTheoryAPI()
    monkeypatch.setattr(api, "follow", fake.follow)
    monkeypatch.setattr(api, "thresholds", fake.thresholds)
    assert main(["run", "--tokens", "3", "--alphas", "0.5:2.5:5", "--out", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["branches"] == ["semantic", "positional", "trivial"] and summary["status"] == "complete"
    # the summary's shape is the default model's: the thresholds on top, their whole record nested
    assert {"alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error", "linear_test_error", "spinodals",
            "thresholds"} <= set(summary)
    assert [(t["below"], t["above"]) for t in summary["thresholds"]["transitions"]] == [("positional", "semantic")]
    rows = read_rows(tmp_path / "curve.csv")
    assert {r["integrator"] for r in rows} == {"qmc"} and (tmp_path / "branches.png").exists()
    # --workers 2: the solves' scramblings in two processes (the fake solves none)
    assert main(["thresholds", "--tokens", "3", "--alphas", "0.5:2.5:5", "--json", "--workers", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha_c"] == pytest.approx(fake.alpha_c(0.3))

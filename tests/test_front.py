"""One front and one record for every model (``numerics.api``): the two-token rank-one model's records
are the ``1 x 1`` case of the matrices, whichever integrator solved them, the integrator is chosen in one place, and the global minimum is
marked one way."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from derivations import ModelSpec
from numerics import api
from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps, from_scalars


def one_by_one_point(spec=ModelSpec(), alpha=1.0, branch="semantic", train_loss=3e-3, converged=True, **kw):
    """A record of the two-token rank-one model as the line quadrature writes it: ``1 x 1`` matrices."""
    error = {k: 1e-7 for k in ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error",
                               "train_loss")}
    ov = from_scalars(0.1, -0.2, 12.0, 0.15)
    return api.FixedPoint(alpha=alpha, branch=branch, overlaps=ov,
                          hats=MatrixHats(ov.shape, qhat=1e-3, mhat=0.0, Vhat=0.08, thetahat=0.07), test_error=1e-3,
                          train_loss=train_loss, converged=converged, iterations=5, residual=1e-9,
                          error=kw.pop("error", error), diagnostics=kw.pop("diagnostics", {}), model=spec,
                          precision="fast", wall_time=0.1, **kw)


def test_the_two_token_rank_one_record_is_the_one_by_one_case_of_the_matrices():
    p = one_by_one_point()
    assert p.one_by_one and p.integrator == "lines" and p.overlaps.shape == (2, 1, 1, 1)
    # the invariants of 1 x 1 matrices: q and V themselves, the moduli of m and theta
    assert p.invariants == {"q_eigenvalues": [0.1], "V_eigenvalues": [12.0], "m_singular_values": [0.2],
                            "theta_singular_values": [0.15]}
    # the bare names are the packed components of 1 x 1 matrices
    assert {k: p.values[k] for k in ("q", "m", "V", "theta")} == {"q": 0.1, "m": -0.2, "V": 12.0, "theta": 0.15}
    assert p.reported_names() == ("q", "m", "V", "theta")
    # one JSON schema: nested lists, the integrator and the invariants, as for any model
    d = p.to_dict()
    assert d["q"] == [[0.1]] and d["integrator"] == "lines" and d["invariants"] == p.invariants


def test_a_line_solve_writes_the_matrix_schema_and_reads_back():
    line = api.solve(ModelSpec(), 1.5, "semantic", "draft", "lines")
    assert isinstance(line.overlaps, MatrixOverlaps) and isinstance(line.hats, MatrixHats)
    assert line.one_by_one and line.integrator == "lines"
    # each invariant of the line record carries its entry's error, as a QMC record states its own
    assert line.invariant_errors().keys() == {f"{k}_1" for k in line.invariants}
    row = line.to_row()
    assert {"integrator", "q", "theta", "q_eigenvalues_1", "theta_singular_values_1"} <= set(row)
    back = api.from_row({k: "" if v is None else v for k, v in row.items()})
    assert back.overlaps.pack() == pytest.approx(line.overlaps.pack(), rel=1e-15)
    assert back.integrator == "lines" and back.train_loss == line.train_loss


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
    a = one_by_one_point(branch="semantic", train_loss=1.0)
    b = one_by_one_point(branch="positional", train_loss=0.5, converged=False, status="not converged")
    c = one_by_one_point(branch="trivial", train_loss=2.0)
    marked = api.mark_global_minima([a, b, c])
    assert [p.global_minimum for p in marked] == [True, False, False]
    assert all("global_margin" not in p.diagnostics for p in marked)  # a clear winner
    close = one_by_one_point(branch="trivial", train_loss=1.0 + 1e-7)
    first = api.mark_global_minima([a, close])[0]
    assert first.global_minimum and first.diagnostics["global_margin"] == pytest.approx(0.5)
    # equal losses: the order of the branches decides, not the order of the points
    tie = one_by_one_point(branch="positional", train_loss=1.0)
    assert [p.global_minimum for p in api.mark_global_minima([tie, a])] == [False, True]


def test_the_integrator_is_chosen_once_for_every_command():
    assert api.branches(ModelSpec()) == ("semantic", "positional", "trivial")
    assert api.branches(ModelSpec(rank=2))[-1] == "mixed"
    line = api.method(ModelSpec(), ("semantic", "positional"))
    assert line.integrator == "lines" and line.deterministic and line.signed_overlaps and line.precision == "fast"
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

    point = dataclasses.replace(one_by_one_point(ModelSpec(tokens=3)), integrator="qmc")

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

"""``attnphase validate --method gamp``: each point run by message passing on the seeds' instances and
compared with the theory by the same statistics as gradient descent's runs; a run that does not
converge is a row and a line that say so; the results are cached under a key that names the method;
gradient descent stays the default, its files as they were."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from derivations import ModelSpec
from tidyio import read_rows
from validation import gamp as gamp_module
from validation import runs, statistics
from validation.instances import draw_instance, linear_test_error

SPEC = ModelSpec(omega=0.3)
#: a converging point: semantic start, omega = 0.3, alpha = 2 (docs/gamp.md, section 4), tiny d
CONVERGING = ["--omega", "0.3", "--alphas", "2", "--inits", "semantic", "--d", "100", "--seeds", "2",
              "--n-test", "500", "--precision", "draft", "--curve-points", "0", "--tolerance", "1e9"]


def _validate(capsys, out, *argv):
    from attnphase.cli import main

    status = main(["validate", "--no-progress", "--method", "gamp", *argv, "--out", str(out)])
    return status, capsys.readouterr()


def test_a_converging_point_gives_z_scores_from_gamps_runs(tmp_path, capsys):
    status, io = _validate(capsys, tmp_path, *CONVERGING)
    assert status == 0, io.err
    assert io.out.splitlines()[0].startswith("method=gamp damping=0.5,0.25 dtype=float64")
    rows = {(r["init"], r["quantity"]): r for r in read_rows(str(tmp_path / "validate.csv"))}
    assert set(rows) == {("semantic", q) for q in ("test_error", "train_loss", "theta_over_sigma2", "m", "q")} | {
        ("linear", "test_error")}
    for row in rows.values():
        assert (row["method"], row["damping"], row["runs_converged"], row["runs_not_converged"]) == (
            "gamp", "0.5;0.25", "2", "0")
        assert row["n_seeds"] == "2" and math.isfinite(float(row["z"])) and math.isfinite(float(row["theory"]))
        assert "optimizer" not in row and "steps" not in row
    # the rows are the statistics of GAMP's runs on the seeds' instances, computed here again
    point = gamp_module.gamp_point(SPEC, 100, 2.0, "semantic", seeds=2, n_test=500)
    assert not point["not_converged"] and all(r["risk_gradient_norm"] < 1e-6 for r in point["runs"])
    q = [r["q"] for r in point["runs"]]
    assert float(rows[("semantic", "q")]["sim_mean"]) == pytest.approx(np.mean(q), rel=1e-12)
    sem = np.std(q, ddof=1) / math.sqrt(2)
    theory = float(rows[("semantic", "q")]["theory"])
    assert float(rows[("semantic", "q")]["z"]) == pytest.approx((np.mean(q) - theory) / sem, rel=1e-9)
    # the semantic branch's own overlap is compared sign-fixed, theta / sigma^2 = |Q*.Q| / d
    theta = [r["theta_over_sigma2"] for r in point["runs"]]
    assert float(rows[("semantic", "theta_over_sigma2")]["sim_mean"]) == pytest.approx(np.mean(theta), rel=1e-12)
    linear = [linear_test_error(draw_instance(SPEC, 100, 2.0, 0, k, n_test=500)) for k in range(2)]
    assert float(rows[("linear", "test_error")]["sim_mean"]) == pytest.approx(np.mean(linear), rel=1e-12)
    summary = json.loads((tmp_path / "validate.json").read_text())
    assert summary["method"] == "gamp" and summary["status"] == "complete" and summary["not_converged"] == []
    assert summary["simulation"]["dampings"] == [0.5, 0.25]


def test_resume_reuses_the_cached_gamp_runs(tmp_path, capsys, monkeypatch):
    status, _ = _validate(capsys, tmp_path, *CONVERGING)
    assert status == 0
    first = (tmp_path / "validate.csv").read_text()
    cached = sorted(os.listdir(tmp_path / "runs"))
    assert len(cached) == 1 and cached[0].startswith("gamp_")
    key = json.loads((tmp_path / "runs" / cached[0]).read_text())["data"]["key"]
    assert (key["method"], key["dampings"], key["seeds"], key["init"]) == ("gamp", [0.5, 0.25], 2, "semantic")

    def refuse(*args, **kwargs):
        raise AssertionError("GAMP run again although its result is cached")

    monkeypatch.setattr(gamp_module, "gamp_point", refuse)
    status, io = _validate(capsys, tmp_path, *CONVERGING)
    assert status == 0, io.err
    assert (tmp_path / "validate.csv").read_text() == first
    # another damping schedule is another key: run again
    status, io = _validate(capsys, tmp_path, *CONVERGING, "--damping", "0.25")
    assert status != 0 and "run again although its result is cached" in io.err


def test_a_point_that_does_not_converge_is_a_row_that_says_so(tmp_path, capsys):
    # plain GAMP (damping 1) cannot converge at the semantic start (docs/gamp.md, section 2)
    status, io = _validate(capsys, tmp_path, "--damping", "1", "--omega", "0.3", "--alphas", "2", "--inits",
                           "semantic", "--d", "80", "--seeds", "2", "--n-test", "500", "--sim-only")
    assert status == 0, io.err
    lines = [line for line in io.out.splitlines() if line.startswith("NOT CONVERGED")]
    assert len(lines) == 1 and lines[0].startswith("NOT CONVERGED alpha=2 init=semantic: GAMP converged on 0 of 2 runs")
    assert "damping 1" in lines[0] and "nan" not in lines[0].lower()
    rows = read_rows(str(tmp_path / "validate.csv"))
    gamp_rows = [r for r in rows if r["init"] == "semantic"]
    assert {r["quantity"] for r in gamp_rows} == {"test_error", "train_loss", "theta_over_sigma2", "m", "q"}
    assert all((r["branch"], r["n_seeds"], r["runs_converged"], r["runs_not_converged"]) ==
               (statistics.NOT_CONVERGED, "0", "0", "2") for r in gamp_rows)
    # the linear baseline needs no GAMP: it is fitted on both runs' data
    (linear,) = [r for r in rows if r["init"] == "linear"]
    assert linear["n_seeds"] == "2" and math.isfinite(float(linear["sim_mean"]))
    summary = json.loads((tmp_path / "validate.json").read_text())
    (entry,) = summary["not_converged"]
    assert (entry["alpha"], entry["init"], entry["runs"], entry["not_converged"]) == (2.0, "semantic", 2, 2)
    assert all("damping 1" in reason for reason in entry["reasons"]) and summary["status"] == "complete"


def _record(q, theta, run_index):
    return {"run_index": run_index, "test_error": 0.0015, "train_loss": 0.0036, "q": q, "m": 0.01, "m_signed": 0.01,
            "theta_over_sigma2": theta, "theta_over_sigma2_signed": theta, "linear_test_error": 0.002}


def test_a_point_whose_runs_partly_converge_is_compared_through_those_that_did(tmp_path):
    def fake_gamp(spec, d, alpha, init, seeds=1, seed=0, dtype="float64", n_test=1, dampings=(0.5,), progress=None):
        done = [_record(0.11, 0.63, 0), _record(0.12, 0.61, 2)]
        failed = [{"run_index": 1, "seed": seed, "reason": "run 1 of seed 0: GAMP did not converge (stalled)",
                   "linear_test_error": 0.004}]
        return {"model": spec.to_dict(), "d": d, "alpha": alpha, "n": 200, "init": init, "seeds": seeds,
                "seed": seed, "method": "gamp", "damping": list(dampings), "dtype": dtype, "data": "numpy",
                "n_test": n_test, "runs": done, "not_converged": failed}

    kw = {"seeds": 3, "seed": 0, "dtype": "float64", "n_test": 1, "dampings": (0.5,)}
    summary = runs.run_validate(SPEC, [2.0], ["semantic"], 100, kw, str(tmp_path), simulate_fn=fake_gamp,
                                method="gamp")
    rows = {(r["init"], r["quantity"]): r for r in read_rows(str(tmp_path / "validate.csv"))}
    q = rows[("semantic", "q")]
    assert (q["n_seeds"], q["runs_converged"], q["runs_not_converged"], q["branch"]) == ("2", "2", "1", "semantic")
    assert float(q["sim_mean"]) == pytest.approx(0.115)
    assert float(rows[("linear", "test_error")]["sim_mean"]) == pytest.approx((0.002 * 2 + 0.004) / 3)
    assert [(p["runs"], p["not_converged"]) for p in summary["not_converged"]] == [(3, 1)]


def test_gradient_descent_stays_the_default_with_its_files_as_they_were(tmp_path):
    from attnphase.cli import build_parser

    args = build_parser().parse_args(["validate"])
    assert args.method == "gd"

    def fake_simulate(spec, d, alpha, init, **kw):
        runs_ = [{**_record(0.11 + 0.01 * k, 0.6, k), "theta_over_sigma2_signed": 0.6} for k in range(2)]
        return {"model": spec.to_dict(), "d": d, "alpha": alpha, "init": init, "steps": 10, "lr": 0.15,
                "optimizer": "gd", "dtype": "float32", "seed": 0, "n_test": 10, "runs": runs_}

    summary = runs.run_validate(SPEC, [2.0], ["semantic"], 100, {"seeds": 2, "seed": 0}, str(tmp_path),
                                simulate_fn=fake_simulate)
    with open(tmp_path / "validate.csv") as f:
        header = f.readline().strip().split(",")
    assert tuple(header) == statistics.STAT_FIELDS + tuple(SPEC.to_columns()) + statistics.RUN_FIELDS
    assert "method" not in header and summary["method"] == "gd" and "not_converged" not in summary
    assert all(name.startswith("sim_") for name in os.listdir(tmp_path / "runs"))


def test_the_numpy_linear_baseline_is_the_simulators():
    pytest.importorskip("torch")
    from validation.instances import to_problem
    from validation.simulate import fit_linear_baseline
    from validation.simulate import linear_test_error as simulator_linear

    for spec in (SPEC, ModelSpec(tokens=3)):
        instance = draw_instance(spec, 60, 1.5, 3, 1, n_test=300)
        problem = to_problem(instance)
        assert linear_test_error(instance) == pytest.approx(
            simulator_linear(fit_linear_baseline(problem.train), problem.test), rel=1e-10)


def test_validate_by_message_passing_runs_without_torch(tmp_path):
    from tests.test_light_install import _without_torch

    proc = _without_torch("validate", "--method", "gamp", "--d", "60", "--alphas", "2", "--inits", "semantic",
                          "--seeds", "2", "--n-test", "200", "--sim-only", "--no-progress", "--out", "v", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "v" / "validate.csv").is_file() and proc.stdout.startswith("method=gamp")


def test_a_finite_size_scan_by_message_passing_fits_gamps_runs(tmp_path):
    kw = {"seeds": 2, "seed": 0, "dtype": "float64", "n_test": 300, "dampings": (0.5, 0.25)}
    summary = runs.run_dscan(SPEC, 2.0, ["semantic"], [60, 80, 100], kw, str(tmp_path), method="gamp")
    rows = read_rows(str(tmp_path / "dscan.csv"))
    assert {r["method"] for r in rows} == {"gamp"} and summary["method"] == "gamp"
    assert summary["not_converged"] == []
    fit = next(f for f in summary["fits"] if f["quantity"] == "q")
    assert fit["branch"] == "semantic" and fit["d_values"] == "60;80;100" and math.isfinite(fit["a"])
    # each d has its own seed (validation.runs.scan_seed), as gradient descent's scan
    point = gamp_module.gamp_point(SPEC, 80, 2.0, "semantic", seeds=2, seed=runs.scan_seed(0, 80), n_test=300)
    (q80,) = [r for r in rows if r["d"] == "80" and r["quantity"] == "q"]
    assert float(q80["sim_mean"]) == pytest.approx(np.mean([r["q"] for r in point["runs"]]), rel=1e-12)

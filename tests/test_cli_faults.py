"""Faults and bad input at the command line: every class ends in one line on stderr and
the exit status of README.md ("Exit statuses"), never in a traceback, a NaN reported as
a number, a half-written folder or lost data.

Fast settings throughout: draft precision, tiny grids, ``d = 20``, a few steps, and the
slow solver replaced where only the command's handling of its outcome is under test.
Resumes are checked against an uninterrupted run row by row (values, not times).
"""
from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from attnphase import cli
from attnphase.commands.sweep import cmd_phase_diagram
from derivations.spec import ModelSpec
from numerics.overlaps import HatOverlaps, Overlaps
from numerics.result import FixedPoint
from tidyio import ROW_CHECK, finite_json, from_json, json_text, read_csv_rows, render_csv
from attnphase.sweeps.store import MANIFEST, THEORY_CSV, THRESHOLDS_CSV
from tests.fakes import fake_theory_task, kill_fake_sweep_when

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
#: subprocesses (and their Dask workers) import tests.fakes and this checkout
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: columns that differ between two runs of the same task: times, and the checksum covering them
VOLATILE = {"task_wall_time", "wall_time", "train_time", "step_time", ROW_CHECK}
SIM = ["--d", "20", "--steps", "5", "--n-test", "50"]


def strict_json(text: str):
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity``."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def run(argv, capsys) -> tuple:
    """``attnphase argv`` in this process: ``(status, stdout, stderr lines)``; never a traceback."""
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return status, out, [line for line in err.splitlines() if line.strip()]


def one_line(err: list, command: str) -> str:
    assert len(err) == 1, err
    assert err[0].startswith(f"attnphase {command}: "), err
    return err[0]


def left_over_temporary_files(folder: Path) -> list:
    return [p for p in folder.rglob("*") if ".tmp" in p.name or p.name.startswith(".attnphase-write-test")]


def table(path: Path) -> list:
    """A sweep CSV as sorted rows without the volatile columns."""
    _, rows = read_csv_rows(path)
    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    return sorted(rows, key=lambda r: (r["task"], r.get("alpha", ""), r.get("branch", "")))


# --------------------------------------------------------------------------- fakes of the slow solver


def fixed_point(spec, alpha, branch, **over) -> FixedPoint:
    """A solution record with made-up values of the right shape (no solver)."""
    ov = Overlaps(q=0.1, m=0.25 if branch == "positional" else 0.0, V=5.0, theta=0.15 if branch == "semantic" else 0.0)
    fields = dict(alpha=alpha, branch=branch, overlaps=ov, hats=HatOverlaps(1.0, 0.0, 0.5, 0.0),
                  test_error=0.002 + 0.001 * (branch == "positional"), train_loss=0.003 + 0.001 * alpha,
                  converged=True, iterations=5, residual=1e-12, error={"q": 1e-8}, diagnostics={}, model=spec,
                  precision="draft", wall_time=0.01)
    fields.update(over)
    return FixedPoint(**fields)


def fake_follow_branch(spec, alphas, branch, precision="fast", progress=None, **kw):
    from numerics.branches.follow import BranchCurve

    points = []
    for a in alphas:
        points.append(fixed_point(spec, float(a), branch))
        if progress:
            progress(points[-1])
    return BranchCurve(branch, points, [])


def raising(exc):
    def f(*args, **kwargs):
        raise exc

    return f


# --------------------------------------------------------------------------- 1. data loss on resume

SWEEP = ["phase-diagram", "--omega", "0:0.45:10", "--alpha", "0.2:2.2:5", "--quiet", "--no-plot"]


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as cl:
        yield cl


def sweep(out, client, capsys, *extra) -> tuple:
    args = cli.build_parser().parse_args([*SWEEP, "--out", str(out), *extra])
    status = cmd_phase_diagram(args, theory_task=fake_theory_task, client=client)
    return status, capsys.readouterr()


def rows_per_task(path: Path) -> dict:
    counts = {}
    for r in read_csv_rows(path)[1]:
        counts[r["task"]] = counts.get(r["task"], 0) + 1
    return counts


def test_a_killed_then_truncated_and_garbled_sweep_resumes_to_the_rows_of_an_uninterrupted_one(
        client, tmp_path, capsys, caplog):
    out = tmp_path / "killed"
    kill_fake_sweep_when(lambda: sum(n == 5 for n in rows_per_task(out / THEORY_CSV).values()) >= 6,
                         [*SWEEP, "--out", str(out)], ENV)
    theory = out / THEORY_CSV
    lines = theory.read_bytes().split(b"\n")
    assert len(lines) > 12
    # garble a value in the middle of a finished task's row, then cut the file inside a row
    lines[5] = lines[5].replace(b",", b",9", 1)
    damaged = b"\n".join(lines[:11]) + b"\n" + lines[11][: len(lines[11]) // 2]
    theory.write_bytes(damaged)
    # done: the branch tasks with all 5 rows among the intact lines, and the threshold tasks
    intact = [dict(zip(lines[0].decode().split(","), line.decode().split(",")))["task"]
              for i, line in enumerate(lines[1:11], 1) if i != 5]
    done = sum(intact.count(k) == 5 for k in set(intact)) + len(read_csv_rows(out / THRESHOLDS_CSV)[1])
    status, captured = sweep(out, client, capsys)
    assert status == 0, captured.err
    report = captured.out.splitlines()[0]
    assert report.startswith(f"30 tasks: {done} already done, {30 - done} computed, 0 failed"), report
    # the damaged file is kept under another name, and the warning names both
    aside = list(out.glob(THEORY_CSV + ".unreadable-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert any(str(theory) in r.getMessage() and aside[0].name in r.getMessage() for r in caplog.records)
    reference = tmp_path / "uninterrupted"
    assert sweep(reference, client, capsys)[0] == 0
    for name in (THEORY_CSV, THRESHOLDS_CSV):
        assert table(out / name) == table(reference / name), name
    assert all(n == 5 for n in rows_per_task(out / THEORY_CSV).values())
    assert not (out / ".lock").exists() and not left_over_temporary_files(out)


@pytest.mark.parametrize("damage", ["random bytes", "truncated inside the header", "NUL bytes", "rows deleted"])
def test_a_damaged_sweep_csv_is_moved_aside_and_its_tasks_computed_again(client, tmp_path, capsys, damage):
    out = tmp_path / "out"
    assert sweep(out, client, capsys, "--omega", "0:0.1:2")[0] == 0
    reference = {name: table(out / name) for name in (THEORY_CSV, THRESHOLDS_CSV)}
    path = out / THEORY_CSV
    text = path.read_bytes()
    lines = text.split(b"\n")
    damaged = {"random bytes": os.urandom(len(text)),
               "truncated inside the header": text[:20],
               "NUL bytes": text[:300] + b"\x00" * 200 + text[500:],
               "rows deleted": b"\n".join(lines[:3] + lines[6:])}[damage]
    path.write_bytes(damaged)
    status, captured = sweep(out, client, capsys, "--omega", "0:0.1:2")
    assert status == 0, captured.err
    assert "already done" in captured.out and " 0 computed" not in captured.out
    aside = list(out.glob(THEORY_CSV + ".unreadable-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert {name: table(out / name) for name in reference} == reference


def test_a_garbled_manifest_is_moved_aside_and_the_rows_of_these_settings_kept(client, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(out, client, capsys, "--omega", "0.1")[0] == 0
    before = table(out / THEORY_CSV)
    (out / MANIFEST).write_text('{"format": 1, "sect')
    status, captured = sweep(out, client, capsys, "--omega", "0.1")
    assert status == 0 and "3 already done, 0 computed" in captured.out
    assert table(out / THEORY_CSV) == before and strict_json((out / MANIFEST).read_text())["sections"]
    assert list(out.glob(MANIFEST + ".unreadable-*"))
    # without a manifest, rows of other settings are refused, not mixed with new ones
    (out / MANIFEST).unlink()
    status, _, err = run([*SWEEP, "--omega", "0.1", "--lam", "0.02", "--out", out], capsys)
    assert status == 2 and "other settings" in one_line(err, "phase-diagram")


def test_validate_recomputes_a_truncated_or_garbled_cached_run_and_keeps_the_others(tmp_path, capsys, caplog):
    argv = ["validate", "--sim-only", "--alphas", "1,2", "--inits", "semantic", "--seeds", "2", *SIM,
            "--out", tmp_path]
    assert run(argv, capsys)[0] == 0
    reference = (tmp_path / "validate.csv").read_text()
    cached = sorted((tmp_path / "runs").glob("sim_*.json"))
    assert len(cached) == 2
    cached[0].write_text(cached[0].read_text()[:100])  # truncated
    cached[1].write_text(cached[1].read_text().replace('"test_error": 0.', '"test_error": 1.', 1))  # garbled
    status, _, err = run(argv, capsys)
    # the warnings are logged, and summed up in one line
    assert status == 0 and "2 warnings logged, the first: " in one_line(err, "validate")
    assert (tmp_path / "validate.csv").read_text() == reference
    assert len(list((tmp_path / "runs").glob("sim_*.json.unreadable-*"))) == 2
    assert sum("unreadable cached simulation" in r.getMessage() for r in caplog.records) == 2
    assert strict_json((tmp_path / "validate.json").read_text())["status"] == "complete"


def test_validate_solves_again_a_garbled_cached_theory_point(tmp_path, capsys, monkeypatch):
    import validation.theory_cache as tc

    solves = []

    def solve(spec, alpha, branch, precision="fast"):
        solves.append((alpha, branch))
        return types.SimpleNamespace(q=0.1, m=0.0, V=2.0, theta=0.1 if branch == "semantic" else 0.0,
                                     test_error=0.001, train_loss=0.002, converged=True)

    monkeypatch.setattr(tc, "default_theory", lambda precision: tc.Theory(
        solve, lambda spec: types.SimpleNamespace(test_error=0.002), precision))
    argv = ["validate", "--alphas", "1", "--inits", "semantic", "--seeds", "2", "--curve-points", "0",
            "--tolerance", "1e9", *SIM, "--out", tmp_path]
    assert run(argv, capsys)[0] == 0
    first = len(solves)
    stored = sorted((tmp_path / "theory").glob("theory_*.json"))
    text = stored[0].read_text()
    assert '"q": 0.1' in text
    stored[0].write_text(text.replace('"q": 0.1', '"q": 0.2'))  # a changed value
    assert run(argv, capsys)[0] == 0
    assert len(solves) == first + 1 and list((tmp_path / "theory").glob("*.unreadable-*"))


# --------------------------------------------------------------------------- 2. non-finite numbers


def test_a_diverged_simulation_names_its_seed_and_step_and_exits_1(capsys):
    status, out, err = run(["simulate", "--lr", "1e6", "--seeds", "2", "--json", "--d", "20", "--steps", "30"], capsys)
    line = one_line(err, "simulate")
    assert status == 1 and out == ""
    assert "SimulationDiverged: run 0 of seed 0 diverged at step" in line and "lr = 1e+06" in line


def test_the_json_writer_never_writes_nan_and_says_why_a_value_is_null():
    import numpy as np

    value = {"a": float("nan"), "b": [1.0, float("inf"), [2.0, -math.inf]], "c": np.float32(0.5),
             "d": {"e": np.array([1.0, np.nan])}, "f": (1, 2)}
    clean = strict_json(json_text(value))
    assert clean["a"] is None and clean["b"] == [1.0, None, [2.0, None]] and clean["d"] == {"e": [1.0, None]}
    assert clean["null_reasons"] == {"a": "not finite (nan)", "b.1": "not finite (inf)",
                                     "b.2.1": "not finite (-inf)", "d.e.1": "not finite (nan)"}
    assert clean["c"] == 0.5 and clean["f"] == [1, 2]
    back = from_json(clean)
    assert math.isnan(back["a"]) and back["b"][1] == math.inf and back["b"][2][1] == -math.inf
    assert finite_json(back) == clean
    # a list of records: each says why its own values are null
    assert strict_json(json_text([{"x": math.nan}, {"x": 1.0}])) == [
        {"x": None, "null_reasons": {"x": "not finite (nan)"}}, {"x": 1.0}]


def test_solve_json_holds_no_nan(capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "solve", lambda spec, alpha, branch, precision="fast", *_, **__: fixed_point(
        spec, alpha, branch, residual=float("nan"), error={"q": float("inf")}))
    status, out, err = run(["solve", "--alpha", "1", "--branch", "semantic", "--json"], capsys)
    got = strict_json(out)
    assert got["residual"] is None and got["error"]["q"] is None
    assert {"residual", "error.q"} <= set(got["null_reasons"])


def test_validate_json_and_its_files_hold_no_nan(tmp_path, capsys, monkeypatch):
    """With one start that never crosses the baseline, the theory crossing is NaN."""
    import validation.theory_cache as tc

    def solve(spec, alpha, branch, precision="fast"):
        return types.SimpleNamespace(q=0.1, m=0.0, V=2.0, theta=0.1, test_error=0.5, train_loss=0.002,
                                     converged=True)

    monkeypatch.setattr(tc, "default_theory", lambda precision: tc.Theory(
        solve, lambda spec: types.SimpleNamespace(test_error=0.002), precision))
    status, out, err = run(["validate", "--alphas", "1,2", "--inits", "semantic", "--seeds", "2",
                            "--curve-points", "0", "--tolerance", "1e9", "--json", *SIM, "--out", tmp_path], capsys)
    assert status == 0
    summary = strict_json(out)
    assert summary["crossing"]["theory_alpha_semantic_vs_linear"] is None
    assert summary["null_reasons"]["crossing.theory_alpha_semantic_vs_linear"] == "not finite (nan)"
    for path in [tmp_path / "validate.json", *(tmp_path / "runs").glob("*.json"), *(tmp_path / "theory").glob("*")]:
        strict_json(path.read_text())


# --------------------------------------------------------------------------- 3. one line, not a traceback


@pytest.mark.parametrize("argv", [
    ["curve", "--out", "{folder}"],
    ["curve", "--out", "/proc/x.csv"],
    ["run", "--out", "{file}"],
    ["run", "--out", "/proc/x"],
    ["validate", "--out", "{file}"],
    ["validate", "--out", "{file}/sub"],
    ["plot", "{diagram}", "--out", "{file}"],
    ["plot", "{diagram}", "--out", "/proc/x"],
    ["histogram", "--out", "{file}"],
    ["phase-diagram", "--out", "{file}"],
    ["phase-diagram", "--out", "/proc/x"],
])
def test_an_unusable_output_path_is_refused_before_any_work(argv, tmp_path, capsys, monkeypatch):
    import numerics.api as api
    import validation.simulate as simulate

    for name in ("follow_branch", "follow", "thresholds", "solve"):
        monkeypatch.setattr(api, name, raising(AssertionError("work started")))
    monkeypatch.setattr(simulate, "simulate", raising(AssertionError("work started")))
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "diagram.csv").write_text("omega,alpha,branch\n0,1,semantic\n")
    fill = {"folder": tmp_path / "folder", "file": tmp_path / "file", "diagram": tmp_path / "diagram.csv"}
    argv = [a.format(**fill) for a in argv]
    before = sorted(tmp_path.rglob("*"))
    status, out, err = run(argv, capsys)
    assert status == 2 and "--out: " in one_line(err, argv[0])
    assert sorted(tmp_path.rglob("*")) == before


def test_a_bad_precision_is_a_choice_list(capsys, tmp_path):
    status, _, err = run(["validate", "--precision", "bogus", "--out", tmp_path / "v"], capsys)
    line = one_line(err, "validate")
    assert status == 2 and "invalid choice: 'bogus' (choose from 'draft', 'fast', 'high')" in line
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("content, expected", [
    ("a,b\n1,2\n", "no column alpha"),
    (None, "unreadable"),
    ("alpha,branch,q,m,theta,test_error,global_minimum,sigma,lam,omega,attention,teacher,regulariser\n"
     "one,semantic,0.1,0,0.1,0.1,True,0.5,0.01,0.3,softmax,tanh,l2\n", "alpha = 'one' is not a finite number"),
])
def test_curve_compare_with_a_file_that_is_not_a_curve_is_refused_before_the_curve(
        content, expected, tmp_path, capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "follow_branch", raising(AssertionError("work started")))
    other = tmp_path / "other.csv"
    other.write_bytes(b"\xff\xfe garbage\x00\n" * 3 if content is None else content.encode())
    status, _, err = run(["curve", "--figure", "--compare", other, "--out", tmp_path / "c.csv"], capsys)
    line = one_line(err, "curve")
    assert status == 2 and f"--compare: {other}: not a curve CSV" in line and expected in line
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.parametrize("content, expected", [
    ("a,b\n1,2\n", "no column omega, alpha_c"),
    (None, "unreadable"),
    ("omega,alpha_c,alpha_c_error,alpha_l,alpha_l_error\n0.1,x,0,1,0\n", "alpha_c = 'x' is not a number"),
])
def test_plot_names_the_thresholds_file_that_is_wrong(content, expected, client, tmp_path, capsys):
    assert sweep(tmp_path / "d", client, capsys, "--omega", "0.1")[0] == 0
    bad = tmp_path / "bad.csv"
    bad.write_bytes(os.urandom(200).replace(b"\n", b"") + b"\n" + os.urandom(50) if content is None
                    else content.encode())
    status, _, err = run(["plot", tmp_path / "d" / THEORY_CSV, "--thresholds", bad, "--out", tmp_path / "f"], capsys)
    line = one_line(err, "plot")
    assert status == 2 and line.startswith(f"attnphase plot: error: --thresholds: {bad}: not a thresholds CSV")
    assert expected in line and not (tmp_path / "f").exists()
    # the sibling thresholds.csv, damaged, is named too (not FILE.csv)
    (tmp_path / "d" / THRESHOLDS_CSV).write_bytes(bad.read_bytes())
    status, _, err = run(["plot", tmp_path / "d" / THEORY_CSV], capsys)
    assert status == 2 and "thresholds.csv next to FILE.csv" in one_line(err, "plot")


@pytest.mark.parametrize("argv, flag", [
    (["thresholds", "--alpha", "1:1:5"], "--alpha"),
    (["thresholds", "--alpha", "1:2:2"], "--alpha"),
    (["thresholds", "--alpha", "1"], "--alpha"),
    (["run", "--alpha", "0.5:1:2"], "--alpha"),
    (["curve", "--alpha", "2:1:3"], "--alpha"),
    (["simulate", "--init", "mixed"], "--init"),
    (["validate", "--inits", "semantic,mixed"], "--inits"),
])
def test_degenerate_ranges_and_impossible_starts_are_refused_up_front(argv, flag, capsys):
    status, _, err = run(argv, capsys)
    assert status == 2 and f"error: {flag}" in one_line(err, argv[0])


@pytest.mark.parametrize("exc, expected", [
    ("numerics.solver.iteration.SolverError", "SolverError: boom"),
    ("numerics.thresholds.record.ThresholdError", "ThresholdError: boom"),
    ("numerics.solver.root_finding.RootFindingError", "RootFindingError: boom"),
    ("numerics.fixed_points.errors.BranchLost", "BranchLost: boom"),
    ("numerics.fixed_points.errors.BranchNotFound", "BranchNotFound: boom"),
    ("numerics.thresholds.record.BranchAbsent", "BranchAbsent: boom"),
    ("validation.simulate.SimulationDiverged", "SimulationDiverged: run 1 of seed 2 diverged at step 3"),
    ("OSError", "No space left on device: /x/curve.csv"),
    ("KeyError", "KeyError: 'boom' (a fault of the program; run with -v for the traceback)"),
])
def test_every_failure_is_one_line_and_exit_1_and_a_traceback_only_with_v(exc, expected, capsys, monkeypatch):
    import importlib

    import numerics.api as api

    if exc == "OSError":
        error = OSError(errno.ENOSPC, "No space left on device", "/x/curve.csv")
    elif exc == "KeyError":
        error = KeyError("boom")
    else:
        module, name = exc.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        error = cls(2, 1, 3) if name == "SimulationDiverged" else cls("boom")
    monkeypatch.setattr(api, "solve_all", raising(error))
    status, out, err = run(["solve", "--alpha", "1"], capsys)
    assert status == 1 and expected in one_line(err, "solve")
    assert cli.main(["-v", "solve", "--alpha", "1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and expected in err[-1]


def test_thresholds_not_found_is_one_line_and_json_keeps_the_baseline(capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "thresholds", raising(api.ThresholdError("alpha_c not bracketed in [0.5, 2.5]")))
    status, out, err = run(["thresholds", "--json", "--precision", "draft"], capsys)
    assert status == 1 and "alpha_c not bracketed" in one_line(err, "thresholds")
    got = strict_json(out)
    assert got["alpha_c"] is None and got["linear_test_error"] > 0


def test_a_crossing_beyond_the_scan_says_how_to_look_further(capsys, monkeypatch):
    import numerics.api as api

    beyond = api.CrossingBeyondScan("alpha_c: F_pos - F_sem is negative on alpha in [0.5, 7.5] where both "
                                    "branches exist (20 points): the crossing lies above the scan")
    monkeypatch.setattr(api, "thresholds", raising(beyond))
    status, _, err = run(["thresholds", "--precision", "draft"], capsys)
    line = one_line(err, "thresholds")
    assert status == 1 and "the crossing lies above the scan" in line
    assert "--alphas START:STOP:N with a range beyond the one scanned" in line and "0.5 to 2.5" in line
    # a branch that is absent is no matter of the scan's range
    monkeypatch.setattr(api, "thresholds", raising(api.ThresholdError("alpha_c: the positional branch was not found")))
    status, _, err = run(["thresholds", "--precision", "draft"], capsys)
    assert status == 1 and "--alphas START" not in one_line(err, "thresholds")


# --------------------------------------------------------------------------- 4. half-written outputs


@pytest.mark.parametrize("failure, status", [("ThresholdError", 1), ("SolverError", 1), ("KeyboardInterrupt", 130)])
def test_run_leaves_a_folder_marked_incomplete_when_the_thresholds_fail(failure, status, tmp_path, capsys,
                                                                        monkeypatch):
    import numerics.api as api
    from numerics.solver.iteration import SolverError

    error = {"ThresholdError": api.ThresholdError("alpha_c not bracketed"), "SolverError": SolverError("boom"),
             "KeyboardInterrupt": KeyboardInterrupt()}[failure]
    monkeypatch.setattr(api, "follow_branch", fake_follow_branch)
    monkeypatch.setattr(api, "thresholds", raising(error))
    got, out, err = run(["run", "--alpha", "0.5:1.5:3", "--out", tmp_path], capsys)
    assert got == status and len(err) == 1
    summary = strict_json((tmp_path / "summary.json").read_text())
    assert summary["status"] == "incomplete"
    assert (failure if failure != "ThresholdError" else "alpha_c not bracketed") in summary["error"]
    assert (tmp_path / "curve.csv").exists() and not left_over_temporary_files(tmp_path)


def test_a_complete_run_says_so(tmp_path, capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "follow_branch", fake_follow_branch)
    found = types.SimpleNamespace(alpha_c=1.0, alpha_c_error=1e-4, alpha_l=1.2, alpha_l_error=1e-4, alpha_l_status="ok",
                                  spinodals=[], transitions=("a crossing",), scan=(), to_dict=lambda: {"alpha_c": 1.0, "alpha_l": 1.2,
                                                                 "alpha_l_error": float("nan")})
    monkeypatch.setattr(api, "thresholds", lambda spec, precision, alphas=None, integrator="auto", names=None, scan=None,
                        progress=None: found)
    status, out, err = run(["run", "--alpha", "0.5:1.5:3", "--out", tmp_path, "--json"], capsys)
    assert status == 0 and not err
    assert strict_json(out)["status"] == "complete" == strict_json((tmp_path / "summary.json").read_text())["status"]
    assert strict_json(out)["null_reasons"] == {"alpha_l_error": "not finite (nan)",
                                                "thresholds.alpha_l_error": "not finite (nan)"}


def test_a_scheduler_that_cannot_be_reached_leaves_nothing_in_the_output_folder(tmp_path, capsys, monkeypatch):
    import socket

    import attnphase.sweeps.runner as runner

    monkeypatch.setattr(runner, "open_client", functools.partial(runner.open_client, connect_timeout="1s"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for out in (tmp_path / "new", tmp_path):
        status, _, err = run([*SWEEP, "--scheduler", f"tcp://127.0.0.1:{port}", "--out", out], capsys)
        assert status == 2 and "--scheduler: cannot connect" in one_line(err, "phase-diagram")
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- 5. Ctrl-C


CTRL_C_SCRIPT = textwrap.dedent("""
    import sys
    import torch  # noqa: F401  (imported before "ready": Ctrl-C then lands in the command)
    import validation.simulate  # noqa: F401
    from attnphase import cli
    print("ready", flush=True)
    # Adam: gradient descent stops at its float fixed point, at d = 50 within a second
    sys.exit(cli.main(["simulate", "--d", "50", "--steps", "100000000", "--optimizer", "adam"]))
""")


def test_ctrl_c_exits_130_with_one_line(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(CTRL_C_SCRIPT)
    # a job started in the background by a shell without job control inherits SIGINT ignored, and so
    # would this child: it gets the default disposition, as a command typed at a terminal has
    proc = subprocess.Popen([PY, str(script)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines() == ["attnphase simulate: interrupted"], err


# --------------------------------------------------------------------------- the general simulator's table


def test_simulate_shows_what_the_records_hold_for_any_shape(capsys):
    status, out, err = run(["simulate", "--rank", "2", "--init", "mixed", "--seeds", "2", *SIM], capsys)
    assert status == 0 and not err
    header = out.splitlines()[1].split()
    assert header[:4] == ["run", "test_error", "train_loss", "linear_test_error"]
    assert {"q_eig_1", "q_eig_2", "m_sv_1", "theta_sv_1", "m_col_max", "theta_over_sigma2_col_min"} <= set(header)
    status, out, err = run(["simulate", "--rank", "2", "--init", "mixed", "--seeds", "2", "--json", *SIM], capsys)
    got = strict_json(out)
    assert status == 0 and {"q_eig_2_mean", "m_col_max_std"} <= set(got) and "m" not in got["runs"][0]
    status, out, err = run(["simulate", "--seeds", "2", *SIM], capsys)
    assert out.splitlines()[1].split() == ["run", "test_error", "train_loss", "m", "theta_over_sigma2", "q",
                                           "linear_test_error", "s/step"]


# --------------------------------------------------------------------------- the last faults: inputs, outputs, ranges


CURVE_ROW = ("alpha,branch,q,m,theta,test_error,global_minimum,sigma,lam,omega,attention,teacher,regulariser\n"
             "1.0,semantic,0.1,0,0.1,0.002,True,0.5,0.01,0.3,softmax,softmax,ridge\n")


def test_an_output_that_is_also_an_input_is_refused_and_the_input_kept(tmp_path, capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "follow_branch", raising(AssertionError("work started")))
    curve = tmp_path / "X.csv"
    curve.write_text(CURVE_ROW)
    for out in (curve, tmp_path / "." / "X.csv"):
        status, _, err = run(["curve", "--out", out, "--figure", "--compare", curve], capsys)
        assert status == 2 and "is also the input --compare" in one_line(err, "curve")
    # the figure beside the CSV is an output too
    figure_named = tmp_path / "Y.png"
    figure_named.write_text(CURVE_ROW)
    status, _, err = run(["curve", "--out", tmp_path / "Y.csv", "--figure", "--compare", figure_named], capsys)
    assert status == 2 and "--figure: " in one_line(err, "curve")
    assert curve.read_text() == CURVE_ROW == figure_named.read_text()


def test_plot_refuses_to_draw_over_its_own_input(client, tmp_path, capsys):
    assert sweep(tmp_path / "d", client, capsys, "--omega", "0:0.1:2")[0] == 0
    thresholds = tmp_path / "d" / "theory_diagram.png"  # a thresholds CSV under the name of plot's figure
    thresholds.write_bytes((tmp_path / "d" / THRESHOLDS_CSV).read_bytes())
    before = thresholds.read_bytes()
    status, _, err = run(["plot", tmp_path / "d" / THEORY_CSV, "--thresholds", thresholds], capsys)
    assert status == 2 and "is also the input --thresholds" in one_line(err, "plot")
    assert thresholds.read_bytes() == before


def test_an_out_path_ending_in_a_slash_is_a_folder(tmp_path, capsys):
    status, _, err = run(["curve", "--out", f"{tmp_path / 'adir'}/"], capsys)
    assert status == 2 and "is a folder" in one_line(err, "curve")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, parameter", [
    (["--sigma", "1e300"], "sigma"), (["--sigma", "100"], "sigma"), (["--sigma", "1e6"], "sigma"),
    (["--sigma", "0"], "sigma"), (["--lam", "0"], "lam"), (["--lam", "-1"], "lam"), (["--omega", "1.5"], "omega"),
    (["--A", "0.6,0.5,0.4,0.6"], "A"),
])
def test_every_model_parameter_has_a_range_and_a_reason(argv, parameter, capsys, tmp_path):
    status, _, err = run(["solve", "--alpha", "1", "--precision", "draft", *argv], capsys)
    line = one_line(err, "solve")
    assert status == 2 and f"error: {parameter}: " in line and "(" in line, line  # the reason in brackets
    assert "np.float64" not in line and "RuntimeWarning" not in line
    # the commands that run many solves refuse it before the first
    for command in ([*SWEEP, "--omega", "0.3"], ["validate", "--seeds", "1"]):
        status, _, err = run([*command, *argv, "--out", tmp_path / "o"], capsys)
        assert status == 2 and re.search(f"error: (--)?{parameter}s?: ", one_line(err, command[0]))
    assert not (tmp_path / "o").exists()


def test_thresholds_scan_without_an_integrator_column_says_what_it_is_and_what_is_needed(tmp_path, capsys):
    curve = tmp_path / "c.csv"
    curve.write_text(CURVE_ROW.replace("global_minimum,", "global_minimum,converged,train_loss,precision,")
                     .replace("True,0.5", "True,True,0.003,draft,0.5"))
    status, _, err = run(["thresholds", "--scan", curve, "--precision", "draft"], capsys)
    line = one_line(err, "thresholds")
    assert status == 2 and "without an integrator column" in line and "attnphase curve --out CSV" in line
    assert "'integrator'" not in line


def test_the_mixed_branch_on_rank_one_names_the_option_given(capsys):
    for argv, flag in ((["curve", "--branches", "mixed"], "--branches"), (["solve", "--alpha", "1", "--branch", "mixed"],
                                                                          "--branch")):
        status, _, err = run(argv, capsys)
        assert status == 2 and f"error: {flag}: the mixed branch needs --rank >= 2" in one_line(err, argv[0])


def test_plot_refuses_a_folder_a_curve_csv_and_a_non_numeric_cell(client, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    status, _, err = run(["plot", tmp_path / "adir"], capsys)
    assert status == 2 and "adir: is a folder" in one_line(err, "plot")
    curve = tmp_path / "curve.csv"
    curve.write_text(CURVE_ROW)
    status, _, err = run(["plot", curve], capsys)
    assert status == 2 and "a curve CSV of attnphase curve or run (omega = 0.3)" in one_line(err, "plot")
    assert sweep(tmp_path / "d", client, capsys, "--omega", "0:0.1:2")[0] == 0
    theory = tmp_path / "d" / THEORY_CSV
    header, rows = read_csv_rows(theory)
    rows[1]["train_loss"] = "abc"
    bad = tmp_path / "bad" / THEORY_CSV
    bad.parent.mkdir()
    bad.write_text(render_csv(header, rows, True))  # checksums of the changed rows: only the cell is wrong
    status, _, err = run(["plot", bad, "--no-thresholds"], capsys)
    assert status == 2 and "data row 2: train_loss = 'abc' is not a number" in one_line(err, "plot")
    assert list(bad.parent.iterdir()) == [bad]


def test_library_warnings_are_one_summary_line_and_shown_with_v(capsys, monkeypatch):
    import logging
    import warnings

    import numerics.api as api

    calls = []

    def noisy(*args, **kwargs):
        calls.append(1)
        for i in range(3):
            logging.getLogger("numerics.thresholds.deterministic").warning("long warning %d: %s", i, "x" * 2000)
        warnings.warn(f"overflow encountered in exp (call {len(calls)})", RuntimeWarning)  # new text: shown again
        raise api.ThresholdError("alpha_c not bracketed")

    monkeypatch.setattr(api, "thresholds", noisy)
    status, out, err = run(["thresholds", "--precision", "draft"], capsys)
    line = one_line(err, "thresholds")
    assert status == 1 and "alpha_c not bracketed" in line and "4 warnings logged, the first: long warning 0" in line
    assert len(line) < 400 and "-v shows them" in line
    assert cli.main(["-v", "thresholds", "--precision", "draft"]) == 1
    err = capsys.readouterr().err
    assert err.count("x" * 2000) == 3 and "RuntimeWarning" in err
    # a failure that lists every attempt is cut to a readable line; -v shows it whole
    monkeypatch.setattr(api, "thresholds", raising(api.ThresholdError("; ".join(["attempt failed"] * 500))))
    status, out, err = run(["thresholds", "--precision", "draft"], capsys)
    line = one_line(err, "thresholds")
    assert status == 1 and len(line) < 800 and line.endswith("(cut at 600 characters; -v shows all of it)")


def test_the_dashboard_port_in_use_gives_no_warning(caplog):
    import socket
    import warnings

    from attnphase.sweeps.runner import open_client

    with socket.socket() as s, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # Dask's default dashboard port, taken (unless something else holds it already)
            s.bind(("127.0.0.1", 8787))
            s.listen()
        except OSError:
            pass
        with open_client(None, 1):
            pass
    assert not [w for w in caught if "Port" in str(w.message)]
    assert not [r for r in caplog.records if "already in use" in r.getMessage()]


def test_child_processes_do_not_report_leaked_semaphores(tmp_path):
    script = tmp_path / "leak.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, os
        from attnphase.cli import quiet_child_processes
        if __name__ == "__main__":
            quiet_child_processes()
            lock = multiprocessing.get_context("spawn").Semaphore()  # starts the resource tracker
            os._exit(0)  # stopped: the semaphore is never released
    """))
    proc = subprocess.run([PY, str(script)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "leaked semaphore" not in proc.stderr, proc.stderr


def _warning_theory_task(payload):
    import logging

    logging.getLogger("numerics.fixed_points.lines").warning("alpha=2.1 positional: not converged")
    return fake_theory_task(payload)


def test_a_sweep_task_warning_names_its_grid_point(client, tmp_path, capsys, caplog):
    args = cli.build_parser().parse_args([*SWEEP, "--omega", "0.1", "--out", str(tmp_path)])
    assert cmd_phase_diagram(args, theory_task=_warning_theory_task, client=client) == 0
    named = [r.getMessage() for r in caplog.records if r.name == "attnphase.sweeps.runner"]
    assert "theory:omega=0.1:branch=positional: numerics.fixed_points.lines: alpha=2.1 positional: not converged" in named


def test_repeated_alphas_and_zero_steps_are_refused(capsys, tmp_path):
    status, _, err = run(["validate", "--alphas", "1,1", "--out", tmp_path / "v"], capsys)
    line = one_line(err, "validate")
    assert status == 2 and "--alphas: " in line and "repeated" in line, line
    status, _, err = run(["simulate", "--steps", "0"], capsys)
    assert status == 2 and "--steps: must be >= 1" in one_line(err, "simulate")
    assert not (tmp_path / "v").exists()


def test_solve_all_names_the_branches_it_did_not_find(capsys, monkeypatch):
    import numerics.api as api

    monkeypatch.setattr(api, "solve_all", lambda spec, alpha, precision="fast", integrator="auto": [
        fixed_point(spec, alpha, "semantic", global_minimum=True)])
    status, out, err = run(["solve", "--alpha", "1"], capsys)
    assert status == 0 and not err
    assert "note: no positional branch at alpha = 1" in out and "note: no trivial branch at alpha = 1" in out
    # with --json stdout stays one JSON document and the notes go to stderr
    status, out, err = run(["solve", "--alpha", "1", "--json"], capsys)
    assert status == 0 and [p["branch"] for p in json.loads(out)] == ["semantic"]
    assert err == [f"attnphase solve: note: no {b} branch at alpha = 1: its solve ends on a smaller branch"
                   for b in ("positional", "trivial")]


def test_a_scheduler_that_refuses_fails_fast(tmp_path, capsys):
    t0 = time.perf_counter()
    status, _, err = run([*SWEEP, "--scheduler", "tcp://127.0.0.1:1", "--out", tmp_path / "o"], capsys)
    assert status == 2 and "--scheduler: cannot connect to tcp://127.0.0.1:1" in one_line(err, "phase-diagram")
    assert time.perf_counter() - t0 < 8 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("command, other, files", [
    ("phase-diagram", "run", {"curve.csv": "alpha\n", "summary.json": "{}"}),
    ("phase-diagram", "validate", {"validate.json": "{}"}),
    ("phase-diagram", "paper", {"manifest.json": '{"format": 1, "sections": {"paper": {"hash": "x", "settings": {}}}}'}),
    ("paper", "phase-diagram", {"manifest.json": '{"format": 1, "command": "phase-diagram", "sections": '
                                                 '{"theory": {"hash": "x", "settings": {}}}}'}),
    ("paper", "run", {"curve.csv": "alpha\n", "summary.json": "{}"}),
])
def test_a_folder_of_another_commands_outputs_is_refused(command, other, files, tmp_path, capsys):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [*SWEEP, "--out", tmp_path] if command == "phase-diagram" else ["paper", "--quick", "--out", tmp_path]
    status, _, err = run(argv, capsys)
    assert status == 2 and f"holds the outputs of attnphase {other}" in one_line(err, command)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)


# --------------------------------------------------------------------------- readable output


def test_solve_prints_each_field_with_its_error_and_no_python_repr(capsys, monkeypatch):
    import numerics.api as api

    errors = {name: 1e-8 for name in ("q", "V", "theta", "qhat", "Vhat", "thetahat", "test_error", "train_loss")}
    monkeypatch.setattr(api, "solve", lambda spec, alpha, branch, precision="fast", *_, **__: fixed_point(
        spec, alpha, branch, error=errors, precision="fast"))
    status, out, err = run(["solve", "--alpha", "1", "--branch", "semantic"], capsys)
    assert status == 0 and not err
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["q"].split()[1:] == ["0.1", "+-", "1.0e-08"] and lines["theta"].split()[1:] == ["0.15", "+-", "1.0e-08"]
    assert lines["m"].split()[1:] == ["0", "(by", "symmetry)"]
    assert "test_error" in lines and "train_loss" in lines
    assert "{'" not in out and "np.float64" not in out and "Overlaps(" not in out


def test_curve_prints_its_spinodals_as_sentences(tmp_path, capsys, monkeypatch):
    import numerics.api as api
    from numerics.branches.follow import BranchCurve

    def follow(spec, alphas, branch, precision="fast", progress=None, **kw):
        curve = fake_follow_branch(spec, alphas, branch, precision, progress)
        spinodals = [{"branch": branch, "alpha": 0.6903, "alpha_error": 0.011, "side": "lower"}] \
            if branch == "semantic" else []
        return BranchCurve(branch, curve.points, spinodals)

    monkeypatch.setattr(api, "follow_branch", follow)
    status, out, err = run(["curve", "--alpha", "0.5:1.5:3", "--out", tmp_path / "c.csv"], capsys)
    assert status == 0 and not err
    assert "spinodal: semantic branch ends at alpha = 0.69030 +- 1.1e-02 (lower end)" in out
    assert "{'" not in out


def test_a_solver_error_names_the_point_without_reprs():
    import numpy as np

    from numerics.overlaps import HatOverlaps, Overlaps
    from numerics.solver.iteration import SolverError, solve_fixed_point

    def F(x):
        raise FloatingPointError(f"non-finite at {Overlaps(*x, 0.15)}: {HatOverlaps(np.float64(0.0314562), 0, 1, 2)}")

    with pytest.raises(SolverError) as caught:
        solve_fixed_point(F, [0.11, 0.0, 12.0])
    assert str(caught.value) == ("the map cannot be evaluated at the starting point (0.11, 0, 12) (non-finite at "
                                 "q = 0.11, m = 0, V = 12, theta = 0.15: qhat = 0.0314562, mhat = 0, Vhat = 1, "
                                 "thetahat = 2)")


def test_results_convert_to_data_frames():
    import pandas as pd

    from numerics.branches.follow import BranchCurve
    from numerics.thresholds.record import Thresholds

    spec = ModelSpec()
    point = fixed_point(spec, 1.0, "semantic", error={"q": 1e-8})
    df = point.to_frame()
    assert isinstance(df, pd.DataFrame) and len(df) == 1 and df.loc[0, "q"] == 0.1 and df.loc[0, "q_error"] == 1e-8
    assert df.loc[0, "sigma"] == 0.5 and df.loc[0, "branch"] == "semantic"
    curve = BranchCurve("semantic", [fixed_point(spec, a, "semantic") for a in (2.0, 1.0)],
                        [{"branch": "semantic", "alpha": 0.69, "alpha_error": 0.01, "side": "lower"}])
    df = curve.to_frame()
    assert list(df["alpha"]) == [1.0, 2.0] and df.attrs["spinodals"][0]["alpha"] == 0.69
    assert list(BranchCurve("positional", [], []).to_frame().columns) == ["alpha", "branch"]
    th = Thresholds(alpha_c=1.24, alpha_c_error=1e-6, alpha_l=1.45, alpha_l_error=2e-7, linear_test_error=0.00197,
                    linear_test_error_error=1e-12, spinodals=curve.spinodals, precision="fast", model=spec,
                    wall_time=1.0, details={})
    df = th.to_frame()
    assert len(df) == 1 and df.loc[0, "alpha_c"] == 1.24 and df.loc[0, "spinodal_semantic_lower"] == 0.69
    assert df.loc[0, "omega"] == 0.3
    general = fixed_point(spec, 1.0, "semantic", error=dict.fromkeys(
        ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss"), 1e-8)).to_frame()
    assert len(general) == 1 and general.loc[0, "alpha"] == 1.0 and "integrator" in general


def test_a_sweep_with_a_point_not_converged_names_it_with_its_omega_and_exits_1(client, tmp_path, capsys):
    from attnphase.errors import CommandFailed

    # the fake general model does not converge on the semantic branch at omega = 0.35, alpha = 1.4
    argv = [*SWEEP, "--rank", "2", "--omega", "0.35", "--alpha", "1:1.8:3", "--out", str(tmp_path)]
    for _ in range(2):  # a resumed sweep says so too
        with pytest.raises(CommandFailed) as caught:
            cmd_phase_diagram(cli.build_parser().parse_args(argv), theory_task=fake_theory_task, client=client)
        assert str(caught.value).startswith("1 point(s) not converged: omega=0.35 alpha=1.4 semantic (kept in")


def _legend_texts(fig) -> list:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_the_curve_figure_marks_the_thresholds_and_spinodals_in_one_legend_at_talk_size(tmp_path, capsys,
                                                                                       monkeypatch):
    import numerics.api as api
    import attnphase.figures as figures
    from numerics.branches.follow import BranchCurve

    def follow(spec, alphas, branch, precision="fast", progress=None, **kw):
        # the positional branch's training loss rises through the semantic one's at alpha = 1.25
        points = [fixed_point(spec, float(a), branch, train_loss=0.003 + (0.001 * (a - 1.25) if branch == "positional"
                                                                        else 0.0),
                              test_error=0.003 - 0.002 * (a - 0.5) if branch == "semantic" else 0.004)
                  for a in alphas]
        return BranchCurve(branch, points, [{"branch": "semantic", "alpha": 0.69, "alpha_error": 0.01,
                                             "side": "lower"}] if branch == "semantic" else [])

    drawn = []
    monkeypatch.setattr(api, "follow_branch", follow)
    monkeypatch.setattr(figures, "_save", lambda fig, stem: drawn.append(fig) or [f"{stem}.png"])
    status, out, err = run(["curve", "--alpha", "0.5:2:4", "--figure", "--out", tmp_path / "c.csv"], capsys)
    assert status == 0 and len(drawn) == 1
    fig = drawn[0]
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    texts = _legend_texts(fig)
    assert any(t.startswith(r"$\alpha_c$ = 1.25") and t.endswith("(grid)") for t in texts), texts
    assert any(t.startswith(r"$\alpha_l$ = ") for t in texts) and "spinodal (semantic)" in texts
    assert "linear baseline" in texts and "global minimum" in texts
    sizes = [t.get_fontsize() for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels())]
    sizes += [t.get_fontsize() for legend in fig.legends for t in legend.get_texts()]
    assert min(sizes) >= figures.TALK_FONT


def test_the_phase_diagram_figure_says_what_its_grey_cells_are(client, tmp_path, capsys):
    from attnphase.sweeps import figures as diagram

    assert sweep(tmp_path, client, capsys, "--omega", "0:0.1:2")[0] == 0
    fig = diagram.draw(diagram.points_from_csv(tmp_path / THEORY_CSV))
    assert diagram.NO_VALUE_TEXT in _legend_texts(fig)  # the grid's low alphas lack the semantic branch
    full = [dict(p, train_loss_diff=1e-4, test_error_diff=-1e-4) for p in diagram.points_from_csv(tmp_path / THEORY_CSV)]
    assert diagram.NO_VALUE_TEXT not in _legend_texts(diagram.draw(full))


STOPPED_SWEEP = textwrap.dedent("""
    import functools, sys
    import attnphase.sweeps.runner as runner
    from tests.fakes import fake_theory_task
    from attnphase import cli
    if __name__ == "__main__":
        runner.DEFAULT_THEORY_TASK = functools.partial(fake_theory_task, delay=0.4)
        sys.exit(cli.main(sys.argv[1:]))
""")


def test_a_sweep_stopped_by_ctrl_c_at_a_terminal_prints_one_line(tmp_path):
    """Ctrl-C at a terminal reaches the whole process group: the Dask workers too."""
    script = tmp_path / "sweep.py"
    script.write_text(STOPPED_SWEEP)
    out = tmp_path / "out"
    proc = subprocess.Popen([PY, str(script), *SWEEP, "--omega", "0:0.45:30", "--workers", "2", "--out", str(out)],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(read_csv_rows(out / THEORY_CSV)[1]) < 10:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and err.splitlines() == ["attnphase phase-diagram: interrupted"], err


def test_the_generated_code_gives_inf_or_nan_without_a_numpy_warning():
    """Overflow in the generated lines becomes a non-finite value, which the solver reports as its
    own error; numpy's RuntimeWarning would quote generated code a user never wrote."""
    import warnings

    import numpy as np

    from numerics.model.bound import bind

    model = bind(ModelSpec())
    big = np.array([1e200, -1e200, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = np.asarray(model.loss(big, -big, big, big), dtype=float)
    assert not np.isfinite(values).all()


@pytest.mark.parametrize("argv, expected", [
    (["solve", "--alpha", "1", "--attention", "h1/(h1 - h2)"], "attention: not finite at h1=0, h2=0"),
    (["thresholds", "--attention", "exp(h1"], "attention: cannot parse (EOF in multi-line statement): 'exp(h1'"),
    (["curve", "--attention", "h1*q"], "attention: unknown symbol 'q'"),
    (["simulate", "--attention", "__import__('os').getcwd()"], "attention: unknown symbol '__import__'"),
    (["derive", "--attention", "sqrt(h1)"], "attention: not real at h1=-1"),
    (["validate", "--attention", "log(h1 + h2)"], "attention: not finite at h1=0, h2=0"),
    (["solve", "--alpha", "1", "--beta", "0"], "beta: must be a finite number > 0"),
    (["phase-diagram", "--beta", "-2"], "beta: must be a finite number > 0"),
    (["solve", "--alpha", "1", "--attention", "linear", "--beta", "2"], "beta: the student attention 'linear' does"),
    (["run", "--teacher-attention", "beta*h1"], "teacher: unknown symbol 'beta'"),
    (["solve", "--alpha", "1", "--teacher-attention", "1/(h2 - 0.3)"], "teacher: has a pole: the denominator 'h2 - 3/10' vanishes"),
])
def test_bad_attention_and_beta_are_one_line_exit_2(argv, expected, tmp_path, capsys):
    """An expression that does not parse, names unknown symbols, or is not real and finite on the real
    line (so that its prox problem could be unbounded below), and a beta <= 0, are bad input."""
    if argv[0] in ("run", "validate", "phase-diagram"):
        argv = [*argv, "--out", str(tmp_path / "out")]
    status, _, err = run(argv, capsys)
    assert status == 2 and expected in one_line(err, argv[0])


def test_run_says_its_table_is_the_global_minima_and_prints_no_negative_zero(tmp_path, capsys, monkeypatch):
    """A value that rounds to zero in the table's decimals (m = -1e-9 on a trivial-like point) is
    printed 0.000000, not -0.000000; the line above the table says what it holds."""
    import dataclasses

    import numerics.api as api

    def follow(spec, alphas, branch, precision="fast", progress=None, **kw):
        curve = fake_follow_branch(spec, alphas, branch, precision, progress)
        tiny = Overlaps(q=0.1, m=-1e-9, V=5.0, theta=-2e-8)
        points = [dataclasses.replace(p, overlaps=tiny) for p in curve.points]
        return type(curve)(branch, points, [])

    monkeypatch.setattr(api, "follow_branch", follow)
    found = types.SimpleNamespace(alpha_c=1.0, alpha_c_error=1e-4, alpha_l=1.2, alpha_l_error=1e-4, alpha_l_status="ok",
                                  spinodals=[], scan=(), notes=(), transitions=(types.SimpleNamespace(
                                      alpha=1.0, error=1e-4, below="positional", above="semantic", kind="crossing"),),
                                  to_dict=lambda: {"alpha_c": 1.0, "alpha_l": 1.2})
    monkeypatch.setattr(api, "thresholds", lambda *a, **k: found)
    status, out, err = run(["run", "--alpha", "0.5:1.5:3", "--out", tmp_path], capsys)
    assert status == 0 and not err, err
    assert re.search(r"^the global minimum at each alpha: \d+ of the 6 points \(every branch is in .*curve\.csv\)$",
                     out, re.M), out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s*\d\.\d{4} ", line)]
    assert rows and all(r[3] == "0.000000" and r[5] == "0.000000" for r in rows), out
    assert "-0.0" not in out, out


def test_print_of_a_curve_and_of_thresholds_is_a_short_summary_with_the_digits_their_errors_support():
    """What ``print(follow(...))``, ``print(thresholds(...))`` and ``print(solve(...))`` show a newcomer:
    a few lines in words, each number to its error, no dataclass repr, no -0."""
    from numerics.api import BranchCurve, Thresholds, Transition

    spec = ModelSpec()
    points = [fixed_point(spec, a, "semantic", error={"q": 3e-6, "theta": 2e-6}) for a in (0.5, 1.0, 1.5)]
    curve = BranchCurve("semantic", points, [{"branch": "semantic", "alpha": 0.4123456, "alpha_error": 2e-3,
                                              "side": "lower"}])
    assert str(curve).splitlines() == ["semantic branch: 3 points on alpha in [0.5, 1.5], 3 converged",
                                       "spinodal: lower end at alpha = 0.4123 +- 2.0e-03"]
    assert repr(curve) == "<BranchCurve semantic branch: 3 points on alpha in [0.5, 1.5], 3 converged>"
    th = Thresholds(alpha_c=1.234567891, alpha_c_error=3e-5, alpha_l=1.4, alpha_l_error=math.nan,
                    linear_test_error=0.00197123456, linear_test_error_error=1e-9, precision="fast", model=spec,
                    wall_time=1.0, alpha_l_status="not bracketed on the scan",
                    transitions=(Transition(1.234567891, 3e-5, "positional", "semantic", "crossing", (1.0, 1.5), {}),))
    assert str(th).splitlines() == ["thresholds (fast)", "alpha_c = 1.234568 +- 3.0e-05   positional -> semantic "
                                    "(crossing)", "alpha_l: not bracketed on the scan",
                                    "linear baseline test error = 0.0019712346 +- 1.0e-09"]
    one = fixed_point(spec, 1.0, "semantic", overlaps=Overlaps(q=0.1, m=-0.0, V=5.0, theta=0.15),
                      error={"q": 3e-6, "V": 1e-4, "theta": 2e-6, "test_error": 1e-9, "train_loss": 1e-9})
    text = str(one)
    assert text.startswith("semantic branch at alpha = 1 (draft, converged): q = 0.1 +- 3.0e-06, m = 0, V = 5 +- "
                           "1.0e-04"), text
    assert "\n" not in text
    # to the error's second significant digit: solve --precision high's errors of 1e-12 show 12 decimals
    from numerics.api import value_with_error

    assert value_with_error(0.11481730737712345, 4.5e-12) == "0.1148173073771 +- 4.5e-12"
    assert value_with_error(0.11481730737712345, 3e-5) == "0.114817 +- 3.0e-05"
    assert value_with_error(-1e-9 * 0.0) == "0" and value_with_error(0.11481730737712345) == "0.1148173"
    for shown in (str(curve), str(th), text):
        assert "Overlaps(" not in shown and "{" not in shown and "-0 " not in shown


def test_simulate_with_one_seed_shows_no_spread_and_names_its_attention(capsys):
    status, out, err = run(["simulate", "--attention", "sigmoid", *SIM], capsys)
    assert status == 0 and not err
    lines = out.splitlines()
    assert "attention=sigmoid teacher=softmax" in lines[0], lines[0]
    std = [line for line in lines if line.startswith("std")]
    assert std == ["std  (one run: no spread; --seeds 2 or more gives one)"], out


def test_curve_csv_stores_each_alpha_as_the_grids_decimal(tmp_path, capsys, monkeypatch):
    """0.05:2.5:50 holds 0.75 (numpy.linspace's is 0.7500000000000001): the CSV says 0.75."""
    import numerics.api as api

    monkeypatch.setattr(api, "follow_branch", fake_follow_branch)
    status, _, err = run(["curve", "--alphas", "0.05:2.5:50", "--out", tmp_path / "c.csv"], capsys)
    assert status == 0 and not err
    alphas = [line.split(",")[0] for line in (tmp_path / "c.csv").read_text().splitlines()[1:]]
    assert "0.75" in alphas and not [a for a in alphas if len(a) > 6], alphas


def test_the_solve_outputs_docs_extending_shows_are_laid_out_as_solve_prints_them(capsys, monkeypatch):
    """Each block of docs/extending.md that quotes ``attnphase solve`` (a line ``alpha = A, precision P``
    first) has the command's rows, in its order: the fields, then status, iterations, residual and
    global min."""
    import numerics.api as api

    monkeypatch.setattr(api, "solve", lambda spec, alpha, branch, precision="fast", *_, **__: fixed_point(
        spec, alpha, branch, precision="fast", error={"q": 1e-8}))
    status, out, err = run(["solve", "--alpha", "1"], capsys)
    assert status == 0 and not err
    labels = [line.split()[0] for line in out.splitlines()[2:] if line.strip() and not line.startswith("wall")]
    blocks = (ROOT / "docs" / "extending.md").read_text().split("```\n")
    quoted = [b for b in blocks if re.match(r"alpha = [\d.]+, precision \w+\n", b)]
    assert quoted, "docs/extending.md quotes no solve output"
    for block in quoted:
        shown = [line.split()[0] for line in block.splitlines()[2:] if line.strip()]
        assert shown == labels, (shown, labels)

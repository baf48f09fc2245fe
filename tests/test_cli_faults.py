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
from numerics.tidy import ROW_CHECK, finite_json, from_json, json_text, read_csv_rows
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
    from numerics.branches import BranchCurve

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

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
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
    assert status == 0 and not err
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

    monkeypatch.setattr(api, "solve_branch", lambda spec, alpha, branch, precision="fast": fixed_point(
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

    for name in ("follow_branch", "thresholds", "solve_branch"):
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
     "one,semantic,0.1,0,0.1,0.1,True,0.5,0.01,0.3,softmax,tanh,l2\n", "alpha = 'one' is not a number"),
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
    ("numerics.solver.SolverError", "SolverError: boom"),
    ("numerics.thresholds.ThresholdError", "ThresholdError: boom"),
    ("numerics.root_finding.RootFindingError", "RootFindingError: boom"),
    ("numerics.fixed_point.BranchLost", "BranchLost: boom"),
    ("numerics.fixed_point.BranchNotFound", "BranchNotFound: boom"),
    ("numerics.thresholds.BranchAbsent", "BranchAbsent: boom"),
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


# --------------------------------------------------------------------------- 4. half-written outputs


@pytest.mark.parametrize("failure, status", [("ThresholdError", 1), ("SolverError", 1), ("KeyboardInterrupt", 130)])
def test_run_leaves_a_folder_marked_incomplete_when_the_thresholds_fail(failure, status, tmp_path, capsys,
                                                                        monkeypatch):
    import numerics.api as api
    from numerics.solver import SolverError

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
                                  spinodals=[], to_dict=lambda: {"alpha_c": 1.0, "alpha_l": 1.2,
                                                                 "alpha_l_error": float("nan")})
    monkeypatch.setattr(api, "thresholds", lambda spec, precision, progress=None, scan_curves=None: found)
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
    sys.exit(cli.main(["simulate", "--d", "50", "--steps", "100000000"]))
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


@pytest.mark.parametrize("argv, expected", [
    (["solve", "--alpha", "1", "--attention", "h1/(h1 - h2)"], "attention: 'h1/(h1 - h2)' is not finite"),
    (["thresholds", "--attention", "exp(h1"], "attention: cannot parse 'exp(h1'"),
    (["curve", "--attention", "h1*q"], "attention: unknown symbol 'q'"),
    (["simulate", "--attention", "__import__('os').getcwd()"], "attention: unknown symbol '__import__'"),
    (["derive", "--attention", "sqrt(h1)"], "attention: 'sqrt(h1)' is not real"),
    (["validate", "--attention", "log(h1 + h2)"], "attention: 'log(h1 + h2)' is not"),
    (["solve", "--alpha", "1", "--beta", "0"], "beta: must be a finite number > 0"),
    (["phase-diagram", "--beta", "-2"], "beta: must be a finite number > 0"),
    (["solve", "--alpha", "1", "--attention", "linear", "--beta", "2"], "beta: the student attention 'linear' does"),
    (["run", "--teacher-attention", "beta*h1"], "teacher: unknown symbol 'beta'"),
    (["solve", "--alpha", "1", "--teacher-attention", "1/(h2 - 0.3)"], "teacher: '1/(h2 - 0.3)' has a pole"),
])
def test_bad_attention_and_beta_are_one_line_exit_2(argv, expected, tmp_path, capsys):
    """An expression that does not parse, names unknown symbols, or is not real and finite on the real
    line (so that its prox problem could be unbounded below), and a beta <= 0, are bad input."""
    if argv[0] in ("run", "validate", "phase-diagram"):
        argv = [*argv, "--out", str(tmp_path / "out")]
    status, _, err = run(argv, capsys)
    assert status == 2 and expected in one_line(err, argv[0])

"""Tests of the parameter sweeps (:mod:`sweeps`) and ``attnphase phase-diagram`` / ``plot``.

Theory tasks use ``tests.fakes.fake_theory_task`` (the real column logic on a
closed-form toy API, microseconds per column), so these tests check the sweep
machinery, not the physics: grids, tidy rows, resuming, crash safety, refusing
changed settings, failures, an external Dask cluster, plots from CSV alone.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from attnphase.cli import build_parser, main
from attnphase.commands.sweep import cmd_phase_diagram
from attnphase.errors import CommandFailed, UsageError
from attnphase.options import parse_range
from derivations.spec import ModelSpec
from tidyio import ROW_CHECK, cell, read_csv_rows, render_csv
from attnphase.sweeps import SweepError
from attnphase.sweeps.config import SweepConfig
from attnphase.sweeps.grid import fmt, grid_text, theory_key
from attnphase.sweeps.runner import open_client, run_sweep, task_priority, worker_threads
from attnphase.sweeps.store import FAILURES_CSV, MANIFEST, SIMULATION_CSV, THEORY_CSV, THRESHOLDS_CSV, SweepStore
from attnphase.sweeps.tasks import make_tasks, simulation_run_task
from tests.fakes import fake_theory_task

FAKE = fake_theory_task
#: timing columns, and the checksum that covers them
VOLATILE = {"task_wall_time", "wall_time", "train_time", "step_time", ROW_CHECK}
PY = sys.executable
DASK = str(Path(sys.executable).parent / "dask")
ROOT = Path(__file__).resolve().parents[1]
#: worker processes import the fake task by its module, tests.fakes
WORKER_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def client():
    """An in-process (threads) Dask cluster: starts in well under a second."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as cl:
        yield cl


def config(omegas=(0.0, 0.1, 0.2), alphas=(0.2, 0.6, 1.0, 1.4, 2.2), **kw):
    spec = kw.pop("spec", ModelSpec())
    return SweepConfig(spec=spec, omegas=omegas, alphas=alphas, **kw)


def table(path, key=("task", "alpha", "branch")):
    """A CSV as a sorted list of dicts without timing columns (comparison up to row order)."""
    header, rows = read_csv_rows(path)
    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    return sorted(rows, key=lambda r: tuple(r.get(k, "") for k in key))


def same_outputs(a: Path, b: Path):
    for name in (THEORY_CSV, THRESHOLDS_CSV):
        assert table(a / name) == table(b / name), name


# --------------------------------------------------------------------------- grids and input


def test_grids_are_ranges_rounded_to_12_digits():
    grid = config(omegas=parse_range("0:0.45:10", "--omega"), alphas=parse_range("0.05:2.5:25", "--alpha"))
    assert grid.omegas[3] == 0.15  # no float noise
    assert grid.alphas[-1] == 2.5 and len(grid.alphas) == 25
    assert parse_range("0.3", "--omega") == [0.3]
    assert parse_range("0.3:0.3:1", "--omega") == [0.3]
    assert grid_text(grid.omegas) == "0:0.45:10"
    for bad, what in (("1:0:3", "START must be below STOP"), ("0:1:0", "N must be >= 1"),
                      ("a:b:3", "START:STOP:N"), ("0:1", "START:STOP:N"), ("0:1:2.5", "integer"),
                      ("0.1:0.2:1", "N = 1"), ("0:inf:3", "finite")):
        with pytest.raises(UsageError, match=what) as info:
            parse_range(bad, "--omega")
        assert str(info.value).startswith("--omega:")
    with pytest.raises(SweepError, match="--omegas: grid values must be distinct"):
        config(omegas=parse_range("0.1:0.1000000000001:3", "--omega"))


@pytest.mark.parametrize("flag, text", [("--omega", "0:0.45:10"), ("--omega", "0.2:0.3:2"), ("--omega", "0:0.2:3"),
                                        ("--alpha", "0.05:2.5:25"), ("--alpha", "0.5:2.5:9"),
                                        ("--alpha", "0.2:2.2:5")])
def test_grid_values_are_the_evenly_spaced_values_at_12_digits(flag, text):
    """The sweep's grid values, in the files and the task keys, are START + (STOP - START) i/(N - 1)
    at 12 significant digits (the default grids and those of the tests and benchmarks)."""
    start, stop, n = (float(x) for x in text.split(":"))
    even = tuple(float(fmt(start + (stop - start) * i / (n - 1))) for i in range(int(n)))
    grid = parse_range(text, flag)
    if flag == "--omega":
        assert config(omegas=grid).omegas == even
    else:
        assert config(alphas=grid).alphas == even


def test_cells_are_plain_numbers():
    import numpy as np

    assert cell(np.float64(0.5)) == "0.5"  # not "np.float64(0.5)"
    assert cell(np.bool_(True)) == "True" and cell(np.int64(3)) == "3"
    assert cell(float("nan")) == "nan" and cell(None) == ""
    assert cell("two\nlines") == "two lines"


@pytest.mark.parametrize("argv, flag", [
    (["--omegas", "0:2:3"], "--omegas:"),
    (["--omegas", "0:1:x"], "--omegas:"),
    (["--alphas", "0:1:3"], "--alphas:"),
    (["--alphas", "2:1:3"], "--alphas:"),
    (["--workers", "0"], "--workers:"),
    (["--what", "simulation", "--d", "1"], "--d:"),
    (["--what", "simulation", "--seeds", "0"], "--seeds:"),
    (["--lam", "-1"], "lam:"),
])
def test_bad_input_exits_2_with_one_line(argv, flag, capsys, tmp_path):
    assert main(["phase-diagram", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- sweeps


def test_tidy_rows_thresholds_and_derived_points(client, tmp_path):
    s = run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False)
    assert s["failed"] == [] and len(s["computed"]) == 3 * 3 and s["skipped"] == 0  # 2 branches + thresholds
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    assert len(rows) == 3 * 5 * 2  # one row per grid point and branch
    for r in rows:  # every model parameter and solver setting is in the row, where a branch does not exist too
        for k in ("sigma", "lam", "omega", "A11", "A22", "P11", "P21", "tokens", "rank", "teacher_rank", "attention",
                  "precision", "alpha_grid", "settings_hash"):
            assert r[k] != "", k
    # the toy semantic branch starts at alpha = 0.3: a missing point is a row with exists=False
    sem02 = [r for r in rows if r["branch"] == "semantic" and r["alpha"] == "0.2"]
    assert len(sem02) == 3 and all(r["exists"] == "False" for r in sem02)
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    assert sorted(float(r["alpha_c"]) for r in thr) == pytest.approx([0.8, 1.0, 1.2])
    for col in ("omega", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error", "spinodal_semantic_alpha",
                "spinodal_positional_alpha", "spinodals"):
        assert col in thr[0]
    # every threshold task started from its column's branch rows, not from a scan of its own
    assert [r["bracket_source"] for r in thr] == ["branch rows"] * 3
    _, pts = read_csv_rows(tmp_path / "theory_points.csv")
    assert len(pts) == 15
    p = next(r for r in pts if r["omega"] == "0.0" and r["alpha"] == "1.4")
    # toy: F_pos - F_sem = 0.001 (alpha - alpha_c) and the semantic branch is global above alpha_c
    assert float(p["train_loss_diff"]) == pytest.approx(0.001 * (1.4 - 0.8))
    assert p["global_branch"] == "semantic"
    assert float(p["test_error_diff"]) == pytest.approx(0.004 / 2.4 - 0.002)
    assert (tmp_path / "theory_diagram.png").stat().st_size > 0 and (tmp_path / "theory_diagram.pdf").exists()
    manifest = (tmp_path / MANIFEST).read_text()
    assert s["settings_hash"]["theory"] in manifest


def test_resume_skips_done_tasks_and_extends_the_omega_grid(client, tmp_path):
    run_sweep(config(omegas=(0.0, 0.1)), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    before = (tmp_path / THEORY_CSV).read_bytes()
    again = run_sweep(config(omegas=(0.0, 0.1)), tmp_path, client=client, theory_task=FAKE, progress=False,
                        plot=False)
    assert again["computed"] == [] and again["skipped"] == 6
    assert (tmp_path / THEORY_CSV).read_bytes() == before
    more = run_sweep(config(omegas=(0.0, 0.1, 0.2)), tmp_path, client=client, theory_task=FAKE, progress=False,
                       plot=False)
    assert sorted(more["computed"]) == sorted(theory_key(0.2, j) for j in ("semantic", "positional", "thresholds"))
    assert more["skipped"] == 6
    fresh = tmp_path / "fresh"
    run_sweep(config(), fresh, client=client, theory_task=FAKE, progress=False, plot=False)
    same_outputs(tmp_path, fresh)


def test_changed_setting_is_refused(client, tmp_path, capsys):
    run_sweep(config(omegas=(0.1,)), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    before = {name: (tmp_path / name).read_bytes() for name in (THEORY_CSV, THRESHOLDS_CSV, MANIFEST)}
    with pytest.raises(SweepError, match=r"--out: .* other settings \(model.lam: 0.01 -> 0.02\)"):
        run_sweep(config(omegas=(0.1,), spec=ModelSpec(lam=0.02)), tmp_path, client=client, theory_task=FAKE,
                    progress=False)
    with pytest.raises(SweepError, match="alphas"):
        run_sweep(config(omegas=(0.1,), alphas=(0.5, 1.0)), tmp_path, client=client, theory_task=FAKE,
                    progress=False)
    with pytest.raises(SweepError, match="precision: fast -> high"):
        run_sweep(config(omegas=(0.1,), precision="high"), tmp_path, client=client, theory_task=FAKE,
                    progress=False)
    # the command line: one line, exit 2, nothing computed (refused before any solver runs)
    rc = main(["phase-diagram", "--omega", "0.1", "--alpha", "0.2:2.2:5", "--lam", "0.02", "--out", str(tmp_path),
               "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "other settings" in err[0], err
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_failed_task_is_logged_kept_apart_and_retried(client, tmp_path, capsys):
    argv = ["phase-diagram", "--omega", "0:0.2:3", "--alpha", "0.2:2.2:5", "--out", str(tmp_path), "--quiet"]
    args = build_parser().parse_args(argv)
    failing = functools.partial(FAKE, fail_omegas=(0.1,), fail_only="positional")
    with pytest.raises(CommandFailed, match="task\\(s\\) failed"):
        cmd_phase_diagram(args, theory_task=failing, client=client)
    captured = capsys.readouterr()
    assert "FAILED theory:omega=0.1:branch=positional: RuntimeError: fake failure at omega=0.1" in captured.err
    _, fails = read_csv_rows(tmp_path / FAILURES_CSV)
    # the column's threshold task starts from both branch tasks' rows: it is not run
    assert [f["task"] for f in fails] == ["theory:omega=0.1:branch=positional", "theory:omega=0.1:thresholds"]
    assert "fake" in fails[0]["error"] and "not run" in fails[1]["error"]
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    # the rest of the diagram is kept, the other branch at omega = 0.1 included
    assert {(r["omega"], r["branch"]) for r in rows} == {(w, b) for w in ("0.0", "0.1", "0.2")
                                                         for b in ("semantic", "positional")} - {("0.1", "positional")}
    assert sorted(r["omega"] for r in read_csv_rows(tmp_path / THRESHOLDS_CSV)[1]) == ["0.0", "0.2"]
    assert (tmp_path / "theory_diagram.png").exists()
    # re-running retries only the failed tasks
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    assert "9 tasks: 7 already done, 2 computed, 0 failed" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    run_sweep(config(alphas=parse_range("0.2:2.2:5", "--alpha")), fresh, client=client, theory_task=FAKE,
                progress=False, plot=False)
    same_outputs(tmp_path, fresh)


def test_missing_branch_and_unbracketed_thresholds_are_notes_not_failures(client, tmp_path, capsys):
    args = build_parser().parse_args(["phase-diagram", "--omega", "0.95", "--alpha", "0.2:2.2:5", "--out",
                                      str(tmp_path), "--quiet", "--no-plot"])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    out = capsys.readouterr().out
    assert "note: theory:omega=0.95:branch=positional: positional branch not found at the anchor" in out
    assert "note: theory:omega=0.95:thresholds: thresholds not found: alpha_c not bracketed" in out
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    pos = [r for r in rows if r["branch"] == "positional"]
    assert len(pos) == 5 and all(r["exists"] == "False" and "not found" in r["branch_note"] for r in pos)
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    assert thr[0]["threshold_status"] == "not_bracketed" and thr[0]["alpha_c"] == "nan"


def test_alpha_l_beyond_the_scan_keeps_alpha_c_in_the_thresholds_row(client, tmp_path, capsys):
    """The first full diagram lost alpha_c at omega = 0.45 because alpha_l was beyond the
    scan; the fake's omega = 0.7 has alpha_c = 2.2 on the scan and alpha_l beyond it."""
    args = build_parser().parse_args(["phase-diagram", "--omega", "0.7", "--alpha", "0.2:2.2:5", "--out",
                                      str(tmp_path), "--quiet", "--no-plot"])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    assert "note: theory:omega=0.7:thresholds: alpha_l not found: alpha_l not bracketed" in capsys.readouterr().out
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    assert thr[0]["threshold_status"] == "alpha_l_not_bracketed"
    assert float(thr[0]["alpha_c"]) == pytest.approx(2.2) and thr[0]["alpha_l"] == "nan"


def test_recovery_keeps_complete_tasks_and_moves_the_damaged_file_aside(client, tmp_path, caplog):
    run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    reference = table(tmp_path / THEORY_CSV)
    header, rows = read_csv_rows(tmp_path / THEORY_CSV)
    # a task whose block was cut short (3 of its 5 rows), then a line cut mid-row
    orphan = [dict(r, task="theory:omega=0.1:branch=semantic") for r in rows if r["branch"] == "semantic"][:3]
    with open(tmp_path / THEORY_CSV, "a") as f:
        f.write(render_csv(header, orphan, False))
        f.write("theory:omega=0.8,0.8,0.2,sem")
    damaged = (tmp_path / THEORY_CSV).read_bytes()
    s = run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    # the semantic task at omega = 0.1 now has 8 rows, not 5: it is computed again
    assert s["computed"] == ["theory:omega=0.1:branch=semantic"] and s["dropped_on_recovery"][THEORY_CSV] == 5 + 3 + 1
    assert table(tmp_path / THEORY_CSV) == reference
    aside = list(tmp_path.glob(THEORY_CSV + ".unreadable-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged  # moved, never deleted
    assert any(THEORY_CSV in r.getMessage() and aside[0].name in r.getMessage() for r in caplog.records
               if r.levelname == "WARNING")
    assert not (tmp_path / ".lock").exists()


def test_a_second_run_on_the_same_out_is_refused(tmp_path):
    with SweepStore(tmp_path):
        with pytest.raises(SweepError, match="another phase-diagram run"):
            with SweepStore(tmp_path):
                pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_external_scheduler_and_two_workers_give_the_same_csv(client, tmp_path):
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              cwd=tmp_path, env=WORKER_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                           "--no-dashboard"], cwd=tmp_path, env=WORKER_ENV,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=90)
            assert all(h.startswith("tcp://127.0.0.1:") for h in c.scheduler_info()["workers"])
        cfg = config(omegas=parse_range("0:0.45:10", "--omega"))
        s = run_sweep(cfg, tmp_path / "remote", scheduler=address, theory_task=FAKE, progress=False,
                        plot=False)
        assert s["failed"] == [] and len(s["computed"]) == 30
    finally:
        for p in reversed(procs):  # workers first, then the scheduler
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    run_sweep(cfg, tmp_path / "local", client=client, theory_task=FAKE, progress=False, plot=False)
    same_outputs(tmp_path / "remote", tmp_path / "local")


def test_unreachable_scheduler_is_a_usage_error(tmp_path):
    with pytest.raises(SweepError, match="--scheduler: cannot connect"):
        with open_client(f"tcp://127.0.0.1:{_free_port()}", connect_timeout="2s"):
            pass


# --------------------------------------------------------------------------- plots and simulations


def test_plot_redraws_from_the_csv_alone(client, tmp_path, capsys):
    run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    figs = tmp_path / "figs"
    assert main(["plot", str(tmp_path / THEORY_CSV), "--out", str(figs)]) == 0
    assert (figs / "theory_diagram.png").stat().st_size > 10000 and (figs / "theory_diagram.pdf").exists()
    assert "theory_diagram.png" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / THEORY_CSV), "--out", str(figs), "--no-thresholds",
                 "--formats", "svg"]) == 0
    assert (figs / "theory_diagram.svg").exists()
    assert main(["plot", str(tmp_path / "nope.csv")]) == 2
    assert main(["plot", str(tmp_path / THRESHOLDS_CSV)]) == 2
    assert main(["plot", str(tmp_path / THEORY_CSV), "--formats", "gif"]) == 2


def test_simulation_sweep_runs_validation_runs_and_plots(client, tmp_path):
    cfg = config(omegas=(0.3,), alphas=(0.5, 2.0), what="simulation", d=16, seeds=2, steps=5, n_test=64)
    s = run_sweep(cfg, tmp_path, client=client, progress=False)
    assert s["failed"] == [] and len(s["computed"]) == 1 * 2 * 2 * 2
    _, rows = read_csv_rows(tmp_path / SIMULATION_CSV)
    assert len(rows) == 8
    for r in rows:
        for k in ("test_error", "train_loss", "m", "theta_over_sigma2", "linear_test_error", "d", "steps", "lam",
                  "init", "run_index", "base_seed"):
            assert r[k] != "", k
    _, pts = read_csv_rows(tmp_path / "simulation_points.csv")
    assert len(pts) == 2 and all(p["n_runs"] == "4" for p in pts)
    assert (tmp_path / "simulation_diagram.png").exists()
    # deterministic: seeds fix the runs, so a second sweep elsewhere gives the same numbers
    again = run_sweep(cfg, tmp_path / "again", client=client, progress=False, plot=False)
    assert again["failed"] == []
    assert table(tmp_path / SIMULATION_CSV, ("task",)) == table(tmp_path / "again" / SIMULATION_CSV, ("task",))


def test_the_starts_of_a_run_train_as_one_batch_with_the_rows_of_each_run_alone(client, tmp_path):
    """The runner joins the runs of one data set (the starts of one run) into one task; every row is
    the one the run's own task gives alone, timings apart."""
    from attnphase.sweeps.tasks import batch_simulations, simulation_batch_task

    cfg = config(omegas=(0.3,), alphas=(0.5, 2.0), what="simulation", d=16, seeds=2, steps=7, n_test=32)
    tasks = make_tasks(cfg, fake_theory_task, simulation_run_task)
    joined = batch_simulations(tasks)
    assert len(joined) == 4 and all(t.fn is simulation_batch_task and len(ms) == 2 for t, ms in joined)
    assert sorted(m.key for _, ms in joined for m in ms) == sorted(t.key for t in tasks)
    fakes = [dataclasses.replace(t, fn=fake_theory_task) for t in tasks]
    assert batch_simulations(fakes) == [(t, [t]) for t in fakes]  # other functions are left alone
    s = run_sweep(cfg, tmp_path, client=client, progress=False, plot=False)
    assert s["failed"] == [] and sorted(s["computed"]) == sorted(t.key for t in tasks)
    _, rows = read_csv_rows(tmp_path / SIMULATION_CSV)
    by_key = {r["task"]: r for r in rows}
    for t in tasks:
        (alone,) = simulation_run_task(t.payload)["rows"]
        row = by_key[t.key]
        for k, v in alone.items():
            if k not in VOLATILE:
                assert row[k] == cell(v), (t.key, k)


def test_long_tasks_are_scheduled_first():
    """Branch tasks (the longest) outrank threshold tasks, and theory outranks
    simulation runs, so a sweep ends on short tasks."""
    config = SweepConfig(spec=ModelSpec(), omegas=(0.1, 0.2), alphas=(1.0, 2.0), what="both")
    tasks = make_tasks(config, fake_theory_task, simulation_run_task)
    ranks = {}
    for t in tasks:
        kind = t.payload.get("job", "simulation") if t.kind == "theory" else "simulation"
        ranks.setdefault(kind, set()).add(task_priority(t))
    assert all(len(r) == 1 for r in ranks.values())
    assert ranks["branch"].pop() > ranks["thresholds"].pop() > ranks["simulation"].pop()


def test_threshold_scan_curves_from_branch_rows_are_the_same_from_memory_and_from_the_csv(tmp_path):
    """A threshold task starts from its column's branch rows read back from theory.csv,
    so a resumed sweep brackets the roots from exactly the values an uninterrupted one
    used: the rows' values and their CSV text give the same points and spinodals."""
    from numerics.api import scan_curves_from_rows

    rows = []
    for branch, alphas, exists in (("semantic", (0.5, 0.6, 0.7), (False, True, True)),
                                   ("positional", (0.5, 0.6, 0.7), (True, True, False))):
        for a, e in zip(alphas, exists):
            rows.append({"alpha": a, "branch": branch, "exists": e, "converged": e, "precision": "fast",
                         "q": 0.1 + a / 3 if e else float("nan"), "m": 0.0 if branch == "semantic" else 0.25,
                         "V": 12.0 + a, "theta": 0.15 if branch == "semantic" else 0.0,
                         "test_error": 0.002 + a / 7, "train_loss": 0.003 + a / 11,
                         "spinodal_lower_alpha": 0.53 if branch == "semantic" else float("nan"),
                         "spinodal_lower_alpha_error": 0.0064 if branch == "semantic" else float("nan"),
                         "spinodal_lower_last_found": 0.6 if branch == "semantic" else float("nan"),
                         "spinodal_upper_alpha": 0.66 if branch == "positional" else float("nan"),
                         "spinodal_upper_alpha_error": 0.0064 if branch == "positional" else float("nan"),
                         "spinodal_upper_last_found": 0.6 if branch == "positional" else float("nan")})
    header = list(rows[0])
    (tmp_path / "t.csv").write_text(render_csv(header, rows, True))
    _, text_rows = read_csv_rows(tmp_path / "t.csv")
    from_memory, from_csv = scan_curves_from_rows(rows), scan_curves_from_rows(text_rows)
    assert from_memory == from_csv
    sem, pos = from_csv["semantic"], from_csv["positional"]
    assert [p.alpha for p in sem.points] == [0.6, 0.7] and [p.alpha for p in pos.points] == [0.5, 0.6]
    assert sem.points[0].train_loss == 0.003 + 0.6 / 11 and pos.points[1].overlaps.m == 0.25
    assert sem.spinodals == [{"branch": "semantic", "alpha": 0.53, "alpha_error": 0.0064, "side": "lower",
                              "last_found": 0.6}]
    assert [s["side"] for s in pos.spinodals] == ["upper"] and pos.spinodals[0]["last_found"] == 0.6


class _CountingClient:
    """The test cluster's client, counting the tasks in flight at each submission."""

    def __init__(self, client):
        self._client, self.in_flight, self.most, self.order = client, 0, 0, []

    def __getattr__(self, name):
        return getattr(self._client, name)

    def submit(self, fn, *args, **kw):
        fut = self._client.submit(fn, *args, **kw)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.order.append(kw["key"].rsplit("-", 1)[0])
        fut.add_done_callback(lambda f: setattr(self, "in_flight", self.in_flight - 1))
        return fut


def test_no_more_tasks_in_flight_than_worker_threads(client, tmp_path):
    """Tasks are handed to the cluster one per free worker thread, by priority, so no
    task waits in one worker's queue while another worker is idle (submitted all at
    once, the target diagram's workers idled for 19% of the run). Branch tasks go
    first; each column's thresholds follow its branches."""
    counting = _CountingClient(client)
    s = run_sweep(config(), tmp_path, client=counting, theory_task=functools.partial(FAKE, delay=0.05),
                    progress=False, plot=False)
    assert s["failed"] == [] and len(s["computed"]) == 9
    threads = sum(client.nthreads().values())
    assert threads == 2 and 1 <= counting.most <= threads
    kinds = ["thresholds" if k.endswith("thresholds") else "branch" for k in counting.order]
    assert kinds[:2] == ["branch", "branch"] and kinds.count("thresholds") == 3
    for w in ("0", "0.1", "0.2"):
        column = [counting.order.index(f"theory:omega={w}:{j}") for j in ("branch=semantic", "branch=positional")]
        assert max(column) < counting.order.index(f"theory:omega={w}:thresholds")


def test_worker_threads_of_a_cluster_that_cannot_say_is_one():
    class Broken:
        def nthreads(self):
            raise OSError("scheduler gone")

    class Four:
        def nthreads(self):
            return {"a": 1, "b": 3}

    assert worker_threads(Broken()) == 1 and worker_threads(Four()) == 4


def test_an_expression_attention_and_beta_travel_to_the_rows_and_the_settings(client, tmp_path):
    """The model columns carry the canonical expression and beta; a run with another beta has other settings."""
    spec = ModelSpec(attention="exp(beta*h1)/(exp(beta*h1) + exp(beta*h2))", beta=2.0,
                     teacher="(h1 + sqrt(h1**2 + 4))/(h1 + sqrt(h1**2 + 4) + h2 + sqrt(h2**2 + 4))")
    c = config(omegas=(0.1,), spec=spec)
    s = run_sweep(c, tmp_path, client=client, theory_task=FAKE, progress=False)
    assert s["failed"] == []
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    assert {ModelSpec.from_columns(r).replace(omega=spec.omega) for r in rows} == {spec}
    other = config(omegas=(0.1,), spec=spec.replace(beta=3.0))
    assert other.theory_settings(FAKE) != c.theory_settings(FAKE)


def test_stability_marks_the_points_whose_global_branch_is_not_rs_stable(client, tmp_path):
    """``--stability``: each converged point's row carries its replica-symmetric stability, and the
    derived points say where the global branch is not stable (the toy: the positional branch, global
    below alpha_c = 0.8 + 2 omega), which the maps mark with a cross."""
    from attnphase.sweeps import figures

    assert "stability" not in config().theory_settings(FAKE)  # a folder without it keeps its settings
    assert config(stability=True).theory_settings(FAKE)["stability"] is True
    s = run_sweep(config(stability=True), tmp_path, client=client, theory_task=FAKE, progress=False)
    assert s["failed"] == []
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    done = [r for r in rows if r["exists"] == "True"]
    assert done and all(r["rs_stability"] == "0.3" for r in done)
    _, pts = read_csv_rows(tmp_path / "theory_points.csv")
    marked = {(r["omega"], r["alpha"]) for r in pts if r["global_rs_unstable"] == "True"}
    assert marked == {(r["omega"], r["alpha"]) for r in pts if r["global_branch"] == "positional"}
    assert ("0.0", "0.6") in marked and ("0.0", "1.0") not in marked
    points = figures.points_from_csv(tmp_path / "theory_points.csv")
    fig = figures.draw(points)
    crosses = [line for line in fig.axes[0].get_lines() if line.get_label() == figures.RS_UNSTABLE_TEXT]
    assert len(crosses) == 1 and len(crosses[0].get_xdata()) == len(marked)
    # without the stability: no column, no cross
    plain = figures.theory_points([{k: v for k, v in r.items() if not k.startswith("rs_")} for r in rows])
    assert all("global_rs_unstable" not in p for p in plain)
    assert not [line for line in figures.draw(plain).axes[0].get_lines()
                if line.get_label() == figures.RS_UNSTABLE_TEXT]


def test_stability_needs_the_theory(tmp_path, capsys):
    status = main(["phase-diagram", "--what", "simulation", "--stability", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "--stability" in err[0]

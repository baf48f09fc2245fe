"""Phase diagrams of the general model (``attnphase phase-diagram`` for any ``L, r, t, P``).

The theory tasks run the real task code on ``tests.fakes.FakeGeneralTheoryAPI`` (closed-form
branches as real fixed-point records, their rows read back by the real ``from_row``), so these
tests check the machinery: the branches of each column, the rows, the thresholds row with every
change of the global branch, resuming (a SIGKILLed sweep too), failures, the figures. One real
tiny sweep (QMC, draft precision) is marked slow.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import pytest

from attnphase.cli import build_parser, main
from attnphase.commands.sweep import cmd_phase_diagram
from attnphase.errors import CommandFailed
from derivations.spec import ModelSpec
from numerics.result import from_row
from tidyio import ROW_CHECK, read_csv_rows
from attnphase.sweeps import SweepError
from attnphase.sweeps.config import SweepConfig
from attnphase.sweeps.grid import theory_key
from attnphase.sweeps.runner import run_sweep
from attnphase.sweeps.store import FAILURES_CSV, THEORY_CSV, THRESHOLDS_CSV
from attnphase.sweeps.tasks import expected_rows, make_tasks
from tests.fakes import FakeGeneralTheoryAPI, fake_theory_task, kill_fake_sweep_when

FAKE = fake_theory_task
RANK_TWO = ModelSpec(rank=2)
THREE_TOKENS = ModelSpec(tokens=3)
ALPHAS = (0.2, 0.7, 1.2, 1.7, 2.2)
VOLATILE = {"task_wall_time", "wall_time", ROW_CHECK}
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as cl:
        yield cl


def config(spec=RANK_TWO, omegas=(0.0, 0.15), alphas=ALPHAS, **kw):
    return SweepConfig(spec=spec, omegas=omegas, alphas=alphas, **kw)


def table(path):
    _, rows = read_csv_rows(path)
    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    return sorted(rows, key=lambda r: (r["task"], r.get("alpha", "")))


def same_outputs(a: Path, b: Path):
    for name in (THEORY_CSV, THRESHOLDS_CSV):
        assert table(a / name) == table(b / name), name


# --------------------------------------------------------------------------- the tasks of a column


def test_each_column_follows_every_branch_of_the_model_then_its_thresholds():
    for spec, branches in ((RANK_TWO, ("semantic", "positional", "trivial", "mixed")),
                           (THREE_TOKENS, ("semantic", "positional", "trivial")),
                           (ModelSpec(), ("semantic", "positional"))):
        cfg = config(spec=spec, omegas=(0.1,))
        assert cfg.theory_branches == branches
        tasks = make_tasks(cfg, FAKE, None)
        assert [t.key for t in tasks] == [theory_key(0.1, b) for b in branches + ("thresholds",)]
        assert tasks[-1].payload["branches"] == list(branches)
        rows = expected_rows(cfg)
        assert [rows(THEORY_CSV, t.key) for t in tasks] == [len(ALPHAS)] * len(branches) + [None]
        assert rows(THRESHOLDS_CSV, tasks[-1].key) == 1
    limited = config(spec=THREE_TOKENS, omegas=(0.1,), branches=("trivial", "semantic"))
    assert [t.key for t in make_tasks(limited, FAKE, None)] == [
        theory_key(0.1, b) for b in ("semantic", "trivial", "thresholds")]
    # the branches decide the rows: they are in the settings a resumed sweep must match
    assert limited.theory_settings(FAKE)["branches"] == ["semantic", "trivial"]


@pytest.mark.parametrize("spec, branches, message", [
    (THREE_TOKENS, ("mixed",), "'mixed' is not a branch of this model"),
    (RANK_TWO, ("semantic", "semantic"), "each branch once"),
    (ModelSpec(), ("semantic",), "--branches is for the general model"),
])
def test_branches_the_model_does_not_have_are_refused(spec, branches, message):
    with pytest.raises(SweepError, match=message):
        config(spec=spec, branches=branches)


@pytest.mark.parametrize("argv, flag", [
    (["--tokens", "3", "--branches", "mixed"], "--branches:"),
    (["--rank", "2", "--branches", "semantic,bogus"], "--branches:"),
    (["--branches", "semantic"], "--branches:"),
])
def test_bad_branches_exit_2_with_one_line(argv, flag, capsys, tmp_path):
    assert main(["phase-diagram", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- rows, thresholds, figures


def test_rank_two_rows_thresholds_points_and_figure(client, tmp_path):
    s = run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False)
    assert s["failed"] == [] and len(s["computed"]) == 2 * 5
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    assert len(rows) == 2 * 5 * 4  # one row per grid point and branch
    for r in rows:  # the model and the settings where a branch does not exist too
        for k in ("tokens", "rank", "teacher_rank", "P11", "P21", "A11", "precision", "alpha_grid",
                  "settings_hash", "linear_test_error"):
            assert r[k] != "", k
    # the packed components of the rank-2 matrices, and the gauge invariants, with errors
    for k in ("q_11", "q_12", "q_22", "m_1_1", "m_1_2", "theta_1_1", "theta_2_1", "q_eigenvalues_2",
              "m_singular_values_1", "q_12_error", "test_error_error"):
        assert k in rows[0], k
    # a grid point where a branch does not exist: exists = False, empty values, the reason
    sem = [r for r in rows if r["branch"] == "semantic" and r["alpha"] == "0.2"]
    assert len(sem) == 2 and all(r["exists"] == "False" and r["q_11"] == r["test_error"] == "" for r in sem)
    assert all(r["status"] == "not found" and "0.2" in r["branch_note"] for r in sem)
    # a row read back is the fixed point the task wrote
    row = next(r for r in rows if r["branch"] == "mixed" and r["omega"] == "0.0" and r["alpha"] == "2.2")
    fp = from_row(row)
    expected = FakeGeneralTheoryAPI().fixed_point(RANK_TWO.replace(omega=0.0), 2.2, "mixed", "fast")
    assert fp.values == expected.values and fp.model == expected.model and fp.converged
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    by_omega = {r["omega"]: r for r in thr}
    # omega = 0: positional -> semantic at 0.8 (crossing), semantic -> mixed at 1.3 (appearance)
    t0 = by_omega["0.0"]
    assert t0["threshold_status"] == "ok" and t0["bracket_source"] == "branch rows"
    assert float(t0["alpha_c"]) == pytest.approx(0.8) and (t0["alpha_c_below"], t0["alpha_c_above"]) == \
        ("positional", "semantic")
    changes = json.loads(t0["transitions"])
    assert [(c["below"], c["above"], c["kind"]) for c in changes] == [("positional", "semantic", "crossing"),
                                                                       ("semantic", "mixed", "appearance")]
    assert [c["alpha"] for c in changes] == pytest.approx([0.8, 1.3])
    assert [g["branch"] for g in json.loads(t0["global_minimum"])] == ["positional", "positional", "semantic",
                                                                      "mixed", "mixed"]
    assert float(t0["alpha_l"]) == pytest.approx(1.0)
    # the derived points: the global branch at each grid point, its test error minus the baseline
    _, pts = read_csv_rows(tmp_path / "theory_points.csv")
    assert len(pts) == 10
    glob = {(p["omega"], p["alpha"]): p["global_branch"] for p in pts}
    # omega = 0.15: alpha_c = 1.1, the mixed branch from 1.6
    assert [glob[("0.15", str(a))] for a in ALPHAS] == ["positional", "positional", "semantic", "mixed", "mixed"]
    p = next(p for p in pts if p["omega"] == "0.0" and p["alpha"] == "1.2")
    assert float(p["test_error_diff"]) == pytest.approx(0.004 / 2.2 - 0.002)
    assert float(p["train_loss_trivial"]) > float(p["train_loss_semantic"])
    assert (tmp_path / "theory_diagram.png").stat().st_size > 10000


def test_a_point_that_did_not_converge_is_written_and_never_global(client, tmp_path):
    run_sweep(config(spec=THREE_TOKENS, omegas=(0.35,), alphas=(1.0, 1.4, 1.8)), tmp_path, client=client,
              theory_task=FAKE, progress=False, plot=False)
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    stuck = next(r for r in rows if r["branch"] == "semantic" and r["alpha"] == "1.4")
    assert stuck["exists"] == "True" and stuck["converged"] == "False" and stuck["status"] == "max_iterations"
    assert stuck["q"] != ""  # the values are reported, flagged
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    assert [g["branch"] for g in json.loads(thr[0]["global_minimum"])] == ["positional", "positional", "semantic"]


def test_the_thresholds_row_does_not_depend_on_the_order_of_the_branch_rows(client, tmp_path):
    """The branch rows come in the order their tasks finished; at omega = 0.2 the toy's positional
    and semantic training losses are equal at alpha = 1.2, and the global minimum there is the
    first of the model's branches in every order."""
    cfg = config(omegas=(0.2,))
    run_sweep(cfg, tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    payload = make_tasks(cfg, FAKE, None)[-1].payload
    rows_of = [FAKE({**payload, "branch_rows": order})["thresholds"] for order in (rows, rows[::-1])]
    for r in rows_of:
        r.pop("task_wall_time")
    # as text, where a NaN (the line quadrature's spinodal columns, none here) equals itself
    assert json.dumps(rows_of[0], sort_keys=True) == json.dumps(rows_of[1], sort_keys=True)
    assert [g["branch"] for g in json.loads(rows_of[0]["global_minimum"])][2] == "semantic"


def test_a_thresholds_task_without_branch_rows_follows_the_branches_itself(client, tmp_path):
    cfg = config(omegas=(0.0,))
    run_sweep(cfg, tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    _, stored = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    own = FAKE(make_tasks(cfg, FAKE, None)[-1].payload)["thresholds"]
    assert own["bracket_source"] == "own scan" and stored[0]["bracket_source"] == "branch rows"
    assert json.loads(own["transitions"]) == json.loads(stored[0]["transitions"])
    assert own["alpha_c"] == pytest.approx(0.8) and own["global_minimum"] == stored[0]["global_minimum"]


def test_no_change_and_no_branch_on_the_grid_are_notes_not_failures(client, tmp_path, capsys):
    # omega = 0.9: alpha_c = 2.6 is beyond the grid; semantic alone below 0.3: not on the grid at all
    args = build_parser().parse_args(["phase-diagram", "--tokens", "3", "--omega", "0.9", "--alpha", "0.2:2.2:5",
                                      "--out", str(tmp_path / "a"), "--quiet", "--no-plot"])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    out = capsys.readouterr().out
    assert "thresholds not found: the global minimum does not change branch on alpha in [0.2, 2.2] " \
           "(positional throughout); alpha_l not bracketed: beyond the scan" in out
    _, thr = read_csv_rows(tmp_path / "a" / THRESHOLDS_CSV)
    assert thr[0]["threshold_status"] == "not_bracketed" and thr[0]["alpha_c"] == "nan"
    assert json.loads(thr[0]["transitions"]) == []
    args = build_parser().parse_args(["phase-diagram", "--tokens", "3", "--omega", "0.1", "--alpha", "0.1:0.25:2",
                                      "--branches", "semantic", "--out", str(tmp_path / "b"), "--quiet", "--no-plot"])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    out = capsys.readouterr().out
    assert "note: theory:omega=0.1:branch=semantic: semantic branch not found at alpha = 0.1, 0.25" in out
    assert "thresholds not found: no branch of semantic was found on the scan" in out
    _, thr = read_csv_rows(tmp_path / "b" / THRESHOLDS_CSV)
    assert thr[0]["threshold_status"] == "not_bracketed" and math.isnan(float(thr[0]["alpha_c"]))


def test_plot_redraws_the_general_diagram_from_the_csv_alone(client, tmp_path, capsys):
    run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    figs = tmp_path / "figs"
    assert main(["plot", str(tmp_path / THEORY_CSV), "--out", str(figs), "--formats", "png"]) == 0
    assert (figs / "theory_diagram.png").stat().st_size > 10000
    (tmp_path / "theory_points.csv").unlink(missing_ok=True)
    run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=True)
    assert main(["plot", str(tmp_path / "theory_points.csv"), "--out", str(figs), "--formats", "svg"]) == 0
    assert (figs / "theory_diagram.svg").exists()
    assert "theory_diagram.svg" in capsys.readouterr().out


# --------------------------------------------------------------------------- resuming and failures


def test_resume_skips_done_tasks_extends_the_grid_and_refuses_other_branches(client, tmp_path):
    run_sweep(config(omegas=(0.0,)), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    before = (tmp_path / THEORY_CSV).read_bytes()
    again = run_sweep(config(omegas=(0.0,)), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    assert again["computed"] == [] and again["skipped"] == 5
    assert (tmp_path / THEORY_CSV).read_bytes() == before
    more = run_sweep(config(), tmp_path, client=client, theory_task=FAKE, progress=False, plot=False)
    assert sorted(more["computed"]) == sorted(theory_key(0.15, j) for j in
                                              ("semantic", "positional", "trivial", "mixed", "thresholds"))
    with pytest.raises(SweepError, match="branches"):
        run_sweep(config(branches=("semantic", "positional")), tmp_path, client=client, theory_task=FAKE,
                  progress=False, plot=False)
    fresh = tmp_path / "fresh"
    run_sweep(config(), fresh, client=client, theory_task=FAKE, progress=False, plot=False)
    same_outputs(tmp_path, fresh)


def test_a_failed_branch_fails_its_thresholds_and_a_rerun_retries_only_them(client, tmp_path, capsys):
    argv = ["phase-diagram", "--rank", "2", "--omega", "0:0.15:2", "--alpha", "0.2:2.2:5", "--out", str(tmp_path),
            "--quiet", "--no-plot"]
    args = build_parser().parse_args(argv)
    failing = functools.partial(FAKE, fail_omegas=(0.15,), fail_only="mixed")
    with pytest.raises(CommandFailed, match="task\\(s\\) failed"):
        cmd_phase_diagram(args, theory_task=failing, client=client)
    _, fails = read_csv_rows(tmp_path / FAILURES_CSV)
    assert [f["task"] for f in fails] == ["theory:omega=0.15:branch=mixed", "theory:omega=0.15:thresholds"]
    capsys.readouterr()
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    assert "10 tasks: 8 already done, 2 computed, 0 failed" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    run_sweep(config(), fresh, client=client, theory_task=FAKE, progress=False, plot=False)
    same_outputs(tmp_path, fresh)


SWEEP = ["phase-diagram", "--rank", "2", "--omega", "0:0.3:4", "--alpha", "0.2:2.2:5", "--quiet", "--no-plot"]


def test_a_killed_general_sweep_resumes_to_the_rows_of_an_uninterrupted_one(client, tmp_path, capsys):
    out = tmp_path / "killed"
    # killed once six of its 16 branch tasks are stored
    kill_fake_sweep_when(lambda: len(read_csv_rows(out / THEORY_CSV)[1]) >= 5 * 6, [*SWEEP, "--out", str(out)], ENV)
    with open(out / THEORY_CSV, "ab") as f:  # a row torn by the kill
        f.write(b"theory:omega=0.3:branch=mixed,0.3,0.2,mix")
    args = build_parser().parse_args([*SWEEP, "--out", str(out)])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    report = capsys.readouterr().out.splitlines()[0]
    done = int(report.split(":")[1].split()[0])
    assert report.startswith("20 tasks:") and 6 <= done < 20, report
    reference = tmp_path / "uninterrupted"
    args = build_parser().parse_args([*SWEEP, "--out", str(reference)])
    assert cmd_phase_diagram(args, theory_task=FAKE, client=client) == 0
    same_outputs(out, reference)


# --------------------------------------------------------------------------- a real sweep


@pytest.mark.slow
def test_a_real_three_token_draft_sweep(tmp_path, capsys):
    """Three tokens, one omega, two alphas, the semantic and trivial branches, draft QMC: the
    rows are the solver's fixed points, and the thresholds row is the general thresholds' own."""
    from numerics.branches.follow import walk_branch

    argv = ["phase-diagram", "--tokens", "3", "--omega", "0.3", "--alpha", "1:2:2", "--branches",
            "semantic,trivial", "--precision", "draft", "--workers", "1", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    _, rows = read_csv_rows(tmp_path / THEORY_CSV)
    assert len(rows) == 4 and all(r["exists"] == "True" and r["integrator"] == "qmc" for r in rows)
    spec = ModelSpec(tokens=3, omega=0.3)
    direct = walk_branch(spec, [1.0, 2.0], "semantic", "draft").points
    for fp in direct:
        row = next(r for r in rows if r["branch"] == "semantic" and float(r["alpha"]) == fp.alpha)
        assert from_row(row).values == pytest.approx(fp.values, rel=1e-12)
    _, thr = read_csv_rows(tmp_path / THRESHOLDS_CSV)
    assert thr[0]["bracket_source"] == "branch rows" and thr[0]["threshold_status"] in (
        "ok", "not_bracketed", "alpha_l_not_bracketed")
    assert (tmp_path / "theory_diagram.png").exists()

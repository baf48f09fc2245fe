"""Bad input as a new user (or an attacker) gives it: typed expressions that hung the program or
crashed it, output paths that would lose data or replace a device, input files of NaN, numbers
beyond the range where the computation is finite, sizes beyond what the machine holds. Each ends
within seconds, before any work, with exit status 2 (or 1 where the command ran and found no
answer) and one line that says why; nothing is written.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

import pytest

from attnphase import cli

#: no case may take longer (each takes well under a second once the modules are imported)
BOUND_S = 10


@contextlib.contextmanager
def bounded(seconds: float = BOUND_S):
    def overran(signum, frame):
        raise AssertionError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run(argv, capsys) -> tuple:
    """``attnphase argv`` in this process, bounded in time: ``(status, stdout, the one stderr line)``."""
    with bounded():
        status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "fault of the program" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"attnphase {argv[0]}: "), err
    return status, out, lines[0]


def no_work(monkeypatch):
    """The solvers and the simulator raise if called: a refusal must come before any work."""
    import numerics.api as api
    import validation.simulate as simulate

    for name in ("solve", "solve_all", "follow", "follow_branch", "thresholds"):
        monkeypatch.setattr(api, name, _work_started)
    monkeypatch.setattr(simulate, "simulate", _work_started)


def _work_started(*args, **kwargs):
    raise AssertionError("work started")


SOLVE = ["solve", "--alpha", "1", "--precision", "draft", "--branch", "semantic", "--attention"]


@pytest.mark.parametrize("expression, reason", [
    ("10**10**10", "the exponent 1e+10 exceeds 64"),
    ("h1*9**9**9", "the exponent 3.8742e+08 exceeds 64"),
    ("h1*2**2**2**2**2**2", "the exponent 65536 exceeds 64"),
    ("h1*1e999999999", "the number '1e999999999' exceeds 1e+12"),
    ("exp(exp(exp(exp(h1))))", "overflows double precision"),
    ("exp(" * 15 + "h1" + ")" * 15, "overflows double precision"),
    ("1/(1+" * 30 + "h1" + ")" * 30, "nested too deep"),
    ("1/(1+h1**1000000)", "the exponent 1e+06 exceeds 64"),
    ("exp(1000*h1)", "overflows double precision"),
    ("1/(exp(h1) - 2)", "has a pole: the denominator 'exp(h1) - 2' vanishes near h1=0.69"),
    ("1/sin(h1 - 0.1234)", "has a pole: the denominator 'sin(h1 - 617/5000)' vanishes near h1=0.12"),
    ("h1/0", "infinite or undefined as written"),
    ("log(0)*h1", "infinite or undefined as written"),
    ("1/Abs(h1 - 0.3)", "not twice differentiable: a kink where h1 - 3/10 = 0"),
    ("log(Abs(h1 - 0.3))", "not twice differentiable: a kink where h1 - 3/10 = 0"),
    ("+".join(["h1"] * 30000), "too long to be an attention (89999 characters"),
    ("(" * 300 + "h1" + ")" * 300, "cannot parse (too many nested parentheses): '((((("),
    ("h1 $ 2", "cannot parse: '$' is not allowed"),
    ("7" * 5000 + "*h1", "too long to be an attention (5003 characters"),
    ("h1**(10**7)", "the exponent 1e+07 exceeds 64"),
])
def test_an_expression_that_hung_or_crashed_is_refused_in_one_short_line(expression, reason, capsys, monkeypatch):
    """The reason comes first; at most 60 characters of the expression are quoted."""
    no_work(monkeypatch)
    status, _, line = run([*SOLVE, expression], capsys)
    assert status == 2 and line.startswith(f"attnphase solve: error: attention: {reason}"), line
    assert len(line) < 400, line


# --------------------------------------------------------------------------- output paths


@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_a_curve_csv_named_as_its_own_figure_is_refused(suffix, tmp_path, capsys, monkeypatch):
    no_work(monkeypatch)
    out = tmp_path / f"same{suffix}"
    status, _, line = run(["curve", "--alphas", "1,2", "--precision", "draft", "--out", out, "--figure"], capsys)
    assert status == 2 and f"--out: {out} is also written by --figure" in line, line
    assert not out.exists()


def test_a_device_or_a_pipe_as_output_is_refused_and_kept(tmp_path, capsys, monkeypatch):
    no_work(monkeypatch)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for target in (pipe, Path(os.devnull)):
        kind = os.stat(target).st_mode
        status, _, line = run(["curve", "--alphas", "1,2", "--precision", "draft", "--out", target], capsys)
        assert status == 2 and f"--out: {target} is not a regular file" in line, line
        assert os.stat(target).st_mode == kind and not stat.S_ISREG(kind)


def test_a_curve_of_nan_to_compare_is_refused_naming_its_row(tmp_path, capsys, monkeypatch):
    no_work(monkeypatch)
    nan = tmp_path / "nan.csv"
    nan.write_text("alpha,branch,q,m,theta,test_error,global_minimum,sigma,lam,omega,attention,teacher,regulariser,"
                   "converged\n1.0,semantic,nan,nan,nan,nan,True,0.5,0.01,0.3,softmax,softmax,ridge,True\n")
    status, _, line = run(["curve", "--alphas", "1,2", "--precision", "draft", "--out", tmp_path / "c.csv",
                           "--figure", "--compare", nan], capsys)
    assert status == 2 and "data row 1 (alpha = 1.0, semantic) is marked converged but q = 'nan'" in line, line
    assert not (tmp_path / "c.csv").exists()


# --------------------------------------------------------------------------- numbers and sizes


@pytest.mark.parametrize("argv, reason", [
    (["simulate", "--d", "20", "--steps", "5", "--n-test", "20", "--lr", "1e308"],
     "--lr: must be at most 3.4e+38, the largest float32"),
    (["simulate", "--d", "1000000"], "--d: the data of one run (n = 2e+06 samples"),
    (["simulate", "--alpha", "1e7"], "--alpha: the data of one run (n = 1e+10 samples"),
    (["simulate", "--n-test", "1000000000000"], "--n-test: the data of one run"),
    (["simulate", "--steps", "1000000000000"], "--steps: 1 run(s) of 1e+12 steps"),
    (["simulate", "--seeds", "1000000000"], "--seeds: 1e+09 run(s) of 5e+03 steps"),
    # counts as they are often written, in a float's notation: the same checks, not a parse error
    (["simulate", "--n-test", "1e12"], "--n-test: the data of one run"),
    (["simulate", "--steps", "1e12"], "--steps: 1 run(s) of 1e+12 steps"),
    (["simulate", "--seeds", "1e9"], "--seeds: 1e+09 run(s) of 5e+03 steps"),
    (["simulate", "--d", "1e6"], "--d: the data of one run (n = 2e+06 samples"),
    (["solve", "--alpha", "1", "--tokens", "1e6"], "--tokens: 1000000 is beyond any model"),
    (["phase-diagram", "--what", "simulation", "--steps", "1e12"], "--steps: "),
    (["validate", "--d-scan", "--d-values", "10,100000000"], "--d-values: the data of one run"),
    (["phase-diagram", "--omegas", "0:0.45:100000", "--alphas", "0.1:2:100000"],
     "--omegas, --alphas: a grid of 100000 x 100000 = 1e+10 points is beyond"),
    (["phase-diagram", "--omegas", "0:0.45:100", "--alphas", "0.1:2:100"],
     "--omegas, --alphas: the theory on 100 x 100 grid points at fast precision would take about 8.61 hours"),
    (["solve", "--alpha", "1", "--tokens", "50", "--rank", "20"], "--rank: the first derivation"),
    (["solve", "--alpha", "1", "--tokens", "1000000"], "--tokens: 1000000 is beyond any model"),
    (["solve", "--alpha", "1", "--rank", "100000"], "--rank: 100000 is beyond any model"),
    (["derive", "--tokens", "40", "--rank", "10"], "--rank: the first derivation and code generation of L = 40"),
    (["curve", "--alphas", "0.1:2.5:100000"], "--alphas: the curve (200000 points at fast precision) would take "
                                              "about 16.2 days"),
    (["thresholds", "--alphas", "0.1:2.5:100000"], "--alphas: the thresholds' scan"),
    (["run", "--alphas", "0.1:2.5:100000"], "--alphas: the curve (200000 points at draft precision)"),
])
def test_a_size_beyond_the_machine_or_an_afternoon_is_refused_with_its_estimate(argv, reason, tmp_path, capsys,
                                                                                 monkeypatch):
    no_work(monkeypatch)
    if argv[0] in ("validate", "phase-diagram", "run"):
        argv = [*argv, "--out", tmp_path / "out"]
    status, _, line = run(argv, capsys)
    assert status == 2 and line.startswith(f"attnphase {argv[0]}: error: {reason}"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, reason", [
    ("1.5", "expected a whole number, got '1.5'"),
    ("abc", "expected a whole number, got 'abc'"),
    ("1e999999999", "'1e999999999' is beyond any count this program takes"),
    ("inf", "'inf' is beyond any count this program takes"),
])
def test_a_count_that_is_not_a_whole_number_is_refused_in_one_line(text, reason, capsys, monkeypatch):
    no_work(monkeypatch)
    status, _, line = run(["simulate", "--steps", text], capsys)
    assert status == 2 and line == f"attnphase simulate: error: argument --steps: {reason}" + (
        "" if "beyond" not in reason else " (at most 18 digits)"), line


def test_a_count_in_a_floats_notation_is_its_integer():
    from attnphase.options import whole_number

    assert [whole_number(t) for t in ("7", "1e6", "1000.0", "2E3", "0")] == [7, 10 ** 6, 1000, 2000, 0]
    assert type(whole_number("1e6")) is int


def test_yes_runs_what_is_long_but_within_reach_and_nothing_out_of_reach():
    import argparse

    from attnphase.costs import LONG_RUN_S, OUT_OF_REACH_S, require_time
    from attnphase.errors import UsageError

    require_time(2 * LONG_RUN_S, "--steps", "runs", argparse.Namespace(yes=True))
    with pytest.raises(UsageError, match="add --yes"):
        require_time(2 * LONG_RUN_S, "--steps", "runs", argparse.Namespace(yes=False))
    with pytest.raises(UsageError, match="out of reach"):
        require_time(2 * OUT_OF_REACH_S, "--steps", "runs", argparse.Namespace(yes=True))


@pytest.mark.parametrize("command", ["simulate", "validate", "phase-diagram", "curve", "thresholds", "run", "derive"])
def test_the_defaults_pass_the_size_checks(command):
    """What the README runs is never asked for --yes: the checks on the default settings."""
    from attnphase.commands.sweep import config_from_args
    from attnphase.costs import check_simulations, check_theory_points
    from attnphase.options import model_from_args

    args = cli.build_parser().parse_args([command] + (["--out", "x"] if command in ("validate", "phase-diagram",
                                                                                       "run") else []))
    if command == "phase-diagram":
        config_from_args(args)
    else:
        model_from_args(args)
    if command in ("simulate", "validate"):
        check_simulations(40 if command == "validate" else args.seeds, args.d, 2.0, args.steps, args.n_test, 2, 1,
                          args.dtype, args)
    if command in ("curve", "thresholds", "run"):
        check_theory_points(50, getattr(args, "precision", "fast") or "fast", False, "--alphas", "the curve", args)


# --------------------------------------------------------------------------- a point without a theory branch


def test_validate_writes_a_no_theory_row_where_the_branch_does_not_exist(tmp_path, capsys, monkeypatch):
    """The theory has no branch at alpha = 0.5 (BranchNotFound): validate keeps its simulations, writes
    its CSV and figure, and says NO THEORY for that point instead of ending on the exception."""
    import types

    import validation.theory_cache as theory_cache
    from numerics.api import BranchNotFound

    def solve(spec, alpha, branch, precision="fast"):
        if alpha == 0.5:
            raise BranchNotFound(f"{branch} branch not found at alpha = 0.5: the solve fell to the trivial point",
                                 branch, alpha)
        return types.SimpleNamespace(q=0.1, m=0.25 if branch == "positional" else 0.0, V=1.0,
                                     theta=0.0 if branch == "positional" else 0.15, test_error=0.0014,
                                     train_loss=0.0036, converged=True)

    fake = theory_cache.Theory(solve, lambda spec: types.SimpleNamespace(test_error=0.002))
    monkeypatch.setattr(theory_cache, "default_theory", lambda precision: fake)
    out = tmp_path / "v"
    with bounded(60):
        status = cli.main(["validate", "--alphas", "0.5,2", "--d", "20", "--seeds", "2", "--steps", "5",
                           "--n-test", "20", "--curve-points", "0", "--tolerance", "1e9", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert status == 0 and "Traceback" not in err, err
    lines = [line for line in stdout.splitlines() if line.startswith("NO THEORY alpha=0.5")]
    assert len(lines) == 2 and "which the theory does not have at this alpha" in lines[0], stdout
    assert (out / "validate.csv").stat().st_size > 0 and (out / "validate.png").exists()


def test_the_warning_summary_does_not_repeat_the_error_and_cuts_at_a_word():
    import logging

    summary = cli.WarningSummary()
    summary.setFormatter(logging.Formatter("%(message)s"))
    text = "alpha_l not bracketed: the global minimiser never beats the linear baseline on alpha in [0.5, 18]; " \
           "alpha_c is still reported"
    summary.emit(logging.LogRecord("numerics", logging.WARNING, "", 0, text, None, None))
    assert summary.line(f"alpha_l not bracketed: the global minimiser never beats the linear baseline on alpha "
                        f"in [0.5, 18]") == "1 warning logged (-v shows them)"
    line = summary.line("another error")
    assert line.endswith("alpha_c is still ... (-v shows them)"), line  # cut after a whole word


# --------------------------------------------------------------------------- the time budget of a typed attention


@pytest.mark.parametrize("command", ["solve", "curve", "derive"])
def test_a_typed_attention_past_its_time_limit_stops_naming_the_stage(command, tmp_path, capsys, monkeypatch):
    """An expression never derived before (an empty cache) takes seconds to derive: with
    --time-limit 0.3 the command stops there, in one line that names the stage."""
    monkeypatch.setenv("ATTNPHASE_CACHE_DIR", str(tmp_path / "cache"))
    argv = {"solve": ["solve", "--alpha", "1", "--precision", "draft", "--branch", "semantic"],
            "curve": ["curve", "--alphas", "1,2", "--precision", "draft", "--out", tmp_path / "c.csv"],
            "derive": ["derive"]}[command]
    # an expression of its own per command: one derived in this process is memoised, and where the
    # timer's exception was dropped mid-derivation (see the test below) that derivation completes
    c = {"solve": "0.125", "curve": "0.25", "derive": "0.375"}[command]
    status, _, line = run([*argv, "--attention", f"(1 + h1**2)/(2 + h1**2 + h2**2 + {c}*h1*h2)",
                           "--time-limit", "0.3"], capsys)
    assert status == 1 and "did not finish within --time-limit 0.3 s" in line, line
    assert line.startswith(f"attnphase {command}: error: the derivation"), line
    assert not (tmp_path / "c.csv").exists()


def test_a_time_limit_whose_exception_python_dropped_still_stops_the_stage(monkeypatch):
    """The timer's exception can fire inside a weak reference's callback or a finaliser, where Python
    drops it (and reports it as ignored): the expiry is still raised at the end of the stage it fired
    in, and the report is not printed."""
    import argparse
    import sys
    import time
    import types

    from attnphase import options
    from attnphase.errors import TimeLimitReached
    from derivations import ModelSpec

    reported = []

    def derivation_that_drops_it(spec):
        try:
            time.sleep(0.5)
        except TimeLimitReached as exc:  # what Python does with an exception raised in a weakref callback
            sys.unraisablehook(types.SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None,
                                                     err_msg=None, object=None))

    monkeypatch.setattr(options, "prepare_model", derivation_that_drops_it)
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with pytest.raises(TimeLimitReached, match="the derivation and code generation"):
        with options.typed_attention_budget(argparse.Namespace(time_limit=0.1), ModelSpec(attention="h1*h2")):
            pass
    assert reported == [] and sys.unraisablehook == reported.append  # not reported as ignored; the hook restored


def test_a_negative_time_limit_is_refused(capsys, monkeypatch):
    no_work(monkeypatch)
    for attention in ("h1", "softmax"):
        status, _, line = run(["solve", "--alpha", "1", "--attention", attention, "--time-limit", "-1"], capsys)
        assert status == 2 and "--time-limit: must be a number of seconds >= 0" in line, line


# --------------------------------------------------------------------------- a point asked for by name


@pytest.mark.slow
def test_the_named_positional_point_is_found_where_the_follower_finds_it(capsys):
    """omega = 0.3, lam = 0.0031, alpha = 0.8: every start of the direct solve falls to the trivial
    point; the draft follower reaches the branch there (m = 0.116), and so does solve (about 30 s),
    up to the sign of ``m``: flipping the student's direction (``h -> -h``, docs/theory.md, section
    4.10) maps a fixed point to one with ``-m`` and the same losses. The continuation's steps that
    stalled before it got there are not warnings: the point printed converged, and no line says it
    did not."""
    status = cli.main(["solve", "--omega", "0.3", "--lam", "0.0031", "--alpha", "0.8", "--branch", "positional",
                       "--precision", "draft"])
    out, err = capsys.readouterr()
    assert status == 0 and "not converged" not in err and not err.strip(), (out, err)
    m = float(next(line.split()[1] for line in out.splitlines() if line.startswith("m ")))
    assert abs(abs(m) - 0.116) < 2e-3, out


@pytest.mark.slow
def test_where_the_named_point_lies_past_the_end_at_fast_solve_says_so_and_how_to_find_the_end(capsys):
    """At fast precision the follower ends the same branch at alpha = 0.77 (a pitchfork near 0.79):
    solve says the draft rule reaches the point but fast does not, and names the command that
    locates the end (about a minute)."""
    status = cli.main(["solve", "--omega", "0.3", "--lam", "0.0031", "--alpha", "0.8", "--branch", "positional"])
    err = capsys.readouterr().err
    assert status == 1 and "the draft rule reaches it by continuation" in err and "attnphase curve" in err, err

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
    ("(" * 300 + "h1" + ")" * 300, "cannot parse"),
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

"""SIGINT, SIGTERM and SIGHUP end a command the same way: one line on stderr, exit status 130, 143
or 129, the files it writes whole or not at all, the store of a sweep readable and its lock
released (README.md, "Exit statuses").

Each case runs the command in a subprocess (the theory tasks of the Dask commands replaced by
:func:`tests.fakes.fake_theory_task` of 0.4 s, so that they are still running when the signal
comes) and signals that process alone, as ``kill`` does. By default SIGTERM and SIGHUP reach
``simulate``, SIGTERM a sweep and ``thresholds`` (whose compiled prox the signal lands in), SIGHUP
``curve`` (Ctrl-C is tested in tests/test_cli_faults.py); ``-m slow`` runs every pair (about 3
minutes).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnphase.sweeps.store import LOCK_FILE, THEORY_CSV
from tidyio import read_table

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
STATUS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated (SIGTERM)"),
          signal.SIGHUP: (129, "hung up (SIGHUP)")}

#: ``attnphase ARGV`` with the slow fakes of the Dask commands' theory; "ready" once imported
SCRIPT = textwrap.dedent("""
    import functools, sys
    import torch  # noqa: F401  (imported before "ready": the signal then lands in the command)
    import numerics.api, validation.simulate  # noqa: F401
    import attnphase.commands.paper as paper
    import attnphase.sweeps.runner as runner
    from attnphase import cli
    from tests.fakes import fake_paper_functions, fake_theory_task, tiny_paper_plan
    runner.DEFAULT_THEORY_TASK = functools.partial(fake_theory_task, delay=0.4)
    paper.cmd_paper = functools.partial(paper.cmd_paper, functions=fake_paper_functions(delay=0.4),
                                        plan=tiny_paper_plan())
    if __name__ == "__main__":
        print("ready", flush=True)
        sys.exit(cli.main(sys.argv[1:]))
""")


def _commands(tmp: Path) -> dict:
    """``name: (argv, started)``: ``started()`` says when the command is in its work."""
    sweep, report = tmp / "sweep", tmp / "paper"

    def rows(folder):
        return lambda: len(read_table(folder / THEORY_CSV).rows) >= 2

    def after(seconds):  # counted from the first question, once the command is ready
        t0 = []

        def started():
            t0.append(time.monotonic())
            return t0[-1] - t0[0] > seconds

        return started

    return {
        # Adam: gradient descent at d = 50 stops at its fixed point within about a second
        "simulate": (["simulate", "--d", "50", "--steps", "100000000", "--optimizer", "adam"], after(1.5)),
        "curve": (["curve", "--alphas", "0.1:2.5:400", "--precision", "draft", "--out", str(tmp / "c.csv")],
                  after(2.0)),
        "thresholds": (["thresholds", "--precision", "draft", "--alphas", "0.5:2.5:40"], after(2.0)),
        "phase-diagram": (["phase-diagram", "--omegas", "0:0.45:30", "--alphas", "0.2:2.2:5", "--no-plot",
                           "--workers", "2", "--out", str(sweep)], rows(sweep)),
        "paper": (["paper", "--out", str(report), "--workers", "2"],
                  lambda: any(len(read_table(p).rows) for p in report.glob("data/*.csv"))),
    }


def _default_dispositions():
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _signalled(command: str, signum: int, tmp_path: Path):
    script = tmp_path / "command.py"
    script.write_text(SCRIPT)
    argv, started = _commands(tmp_path)[command]
    # a job started in the background by a shell without job control inherits SIGINT ignored, one
    # started under nohup SIGHUP, and so would this child: it gets the default dispositions, as a
    # command typed at a terminal has
    proc = subprocess.Popen([sys.executable, str(script), *argv, "--no-progress"], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_dispositions)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.communicate()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not started():
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return proc.returncode, err


def _assert_ended_cleanly(command: str, signum: int, tmp_path: Path):
    status, err = _signalled(command, signum, tmp_path)
    code, word = STATUS[signum]
    assert status == code and err.splitlines() == [f"attnphase {command}: {word}"], (status, err)
    for folder in (tmp_path / "sweep", tmp_path / "paper"):
        if folder.exists():
            assert not (folder / LOCK_FILE).exists()
            for table in [*folder.glob("*.csv"), *folder.glob("data/*.csv")]:
                assert not read_table(table).problems, table
    left = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert not left and not (tmp_path / "c.csv").exists(), left


DEFAULT = [("simulate", signal.SIGTERM), ("simulate", signal.SIGHUP), ("phase-diagram", signal.SIGTERM),
           ("thresholds", signal.SIGTERM), ("curve", signal.SIGHUP)]
ALL = [(c, s) for c in ("simulate", "curve", "thresholds", "phase-diagram", "paper") for s in STATUS]


@pytest.mark.parametrize("command, signum", DEFAULT, ids=[f"{c}-{signal.Signals(s).name}" for c, s in DEFAULT])
def test_a_signal_ends_the_command_in_one_line_with_its_status(command, signum, tmp_path):
    _assert_ended_cleanly(command, signum, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("command, signum", [p for p in ALL if p not in DEFAULT],
                         ids=[f"{c}-{signal.Signals(s).name}" for c, s in ALL if (c, s) not in DEFAULT])
def test_every_signal_ends_every_long_command_in_one_line(command, signum, tmp_path):
    _assert_ended_cleanly(command, signum, tmp_path)


def test_an_ignored_hangup_stays_ignored():
    """Under ``nohup`` (SIGHUP ignored) the program installs no handler of its own."""
    from attnphase.cli import ending_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with ending_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_that_lands_in_compiled_code_ends_the_command_as_itself(signum, capsys, monkeypatch):
    """Raised by the handler while numba's dispatcher returns, the signal's exception comes back
    as a SystemError ("returned a result with an exception set") caused by it: the command ends
    as the signal does, not as a fault of the program."""
    import numerics.api as api
    from attnphase import cli

    def compiled(*args, **kwargs):
        try:
            raise KeyboardInterrupt() if signum == signal.SIGINT else cli.Terminated(signum)
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function newton_prox>) returned a result with an exception set") \
                from exc

    monkeypatch.setattr(api, "solve", compiled)
    status = cli.main(["solve", "--alpha", "1", "--branch", "semantic", "--no-progress"])
    code, word = STATUS[signum]
    assert (status, capsys.readouterr().err.splitlines()) == (code, [f"attnphase solve: {word}"])

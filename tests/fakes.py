"""Test doubles: a closed-form theory API and the sweep's theory task running on it.

The sweep tests check the machinery (grids, tidy rows, resuming, crash safety,
failures, a Dask cluster), not the physics, so their theory tasks run in microseconds.
"""
from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from attnphase.sweeps.config import THEORY_BRANCHES
from attnphase.sweeps.tasks import theory_task


@dataclasses.dataclass(frozen=True)
class FakeOverlaps:
    q: float
    m: float
    V: float
    theta: float


@dataclasses.dataclass(frozen=True)
class FakePoint:
    alpha: float
    branch: str
    overlaps: FakeOverlaps
    test_error: float
    train_loss: float
    converged: bool
    error: dict
    model: object
    precision: str
    stability: Optional[dict] = None

    def to_row(self) -> dict:
        """As ``numerics.result.FixedPoint.to_row``: values, errors, solver setting, the model and the
        stability where it was computed."""
        return {"alpha": self.alpha, "branch": self.branch, **dataclasses.asdict(self.overlaps),
                "test_error": self.test_error, "train_loss": self.train_loss, "converged": self.converged,
                **{f"{k}_error": v for k, v in self.error.items()}, "precision": self.precision,
                **self.model.to_columns(), **(self.stability or {})}


class FakeTheoryAPI:
    """A test double of :mod:`numerics.api`: closed-form toy curves, no solver (microseconds).

    Toy physics with the right shape: ``alpha_c(omega) = 0.8 + 2 omega`` (training losses
    cross there), the semantic branch exists for ``alpha >= 0.3``, the positional one for
    ``alpha <= 2 + omega`` (and is "not found at its anchor" for ``omega >= 0.9``), linear
    baseline ``0.002 + 0.001 omega``. ``thresholds`` raises ``ThresholdError`` when
    ``alpha_c > 2.5``.
    """

    class ThresholdError(RuntimeError):
        pass

    class ThresholdLocationError(RuntimeError):
        pass

    SEM_START = 0.3

    @staticmethod
    def alpha_c(omega):
        return 0.8 + 2.0 * omega

    @staticmethod
    def linear(omega):
        return 0.002 + 0.001 * omega

    def linear_baseline(self, spec):
        from types import SimpleNamespace

        return SimpleNamespace(test_error=self.linear(spec.omega), error=1e-9)

    def _point(self, spec, a, branch, precision):
        w, lam = spec.omega, spec.lam
        ls = 0.01 / (1.0 + a) + lam * 0.01
        if branch == "semantic":
            ov = FakeOverlaps(0.1 * a / (1 + a), 0.0, 10.0 + lam, 0.15 * a / (1 + a))
            te, tl = 0.004 / (1.0 + a), ls
        else:
            ov = FakeOverlaps(0.05, 0.25 * (1 + w), 14.0, 0.0)
            te, tl = 0.003 + 0.0005 * w, ls + 0.001 * (a - self.alpha_c(w))
        return FakePoint(float(a), branch, ov, te, tl, True, {"q": 1e-7, "test_error": 1e-8, "train_loss": 1e-8},
                         spec, precision)

    def follow_branch(self, spec, alphas, branch, precision="fast"):
        from types import SimpleNamespace

        if branch == "positional" and spec.omega >= 0.9:  # like numerics.api: an empty curve with a note
            return SimpleNamespace(points=[], spinodals=[], note="positional branch not found at the anchor")
        lo, hi = (self.SEM_START, math.inf) if branch == "semantic" else (0.0, 2.0 + spec.omega)
        pts = [self._point(spec, a, branch, precision) for a in alphas if lo <= a <= hi]
        side = "lower" if branch == "semantic" else "upper"
        edge = lo if branch == "semantic" else hi
        sp = [{"branch": branch, "alpha": edge, "alpha_error": 0.01, "side": side}] if min(alphas) < edge < max(alphas) else []
        return SimpleNamespace(points=pts, spinodals=sp)

    follow = follow_branch

    @staticmethod
    def with_rs_stability(p):
        """As ``numerics.api.with_rs_stability``, in the toy: the semantic branch stable, the positional
        one's switching surfaces of weight 1e-3 +- 1e-4 (unstable)."""
        switching = (0.0, 0.0) if p.branch == "semantic" else (1e-3, 1e-4)
        return dataclasses.replace(p, stability={"rs_stability": 0.3, "rs_stability_error": 0.01,
                                                 "rs_switching": switching[0], "rs_switching_error": switching[1]})

    @staticmethod
    def method(spec, names=None, integrator="auto"):
        from numerics.api import method

        return method(spec, names, integrator)

    @staticmethod
    def scan_curves_from_rows(rows):
        return {b: [r for r in rows if r.get("branch") == b and str(r.get("exists")) == "True"]
                for b in THEORY_BRANCHES}

    def thresholds(self, spec, precision="fast", alphas=None, integrator="auto", names=None, scan=None,
                   progress=None, mapper=None):
        return self.deterministic_thresholds(spec, precision, scan)

    def deterministic_thresholds(self, spec, precision="fast", scan_curves=None):
        from numerics.thresholds.record import Thresholds, Transition

        ac = self.alpha_c(spec.omega)
        if ac > 2.5:
            raise self.ThresholdError(f"alpha_c not bracketed in [0.05, 2.5] at omega={spec.omega:g}")
        if scan_curves is not None and not all(scan_curves.values()):
            raise self.ThresholdError("a branch has no rows in this column")
        al = max(ac, 0.004 / self.linear(spec.omega) - 1.0)
        # like numerics.api at large omega: alpha_c on the scan, alpha_l beyond it
        al_status = "not bracketed: beyond the scan" if 0.6 <= spec.omega < 0.85 else "ok"
        if al_status != "ok":
            al = float("nan")
        sp = [{"branch": "semantic", "alpha": self.SEM_START, "alpha_error": 1e-4, "side": "lower"},
              {"branch": "positional", "alpha": 2.0 + spec.omega, "alpha_error": 1e-4, "side": "upper"}]
        return Thresholds(alpha_c=ac, alpha_c_error=1e-4, alpha_l=al, alpha_l_error=2e-4,
                          linear_test_error=self.linear(spec.omega), linear_test_error_error=1e-9,
                          precision=precision, model=spec, wall_time=0.0, alpha_l_status=al_status,
                          transitions=(Transition(ac, 1e-4, "positional", "semantic", "crossing", (0.05, 2.5), {}),),
                          spinodals=sp)


class FakeGeneralTheoryAPI(FakeTheoryAPI):
    """:class:`FakeTheoryAPI` with the general model's functions, on real records
    (:class:`~numerics.result.FixedPoint`, whose rows are read back by the real
    ``from_row``, and :class:`~numerics.thresholds.record.Thresholds`).

    Toy physics with every kind of change of the global branch: positional below
    ``alpha_c(omega) = 0.8 + 2 omega`` (a crossing of the training losses), semantic above it; for
    rank >= 2 the mixed branch exists from ``alpha_c + 0.5`` on and is global wherever it exists
    (an appearance); the trivial branch is never global. The semantic branch exists for
    ``alpha >= 0.3``. A non-converged semantic point at ``omega = 0.35``, ``alpha = 1.4`` (reported,
    never global)."""

    from numerics.thresholds.record import ThresholdLocationError

    @staticmethod
    def mixed_start(omega):
        return FakeTheoryAPI.alpha_c(omega) + 0.5

    def exists(self, spec, a, branch) -> bool:
        if branch == "semantic":
            return a >= self.SEM_START
        if branch == "mixed":
            return spec.rank >= 2 and a >= self.mixed_start(spec.omega)
        return True

    def fixed_point(self, spec, a, branch, precision):
        from numerics.result import FixedPoint as FixedPoint
        from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps

        w, shape = spec.omega, spec.shape
        ls = 0.01 / (1.0 + a) + spec.lam * 0.01
        tl, te = {"semantic": (ls, 0.004 / (1.0 + a)),
                  "positional": (ls + 0.001 * (a - self.alpha_c(w)), 0.003 + 0.0005 * w),
                  "trivial": (ls + 0.01, 0.01),
                  "mixed": (ls - 0.001 * (a - self.mixed_start(w)) - 1e-4, 0.0035 / (1.0 + a))}[branch]
        n_ov, n_hat = len(MatrixOverlaps.component_names(shape)), len(MatrixHats.component_names(shape))
        code = 0.01 * (1 + ("semantic", "positional", "trivial", "mixed").index(branch))
        ov = MatrixOverlaps.unpack(shape, [0.1 + code + 0.001 * i + a / 100 for i in range(n_ov)])
        hats = MatrixHats.unpack(shape, [1.0 + code + 0.01 * i for i in range(n_hat)])
        converged = not (branch == "semantic" and abs(w - 0.35) < 1e-9 and abs(a - 1.4) < 1e-9)
        error = {name: 1e-6 for name in (*ov.as_dict(), *hats.as_dict())}
        error.update(test_error=1e-8, train_loss=1e-8)
        return FixedPoint(alpha=float(a), branch=branch, model=spec, precision=precision, integrator="qmc",
                                 overlaps=ov, hats=hats, test_error=te, train_loss=tl, converged=converged,
                                 iterations=7, residual=1e-6 if converged else 0.3, error=error,
                                 invariants=ov.invariants(),
                                 diagnostics={} if converged else {"status": "max_iterations"}, wall_time=0.01)

    from numerics.branches.follow import BranchCurve

    def walk_branch(self, spec, alphas, branch, precision="fast", integrator="auto", progress=None):
        return [self.fixed_point(spec, a, branch, precision) for a in alphas if self.exists(spec, a, branch)]

    def follow(self, spec, alphas, branch, precision="fast", integrator="auto", progress=None):
        """Like ``numerics.api.follow``: the line model's toy curves, or the general toy's points."""
        if self.method(spec, (branch,), integrator).deterministic:
            return self.follow_branch(spec, alphas, branch, precision)
        points = self.walk_branch(spec, alphas, branch, precision)
        absent = sorted(set(map(float, alphas)) - {p.alpha for p in points})
        note = f"{branch} branch not found at alpha = {', '.join(f'{a:g}' for a in absent)}" if absent else ""
        return self.BranchCurve(branch, points, [], note=note)

    @staticmethod
    def from_row(row):
        from numerics.result import from_row

        return from_row(row)

    def thresholds(self, spec, precision="fast", alphas=None, integrator="auto", names=None, scan=None,
                   progress=None, mapper=None):
        """Like ``numerics.api.thresholds``: the deterministic strategy's toy thresholds for the line
        model's two branches, else the noisy strategy's, every change of the global branch."""
        names = tuple(names or THEORY_BRANCHES)
        if set(names) == set(THEORY_BRANCHES) and self.method(spec, names, integrator).deterministic:
            return self.deterministic_thresholds(spec, precision, scan)
        points = None if scan is None else [p for c in scan.values() for p in c.points]
        return self.noisy_thresholds(spec, alphas, precision, integrator, names, points)

    def noisy_thresholds(self, spec, alphas, precision="draft", integrator="auto", branches=None, scan=None,
                         progress=None):
        """Like the noisy strategy of ``numerics.thresholds.locate.locate_thresholds``: each change of
        the global branch on the scan, at the toy's exact location."""
        from numerics.result import mark_global_minima
        from numerics.thresholds.record import Thresholds, Transition

        if scan is None:
            scan = [p for b in branches for p in self.walk_branch(spec, alphas, b, precision)]
        scan = mark_global_minima([p for p in scan if p.branch in branches])
        globals_ = sorted((p.alpha, p.branch) for p in scan if p.global_minimum)
        if not globals_ and not scan:
            raise self.ThresholdError(f"no branch of {', '.join(branches)} was found on the scan")
        if not globals_:
            raise self.ThresholdLocationError(f"no branch of {', '.join(branches)} converged on the scan")
        w, transitions = spec.omega, []
        for (a0, b0), (a1, b1) in zip(globals_, globals_[1:]):
            if b0 != b1:
                at = self.alpha_c(w) if b1 == "semantic" else self.mixed_start(w)
                transitions.append(Transition(at, 1e-4, b0, b1, "appearance" if b1 == "mixed" else "crossing",
                                              (a0, a1), {}))
        lin = self.linear(w)
        al = max(self.alpha_c(w), 0.004 / lin - 1.0)
        ok = al <= max(alphas)
        first = transitions[0] if transitions else None
        return Thresholds(alpha_c=first.alpha if first else float("nan"), alpha_c_error=first.error if first
                          else float("nan"), transitions=tuple(transitions), alpha_l=al if ok else float("nan"),
                          alpha_l_error=2e-4 if ok else float("nan"),
                          alpha_l_status="ok" if ok else "not bracketed: beyond the scan",
                          linear_test_error=lin, linear_test_error_error=1e-9, scan=tuple(scan),
                          precision=precision, model=spec, wall_time=0.0)


def fake_theory_task(payload: dict, delay: float = 0.0, fail_omegas: Sequence[float] = (),
                      fail_only: Optional[str] = None) -> dict:
    """A test double of :func:`attnphase.sweeps.tasks.theory_task`: the real task logic on :class:`FakeTheoryAPI`
    (the two-token rank-one model) or :class:`FakeGeneralTheoryAPI` (any other).

    ``delay`` seconds of sleep make a slow task (kill-and-resume tests). At an ``omega``
    in ``fail_omegas`` the task raises: every job, or only ``fail_only`` (a branch name or
    ``"thresholds"``). Dask workers import it by its module, ``tests.fakes``: the
    repository root must be on their path (pytest puts it on the test process's, which
    an in-process cluster shares; worker processes get it through ``PYTHONPATH``).
    """
    if delay:
        time.sleep(delay)
    job = payload.get("branch", payload["job"])
    if any(abs(payload["omega"] - w) < 1e-12 for w in fail_omegas) and fail_only in (None, job):
        raise RuntimeError(f"fake failure at omega={payload['omega']:g} ({job})")
    return theory_task(payload, api=FakeGeneralTheoryAPI())


def tiny_paper_plan():
    """A test-only plan of ``attnphase paper``: every figure, on grids of two or three points,
    ``d`` of 8 to 32, five gradient-descent steps and a histogram task of a few hundred short
    sequences (seconds in all with :func:`fake_paper_functions`)."""
    from attnphase.paper.plan import Plan, Runs

    def runs(d, seeds, alphas=(1.0, 2.0)):
        return Runs(d, seeds, alphas, steps=5, n_test=50)

    return Plan(name="tiny", curve_precision="draft", threshold_precision="fast", alphas=(0.5, 1.0, 1.5, 2.0, 2.5),
                reference_alpha=2.0, diagram_omegas=(0.1, 0.3), slice_omegas=(0.1, 0.3), slice_lams=(0.01, 0.05),
                slice_sigmas=(0.5, 0.7), second_A_omegas=(0.14,), gd=runs(16, 2), slice_gd=runs(16, 2),
                plane_gd=runs(16, 1), plane_omegas=(0.1, 0.3), finite_size_ds=(8, 16, 32),
                finite_size=runs(0, 2, (2.0,)), starts=runs(16, 2), rank_two=runs(16, 2),
                histogram={"n_sequences": 300, "L": 5, "T": 4, "epochs": 1, "continue_epochs": 1, "d_model": 8,
                           "d_mlp": 16, "batch_size": 64, "n_score_sequences": 50}, histogram_seeds=2)


def fake_gamp_task(payload: dict) -> dict:
    """A test double of :func:`attnphase.paper.tasks.gamp_run_task`: a row of the same columns with values
    made from the payload (``q = alpha / 10 + run_index / 100``, ``m``, ``theta_over_sigma2`` alike).
    From the positional start GAMP does not converge at ``alpha <= 1`` (every run) nor in run 1 at any
    ``alpha``: such a row says so, with its reason and a plateau, and carries ``q``, ``m``, ... of 1000
    (never to be averaged: a table that took them would show it)."""
    a, k, init = payload["alpha"], payload["run_index"], payload["init"]
    failed = init == "positional" and (a <= 1.0 or k == 1)
    row = {"run_index": k, "seed": payload["seed"], "n": int(a * payload["d"]), "data": "numpy",
           "q": a / 10 + k / 100, "m": (0.2 if init == "positional" else 0.0) + k / 1000,
           "theta_over_sigma2": (0.0 if init == "positional" else a / 4) + k / 1000,
           "test_error": 0.002 + k / 1e4, "train_loss": 0.003 + k / 1e4, "risk_gradient_norm": 1e-9 * (k + 1),
           "iterations": 70 + k, "damping": 0.5, "converged": True, "reason": ""}
    if failed:
        row.update({q: 1000.0 for q in ("q", "m", "theta_over_sigma2", "test_error", "train_loss")},
                   converged=False, reason=f"run {k} of seed {payload['seed']}: GAMP did not converge (fake)",
                   iterations=400, damping="", risk_gradient_norm="", plateau_q=0.04, plateau_q_std=1e-3)
    row.update(alpha=a, init=init, dampings=";".join(format(x, "g") for x in payload["dampings"]))
    return {"rows": [row]}


def fake_paper_functions(delay: float = 0.0) -> dict:
    """The theory tasks of ``attnphase paper`` on :class:`FakeTheoryAPI` (``delay``: seconds
    of sleep per task) and GAMP's runs by :func:`fake_gamp_task`; the simulations and the histogram
    task stay real (tiny settings)."""
    import functools

    fn = functools.partial(fake_theory_task, delay=delay) if delay else fake_theory_task
    return {"curve": fn, "point": fn, "thresholds": fn, "gamp": fake_gamp_task}


#: ``attnphase ARGV`` with :func:`fake_theory_task` of 0.4 s per task (the repository root on the path)
SLOW_FAKE_SWEEP = """
import functools, sys
from attnphase.cli import build_parser
from attnphase.commands.sweep import cmd_phase_diagram
from tests.fakes import fake_theory_task
args = build_parser().parse_args(sys.argv[1:])
cmd_phase_diagram(args, theory_task=functools.partial(fake_theory_task, delay=0.4))
"""


def kill_fake_sweep_when(ready: Callable[[], bool], argv: Sequence[str], env: dict, timeout: float = 120.0) -> None:
    """Run ``attnphase argv`` (:data:`SLOW_FAKE_SWEEP`, two worker processes) in a subprocess and
    SIGKILL its process group (the sweep, its scheduler and its workers) once ``ready()``; raises
    AssertionError if the sweep ended before. ``env``: the subprocess's, with the repository root on
    ``PYTHONPATH`` (its workers import this module)."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", SLOW_FAKE_SWEEP, *argv, "--workers", "2"], cwd=root,
                            start_new_session=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


class FakeInvariantSolve:
    """A test double of ``numerics.api.solve`` for validation: closed-form invariants per
    branch (a :class:`~numerics.result.FixedPoint`'s ``invariants``, ``test_error``,
    ``train_loss``, ``error``, ``converged``, ``status``), every stated error ``error`` (absolute),
    the branches in ``absent`` raising :class:`numerics.fixed_points.errors.BranchNotFound`. ``calls``
    records each solve. Training losses: mixed < semantic < positional < trivial."""

    VALUES = {  # branch: (q eigenvalues, m singular values, theta singular values, test error, train loss)
        "semantic": ([0.1, 0.0], [0.0], [0.15], 0.0014, 0.0030),
        "positional": ([0.06, 0.0], [0.25], [0.0], 0.0035, 0.0036),
        "mixed": ([0.1, 0.06], [0.25], [0.15], 0.0012, 0.0028),
        "trivial": ([0.0, 0.0], [0.0], [0.0], 0.0050, 0.0050),
    }

    def __init__(self, error: float = 1e-4, absent: Sequence[str] = ()):
        self.error, self.absent, self.calls = error, tuple(absent), []

    def __call__(self, spec, alpha, branch, precision="draft"):
        from types import SimpleNamespace

        from numerics.fixed_points.errors import BranchNotFound

        self.calls.append((alpha, branch, precision))
        if branch in self.absent:
            raise BranchNotFound(f"the {branch} solve fell onto the trivial point", branch, alpha)
        q, m, th, te, tl = self.VALUES[branch]
        _, r, t, k = spec.shape
        invariants = {"q_eigenvalues": q[:r], "m_singular_values": m[:min(r, k)],
                      "theta_singular_values": th[:min(r, t)]}
        error = {f"{key}_{j}": self.error for key, vals in invariants.items() for j in range(1, len(vals) + 1)}
        error.update(test_error=self.error, train_loss=self.error)
        return SimpleNamespace(invariants=invariants, test_error=te, train_loss=tl, error=error, converged=True,
                               status="converged")

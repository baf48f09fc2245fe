"""Finite-size study of the thresholds alpha_c and alpha_l by paired gradient descent.

For omega in {0, 0.1, 0.3} and d in {500, 1000, 2000, 4000}, each paired run trains
the semantic and the positional start on one draw of the data (default model
otherwise: sigma = 0.5, lam = 0.01, A = [[0.6, 0.4], [0.4, 0.6]], full-batch GD with
lr 0.15) and records snapshots at 5000 (and on part of the grid 20000) steps of one
continued run (``validation.crossings.paired_run``). ``analyse`` estimates
``alpha_c(d)``, ``alpha_l(d)`` per (omega, d), extrapolates them in ``1/d`` and
compares the limits with the replica theory and the published values.

    python studies/finite_size_crossings.py time [--ds 500,1000,2000,4000] [--alphas 0.6,1.4]
    python studies/finite_size_crossings.py plan [--ds ...] [--omegas ...]
    python studies/finite_size_crossings.py run --out DIR [--workers 1] [--scheduler ADDR]
    python studies/finite_size_crossings.py analyse --out DIR [--theory-curve CSV,CSV,...] [--min-runs N]

``run`` runs on the sweeps' Dask runner (``attnphase.sweeps.runner``) and is resumable: one checked JSON per
paired run under ``DIR/runs`` (``tidyio.KeyedStore``, keyed by omega, d, alpha, seed, run index and snapshot
steps); finished runs are never recomputed. The
queue goes slice by slice, (omega, d) with the cheapest d first, and inside a slice
run index by run index, so a stop leaves complete slices and, in the slice under way,
complete seeds across the alpha grid. ``analyse`` extrapolates complete slices (and, with
``--min-runs N``, a slice under way on its finished run indices when there are N or more) and writes
``runs.csv`` (one row per run, start and snapshot), ``crossings.csv`` (estimates per
(omega, d, steps)), ``extrapolation.csv``, ``steps.csv`` (5000 against 20000 steps on the
same runs), ``trend.csv`` (seed means of the overlaps and errors per (omega, d, alpha), beside
the theory curves given, one ``attnphase curve`` CSV per omega), ``slopes.csv`` (the slope of
Delta F in alpha per run against the theory's), ``crossings.md`` and ``crossings.png``/``.pdf``.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

log = logging.getLogger("finite_size_crossings")

BASE_SEED = 20240205
DS = (500, 1000, 2000, 4000)
OMEGAS = (0.0, 0.1, 0.3)
SHORT, LONG = 5000, 20000

# Replica theory (converged solver) and the published values, for comparison only.
THEORY = {0.0: {"alpha_c": (0.6148, float("nan")), "alpha_l": (0.7462, float("nan"))},
          0.1: {"alpha_c": (0.75077, 1e-4), "alpha_l": (0.89286, 1e-5)},
          0.3: {"alpha_c": (1.25153, 2e-5), "alpha_l": (1.49227, 1e-5)}}
PUBLISHED = {0.0: {"alpha_c": 0.548, "alpha_l": 0.7225},
             0.1: {"alpha_c": 0.707, "alpha_l": 0.8506},
             0.3: {"alpha_c": 1.241, "alpha_l": 1.4506}}


def _grid(lo: float, hi: float, step: float) -> List[float]:
    return [round(lo + k * step, 4) for k in range(int(round((hi - lo) / step)) + 1)]


# alpha grids (spacing 0.05, on one lattice so that every d and the theory curves share
# alphas): each covers the published and the theory value of both thresholds with a
# margin and reaches below them, where the finite-d crossings lie; at d <= 1000 (cheap)
# the omega = 0 grid also spans the semantic spinodal. At
# omega = 0.3 the grids skip 1.35, between the two thresholds, and at d = 4000 keep
# only the alphas next to them.
_W0_SMALL, _W0_LARGE = _grid(0.45, 0.85, 0.05), _grid(0.55, 0.80, 0.05)
_W1_SMALL, _W1_LARGE = _grid(0.60, 0.95, 0.05), _grid(0.65, 0.95, 0.05)
ALPHAS = {0.0: {500: _W0_SMALL, 1000: _W0_SMALL, 2000: _W0_LARGE, 4000: _W0_LARGE},
          0.1: {500: _W1_SMALL, 1000: _W1_SMALL, 2000: _W1_LARGE, 4000: _W1_LARGE},
          0.3: {500: [1.15, 1.2, 1.25, 1.3, 1.4, 1.45, 1.5, 1.55],
                1000: [1.15, 1.2, 1.25, 1.3, 1.4, 1.45, 1.5, 1.55],
                2000: [1.2, 1.25, 1.3, 1.4, 1.45, 1.5, 1.55],
                4000: [1.2, 1.25, 1.3, 1.45, 1.5]}}
# Seeds per (omega, d). The seed-to-seed spread of the paired Delta F (mostly a per-seed
# offset common to the whole alpha grid) sets the error of alpha_c(d); measured, it falls
# roughly like d^-1/2 while a run costs ~d^2, so small d gets many seeds. omega = 0 gets
# the most (largest gap between the published and the theory values), omega = 0.3 the
# fewest (its alpha_c gap, 0.01, is beyond reach at this budget).
SEEDS = {0.0: {500: 40, 1000: 20, 2000: 12, 4000: 5},
         0.1: {500: 24, 1000: 12, 2000: 8, 4000: 3},
         0.3: {500: 12, 1000: 6, 2000: 4, 4000: 2}}
# 20000-step snapshots on the first LONG_RUNS[omega][d] run indices: at d <= 1000 on the
# whole alpha grid, above only on the alphas within LONG_WINDOW of a published or theory value.
SMALL_D = 1000
LONG_RUNS = {0.0: {500: 6, 1000: 3, 2000: 2, 4000: 1},
             0.1: {500: 6, 1000: 3, 2000: 2, 4000: 1},
             0.3: {500: 6, 1000: 3, 2000: 2, 4000: 0}}
LONG_WINDOW = 0.03
# Root of the seed-mean curve: linear interpolation between the two grid points that
# bracket the sign change (curvature bias below 0.002 at spacing 0.05 for the theory's
# Delta F), and a quadratic fitted to the four nearest points as a check.
METHODS = {"interpolation": {"half_width": 1, "degree": 1}, "quadratic": {"half_width": 2, "degree": 2}}
PRIMARY = "interpolation"


def alpha_grid(omega: float, d: int) -> List[float]:
    return ALPHAS[omega][d]


@dataclasses.dataclass(frozen=True)
class Task:
    omega: float
    d: int
    alpha: float
    run_index: int
    snapshots: tuple

    @property
    def seed(self) -> int:
        """Each (omega, d) slice has its own seed, so slices are independent."""
        return slice_seed(self.omega, self.d)

    @property
    def name(self) -> str:
        steps = "-".join(str(s) for s in self.snapshots)
        return f"w{self.omega:g}_d{self.d}_a{self.alpha:.4f}_s{self.seed}_k{self.run_index}_t{steps}"

    @property
    def key(self) -> dict:
        """The run's key in the store (:func:`run_store`)."""
        return {**dataclasses.asdict(self), "snapshots": list(self.snapshots), "seed": self.seed}


def run_store(out: str):
    """The paired runs of ``out``: one checked JSON per run under ``out/runs`` (``tidyio.KeyedStore``)."""
    from tidyio import KeyedStore

    return KeyedStore(os.path.join(out, "runs"), prefix="run_")


def slice_seed(omega: float, d: int) -> int:
    return int(np.random.SeedSequence([BASE_SEED, int(d), int(round(omega * 10000))]).generate_state(1)[0])


def near_threshold(omega: float, alpha: float) -> bool:
    marks = [THEORY[omega][k][0] for k in ("alpha_c", "alpha_l")] + list(PUBLISHED[omega].values())
    return any(abs(alpha - x) <= LONG_WINDOW for x in marks)


def plan(ds: Sequence[int] = DS, omegas: Sequence[float] = OMEGAS, max_runs: Optional[int] = None) -> List[Task]:
    """The task queue in execution order (see the module docstring); ``max_runs`` caps the seeds per d."""
    tasks = []
    for d in sorted(ds):
        for omega in omegas:
            for k in range(SEEDS[omega][d] if max_runs is None else min(SEEDS[omega][d], max_runs)):
                for alpha in alpha_grid(omega, d):
                    long = k < LONG_RUNS[omega][d] and (d <= SMALL_D or near_threshold(omega, alpha))
                    tasks.append(Task(omega, d, alpha, k, (SHORT, LONG) if long else (SHORT,)))
    return tasks


def step_time_model(n: int, d: int) -> float:
    """Seconds per GD step on one core of the shared machine (fitted to the ``time`` subcommand)."""
    return 1.2e-4 + 8.5e-10 * 2 * n * d / 2


def estimated_seconds(task: Task) -> float:
    n = round(task.alpha * task.d)
    problem = 2.5e-7 * (n + 10000) * task.d  # drawing the training and test sets
    return problem + 2 * max(task.snapshots) * step_time_model(n, task.d)


# --------------------------------------------------------------------------- running


def paired_run_task(payload: dict) -> dict:
    """One paired run (a sweep task of :func:`attnphase.sweeps.runner.execute`): the fields of a
    :class:`Task` in, the JSON-ready record of ``validation.crossings.paired_run`` out."""
    import torch

    torch.set_num_threads(1)
    from derivations.spec import ModelSpec
    from validation.crossings import paired_run

    task = Task(**{**payload, "snapshots": tuple(payload["snapshots"])})
    return paired_run(ModelSpec(omega=task.omega), task.d, task.alpha, task.seed, task.run_index, task.snapshots)


def cmd_run(args) -> int:
    """The queue on the sweeps' Dask runner (at most one task per worker thread in flight, in the
    order of :func:`plan`); each finished run is written at once as one JSON under ``DIR/runs``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    from attnphase.sweeps.runner import execute, open_client
    from attnphase.sweeps.tasks import Task as SweepTask

    runs = run_store(args.out)
    tasks = plan(args.ds, args.omegas, args.max_runs)
    todo = [t for t in tasks if t.key not in runs]
    log.info("%d tasks, %d done, %d to run, estimated %.2f core-hours", len(tasks), len(tasks) - len(todo),
             len(todo), sum(estimated_seconds(t) for t in todo) / 3600)
    if not todo:
        return 0
    by_name = {t.name: t for t in todo}
    pending = [SweepTask(key=t.name, kind="simulation", fn=paired_run_task, payload=dataclasses.asdict(t))
               for t in todo]
    done, failed, t0 = set(), [], time.time()

    def store(task, record) -> None:
        runs.put(by_name[task.key].key, record, replace=True)
        done.add(task.key)
        log.info("[%d/%d, %.0f s] %s", len(done) + len(failed), len(todo), time.time() - t0, task.key)

    def fail(task, exc, tb) -> None:  # one failed run must not stop the queue; it is rerun on resume
        failed.append(task.key)
        log.error("%s failed: %s", task.key, exc)

    with open_client(args.scheduler, args.workers, len(pending)) as client:
        execute(client, pending, done, store_result=store, fail=fail, tick=lambda: None)
    log.info("finished: %d failed", len(failed))
    return 1 if failed else 0


def cmd_plan(args) -> int:
    tasks = plan(args.ds, args.omegas, args.max_runs)
    total = 0.0
    for d in sorted(args.ds):
        for omega in args.omegas:
            sel = [t for t in tasks if t.d == d and t.omega == omega]
            secs = sum(estimated_seconds(t) for t in sel)
            total += secs
            n_long = sum(1 for t in sel if LONG in t.snapshots)
            print(f"omega={omega:<4g} d={d:<5d} alphas={len(alpha_grid(omega, d)):2d} seeds={SEEDS[omega][d]:2d} "
                  f"runs={len(sel):4d} (20000 steps: {n_long:4d})  est {secs / 3600:6.2f} h  "
                  f"cumulative {total / 3600:6.2f} h")
    return 0


def cmd_time(args) -> int:
    """Per-step and set-up times, wall and core (process) time side by side, one thread."""
    import torch

    torch.set_num_threads(1)
    from derivations.spec import ModelSpec
    from validation.simulate import make_problem, train

    print(f"{'d':>5} {'alpha':>6} {'n':>6} {'set-up s':>9} {'(core s)':>9} {'ms/step':>8} {'(core)':>8} "
          f"{'model':>8} {'pair, 5000 steps, core s':>25}")
    for d in args.ds:
        for alpha in args.alphas:
            w0, c0 = time.perf_counter(), time.process_time()
            p = make_problem(ModelSpec(omega=0.0), d, alpha, seed=1, run_index=0)
            w1, c1 = time.perf_counter(), time.process_time()
            steps = max(50, int(args.steps * 1000 / d))
            train(p, "positional", steps, record_points=1)
            w2, c2 = time.perf_counter(), time.process_time()
            step_core = (c2 - c1) / steps
            print(f"{d:5d} {alpha:6.3g} {p.n:6d} {w1 - w0:9.2f} {c1 - c0:9.2f} {1e3 * (w2 - w1) / steps:8.3f} "
                  f"{1e3 * step_core:8.3f} {1e3 * step_time_model(p.n, d):8.3f} "
                  f"{c1 - c0 + 2 * SHORT * step_core:25.1f}", flush=True)
    return 0


# --------------------------------------------------------------------------- analysis


def load_rows(out: str) -> List[dict]:
    from validation.crossings import tidy_rows

    rows = []
    for record in run_store(out).values():
        if "teacher_norm" not in record:  # records written before the teacher was recorded
            record.update(_teacher(record["omega"], record["d"], record["seed"], record["run_index"]))
        for row in tidy_rows(record):
            row["snapshot_steps"] = "-".join(str(s) for s in record["snapshot_steps"])
            row["wall_time"] = record["wall_time"]
            row["cpu_time"] = record.get("cpu_time", float("nan"))
            rows.append(row)
    return rows


def _teacher(omega: float, d: int, seed: int, run_index: int) -> dict:
    from derivations.spec import ModelSpec
    from validation.crossings import teacher_statistics
    from validation.simulate import make_problem

    problem = make_problem(ModelSpec(omega=omega), d, 1.0 / d, seed, run_index, n_test=1)
    return teacher_statistics(problem.Qstar)


def slice_estimates(rows: Sequence[dict], steps: int, n_boot: int, long_only: bool = False) -> List[dict]:
    """alpha_c(d) and alpha_l(d) per (omega, d) from the runs that reached ``steps``.

    ``long_only`` keeps only runs that also have a 20000-step snapshot (for comparing
    5000 with 20000 steps on the same runs)."""
    from validation.crossings import alpha_c, alpha_l, paired_matrices

    out = []
    keys = sorted({(float(r["omega"]), int(r["d"])) for r in rows})
    for omega, d in keys:
        sel = [r for r in rows if float(r["omega"]) == omega and int(r["d"]) == d
               and (not long_only or str(LONG) in r["snapshot_steps"].split("-"))]
        if not any(int(r["steps"]) == steps for r in sel):
            continue
        alphas, runs, arr = paired_matrices(sel, steps)
        if len(runs) < 2:
            continue
        for name, fn, values in (("alpha_c", alpha_c, arr["delta_f"]), ("alpha_l", alpha_l, arr["excess_test"])):
            for method, kwargs in METHODS.items():
                c = fn(alphas, values, n_boot=n_boot, rng=np.random.default_rng(1), **kwargs)
                out.append({"omega": omega, "d": d, "steps": steps, "subset": "long" if long_only else "all",
                            "quantity": name, "method": method, **c.to_dict(), "alphas": len(alphas),
                            "alpha_min": float(alphas.min()), "alpha_max": float(alphas.max()),
                            **_spread(alphas, values, c.estimate),
                            "theory": THEORY[omega][name][0], "published": PUBLISHED[omega][name]})
    return out


def _spread(alphas: np.ndarray, values: np.ndarray, estimate: float) -> dict:
    """Across-run spread of ``values`` at the grid alpha nearest ``estimate``, the mean curve's
    slope there, and their ratio: the spread of single-run crossings that sets the error."""
    if not math.isfinite(estimate) or len(alphas) < 2:
        return {"run_spread": float("nan"), "slope": float("nan"), "run_spread_in_alpha": float("nan")}
    i = int(np.argmin(np.abs(alphas - estimate)))
    row = values[i][np.isfinite(values[i])]
    j = min(max(i, 1), len(alphas) - 1)
    mean = np.array([v[np.isfinite(v)].mean() if np.isfinite(v).any() else np.nan for v in values])
    slope = (mean[j] - mean[j - 1]) / (alphas[j] - alphas[j - 1])
    spread = float(row.std(ddof=1)) if len(row) > 1 else float("nan")
    return {"run_spread": spread, "slope": float(slope), "run_spread_in_alpha": spread / abs(slope)}


def finished_runs(out: str) -> Dict[tuple, set]:
    """Per (omega, d) slice, the run indices whose planned runs have finished at every alpha."""
    from tidyio import key_digest

    done = {key_digest(key) for key, _ in run_store(out).items()}
    missing: Dict[tuple, set] = {}
    indices: Dict[tuple, set] = {}
    for t in plan():
        indices.setdefault((t.omega, t.d), set()).add(t.run_index)
        if key_digest(t.key) not in done:
            missing.setdefault((t.omega, t.d), set()).add(t.run_index)
    return {key: ks - missing.get(key, set()) for key, ks in indices.items()}


def usable_slices(finished: Dict[tuple, set], min_runs: Optional[int]) -> set:
    """Slices whose planned runs have all finished, and with ``min_runs`` also a slice under way
    with at least that many finished run indices (analysed on those runs only)."""
    return {key for key, ks in finished.items()
            if len(ks) == SEEDS[key[0]][key[1]] or (min_runs is not None and len(ks) >= min_runs)}


def extrapolation_rows(estimates: Sequence[dict], steps: int) -> List[dict]:
    """Fits over the complete slices only (a slice under way has too few seeds for its error bar)."""
    from validation.crossings import CrossingError, extrapolations

    out = []
    for omega in sorted({e["omega"] for e in estimates}):
        for name in ("alpha_c", "alpha_l"):
            sel = [e for e in _primary(estimates) if e["omega"] == omega and e["quantity"] == name
                   and e["steps"] == steps and e["subset"] == "all" and e["complete"]
                   and math.isfinite(e["estimate"]) and math.isfinite(e["std"]) and e["std"] > 0]
            if len(sel) < 2:
                continue
            ds = [e["d"] for e in sel]
            try:
                fits = extrapolations(ds, [e["estimate"] for e in sel], [e["std"] for e in sel])
            except CrossingError as exc:
                log.warning("omega=%g %s: %s", omega, name, exc)
                continue
            theory, published = THEORY[omega][name][0], PUBLISHED[omega][name]
            for law, fit in fits.items():
                se = fit.a_se_scaled
                out.append({"omega": omega, "quantity": name, "steps": steps, "law": law,
                            "ds": "/".join(str(d) for d in ds), "a": fit.a, "a_se": fit.a_se, "a_se_scaled": se,
                            "coefficients": " ".join(f"{c:.5g}" for c in fit.coefficients),
                            "chi2": fit.chi2, "dof": fit.dof, "p_value": fit.p_value,
                            "pulls": " ".join(f"{p:+.2f}" for p in fit.pulls),
                            "theory": theory, "z_theory": (fit.a - theory) / se,
                            "published": published, "z_published": (fit.a - published) / se})
    return out


def step_rows(rows: Sequence[dict], n_boot: int, complete: set) -> List[dict]:
    """5000 against 20000 steps on the same runs of the complete slices: changes of Delta F, m, theta,
    the test errors."""
    from validation.crossings import CrossingError, crossing_shift, paired_matrices

    out = []
    long_rows = [r for r in rows if str(LONG) in r["snapshot_steps"].split("-")
                 and (float(r["omega"]), int(r["d"])) in complete]
    for omega, d in sorted({(float(r["omega"]), int(r["d"])) for r in long_rows}):
        sel = [r for r in long_rows if float(r["omega"]) == omega and int(r["d"]) == d]
        a5, _, s5 = paired_matrices(sel, SHORT)
        a20, _, s20 = paired_matrices(sel, LONG)
        entry = {"omega": omega, "d": d, "pairs": int(np.isfinite(s20["delta_f"]).sum())}
        for key in ("delta_f", "positional_m", "semantic_theta_over_sigma2", "positional_q", "semantic_q",
                    "semantic_test_error", "positional_test_error", "semantic_train_loss", "positional_train_loss"):
            diff = s20[key] - s5[key]
            ok = np.isfinite(diff)
            entry[f"{key}_mean_change"] = float(diff[ok].mean())
            entry[f"{key}_max_abs_change"] = float(np.abs(diff[ok]).max())
        for name, key, rising in (("alpha_c", "delta_f", True), ("alpha_l", "excess_test", False)):
            try:
                sh = crossing_shift(a5, s5[key], s20[key], rising, n_boot=n_boot, rng=np.random.default_rng(2),
                                    **METHODS[PRIMARY])
            except CrossingError as exc:  # e.g. a single long run in the slice
                log.info("omega=%g d=%d %s shift: %s", omega, d, name, exc)
                sh = {"shift": float("nan"), "std": float("nan"), "no_crossing_fraction": float("nan")}
            entry[f"{name}_shift"], entry[f"{name}_shift_std"] = sh["shift"], sh["std"]
            entry[f"{name}_shift_no_crossing_fraction"] = sh["no_crossing_fraction"]
        flips = np.isfinite(s20["global_is_semantic"]) & (s20["global_is_semantic"] != s5["global_is_semantic"])
        entry["global_minimiser_flips"] = int(flips.sum())
        for start in ("semantic", "positional"):
            g = s20[f"{start}_grad_norm"]
            entry[f"{start}_grad_norm_5000_median"] = float(np.nanmedian(s5[f"{start}_grad_norm"]))
            entry[f"{start}_grad_norm_20000_median"] = float(np.nanmedian(g))
        out.append(entry)
    return out


TREND_KEYS = ("positional_m", "positional_q", "positional_train_loss", "positional_test_error",
              "semantic_theta_over_sigma2", "semantic_q", "semantic_train_loss", "semantic_test_error",
              "delta_f", "linear_test_error")
# theory curve columns (attnphase curve) of each trend quantity: (branch, column, divisor)
THEORY_COLUMNS = {"positional_m": ("positional", "m", 1.0), "positional_q": ("positional", "q", 1.0),
                  "positional_train_loss": ("positional", "train_loss", 1.0),
                  "positional_test_error": ("positional", "test_error", 1.0),
                  "semantic_theta_over_sigma2": ("semantic", "theta", 0.25), "semantic_q": ("semantic", "q", 1.0),
                  "semantic_train_loss": ("semantic", "train_loss", 1.0),
                  "semantic_test_error": ("semantic", "test_error", 1.0)}


def _theory_value(curves: Dict[float, Dict[str, List[dict]]], omega: float, alpha: float, key: str) -> float:
    """The theory curve's value of a trend quantity at ``(omega, alpha)``, NaN where the curve lacks it.

    ``delta_f`` is the difference of the two branches' training losses (docs/theory.md, section 3)."""
    pts = {(b, round(float(r["alpha"]), 4)): r for b, rows in curves.get(omega, {}).items() for r in rows}
    a = round(float(alpha), 4)
    if key == "delta_f":
        pos, sem = pts.get(("positional", a)), pts.get(("semantic", a))
        return float(pos["train_loss"]) - float(sem["train_loss"]) if pos and sem else float("nan")
    if key not in THEORY_COLUMNS:
        return float("nan")
    branch, column, div = THEORY_COLUMNS[key]
    point = pts.get((branch, a))
    return float(point[column]) / div if point else float("nan")


def trend_rows(rows: Sequence[dict], curves: Dict[float, Dict[str, List[dict]]]) -> List[dict]:
    """Seed means and standard errors of the overlaps, losses and errors per (omega, d, alpha, steps),
    with the theory curve's value where a curve at that omega has the alpha."""
    from validation.crossings import paired_matrices

    out = []
    for omega, d in sorted({(float(r["omega"]), int(r["d"])) for r in rows}):
        sel = [r for r in rows if float(r["omega"]) == omega and int(r["d"]) == d]
        for steps in (SHORT, LONG):
            if not any(int(r["steps"]) == steps for r in sel):
                continue
            alphas, _, arr = paired_matrices(sel, steps)
            for i, alpha in enumerate(alphas):
                for key in TREND_KEYS:
                    v = arr[key][i][np.isfinite(arr[key][i])]
                    if not len(v):
                        continue
                    out.append({"omega": omega, "d": d, "steps": steps, "alpha": float(alpha), "quantity": key,
                                "runs": len(v), "mean": float(v.mean()),
                                "sem": float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan"),
                                "theory": _theory_value(curves, omega, alpha, key)})
    return out


def slope_rows(rows: Sequence[dict], curves: Dict[float, Dict[str, List[dict]]], complete: set) -> List[dict]:
    """The slope of Delta F in alpha per run of each complete slice (least squares over the alphas every
    d of the omega shares), its mean and standard error over runs, beside the theory's slope over the
    same alphas.

    The per-run offset of Delta F, which dominates the error of alpha_c(d), drops out of the slope, so
    the slope tests the shape of gradient descent's Delta F against the theory's at each d."""
    from validation.crossings import paired_matrices

    out = []
    for omega in OMEGAS:
        window = sorted(set.intersection(*(set(alpha_grid(omega, d)) for d in DS)))
        th = np.array([_theory_value(curves, omega, a, "delta_f") for a in window])
        ok = np.isfinite(th)
        theory = float("nan")
        if ok.sum() >= 2:  # both slopes over the same alphas, since Delta F is curved
            window = [a for a, k in zip(window, ok) if k]
            theory = float(np.polyfit(window, th[ok], 1)[0])
        for d in DS:
            sel = [r for r in rows if float(r["omega"]) == omega and int(r["d"]) == d]
            if (omega, d) not in complete or not any(int(r["steps"]) == SHORT for r in sel):
                continue
            alphas, _, arr = paired_matrices(sel, SHORT)
            keep = np.isin(np.round(alphas, 4), np.round(window, 4))
            x, y = alphas[keep], arr["delta_f"][keep]
            slopes = np.array([np.polyfit(x, y[:, j], 1)[0] for j in range(y.shape[1]) if np.isfinite(y[:, j]).all()])
            if not len(slopes):
                continue
            out.append({"omega": omega, "d": d, "runs": len(slopes),
                        "alpha_window": f"{min(window):g}-{max(window):g}", "slope": float(slopes.mean()),
                        "slope_sem": float(slopes.std(ddof=1) / math.sqrt(len(slopes))) if len(slopes) > 1
                        else float("nan"), "theory_slope": theory})
    return out


def slope_markdown(slopes: Sequence[dict]) -> str:
    lines = ["| omega | d | runs | alphas | slope of ΔF in alpha (GD) | theory |", "|---|---|---|---|---|---|"]
    for s in slopes:
        lines.append(f"| {s['omega']:g} | {s['d']} | {s['runs']} | {s['alpha_window']} | "
                     f"{s['slope']:.3e} ± {s['slope_sem']:.1e} | {s['theory_slope']:.3e} |")
    return "\n".join(lines) + "\n"


TREND_TABLE = (("positional_m", "m, positional start"), ("positional_q", "q, positional start"),
               ("semantic_theta_over_sigma2", "theta/sigma^2, semantic start"), ("semantic_q", "q, semantic start"),
               ("semantic_test_error", "test error, semantic start"))
TREND_ALPHAS = (0.55, 0.6, 0.7, 0.8)


def trend_markdown(trend: Sequence[dict], complete: set) -> str:
    """omega = 0, 5000 steps, complete slices: the d-trend of the overlaps at a few alphas beside the theory."""
    ds = sorted({t["d"] for t in trend if t["omega"] == 0.0 and (0.0, t["d"]) in complete})
    index = {(t["quantity"], t["alpha"], t["d"]): t for t in trend if t["omega"] == 0.0 and t["steps"] == SHORT}
    lines = ["| quantity | alpha | " + " | ".join(f"d = {d}" for d in ds) + " | theory |",
             "|---|---|" + "---|" * (len(ds) + 1)]
    for key, label in TREND_TABLE:
        for alpha in TREND_ALPHAS:
            cells = [index.get((key, alpha, d)) for d in ds]
            if not any(cells):
                continue
            th = next((c["theory"] for c in cells if c), float("nan"))
            lines.append(f"| {label} | {alpha:g} | " + " | ".join(
                f"{c['mean']:.4g} ± {c['sem']:.2g}" if c else "" for c in cells) + f" | {th:.4g} |")
    return "\n".join(lines) + "\n"


def markdown(estimates: Sequence[dict], fits: Sequence[dict], steps_table: Sequence[dict]) -> str:
    lines = ["| omega | d | steps | runs | alpha_c(d) | alpha_l(d) | quadratic fit: alpha_c, alpha_l |",
             "|---|---|---|---|---|---|---|"]
    index = {(e["omega"], e["d"], e["steps"], e["subset"], e["quantity"]): e for e in _primary(estimates)}
    quad = {(e["omega"], e["d"], e["steps"], e["subset"], e["quantity"]): e for e in estimates
            if e["method"] != PRIMARY}

    def cell(e):
        if e is None or not math.isfinite(e["estimate"]):
            return "none on the grid" if e is not None else ""
        extra = f" ({e['no_crossing_fraction']:.0%} of resamples without)" if e["no_crossing_fraction"] > 0 else ""
        return f"{e['estimate']:.4f} ± {e['std']:.4f}{extra}"

    for (omega, d, steps, subset) in sorted({k[:4] for k in index}):
        c, l = index.get((omega, d, steps, subset, "alpha_c")), index.get((omega, d, steps, subset, "alpha_l"))
        label = f"{steps}" + (" (runs with 20000)" if subset == "long" else "")
        if not (c or l)["complete"]:
            label += ", slice under way"
        elif subset == "all" and steps == SHORT and (c or l)["runs"] < SEEDS[omega][d]:
            label += f", {(c or l)['runs']} of {SEEDS[omega][d]} planned runs"
        qc, ql = (quad.get((omega, d, steps, subset, q)) for q in ("alpha_c", "alpha_l"))
        qcell = ", ".join(f"{e['estimate']:.4f}" if e else "" for e in (qc, ql))
        lines.append(f"| {omega:g} | {d} | {label} | {(c or l)['runs']} | {cell(c)} | {cell(l)} | {qcell} |")
    lines += ["", "| omega | threshold | law | d -> inf | ± (scaled) | chi2/dof | p | theory | z | published | z |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in fits:
        lines.append(f"| {f['omega']:g} | {f['quantity']} | {f['law']} | {f['a']:.4f} | {f['a_se_scaled']:.4f} | "
                     f"{f['chi2']:.2f}/{f['dof']} | {f['p_value']:.2g} | {f['theory']:.4f} | {f['z_theory']:+.1f} | "
                     f"{f['published']:.4f} | {f['z_published']:+.1f} |")
    if steps_table:
        lines += ["", "| omega | d | paired runs | mean ΔF change | max abs ΔF change | mean m_pos change | "
                  "mean theta_sem change | global minimiser flips | alpha_c shift | alpha_l shift |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for s in steps_table:
            lines.append(f"| {s['omega']:g} | {s['d']} | {s['pairs']} | {s['delta_f_mean_change']:.2e} | "
                         f"{s['delta_f_max_abs_change']:.2e} | {s['positional_m_mean_change']:+.4f} | "
                         f"{s['semantic_theta_over_sigma2_mean_change']:+.4f} | {s['global_minimiser_flips']} | "
                         f"{s['alpha_c_shift']:+.4f} ± {s['alpha_c_shift_std']:.4f} | "
                         f"{s['alpha_l_shift']:+.4f} ± {s['alpha_l_shift_std']:.4f} |")
    return "\n".join(lines) + "\n"


def read_theory_curves(paths: Sequence[str]) -> Dict[float, Dict[str, List[dict]]]:
    """``attnphase curve`` CSVs keyed by their omega column, then by branch (converged points only)."""
    from tidyio import is_true, read_rows

    curves: Dict[float, Dict[str, List[dict]]] = {}
    for path in paths:
        for r in read_rows(path):
            if is_true(r.get("converged", "True")):
                curves.setdefault(float(r["omega"]), {}).setdefault(r["branch"], []).append(r)
    return curves


def plot(out: str, rows: Sequence[dict], estimates: Sequence[dict], fits: Sequence[dict],
         curves: Dict[float, Dict[str, List[dict]]], complete: set) -> str:
    """The crossings against 1/d and the omega = 0 d-trend, complete slices only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from validation.crossings import LAWS, paired_matrices

    fig, axes = plt.subplots(2, 4, figsize=(18, 8.5))
    w0_curves = curves.get(0.0, {})
    colours = {"alpha_c": "C0", "alpha_l": "C3"}
    for ax, omega in zip(axes[0], OMEGAS):
        for name in ("alpha_c", "alpha_l"):
            sel = sorted((e for e in _primary(estimates) if e["omega"] == omega and e["quantity"] == name
                          and e["steps"] == SHORT and e["subset"] == "all" and e["complete"]
                          and math.isfinite(e["estimate"])),
                         key=lambda e: e["d"])
            if sel:
                x = [1.0 / e["d"] for e in sel]
                ax.errorbar(x, [e["estimate"] for e in sel], yerr=[e["std"] for e in sel], fmt="o",
                            color=colours[name], capsize=3, label=f"{name}(d), GD {SHORT} steps")
            for f in fits:
                if f["omega"] == omega and f["quantity"] == name and f["steps"] == SHORT and f["law"] == "1/d":
                    coef = [float(c) for c in f["coefficients"].split()]
                    xx = np.linspace(0, 1.0 / 400, 50)
                    ax.plot(xx, LAWS["1/d"](1.0 / np.maximum(xx, 1e-12)) @ np.array(coef), "-",
                            color=colours[name], lw=1)
                    ax.errorbar([0], [f["a"]], yerr=[f["a_se_scaled"]], fmt="s", color=colours[name], capsize=4,
                                mfc="white", label=f"{name} fit a + b/d: {f['a']:.3f} ± {f['a_se_scaled']:.3f}")
            ax.plot([0], [THEORY[omega][name][0]], "*", ms=14, color=colours[name], mec="k",
                    label=f"{name} theory {THEORY[omega][name][0]:.4f}")
            ax.plot([0], [PUBLISHED[omega][name]], "x", ms=10, mew=2, color=colours[name],
                    label=f"{name} published {PUBLISHED[omega][name]:.4f}")
        ax.set_xlabel("1/d")
        ax.set_ylabel("alpha")
        ax.set_title(f"omega = {omega:g}")
        ax.set_xlim(-1e-4, 1.0 / 450)
        ax.legend(fontsize=7)
    # d-trend at omega = 0 against the theory curves
    w0 = [r for r in rows if float(r["omega"]) == 0.0 and (0.0, int(r["d"])) in complete]
    panels = (("positional_m", "m (positional start)", "positional", "m", 1.0),
              ("semantic_theta_over_sigma2", "theta/sigma^2 (semantic start)", "semantic", "theta", 0.25),
              ("semantic_test_error", "test error (solid: semantic, dashed: positional start)", None, None, None),
              ("positional_q", "q (positional start)", "positional", "q", 1.0))
    ds = sorted({int(r["d"]) for r in w0})
    ax = axes[0][3]
    for j, d in enumerate(ds):
        alphas, _, arr = paired_matrices([r for r in w0 if int(r["d"]) == d], SHORT)
        v = arr["delta_f"]
        n = np.isfinite(v).sum(axis=1)
        mean = np.array([row[np.isfinite(row)].mean() if k else np.nan for row, k in zip(v, n)])
        sem = np.array([row[np.isfinite(row)].std(ddof=1) / math.sqrt(k) if k > 1 else 0.0 for row, k in zip(v, n)])
        ax.errorbar(alphas, mean, yerr=sem, fmt="-o", ms=3, color=f"C{j}", lw=1, label=f"d = {d}")
    grid = sorted({round(float(r["alpha"]), 4) for b in w0_curves.values() for r in b})
    th = [_theory_value(curves, 0.0, a, "delta_f") for a in grid]
    if any(math.isfinite(t) for t in th):
        ax.plot(grid, th, "k-", lw=2, label="theory, positional - semantic")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("alpha")
    ax.set_title("omega = 0: Delta F = F_pos - F_sem (seed mean)", fontsize=9)
    ax.legend(fontsize=7)
    for ax, (key, label, branch, column, scale) in zip(axes[1], panels):
        for j, d in enumerate(ds):
            alphas, _, arr = paired_matrices([r for r in w0 if int(r["d"]) == d], SHORT)
            keys = [key] if branch else ["semantic_test_error", "positional_test_error"]
            for key2, style in zip(keys, ("-o", "--s")):
                v = arr[key2]
                n = np.isfinite(v).sum(axis=1)
                mean = np.array([row[np.isfinite(row)].mean() if k else np.nan for row, k in zip(v, n)])
                sem = np.array([row[np.isfinite(row)].std(ddof=1) / math.sqrt(k) if k > 1 else 0.0
                                for row, k in zip(v, n)])
                ax.errorbar(alphas, mean, yerr=sem, fmt=style, ms=3, color=f"C{j}", lw=1,
                            label=f"d = {d}" if key2 == keys[0] else None)
        if branch:
            pts = sorted(w0_curves.get(branch, []), key=lambda r: float(r["alpha"]))
            if pts:
                ax.plot([float(r["alpha"]) for r in pts], [float(r[column]) / scale for r in pts], "k-", lw=2,
                        label=f"theory, {branch} branch")
        else:
            lin = [r for r in w0 if int(r["steps"]) == SHORT]
            for b, style in (("semantic", "-"), ("positional", "--")):
                pts = sorted(w0_curves.get(b, []), key=lambda r: float(r["alpha"]))
                if pts:
                    ax.plot([float(r["alpha"]) for r in pts], [float(r["test_error"]) for r in pts], "k" + style,
                            lw=2, label=f"theory, {b}")
            if lin:
                ax.axhline(float(np.mean([float(r["linear_test_error"]) for r in lin])), color="grey", ls=":",
                           label="linear baseline (simulated, mean)")
        ax.set_xlabel("alpha")
        ax.set_title(f"omega = 0: {label}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, "crossings")
    fig.savefig(path + ".png", dpi=80)
    fig.savefig(path + ".pdf")
    plt.close(fig)
    return path + ".png"


def cmd_analyse(args) -> int:
    from tidyio import write_rows as write_csv

    rows = load_rows(args.out)
    if not rows:
        log.error("no runs under %s", os.path.join(args.out, "runs"))
        return 1
    write_csv(os.path.join(args.out, "runs.csv"), rows)
    finished = finished_runs(args.out)
    complete = usable_slices(finished, args.min_runs)
    # a usable slice under way keeps its finished run indices only, so every alpha has the same runs
    rows = [r for r in rows if (float(r["omega"]), int(r["d"])) not in complete
            or int(r["run_index"]) in finished[(float(r["omega"]), int(r["d"]))]]
    estimates = slice_estimates(rows, SHORT, args.n_boot) + slice_estimates(rows, LONG, args.n_boot) \
        + slice_estimates(rows, SHORT, args.n_boot, long_only=True)
    for e in estimates:
        e["complete"] = (e["omega"], e["d"]) in complete
    write_csv(os.path.join(args.out, "crossings.csv"), estimates)
    fits = extrapolation_rows(estimates, SHORT)
    if fits:
        write_csv(os.path.join(args.out, "extrapolation.csv"), fits)
    steps_table = step_rows(rows, args.n_boot, complete)
    if steps_table:
        write_csv(os.path.join(args.out, "steps.csv"), steps_table)
    curves = read_theory_curves(args.theory_curve)
    trend = trend_rows(rows, curves)
    slopes = slope_rows(rows, curves, complete)
    write_csv(os.path.join(args.out, "slopes.csv"), slopes)
    write_csv(os.path.join(args.out, "trend.csv"), trend)
    table = markdown(estimates, fits, steps_table) + "\n" + trend_markdown(trend, complete) + "\n" \
        + slope_markdown(slopes)
    with open(os.path.join(args.out, "crossings.md"), "w") as f:
        f.write(table)
    figure = plot(args.out, rows, estimates, fits, curves, complete)
    runs = {(r["omega"], r["d"], r["alpha"], r["run_index"], r["snapshot_steps"]): r for r in rows}
    cpu = [r["cpu_time"] for r in runs.values() if math.isfinite(r["cpu_time"])]
    log.info("%d paired runs: %.2f h wall in the workers; %.2f core-hours over the %d runs that record it; wrote %s",
             len(runs), sum(r["wall_time"] for r in runs.values()) / 3600, sum(cpu) / 3600, len(cpu), figure)
    print(table)
    return 0


def _primary(estimates: Sequence[dict]) -> List[dict]:
    return [e for e in estimates if e["method"] == PRIMARY]


def _floats(text: str) -> List[float]:
    return [float(x) for x in text.split(",") if x]


def _paths(text: str) -> List[str]:
    return [x for x in text.split(",") if x]


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("time", "plan", "run", "analyse"):
        p = sub.add_parser(name)
        p.add_argument("--ds", type=_ints, default=list(DS))
        if name == "time":
            p.add_argument("--alphas", type=_floats, default=[0.6, 1.4])
            p.add_argument("--steps", type=int, default=400, help="steps timed at d = 1000 (scaled by 1000/d)")
        else:
            p.add_argument("--omegas", type=_floats, default=list(OMEGAS))
        if name in ("plan", "run"):
            p.add_argument("--max-runs", type=int, default=None, help="at most this many seeds per d")
        if name in ("run", "analyse"):
            p.add_argument("--out", required=True)
        if name == "run":
            p.add_argument("--workers", type=int, default=1)
            p.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler")
        if name == "analyse":
            p.add_argument("--n-boot", type=int, default=2000)
            p.add_argument("--min-runs", type=int, default=None,
                           help="also extrapolate a slice under way with at least this many finished runs")
            p.add_argument("--theory-curve", type=_paths, default=[],
                           help="attnphase curve CSVs (comma-separated), one per omega")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bad = [o for o in getattr(args, "omegas", []) if o not in ALPHAS] + [d for d in args.ds if d not in SEEDS[0.0]]
    if bad and args.command != "time":
        ap.error(f"no grid for {bad}; omegas {list(ALPHAS)}, ds {list(SEEDS[0.0])}")
    return {"time": cmd_time, "plan": cmd_plan, "run": cmd_run, "analyse": cmd_analyse}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

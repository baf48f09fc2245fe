"""Our theory and our simulator beside the paper authors' own published numbers
(``attnphase/paper/authors_data/``; docs/validation.md), one sub-command per comparison, each ending on
its table:

    python benchmarks/authors.py theory [--data DIR] [--precision fast] [--only omega0.3]   # their fixed points
    python benchmarks/authors.py rank2 --theory docs/figures/rank2_curve.csv [--every 3]    # their rank-two runs
    python benchmarks/authors.py sim --cells OMEGA:ALPHA:INIT,... --runs 8 --out OUT        # their GD cells

``python benchmarks/authors.py SUB --help`` describes each.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

from attnphase.paper.authors import (DATA, INVARIANT_OF_COLUMNS, column_invariant, compare, files, rank_two_gd,
                                     worst)
from derivations import ModelSpec
from numerics.api import follow
from tidyio import KeyedStore
from validation.simulate import run_one



# --------------------------------------------------------------------------- theory

THEORY_DOC = """Our fixed points beside the authors' stored ones, field by field (docs/validation.md, section
"The authors' stored fixed points").

The authors' data (``theory/repl_softmax_Mixed_sig{sigma}_lamb{lam}_omega{omega}[_para|_agno][_Aalt].csv``,
columns ``q, m, V, theta, mse, alpha, lambda, Phi``; their solver: a degree-7 cubature iterated to
1e-4) name the branch by suffix: none = semantic, ``_para`` = positional, ``_agno`` = trivial,
``_Aalt`` = ``A = [[0.3, 0.7], [0.8, 0.2]]`` (a copy ships with the package,
``attnphase/paper/authors_data/``; the reading and the comparison are ``attnphase.paper.authors``,
which the paper's report uses too). Each file's branch is followed here along the
file's own alphas (``numerics.api.follow``, the requested precision), and each of
``q, m, V, theta``, the test error (beside their ``mse / 2``) and the training loss (beside their
``-Phi``) is printed beside the authors' value with the difference
in our stated errors. A row of theirs whose point lies on another branch (a positional file's
row with ``theta`` far from zero, say) is marked so.

Usage::

    python benchmarks/authors.py theory [--data ../shared/authors-data/theory] [--precision fast] [--only omega0.3]

One line per field and alpha, then a summary per file: the largest |difference| / our error per
field and the largest relative difference.
"""

def compare_file(f, precision: str) -> list:
    t0 = time.perf_counter()
    curve = follow(f.spec, list(f.alphas), f.branch, precision)
    ours = {p.alpha: {**p.values, **{f"{k}_error": v for k, v in p.error.items()}} for p in curve.points}
    print(f"## {f.name}: {f.branch}, sigma = {f.spec.sigma}, lam = {f.spec.lam}, omega = {f.spec.omega}"
          f"{', other A' if f.spec.A is not None else ''} ({len(curve.points)} of {len(f.rows)} alphas solved, "
          f"{time.perf_counter() - t0:.0f} s){'; ' + curve.note if curve.note else ''}", flush=True)
    for sp in curve.spinodals:
        print(f"   our branch ends at alpha = {sp['alpha']:.4g} +- {sp['alpha_error']:.1g} ({sp.get('kind', '')})")
    out = compare(f, ours)
    for r in out:
        print(f"alpha = {r['alpha']:.4f} {r['field']:10s} ours {r['ours']: .6g} +- {r['ours_error']:.1g}  theirs "
              f"{r['theirs']: .6g}  difference {r['difference']: .2e} = {r['in_our_errors']: .3g} of our errors"
              f"{'' if r['their_point_on_branch'] else '  (their point is on another branch)'}")
    for field, w in worst(out).items():
        print(f"   {field}: largest |difference| {w['in_our_errors']:.3g} of our errors; largest relative difference "
              f"{w['relative']:.2e} (alpha = {w['alpha']:.4f})")
    return out


def cmd_theory(argv=None) -> int:
    p = argparse.ArgumentParser(prog="authors.py theory", description=THEORY_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DATA, help="folder of the authors' theory files")
    p.add_argument("--precision", default="fast", choices=("draft", "fast", "high"))
    p.add_argument("--only", default="", help="only the files whose name contains this text")
    args = p.parse_args(argv)
    chosen = [f for f in files(args.data) if args.only in f.name]
    if not chosen:
        raise SystemExit(f"no theory files under {args.data} matching {args.only!r}")
    for f in chosen:
        compare_file(f, args.precision)


# --------------------------------------------------------------------------- rank2

RANK2_DOC = """The authors' rank-two student from random starts against our theory's rank-two branches
(docs/validation.md, "The appendix experiment: a rank-two student from random starts").

Theirs: ``results_{mean,std}_r=2.csv`` at ``omega = 0.3`` (``attnphase/paper/authors_data/``; ``d =
1000``, 10 runs per ``alpha``, 5000 steps of GD at learning rate 0.15), per column of ``Q`` the
largest and smallest ``|m|`` and ``theta / sigma^2``. Per-column values depend on the rotation of
the columns, so the theory is compared through the invariants ``m_sv_1`` and ``theta_sv_1 /
sigma^2`` (root mean square over their runs, ``attnphase.paper.authors.column_invariant``), the test
error and the training loss (theirs ``R``, divided by their ``d``).

Ours: a tidy CSV of the rank-two branches (``attnphase curve --rank 2 --omega 0.3 --alphas 0.25:4:16
--branches positional,mixed,semantic --precision draft --out FILE``), linearly interpolated in
``alpha`` to theirs within each branch's range; the interpolation's error (half the largest second
difference of the neighbouring points, times ``t (1 - t)``) is added to the theory's stated one.
``z = (theirs - theory) / sqrt(se_theirs^2 + err_theory^2)`` per branch, and the branch nearest to
the runs in the invariants.

Usage::

    python benchmarks/authors.py rank2 --theory docs/figures/rank2_curve.csv [--every 3]
"""



SIGMA2 = 0.25
BRANCHES = ("positional", "mixed", "semantic")
QUANTITIES = (("m_sv_1", "m_singular_values_1", 1.0), ("theta_sv_1_over_sigma2", "theta_singular_values_1",
                                                        1.0 / SIGMA2),
              ("test_error", "test_error", 1.0), ("train_loss", "train_loss", 1.0))


def theory(path: Path) -> dict:
    """Per branch, per quantity: arrays ``(alpha, value, error)`` of the converged points."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("status", "converged") == "converged"]
    out = {}
    for b in BRANCHES:
        sel = sorted((r for r in rows if r["branch"] == b), key=lambda r: float(r["alpha"]))
        out[b] = {name: (np.array([float(r["alpha"]) for r in sel]),
                         np.array([float(r[col]) * scale for r in sel]),
                         np.array([float(r.get(f"{col}_error") or "nan") * scale for r in sel]))
                  for name, col, scale in QUANTITIES}
    return out


def interpolate(a: np.ndarray, v: np.ndarray, e: np.ndarray, alpha: float) -> tuple:
    """Linear interpolation with its error; NaN outside the branch's points."""
    if a.size < 2 or not a[0] <= alpha <= a[-1]:
        return math.nan, math.nan
    i = min(int(np.searchsorted(a, alpha, side="right")) - 1, a.size - 2)
    t = (alpha - a[i]) / (a[i + 1] - a[i])
    value = (1 - t) * v[i] + t * v[i + 1]
    lo, hi = max(i - 1, 0), min(i + 3, a.size)
    second = np.abs(np.diff(v[lo:hi], 2)).max() if hi - lo >= 3 else 0.0
    err = math.hypot(max(e[i], e[i + 1]) if np.isfinite(e[i:i + 2]).all() else 0.0, 0.5 * t * (1 - t) * second)
    return float(value), err


def cmd_rank2(argv=None) -> int:
    p = argparse.ArgumentParser(prog="authors.py rank2", description=RANK2_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--theory", type=Path, default=Path("docs/figures/rank2_curve.csv"))
    p.add_argument("--every", type=int, default=3, help="print every k-th alpha of theirs (default 3)")
    args = p.parse_args(argv)
    th = theory(args.theory)
    print("| alpha | quantity | authors' GD | " + " | ".join(f"{b} (z)" for b in BRANCHES) + " | nearest branch |")
    print("|---|---|---|" + "---|" * len(BRANCHES) + "---|")
    for k, point in enumerate(rank_two_gd()):
        alpha = point["alpha"]
        if k % args.every:
            continue
        dist = {}
        lines = []
        for name, _, _ in QUANTITIES:
            g, se = point["values"][name]
            cells = []
            for b in BRANCHES:
                t, te = interpolate(*th[b][name], alpha)
                z = (g - t) / math.hypot(se, te) if math.isfinite(t) else math.nan
                if name in ("m_sv_1", "theta_sv_1_over_sigma2") and math.isfinite(z):
                    dist[b] = dist.get(b, 0.0) + z * z
                cells.append(f"{t:.4g} ({z:+.1f})" if math.isfinite(t) else "absent")
            lines.append((name, g, se, cells))
        nearest = min(dist, key=dist.get) if dist else "-"
        for name, g, se, cells in lines:
            print(f"| {alpha:.3f} | {name} | {g:.4g} +- {se:.2g} | " + " | ".join(cells) + f" | {nearest} |")


# --------------------------------------------------------------------------- sim

SIM_DOC = """Our simulator against the authors' gradient descent, cell by cell: do two independent
simulators agree? (docs/validation.md, section "The authors' gradient descent").

Each cell ``omega:alpha:init`` is simulated with ``validation.simulate.run_one`` at the authors'
settings (``sigma = 0.5``, ``lam = 0.01``, default ``A``, full-batch GD at learning rate 0.15;
``--d``, ``--steps``, ``--runs`` runs of seed ``--seed``), one JSON per run under ``--out`` (a run
already there is not recomputed), and each quantity's mean over the runs is set beside the authors'
(``empirics/results_{mean,std}_<table>.csv``): ``z = (ours - theirs) / sqrt(se_ours^2 + se_theirs^2)``.
Their training loss is ``R``, ours ``R/d``: theirs is divided by 1000 (their ``d``).

Rank-one cells (``--table standardA``, init ``semantic`` or ``positional``): test error, training loss,
``m``, ``theta / sigma^2``. Rank-two cells (``--table r=2``, ``--rank 2``, init ``random``): the
per-column ``|m|`` and ``theta / sigma^2`` (largest and smallest over the two columns), the test error
and training loss, and two invariants under rotations of the columns, the singular values
``m_sv_1 = sqrt(m_col_max^2 + m_col_min^2)`` and ``theta_sv_1 / sigma^2`` likewise, as root mean
squares over runs: the authors' from their columns' means and standard deviations (their runs are
not stored), ours from each run.

Also printed per cell: the largest relative fall of ``R/d`` over the last 10% of the steps
(how far the runs are from stationary).

Usage::

    python benchmarks/authors.py sim --cells 0.3:0.75625:semantic,0.3:2.0:positional --runs 8 --out OUT
    python benchmarks/authors.py sim --table r=2 --rank 2 --cells 0.3:1.005:random --runs 4 --out OUT
"""



THEIR_D = 1000
RANK_ONE = (("test_error", "attention_gen_error_mean"), ("train_loss", "attention_train_error_mean"),
            ("m", "attention_mag_mean"), ("theta_over_sigma2", "attention_theta_mean"))
RANK_TWO = (("test_error", "attention_gen_error_mean"), ("train_loss", "attention_train_error_mean"),
            ("m_col_max", "attention_mag_max"), ("m_col_min", "attention_mag_min"),
            ("theta_over_sigma2_col_max", "attention_thet_max"), ("theta_over_sigma2_col_min", "attention_thet_min"))
RUNS_OF_TABLE = {"standardA": 24, "r=2": 10}


def authors(path: Path) -> dict:
    with path.open(newline="") as f:
        return {(float(r["omega"]), float(r["alpha"]), r["informed"] == "True"): r for r in csv.DictReader(f)
                if float(r["sigma"]) == 0.5 and float(r["attention_lmbda"]) == 0.01}


def runs_of(store: KeyedStore, omega: float, alpha: float, init: str, args) -> list:
    """The runs of one cell, each read from ``store`` if there, else simulated and stored."""
    spec = ModelSpec(sigma=0.5, lam=0.01, omega=omega)
    if args.rank != 1:
        spec = spec.replace(rank=args.rank)
    runs = []
    for k in range(args.runs):
        key = dict(rank=args.rank, omega=omega, alpha=alpha, init=init, d=args.d, steps=args.steps, seed=args.seed,
                   run=k)

        def simulate():
            t0 = time.perf_counter()
            rec = run_one(spec, args.d, alpha, init, args.seed, k, args.steps, 0.15, "gd")
            print(f"  omega = {omega:g}, alpha = {alpha:.4g}, {init}, d = {args.d}, run {k}: "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            return rec

        runs.append(store.cached(key, simulate))
    return runs


def last_fall(run: dict) -> float:
    """The relative fall of ``R/d`` over the last 10% of the recorded loss curve."""
    curve = run["loss_curve"]
    steps = [p[0] for p in curve] if isinstance(curve[0], (list, tuple)) else list(range(len(curve)))
    losses = [p[1] for p in curve] if isinstance(curve[0], (list, tuple)) else list(curve)
    cut = steps[-1] - 0.1 * (steps[-1] - steps[0])
    early = next(v for s, v in zip(steps, losses) if s >= cut)
    return (early - losses[-1]) / abs(losses[-1])


def compare_runs(runs: list, theirs: dict, their_std: dict, quantities, n_theirs: int) -> list:
    out = []
    for ours_key, their_key in quantities:
        vals = np.array([r[ours_key] for r in runs], dtype=float)
        scale = 1.0 / THEIR_D if ours_key == "train_loss" else 1.0
        t, ts = float(theirs[their_key]) * scale, float(their_std[their_key]) * scale / math.sqrt(n_theirs)
        o, os_ = float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size))
        out.append((ours_key, o, os_, t, ts, (o - t) / math.hypot(os_, ts)))
    return out


def invariants(runs: list, theirs: dict, their_std: dict, n_theirs: int) -> list:
    """The column invariants ``m_sv_1`` and ``theta_sv_1 / sigma^2`` as root mean squares over runs:
    ours from each run, theirs from their columns' means and standard deviations
    (``attnphase.paper.authors.column_invariant``)."""
    out = []
    their_col = dict(RANK_TWO)
    for name, hi, lo in INVARIANT_OF_COLUMNS:
        v = np.array([math.hypot(r[hi], r[lo]) for r in runs])
        o = float(np.sqrt(np.mean(v**2)))
        os_ = float(np.std(v**2, ddof=1) / math.sqrt(v.size) / (2 * o))
        t, ts = column_invariant([float(theirs[their_col[hi]]), float(theirs[their_col[lo]])],
                                 [float(their_std[their_col[hi]]), float(their_std[their_col[lo]])], n_theirs)
        out.append((name, o, os_, t, ts, (o - t) / math.hypot(os_, ts)))
    return out


def cmd_sim(argv=None) -> int:
    p = argparse.ArgumentParser(prog="authors.py sim", description=SIM_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True,
                   help="the authors' data folder (its empirics/ holds results_{mean,std}_<table>.csv)")
    p.add_argument("--table", default="standardA", choices=tuple(RUNS_OF_TABLE))
    p.add_argument("--cells", required=True, help="omega:alpha:init,... (alpha as in their table)")
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="folder of the runs (read, and written)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    store = KeyedStore(args.out, prefix="run_")
    mean = authors(args.data / "empirics" / f"results_mean_{args.table}.csv")
    std = authors(args.data / "empirics" / f"results_std_{args.table}.csv")
    quantities = RANK_ONE if args.rank == 1 else RANK_TWO
    print("| omega | alpha | start | d | steps | quantity | ours (runs) | theirs (runs) | z |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in args.cells.split(","):
        w, a, init = cell.split(":")
        omega, alpha = float(w), float(a)
        informed = init == "semantic"
        key = min((k for k in mean if abs(k[0] - omega) < 1e-9 and k[2] == informed), key=lambda k: abs(k[1] - alpha))
        if abs(key[1] - alpha) > 1e-6:
            raise SystemExit(f"no row of theirs at omega = {omega}, alpha = {alpha}, {init}")
        t0 = time.perf_counter()
        runs = runs_of(store, omega, alpha, init, args)
        # the two tables print alpha to different digits
        skey = min((k for k in std if abs(k[0] - omega) < 1e-9 and k[2] == informed), key=lambda k: abs(k[1] - alpha))
        rows = compare_runs(runs, mean[key], std[skey], quantities, RUNS_OF_TABLE[args.table])
        if args.rank != 1:
            rows += invariants(runs, mean[key], std[skey], RUNS_OF_TABLE[args.table])
        for name, o, os_, t, ts, z in rows:
            print(f"| {omega:g} | {alpha:.4g} | {init} | {args.d} | {args.steps} | {name} | {o:.5g} +- {os_:.2g} "
                  f"({len(runs)}) | {t:.5g} +- {ts:.2g} ({RUNS_OF_TABLE[args.table]}) | {z:+.1f} |")
        falls = [last_fall(r) for r in runs]
        print(f"|  |  |  |  |  | R/d fall over the last 10% of steps: {min(falls):.1e} .. {max(falls):.1e}; "
              f"{time.perf_counter() - t0:.0f} s |  |  |  |", flush=True)


COMMANDS = {"theory": cmd_theory, "rank2": cmd_rank2, "sim": cmd_sim}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=COMMANDS)
    ap.add_argument("arguments", nargs=argparse.REMAINDER, help="those of the sub-command (SUB --help)")
    args = ap.parse_args(argv)
    return COMMANDS[args.what](args.arguments) or 0


if __name__ == "__main__":
    sys.exit(main())

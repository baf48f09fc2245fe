"""Our simulator against the authors' gradient descent, cell by cell: do two independent
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

    python benchmarks/authors_sim.py --cells 0.3:0.75625:semantic,0.3:2.0:positional --runs 8 --out OUT
    python benchmarks/authors_sim.py --table r=2 --rank 2 --cells 0.3:1.005:random --runs 4 --out OUT
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np

from attnphase.paper.authors import INVARIANT_OF_COLUMNS, column_invariant
from derivations import ModelSpec
from validation.simulate import run_one

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


def run_path(out: Path, omega, alpha, init, d, steps, seed, k, rank) -> Path:
    return out / f"rank{rank}_omega{omega:g}_alpha{alpha:.6g}_{init}_d{d}_steps{steps}_seed{seed}_run{k}.json"


def runs_of(out: Path, omega: float, alpha: float, init: str, args) -> list:
    spec = ModelSpec(sigma=0.5, lam=0.01, omega=omega)
    if args.rank != 1:
        spec = spec.replace(rank=args.rank)
    runs = []
    for k in range(args.runs):
        path = run_path(out, omega, alpha, init, args.d, args.steps, args.seed, k, args.rank)
        if path.exists():
            runs.append(json.loads(path.read_text()))
            continue
        t0 = time.perf_counter()
        rec = run_one(spec, args.d, alpha, init, args.seed, k, args.steps, 0.15, "gd")
        path.write_text(json.dumps(rec, default=float))
        print(f"  omega = {omega:g}, alpha = {alpha:.4g}, {init}, d = {args.d}, run {k}: "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        runs.append(rec)
    return runs


def last_fall(run: dict) -> float:
    """The relative fall of ``R/d`` over the last 10% of the recorded loss curve."""
    curve = run["loss_curve"]
    steps = [p[0] for p in curve] if isinstance(curve[0], (list, tuple)) else list(range(len(curve)))
    losses = [p[1] for p in curve] if isinstance(curve[0], (list, tuple)) else list(curve)
    cut = steps[-1] - 0.1 * (steps[-1] - steps[0])
    early = next(v for s, v in zip(steps, losses) if s >= cut)
    return (early - losses[-1]) / abs(losses[-1])


def compare(runs: list, theirs: dict, their_std: dict, quantities, n_theirs: int) -> list:
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/work/shared/authors-data"))
    p.add_argument("--table", default="standardA", choices=tuple(RUNS_OF_TABLE))
    p.add_argument("--cells", required=True, help="omega:alpha:init,... (alpha as in their table)")
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
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
        runs = runs_of(args.out, omega, alpha, init, args)
        # the two tables print alpha to different digits
        skey = min((k for k in std if abs(k[0] - omega) < 1e-9 and k[2] == informed), key=lambda k: abs(k[1] - alpha))
        rows = compare(runs, mean[key], std[skey], quantities, RUNS_OF_TABLE[args.table])
        if args.rank != 1:
            rows += invariants(runs, mean[key], std[skey], RUNS_OF_TABLE[args.table])
        for name, o, os_, t, ts, z in rows:
            print(f"| {omega:g} | {alpha:.4g} | {init} | {args.d} | {args.steps} | {name} | {o:.5g} +- {os_:.2g} "
                  f"({len(runs)}) | {t:.5g} +- {ts:.2g} ({RUNS_OF_TABLE[args.table]}) | {z:+.1f} |")
        falls = [last_fall(r) for r in runs]
        print(f"|  |  |  |  |  | R/d fall over the last 10% of steps: {min(falls):.1e} .. {max(falls):.1e}; "
              f"{time.perf_counter() - t0:.0f} s |  |  |  |", flush=True)


if __name__ == "__main__":
    main()

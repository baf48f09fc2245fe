"""Thresholds everywhere: ``alpha_c`` and ``alpha_l`` over a grid of models, or why there are none.

The grid: ``omega`` in 0, 0.05, ..., 0.45; ``lam`` in {0.001, 0.01, 0.1}; ``sigma`` in {0.3, 0.5,
1}; ``A`` in {[[0.6, 0.4], [0.4, 0.6]], [[0.3, 0.7], [0.8, 0.2]]} (180 models). Each case is one
call of :func:`numerics.api.thresholds` and ends in one of

* ``ok``: both thresholds with their error bars;
* ``alpha_l beyond the scan``: ``alpha_c`` with its error bar, ``alpha_l`` not on the (extended) scan;
* ``branch absent`` (:class:`~numerics.thresholds.record.BranchAbsent`) or ``crossing beyond the scan``
  (:class:`~numerics.thresholds.record.CrossingBeyondScan`): no ``alpha_c``, with the reason;
* ``FAILED``: anything else (a solver failure): the case the grid exists to rule out.

Resumable: each finished case is appended to ``DIR/threshold_grid.csv`` at once, and a rerun
skips the cases whose rows are there (read back from the file, so a truncated last line is
recomputed). ``DIR/threshold_grid.md`` is the table, rewritten after every case.

Usage::

    nice -n 10 python benchmarks/threshold_grid.py --out DIR [--precision fast] [--order grid|shuffled]
    python benchmarks/threshold_grid.py --out DIR --table      # only rewrite the table

By default the cases run in a fixed shuffled order, so that a run stopped early has covered the
grid evenly; with ``--first-lam`` the cases of that ``lam`` run first.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import logging
import os
import time

import numpy as np

from derivations import ModelSpec
from numerics.api import thresholds
from numerics.thresholds.record import BranchAbsent, CrossingBeyondScan
from tidyio import read_rows

OMEGAS = tuple(round(0.05 * i, 2) for i in range(10))
LAMS = (0.001, 0.01, 0.1)
SIGMAS = (0.3, 0.5, 1.0)
MATRICES = {"sym": ((0.6, 0.4), (0.4, 0.6)), "asym": ((0.3, 0.7), (0.8, 0.2))}
FIELDS = ("A", "sigma", "lam", "omega", "outcome", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error",
          "reason", "scanned", "wall_time")
#: the outcomes that are answers (a value, or the reason why there is none)
ANSWERS = ("ok", "alpha_l beyond the scan", "branch absent", "crossing beyond the scan")


def cases(order="grid", first_lam=None):
    """The 180 cases, in grid order or shuffled (a fixed permutation, so that a run stopped
    early has covered the grid evenly); with ``first_lam``, that lam's cases first."""
    grid = list(itertools.product(MATRICES, SIGMAS, LAMS, OMEGAS))
    if order == "shuffled":
        grid = [grid[i] for i in np.random.default_rng(0).permutation(len(grid))]
    if first_lam is not None:
        grid.sort(key=lambda c: c[2] != first_lam)
    return grid


def key(A, sigma, lam, omega):
    return (A, float(sigma), float(lam), float(omega))


def run_case(A, sigma, lam, omega, precision):
    """One case as a row: its outcome (one of ``ANSWERS``, or ``FAILED``), values and reason."""
    spec = ModelSpec(sigma=sigma, lam=lam, omega=omega, A=MATRICES[A])
    row = dict(A=A, sigma=sigma, lam=lam, omega=omega, alpha_c="", alpha_c_error="", alpha_l="",
               alpha_l_error="", reason="", scanned="")
    t0 = time.perf_counter()
    try:
        th = thresholds(spec, precision)
    except BranchAbsent as exc:
        row.update(outcome="branch absent", reason=str(exc))
    except CrossingBeyondScan as exc:
        row.update(outcome="crossing beyond the scan", reason=str(exc))
    except Exception as exc:  # noqa: BLE001  (every other end is what the grid looks for)
        logging.getLogger(__name__).warning("A=%s sigma=%g lam=%g omega=%g failed", A, sigma, lam, omega,
                                            exc_info=True)
        row.update(outcome="FAILED", reason=f"{type(exc).__name__}: {exc}")
    else:
        row.update(alpha_c=th.alpha_c, alpha_c_error=th.alpha_c_error, scanned=th.details.get("scanned", ""))
        if th.alpha_l_status == "ok":
            row.update(outcome="ok", alpha_l=th.alpha_l, alpha_l_error=th.alpha_l_error)
        else:
            row.update(outcome="alpha_l beyond the scan", reason=th.alpha_l_status)
    row["wall_time"] = round(time.perf_counter() - t0, 1)
    return row


def _cell(value, error):
    if value in ("", None) or not np.isfinite(float(value)):
        return "-"
    return f"{float(value):.5f} +- {float(error):.1g}" if error not in ("", None) else f"{float(value):.5f}"


def write_table(rows, path):
    rows = sorted(rows, key=lambda r: (r["A"], float(r["sigma"]), float(r["lam"]), float(r["omega"])))
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ANSWERS + ("FAILED",)}
    total_time = sum(float(r["wall_time"]) for r in rows)
    lines = [f"# Threshold grid ({len(rows)} of {len(cases())} cases)", "",
             "Outcomes: " + ", ".join(f"{o}: {n}" for o, n in counts.items()) +
             f". Total wall time {total_time / 3600:.2f} h.", "",
             "| A | sigma | lam | omega | outcome | alpha_c | alpha_l | reason | time (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reason = r["reason"].replace("|", "/")
        lines.append(f"| {r['A']} | {r['sigma']} | {r['lam']} | {r['omega']} | {r['outcome']} | "
                     f"{_cell(r['alpha_c'], r['alpha_c_error'])} | {_cell(r['alpha_l'], r['alpha_l_error'])} | "
                     f"{reason} | {r['wall_time']} |")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder (threshold_grid.csv, threshold_grid.md)")
    p.add_argument("--precision", default="fast")
    p.add_argument("--first-lam", type=float, default=None, help="run the cases of this lam first")
    p.add_argument("--order", choices=("grid", "shuffled"), default="shuffled",
                   help="case order (default shuffled: a fixed permutation covering the grid evenly)")
    p.add_argument("--table", action="store_true", help="only rewrite the table from the CSV")
    p.add_argument("--redo-failed", action="store_true", help="run the FAILED cases again")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "threshold_grid.csv")
    table_path = os.path.join(args.out, "threshold_grid.md")
    done = [r for r in read_rows(csv_path) if r.get("outcome") and r.get("wall_time")
            and not (args.redo_failed and r["outcome"] == "FAILED")]
    if args.table:
        write_table(done, table_path)
        return
    seen = {key(r["A"], r["sigma"], r["lam"], r["omega"]) for r in done}
    todo = [c for c in cases(args.order, args.first_lam) if key(*c) not in seen]
    print(f"{len(done)} cases done, {len(todo)} to run", flush=True)
    # rewrite the file from its readable rows: a line cut by an interrupted write is dropped
    with open(csv_path + ".tmp", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: r.get(k, "") for k in FIELDS} for r in done)
    os.replace(csv_path + ".tmp", csv_path)
    for A, sigma, lam, omega in todo:
        row = run_case(A, sigma, lam, omega, args.precision)
        with open(csv_path, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=FIELDS).writerow(row)
        done.append({k: str(v) for k, v in row.items()})
        write_table(done, table_path)
        print(f"A={A} sigma={sigma} lam={lam} omega={omega}: {row['outcome']} "
              f"alpha_c={_cell(row['alpha_c'], row['alpha_c_error'])} "
              f"alpha_l={_cell(row['alpha_l'], row['alpha_l_error'])} {row['reason'][:160]} ({row['wall_time']} s)",
              flush=True)


if __name__ == "__main__":
    main()

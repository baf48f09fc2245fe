"""The paper's appendix experiment on a rank-2 student: gradient descent from random starts against the
theory's branches (docs/validation.md, section "The general model").

A rank-2 student, a rank-1 teacher, two tokens, omega = 0.3, random starts at each alpha, several seeds.
The runs are read from the run folders of ``attnphase validate --rank 2 --omega 0.3 --inits random
--alphas ... --steps N --sim-only --out RUNS`` (every cached random-start point of the rank-2 model in
``RUNS/runs``, one marker per number of steps); the theory is a CSV of ``attnphase curve --rank 2 --omega 0.3
--alphas ... --branches positional,mixed,semantic``. Prints, per alpha and number of steps, the branch each
run reached (``validation.statistics.run_branch``), the theory's global minimum there and the training
losses, as a Markdown table, with how flat each run's training loss was at the end; draws the figure.

Run:
    python benchmarks/rank2_appendix.py --runs RUNS [RUNS ...] --theory rank2_fine.csv --figure docs/figures/rank2_appendix.png
"""
from __future__ import annotations

import argparse
import collections
import glob
import os

import numpy as np

from derivations.spec import ModelSpec
from tidyio import read_checked_json, read_rows
from validation.figures import plot_column_overlaps
from validation.statistics import final_loss_fall, result_spec, run_branch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", required=True, help="validate output folders holding runs/")
    p.add_argument("--theory", required=True, help="CSV of attnphase curve for the rank-2 model")
    p.add_argument("--figure", required=True)
    args = p.parse_args()

    spec = ModelSpec(rank=2, omega=0.3)
    found = {}  # the same settings cached in two folders are one point
    for folder in args.runs:
        for path in glob.glob(os.path.join(folder, "runs", "sim_*.json")):
            res = read_checked_json(path)
            if res["init"] == "random" and result_spec(res) == spec:
                found[(res["alpha"], res["steps"], res["seeds"], res["seed"], res["d"])] = res
    results = list(found.values())
    by_steps = collections.defaultdict(list)
    for res in sorted(results, key=lambda r: r["alpha"]):
        by_steps[res["steps"]].append(res)
    theory = [r for r in read_rows(args.theory) if int(float(r["rank"])) == 2]

    print("| alpha | steps | runs reached | theory global minimum | theory training loss per branch | "
          "runs' training loss (mean per branch reached) | largest relative fall of R/d over the last 10% |")
    print("|---|---|---|---|---|---|---|")
    for res in sorted(results, key=lambda r: (r["alpha"], r["steps"])):
        a, d = res["alpha"], res["d"]
        losses = collections.defaultdict(list)
        for run in res["runs"]:
            losses[run_branch(run, spec, d)].append(run["train_loss"])
        at = [r for r in theory if abs(float(r["alpha"]) - a) < 1e-9 and r["converged"] == "True"]
        glob_branch = next((r["branch"] for r in at if r["global_minimum"] == "True"), "none converged")
        th = ", ".join(f"{r['branch']} {float(r['train_loss']):.5f}" for r in sorted(at, key=lambda r: r["branch"]))
        went = ", ".join(f"{b} {len(v)}/{len(res['runs'])}" for b, v in sorted(losses.items()))
        sim = ", ".join(f"{b} {np.mean(v):.5f}" for b, v in sorted(losses.items()))
        print(f"| {a:g} | {res['steps']} | {went} | {glob_branch} | {th or '-'} | {sim} | {max(final_loss_fall(run) for run in res['runs']):.0e} |")
    sets = [(f"gradient descent, {steps} steps", rs) for steps, rs in sorted(by_steps.items())]
    d = results[0]["d"] if results else "?"
    plot_column_overlaps(sets, theory, spec.sigma, args.figure,
                         title=f"rank-2 student, rank-1 teacher, L = 2, omega = 0.3, d = {d}: gradient descent from "
                               "random starts (one point per run) and the theory's branches (thick: global minimum)")
    print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()

"""The paper's appendix experiment on a rank-2 student: gradient descent from random starts against the
theory's branches (docs/validation.md, section "The general model").

A rank-2 student, a rank-1 teacher, two tokens, omega = 0.3, random starts at each alpha, several seeds.
The runs are those of ``attnphase validate --rank 2 --omega 0.3 --inits random --alphas ... --sim-only
--out RUNS`` (read from ``RUNS/runs``, simulated there if missing, with the same settings); the theory is a
CSV of ``attnphase curve --rank 2 --omega 0.3 --alpha ... --branches positional,mixed,semantic``.
Prints, per alpha, the branch each run reached (``validation.statistics.run_branch``), the theory's global
minimum there and the training losses, as a Markdown table; draws the figure.

Run:
    python benchmarks/rank2_appendix.py --runs RUNS --theory rank2_fine.csv --figure docs/figures/rank2_appendix.png
"""
from __future__ import annotations

import argparse
import collections

import numpy as np

from derivations.spec import ModelSpec
from numerics.tidy import read_rows
from validation.figures import plot_column_overlaps
from validation.runs import cached_simulate
from validation.statistics import run_branch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="the validate output folder holding runs/")
    p.add_argument("--theory", required=True, help="CSV of attnphase curve for the rank-2 model")
    p.add_argument("--figure", required=True)
    p.add_argument("--alphas", default=",".join(f"{0.25 * i:g}" for i in range(1, 17)))
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10000)
    args = p.parse_args()

    spec = ModelSpec(rank=2, omega=0.3)
    kw = {"seeds": args.seeds, "seed": 0, "steps": args.steps, "lr": None, "optimizer": "gd", "dtype": "float32",
          "device": None, "n_test": 10000}  # the settings attnphase validate passes
    alphas = [float(a) for a in args.alphas.split(",")]
    results = [cached_simulate(spec, args.d, a, "random", kw, f"{args.runs}/runs") for a in alphas]
    theory = [r for r in read_rows(args.theory) if int(float(r["rank"])) == 2]

    print("| alpha | runs reached | theory global minimum | theory training loss of each branch | "
          "runs' training loss (mean per branch reached) |")
    print("|---|---|---|---|---|")
    for res in results:
        a = res["alpha"]
        reached = collections.Counter(run_branch(run, spec, res["d"]) for run in res["runs"])
        losses = collections.defaultdict(list)
        for run in res["runs"]:
            losses[run_branch(run, spec, res["d"])].append(run["train_loss"])
        at = [r for r in theory if abs(float(r["alpha"]) - a) < 1e-9 and r["converged"] == "True"]
        glob = next((r["branch"] for r in at if r["global_minimum"] == "True"), "none converged")
        th = ", ".join(f"{r['branch']} {float(r['train_loss']):.5f}" for r in sorted(at, key=lambda r: r["branch"]))
        sim = ", ".join(f"{b} {np.mean(v):.5f}" for b, v in sorted(losses.items()))
        total = len(res["runs"])
        went = ", ".join(f"{b} {n}/{total}" for b, n in sorted(reached.items()))
        print(f"| {a:g} | {went} | {glob} | {th or 'no converged branch in the CSV'} | {sim} |")
    plot_column_overlaps(results, theory, spec.sigma, args.figure,
                         title=f"rank-2 student, rank-1 teacher, L = 2, omega = 0.3, d = {args.d}: gradient descent "
                               f"from random starts ({args.seeds} per alpha) and the theory's branches "
                               "(thick: global minimum)")
    print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()

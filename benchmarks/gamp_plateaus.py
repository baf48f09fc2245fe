"""GAMP runs that may not converge, with the overlaps they wander over (docs/gamp.md, sections 4 and 7).

    python benchmarks/gamp_plateaus.py OUT.jsonl --omega 0.3 --alpha 1 --init positional --d 4000 --runs 4
        [--dampings 0.5,0.25,0.125,0.0625 --stall-window 60 --maxiter 400]

One JSON line per run: converged or not, the damping schedule's failures, and over the last
``--stall-window`` iterations the mean and spread of each invariant and of the number of samples
whose prox switched per iteration (``validation.gamp``); converged runs give their fixed point.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--omega", type=float, default=0.3)
    p.add_argument("--tokens", type=int, default=2)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--init", default="positional")
    p.add_argument("--d", type=int, default=4000)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--first-run", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dampings", default="0.5,0.25")
    p.add_argument("--stall-window", type=int, default=30)
    p.add_argument("--maxiter", type=int, default=400)
    args = p.parse_args(argv)
    from derivations import ModelSpec
    from validation.gamp import GampRunFailed, gamp_run

    spec = ModelSpec(omega=args.omega, tokens=args.tokens)
    dampings = [float(x) for x in args.dampings.split(",")]
    for k in range(args.first_run, args.first_run + args.runs):
        t0 = time.perf_counter()
        row = {"omega": args.omega, "tokens": args.tokens, "alpha": args.alpha, "init": args.init, "d": args.d,
               "run_index": k, "seed": args.seed, "dampings": dampings}
        try:
            rec = gamp_run(spec, args.d, args.alpha, args.init, args.seed, k, dtype="float32" if args.d >= 8000 else
                           "float64", dampings=dampings, stall_window=args.stall_window, maxiter=args.maxiter,
                           plateau_window=args.stall_window)
            row.update({key: v for key, v in rec.items() if key != "history"})
        except GampRunFailed as exc:
            row.update(converged=False, attempts=exc.error.attempts, plateau=exc.plateau,
                       iterations=len(exc.error.history))
        row["wall"] = time.perf_counter() - t0
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:600], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Refinement check of the fast error estimates at the fixed-point level.

For the six fixed points of ``accuracy_targets.py`` (default model, both branches,
alpha in {1, 1.5, 2}) it solves in fast and in high mode and prints, per field,
``|fast - high| / |high|`` next to the fast relative error estimate, marking with ``!``
the entries where the estimate does not cover the difference, and the high mode's own
largest estimate. High mode is not exact either: where its own estimate is comparable
to the difference, the comparison says little (docs/numerics.md, section 8).

Run: python benchmarks/fast_vs_high.py   (about 8 minutes on 2 cores)

``--fast-coarse-near N`` and ``--high-near A,B`` replace the near-node counts of the
fast coarse rule and of the high rule pair, to study candidate rules
(docs/studies/near_nodes.md).
"""
import argparse
import dataclasses
import time

from accuracy_targets import STARTS

from derivations import ModelSpec
from numerics.fixed_points.lines import solve_branch
from numerics.precision import PRECISIONS

FIELDS = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")


def main():
    spec = ModelSpec()
    covered = total = 0
    for (branch, alpha), start in STARTS.items():
        t0 = time.perf_counter()
        fast = solve_branch(spec, alpha, branch, "fast", start=start)
        high = solve_branch(spec, alpha, branch, "high", start=fast.overlaps)
        cells = []
        high_worst = 0.0
        for name in FIELDS:
            h, f = high.values[name], fast.values[name]
            if abs(h) <= 1e-10:
                continue  # zero by symmetry on this branch
            diff = abs(f - h) / abs(h)
            estimate = fast.error[name] / abs(f)
            high_worst = max(high_worst, high.error[name] / abs(h))
            total += 1
            covered += diff <= estimate
            cells.append(f"{name} {diff:.1e}/{estimate:.1e}{'' if diff <= estimate else '!'}")
        print(f"{branch} alpha={alpha}: converged fast={fast.converged} high={high.converged}, "
              f"high's largest estimate {high_worst:.1e}, {time.perf_counter() - t0:.0f} s")
        print("    |fast - high|/high vs fast estimate: " + "  ".join(cells), flush=True)
    print(f"the fast estimate covers |fast - high| in {covered} of {total} entries")


def _with_near_nodes(fast_coarse_near, high_near):
    fast, high = PRECISIONS["fast"], PRECISIONS["high"]
    if fast_coarse_near is not None:
        PRECISIONS["fast"] = dataclasses.replace(fast, rule=dataclasses.replace(fast.rule, n_near=fast_coarse_near))
    if high_near is not None:
        coarse, fine = (int(x) for x in high_near.split(","))
        PRECISIONS["high"] = dataclasses.replace(high, rule=dataclasses.replace(high.rule, n_near=coarse),
                                                 check_rule=dataclasses.replace(high.check_rule, n_near=fine))
    print(f"fast rules: {PRECISIONS['fast'].rule} / {PRECISIONS['fast'].check_rule}")
    print(f"high rules: {PRECISIONS['high'].rule} / {PRECISIONS['high'].check_rule}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast-coarse-near", type=int, default=None)
    parser.add_argument("--high-near", default=None, metavar="COARSE,FINE")
    args = parser.parse_args()
    _with_near_nodes(args.fast_coarse_near, args.high_near)
    main()

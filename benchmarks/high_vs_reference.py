"""High mode against a reference fixed point (docs/numerics.md, section 8).

At ``sem1`` (semantic, alpha = 1) or ``pos15`` (positional, alpha = 1.5) of the default
model, solves high mode with the given near-node counts of its coarse and reporting
rules, then the fixed point of the reference rule 80/24/40/48/64 from there, and prints
per field ``|high - ref| / |ref|`` against high mode's relative error estimate (``!``
where the estimate does not cover the difference).

Run: python benchmarks/high_vs_reference.py sem1 --near 10,12 10,32   (about 1-2 minutes)

Tables measured with lines along a fixed axis for teacher nodes without a pair
(``ChannelRule.soft_lines`` off) and other fast rules differ from what the rules of today
give.
"""
import argparse
import dataclasses
import time

import numpy as np

from derivations import ModelSpec
from numerics.fixed_points import lines as fpm
from numerics.overlaps import ALL_NAMES
from numerics.precision import PRECISIONS
from numerics.channel.lines import ChannelRule
from numerics.model.bound import bind
from numerics.overlaps import Overlaps

POINTS = {"sem1": ("semantic", 1.0, Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858)),
          "pos15": ("positional", 1.5, Overlaps(q=0.0494719, m=0.2547315, V=13.59291, theta=0.0))}
REFERENCE = ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point", choices=sorted(POINTS))
    ap.add_argument("--near", nargs="+", default=["10,32"], metavar="COARSE,FINE")
    args = ap.parse_args()
    spec = ModelSpec()
    model = bind(spec)
    branch, alpha, start = POINTS[args.point]
    high = PRECISIONS["high"]
    solved = {}
    for pair in args.near:
        coarse, fine = (int(x) for x in pair.split(","))
        PRECISIONS["high-variant"] = dataclasses.replace(
            high, rule=dataclasses.replace(high.rule, n_near=coarse),
            check_rule=dataclasses.replace(high.check_rule, n_near=fine))
        t = time.perf_counter()
        solved[pair] = fpm.solve_branch(spec, alpha, branch, "high-variant", start=start, model=model)
        print(f"high {pair}: {time.perf_counter() - t:.0f} s, converged {solved[pair].converged}", flush=True)
    t = time.perf_counter()
    ref = fpm.solve_with_rule(model, alpha, branch, REFERENCE, solved[args.near[-1]].overlaps, tol=1e-11)
    print(f"reference: {time.perf_counter() - t:.0f} s, converged {ref.converged}, residual {ref.residual8:.1e}")
    values = dict(zip(ALL_NAMES, np.concatenate([ref.overlaps.as_array(), ref.side.hats.as_array()])))
    for pair, fp in solved.items():
        cells = []
        for name, v in values.items():
            if abs(v) < 1e-10:
                continue  # zero by symmetry on this branch
            diff, estimate = abs(fp.values[name] - v) / abs(v), fp.error[name] / abs(fp.values[name])
            cells.append(f"{name} {diff:.1e}/{estimate:.1e}{'' if diff <= estimate else '!'}")
        print(f"high {pair} |high - ref|/ref vs estimate: " + "  ".join(cells))


if __name__ == "__main__":
    main()

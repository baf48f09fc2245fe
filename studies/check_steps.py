"""How many Newton steps do the global-minimum checks need? (numerics/channel/lines/accumulation.py, CHECK_STEPS)

For each overlap point it evaluates the channel with the fast reporting rule twice, with
the checks capped at ``--steps`` and at 60 steps, and prints the unresolved weight (nodes
where a check found a lower minimum than the followed branch) and the largest relative
change of any channel expectation.

Run: python studies/check_steps.py [--steps 4]
"""
import argparse

import numpy as np

from derivations import ModelSpec
from numerics.model.bound import bind
from numerics.channel.lines import accumulation, channel_expectations
from numerics.precision import PRECISIONS
from numerics.overlaps import Overlaps

POINTS = [Overlaps(0.0512, 0.258, 11.4, 0.0), Overlaps(0.1148, 0.0, 12.67, 0.1582), Overlaps(0.09, 0.0, 16.0, 0.12),
          Overlaps(0.05, 0.09, 24.0, 0.0), Overlaps(0.104, 0.0, 23.7, 0.0), Overlaps(0.07, 0.0, 14.0, 0.08)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=accumulation.CHECK_STEPS)
    args = ap.parse_args()
    model = bind(ModelSpec())
    rule = PRECISIONS["fast"].check_rule
    print(f"checks capped at {args.steps} steps against 60 steps; rule {rule}")
    worst = 0.0
    for ov in POINTS:
        out = {}
        for steps in (args.steps, 60):
            accumulation.CHECK_STEPS = steps  # read by the checks at each call
            res = channel_expectations(model, ov, rule)
            out[steps] = (np.array(list(res.expectations.values())), res.unresolved_weight)
        capped, full = out[args.steps][0], out[60][0]
        keep = np.abs(full) > 1e-15
        rel = float(np.max(np.abs(capped - full)[keep] / np.abs(full[keep])))
        worst = max(worst, rel)
        print(f"{ov}: unresolved weight {out[args.steps][1]:.3e} vs {out[60][1]:.3e}; "
              f"largest relative change {rel:.2e}")
    print(f"largest relative change over all points: {worst:.2e}")


if __name__ == "__main__":
    main()

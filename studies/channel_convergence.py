"""Convergence study of the channel quadrature (docs/studies/channel_convergence.md).

For fixed overlaps on both branches at alpha ~ 1 and alpha = 2 (default model), it
prints the relative error of each channel expectation against a reference rule, for
the rules of the precision modes and for one-factor-at-a-time variations, with the
time of each evaluation. The error estimate of a precision mode is
|reporting - coarse|; the table shows whether it covers the reporting rule's true
error (measured against the reference).

Run: python studies/channel_convergence.py [--points pos2 sem2 ...] [--vary]

The tables of docs/studies/channel_convergence.md were measured with lines along a
fixed axis for teacher nodes without a pair (``ChannelRule.soft_lines`` off) and other
fast rules; the rules of today give other numbers.
"""
import argparse
import dataclasses
import time

import numpy as np

from derivations import ModelSpec
from numerics.channel.lines import ChannelRule, channel_expectations
from numerics.precision import PRECISIONS
from numerics.model.bound import bind
from numerics.overlaps import Overlaps

POINTS = {
    # near the fast fixed points of the default model (docs/theory.md, section 3.8)
    "pos2": Overlaps(q=0.0512, m=0.258, V=11.4, theta=0.0),
    "sem2": Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582),
    "pos1": Overlaps(q=0.030, m=0.19, V=15.0, theta=0.0),
    "sem1": Overlaps(q=0.09, m=0.0, V=16.0, theta=0.12),
}
NAMES = ("qhat", "mhat", "thetahat_y", "Vhat_y", "envelope")
REFERENCE = ChannelRule(n_eta=40, n_r=16, n_u=28, n_t=32, n_near=12)


def _label(rule: ChannelRule) -> str:
    return f"{rule.n_eta}/{rule.n_r}/{rule.n_u}/{rule.n_t}/{rule.n_near}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS))
    ap.add_argument("--vary", action="store_true", help="also vary one factor of the fast reporting rule at a time")
    args = ap.parse_args()
    model = bind(ModelSpec())
    # the unfolded reference (no symmetry folding of the teacher rule) is a different
    # discretisation of the same integral: its row shows that the folding adds no bias
    rules = [("ref unfolded", dataclasses.replace(REFERENCE, use_symmetry=False)),
             ("draft", PRECISIONS["draft"].rule), ("fast coarse", PRECISIONS["fast"].rule),
             ("fast report", PRECISIONS["fast"].check_rule), ("high coarse", PRECISIONS["high"].rule),
             ("high report", PRECISIONS["high"].check_rule)]
    if args.vary:
        base = PRECISIONS["fast"].check_rule
        for field, values in (("n_eta", (20, 36)), ("n_r", (8, 16)), ("n_u", (12, 20)), ("n_t", (16, 24)),
                              ("n_near", (6, 10))):
            rules += [(f"{field}={v}", dataclasses.replace(base, **{field: v})) for v in values]
    print("relative error against the reference rule "
          f"{_label(REFERENCE)} (n_eta/n_r/n_u/n_t/n_near); columns: {', '.join(NAMES)}")
    for key in args.points:
        ov = POINTS[key]
        t0 = time.perf_counter()
        ref = channel_expectations(model, ov, REFERENCE).expectations
        print(f"\n{key}: {ov}  (reference {time.perf_counter() - t0:.1f} s)")
        ref_v = np.array([ref[n] for n in NAMES])
        for name, rule in rules:
            t0 = time.perf_counter()
            res = channel_expectations(model, ov, rule)
            dt = time.perf_counter() - t0
            v = np.array([res.expectations[n] for n in NAMES])
            # entries that vanish by symmetry on the branch are printed as '-'
            err = ["       -" if abs(r) < 1e-12 else f"{(x - r) / abs(r):8.1e}" for x, r in zip(v, ref_v)]
            print(f"  {name:<12} {_label(rule):<16} {' '.join(err)}  {dt:6.2f} s  nodes {res.n_nodes}"
                  f"  unresolved {res.unresolved_weight:.1e}", flush=True)


if __name__ == "__main__":
    main()

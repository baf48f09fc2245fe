"""Lines along the soft direction, against lines along a fixed axis.

1. One teacher node without a pair of minima at ``w = 0`` (``h* = (-0.421, 0.421)`` at the
   fast fixed point ``sem1``: semantic, alpha = 1): its line integral with line rules from
   12/16/8 to 200/64/64 (``n_u/n_t/n_near``), relative to 200/64/64 with soft lines.
2. The whole channel at ``sem1`` and ``pos15`` with the fast and high rules, both line
   orientations, relative to the reference 80/24/40/48/64 with soft lines.

Run: python studies/soft_lines.py   (about 2 minutes; docs/studies/soft_direction_lines.md)
"""
import argparse
import dataclasses

import numpy as np

from derivations import ModelSpec
from numerics.model.bound import bind
from numerics.channel.lines import ChannelRule, channel_expectations, teacher_node_expectations
from numerics.channel.lines.teacher_nodes import gaussian_factor
from numerics.precision import PRECISIONS
from numerics.overlaps import Overlaps

POINTS = {"sem1": Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858),
          "pos15": Overlaps(q=0.0494719, m=0.2547315, V=13.59291, theta=0.0)}
NAMES = ("qhat", "mhat", "Vhat_y", "thetahat_y", "envelope")


def relative(values, ref):
    return "  ".join(f"{k} {(values[k] - ref[k]) / abs(ref[k]):+.1e}" for k in NAMES if abs(ref[k]) > 1e-12)


def one_teacher_node(model):
    ov = POINTS["sem1"]
    factor = gaussian_factor(model, ov)
    eta = np.linalg.solve(factor.L_hh, [-0.421, 0.421])
    node = (np.array([eta[0]]), np.array([eta[1]]), np.array([1.0]))

    def line_integral(soft, n_u, n_t, n_near):
        rule = ChannelRule(use_symmetry=False, soft_lines=soft, n_u=n_u, n_t=n_t, n_near=n_near)
        return teacher_node_expectations(model, ov, rule, factor, node).expectations
    ref = line_integral(True, 200, 64, 64)
    print("one teacher node, h* = (-0.421, 0.421) at sem1, relative to 200/64/64 with soft lines")
    for resolution in ((12, 16, 8), (16, 20, 16), (32, 20, 16), (64, 20, 16), (128, 20, 16), (200, 64, 64)):
        for soft in (False, True):
            print(f"  {'soft' if soft else 'axis'} lines {'/'.join(map(str, resolution)):10s}",
                  relative(line_integral(soft, *resolution), ref))


def whole_channel(model):
    reference = ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64)
    for name, ov in POINTS.items():
        ref = channel_expectations(model, ov, reference).expectations
        print(f"{name}: relative to 80/24/40/48/64 with soft lines")
        for mode in ("fast", "high"):
            for tag, rule in (("coarse", PRECISIONS[mode].rule), ("reporting", PRECISIONS[mode].check_rule)):
                for soft in (False, True):
                    values = channel_expectations(model, ov, dataclasses.replace(rule, soft_lines=soft)).expectations
                    label = f"{mode} {tag} {rule.n_eta}/{rule.n_r}/{rule.n_u}/{rule.n_t}/{rule.n_near}"
                    print(f"  {label:32s} {'soft' if soft else 'axis'} lines  {relative(values, ref)}", flush=True)


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    model = bind(ModelSpec())
    one_teacher_node(model)
    whole_channel(model)


if __name__ == "__main__":
    main()

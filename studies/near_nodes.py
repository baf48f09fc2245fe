"""Channel expectations for rules that differ in their near-node counts, against a fine reference.

At one fixed point of the default model (`sem1`: semantic, alpha = 1; `pos15`: positional,
alpha = 1.5; fast fixed points), prints the relative difference of each channel
expectation from the reference rule 80/24/40/48/64 (docs/studies/near_nodes.md).

Run: python studies/near_nodes.py sem1|pos15   (about 45 s each)

The tables of docs/studies/near_nodes.md were measured with lines along a fixed axis
for teacher nodes without a pair (``ChannelRule.soft_lines`` off) and other fast rules;
the rules of today give other numbers.
"""
import argparse
import dataclasses
import time

from derivations.spec import ModelSpec
from numerics.channel.lines import ChannelRule, channel_expectations
from numerics.model.bound import bind
from numerics.overlaps import Overlaps
from numerics.precision import PRECISIONS

POINTS = {"sem1": Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858),
          "pos15": Overlaps(q=0.0494719, m=0.2547315, V=13.59291, theta=0.0)}
KEYS = ("qhat", "mhat", "Vhat_y", "thetahat_y", "envelope")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point", nargs="?", default="sem1", choices=sorted(POINTS))
    args = ap.parse_args()
    model = bind(ModelSpec())
    ov = POINTS[args.point]
    F, H = PRECISIONS["fast"], PRECISIONS["high"]
    rules = {
        "fast coarse": F.rule, "fast fine": F.check_rule,
        "high coarse": H.rule, "high fine": H.check_rule,
        "high coarse near24": dataclasses.replace(H.rule, n_near=24),
        "high fine near32": dataclasses.replace(H.check_rule, n_near=32),
        "fast coarse near12": dataclasses.replace(F.rule, n_near=12),
        "fast coarse near16": dataclasses.replace(F.rule, n_near=16),
        "fast fine near24": dataclasses.replace(F.check_rule, n_near=24),
        "ref48": ChannelRule(n_eta=64, n_r=20, n_u=32, n_t=40, n_near=48),
        "ref": ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64),
    }
    out = {}
    for name, r in rules.items():
        t = time.perf_counter()
        res = channel_expectations(model, ov, r)
        out[name] = res.expectations
        print(name, f"{time.perf_counter() - t:.1f}s", "unresolved", res.unresolved_weight, flush=True)
    ref = out["ref"]
    for name in rules:
        if name != "ref":
            print(f"{name:20s}", " ".join(f"{k}={(out[name][k] - ref[k]) / abs(ref[k]) if abs(ref[k]) > 1e-12 else 0:+.1e}"
                                          for k in KEYS))


if __name__ == "__main__":
    main()

"""`Vhat` in its saddle-point form (docs/theory.md, section 2.5) against `Vhat = 2 alpha dE[M]/dq`
(central differences of the envelope at fixed m, V, theta; the stationarity of F in q,
section 2.6), for the fast rules and a reference rule 80/24/40/48/64, at a fast fixed
point (docs/studies/vhat_forms.md).

Run: python studies/vhat_forms.py sem1|pos15   (about 2 minutes)

The tables of docs/studies/vhat_forms.md were measured with lines along a fixed axis
for teacher nodes without a pair (``ChannelRule.soft_lines`` off) and other fast rules;
the rules of today give other numbers.
"""
import argparse

from derivations.spec import ModelSpec
from numerics.channel.lines import ChannelRule, channel_expectations
from numerics.model.bound import bind
from numerics.overlaps import Overlaps
from numerics.precision import PRECISIONS

POINTS = {"sem1": Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858),
          "pos15": Overlaps(q=0.0494719, m=0.2547315, V=13.59291, theta=0.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point", choices=sorted(POINTS))
    args = ap.parse_args()
    model = bind(ModelSpec())
    ov = POINTS[args.point]
    ref = ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64)
    rules = {"fast coarse": PRECISIONS["fast"].rule, "fast fine": PRECISIONS["fast"].check_rule, "ref": ref}
    out = {}
    for name, r in rules.items():
        e0 = channel_expectations(model, ov, r).expectations
        res = {}
        for h in (1e-4, 3e-5):
            ep = channel_expectations(model, Overlaps(ov.q + h, ov.m, ov.V, ov.theta), r).expectations["envelope"]
            em = channel_expectations(model, Overlaps(ov.q - h, ov.m, ov.V, ov.theta), r).expectations["envelope"]
            res[h] = 2 * (ep - em) / (2 * h)   # Vhat/alpha = 2 dE[M]/dq at fixed m, V, theta
        out[name] = (e0["Vhat_y"], res)
        print(name, "Vhat_y", e0["Vhat_y"], "Vhat_fd", res, flush=True)
    r0 = out["ref"][0]
    for name, (vy, res) in out.items():
        print(f"{name:12s} Vhat_y err {(vy - r0) / abs(r0):+.2e}  fd err",
              {h: f"{(v - r0) / abs(r0):+.2e}" for h, v in res.items()})


if __name__ == "__main__":
    main()

"""Convergence study of the channel quadrature (docs/numerics.md).

Prints the channel conjugates at SPEC's reference point (omega=0.3, alpha=2,
semantic branch) for the tensor Gauss-Hermite teacher rule and the polar rule split
at the pitchfork, at increasing resolution, with the time of each evaluation.
Run: python benchmarks/convergence_study.py [--quick]
"""
import argparse
import time

from derivations import ModelSpec
from numerics.channel import ChannelRule, channel_expectations
from numerics.model import bind
from numerics.overlaps import Overlaps

REF = Overlaps(q=0.114816, m=0.0, V=12.6686, theta=0.158157)
ALPHA = 2.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    model = bind(ModelSpec())
    rules = [
        ChannelRule(eta_scheme="hermite", n_eta=12, n_u=8, n_t=24),
        ChannelRule(eta_scheme="hermite", n_eta=16, n_u=8, n_t=24),
        ChannelRule(eta_scheme="hermite", n_eta=24, n_u=8, n_t=24),
        ChannelRule(n_eta=16, n_r=8, n_u=8, n_t=24),
        ChannelRule(n_eta=20, n_r=8, n_u=8, n_t=20),
        ChannelRule(n_eta=24, n_r=10, n_u=8, n_t=24),
        ChannelRule(n_eta=28, n_r=12, n_u=8, n_t=24),
        ChannelRule(n_eta=32, n_r=12, n_u=8, n_t=24),
        ChannelRule(n_eta=32, n_r=12, n_u=8, n_t=32),
        ChannelRule(n_eta=32, n_r=12, n_u=12, n_t=24),
    ]
    if not args.quick:
        rules += [ChannelRule(n_eta=48, n_r=16, n_u=8, n_t=24), ChannelRule(n_eta=56, n_r=18, n_u=12, n_t=40)]
    print(f"{'scheme':>8} {'n_eta':>5} {'n_r':>3} {'n_u':>3} {'n_t':>3} {'qhat':>16} {'thetahat_y':>16} "
          f"{'thetahat_dl':>16} {'Vhat_y':>16} {'E[M]':>16} {'unresolved':>10} {'time/s':>7}")
    for rule in rules:
        t0 = time.perf_counter()
        res = channel_expectations(model, REF, rule)
        dt = time.perf_counter() - t0
        e = res.expectations
        print(f"{rule.eta_scheme:>8} {rule.n_eta:5d} {rule.n_r if rule.eta_scheme == 'polar' else '-':>3} "
              f"{rule.n_u:3d} {rule.n_t:3d} {ALPHA * e['qhat']:16.10e} {ALPHA * e['thetahat_y']:16.10e} "
              f"{ALPHA * e['thetahat_dl']:16.10e} {ALPHA * e['Vhat_y']:16.10e} {e['envelope']:16.10e} "
              f"{res.unresolved_weight:10.1e} {dt:7.2f}", flush=True)


if __name__ == "__main__":
    main()

"""The theory's ``Vhat`` against its Hessian form at fixed points (docs/gamp.md, section 5).

``Vhat`` (the Stein form the numerics solve, docs/theory.md, section 4.6) is ``-alpha E[sum_l
df_l/dw_l]`` with the jumps of ``f`` across the surfaces where the global prox switches; the Hessian
form keeps the smooth part alone, which is what a minimiser's local (leave-one-out) response, and so
GAMP's ``Lam``, sees. Their gap is the jumps' share; with it the variance ``V = sigma^2 / (lam +
sigma^2 Vhat)`` of each form. Also the replicon eigenvalues of :func:`numerics.api.rs_stability`.

    python benchmarks/gamp_divergence_check.py [--points "0.3:2:semantic,0.3:1:positional,..."]
"""
from __future__ import annotations

import argparse
import sys

POINTS = ("0.3:2:semantic,0.3:1:positional,0.3:1.35:semantic,0.3:1.35:positional,0:0.7:semantic,0:0.7:positional,"
          "0:0.55:semantic,0:0.55:positional")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", default=POINTS, help="omega:alpha:branch, comma-separated")
    p.add_argument("--log2-points", type=int, default=15)
    args = p.parse_args(argv)
    from derivations import ModelSpec
    from numerics.api import solve
    from numerics.stability import rs_stability

    print(f"{'omega':>5s} {'alpha':>5s} {'branch':>10s} {'Vhat':>10s} {'Vhat Hess.':>10s} {'gap':>14s} {'V':>8s} "
          f"{'V Hess.':>8s} {'rs_stability':>16s} {'rs_switching':>18s}")
    for item in args.points.split(","):
        omega, alpha, branch = item.split(":")
        spec = ModelSpec(omega=float(omega))
        fp = solve(spec, float(alpha), branch, "fast")
        st = rs_stability(fp, log2_points=args.log2_points)
        vh, vh_h = float(fp.hats.Vhat), st.hessian_vhat[0][0]
        V = spec.sigma ** 2 / (spec.lam + spec.sigma ** 2 * vh)
        V_h = spec.sigma ** 2 / (spec.lam + spec.sigma ** 2 * vh_h)
        print(f"{float(omega):5g} {float(alpha):5g} {branch:>10s} {vh:10.4g} {vh_h:10.4g} "
              f"{st.hessian_vhat_gap:6.3f} +- {st.hessian_vhat_gap_error:4.1g} {V:8.3f} {V_h:8.3f} "
              f"{st.smooth:7.4f} +- {st.smooth_error:5.1g} {st.switching:8.2e} +- {st.switching_error:6.1e}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

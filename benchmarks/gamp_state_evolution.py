"""Plain (undamped) GAMP's per-iteration overlaps against its state evolution, the saddle-point
iteration of numerics started from the same overlaps (docs/gamp.md, section 3).

    python benchmarks/gamp_state_evolution.py --d 2000,8000 --iterations 12 --out FILE.png [--json FILE.json]

For each ``d`` one instance (run 0 of seed 0) is iterated with damping 1 from the semantic start at
``alpha = 2``, the estimate held orthogonal to the positional directions (``run_gamp(...,
orthogonal_to=E)``: GAMP on the semantic branch's subspace ``m = 0``; unconstrained, the positional
direction's multiplier of the map at the semantic point, -2.5, makes plain GAMP's ``m``, noise of
order ``1/sqrt(d)``, grow until everything diverges); the state evolution starts from the overlaps and ``V`` of the largest instance's
first iterate inside the theory's domain ``theta^2 < q rho`` (iterate 0 is ``Q = Q*``, on its edge,
and the next ones lie near it) and applies ``numerics.api.state_evolution`` (fast rule). About 3 minutes.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d", default="2000,8000")
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--init", default="semantic")
    p.add_argument("--tokens", type=int, default=2)
    p.add_argument("--omega", type=float, default=0.3)
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--precision", default="fast")
    p.add_argument("--out", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from derivations import ModelSpec
    from numerics.api import GampError, run_gamp, state_evolution
    from numerics.matrix_overlaps import MatrixOverlaps
    from validation.gamp import invariants
    from validation.instances import draw_instance, initial_Q, overlaps

    spec = ModelSpec(tokens=args.tokens, omega=args.omega)
    runs = {}
    last = None
    for d in [int(x) for x in args.d.split(",")]:
        inst = draw_instance(spec, d, args.alpha, 0, 0, "float32" if d >= 8000 else "float64")
        try:
            res = run_gamp(spec, inst.X, inst.coef, initial_Q(inst, args.init), dampings=(1.0,),
                           maxiter=args.iterations, track=lambda Q: invariants(inst, Q),
                           orthogonal_to=inst.E if args.init == "semantic" else None, stall_window=args.iterations)
            history = res.history
        except GampError as exc:
            history = exc.history
        runs[d] = [{"q": h["q_eigenvalues_1"], "m": h["m_singular_values_1"], "theta": h["theta_singular_values_1"],
                    "V": float(np.linalg.eigvalsh(h["V"])[-1])} for h in history]
        first = overlaps(inst, initial_Q(inst, args.init))
        last = (inst, history)
        print(f"d={d}: {len(history)} iterations; iterate 0 q={float(first['q'][0, 0]):.4f}", flush=True)
    inst, history = last
    # the start of the state evolution: the largest instance's first iterate after 0 inside the theory's
    # domain (theta^2 < q rho: the instance's teacher norm |Q*|^2/d differs from 1 by O(1/sqrt(d)), and
    # the first iterates from Q = Q* lie on the domain's edge). The invariants are |m| and |theta|: the
    # map is even in their signs (docs/theory.md, sections 3.2 and 4.9)
    first_t = next(t for t in range(1, len(history))
                   if history[t]["theta_singular_values_1"] ** 2 < 0.999 * spec.rho * history[t]["q_eigenvalues_1"])
    h1 = history[first_t]
    start = MatrixOverlaps(spec.shape, q=h1["q_eigenvalues_1"], m=h1["m_singular_values_1"], V=h1["V"],
                           theta=h1["theta_singular_values_1"])
    se = state_evolution(spec, args.alpha, start, args.iterations - 1 - first_t, branch=args.init,
                         precision=args.precision)
    se_rows = [{"q": float(x.q[0, 0]), "m": abs(float(x.m[0, 0])), "theta": abs(float(x.theta[0, 0])),
                "V": float(x.V[0, 0])} for x in se]
    print(f"{'t':>3s} " + " ".join(f"{k + ' ' + src:>14s}" for k in ("q", "m", "theta", "V") for src in ("GAMP", "SE")))
    big = max(runs)
    for t in range(first_t, min(len(runs[big]), len(se_rows) + first_t)):
        g, s = runs[big][t], se_rows[t - first_t]
        print(f"{t:3d} " + " ".join(f"{g[k]:14.6g} {s[k]:14.6g}" for k in ("q", "m", "theta", "V")))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"gamp": {str(d): r for d, r in runs.items()}, "state_evolution": se_rows, "start": first_t,
                       "model": spec.to_dict(), "alpha": args.alpha, "init": args.init}, fh, indent=1)
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        keys = [k for k in ("q", "m", "theta", "V") if max(abs(x[k]) for r in runs.values() for x in r) > 1e-12]
        fig, axes = plt.subplots(1, len(keys), figsize=(3 * len(keys), 2.8))
        for ax, key in zip(axes, keys):
            for d, r in sorted(runs.items()):
                ax.plot(range(len(r)), [x[key] for x in r], "o-", ms=3, lw=0.8, label=f"GAMP d={d}")
            ax.plot(range(first_t, first_t + len(se_rows)), [x[key] for x in se_rows], "k--", lw=1.2, label="state evolution")
            ax.set_xlabel("iteration")
            ax.set_title(key if key not in ("m", "theta") else f"|{key}|", fontsize=9)
            ax.tick_params(labelsize=7)
        axes[0].legend(fontsize=6)
        held = ", Q held orthogonal to the positions" if args.init == "semantic" else ""
        fig.suptitle(f"undamped GAMP{held} vs state evolution, L={spec.tokens}, omega={spec.omega:g}, alpha={args.alpha:g}, "
                     f"{args.init} start", fontsize=9)
        fig.tight_layout()
        fig.savefig(args.out, dpi=130)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

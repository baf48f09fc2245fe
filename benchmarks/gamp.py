"""GAMP on the empirical risk against the theory it should follow (docs/gamp.md), one sub-command per
check, each ending on its table or figure:

    python benchmarks/gamp.py state-evolution --d 2000,8000 --iterations 40 --out FILE.png   (section 3)
    python benchmarks/gamp.py plateaus OUT.jsonl --omega 0.3 --alpha 1 --init positional --d 4000 --runs 4
                                                                                              (sections 4, 7)
    python benchmarks/gamp.py divergence [--points "0.3:2:semantic,..."]                    (section 5)
    python benchmarks/gamp.py stability-figure OUT.png CURVE.csv [CURVE.csv ...]            (section 5)
    python benchmarks/gamp.py finite-size run OUT.csv --sizes 1000:16,...; ... finite-size fit OUT.csv
                                                                                              (section 6)
    OPENBLAS_NUM_THREADS=1 python benchmarks/gamp.py vs-gd [--seeds 4]                      (section 6)

``python benchmarks/gamp.py SUB --help`` describes each.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

import numpy as np


# --------------------------------------------------------------------------- state-evolution

STATE_EVOLUTION_DOC = """Plain (undamped) GAMP's per-iteration overlaps against its state evolution, the saddle-point
iteration of numerics started from the same overlaps (docs/gamp.md, section 3).

    python benchmarks/gamp.py state-evolution --d 2000,8000 --iterations 12 --out FILE.png [--json FILE.json]

For each ``d`` one instance (run 0 of seed 0) is iterated with damping 1 from the semantic start at
``alpha = 2``, the estimate held orthogonal to the positional directions (``run_gamp(...,
orthogonal_to=E)``: GAMP on the semantic branch's subspace ``m = 0``; unconstrained, the positional
direction's multiplier of the map at the semantic point, -2.5, makes plain GAMP's ``m``, noise of
order ``1/sqrt(d)``, grow until everything diverges); the state evolution starts from the overlaps and ``V`` of the largest instance's
first iterate inside the theory's domain ``theta^2 < q rho`` (iterate 0 is ``Q = Q*``, on its edge,
and the next ones lie near it) and applies ``numerics.api.state_evolution`` (fast rule). About 3 minutes.
"""



def cmd_state_evolution(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py state-evolution", description=STATE_EVOLUTION_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    from numerics.api import GampError, MatrixOverlaps, run_gamp, state_evolution
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


# --------------------------------------------------------------------------- plateaus

PLATEAUS_DOC = """GAMP runs that may not converge, with the overlaps they wander over (docs/gamp.md, sections 4 and 7).

    python benchmarks/gamp.py plateaus OUT.jsonl --omega 0.3 --alpha 1 --init positional --d 4000 --runs 4
        [--dampings 0.5,0.25,0.125,0.0625 --stall-window 60 --maxiter 400]

One JSON line per run: converged or not, the damping schedule's failures, and over the last
``--stall-window`` iterations the mean and spread of each invariant and of the number of samples
whose prox switched per iteration (``validation.gamp``); converged runs give their fixed point.
"""

def cmd_plateaus(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py plateaus", description=PLATEAUS_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--omega", type=float, default=0.3)
    p.add_argument("--tokens", type=int, default=2)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--init", default="positional")
    p.add_argument("--d", type=int, default=4000)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--first-run", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dampings", default="0.5,0.25")
    p.add_argument("--stall-window", type=int, default=30)
    p.add_argument("--maxiter", type=int, default=400)
    args = p.parse_args(argv)
    from derivations import ModelSpec
    from validation.gamp import GampRunFailed, gamp_run

    spec = ModelSpec(omega=args.omega, tokens=args.tokens)
    dampings = [float(x) for x in args.dampings.split(",")]
    for k in range(args.first_run, args.first_run + args.runs):
        t0 = time.perf_counter()
        row = {"omega": args.omega, "tokens": args.tokens, "alpha": args.alpha, "init": args.init, "d": args.d,
               "run_index": k, "seed": args.seed, "dampings": dampings}
        try:
            rec = gamp_run(spec, args.d, args.alpha, args.init, args.seed, k, dtype="float32" if args.d >= 8000 else
                           "float64", dampings=dampings, stall_window=args.stall_window, maxiter=args.maxiter,
                           plateau_window=args.stall_window)
            row.update({key: v for key, v in rec.items() if key != "history"})
        except GampRunFailed as exc:
            row.update(converged=False, attempts=exc.error.attempts, plateau=exc.plateau,
                       iterations=len(exc.error.history))
        row["wall"] = time.perf_counter() - t0
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:600], flush=True)
    return 0


# --------------------------------------------------------------------------- divergence

DIVERGENCE_DOC = """The theory's ``Vhat`` against its Hessian form at fixed points (docs/gamp.md, section 5).

``Vhat`` (the Stein form the numerics solve, docs/theory.md, section 4.6) is ``-alpha E[sum_l
df_l/dw_l]`` with the jumps of ``f`` across the surfaces where the global prox switches; the Hessian
form keeps the smooth part alone, which is what a minimiser's local (leave-one-out) response, and so
GAMP's ``Lam``, sees. Their gap is the jumps' share; with it the variance ``V = sigma^2 / (lam +
sigma^2 Vhat)`` of each form. Also the replicon eigenvalues of :func:`numerics.api.rs_stability`.

    python benchmarks/gamp.py divergence [--points "0.3:2:semantic,0.3:1:positional,..."]
"""

DIVERGENCE_POINTS = ("0.3:2:semantic,0.3:1:positional,0.3:1.35:semantic,0.3:1.35:positional,0:0.7:semantic,0:0.7:positional,"
          "0:0.55:semantic,0:0.55:positional")


def cmd_divergence(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py divergence", description=DIVERGENCE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=DIVERGENCE_POINTS, help="omega:alpha:branch, comma-separated")
    p.add_argument("--log2-points", type=int, default=15)
    args = p.parse_args(argv)
    from derivations import ModelSpec
    from numerics.api import rs_stability, solve

    print(f"{'omega':>5s} {'alpha':>5s} {'branch':>10s} {'Vhat':>10s} {'Vhat Hess.':>10s} {'gap':>14s} {'V':>8s} "
          f"{'V Hess.':>8s} {'rs_stability':>16s} {'rs_switching':>18s}")
    for item in args.points.split(","):
        omega, alpha, branch = item.split(":")
        spec = ModelSpec(omega=float(omega))
        fp = solve(spec, float(alpha), branch, "fast")
        st = rs_stability(fp, log2_points=args.log2_points)
        vh, vh_h = float(fp.hats.Vhat), st.hessian_vhat[0][0]
        V = spec.sigma ** 2 / (spec.ridge_strength + spec.sigma ** 2 * vh)
        V_h = spec.sigma ** 2 / (spec.ridge_strength + spec.sigma ** 2 * vh_h)
        print(f"{float(omega):5g} {float(alpha):5g} {branch:>10s} {vh:10.4g} {vh_h:10.4g} "
              f"{st.hessian_vhat_gap:6.3f} +- {st.hessian_vhat_gap_error:4.1g} {V:8.3f} {V_h:8.3f} "
              f"{st.smooth:7.4f} +- {st.smooth_error:5.1g} {st.switching:8.2e} +- {st.switching_error:6.1e}",
              flush=True)
    return 0


# --------------------------------------------------------------------------- stability-figure

STABILITY_FIGURE_DOC = """The replicon eigenvalues along the branches of curve CSVs written by ``attnphase curve --stability``
(docs/gamp.md, section 5).

    python benchmarks/gamp.py stability-figure OUT.png CURVE.csv [CURVE.csv ...]

One row of panels per CSV: ``rs_stability`` (the smooth replicon eigenvalue; stable below 1) and
``rs_switching`` (the weight of the switching surfaces: the zero-temperature replicon eigenvalue
grows as ``beta`` times it), each with one standard error, per branch; and the alphas where
``rs_switching`` is above two standard errors, printed.
"""

BRANCH_COLOURS = {"semantic": "tab:blue", "positional": "tab:orange", "trivial": "tab:gray", "mixed": "tab:purple"}


def cmd_stability_figure(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py stability-figure", description=STABILITY_FIGURE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="the figure (.png)")
    p.add_argument("curves", nargs="+", help="CSVs of attnphase curve --stability")
    args = p.parse_args(argv)
    out, paths = args.out, args.curves
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tidyio import read_rows

    fig, axes = plt.subplots(len(paths), 2, figsize=(10, 3.2 * len(paths)), squeeze=False)
    for row_axes, path in zip(axes, paths):
        rows = [r for r in read_rows(path) if str(r.get("converged")) == "True" and str(r.get("rs_stability", "")) != ""]
        first = rows[0]
        for branch in BRANCH_COLOURS:
            pts = sorted((r for r in rows if r["branch"] == branch), key=lambda r: float(r["alpha"]))
            if not pts:
                continue
            a = [float(r["alpha"]) for r in pts]
            for ax, key in zip(row_axes, ("rs_stability", "rs_switching")):
                ax.errorbar(a, [float(r[key]) for r in pts], yerr=[float(r[key + "_error"]) for r in pts], fmt="o-",
                            ms=3, lw=1, color=BRANCH_COLOURS[branch], label=branch)
            unstable = [x for x, r in zip(a, pts) if float(r["rs_switching"]) > 2 * float(r["rs_switching_error"])]
            smooth = [x for x, r in zip(a, pts) if float(r["rs_stability"]) >= 1]
            print(f"{path}: {branch}: rs_switching > 2 standard errors at alpha = {', '.join(f'{x:g}' for x in unstable) or 'none'};"
                  f" rs_stability >= 1 at {', '.join(f'{x:g}' for x in smooth) or 'none'}")
        row_axes[0].axhline(1.0, color="k", ls="--", lw=1)
        row_axes[0].set_ylabel("rs_stability (smooth)")
        row_axes[1].set_ylabel("rs_switching")
        row_axes[1].axhline(0.0, color="k", lw=0.5)
        title = f"L={first.get('tokens', 2)}, r={first.get('rank', 1)}, omega={first.get('omega')}, {first.get('precision')}"
        for ax in row_axes:
            ax.set_xlabel("alpha")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")
    return 0


# --------------------------------------------------------------------------- finite-size

FINITE_SIZE_DOC = """GAMP on instances of growing d, and the extrapolation of its fixed points in 1/d (docs/gamp.md,
section 6).

    python benchmarks/gamp.py finite-size run OUT.csv --tokens 2 --alpha 2 --init semantic \
        --sizes 1000:16,2000:8,4000:4,8000:3,16000:2
    python benchmarks/gamp.py finite-size fit OUT.csv [--figure FILE.png]

``run`` appends one row per (d, run) to OUT.csv and skips the rows already there (float32 storage of
``X`` from d = 8000 on: ``4 L n d`` bytes, 4.1 GB at d = 16000, alpha = 2, two tokens); ``fit``
fits ``a + b/d`` to the per-d means (weights: their standard errors) for every invariant and
compares ``a`` with the theory's fixed point (``numerics.api.solve`` at fast precision).
Set OPENBLAS_NUM_THREADS=1 on a shared machine; the runs take about d^2 alpha L / 1e8 minutes each.
"""


FINITE_SIZE_FIELDS = ("q_eigenvalues_1", "m_singular_values_1", "theta_singular_values_1", "V_eigenvalues_1", "train_loss",
          "test_error")


def _finite_size_model(args):
    from derivations import ModelSpec

    return ModelSpec(tokens=args.tokens, omega=args.omega, rank=args.rank)


def _finite_size_run(args) -> int:
    from validation.gamp import gamp_run

    spec = _finite_size_model(args)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as fh:
            done = {(int(r["d"]), int(r["run_index"])) for r in csv.DictReader(fh)}
    for item in args.sizes.split(","):
        d, runs = (int(x) for x in item.split(":"))
        for k in range(runs):
            if (d, k) in done:
                continue
            t0 = time.perf_counter()
            rec = gamp_run(spec, d, args.alpha, args.init, seed=args.seed, run_index=k,
                           dtype="float32" if d >= 8000 else "float64")
            row = {"d": d, "run_index": k, "tokens": args.tokens, "rank": args.rank, "omega": args.omega,
                   "alpha": args.alpha, "init": args.init, "wall": time.perf_counter() - t0}
            row.update({key: rec[key] for key in ("converged", "iterations", "damping", "risk_gradient_norm",
                                                  "instance_stability", "switched_last") if key in rec})
            row.update({key: rec[key] for key in FINITE_SIZE_FIELDS})
            new = not os.path.exists(args.out)
            with open(args.out, "a", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(row))
                if new:
                    w.writeheader()
                w.writerow(row)
            print(json.dumps(row), flush=True)
    return 0


def weighted_line(x, y, s):
    """``a + b x`` by weighted least squares (weights ``1/s^2``); ``(a, a_error, b, chi2, dof)``, the error
    scaled by ``sqrt(chi2/dof)`` where that exceeds 1."""
    x, y, s = (np.asarray(v, dtype=float) for v in (x, y, s))
    W = 1.0 / s ** 2
    A = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(A.T @ (W[:, None] * A))
    coef = cov @ A.T @ (W * y)
    chi2 = float(np.sum(W * (y - A @ coef) ** 2))
    dof = len(x) - 2
    scale = max(1.0, math.sqrt(chi2 / dof)) if dof > 0 else 1.0
    return float(coef[0]), float(math.sqrt(cov[0, 0]) * scale), float(coef[1]), chi2, dof


def _finite_size_fit(args) -> int:
    from derivations import ModelSpec
    from numerics.api import solve

    with open(args.csv) as fh:
        rows = list(csv.DictReader(fh))
    first = rows[0]
    spec = ModelSpec(tokens=int(first["tokens"]), omega=float(first["omega"]), rank=int(first["rank"]))
    alpha, init = float(first["alpha"]), first["init"]
    fp = solve(spec, alpha, init, "fast")
    theory = dict(fp.values)
    theory_err = dict(fp.error)
    sizes = sorted({int(r["d"]) for r in rows})
    from validation.instances import run_streams

    for r in rows:
        d = int(r["d"])
        teacher = np.random.default_rng(run_streams(int(first.get("seed", 0) or 0), int(r["run_index"]))[0])
        Qs = teacher.standard_normal((d, spec.teacher_rank))
        r["teacher_norm"] = float(np.sum(Qs * Qs)) / (d * spec.teacher_rank) - 1.0
    out = {"model": spec.to_dict(), "alpha": alpha, "init": init, "sizes": sizes, "fields": {}}
    print(f"{'field':26s} " + " ".join(f"{'d=' + str(d):>22s}" for d in sizes) + f" {'a + b/d: a':>24s} {'theory':>20s}   z")
    fields = [f for f in FINITE_SIZE_FIELDS if not (init == "semantic" and f.startswith("m_"))]
    for field, controlled in [(f, c) for f in fields for c in (False, True)]:
        means, ses, counts = [], [], []
        used = [r for r in rows if r.get("converged", "True") == "True"]
        beta = 0.0
        if controlled:
            # the slope of the field on the control, pooled within each d
            xs = np.concatenate([np.array([r["teacher_norm"] for r in used if int(r["d"]) == d])
                                 - np.mean([r["teacher_norm"] for r in used if int(r["d"]) == d]) for d in sizes])
            ys = np.concatenate([np.array([float(r[field]) for r in used if int(r["d"]) == d])
                                 - np.mean([float(r[field]) for r in used if int(r["d"]) == d]) for d in sizes])
            beta = float(xs @ ys / (xs @ xs))
        values = {d: np.array([float(r[field]) - beta * r["teacher_norm"] for r in used if int(r["d"]) == d])
                  for d in sizes}
        # the runs' variance falls as 1/d (self-averaging quantities): its constant pooled over every
        # size, since a size of two or three runs states its own spread too unreliably to weigh the fit
        scale = sum(float(np.sum((v - v.mean()) ** 2)) * d for d, v in values.items()) / sum(
            len(v) - 1 for v in values.values())
        for d in sizes:
            v = values[d]
            means.append(v.mean())
            ses.append(math.sqrt(scale / (d * len(v))) if args.pooled else
                       (v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.nan))
            counts.append(len(v))
        ok = [i for i, s in enumerate(ses) if math.isfinite(s)]
        a, a_err, b, chi2, dof = weighted_line([1.0 / sizes[i] for i in ok], [means[i] for i in ok], [ses[i] for i in ok])
        t = theory.get(field, math.nan)
        te = theory_err.get(field, 0.0)
        z = (a - t) / math.hypot(a_err, te)
        key = field + (" (controlled)" if controlled else "")
        out["fields"][key] = {"control_slope": beta, "means": means, "standard_errors": ses, "runs": counts, "intercept": a,
                                "intercept_error": a_err, "slope": b, "chi2": chi2, "dof": dof, "theory": t,
                                "theory_error": te, "z": z}
        cells = " ".join(f"{m:12.6g} +- {s:7.1e}" for m, s in zip(means, ses))
        print(f"{key:26s} {cells} {a:12.6g} +- {a_err:8.1e} {t:12.6g} +- {te:5.0e} {z:+5.1f}  chi2/dof {chi2:.2f}/{dof}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        shown = [f for f in out["fields"] if f.endswith("(controlled)") and abs(out["fields"][f]["theory"]) > 0]
        fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 3.0))
        x = np.array([1.0 / d for d in sizes])
        for ax, field in zip(axes, shown):
            f = out["fields"][field]
            ax.errorbar(x, f["means"], yerr=f["standard_errors"], fmt="o", ms=3, label="GAMP, runs' mean")
            xs = np.linspace(0, x.max() * 1.05, 50)
            ax.plot(xs, f["intercept"] + f["slope"] * xs, "-", lw=1, label="a + b/d")
            ax.errorbar([0], [f["intercept"]], yerr=[f["intercept_error"]], fmt="s", ms=4, color="C1")
            ax.plot([0], [f["theory"]], "k*", ms=9, label="theory")
            ax.set_xlabel("1/d")
            ax.set_title(field.replace("_eigenvalues_1", "").replace("_singular_values_1", ""), fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0].legend(fontsize=6)
        fig.suptitle(f"L={spec.tokens} r={spec.rank} omega={spec.omega:g} alpha={alpha:g} {init} start", fontsize=9)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=130)
        print(f"wrote {args.figure}")
    return 0


def cmd_finite_size(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py finite-size", description=FINITE_SIZE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--tokens", type=int, default=2)
    r.add_argument("--rank", type=int, default=1)
    r.add_argument("--omega", type=float, default=0.3)
    r.add_argument("--alpha", type=float, default=2.0)
    r.add_argument("--init", default="semantic")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--sizes", default="1000:16,2000:8,4000:4,8000:3,16000:2")
    f = sub.add_parser("fit")
    f.add_argument("csv")
    f.add_argument("--figure", default=None)
    f.add_argument("--json", default=None)
    f.add_argument("--own-errors", dest="pooled", action="store_false",
                   help="weigh each size by its own runs' standard error (default: the pooled variance over d)")
    args = p.parse_args(argv)
    return _finite_size_run(args) if args.cmd == "run" else _finite_size_fit(args)


# --------------------------------------------------------------------------- vs-gd

VS_GD_DOC = """GAMP against gradient descent at d = 1000 (docs/gamp.md, section 6): the whole commands side by
side, and gradient descent on GAMP's own instances.

    OPENBLAS_NUM_THREADS=1 python benchmarks/gamp.py vs-gd [--d 1000 --alpha 2 --init semantic --seeds 4]

1. ``attnphase gamp --seeds S --json`` and ``attnphase simulate --seeds S --json`` (the paper's 5000 steps
   of lr 0.15), each timed whole (process start to exit), one after the other; their training losses
   (means and spreads over the seeds: different draws of the same law).
2. For each seed, the simulator's gradient descent on the instance GAMP ran on
   (``validation.instances.to_problem``): the two training losses and the distance of the estimates.
"""



def _timed_command(argv):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "attnphase.cli", *argv, "--no-progress", "--json"],
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout)


def cmd_vs_gd(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gamp.py vs-gd", description=VS_GD_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--init", default="semantic")
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    common = ["--d", str(args.d), "--alpha", str(args.alpha), "--init", args.init, "--seeds", str(args.seeds)]
    t_gamp, gamp = _timed_command(["gamp", *common])
    t_gd, gd = _timed_command(["simulate", *common])
    print(f"attnphase gamp     {args.seeds} runs: {t_gamp:7.1f} s whole command; train loss "
          f"{gamp['train_loss_mean']:.7f} +- {gamp['train_loss_std']:.1e} (runs' spread)")
    print(f"attnphase simulate {args.seeds} runs: {t_gd:7.1f} s whole command; train loss "
          f"{gd['train_loss_mean']:.7f} +- {gd['train_loss_std']:.1e} (runs' spread)")
    print(f"time ratio gamp / simulate: {t_gamp / t_gd:.3f}; difference of the mean train losses "
          f"{gamp['train_loss_mean'] - gd['train_loss_mean']:+.2e} against the runs' spread {gd['train_loss_std']:.1e}")
    from derivations import ModelSpec
    from validation.instances import draw_instance, to_problem
    from validation.simulate import train, train_loss

    spec = ModelSpec()
    for run in gamp["runs"]:
        inst = draw_instance(spec, args.d, args.alpha, run["seed"], run["run_index"])
        problem = to_problem(inst)
        t0 = time.perf_counter()
        res = train(problem, args.init)
        t = time.perf_counter() - t0
        loss = train_loss(res.Q, problem)
        print(f"run {run['run_index']}: same instance, GAMP {run['train_loss']:.9f} in {run['gamp_time']:.1f} s "
              f"({run['iterations']} iterations), GD {loss:.9f} in {t:.1f} s (5000 steps, final |grad|/sqrt(d) "
              f"{res.grad_norm:.1e}); relative difference {(loss - run['train_loss']) / run['train_loss']:+.1e}")
    return 0


COMMANDS = {"state-evolution": cmd_state_evolution, "plateaus": cmd_plateaus, "divergence": cmd_divergence,
            "stability-figure": cmd_stability_figure, "finite-size": cmd_finite_size, "vs-gd": cmd_vs_gd}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=COMMANDS)
    ap.add_argument("arguments", nargs=argparse.REMAINDER, help="those of the sub-command (SUB --help)")
    args = ap.parse_args(argv)
    return COMMANDS[args.what](args.arguments) or 0


if __name__ == "__main__":
    sys.exit(main())

"""GAMP on instances of growing d, and the extrapolation of its fixed points in 1/d (docs/gamp.md,
section 6).

    python benchmarks/gamp_finite_size.py run OUT.csv --tokens 2 --alpha 2 --init semantic \
        --sizes 1000:16,2000:8,4000:4,8000:3,16000:2
    python benchmarks/gamp_finite_size.py fit OUT.csv [--figure FILE.png]

``run`` appends one row per (d, run) to OUT.csv and skips the rows already there (float32 storage of
``X`` from d = 8000 on: ``4 L n d`` bytes, 4.1 GB at d = 16000, alpha = 2, two tokens); ``fit``
fits ``a + b/d`` to the per-d means (weights: their standard errors) for every invariant and
compares ``a`` with the theory's fixed point (``numerics.api.solve`` at fast precision).
Set OPENBLAS_NUM_THREADS=1 on a shared machine; the runs take about d^2 alpha L / 1e8 minutes each.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np

FIELDS = ("q_eigenvalues_1", "m_singular_values_1", "theta_singular_values_1", "V_eigenvalues_1", "train_loss",
          "test_error")


def model(args):
    from derivations import ModelSpec

    return ModelSpec(tokens=args.tokens, omega=args.omega, rank=args.rank)


def cmd_run(args) -> int:
    from validation.gamp import gamp_run

    spec = model(args)
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
            row.update({key: rec[key] for key in FIELDS})
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


def cmd_fit(args) -> int:
    from derivations import ModelSpec
    from numerics.api import as_matrices, solve

    with open(args.csv) as fh:
        rows = list(csv.DictReader(fh))
    first = rows[0]
    spec = ModelSpec(tokens=int(first["tokens"]), omega=float(first["omega"]), rank=int(first["rank"]))
    alpha, init = float(first["alpha"]), first["init"]
    fp = as_matrices(solve(spec, alpha, init, "fast"))
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
    fields = [f for f in FIELDS if not (init == "semantic" and f.startswith("m_"))]
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    return cmd_run(args) if args.cmd == "run" else cmd_fit(args)


if __name__ == "__main__":
    sys.exit(main())

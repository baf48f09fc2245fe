"""Is there a positional fixed point at small ``lam``? (docs/studies/positional_small_lam.md)

Three checks on the positional branch (``theta = 0``) of the default model with a small ridge:

1. ``follow``: continuation in ``lam`` at fixed ``alpha``, from ``lam = 0.01`` down on a
   geometric grid (log-linear predictor in ``q, m, V``; where the solve from the prediction
   fails, again from the last point found), each failed step halved until it is
   2^bisections times shorter than the grid's (the end's bracket);
   where the Anderson iteration stalls or collapses, a root finder on ``x - F(x)`` looks
   again (``--no-root``: the iteration alone). The end is classified
   (``numerics.branches.follow.classify_end``) from the last two points found: ``m`` and the
   eigenvalues of ``I - DF``.
2. ``newton``: Newton's method on ``x - F(x)`` over ``(log q, m, log V)`` with a
   finite-difference Jacobian and a backtracking line search on the residual norm, from a
   grid of starts (including gradient descent's ``q, m`` with ``V`` from 14 to 300). Newton
   converges to repelling fixed points too, which the Anderson iteration may miss.
3. ``residual``: the map's relative residual at given ``(q, m)`` (gradient descent's) over a
   grid of ``V``: a fixed point at that ``(q, m)`` would make it vanish for some ``V``.

Usage::

    python studies/positional_small_lam.py follow --alpha 1.0 [--omega 0.3] [--precision draft]
    python studies/positional_small_lam.py newton --lam 0.001 --alpha 1.0
    python studies/positional_small_lam.py residual --lam 0.001 --alpha 1.0 --q 0.107 --m 0.239

Each prints one line per solve or start and a summary; the draft rule's map is smooth to about
1e-6 relative at ``lam = 0.01``, so Newton stops at a relative residual of 1e-6; at small ``lam`` it
is not (docs/studies/positional_small_lam.md: use ``--precision fast`` there).
"""
from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np

from derivations import ModelSpec
from numerics.model.bound import bind
from numerics.branches.follow import classify_end
from numerics.fixed_points.errors import BranchLost
from numerics.fixed_points.lines import DEFAULT_START, line_map, map_jacobian_eigenvalues, solve_with_rule
from numerics.overlaps import Overlaps
from numerics.precision import PRECISIONS


def follow(args):
    prec = PRECISIONS[args.precision]
    lams = list(np.geomspace(0.01, args.lam_min, args.n))
    trail = []

    def solve(lam, start):
        model = bind(ModelSpec(lam=lam, omega=args.omega, sigma=args.sigma))
        return solve_with_rule(model, args.alpha, "positional", prec.rule, start, prec.coarse_tol or prec.tol,
                               maxiter=150, accept_tol=prec.residual_tol, lost_below=1e-3, newton=not args.no_root)

    def predict(lam):
        if len(trail) == 1:
            x = trail[-1][1]
        else:
            (l0, x0), (l1, x1) = trail[-2], trail[-1]
            t = (np.log(lam) - np.log(l1)) / (np.log(l1) - np.log(l0))
            x = np.exp(np.log(x1) + t * (np.log(x1) - np.log(x0)))
        return Overlaps(q=x[0], m=x[1], V=x[2], theta=0.0)

    def found(lam, start):
        t0 = time.perf_counter()
        try:
            sol = solve(lam, start)
        except BranchLost as exc:
            print(f"lam = {lam:.6f}  collapsed onto m = 0 ({exc})  ({time.perf_counter() - t0:.0f} s)", flush=True)
            return False, None
        o = sol.overlaps
        ok = sol.converged and abs(o.m) > 1e-3
        print(f"lam = {lam:.6f}  converged={sol.converged}  residual={sol.residual8:.1e}  q={o.q:.5f}  m={o.m:.5f}  "
              f"V={o.V:.3f}  {'on the branch' if ok else 'OFF the branch'}  ({sol.evaluations} evaluations, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
        return ok, np.array([o.q, o.m, o.V])

    ok, x = found(lams[0], DEFAULT_START["positional"])
    if not ok:
        raise SystemExit(f"no positional point at lam = {lams[0]:g}")
    trail.append((lams[0], x))
    # steps in log lam: the grid's, halved after each failure (a step from far may land in
    # another fixed point's basin), doubled again after a success; the branch ends
    # where a step shorter than the grid's / 2^bisections fails
    full = np.log(lams[0] / lams[1]) if len(lams) > 1 else 0.0
    step, shortest = full, full / 2 ** args.bisections
    lo = None
    while trail[-1][0] > lams[-1] * (1 + 1e-12):
        lam = max(lams[-1], trail[-1][0] * np.exp(-step))
        ok, x = found(lam, predict(lam))
        if not ok:  # as the continuation of numerics.branches.follow does: from the last point itself
            ok, x = found(lam, predict(trail[-1][0]))
        if ok:
            trail.append((lam, x))
            step = min(full, 2 * step)
            continue
        if step <= shortest * (1 + 1e-9):
            lo = lam
            break
        step /= 2
    if lo is None:
        print(f"alpha = {args.alpha}: the positional branch exists down to lam = {lams[-1]:g}")
        return
    hi = trail[-1][0]
    last = sorted(trail[-2:], key=lambda p: -p[0])
    eig = []
    for lam, x in last:
        model = bind(ModelSpec(lam=lam, omega=args.omega, sigma=args.sigma))
        e = map_jacobian_eigenvalues(model, args.alpha, "positional", prec.rule,
                                     Overlaps(q=x[0], m=x[1], V=x[2], theta=0.0))
        eig.append(e)
        print(f"lam = {lam:.6g}: eigenvalues of I - DF {np.round(e, 4)}; of the map's Jacobian DF "
              f"{np.round(1.0 - e, 4)} (spectral radius {np.max(np.abs(1.0 - e)):.3f})")
    kind, evidence = classify_end([p[0] for p in last], [p[1][1] for p in last], [abs(e[0]) for e in eig], lo,
                                  hi - lo)
    print(f"alpha = {args.alpha}, omega = {args.omega}: the positional branch ends between lam = {lo:.6g} and "
          f"{hi:.6g} (m = {trail[-1][1][1]:.4f} at the last point found): {kind}")
    print(json.dumps(evidence))


def _map(args):
    spec = ModelSpec(lam=args.lam, omega=args.omega, sigma=args.sigma)
    return line_map(bind(spec), args.alpha, "positional", PRECISIONS[args.precision].rule)


def newton(args):
    F = _map(args)

    def residual(z):  # z = (log q, m, log V)
        x = np.array([np.exp(z[0]), z[1], np.exp(z[2])])
        y = F(x)
        return np.array([np.log(y[0] / x[0]) if y[0] > 0 else np.inf, y[1] - x[1],
                         np.log(y[2] / x[2]) if y[2] > 0 else np.inf]), x, y

    starts = [(q, m, V) for q, m, V in itertools.product((0.05, 0.15), (0.1, 0.25, 0.4), (14.0, 60.0, 200.0))]
    starts += [(args.gd_q, args.gd_m, V) for V in (14.0, 30.0, 60.0, 100.0, 150.0, 300.0)]
    summary = []
    for q, m, V in starts:
        z = np.array([np.log(q), m, np.log(V)])
        t0 = time.perf_counter()
        outcome = "no convergence in 30 steps"
        try:
            g, x, y = residual(z)
            for _ in range(30):
                if np.max(np.abs(g)) < 1e-6:
                    outcome = "converged"
                    break
                J = np.zeros((3, 3))
                for j in range(3):
                    h = 1e-4 if j != 1 else 1e-4 * max(abs(z[1]), 1e-2)
                    e = np.zeros(3)
                    e[j] = h
                    J[:, j] = (residual(z + e)[0] - g) / h
                if not np.isfinite(J).all():
                    outcome = "no Jacobian (the map is not finite near the iterate)"
                    break
                step = -np.linalg.lstsq(J, g, rcond=None)[0]
                t = 1.0
                while t > 1e-3:
                    try:
                        g_new, x_new, y_new = residual(z + t * step)
                        if np.all(np.isfinite(g_new)) and np.linalg.norm(g_new) < np.linalg.norm(g):
                            break
                    except FloatingPointError:
                        pass
                    t *= 0.5
                else:
                    outcome = "line search failed"
                    break
                z, g, x, y = z + t * step, g_new, x_new, y_new
        except FloatingPointError as exc:
            outcome = f"map not evaluable ({exc})"
        x = np.array([np.exp(z[0]), z[1], np.exp(z[2])])
        kind = "positional" if abs(x[1]) > 1e-3 else "trivial"
        print(f"start q={q:<5g} m={m:<5g} V={V:<6g} -> {outcome}: q={x[0]:.5f} m={x[1]:+.6f} V={x[2]:.3f} "
              f"(|residual| {np.max(np.abs(g)):.1e}; {kind if outcome == 'converged' else '-'}) "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        summary.append((outcome, kind))
    n_pos = sum(1 for o, k in summary if o == "converged" and k == "positional")
    n_triv = sum(1 for o, k in summary if o == "converged" and k == "trivial")
    print(f"lam = {args.lam}, alpha = {args.alpha}: {len(summary)} starts; converged to a positional fixed point "
          f"{n_pos}, to the trivial point {n_triv}, not converged {len(summary) - n_pos - n_triv}")


def residual_scan(args):
    F = _map(args)
    best = None
    for V in np.geomspace(5.0, 500.0, 21):
        x = np.array([args.q, args.m, V])
        y = F(x)
        rel = np.abs(y - x) / np.abs(x)
        print(f"V = {V:8.3f}: F = (q {y[0]:.5f}, m {y[1]:+.5f}, V {y[2]:9.3f}); relative residual q {rel[0]:.3f}, "
              f"m {rel[1]:.3f}, V {rel[2]:.3f}", flush=True)
        if best is None or rel.max() < best[0]:
            best = (rel.max(), V)
    print(f"lam = {args.lam}, alpha = {args.alpha}, (q, m) = ({args.q}, {args.m}): smallest largest relative residual "
          f"{best[0]:.3f}, at V = {best[1]:.3g}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("follow", "newton", "residual"))
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--omega", type=float, default=0.3)
    p.add_argument("--sigma", type=float, default=0.5)
    p.add_argument("--lam", type=float, default=0.001)
    p.add_argument("--lam-min", type=float, default=0.001)
    p.add_argument("--n", type=int, default=11, help="lam grid points from 0.01 to --lam-min (follow)")
    p.add_argument("--bisections", type=int, default=4)
    p.add_argument("--no-root", action="store_true",
                   help="follow: the Anderson iteration alone, without the root finder where it fails")
    p.add_argument("--precision", default="draft", choices=tuple(PRECISIONS))
    p.add_argument("--q", type=float, default=0.107, help="q at which to scan V (residual)")
    p.add_argument("--m", type=float, default=0.239, help="m at which to scan V (residual)")
    p.add_argument("--gd-q", type=float, default=0.107, help="gradient descent's q, a Newton start")
    p.add_argument("--gd-m", type=float, default=0.239, help="gradient descent's m, a Newton start")
    args = p.parse_args()
    {"follow": follow, "newton": newton, "residual": residual_scan}[args.what](args)


if __name__ == "__main__":
    main()

"""Gradient descent's end points against the theory's training loss ``F``, per branch.

Each run (one seed, one start): 5000 steps of full-batch gradient descent (learning rate 0.15,
the paper's), in float64, then an L-BFGS finish and, where that stalls, Newton steps with the
finite-difference Hessian, to a stationary point (``|dR/dQ| <= --gtol``, the raw Euclidean norm
of the gradient of the summed risk ``R``); at ``d <= --hessian-max-d`` the smallest eigenvalues of
that Hessian (of ``R``, so on the scale of ``lam``) at the stationary point. Objective: ``R(Q)/d``
with the ridge term, the simulator's ``train_loss``, which docs/theory.md, section 1.6 identifies
with ``F`` at a fixed point.

Starts: ``semantic``, ``positional``, ``random`` (the simulator's), ``random1``.. (further
``0.1 N(0, I_d)`` draws), ``theory-positional`` / ``theory-semantic`` (a student with the
theory's ``m``, ``theta``, ``q`` on that branch, see :func:`theory_overlap_Q`), ``from0.3-semantic`` / ``from0.3-positional`` (gradient descent's end
point at ``omega = 0.3`` on the same teacher and inputs, continued at the run's ``omega``).

    python studies/omega_zero_minima.py runs --omega 0 --alpha 0.55 --ds 250,500,1000,2000 \\
        --seeds 6,4,3,2 --starts semantic,positional --out OUT/runs
    python studies/omega_zero_minima.py analyse --runs OUT/runs [--out OUT/tables.md]
    python studies/omega_zero_minima.py profile --omega 0 --alpha 0.7 --branch positional \\
        --values 0.137,0.16,0.19,0.22 --ds 500,1000 --seeds 4,4 --out OUT/profiles
    python studies/omega_zero_minima.py profile-table --profiles OUT/profiles
    python studies/omega_zero_minima.py check-zero --omega 0 --d 250   # the control variate's mean

``runs`` and ``profile`` keep one checked JSON per run in their folder (``tidyio.KeyedStore``) and skip
the runs already there.
"""
import argparse
import logging
import math
import sys
import time

import numpy as np
import scipy.optimize
import torch

from derivations import ModelSpec
from numerics.api import BranchNotFound, solve
from validation.simulate import (initial_Q, make_problem, risk_and_grad, summary_statistics, train)
from tidyio import KeyedStore
from validation.statistics import fit_finite_size

log = logging.getLogger("omega_zero_minima")
STEPS = 5000
FROM_OMEGA = 0.3


def risk64(Q: torch.Tensor, problem) -> tuple:
    R, g = risk_and_grad(Q, problem.train, problem.spec.ridge_strength, problem.spec.attention)
    return float(R), g


def zero_loss(problem) -> float:
    """``R(0)/d`` on the run's training set: the control variate of :func:`expected_zero_loss`."""
    R, _ = risk64(torch.zeros(problem.d, dtype=torch.float64), problem)
    return R / problem.d


def expected_zero_loss(spec: ModelSpec, d: int, alpha: float, samples: int = 4_000_000, seed: int = 7,
                       chunk: int = 500_000) -> tuple:
    """``E[R(0)/d]`` over teachers and training sets of size ``n = round(alpha d)``, with its
    Monte Carlo standard error, for two tokens.

    At ``Q = 0`` the student averages the tokens, and ``T`` is row-stochastic, so
    ``y_l - yhat_l = (T_l1 - 1/2)(z_1 - z_2)`` and a sample's loss is ``W |z_1 - z_2|^2/(2d)``
    with ``W = sum_l (T_l1 - 1/2)^2``, a function of ``h*`` only. Given ``Q*``,
    ``h* ~ N(0, s I_2)`` with ``s = sigma^2 |Q*|^2/d``, and ``|z_1 - z_2|^2`` is
    ``(h*_1 - h*_2)^2 sigma^2/s`` (along ``Q*``) plus an independent part of mean
    ``2 sigma^2 (d - 1)``; ``|Q*|^2 ~ chi^2_d``. Sampled over ``(|Q*|^2, h*)`` only.
    """
    if spec.L != 2:
        raise ValueError("expected_zero_loss: two tokens only")
    rng = np.random.default_rng(seed)
    s2 = spec.sigma ** 2
    A = np.asarray(spec.A, float)
    total, total_sq, count = 0.0, 0.0, 0
    while count < samples:
        k = min(chunk, samples - count)
        s = s2 * rng.chisquare(d, size=k) / d
        h = rng.standard_normal((k, 2)) * np.sqrt(s)[:, None]
        logits = h[:, :, None] * h[:, None, :]
        S = np.exp(logits - logits.max(axis=2, keepdims=True))
        S /= S.sum(axis=2, keepdims=True)
        T = (1.0 - spec.omega) * S + spec.omega * A
        W = ((T[:, :, 0] - 0.5) ** 2).sum(axis=1)
        loss = W * ((h[:, 0] - h[:, 1]) ** 2 * s2 / s + 2 * s2 * (d - 1)) / (2 * d)
        total += loss.sum()
        total_sq += (loss ** 2).sum()
        count += k
    mean = total / count
    sd = math.sqrt(max(total_sq / count - mean ** 2, 0.0))
    factor = round(alpha * d) / d
    return factor * mean, factor * sd / math.sqrt(count)


def hessian(Q: torch.Tensor, problem, eps: float = 1e-5) -> np.ndarray:
    """Central differences of the analytic gradient, symmetrised (error ~ eps^2 |R'''|)."""
    d = Q.numel()
    H = np.empty((d, d))
    with torch.inference_mode():
        for j in range(d):
            Qp = Q.clone()
            Qp[j] += eps
            Qm = Q.clone()
            Qm[j] -= eps
            H[:, j] = ((risk64(Qp, problem)[1] - risk64(Qm, problem)[1]) / (2 * eps)).numpy()
    return 0.5 * (H + H.T)


def make_stationary(Q: torch.Tensor, problem, gtol: float, hessian_max_d: int) -> dict:
    """L-BFGS from ``Q``, then Newton steps (Hessian by differences) while ``|g| > gtol``."""
    def fg(x):
        R, g = risk64(torch.from_numpy(x), problem)
        return R, g.numpy().astype(float)

    res = scipy.optimize.minimize(fg, Q.numpy().copy(), jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=20000, maxcor=30, gtol=gtol / 100, ftol=0.0))
    x = res.x
    R, g = fg(x)
    newton = 0
    H = None
    d = problem.d
    while np.linalg.norm(g) > gtol and d <= hessian_max_d and newton < 8:
        H = hessian(torch.from_numpy(x), problem)
        x = x - np.linalg.solve(H, g)
        R, g = fg(x)
        newton += 1
    out = dict(lbfgs_iterations=int(res.nit), lbfgs_message=str(res.message), newton_steps=newton,
               grad_norm=float(np.linalg.norm(g)), R_over_d=R / d, Q=torch.from_numpy(x))
    if d <= hessian_max_d:
        H = hessian(out["Q"], problem)
        ev = np.linalg.eigvalsh(H)
        out["hessian_lowest"] = ev[:5].tolist()
        out["hessian_highest"] = float(ev[-1])
    return out


_THEORY = {}


def theory_point(spec: ModelSpec, alpha: float, branch: str):
    key = (spec, alpha, branch)
    if key not in _THEORY:
        try:
            _THEORY[key] = solve(spec, alpha, branch, "fast")
        except BranchNotFound:
            _THEORY[key] = None
    return _THEORY[key]


def theory_overlap_Q(problem, branch: str, seed: int, run_index: int) -> torch.Tensor:
    """A student with exactly the theory's ``m``, ``theta`` and ``q`` on this branch: its parts
    along ``mu_1``, along ``Q*`` (orthogonal to ``mu_1``) and along a random direction orthogonal
    to both."""
    p = theory_point(problem.spec, problem.alpha, branch)
    if p is None:
        raise ValueError(f"start: no theory {branch} branch at alpha = {problem.alpha}")
    d, s2 = problem.d, problem.spec.sigma ** 2
    Qs = problem.Qstar.to(torch.float64)
    u1 = torch.full((d,), 1.0 / math.sqrt(d), dtype=torch.float64)
    a2 = Qs - (Qs @ u1) * u1
    u2 = a2 / a2.norm()
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, run_index, 99]).generate_state(1)[0]))
    z = torch.randn(d, generator=g, dtype=torch.float64)
    z = z - (z @ u1) * u1 - (z @ u2) * u2
    u3 = z / z.norm()
    c1 = p.overlaps.m * math.sqrt(d)
    c2 = (d * p.overlaps.theta / s2 - c1 * float(Qs @ u1)) / float(a2.norm())
    rest = d * p.overlaps.q / s2 - c1 ** 2 - c2 ** 2
    if rest < 0:
        raise ValueError(f"start: the theory's overlaps are not those of a vector at d = {d}")
    return c1 * u1 + c2 * u2 + math.sqrt(rest) * u3


def constrained_minimum(Q: torch.Tensor, problem, u: torch.Tensor, c: float, gtol: float) -> dict:
    """The minimum of ``R`` over students with ``Q . u = c`` (``u`` a unit vector), by L-BFGS on
    the orthogonal part, started from ``Q``'s orthogonal part."""
    u = u.to(torch.float64)

    def project(x):
        return x - (x @ u) * u

    def fg(x):
        Qc = c * u + project(torch.from_numpy(x))
        R, g = risk64(Qc, problem)
        return R, project(g).numpy().astype(float)

    res = scipy.optimize.minimize(fg, project(Q.to(torch.float64)).numpy(), jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=20000, maxcor=30, gtol=gtol / 100, ftol=0.0))
    R, g = fg(res.x)
    Qc = c * u + project(torch.from_numpy(res.x))
    return dict(R_over_d=R / problem.d, grad_norm=float(np.linalg.norm(g)), Q=Qc)


def start_Q(problem, start: str, seed: int, run_index: int) -> torch.Tensor:
    if start in ("semantic", "positional", "random"):
        return initial_Q(problem, start)
    if start.startswith("random"):
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, run_index, int(start[6:])]).generate_state(1)[0]))
        return 0.1 * torch.randn(problem.d, generator=g, dtype=torch.float64)
    if start.startswith("theory-"):
        return theory_overlap_Q(problem, start[7:], seed, run_index)
    if start.startswith("from"):
        omega_from, base = start[4:].split("-")
        spec_from = ModelSpec(omega=float(omega_from), sigma=problem.spec.sigma, lam=problem.spec.lam)
        other = make_problem(spec_from, problem.d, problem.alpha, seed, run_index, n_test=1, dtype=torch.float64)
        return train(other, base, steps=STEPS, record_points=1).Q
    raise ValueError(f"start: unknown start {start!r}")


def one_run(spec: ModelSpec, d: int, alpha: float, start: str, seed: int, run_index: int, gtol: float,
            hessian_max_d: int) -> dict:
    t0 = time.process_time()
    problem = make_problem(spec, d, alpha, seed, run_index, n_test=2000, dtype=torch.float64)
    Q0 = start_Q(problem, start, seed, run_index)
    start_R, _ = risk64(Q0, problem)
    Z = zero_loss(problem)
    tr = train(problem, Q0=Q0, steps=STEPS, record_points=1)
    gd_R, gd_g = risk64(tr.Q, problem)
    st = make_stationary(tr.Q, problem, gtol, hessian_max_d)
    Qs = st.pop("Q")
    stats_gd = summary_statistics(tr.Q, problem)
    stats_st = summary_statistics(Qs, problem)
    keep = ("m", "theta_over_sigma2", "q")
    return dict(omega=spec.omega, alpha=alpha, d=d, start=start, seed=seed, run_index=run_index,
                zero_train_loss=Z, start_train_loss=start_R / d, gd_train_loss=gd_R / d,
                gd_grad_norm=float(gd_g.norm()),
                **{f"gd_{k}": stats_gd[k] for k in keep},
                stat_train_loss=st.pop("R_over_d"), **{f"stat_{k}": stats_st[k] for k in keep},
                stat_move=float((Qs - tr.Q).norm()) / math.sqrt(d), **st,
                cpu_seconds=time.process_time() - t0)


def run_store(folder: str) -> KeyedStore:
    """The runs (``runs``) of a folder: one checked JSON per run, keyed by omega, alpha, d, start, seed
    and run index."""
    return KeyedStore(folder, prefix="run_")


def profile_store(folder: str) -> KeyedStore:
    """The profiles (``profile``) of a folder, keyed by omega, alpha, d, branch, seed and run index."""
    return KeyedStore(folder, prefix="profile_")


def sizes(args) -> list:
    """``[(d, runs), ...]`` from ``--ds`` and ``--seeds``."""
    ds = [int(x) for x in args.ds.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    if len(seeds) != len(ds):
        raise SystemExit("--seeds: one count per d")
    return list(zip(ds, seeds))


def cmd_runs(args) -> None:
    spec = ModelSpec(omega=args.omega)
    store = run_store(args.out)
    for d, ns in sizes(args):
        for k in range(ns):
            for start in args.starts.split(","):
                key = dict(omega=args.omega, alpha=args.alpha, d=d, start=start, seed=args.seed, run_index=k)
                if key in store:
                    continue
                r = one_run(spec, d, args.alpha, start, args.seed, k, args.gtol, args.hessian_max_d)
                store.put(key, r)
                log.info("omega %g alpha %g d %d %s run %d: F_gd %.7f F_stat %.7f |g| %.1e m %.4f th %.4f "
                         "hess_min %s (%.0f s)", args.omega, args.alpha, d, start, k, r["gd_train_loss"],
                         r["stat_train_loss"], r["grad_norm"], r["stat_m"], r["stat_theta_over_sigma2"],
                         r.get("hessian_lowest", [None])[0], r["cpu_seconds"])


def branch_of(r: dict) -> str:
    """The branch a stationary point sits on, by its overlaps (positional: m above theta/sigma^2)."""
    return "positional" if r["stat_m"] > r["stat_theta_over_sigma2"] else "semantic"


def theory_F(omega: float, alpha: float, branch: str):
    return theory_point(ModelSpec(omega=omega), alpha, branch)


def mean_sem(v):
    v = np.asarray(v, float)
    return float(v.mean()), (float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan"))


def run_zero_loss(r: dict) -> float:
    if "zero_train_loss" in r:
        return r["zero_train_loss"]
    problem = make_problem(ModelSpec(omega=r["omega"]), r["d"], r["alpha"], r["seed"], r["run_index"], n_test=1,
                           dtype=torch.float64)
    return zero_loss(problem)


def controlled(rs: list, expected: dict) -> dict:
    """Per ``d``: the stationary objective with the control variate ``R(0)/d`` removed.

    ``F - beta (Z - E[Z])``, with ``beta`` the slope of ``F`` on ``Z`` pooled over the runs of all
    ``d`` (each ``d`` centred on its own means). ``E[Z]`` is exact up to its Monte Carlo error, so
    the corrected mean has the expectation of ``F``; the scatter that ``F`` shares with the training
    set's own difficulty (``Z``) is gone from its error bar."""
    by_d = {}
    for r in rs:
        by_d.setdefault(r["d"], []).append(r)
    xs, ys = [], []
    for d, rd in by_d.items():
        F = np.array([r["stat_train_loss"] for r in rd])
        Z = np.array([r["zero"] for r in rd])
        xs.extend(Z - Z.mean())
        ys.extend(F - F.mean())
    xs, ys = np.array(xs), np.array(ys)
    beta = float(xs @ ys / (xs @ xs))
    rho = float(np.corrcoef(xs, ys)[0, 1])
    out = {}
    for d, rd in by_d.items():
        ez, ez_se = expected[d]
        v = np.array([r["stat_train_loss"] - beta * (r["zero"] - ez) for r in rd])
        m, se = mean_sem(v)
        out[d] = (m, math.hypot(se, beta * ez_se) if math.isfinite(se) else se)
    return {"beta": beta, "rho": rho, "per_d": out}


def cmd_analyse(args) -> None:
    runs = list(run_store(args.runs).values())
    for r in runs:
        r["zero"] = run_zero_loss(r)
    expected = {}
    for r in runs:
        key = (r["omega"], r["alpha"], r["d"])
        if key not in expected:
            expected[key] = expected_zero_loss(ModelSpec(omega=r["omega"]), r["d"], r["alpha"])
    lines = []
    groups = {}
    for r in runs:
        groups.setdefault((r["omega"], r["alpha"], r["start"]), []).append(r)
    lines.append("| omega | alpha | start | d | runs | F, GD 5000 steps | F, stationary | F, stationary, "
                 "controlled | R(0)/d - E | m | theta/sigma^2 | q | max abs(g) | lowest Hessian eigenvalue |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    fits = []
    for (omega, alpha, start), rs in sorted(groups.items()):
        ds = sorted({r["d"] for r in rs})
        cv = controlled(rs, {d: expected[(omega, alpha, d)] for d in ds}) if len(rs) > 3 else None
        per_d = []
        for d in ds:
            rd = [r for r in rs if r["d"] == d]
            gd = mean_sem([r["gd_train_loss"] for r in rd])
            st = mean_sem([r["stat_train_loss"] for r in rd])
            c = cv["per_d"][d] if cv else (float("nan"), float("nan"))
            z = mean_sem([r["zero"] - expected[(omega, alpha, d)][0] for r in rd])
            m = mean_sem([r["stat_m"] for r in rd])
            th = mean_sem([r["stat_theta_over_sigma2"] for r in rd])
            q = mean_sem([r["stat_q"] for r in rd])
            hl = [r["hessian_lowest"][0] for r in rd if "hessian_lowest" in r]
            gmax = max(r["grad_norm"] for r in rd)
            lines.append(f"| {omega:g} | {alpha:g} | {start} | {d} | {len(rd)} | {gd[0]:.7f} ± {gd[1]:.1e} "
                         f"| {st[0]:.7f} ± {st[1]:.1e} | {c[0]:.7f} ± {c[1]:.1e} | {z[0]:+.1e} ± {z[1]:.1e} "
                         f"| {m[0]:.4f} ± {m[1]:.4f} | {th[0]:.4f} ± {th[1]:.4f} "
                         f"| {q[0]:.5f} ± {q[1]:.5f} | {gmax:.1e} | {min(hl) if hl else float('nan'):.2e} |")
            per_d.append((d, st, c))
        branches = {branch_of(r) for r in rs}
        if len(per_d) >= 3 and all(x[1][1] > 0 for x in per_d) and len(branches) == 1:
            branch = branches.pop()
            p = theory_F(omega, alpha, branch)
            for label, k in (("raw", 1), ("controlled", 2)):
                fit = fit_finite_size([x[0] for x in per_d], [x[k][0] for x in per_d], [x[k][1] for x in per_d])
                fits.append((omega, alpha, start, branch, label, fit, p, cv))
    lines.append("")
    lines.append("| omega | alpha | start | branch | estimate | F(d -> inf), stationary (a ± a_se_scaled) | slope b "
                 "| chi2/dof | beta (corr) | theory F ± error | z |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for omega, alpha, start, branch, label, fit, p, cv in fits:
        if p is None:
            tF, te, z = float("nan"), float("nan"), float("nan")
        else:
            tF, te = p.train_loss, p.error.get("train_loss", 0.0)
            z = (fit["a"] - tF) / math.hypot(fit["a_se_scaled"], te if math.isfinite(te) else 0.0)
        bc = f"{cv['beta']:.3f} ({cv['rho']:.2f})" if label == "controlled" else "-"
        lines.append(f"| {omega:g} | {alpha:g} | {start} | {branch} | {label} | {fit['a']:.7f} ± {fit['a_se_scaled']:.1e} "
                     f"| {fit['b']:+.4f} | {fit['chi2_dof']:.2f} | {bc} | {tF:.7f} ± {te:.1e} | {z:+.1f} |")
    # the two starts on the same data: F_semantic - F_positional per run, against the theory's
    lines.append("")
    lines.append("| omega | alpha | d | pairs | F_sem - F_pos, GD 5000 steps | F_sem - F_pos, stationary | theory |")
    lines.append("|---|---|---|---|---|---|---|")
    pairs = {}
    for r in runs:
        if r["start"] in ("semantic", "positional"):
            pairs.setdefault((r["omega"], r["alpha"], r["d"], r["run_index"]), {})[r["start"]] = r
    for omega, alpha, d in sorted({k[:3] for k in pairs}):
        ps = [v for k, v in pairs.items() if k[:3] == (omega, alpha, d) and len(v) == 2]
        if not ps:
            continue
        g = mean_sem([v["semantic"]["gd_train_loss"] - v["positional"]["gd_train_loss"] for v in ps])
        st = mean_sem([v["semantic"]["stat_train_loss"] - v["positional"]["stat_train_loss"] for v in ps])
        ts, tp = theory_F(omega, alpha, "semantic"), theory_F(omega, alpha, "positional")
        th = ts.train_loss - tp.train_loss if ts and tp else float("nan")
        lines.append(f"| {omega:g} | {alpha:g} | {d} | {len(ps)} | {g[0]:+.2e} ± {g[1]:.1e} | {st[0]:+.2e} ± {st[1]:.1e} "
                     f"| {th:+.2e} |")
    # per seed: the lowest stationary objective over all starts, and which start reached it
    lines.append("")
    lines.append("| omega | alpha | d | run | starts | lowest F (start) | lowest, positional-like (m > theta/sigma^2) "
                 "| lowest, semantic-like |")
    lines.append("|---|---|---|---|---|---|---|---|")
    cells = {}
    for r in runs:
        cells.setdefault((r["omega"], r["alpha"], r["d"], r["run_index"]), []).append(r)
    for (omega, alpha, d, k), rs in sorted(cells.items()):
        if len(rs) < 3:
            continue
        best = min(rs, key=lambda r: r["stat_train_loss"])
        per = {}
        for r in rs:
            b = branch_of(r)
            if b not in per or r["stat_train_loss"] < per[b]["stat_train_loss"]:
                per[b] = r
        fmt = lambda b: (f"{per[b]['stat_train_loss']:.7f} ({per[b]['start']}; m {per[b]['stat_m']:.3f}, "
                         f"th {per[b]['stat_theta_over_sigma2']:.3f})" if b in per else "-")
        lines.append(f"| {omega:g} | {alpha:g} | {d} | {k} | {len(rs)} | {best['stat_train_loss']:.7f} ({best['start']}) "
                     f"| {fmt('positional')} | {fmt('semantic')} |")
    emit_table(lines, args.out)


def emit_table(lines, out) -> None:
    """A markdown table on stdout, and into ``out`` when given."""
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def cmd_profile(args) -> None:
    """The objective along the branch's overlap: per run, gradient descent from the branch's start,
    made stationary, then the constrained minimum at each of ``--values`` of ``m`` (positional) or
    ``theta/sigma^2`` (semantic), all on the same data."""
    spec = ModelSpec(omega=args.omega)
    store = profile_store(args.out)
    values = [float(v) for v in args.values.split(",")]
    for d, ns in sizes(args):
        for k in range(ns):
            key = dict(omega=args.omega, alpha=args.alpha, d=d, branch=args.branch, seed=args.seed, run_index=k)
            if key in store:
                continue
            t0 = time.process_time()
            problem = make_problem(spec, d, args.alpha, args.seed, k, n_test=1, dtype=torch.float64)
            tr = train(problem, args.branch, steps=STEPS, record_points=1)
            st = make_stationary(tr.Q, problem, args.gtol, hessian_max_d=0)
            Q = st["Q"]
            if args.branch == "positional":
                u = torch.full((d,), 1.0 / math.sqrt(d), dtype=torch.float64)
                scale = math.sqrt(d)           # m = Q.u / sqrt(d)
            else:
                Qs = problem.Qstar.to(torch.float64)
                u = Qs / Qs.norm()
                scale = d / float(Qs.norm())   # theta/sigma^2 = Q.u |Q*| / d
            sign = 1.0 if float(Q @ u) >= 0 else -1.0
            free_value = abs(float(Q @ u)) / scale
            profile = []
            for v in values:
                cm = constrained_minimum(Q, problem, u, sign * v * scale, args.gtol)
                profile.append(dict(value=v, train_loss=cm["R_over_d"], grad_norm=cm["grad_norm"]))
            r = dict(omega=args.omega, alpha=args.alpha, d=d, branch=args.branch, seed=args.seed, run_index=k,
                     free_value=free_value, free_train_loss=st["R_over_d"], free_grad_norm=st["grad_norm"],
                     profile=profile, cpu_seconds=time.process_time() - t0)
            store.put(key, r)
            log.info("profile omega %g alpha %g d %d %s run %d: free %.4f; F - F_free: %s (%.0f s)", args.omega,
                     args.alpha, d, args.branch, k, free_value,
                     " ".join(f"{p['value']:g}:{(p['train_loss'] - st['R_over_d']):+.2e}" for p in profile),
                     r["cpu_seconds"])


def cmd_profile_table(args) -> None:
    rows = list(profile_store(args.profiles).values())
    lines = ["| omega | alpha | branch | d | runs | free value | value | F - F_free (mean ± sem) | max abs(g) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r["omega"], r["alpha"], r["branch"], r["d"]) for r in rows}):
        rs = [r for r in rows if (r["omega"], r["alpha"], r["branch"], r["d"]) == key]
        fv = mean_sem([r["free_value"] for r in rs])
        for j, p in enumerate(rs[0]["profile"]):
            diff = mean_sem([r["profile"][j]["train_loss"] - r["free_train_loss"] for r in rs])
            gmax = max(r["profile"][j]["grad_norm"] for r in rs)
            lines.append(f"| {key[0]:g} | {key[1]:g} | {key[2]} | {key[3]} | {len(rs)} | {fv[0]:.4f} ± {fv[1]:.4f} "
                         f"| {p['value']:g} | {diff[0]:+.2e} ± {diff[1]:.1e} | {gmax:.1e} |")
    emit_table(lines, args.out)


def cmd_check_zero(args) -> None:
    """:func:`expected_zero_loss` against the plain mean of ``R(0)/d``-per-sample losses over fresh
    teachers and samples drawn by the simulator."""
    from validation.simulate import make_batch, per_sample_loss
    spec = ModelSpec(omega=args.omega)
    d, alpha = args.d, args.alpha
    formula = expected_zero_loss(spec, d, alpha)
    g = torch.Generator().manual_seed(args.seed)
    vals = []
    for _ in range(args.teachers):
        Qs = torch.randn(d, generator=g, dtype=torch.float64)
        b = make_batch(spec, d, args.samples, Qs, g, torch.float64, torch.device("cpu"))
        vals.append(float(per_sample_loss(torch.zeros(d, dtype=torch.float64), b).mean()))
    direct = mean_sem(np.array(vals) * round(alpha * d) / d)
    z = (formula[0] - direct[0]) / math.hypot(formula[1], direct[1])
    print(f"omega {args.omega:g} d {d} alpha {alpha:g}: E[R(0)/d] formula {formula[0]:.7f} ± {formula[1]:.1e}, "
          f"direct {direct[0]:.7f} ± {direct[1]:.1e} ({args.teachers} teachers x {args.samples} samples), z = {z:+.2f}")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("runs")
    r.add_argument("--omega", type=float, default=0.0)
    r.add_argument("--alpha", type=float, required=True)
    r.add_argument("--ds", default="250,500,1000")
    r.add_argument("--seeds", default="6,4,3")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--starts", default="semantic,positional")
    r.add_argument("--gtol", type=float, default=1e-8)
    r.add_argument("--hessian-max-d", type=int, default=1000)
    r.add_argument("--out", required=True, help="folder of the runs (read, and written)")
    a = sub.add_parser("analyse")
    a.add_argument("--runs", required=True, help="a folder of runs")
    a.add_argument("--out")
    pr = sub.add_parser("profile")
    pr.add_argument("--omega", type=float, default=0.0)
    pr.add_argument("--alpha", type=float, required=True)
    pr.add_argument("--branch", choices=("positional", "semantic"), required=True)
    pr.add_argument("--values", required=True)
    pr.add_argument("--ds", default="500,1000")
    pr.add_argument("--seeds", default="4,4")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--gtol", type=float, default=1e-8)
    pr.add_argument("--out", required=True, help="folder of the profiles (read, and written)")
    pt = sub.add_parser("profile-table")
    pt.add_argument("--profiles", required=True, help="a folder of profiles")
    pt.add_argument("--out")
    c = sub.add_parser("check-zero")
    c.add_argument("--omega", type=float, default=0.0)
    c.add_argument("--alpha", type=float, default=0.55)
    c.add_argument("--d", type=int, default=250)
    c.add_argument("--teachers", type=int, default=1000)
    c.add_argument("--samples", type=int, default=400)
    c.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    {"runs": cmd_runs, "analyse": cmd_analyse, "check-zero": cmd_check_zero, "profile": cmd_profile,
     "profile-table": cmd_profile_table}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

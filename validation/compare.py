"""Theory against simulation, by statistics (issue 4).

* :func:`compare_point` turns one :func:`validation.simulate.simulate` result into
  tidy rows ``(alpha, init, branch, quantity, sim_mean, sim_std, sim_sem, theory, z,
  p_value)`` with ``z = (sim_mean - theory) / sim_sem``.
* :func:`run_validate` runs the alpha grid for the informed starts, writes
  ``validate.csv``, ``theory_curves.csv``, ``validate.json`` and a figure like the
  paper's Fig. 3 (the plot only reads the CSV files).
* :func:`run_dscan` runs a range of ``d`` at fixed ``alpha`` and fits ``a + b/d``
  (independent seeds per ``d``, see :func:`scan_seed`).
* :func:`crossing_alpha` estimates where the semantic-start test error crosses the
  linear baseline, with a bootstrap over seeds.

The theory enters through two callables, ``solve_branch(spec, alpha, branch,
precision)`` (an object with ``q, m, V, theta, test_error, train_loss,
converged``) and ``linear_baseline(spec)`` (an object with ``test_error``). By
default they are ``numerics.api``'s, imported lazily; tests inject fakes.

Branch and sign conventions
---------------------------
The branch a start converged to is read from the simulation: ``semantic`` when
the mean ``|theta|/sigma^2`` exceeds the mean ``|m|``, ``positional`` otherwise,
``trivial`` when both are below ``TRIVIAL_CUT`` or below three times the overlap a
vector of the runs' norm has with ``Q*`` or ``mu_1`` by chance
(``sqrt(q / (sigma^2 d))``: at ``q = 0.45``, as linear attention's trivial point has,
that is 0.13 at ``d = 100``). The model is invariant under
``Q -> -Q``, so each run is first sign-fixed so that the branch's own order
parameter is positive (``theta`` on the semantic branch, ``m`` on the positional
one). The *other* parameter, whose theory value is 0, is then compared signed:
its distribution is symmetric about 0 (``Q* -> -Q*`` for ``theta``; the token swap
combined with the reflection of ``mu_1``, for ``m``, when ``A`` commutes with the
swap), whereas its absolute value has a positive ``O(1/sqrt(d))`` bias that would
make every z-score grow with the number of seeds.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

log = logging.getLogger(__name__)

QUANTITIES = ("test_error", "train_loss", "theta_over_sigma2", "m", "q")
BRANCHES = ("semantic", "positional", "trivial")
TRIVIAL_CUT = 0.05
ON_BRANCH_CUT = 1e-3  # theory: |theta|/sigma^2 (semantic) or |m| (positional) above this
CSV_FIELDS = ("d", "alpha", "init", "branch", "quantity", "n_seeds", "sim_mean", "sim_std", "sim_sem",
              "theory", "z", "p_value", "theory_converged", "theory_on_branch",
              "sigma", "lam", "omega", "A", "attention", "steps", "lr", "optimizer", "dtype", "seed", "n_test")


@dataclasses.dataclass
class Theory:
    """The two theory callables (see the module docstring)."""

    solve_branch: Callable
    linear_baseline: Callable
    precision: str = "fast"


_SOLUTION_FIELDS = ("q", "m", "V", "theta", "test_error", "train_loss", "converged")


def _flat_solution(sol) -> dict:
    def get(name):  # flat attributes (numerics.api contract), or an ``overlaps`` object
        return getattr(sol, name) if hasattr(sol, name) else getattr(sol.overlaps, name)

    out = {k: float(get(k)) for k in _SOLUTION_FIELDS if k != "converged"}
    out["converged"] = bool(sol.converged)
    return out


def memoized(theory: Theory, cache_dir: Optional[str] = None) -> Theory:
    """The same theory, remembering each ``(spec, alpha, branch, precision)`` solve (solves take
    minutes). With ``cache_dir``, solves are also kept on disk as JSON, so an interrupted or
    repeated ``validate`` does not solve again; hits return a namespace with the fields of
    the ``solve_branch`` contract."""
    import types

    solves, baselines = {}, {}

    def path_of(key):
        blob = json.dumps({"model": key[0].to_dict(), "alpha": key[1], "branch": key[2], "precision": key[3]},
                          sort_keys=True)
        return os.path.join(cache_dir, f"theory_{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json")

    def solve_branch(spec, alpha, branch, precision="fast"):
        key = (spec, round(float(alpha), 12), branch, precision)
        if key not in solves and cache_dir and os.path.exists(path_of(key)):
            with open(path_of(key)) as f:
                stored = json.load(f)
            solves[key] = RuntimeError(stored["error"]) if "error" in stored else types.SimpleNamespace(**stored)
        if key not in solves:
            try:
                solves[key] = types.SimpleNamespace(**_flat_solution(
                    theory.solve_branch(spec, alpha, branch, precision=precision)))
                stored = vars(solves[key])
            except Exception as exc:
                solves[key] = exc
                stored = {"error": f"{type(exc).__name__}: {exc}"}
            if cache_dir:
                os.makedirs(cache_dir, exist_ok=True)
                with open(path_of(key) + ".tmp", "w") as f:
                    json.dump({**stored, "alpha": key[1], "branch": branch, "precision": precision}, f)
                os.replace(path_of(key) + ".tmp", path_of(key))
        if isinstance(solves[key], Exception):
            raise solves[key]
        return solves[key]

    def linear_baseline(spec):
        if spec not in baselines:
            baselines[spec] = theory.linear_baseline(spec)
        return baselines[spec]

    return Theory(solve_branch, linear_baseline, theory.precision)


def default_theory(precision: str = "fast") -> Theory:
    """``numerics.api``'s solver; raises ImportError while it does not exist."""
    from numerics.api import linear_baseline, solve_branch

    return Theory(solve_branch, linear_baseline, precision)


# --------------------------------------------------------------------------- per-point comparison


def branch_of(result: dict) -> str:
    """The branch the runs of ``result`` converged to (see the module docstring)."""
    th = float(np.mean([r["theta_over_sigma2"] for r in result["runs"]]))
    m = float(np.mean([r["m"] for r in result["runs"]]))
    q = float(np.mean([r["q"] for r in result["runs"]]))
    chance = math.sqrt(q / (result["model"]["sigma"] ** 2 * result["d"]))
    if max(th, m) < max(TRIVIAL_CUT, 3 * chance):
        return "trivial"
    return "semantic" if th > m else "positional"


def sign_fixed(runs: Sequence[dict], branch: str) -> Dict[str, np.ndarray]:
    """Per-run values of each quantity, after fixing the sign of ``Q`` by the branch."""
    th = np.array([r["theta_over_sigma2_signed"] for r in runs])
    m = np.array([r["m_signed"] for r in runs])
    if branch == "semantic":
        s = np.where(th < 0, -1.0, 1.0)
    elif branch == "positional":
        s = np.where(m < 0, -1.0, 1.0)
    else:
        s = np.ones_like(th)
    out = {k: np.array([r[k] for r in runs], dtype=float) for k in ("test_error", "train_loss", "q")}
    out["theta_over_sigma2"] = s * th
    out["m"] = s * m
    return out


def theory_point(theory: Theory, spec, alpha: float, branch: str) -> Dict[str, float]:
    """Theory values of :data:`QUANTITIES` on ``branch`` (main order parameter positive)."""
    sol = theory.solve_branch(spec, alpha, branch, precision=theory.precision)

    def get(name):  # flat attributes (numerics.api), or an ``overlaps`` object
        return float(getattr(sol, name) if hasattr(sol, name) else getattr(sol.overlaps, name))

    th, m = get("theta") / spec.sigma ** 2, get("m")
    if branch == "semantic":
        th = abs(th)
    elif branch == "positional":
        m = abs(m)
    # a solve started on a branch can converge elsewhere (e.g. positional -> trivial)
    on_branch = {"semantic": abs(th) > ON_BRANCH_CUT, "positional": abs(m) > ON_BRANCH_CUT}.get(branch, True)
    if not on_branch:
        log.warning("theory: the %s solve at alpha=%g left its branch (m=%g, theta/sigma^2=%g)", branch, alpha, m, th)
    return {"test_error": float(sol.test_error), "train_loss": float(sol.train_loss),
            "theta_over_sigma2": th, "m": m, "q": get("q"), "converged": bool(sol.converged),
            "on_branch": bool(on_branch)}


def stats_row(values: np.ndarray, theory: Optional[float]) -> dict:
    """Mean, std (ddof 1), sem, ``z = (mean - theory)/sem`` and a two-sided t-test p-value."""
    from scipy import stats as sps

    k = len(values)
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1)) if k > 1 else float("nan")
    sem = std / math.sqrt(k) if k > 1 else float("nan")
    z = p = float("nan")
    if theory is not None and math.isfinite(theory) and k > 1 and sem > 0:
        z = (mean - theory) / sem
        p = float(2 * sps.t.sf(abs(z), k - 1))
    return {"n_seeds": k, "sim_mean": mean, "sim_std": std, "sim_sem": sem,
            "theory": float("nan") if theory is None else float(theory), "z": z, "p_value": p}


def _context(result: dict) -> dict:
    model = result["model"]
    return {"d": result["d"], "sigma": model["sigma"], "lam": model["lam"], "omega": model["omega"],
            "A": ";".join(",".join(str(x) for x in row) for row in model["A"]), "attention": model["attention"],
            "steps": result["steps"], "lr": result["lr"], "optimizer": result["optimizer"],
            "dtype": result["dtype"], "seed": result["seed"], "n_test": result["n_test"]}


def compare_point(result: dict, spec, theory: Optional[Theory], quantities: Iterable[str] = QUANTITIES) -> List[dict]:
    """Rows comparing one simulated point (``alpha``, ``init``) with the theory of its branch."""
    branch = branch_of(result)
    values = sign_fixed(result["runs"], branch)
    th = theory_point(theory, spec, result["alpha"], branch) if theory is not None else {}
    # no z-score against a solve that did not converge or left the branch: the branch
    # the simulation sits on has no theory counterpart there (see unmatched())
    usable = bool(th) and th["converged"] and th["on_branch"]
    rows = []
    for qty in quantities:
        row = {"alpha": result["alpha"], "init": result["init"], "branch": branch, "quantity": qty,
               **stats_row(values[qty], th.get(qty) if usable else None),
               "theory_converged": th.get("converged", ""),
               "theory_on_branch": th.get("on_branch", "")}
        rows.append({**_context(result), **row})
    return rows


def linear_rows(result: dict, theory: Optional[Theory]) -> List[dict]:
    """The linear baseline's test error at one point (its data are shared by all starts of a seed)."""
    vals = np.array([r["linear_test_error"] for r in result["runs"]])
    th = float(theory.linear_baseline(result_spec(result)).test_error) if theory is not None else None
    row = {"alpha": result["alpha"], "init": "linear", "branch": "linear", "quantity": "test_error",
           **stats_row(vals, th), "theory_converged": True if theory is not None else ""}
    return [{**_context(result), **row}]


def result_spec(result: dict):
    from derivations.spec import ModelSpec

    m = result["model"]
    return ModelSpec(sigma=m["sigma"], lam=m["lam"], omega=m["omega"], A=m["A"], attention=m["attention"])


def unmatched(rows: Sequence[dict]) -> List[dict]:
    """Simulated points whose branch has no converged theory solution (one entry per point)."""
    seen, out = set(), []
    for r in rows:
        key = (r["d"], r["alpha"], r["init"])
        bad = r.get("theory_converged") is False or r.get("theory_on_branch") is False
        if bad and key not in seen:
            seen.add(key)
            out.append({"d": r["d"], "alpha": r["alpha"], "init": r["init"], "branch": r["branch"],
                        "theory_converged": r["theory_converged"], "theory_on_branch": r["theory_on_branch"]})
    return out


def failing(rows: Sequence[dict], tolerance: float) -> List[dict]:
    """Rows with ``|z| > tolerance`` (rows without a z-score never fail)."""
    return [r for r in rows if isinstance(r.get("z"), float) and math.isfinite(r["z"]) and abs(r["z"]) > tolerance]


# --------------------------------------------------------------------------- threshold from simulation


def crossing_alpha(alphas: Sequence[float], test: Sequence[np.ndarray], linear: Sequence[np.ndarray],
                   n_boot: int = 2000, rng: Optional[np.random.Generator] = None, paired: bool = True) -> dict:
    """Where ``mean(test - linear)`` changes sign from + to -, by linear interpolation in alpha.

    ``test[i]`` and ``linear[i]`` are per-seed values at ``alphas[i]``, paired by seed
    (a seed's linear baseline is fitted on the same training set). The error bar is the
    standard deviation over ``n_boot`` bootstrap resamples of the seeds. Run ``k`` at
    every alpha shares its teacher and a prefix of its data (same seed), so by default
    (``paired``, when every alpha has the same number of runs) one resample of the run
    indices is applied to all alphas; otherwise seeds are resampled independently per
    alpha. ``no_crossing_fraction`` counts resamples without a crossing.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    order = np.argsort(alphas)
    a = np.asarray(alphas, dtype=float)[order]
    diffs = [np.asarray(test[i], float) - np.asarray(linear[i], float) for i in order]

    def cross(means):
        for i in range(len(a) - 1):
            if means[i] > 0 >= means[i + 1]:
                return a[i] + (a[i + 1] - a[i]) * means[i] / (means[i] - means[i + 1])
        return float("nan")

    estimate = cross([x.mean() for x in diffs])
    paired = paired and len({len(x) for x in diffs}) == 1

    def resample():
        if paired:
            idx = rng.integers(0, len(diffs[0]), len(diffs[0]))
            return [x[idx].mean() for x in diffs]
        return [x[rng.integers(0, len(x), len(x))].mean() for x in diffs]

    boots = np.array([cross(resample()) for _ in range(n_boot)])
    ok = boots[np.isfinite(boots)]
    return {"alpha_cross": float(estimate),
            "alpha_cross_std": float(ok.std(ddof=1)) if len(ok) > 1 else float("nan"),
            "alpha_cross_p16": float(np.percentile(ok, 16)) if len(ok) else float("nan"),
            "alpha_cross_p84": float(np.percentile(ok, 84)) if len(ok) else float("nan"),
            "no_crossing_fraction": float(1 - len(ok) / n_boot), "n_boot": n_boot, "paired": paired,
            "alphas": [float(x) for x in a], "diff_mean": [float(x.mean()) for x in diffs]}


def theory_crossing(theory: Theory, spec, alphas: Sequence[float], refine: bool = True, xtol: float = 2e-3) -> float:
    """Alpha where the semantic branch's test error falls below the linear baseline's.

    Evaluates the semantic branch at ``alphas`` (skipping ones where it fails or does
    not converge, e.g. below its spinodal), takes the first + to - sign change and,
    with ``refine``, polishes it by ``brentq`` to ``xtol`` (else linear interpolation).
    Equals ``alpha_l`` when the semantic branch is the global minimum there.
    """
    from scipy.optimize import brentq

    lin = float(theory.linear_baseline(spec).test_error)

    def f(alpha):
        sol = theory.solve_branch(spec, float(alpha), "semantic", precision=theory.precision)
        return float(sol.test_error) - lin if sol.converged else float("nan")

    grid, vals = [], []
    for a in sorted(float(x) for x in alphas):
        try:
            v = f(a)
        except Exception as exc:  # the branch may not exist there
            log.info("theory crossing: semantic branch at alpha=%g failed: %s", a, exc)
            continue
        if math.isfinite(v):
            grid.append(a)
            vals.append(v)
    for i in range(len(grid) - 1):
        if vals[i] > 0 >= vals[i + 1]:
            linear = float(grid[i] + (grid[i + 1] - grid[i]) * vals[i] / (vals[i] - vals[i + 1]))
            if not refine:
                return linear
            try:
                return float(brentq(f, grid[i], grid[i + 1], xtol=xtol))
            except (ValueError, RuntimeError):
                return linear
    return float("nan")


# --------------------------------------------------------------------------- d-scan fit


def fit_finite_size(ds: Sequence[float], means: Sequence[float], sems: Sequence[float]) -> dict:
    """Weighted least squares ``y = a + b/d`` (weights ``1/sem^2``).

    ``a_se`` is the standard error from the stated sems; ``chi2_dof`` measures
    whether the sems explain the scatter about the fit, and ``a_se_scaled`` is
    ``a_se * sqrt(max(1, chi2_dof))``, the honest error bar when they do not.
    """
    x = 1.0 / np.asarray(ds, float)
    y = np.asarray(means, float)
    s = np.asarray(sems, float)
    w = 1.0 / s ** 2
    M = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(M.T @ (M * w[:, None]))
    a, b = cov @ (M.T @ (w * y))
    resid = y - (a + b * x)
    dof = max(1, len(x) - 2)
    chi2 = float(np.sum(w * resid ** 2))
    a_se = float(math.sqrt(cov[0, 0]))
    return {"a": float(a), "b": float(b), "a_se": a_se, "b_se": float(math.sqrt(cov[1, 1])),
            "chi2_dof": chi2 / dof, "a_se_scaled": a_se * math.sqrt(max(1.0, chi2 / dof))}


# --------------------------------------------------------------------------- running sweeps


def _cache_key(spec, d, alpha, init, sim_kwargs) -> str:
    blob = json.dumps({"model": spec.to_dict(), "d": d, "alpha": alpha, "init": init,
                       **{k: v for k, v in sim_kwargs.items() if k not in ("device", "progress")}},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached_simulate(spec, d: int, alpha: float, init: str, sim_kwargs: dict, cache_dir: Optional[str],
                    simulate_fn: Optional[Callable] = None) -> dict:
    """:func:`validation.simulate.simulate`, reusing ``cache_dir/sim_<key>.json`` when present."""
    if simulate_fn is None:
        from validation.simulate import simulate as simulate_fn
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"sim_{_cache_key(spec, d, alpha, init, sim_kwargs)}.json")
        if os.path.exists(path):
            with open(path) as f:
                log.info("reusing %s", path)
                return json.load(f)
    result = simulate_fn(spec, d, alpha, init, **sim_kwargs)
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)
    return result


def write_csv(path: str, rows: Sequence[dict], fields: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in r.items()})


def read_csv(path: str) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def theory_curves(theory: Theory, spec, alphas: Sequence[float], branches=("semantic", "positional")) -> List[dict]:
    """Tidy rows ``(branch, alpha, quantity, value, converged)``; points whose solve raises are skipped."""
    rows = []
    lin = float(theory.linear_baseline(spec).test_error)
    for branch in branches:
        for alpha in alphas:
            try:
                tp = theory_point(theory, spec, float(alpha), branch)
            except Exception as exc:  # a branch can stop existing (spinodal)
                log.warning("theory %s alpha=%g failed: %s", branch, alpha, exc)
                continue
            for qty in QUANTITIES:
                rows.append({"branch": branch, "alpha": float(alpha), "quantity": qty, "value": tp[qty],
                             "converged": tp["converged"] and tp["on_branch"]})
    for alpha in alphas:
        rows.append({"branch": "linear", "alpha": float(alpha), "quantity": "test_error", "value": lin,
                     "converged": True})
    return rows


def run_validate(spec, alphas: Sequence[float], inits: Sequence[str], d: int, sim_kwargs: dict, out: str,
                 tolerance: float = 3.0, theory: Optional[Theory] = None, curve_points: int = 7,
                 resume: bool = True, simulate_fn: Optional[Callable] = None) -> dict:
    """Simulate the grid, compare with ``theory`` (None: simulation only), write files to ``out``.

    The theory is solved (memoized) at the simulated alphas and at ``curve_points``
    evenly spaced alphas over the same range, for the curves and the theory crossing.
    Returns a summary dict; ``summary["failing"]`` lists rows with ``|z| > tolerance``.
    """
    os.makedirs(out, exist_ok=True)
    theory = memoized(theory, os.path.join(out, "theory") if resume else None) if theory is not None else None
    cache = os.path.join(out, "runs") if resume else None
    from tqdm import tqdm

    points = [(a, i) for a in alphas for i in inits]
    results = {}
    for alpha, init in tqdm(points, desc=f"validate d={d}", unit="point"):
        results[(alpha, init)] = cached_simulate(spec, d, alpha, init, sim_kwargs, cache, simulate_fn)
    rows = []
    for alpha in alphas:
        for init in inits:
            rows += compare_point(results[(alpha, init)], spec, theory)
        rows += linear_rows(results[(alpha, inits[0])], theory)
    write_csv(os.path.join(out, "validate.csv"), rows, CSV_FIELDS)
    summary = {"d": d, "alphas": list(alphas), "inits": list(inits), "tolerance": tolerance,
               "model": spec.to_dict(), "simulation": {k: v for k, v in sim_kwargs.items() if k != "progress"},
               "theory": theory is not None}
    grid = sorted(set(float(a) for a in alphas))
    if theory is not None and curve_points > 0:
        lo, hi = min(alphas), max(alphas)
        grid = sorted(set(grid) | set(np.round(np.linspace(lo, hi, curve_points), 10).tolist()))
    if "semantic" in inits and len(alphas) > 1:
        sem = [results[(a, "semantic")]["runs"] for a in alphas]
        summary["crossing"] = crossing_alpha(alphas, [[r["test_error"] for r in rs] for rs in sem],
                                             [[r["linear_test_error"] for r in rs] for rs in sem],
                                             rng=np.random.default_rng(sim_kwargs.get("seed", 0)))
        if theory is not None:
            summary["crossing"]["theory_alpha_semantic_vs_linear"] = theory_crossing(theory, spec, grid)
    if theory is not None:
        write_csv(os.path.join(out, "theory_curves.csv"), theory_curves(theory, spec, grid),
                  ("branch", "alpha", "quantity", "value", "converged"))
    fails = failing(rows, tolerance)
    summary["failing"] = [{k: r[k] for k in ("alpha", "init", "branch", "quantity", "sim_mean", "theory", "z")}
                          for r in fails]
    summary["unmatched"] = unmatched(rows)
    summary["rows"] = len(rows)
    with open(os.path.join(out, "validate.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot_validate(out)
    return summary


def scan_seed(seed: int, d: int) -> int:
    """The integer seed of dimension ``d`` in a d-scan with seed ``seed``.

    Runs at different ``d`` must be independent for the weighted fit: with one seed
    for all ``d``, torch's normal generator makes ``|Q*|^2/d`` (hence every outcome)
    strongly correlated across ``d`` (measured correlations 0.5-0.95 over seeds).
    """
    return int(np.random.SeedSequence([int(seed), int(d)]).generate_state(1, dtype=np.uint32)[0])


def run_dscan(spec, alpha: float, inits: Sequence[str], d_values: Sequence[int], sim_kwargs: dict, out: str,
              tolerance: float = 3.0, theory: Optional[Theory] = None, resume: bool = True,
              simulate_fn: Optional[Callable] = None) -> dict:
    """Finite-size scan at fixed ``alpha``: rows per ``(d, init, quantity)``, a fit ``a + b/d``
    per ``(init, quantity)``, its intercept compared with the theory."""
    os.makedirs(out, exist_ok=True)
    cache = os.path.join(out, "runs") if resume else None
    theory = memoized(theory, os.path.join(out, "theory") if resume else None) if theory is not None else None
    from tqdm import tqdm

    rows = []
    for d in tqdm(list(d_values), desc=f"d-scan alpha={alpha:g}", unit="d"):
        for init in inits:
            kw = {**sim_kwargs, "seed": scan_seed(sim_kwargs.get("seed", 0), d)}
            res = cached_simulate(spec, d, alpha, init, kw, cache, simulate_fn)
            rows += compare_point(res, spec, None)
            if init == inits[0]:
                rows += linear_rows(res, None)
    write_csv(os.path.join(out, "dscan.csv"), rows, CSV_FIELDS)
    fits = []
    keys = sorted({(r["init"], r["branch"], r["quantity"]) for r in rows})
    for init, branch, qty in keys:
        sel = sorted((r for r in rows if (r["init"], r["branch"], r["quantity"]) == (init, branch, qty)),
                     key=lambda r: r["d"])
        if len(sel) < 3 or any(not (r["sim_sem"] > 0) for r in sel):
            continue
        fit = fit_finite_size([r["d"] for r in sel], [r["sim_mean"] for r in sel], [r["sim_sem"] for r in sel])
        th = float("nan")
        if theory is not None:
            th = (float(theory.linear_baseline(spec).test_error) if branch == "linear"
                  else theory_point(theory, spec, alpha, branch)[qty])
        z = (fit["a"] - th) / fit["a_se_scaled"] if math.isfinite(th) else float("nan")
        fits.append({"alpha": alpha, "init": init, "branch": branch, "quantity": qty, **fit, "theory": th,
                     "z": z, "d_values": ";".join(str(r["d"]) for r in sel)})
    write_csv(os.path.join(out, "dscan_fit.csv"), fits,
              ("alpha", "init", "branch", "quantity", "a", "a_se", "a_se_scaled", "b", "b_se", "chi2_dof",
               "theory", "z", "d_values"))
    fails = failing(fits, tolerance)
    summary = {"alpha": alpha, "d_values": list(d_values), "inits": list(inits), "tolerance": tolerance,
               "model": spec.to_dict(), "theory": theory is not None, "fits": fits,
               "failing": [{k: r[k] for k in ("init", "branch", "quantity", "a", "theory", "z")} for r in fails]}
    with open(os.path.join(out, "dscan.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot_dscan(out)
    return summary


# --------------------------------------------------------------------------- figures (read the CSVs)

_PANELS = (("test_error", "test error"), ("train_loss", "training loss"),
           ("theta_over_sigma2", r"$\theta/\sigma^2$"), ("m", "$m$"))
_COLORS = {"semantic": "tab:blue", "positional": "tab:orange", "random": "tab:green",
           "trivial": "tab:gray", "linear": "k"}


def _f(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def plot_validate(out: str) -> str:
    """Fig. 3-like figure from ``validate.csv`` (+ ``theory_curves.csv`` when present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_csv(os.path.join(out, "validate.csv"))
    curves_path = os.path.join(out, "theory_curves.csv")
    curves = read_csv(curves_path) if os.path.exists(curves_path) else []
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _PANELS):
        for branch in ("semantic", "positional", "linear"):
            pts = sorted(((_f(c["alpha"]), _f(c["value"])) for c in curves
                          if c["branch"] == branch and c["quantity"] == qty and c["converged"] == "True"))
            if pts:
                ax.plot(*zip(*pts), color=_COLORS[branch], ls="--" if branch == "linear" else "-",
                        label=f"theory {branch}")
        for init in sorted({r["init"] for r in rows}):
            sel = [r for r in rows if r["init"] == init and r["quantity"] == qty]
            if not sel:
                continue
            ax.errorbar([_f(r["alpha"]) for r in sel], [_f(r["sim_mean"]) for r in sel],
                        yerr=[_f(r["sim_sem"]) for r in sel], fmt="o" if init != "linear" else "s",
                        color=_COLORS.get(init, "k"), capsize=3, ms=4,
                        label="sim linear baseline" if init == "linear" else f"sim {init} start")
        ax.set_xlabel(r"$\alpha$")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    d = rows[0]["d"] if rows else "?"
    fig.suptitle(f"theory (lines) vs simulation (mean ± sem over seeds), d = {d}", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "validate.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_dscan(out: str) -> str:
    """Quantities against ``1/d`` with the fitted lines and the theory at ``1/d = 0``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_csv(os.path.join(out, "dscan.csv"))
    fits = read_csv(os.path.join(out, "dscan_fit.csv"))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _PANELS):
        for init in sorted({r["init"] for r in rows}):
            sel = sorted((r for r in rows if r["init"] == init and r["quantity"] == qty), key=lambda r: _f(r["d"]))
            if not sel:
                continue
            color = _COLORS.get(init, "k")
            x = [1 / _f(r["d"]) for r in sel]
            ax.errorbar(x, [_f(r["sim_mean"]) for r in sel], yerr=[_f(r["sim_sem"]) for r in sel], fmt="o",
                        color=color, capsize=3, ms=4, label=f"sim {init}")
            for fit in fits:
                if fit["init"] == init and fit["quantity"] == qty:
                    xx = np.linspace(0, max(x), 20)
                    ax.plot(xx, _f(fit["a"]) + _f(fit["b"]) * xx, color=color, lw=1)
                    if math.isfinite(_f(fit["theory"])):
                        ax.plot([0], [_f(fit["theory"])], marker="*", color=color, ms=10, ls="none")
        ax.set_xlabel("1/d")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    fig.suptitle("finite-size scan: fit a + b/d (lines), theory at 1/d = 0 (stars)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "dscan.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def markdown_table(rows: Sequence[dict], digits: int = 4,
                   cols: Sequence[str] = ("alpha", "init", "branch", "quantity", "sim_mean", "sim_sem", "theory", "z"),
                   ) -> str:
    """``validate.csv``-style rows as a Markdown table (for docs/validation.md)."""
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            x = _f(v)
            if c in ("alpha", "d"):
                cells.append(f"{x:g}")
            elif c == "z":
                cells.append("" if not math.isfinite(x) else f"{x:+.2f}")
            elif isinstance(v, (int, float)) or (isinstance(v, str) and math.isfinite(x)):
                cells.append(f"{x:.{digits}g}" if math.isfinite(x) else "")
            else:
                cells.append(str(v) if str(v) != "nan" else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)

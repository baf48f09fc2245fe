"""Running the simulations of ``attnphase validate``: an alpha grid (:func:`run_validate`)
and a finite-size scan (:func:`run_dscan`), each simulated point cached on disk
(:func:`cached_simulate`), compared with the theory and written as tidy CSVs, JSON and
figures. With ``method="gamp"`` each point is run by message passing on the same seeds' instances
instead (:func:`cached_gamp`, :func:`validation.gamp.gamp_point`) and compared in the same way.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from tidyio import KeyedStore, atomic_write_text, folder_summary, render_csv

from .figures import plot_dscan, plot_validate
from .run_settings import METHODS
from .statistics import (branch_groups, compare, crossing_alpha, csv_fields, failing, fit_finite_size, linear_rows,
                         linear_theory, not_converged, signed_overlaps, unmatched)
from .theory_cache import (Theory, branches_at, invariant_curves, invariant_point, memoized, theory_crossing,
                           theory_curves, theory_point)

log = logging.getLogger(__name__)


def _cache_key(spec, d, alpha, init, sim_kwargs) -> dict:
    return {"model": spec.to_dict(), "d": d, "alpha": alpha, "init": init,
            **{k: v for k, v in sim_kwargs.items() if k != "device"}}


def cached_simulate(spec, d: int, alpha: float, inits: Sequence[str], sim_kwargs: dict, cache_dir: Optional[str],
                    simulate_fn: Optional[Callable] = None,
                    progress: Optional[Callable[[int], None]] = None) -> Dict[str, dict]:
    """``{init: result}``: :func:`validation.simulate.simulate` of each start of ``inits``, reusing
    ``cache_dir/sim_<key>.json`` (one file per start) when it reads back whole (its checksum
    matches) as the result of these settings; a cache file that does not is moved aside with a
    warning and the start simulated again. The starts not cached are simulated together, each
    run's starts trained on its one data set as one batch
    (:func:`validation.simulate.simulate_starts`; each result is that of the start alone).
    ``simulate_fn`` (tests): a function with :func:`~validation.simulate.simulate`'s signature,
    called per start. ``progress(n)``: told the steps taken (all of them at once for a cached
    start)."""
    seeds = sim_kwargs.get("seeds", 1)
    records = KeyedStore(cache_dir, "sim_", "simulation") if cache_dir else None
    results = {}
    for init in inits if records is not None else ():
        def valid(result, init=init):
            return isinstance(result, dict) and len(result.get("runs", ())) == seeds and result.get("d") == d \
                and result.get("init") == init

        result = records.get(_cache_key(spec, d, alpha, init, sim_kwargs), valid=valid)
        if result is not None:
            log.info("reusing %s", records.path(_cache_key(spec, d, alpha, init, sim_kwargs)))
            if progress:
                progress(seeds * sim_kwargs.get("steps", 0))
            results[init] = result
    missing = [init for init in inits if init not in results]
    if missing:
        if simulate_fn is None:
            from .simulate import simulate_starts

            fresh = simulate_starts(spec, d, alpha, missing, progress=progress, **sim_kwargs)
        else:
            fresh = {init: simulate_fn(spec, d, alpha, init, progress=progress, **sim_kwargs) for init in missing}
        for init in missing if records is not None else ():
            records.put(_cache_key(spec, d, alpha, init, sim_kwargs), fresh[init], replace=True)
        results.update(fresh)
    return {init: results[init] for init in inits}


def _gamp_key(spec, d, alpha, init, gamp_kwargs) -> dict:
    return {"method": "gamp", "model": spec.to_dict(), "d": d, "alpha": alpha, "init": init, "data": "numpy",
            **{k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in gamp_kwargs.items()}}


def cached_gamp(spec, d: int, alpha: float, inits: Sequence[str], gamp_kwargs: dict, cache_dir: Optional[str],
                gamp_fn: Optional[Callable] = None,
                progress: Optional[Callable[[int], None]] = None) -> Dict[str, dict]:
    """``{init: result}``: :func:`validation.gamp.gamp_point` of each start (``gamp_kwargs``: its
    ``seeds``, ``seed``, ``dtype``, ``n_test``, ``dampings``), reusing ``cache_dir/gamp_<key>.json`` as
    :func:`cached_simulate` reuses its files; the key names the method, so a simulation's file never
    answers it. Runs that did not converge are kept in the result, and cached, as such.
    ``gamp_fn`` (tests): a function with :func:`~validation.gamp.gamp_point`'s signature.
    ``progress(n)``: told the runs done."""
    seeds = gamp_kwargs.get("seeds", 1)
    records = KeyedStore(cache_dir, "gamp_", "GAMP result") if cache_dir else None
    if gamp_fn is None:
        from .gamp import gamp_point as gamp_fn
    out = {}
    for init in inits:
        key = _gamp_key(spec, d, alpha, init, gamp_kwargs)

        def valid(result, init=init):
            return isinstance(result, dict) and result.get("method") == "gamp" and result.get("d") == d \
                and result.get("init") == init \
                and len(result.get("runs", ())) + len(result.get("not_converged", ())) == seeds

        result = records.get(key, valid=valid) if records is not None else None
        if result is not None:
            log.info("reusing %s", records.path(key))
            if progress:
                progress(seeds)
        else:
            result = gamp_fn(spec, d, alpha, init, progress=progress, **gamp_kwargs)
            if records is not None:
                records.put(key, result, replace=True)
        out[init] = result
    return out


def _cached_points(method, spec, d, alpha, inits, kwargs, cache, run_fn, progress) -> Dict[str, dict]:
    if method not in METHODS:
        raise ValueError(f"method: choose from {', '.join(METHODS)}, got {method!r}")
    if method == "gamp":
        return cached_gamp(spec, d, alpha, inits, kwargs, cache, run_fn, progress)
    return cached_simulate(spec, d, alpha, inits, kwargs, cache, run_fn, progress)


def write_csv(path: str, rows: Sequence[dict], fields: Sequence[str]) -> None:
    """Rows as a CSV of the columns ``fields`` (cells as every CSV of the project writes them,
    :func:`tidyio.cell`), written whole."""
    atomic_write_text(path, render_csv(fields, rows, True))


def run_validate(spec, alphas: Sequence[float], inits: Sequence[str], d: int, sim_kwargs: dict, out: str,
                 tolerance: float = 3.0, theory: Optional[Theory] = None, curve_points: int = 7,
                 resume: bool = True, simulate_fn: Optional[Callable] = None,
                 progress: Optional[Callable[[int], None]] = None, method: str = "gd") -> dict:
    """Simulate the grid, compare with ``theory`` (None: simulation only), write files to ``out``.

    ``method``: ``gd``, the simulator's training (``sim_kwargs`` those of
    :func:`validation.simulate.simulate`), or ``gamp``, message passing on the same seeds' instances
    (``sim_kwargs`` those of :func:`validation.gamp.gamp_point`; ``simulate_fn`` in its place). A GAMP
    point whose runs did not all converge is listed in ``summary["not_converged"]`` with each reason;
    its rows compare the runs that did, or say that none did (:func:`validation.statistics.not_converged_rows`).

    The theory is solved (memoized) at the simulated alphas and at ``curve_points``
    evenly spaced alphas over the same range, for the curves and the theory crossing.
    Returns a summary dict; ``summary["failing"]`` lists rows with ``|z| > tolerance``.
    ``validate.json`` says ``"status": "incomplete"`` until every file is written.
    ``progress(n)``: told the simulation steps taken. For the general model (docs/theory.md,
    section 4) ``summary["global_minimum"]`` says, per simulated point, which branches its runs
    reached and which branch is the theory's global minimum there (:func:`global_minimum_report`).
    """
    theory = memoized(theory, os.path.join(out, "theory") if resume else None) if theory is not None else None
    cache = os.path.join(out, "runs") if resume else None
    summary = {"d": d, "alphas": list(alphas), "inits": list(inits), "tolerance": tolerance, "method": method,
               "model": spec.to_dict(), "simulation": dict(sim_kwargs), "theory": theory is not None}
    with folder_summary(os.path.join(out, "validate.json"), summary):
        results = {}
        for alpha in alphas:
            at = _cached_points(method, spec, d, alpha, inits, sim_kwargs, cache, simulate_fn, progress)
            results.update({(alpha, init): res for init, res in at.items()})
        rows = []
        for alpha in alphas:
            for init in inits:
                rows += compare(results[(alpha, init)], spec, theory)
            rows += linear_rows(results[(alpha, inits[0])], theory)
        write_csv(os.path.join(out, "validate.csv"), rows, csv_fields(spec, method))
        # the two-token rank-one model is read through its signed scalar overlaps, any other through
        # its invariants (validation.statistics, "Branch and sign conventions")
        scalar = signed_overlaps(spec)
        if not scalar and theory is not None:
            summary["global_minimum"] = global_minimum_report(results, alphas, inits, spec, theory)
        grid = sorted(set(float(a) for a in alphas))
        if theory is not None and curve_points > 0:
            lo, hi = min(alphas), max(alphas)
            grid = sorted(set(grid) | set(np.round(np.linspace(lo, hi, curve_points), 10).tolist()))
        # the alphas with runs (a GAMP point may have none that converged)
        crossed = [a for a in alphas if "semantic" in inits and results[(a, "semantic")]["runs"]]
        if len(crossed) > 1:
            sem = [results[(a, "semantic")]["runs"] for a in crossed]
            summary["crossing"] = crossing_alpha(crossed, [[r["test_error"] for r in rs] for rs in sem],
                                                 [[r["linear_test_error"] for r in rs] for rs in sem],
                                                 rng=np.random.default_rng(sim_kwargs.get("seed", 0)))
            if theory is not None and scalar:
                summary["crossing"]["theory_alpha_semantic_vs_linear"] = theory_crossing(theory, spec, grid)
        if theory is not None:
            curves = theory_curves(theory, spec, grid) if scalar else invariant_curves(theory, spec, grid)
            write_csv(os.path.join(out, "theory_curves.csv"), curves,
                      ("branch", "alpha", "quantity", "value", "converged"))
        fails = failing(rows, tolerance)
        summary["failing"] = [{k: r[k] for k in ("alpha", "init", "branch", "quantity", "sim_mean", "theory", "z")}
                              for r in fails]
        summary["unmatched"] = unmatched(rows)
        if method == "gamp":
            summary["not_converged"] = not_converged(results[(a, i)] for a in alphas for i in inits)
        summary["rows"] = len(rows)
        plot_validate(out)
    return summary


def global_minimum_report(results: dict, alphas: Sequence[float], inits: Sequence[str], spec,
                          theory: Theory) -> list:
    """Per simulated point ``(alpha, init)`` of the general model: the branches its runs reached
    (with counts and mean training loss), the theory's branches at that alpha (training loss and
    its stated error; absent ones as absent) and the theory's global minimum among them
    (``theory_global``, None when no branch converged), and how many runs reached it."""
    report = []
    for alpha in alphas:
        at = branches_at(theory, spec, alpha)
        theory_losses = {b: ({"train_loss": p["values"]["train_loss"], "train_loss_error": p["errors"]["train_loss"],
                              "converged": p["converged"]} if p["present"] else {"absent": True})
                         for b, p in at["branches"].items()}
        for init in inits:
            groups = branch_groups(results[(alpha, init)])
            report.append({
                "alpha": alpha, "init": init, "runs": sum(len(g) for g in groups.values()),
                "reached": {b: len(g) for b, g in groups.items()},
                "sim_train_loss": {b: float(np.mean([r["train_loss"] for r in g])) for b, g in groups.items()},
                "theory_global": at["global"], "theory_train_loss": theory_losses,
                "runs_at_global": len(groups.get(at["global"], ())),
            })
    return report


def scan_seed(seed: int, d: int) -> int:
    """The integer seed of dimension ``d`` in a d-scan with seed ``seed``.

    Runs at different ``d`` must be independent for the weighted fit: with one seed
    for all ``d``, torch's normal generator makes ``|Q*|^2/d`` (hence every outcome)
    strongly correlated across ``d`` (measured correlations 0.5-0.95 over seeds).
    """
    return int(np.random.SeedSequence([int(seed), int(d)]).generate_state(1, dtype=np.uint32)[0])


def _dscan_theory(theory: Optional[Theory], spec, alpha: float, branch: str, qty: str):
    """The theory value of one fitted quantity and its stated error (NaN, 0 without one)."""
    if theory is None:
        return float("nan"), 0.0
    if branch == "linear":
        th = linear_theory(theory, spec)
        return (float("nan") if th is None else th), 0.0
    if signed_overlaps(spec):
        return theory_point(theory, spec, alpha, branch)[qty], 0.0
    point = invariant_point(theory, spec, alpha, branch)
    if not (point["present"] and point["converged"]) or qty not in point["values"]:
        return float("nan"), 0.0
    return point["values"][qty], point["errors"][qty]


def run_dscan(spec, alpha: float, inits: Sequence[str], d_values: Sequence[int], sim_kwargs: dict, out: str,
              tolerance: float = 3.0, theory: Optional[Theory] = None, resume: bool = True,
              simulate_fn: Optional[Callable] = None, progress: Optional[Callable[[int], None]] = None,
              method: str = "gd") -> dict:
    """Finite-size scan at fixed ``alpha``: rows per ``(d, init, quantity)``, a fit ``a + b/d``
    per ``(init, quantity)``, its intercept compared with the theory. ``dscan.json`` says
    ``"status": "incomplete"`` until every file is written. ``method``: as for :func:`run_validate`."""
    cache = os.path.join(out, "runs") if resume else None
    theory = memoized(theory, os.path.join(out, "theory") if resume else None) if theory is not None else None
    summary = {"alpha": alpha, "d_values": list(d_values), "inits": list(inits), "tolerance": tolerance,
               "method": method, "model": spec.to_dict(), "theory": theory is not None}
    with folder_summary(os.path.join(out, "dscan.json"), summary):
        rows, results = [], []
        for d in d_values:
            kw = {**sim_kwargs, "seed": scan_seed(sim_kwargs.get("seed", 0), d)}
            at = _cached_points(method, spec, d, alpha, inits, kw, cache, simulate_fn, progress)
            results += [at[init] for init in inits]
            for init in inits:
                res = at[init]
                rows += compare(res, spec, None)
                if init == inits[0]:
                    rows += linear_rows(res, None)
        write_csv(os.path.join(out, "dscan.csv"), rows, csv_fields(spec, method))
        fits = []
        keys = sorted({(r["init"], r["branch"], r["quantity"]) for r in rows})
        for init, branch, qty in keys:
            sel = sorted((r for r in rows if (r["init"], r["branch"], r["quantity"]) == (init, branch, qty)),
                         key=lambda r: r["d"])
            if len(sel) < 3 or any(not (r["sim_sem"] > 0) for r in sel):
                continue
            fit = fit_finite_size([r["d"] for r in sel], [r["sim_mean"] for r in sel], [r["sim_sem"] for r in sel])
            th, th_err = _dscan_theory(theory, spec, alpha, branch, qty)
            # without a stated theory error the z-score is the fit-only one, bit for bit
            scale = math.hypot(fit["a_se_scaled"], th_err) if th_err else fit["a_se_scaled"]
            z = (fit["a"] - th) / scale if math.isfinite(th) else float("nan")
            fits.append({"alpha": alpha, "init": init, "branch": branch, "quantity": qty, **fit, "theory": th,
                         "theory_error": th_err, "z": z, "d_values": ";".join(str(r["d"]) for r in sel)})
        write_csv(os.path.join(out, "dscan_fit.csv"), fits,
                  ("alpha", "init", "branch", "quantity", "a", "a_se", "a_se_scaled", "b", "b_se", "chi2_dof",
                   "theory", "theory_error", "z", "d_values"))
        fails = failing(fits, tolerance)
        summary["fits"] = fits
        summary["failing"] = [{k: r[k] for k in ("init", "branch", "quantity", "a", "theory", "z")} for r in fails]
        if method == "gamp":
            summary["not_converged"] = not_converged(results)
        plot_dscan(out)
    return summary

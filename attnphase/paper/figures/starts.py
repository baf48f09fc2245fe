"""Figure 8: starts and optimisers. Where gradient descent and Adam end from random starts
(``Q = 0.1 N(0, I_d)``, docs/theory.md, section 1.4): each run's final ``m`` and
``theta/sigma^2``, the fraction of runs that end on the semantic branch, and their test
errors against the theory's branches."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from tidyio import number

from ..plan import INFORMED, default_model, model_label
from ..tables import Data, gd_rows, key_number, row, select, series, theory_rows, threshold_rows
from . import FigureSpec
from .drawing import finish_axes, new_figure, theory_curves, threshold_lines

NAME = "starts"
OPTIMIZERS = ("gd", "adam")
OPTIMIZER_STYLE = {"gd": ("tab:blue", "o"), "adam": ("tab:red", "^")}


def title(plan) -> str:
    return "Random starts: gradient descent and Adam"


def what(plan) -> str:
    return (f"Runs from random starts (d = {plan.starts.d}, {plan.starts.seeds} runs per alpha and optimiser, "
            f"the same data and start for both optimisers), trained by gradient descent and by Adam for "
            f"{plan.starts.steps} steps. Left: each run's final m against theta/sigma^2, by alpha. Middle: the "
            "fraction of runs that end on the semantic branch (theta/sigma^2 above m), with alpha_c. Right: the "
            "mean test error of each optimiser's runs, over the theory's branches.")


def tasks(b) -> list:
    spec = default_model()
    out = b.curves(spec) + [b.thresholds(spec)]
    for opt in OPTIMIZERS:
        out += b.gd(spec, b.plan.starts, inits=("random",), optimizer=opt)
    return out


def ends_semantic(r: dict) -> bool:
    """A run ended on the semantic branch (:func:`validation.statistics.branch_of` on the run alone)."""
    from validation.statistics import branch_of

    result = {"runs": [{k: number(r[k]) for k in ("theta_over_sigma2", "m", "q")}],
              "model": {"sigma": number(r["sigma"])}, "d": int(number(r["d"]))}
    return branch_of(result) == "semantic"


def table(data: Data, plan) -> list:
    model = model_label(default_model())
    out = theory_rows(data, model, ("test_error",)) + threshold_rows(data, model, plan.threshold_precision)
    for opt in OPTIMIZERS:
        runs = data.gd(model, plan.starts.d, opt)
        by = defaultdict(list)
        for r in runs:
            by[number(r["alpha"])].append(r)
            for q in ("m", "theta_over_sigma2", "train_loss"):
                out.append(row("run", q, number(r[q]), init="random", optimizer=opt, model=model, omega=r["omega"],
                               d=r["d"], alpha=r["alpha"], run=int(r["run_index"]), n=1))
        for a, rs in sorted(by.items()):
            k = sum(ends_semantic(r) for r in rs)
            p = k / len(rs)
            out.append(row("gd", "fraction_semantic", p, float(np.sqrt(p * (1 - p) / len(rs))), init="random",
                           optimizer=opt, model=model, omega=rs[0]["omega"], d=plan.starts.d, alpha=a, n=len(rs)))
        out += gd_rows(data, model, plan.starts.d, opt, quantities=("test_error", "train_loss"))
    return out


def half_crossing(alphas, fractions) -> float:
    """The first ``alpha`` where ``fractions`` rises through one half, by linear interpolation."""
    for i in range(len(alphas) - 1):
        f0, f1 = fractions[i] - 0.5, fractions[i + 1] - 0.5
        if f0 < 0 <= f1:
            return float(alphas[i] + (alphas[i + 1] - alphas[i]) * (-f0) / (f1 - f0))
    return float("nan")


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    model = model_label(default_model())
    for opt in OPTIMIZERS:
        a, p, _ = series(rows, source="gd", quantity="fraction_semantic", optimizer=opt)
        half = half_crossing(a, p)
        how = ("linear interpolation of the fraction of runs whose theta/sigma^2 exceeds m"
               + ("" if np.isfinite(half) else " (not found: it does not rise through one half on the grid)"))
        out.append(key_number(NAME, "half_semantic", f"{opt}: alpha where half the random starts end semantic",
                              half, np.nan, how, model=model, omega=default_model().omega, branch=opt))
    # the same data and start: the optimisers' final training losses compared run by run
    gd = {(r["alpha"], r["run"]): number(r["value"]) for r in select(rows, source="run", quantity="train_loss",
                                                                   optimizer="gd")}
    adam = {(r["alpha"], r["run"]): number(r["value"]) for r in select(rows, source="run", quantity="train_loss",
                                                                     optimizer="adam")}
    common = sorted(set(gd) & set(adam))
    if common:
        rel = np.array([(adam[k] - gd[k]) / gd[k] for k in common])
        out.append(key_number(NAME, "adam_minus_gd_train_loss", "Adam's final training loss minus gradient "
                              "descent's, relative, mean over runs", float(rel.mean()),
                              float(rel.std(ddof=1) / np.sqrt(rel.size)) if rel.size > 1 else np.nan,
                              "paired by run (same data and start); error: standard error over runs", model=model,
                              omega=default_model().omega))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, 3, width=4.8, height=3.8)
    left, mid, right = axes[0]
    for opt in OPTIMIZERS:
        color, marker = OPTIMIZER_STYLE[opt]
        m = select(rows, source="run", quantity="m", optimizer=opt)
        th = {(r["alpha"], r["run"]): number(r["value"]) for r in select(rows, source="run", quantity="theta_over_sigma2",
                                                                          optimizer=opt)}
        xs = [th.get((r["alpha"], r["run"]), np.nan) for r in m]
        ys = [number(r["value"]) for r in m]
        sc = left.scatter(xs, ys, c=[number(r["alpha"]) for r in m], cmap="viridis", marker=marker, s=22,
                          edgecolors=color, label=opt)
        a, p, e = series(rows, source="gd", quantity="fraction_semantic", optimizer=opt)
        mid.errorbar(a, p, yerr=np.where(np.isfinite(e), e, 0.0), fmt=f"-{marker}", color=color, capsize=2, label=opt)
        a, v, e = series(rows, source="gd", quantity="test_error", optimizer=opt)
        right.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=marker, mfc="none", color=color, capsize=2,
                       label=f"{opt}, random start")
    if select(rows, source="run"):
        fig.colorbar(sc, ax=left, label=r"$\alpha$")
    finish_axes(left, r"$m$", xlabel=r"$\theta/\sigma^2$")
    threshold_lines(mid, rows)
    finish_axes(mid, "fraction ending semantic")
    theory_curves(right, rows, "test_error", (*INFORMED, "global"))
    threshold_lines(right, rows)
    finish_axes(right, "test error")
    fig.suptitle("Where random starts end: gradient descent and Adam", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw)

"""Figure 2: the test error of both branches, of the global minimiser and of the linear
baseline against ``alpha``, with ``alpha_c`` and ``alpha_l`` (docs/theory.md, sections
2.7, 3.4 and 3.5), and gradient descent's test error from both starts beside the
simulated baseline. Its key numbers are ``alpha_l``, the baseline, the test errors at the
reference ``alpha``, and where gradient descent crosses the baseline."""
from __future__ import annotations

import math

import numpy as np

from tidyio import number
from attnphase.sweeps.grid import fmt

from ..plan import INFORMED, default_model, model_label
from ..tables import (Data, baseline_rows, gd_rows, key_number, theory_rows, theory_value, threshold_rows)
from . import FigureSpec
from .drawing import (baseline_line, finish_axes, gd_points, new_figure, theory_curves, threshold_lines)

NAME = "test-error"
POINTER = ("docs/validation.md (section 'Where the semantic-start test error crosses the linear baseline') "
           "measures the crossing at larger dimensions, with a bootstrap over seeds")


def title(plan) -> str:
    return f"Test error against alpha at omega = {fmt(default_model().omega)}"


def what(plan) -> str:
    return ("Left: the test error of the semantic and the positional branch, of the global minimiser (the branch "
            "with the lower training loss) and of the linear positional baseline, with alpha_c (solid) and "
            f"alpha_l (dotted; {plan.threshold_precision} precision), and gradient descent from both starts "
            f"(d = {plan.gd.d}). Right: the global minimiser's test error alone, against the baseline, and "
            "gradient descent's baseline fitted on the same data.")


def tasks(b) -> list:
    spec = default_model()
    out = b.curves(spec) + [b.thresholds(spec)] + [b.point(spec, br) for br in INFORMED] + b.gd(spec, b.plan.gd)
    if b.plan.high_check:
        out.append(b.thresholds(spec, "high"))
    return out


def table(data: Data, plan) -> list:
    model = model_label(default_model())
    rows = theory_rows(data, model, ("test_error",)) + baseline_rows(data, model)
    rows += threshold_rows(data, model, plan.threshold_precision)
    rows += gd_rows(data, model, plan.gd.d, quantities=("test_error", "linear_test_error"))
    return rows


def gd_crossing(data: Data, model: str, d: int, upper: str, lower: str, init_upper: str, init_lower: str):
    """Where the mean over runs of ``upper - lower`` (paired by run index: a run's data are
    shared by its starts and its baseline) changes sign from + to -, with its bootstrap
    standard deviation over runs (:func:`validation.statistics.crossing_alpha`);
    None where it does not cross."""
    from validation.statistics import crossing_alpha

    by = {}
    for r in data.gd(model, d):
        by.setdefault(number(r["alpha"]), {}).setdefault(r["init"], {})[int(r["run_index"])] = r
    alphas, up, lo = [], [], []
    for a in sorted(by):
        runs_u, runs_l = by[a].get(init_upper, {}), by[a].get(init_lower, {})
        common = sorted(set(runs_u) & set(runs_l))
        if not common:
            continue
        alphas.append(a)
        up.append(np.array([number(runs_u[k][upper]) for k in common]))
        lo.append(np.array([number(runs_l[k][lower]) for k in common]))
    if len(alphas) < 2:
        return None
    found = crossing_alpha(alphas, up, lo, rng=np.random.default_rng(0))
    if not math.isfinite(found["alpha_cross"]):
        return None
    return found


def key_numbers(data: Data, rows: list, plan) -> list:
    spec = default_model()
    model = model_label(spec)
    out = []
    thr = data.thresholds(model, plan.threshold_precision)
    if thr is not None:
        out.append(key_number(NAME, "alpha_l", "alpha_l: the global minimiser beats the linear baseline",
                              number(thr["alpha_l"]), number(thr["alpha_l_error"]),
                              f"{plan.threshold_precision} precision: difference of the two rules' roots plus the "
                              f"last root-finding step and the propagated test-error quadrature error",
                              model=model, omega=spec.omega,
                              published_for={"quantity": "alpha_l", "omega": spec.omega}))
    high = data.thresholds(model, "high")
    if high is not None:
        out.append(key_number(NAME, "alpha_l_high", "alpha_l in high precision (a convergence check)",
                              number(high["alpha_l"]), number(high["alpha_l_error"]), "high precision",
                              model=model, omega=spec.omega, evidence_for="alpha_l",
                              published_for={"quantity": "alpha_l", "omega": spec.omega}))
    for r in baseline_rows(data, model):
        out.append(key_number(NAME, "linear_test_error", "test error of the linear baseline", r["value"], r["error"],
                              "two-dimensional Gaussian quadrature", model=model, omega=spec.omega,
                              published_for={"quantity": "linear_test_error", "omega": spec.omega}))
    alpha = plan.reference_alpha
    for branch in INFORMED:
        p = data.point(model, branch, alpha)
        if p is not None:
            v, e = theory_value(p, "test_error")
            out.append(key_number(NAME, "test_error", f"test error of the {branch} branch at alpha = {fmt(alpha)}",
                                  v, e, "fast precision, error estimate of the fixed point", model=model,
                                  omega=spec.omega, branch=branch,
                                  published_for={"quantity": "test_error", "omega": spec.omega, "branch": branch,
                                                 "alpha": alpha}))
    found = gd_crossing(data, model, plan.gd.d, "test_error", "linear_test_error", "semantic", "semantic")
    if found is not None:
        out.append(key_number(NAME, "alpha_l_gd", f"gradient descent from the semantic start crosses its "
                              f"simulated baseline (d = {plan.gd.d})", found["alpha_cross"],
                              found["alpha_cross_std"], "linear interpolation of the mean over runs; error: "
                              "bootstrap standard deviation over runs", model=model, omega=spec.omega,
                              evidence_for="alpha_l", published_for={"quantity": "alpha_l", "omega": spec.omega}))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, 2)
    left, right = axes[0]
    theory_curves(left, rows, "test_error", (*INFORMED, "global"))
    baseline_line(left, rows)
    threshold_lines(left, rows)
    gd_points(left, rows, "test_error")
    finish_axes(left, "test error")
    theory_curves(right, rows, "test_error", ("global",))
    baseline_line(right, rows)
    threshold_lines(right, rows)
    gd_points(right, rows, "linear_test_error", inits=("semantic",), color="tab:green", label_prefix="baseline, ")
    finish_axes(right, "test error of the global minimiser")
    fig.suptitle("Test error of the branches, the global minimiser and the linear baseline", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, POINTER)

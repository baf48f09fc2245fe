"""Figure 6: the paper's second positional matrix ``A = [[0.3, 0.7], [0.8, 0.2]]`` at two
nearby values of ``omega``: the test error and the order parameters of both branches
against ``alpha``, with gradient descent from both starts, and each model's thresholds."""
from __future__ import annotations

from tidyio import number
from attnphase.sweeps.grid import fmt

from ..authors import files_of
from ..plan import INFORMED, SECOND_A, model_label
from ..tables import (Data, baseline_rows, gd_rows, key_number, spinodal_rows, theory_rows, threshold_rows)
from . import FigureSpec
from .drawing import (QUANTITY_LABELS, baseline_line, finish_axes, gd_points, new_figure, spinodal_marks,
                      theory_curves, threshold_lines)

NAME = "second-A"
QUANTITIES = ("test_error", "m", "theta_over_sigma2")


def spec_at(omega: float):
    from derivations import ModelSpec

    return ModelSpec(omega=float(omega), A=SECOND_A)


def title(plan) -> str:
    a = "[" + ", ".join("[" + ", ".join(fmt(x) for x in r) + "]" for r in SECOND_A) + "]"
    return f"The second positional matrix A = {a} at omega = " + " and ".join(fmt(w) for w in plan.second_A_omegas)


def what(plan) -> str:
    return ("One row per omega. Left: the test error of both branches and of the global minimiser, the linear "
            "baseline, alpha_c (solid) and alpha_l (dotted). Middle and right: m and theta/sigma^2. Lines: theory "
            f"({plan.curve_precision}); markers: gradient descent (d = {plan.slice_gd.d}, {plan.slice_gd.seeds} "
            "runs per point) from the semantic (circles) and the positional (squares) start.")


def tasks(b) -> list:
    out = []
    for w in b.plan.second_A_omegas:
        spec = spec_at(w)
        out += (b.curves(spec) + [b.thresholds(spec)] + b.gd(spec, b.plan.slice_gd, alphas=b.plan.gd.alphas)
                + [b.authors_curve(f) for f in files_of(spec)])
    return out


def table(data: Data, plan) -> list:
    out = []
    for w in plan.second_A_omegas:
        model = model_label(spec_at(w))
        out += (theory_rows(data, model, QUANTITIES) + baseline_rows(data, model) + spinodal_rows(data, model)
                + threshold_rows(data, model, plan.threshold_precision)
                + gd_rows(data, model, plan.slice_gd.d, quantities=QUANTITIES))
    return out


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    for w in plan.second_A_omegas:
        model = model_label(spec_at(w))
        thr = data.thresholds(model, plan.threshold_precision)
        if thr is not None:
            for q in ("alpha_c", "alpha_l"):
                out.append(key_number(NAME, q, f"{q} at omega = {fmt(w)}", number(thr[q]), number(thr[f"{q}_error"]),
                                      f"{plan.threshold_precision} precision"
                                      + (f"; {thr['threshold_message']}"
                                         if thr.get("threshold_status", "ok") != "ok" else ""),
                                      model=model, omega=w))
        for r in spinodal_rows(data, model):
            out.append(key_number(NAME, f"spinodal_{r['quantity']}", f"{r['quantity']} spinodal of the "
                                  f"{r['branch']} branch at omega = {fmt(w)}", r["value"], r["error"],
                                  f"{plan.curve_precision} branch curve, final bisection bracket", model=model,
                                  omega=w, branch=r["branch"]))
    return out


def draw(rows: list):
    models = sorted({r["model"] for r in rows if r["model"]}, key=lambda m: number(m.split(",")[0].split("=")[1]))
    fig, axes = new_figure(max(1, len(models)), len(QUANTITIES), width=4.6, height=3.6)
    for i, model in enumerate(models):
        for j, q in enumerate(QUANTITIES):
            ax = axes[i, j]
            theory_curves(ax, rows, q, (*INFORMED, "global") if q == "test_error"
                          else INFORMED, model=model)
            gd_points(ax, rows, q, model=model)
            if q == "test_error":
                baseline_line(ax, rows, model=model)
                threshold_lines(ax, rows, model=model)
            else:
                spinodal_marks(ax, rows, model=model)
            finish_axes(ax, QUANTITY_LABELS[q], legend=j == 0, title=model.split(",")[0])
    fig.suptitle("Second positional matrix: theory (lines) and gradient descent (markers)", fontsize=10)
    return fig


def authors(plan) -> tuple:
    return tuple(f for w in plan.second_A_omegas for f in files_of(spec_at(w)))


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, authors=authors)

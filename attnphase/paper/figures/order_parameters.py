"""Figure 1: the order parameters ``m`` and ``theta/sigma^2`` of both branches against
``alpha`` at the default model, the spinodals, and gradient descent from the positional
and the semantic start (docs/theory.md, sections 1.5, 3.1 and 3.6); with the plan's ``gamp``,
GAMP at the same points beside gradient descent (docs/gamp.md)."""
from __future__ import annotations

from attnphase.sweeps.grid import fmt

from ..authors import files_of
from ..plan import GAMP_DAMPINGS, INFORMED, default_model, model_label
from ..tables import Data, gamp_rows, gd_rows, key_number, spinodal_rows, theory_rows, theory_value
from . import FigureSpec
from .drawing import QUANTITY_LABELS, finish_axes, gamp_points, gd_points, new_figure, spinodal_marks, theory_curves

NAME = "order-parameters"
QUANTITIES = ("m", "theta_over_sigma2")


def title(plan) -> str:
    return f"Order parameters against alpha at omega = {fmt(default_model().omega)}"


def what(plan) -> str:
    return (f"The positional overlap m and the semantic overlap theta/sigma^2 of the semantic and the positional "
            f"branch ({plan.curve_precision} precision), where each branch ends (spinodals), and gradient descent "
            f"(d = {plan.gd.d}, {plan.gd.seeds} runs per point, mean and standard error) from the semantic and the "
            f"positional start."
            + (f" GAMP (message passing, docs/gamp.md) at the same points and from the same starts, on numpy's "
               f"draw of the same seed streams (damping {', '.join(fmt(x) for x in GAMP_DAMPINGS)}): the mean and "
               f"standard error over its runs that converged; those that did not are counted, never averaged."
               if plan.gamp else ""))


def tasks(b) -> list:
    spec = default_model()
    return (b.curves(spec) + [b.point(spec, br) for br in INFORMED] + b.gd(spec, b.plan.gd)
            + [b.thresholds(spec)] + [b.authors_curve(f) for f in files_of(spec)]
            + (b.gamp(spec, b.plan.gd) if b.plan.gamp else []))


def table(data: Data, plan) -> list:
    model = model_label(default_model())
    return (theory_rows(data, model, QUANTITIES) + spinodal_rows(data, model)
            + gd_rows(data, model, plan.gd.d, quantities=QUANTITIES + ("q",))
            + (gamp_rows(data, model, plan.gd.d) if plan.gamp else []))


def key_numbers(data: Data, rows: list, plan) -> list:
    spec = default_model()
    model = model_label(spec)
    out = []
    for r in spinodal_rows(data, model):
        out.append(key_number(NAME, f"spinodal_{r['quantity']}", f"{r['quantity']} spinodal of the {r['branch']} "
                              f"branch", r["value"], r["error"], f"{plan.curve_precision} branch curve, final "
                              f"bisection bracket", model=model, omega=spec.omega, branch=r["branch"]))
    alpha = plan.reference_alpha
    for branch, quantities in (("semantic", ("q", "theta")), ("positional", ("q", "m"))):
        p = data.point(model, branch, alpha)
        if p is None:
            continue
        for q in quantities:
            v, e = theory_value(p, q)
            out.append(key_number(NAME, q, f"{q} of the {branch} branch at alpha = {fmt(alpha)}", v, e,
                                  "fast precision, error estimate of the fixed point", model=model, omega=spec.omega,
                                  branch=branch, published_for={"quantity": q, "omega": spec.omega, "branch": branch,
                                                                "alpha": alpha}))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, 2)
    for ax, q in zip(axes[0], QUANTITIES):
        theory_curves(ax, rows, q)
        gd_points(ax, rows, q)
        gamp_points(ax, rows, q)
        spinodal_marks(ax, rows)
        finish_axes(ax, QUANTITY_LABELS[q], legend=q == "m")
    model = rows[0]["model"] if rows else ""
    drawn = ", gradient descent and GAMP" if any(r["source"] == "gamp" for r in rows) else " and gradient descent"
    fig.suptitle(f"Order parameters of both branches{drawn} ({model})", fontsize=10)
    return fig


def authors(plan) -> tuple:
    return files_of(default_model())


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, authors=authors)

"""Figure 3: the difference of the two branches' training losses (free energies),
``F_pos - F_sem``, against ``alpha``; it crosses zero at ``alpha_c`` (docs/theory.md,
section 3.4). Gradient descent's difference of the training losses reached from the two
starts (paired by run: the same data) is drawn beside it."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from tidyio import number
from attnphase.sweeps.grid import fmt

from ..plan import default_model, model_label
from ..tables import Data, key_number, loss_gap_rows, mean_sem, row, threshold_rows
from . import FigureSpec
from .drawing import finish_axes, new_figure, threshold_lines
from .generalisation import gd_crossing

NAME = "loss-gap"
POINTER = ("docs/phase_diagram.md (section 'The default diagram') gives alpha_c at every omega of the diagram, "
           "and docs/numerics.md states the accuracy of each precision")


def title(plan) -> str:
    return f"Difference of the training losses at omega = {fmt(default_model().omega)}"


def what(plan) -> str:
    return ("F_pos - F_sem, the positional branch's training loss (free energy) minus the semantic branch's, "
            "where both exist: negative where the positional minimum is global, zero at alpha_c "
            f"({plan.threshold_precision} precision, solid line). Gradient descent: the training loss reached "
            f"from the positional start minus that from the semantic start, paired by run (d = {plan.gd.d}).")


def tasks(b) -> list:
    spec = default_model()
    out = b.curves(spec) + [b.thresholds(spec)] + b.gd(spec, b.plan.gd)
    if b.plan.high_check:
        out.append(b.thresholds(spec, "high"))
    return out


def gd_gap_rows(data: Data, model: str, d: int) -> list:
    by = defaultdict(lambda: defaultdict(dict))
    for r in data.gd(model, d):
        by[number(r["alpha"])][int(r["run_index"])][r["init"]] = number(r["train_loss"])
    out = []
    for a, runs in sorted(by.items()):
        gaps = [v["positional"] - v["semantic"] for v in runs.values() if len(v) == 2]
        if gaps:
            mean, sem = mean_sem(gaps)
            out.append(row("gd", "train_loss_gap", mean, sem, model=model, omega=data.gd(model, d)[0]["omega"],
                           init="positional - semantic", d=d, alpha=a, n=len(gaps)))
    return out


def table(data: Data, plan) -> list:
    model = model_label(default_model())
    return (loss_gap_rows(data, model) + threshold_rows(data, model, plan.threshold_precision)
            + gd_gap_rows(data, model, plan.gd.d))


def key_numbers(data: Data, rows: list, plan) -> list:
    spec = default_model()
    model = model_label(spec)
    out = []
    thr = data.thresholds(model, plan.threshold_precision)
    if thr is not None:
        out.append(key_number(NAME, "alpha_c", "alpha_c: the two branches' training losses cross",
                              number(thr["alpha_c"]), number(thr["alpha_c_error"]),
                              f"{plan.threshold_precision} precision: difference of the two rules' roots plus the "
                              f"last Newton step", model=model, omega=spec.omega,
                              published_for={"quantity": "alpha_c", "omega": spec.omega}))
    high = data.thresholds(model, "high")
    if high is not None:
        out.append(key_number(NAME, "alpha_c_high", "alpha_c in high precision (a convergence check)",
                              number(high["alpha_c"]), number(high["alpha_c_error"]), "high precision",
                              model=model, omega=spec.omega, evidence_for="alpha_c",
                              published_for={"quantity": "alpha_c", "omega": spec.omega}))
    # below alpha_c the semantic start ends higher: semantic - positional goes from + to -
    found = gd_crossing(data, model, plan.gd.d, "train_loss", "train_loss", "semantic", "positional")
    if found is not None:
        out.append(key_number(NAME, "alpha_c_gd", f"gradient descent: the training losses from the two starts "
                              f"cross (d = {plan.gd.d})", found["alpha_cross"], found["alpha_cross_std"],
                              "linear interpolation of the mean over runs; error: bootstrap standard deviation "
                              "over runs", model=model, omega=spec.omega, evidence_for="alpha_c",
                              published_for={"quantity": "alpha_c", "omega": spec.omega}))
    return out


def draw(rows: list):
    from ..tables import series

    fig, axes = new_figure(1, 1, width=6.0)
    ax = axes[0, 0]
    a, v, e = series(rows, source="theory", quantity="train_loss_gap")
    ax.plot(a, v, "-", color="black", lw=1.6, label="theory")
    ga, gv, ge = series(rows, source="gd", quantity="train_loss_gap")
    if ga.size:
        ax.errorbar(ga, gv, yerr=np.where(np.isfinite(ge), ge, 0.0), fmt="o", mfc="none", color="tab:purple",
                    capsize=2, label="GD: positional start - semantic start")
    ax.axhline(0.0, color="grey", lw=0.8)
    threshold_lines(ax, rows)
    finish_axes(ax, r"$F_{pos} - F_{sem}$")
    fig.suptitle("Training loss of the positional branch minus the semantic one", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, POINTER)

"""Figure 9: a rank-two student (``Q`` of shape ``d x 2``, docs/theory.md, section 4) trained
by gradient descent from random starts, against ``alpha``: how much of each kind of
attention its two directions carry, and its test error against the simulated linear
baseline. The general theory's branches (``numerics.api.follow_general``, the QMC
integrator) are not drawn: at draft precision they cost about ten minutes per ``alpha`` on
two cores; docs/studies/qmc_integrator.md has them on a coarse grid. The rank-one theory's
global minimiser is drawn for comparison, labelled as such."""
from __future__ import annotations

import numpy as np

from numerics.tidy import number

from ..plan import default_model, model_label
from ..tables import Data, gd_rows, key_number, series, theory_rows
from . import FigureSpec
from .drawing import finish_axes, gd_points, new_figure, theory_curves
from .generalisation import gd_crossing

NAME = "rank-two"
OVERLAPS = (("theta_over_sigma2_col_max", "theta/sigma^2, larger column", "tab:blue", "-o"),
            ("theta_over_sigma2_col_min", "theta/sigma^2, smaller column", "tab:blue", ":o"),
            ("m_col_max", "|m|, larger column", "tab:orange", "-s"),
            ("m_col_min", "|m|, smaller column", "tab:orange", ":s"))
QUANTITIES = tuple(q for q, *_ in OVERLAPS) + ("q_eig_1", "q_eig_2", "test_error", "linear_test_error", "train_loss")


def spec():
    return default_model().replace(rank=2)


def title(plan) -> str:
    return "A rank-two student from random starts (simulation only)"


def what(plan) -> str:
    return (f"Gradient descent on a rank-two student (d = {plan.rank_two.d}, {plan.rank_two.seeds} runs per alpha, "
            "random starts). Left: the semantic overlap theta/sigma^2 and the positional overlap |m| of each of the "
            "student's two directions (the larger and the smaller over the two columns). Right: its test error and "
            "the linear baseline fitted on the same data, with the rank-one theory's global minimiser for "
            "comparison. The rank-two theory's branches are not drawn (about ten minutes per alpha on two cores); "
            "docs/studies/qmc_integrator.md gives them at alpha = 0.5, 1.5, 2.5, 3.5, where the mixed branch (one "
            "direction semantic, one positional) is the global minimum from alpha = 1.5 on.")


def tasks(b) -> list:
    return b.curves(default_model()) + b.gd(spec(), b.plan.rank_two, inits=("random",))


def table(data: Data, plan) -> list:
    return (gd_rows(data, model_label(spec()), plan.rank_two.d, quantities=QUANTITIES)
            + theory_rows(data, model_label(default_model()), ("test_error",)))


def key_numbers(data: Data, rows: list, plan) -> list:
    model = model_label(spec())
    out = []
    found = gd_crossing(data, model, plan.rank_two.d, "test_error", "linear_test_error", "random", "random")
    if found is not None:
        out.append(key_number(NAME, "beats_baseline", "the rank-two student's test error falls below its simulated "
                              "baseline", found["alpha_cross"], found["alpha_cross_std"], "linear interpolation of "
                              "the mean over runs; error: bootstrap standard deviation over runs", model=model,
                              omega=spec().omega))
    found = gd_crossing(data, model, plan.rank_two.d, "m_col_max", "theta_over_sigma2_col_max", "random", "random")
    if found is not None:
        out.append(key_number(NAME, "crossover", "the larger semantic overlap theta/sigma^2 overtakes the larger "
                              "positional one |m|", found["alpha_cross"], found["alpha_cross_std"],
                              "linear interpolation of the mean over runs; error: bootstrap standard deviation over "
                              "runs", model=model, omega=spec().omega))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, 2, width=5.5)
    left, right = axes[0]
    for q, label, color, style in OVERLAPS:
        a, v, e = series(rows, source="gd", quantity=q)
        if a.size:
            left.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=style, color=color, mfc="none", capsize=2,
                          label=label)
    finish_axes(left, "overlap of each direction")
    gd_points(right, rows, "test_error", inits=("random",), color="tab:purple", label_prefix="rank two, ")
    gd_points(right, rows, "linear_test_error", inits=("random",), color="tab:green", label_prefix="baseline, ")
    theory_curves(right, rows, "test_error", ("global",), label_prefix="rank-one ")
    finish_axes(right, "test error")
    fig.suptitle("Rank-two student from random starts: simulation only (rank-two theory not drawn)",
                 fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw)

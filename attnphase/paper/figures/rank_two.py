"""Figure 9: a rank-two student (``Q`` of shape ``d x 2``, docs/theory.md, section 4) trained by
gradient descent from random starts, against ``alpha``, three ways: the authors' runs (their
stored means, ``attnphase/paper/authors_data/``), our simulator, and our theory's rank-two
branches (``numerics.api.follow``, draft QMC, at the plan's few ``rank_two_theory_alphas``).

The per-column overlaps (the larger and the smaller ``|m|`` and ``theta / sigma^2`` over the two
columns, as the paper's appendix reports them) are not invariant under rotations of the columns
of ``Q``; gradient descent's columns from random starts are such a rotation of the theory's
role-by-role directions. So the per-column values compare the two simulators only, and the
theory is compared through the invariants: the singular values ``m_sv_1`` of ``m`` and
``theta_sv_1 / sigma^2`` of ``theta / sigma^2``, which for one positional direction and a
rank-one teacher are the norms of the two columns' values. For gradient descent these are the
root mean square over runs (the authors' from their columns' means and standard deviations,
:func:`attnphase.paper.authors.column_invariant`; ours from each run)."""
from __future__ import annotations

import math

import numpy as np

from tidyio import number

from ..authors import INVARIANT_OF_COLUMNS, RANK_TWO_RUNS, rank_two_gd
from ..plan import default_model, model_label
from ..tables import Data, exists, gd_rows, key_number, row, series
from . import FigureSpec
from .drawing import finish_axes, new_figure
from .generalisation import gd_crossing

NAME = "rank-two"
#: the rank-two branches drawn (the trivial point is no end of gradient descent from these starts)
BRANCHES = ("positional", "mixed", "semantic")
BRANCH_STYLES = {"positional": "--", "mixed": "-", "semantic": ":"}
COLUMNS = (("m_col_max", "m_col_min", "|m| of each column"),
           ("theta_over_sigma2_col_max", "theta_over_sigma2_col_min", "theta/sigma^2 of each column"))
INVARIANTS = (("m_sv_1", "m_singular_values_1", "tab:orange", "m_sv"),
              ("theta_sv_1_over_sigma2", "theta_singular_values_1", "tab:blue", "theta_sv/sigma^2"))
QUANTITIES = ("m_col_max", "m_col_min", "theta_over_sigma2_col_max", "theta_over_sigma2_col_min", "q_eig_1",
              "q_eig_2", "test_error", "linear_test_error", "train_loss")
THEORY_QUANTITIES = ("test_error", "train_loss")


def spec():
    return default_model().replace(rank=2)


def title(plan) -> str:
    return "A rank-two student from random starts: the authors' runs, ours and our theory"


def what(plan) -> str:
    return (f"Gradient descent on a rank-two student from random starts: the authors' runs (d = 1000, "
            f"{RANK_TWO_RUNS} runs per alpha, 5000 steps; crosses) and ours (d = {plan.rank_two.d}, "
            f"{plan.rank_two.seeds} runs per alpha, {plan.rank_two.steps} steps; triangles), mean and standard "
            "error. Top: |m| and theta/sigma^2 of each of the student's two columns (the larger, solid, and the "
            "smaller, dotted); these depend on how the columns are rotated and compare the two simulators only. "
            "Bottom left: the invariants m_sv and theta_sv/sigma^2 (root mean square over runs) against our "
            f"theory's rank-two branches ({plan.curve_precision} QMC, alpha = "
            + ", ".join(f"{a:g}" for a in plan.rank_two_theory_alphas) + "; lines: positional dashed, mixed "
            "solid, semantic dotted). Bottom right: the test error, the same three, and our simulated linear "
            "baseline.")


def tasks(b) -> list:
    return ([b.curve(spec(), br, alphas=b.plan.rank_two_theory_alphas) for br in BRANCHES]
            + b.gd(spec(), b.plan.rank_two, inits=("random",)))


def _root_mean_square_rows(data: Data, model: str, d: int) -> list:
    """Our runs' column invariants: the root mean square over runs of the norm of the two columns'
    values, with its error by the delta method."""
    groups = {}
    for r in data.gd(model, d):
        if r["init"] == "random":
            groups.setdefault(number(r["alpha"]), []).append(r)
    out = []
    for a, runs in sorted(groups.items()):
        for name, hi, lo in INVARIANT_OF_COLUMNS:
            v = np.array([math.hypot(number(r[hi]), number(r[lo])) for r in runs])
            rms = float(np.sqrt(np.mean(v**2)))
            err = float(np.std(v**2, ddof=1) / math.sqrt(v.size) / (2 * rms)) if v.size > 1 and rms else math.nan
            out.append(row("gd", name, rms, err, model=model, omega=runs[0]["omega"], init="random", optimizer="gd",
                           d=d, alpha=a, n=v.size))
    return out


def _authors_rows(model: str) -> list:
    return [row("authors_gd", q, v, e, model=model, omega=p["omega"], init="random", optimizer="gd", d=p["d"],
                alpha=p["alpha"], n=RANK_TWO_RUNS)
            for p in rank_two_gd() for q, (v, e) in p["values"].items()]


def _theory_rows(data: Data, model: str) -> list:
    out = []
    for b in BRANCHES:
        for r in data.curve(model, b):
            if not exists(r):
                continue
            s2 = number(r["sigma"]) ** 2
            for name, column, _, _ in INVARIANTS:
                scale = 1.0 / s2 if column.startswith("theta") else 1.0
                out.append(row("theory", name, number(r[column]) * scale, number(r.get(f"{column}_error")) * scale,
                               model=model, omega=r["omega"], branch=b, alpha=r["alpha"]))
            for q in THEORY_QUANTITIES:
                out.append(row("theory", q, number(r[q]), number(r.get(f"{q}_error")), model=model, omega=r["omega"],
                               branch=b, alpha=r["alpha"]))
    return out


def table(data: Data, plan) -> list:
    model = model_label(spec())
    return (gd_rows(data, model, plan.rank_two.d, quantities=QUANTITIES)
            + _root_mean_square_rows(data, model, plan.rank_two.d) + _authors_rows(model) + _theory_rows(data, model))


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


def _points(ax, rows, source: str, quantity: str, color: str, style: str, label: str) -> None:
    a, v, e = series(rows, source=source, quantity=quantity)
    if a.size:
        ax.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=style, color=color, ms=4, capsize=2, lw=0.9,
                    mfc="none" if source == "gd" else color, label=label)


def draw(rows: list):
    fig, axes = new_figure(2, 2, width=5.5)
    for ax, (hi, lo, label), color in zip(axes[0], COLUMNS, ("tab:orange", "tab:blue")):
        for quantity, line, which in ((hi, "-", "larger"), (lo, ":", "smaller")):
            _points(ax, rows, "authors_gd", quantity, "0.3", "x" + line, f"authors' GD, {which}")
            _points(ax, rows, "gd", quantity, color, "^" + line, f"our GD, {which}")
        finish_axes(ax, label, title="per column: the two simulators")
    inv, err = axes[1]
    for name, _, color, label in INVARIANTS:
        _points(inv, rows, "authors_gd", name, color, "x", f"authors' GD, {label}")
        _points(inv, rows, "gd", name, color, "^", f"our GD, {label}")
        for b in BRANCHES:
            a, v, _ = series(rows, source="theory", quantity=name, branch=b)
            if a.size:
                inv.plot(a, v, BRANCH_STYLES[b], color=color, lw=1.4, marker=".", label=f"theory {b}, {label}")
    finish_axes(inv, "invariant", legend=False, title="invariants: both simulators and the theory")
    inv.legend(fontsize=6, ncol=2, loc="upper left")
    _points(err, rows, "authors_gd", "test_error", "0.3", "x", "authors' GD")
    _points(err, rows, "gd", "test_error", "tab:purple", "^", "our GD")
    _points(err, rows, "gd", "linear_test_error", "tab:green", "s", "our linear baseline")
    for b in BRANCHES:
        a, v, _ = series(rows, source="theory", quantity="test_error", branch=b)
        if a.size:
            err.plot(a, v, BRANCH_STYLES[b], color="black", lw=1.4, marker=".", label=f"theory, {b}")
    finish_axes(err, "test error")
    fig.suptitle("Rank-two student from random starts: the authors' GD, ours, and our theory's branches", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw)

"""What the figures draw alike: colours and markers of the branches and starts, theory
curves, gradient-descent points with their error bars, thresholds and spinodals, and
saving a Figure whole. Never imports pyplot (no display)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from tidyio import atomic_output, number

from ..plan import INFORMED
from ..tables import select, series

BRANCH_COLORS = {"semantic": "tab:blue", "positional": "tab:orange", "global": "black"}
INIT_MARKERS = {"semantic": "o", "positional": "s", "random": "^"}
GAMP_MARKERS = {"semantic": "x", "positional": "+"}
QUANTITY_LABELS = {"m": r"$m$", "theta_over_sigma2": r"$\theta/\sigma^2$", "q": r"$q$", "test_error": "test error",
                   "train_loss": "training loss", "train_loss_gap": r"$F_{pos} - F_{sem}$",
                   "linear_test_error": "linear baseline"}
ALPHA_LABEL = r"$\alpha = n/d$"


def new_figure(rows: int, cols: int, width: float = 5.0, height: float = 3.8):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def theory_curves(ax, rows, quantity: str, branches: Sequence[str] = INFORMED, label_prefix="",
                  color=None, **match) -> None:
    """Each branch's theory curve (the global minimiser's drawn thin and black)."""
    for b in branches:
        a, v, _ = series(rows, source="theory", quantity=quantity, branch=b, **match)
        if a.size:
            style = {"lw": 2.2, "alpha": 0.35, "color": "black"} if b == "global" else \
                {"lw": 1.6, "color": color or BRANCH_COLORS[b], "ls": "-" if b == "semantic" else "--"}
            ax.plot(a, v, label=f"{label_prefix}theory, {b}", **style)


def gd_points(ax, rows, quantity: str, inits: Sequence[str] = INFORMED, color=None,
              label_prefix="", **match) -> None:
    """Means over runs with their standard errors, one marker per start."""
    for init in inits:
        a, v, e = series(rows, source="gd", quantity=quantity, init=init, **match)
        if a.size:
            c = color or BRANCH_COLORS.get(init, "tab:green")
            ax.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=INIT_MARKERS.get(init, "D"), color=c,
                        mfc="none", ms=5, capsize=2, lw=1, label=f"{label_prefix}GD, {init} start")


def gamp_points(ax, rows, quantity: str, inits: Sequence[str] = INFORMED, **match) -> None:
    """GAMP's means over its converged runs with their standard errors (source ``gamp``), filled
    markers beside gradient descent's open ones, each labelled with its count of converged runs."""
    for init in inits:
        a, v, e = series(rows, source="gamp", quantity=quantity, init=init, **match)
        if a.size:
            ax.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=GAMP_MARKERS.get(init, "P"),
                        color=BRANCH_COLORS.get(init, "tab:green"), ms=5, capsize=2, lw=1, ls="none",
                        label=f"GAMP, {init} start (converged runs)")


def threshold_lines(ax, rows, **match) -> None:
    """``alpha_c`` (solid) and ``alpha_l`` (dashed) as vertical lines."""
    for q, ls in (("alpha_c", "-"), ("alpha_l", ":")):
        for r in select(rows, source="threshold", quantity=q, **match):
            a = number(r["value"])
            if math.isfinite(a):
                ax.axvline(a, color="grey", ls=ls, lw=1, label=rf"$\{q}$ = {a:.4g}")


def spinodal_marks(ax, rows, **match) -> None:
    for r in select(rows, source="spinodal", **match):
        a = number(r["value"])
        ax.axvline(a, color=BRANCH_COLORS.get(r["branch"], "grey"), ls="-.", lw=0.8, alpha=0.7,
                   label=f"spinodal, {r['branch']} ({r['quantity']})")


def baseline_line(ax, rows, **match) -> None:
    for r in select(rows, source="baseline", **match):
        ax.axhline(number(r["value"]), color="tab:green", lw=1.2, label="linear baseline (theory)")


def finish_axes(ax, ylabel: str, xlabel: str = ALPHA_LABEL, legend: bool = True, title: str = "") -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def save(fig, paths: Iterable[Path]) -> list:
    """The figure written whole to each path (format by suffix)."""
    written = []
    for path in paths:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=130)
        written.append(Path(path))
    return written

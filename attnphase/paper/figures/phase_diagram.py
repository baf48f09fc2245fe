"""Figure 4: the ``(alpha, omega)`` phase diagram (docs/theory.md, section 3; docs/phase_diagram.md):
the training-loss difference and the global minimiser's test error minus the linear
baseline's over the plane, ``alpha_c(omega)``, ``alpha_l(omega)`` and the spinodals; beside
it the same two differences from gradient descent from the two starts. Its key numbers
are ``alpha_c`` and ``alpha_l`` at every ``omega`` of the grid, against the published ones."""
from __future__ import annotations

import math

import numpy as np

from tidyio import number
from attnphase.sweeps.figures import simulation_points, theory_points

from ..plan import INFORMED, default_model, model_label
from ..tables import Data, key_number, published_rows, row, select, spinodal_rows, threshold_rows
from . import FigureSpec
from .drawing import new_figure

NAME = "phase-diagram"
POINTER = ("docs/validation.md (section 'Where the semantic-start test error crosses the linear baseline') "
           "compares alpha_l with gradient descent at larger dimensions")
DIFFERENCES = (("train_loss_diff", "training loss: positional - semantic"),
               ("test_error_diff", "test error: global minimiser - linear baseline"))


def title(plan) -> str:
    return "The (alpha, omega) phase diagram"


def what(plan) -> str:
    return (f"Theory ({plan.curve_precision} branch curves, thresholds in {plan.threshold_precision} precision) "
            f"over {len(plan.diagram_omegas)} values of omega and {len(plan.alphas)} of alpha: the training loss of "
            "the positional branch minus the semantic one (negative where the positional minimum is global), and "
            "the global minimiser's test error minus the linear baseline's (negative where attention beats the "
            "baseline), with alpha_c(omega) (solid), alpha_l(omega) (dashed), the spinodals (crosses) and the "
            "published thresholds (open markers: the authors' theory numbers). Below: "
            f"the same differences from gradient descent (d = {plan.plane_gd.d}, {plan.plane_gd.seeds} run(s) per "
            f"point and start, {len(plan.plane_omegas)} x {len(plan.plane_gd.alphas)} points), where the branch is "
            "the start and the baseline is the one fitted on the same data.")


def tasks(b) -> list:
    out = []
    for w in b.plan.diagram_omegas:
        spec = default_model(w)
        out += b.curves(spec) + [b.thresholds(spec)]
    for w in b.plan.plane_omegas:
        out += b.gd(default_model(w), b.plan.plane_gd)
    return out


def table(data: Data, plan) -> list:
    out = []
    curve_rows = []
    for w in plan.diagram_omegas:
        model = model_label(default_model(w))
        curve_rows += [r for b in INFORMED for r in data.curve(model, b)]
        out += threshold_rows(data, model, plan.threshold_precision) + spinodal_rows(data, model)
    if curve_rows:
        for p in theory_points(curve_rows):
            for q, _ in DIFFERENCES:
                out.append(row("theory", q, p[q], p[f"{q}_error"], omega=p["omega"], alpha=p["alpha"],
                               branch=p["global_branch"]))
    gd = [r for w in plan.plane_omegas for r in data.gd(model_label(default_model(w)), plan.plane_gd.d)]
    if gd:
        for p in simulation_points(gd):
            for q, _ in DIFFERENCES:
                out.append(row("gd", q, p[q], p[f"{q}_error"], omega=p["omega"], alpha=p["alpha"],
                               branch=p["global_branch"], d=plan.plane_gd.d, n=p["n_runs"]))
    return out + published_rows(("alpha_c", "alpha_l"))


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    for w in plan.diagram_omegas:
        model = model_label(default_model(w))
        thr = data.thresholds(model, plan.threshold_precision)
        if thr is None:
            continue
        for q, what_ in (("alpha_c", "the training losses cross"), ("alpha_l", "the global minimiser beats the "
                                                                               "linear baseline")):
            out.append(key_number(NAME, q, f"{q} ({what_})", number(thr[q]), number(thr[f"{q}_error"]),
                                  f"{plan.threshold_precision} precision, from the diagram's branch curves"
                                  + (f"; {thr['threshold_status']}: {thr['threshold_message']}"
                                     if thr.get("threshold_status", "ok") != "ok" else ""),
                                  model=model, omega=w, published_for={"quantity": q, "omega": w}))
    return out


def _edges(v: np.ndarray) -> np.ndarray:
    if v.size == 1:
        return np.array([v[0] - 0.05, v[0] + 0.05])
    mid = 0.5 * (v[1:] + v[:-1])
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _colour_map(fig, ax, rows, source, quantity, label):
    from matplotlib.colors import Normalize

    sel = select(rows, source=source, quantity=quantity)
    omegas = np.array(sorted({number(r["omega"]) for r in sel}))
    alphas = np.array(sorted({number(r["alpha"]) for r in sel}))
    ax.set_facecolor("0.85")  # grey: no value there (a branch missing or not converged)
    if not sel:
        return
    Z = np.full((omegas.size, alphas.size), np.nan)
    wi = {w: i for i, w in enumerate(omegas)}
    ai = {a: j for j, a in enumerate(alphas)}
    for r in sel:
        Z[wi[number(r["omega"])], ai[number(r["alpha"])]] = number(r["value"])
    finite = Z[np.isfinite(Z)]
    vmax = float(np.max(np.abs(finite))) if finite.size else 1.0
    vmax = vmax if vmax > 0 else 1.0
    mesh = ax.pcolormesh(_edges(alphas), _edges(omegas), np.ma.masked_invalid(Z), cmap="RdBu_r",
                         norm=Normalize(-vmax, vmax), shading="flat")
    fig.colorbar(mesh, ax=ax, label=label)
    ax.set_xlim(_edges(alphas)[[0, -1]])
    ax.set_ylim(_edges(omegas)[[0, -1]])


def _overlay(ax, rows) -> None:
    for q, style, color in (("alpha_c", "-o", "black"), ("alpha_l", "--s", "tab:green")):
        sel = sorted(select(rows, source="threshold", quantity=q), key=lambda r: number(r["omega"]))
        w = np.array([number(r["omega"]) for r in sel])
        a = np.array([number(r["value"]) for r in sel])
        e = np.array([number(r["error"]) for r in sel])
        ok = np.isfinite(a)
        if ok.any():
            ax.errorbar(a[ok], w[ok], xerr=np.where(np.isfinite(e[ok]), e[ok], 0.0), fmt=style, color=color, ms=3,
                        lw=1.2, capsize=2, label=rf"$\{q}(\omega)$")
        pub = select(rows, source="published", quantity=q)
        if pub:
            ax.plot([number(r["value"]) for r in pub], [number(r["omega"]) for r in pub], style[-1], mfc="none",
                    color=color, ms=7, label=rf"$\{q}$, the paper")
    for branch, color in (("semantic", "tab:purple"), ("positional", "tab:orange")):
        sel = select(rows, source="spinodal", branch=branch)
        pts = [(number(r["value"]), number(r["omega"])) for r in sel if math.isfinite(number(r["value"]))]
        if pts:
            a, w = zip(*pts)
            ax.plot(a, w, "x", color=color, ms=5, label=f"spinodal ({branch})")


def draw(rows: list):
    fig, axes = new_figure(2, 2, width=6.0, height=4.2)
    for i, source in enumerate(("theory", "gd")):
        for j, (q, label) in enumerate(DIFFERENCES):
            ax = axes[i, j]
            _colour_map(fig, ax, rows, source, q, label)
            _overlay(ax, rows)
            ax.set_xlabel(r"$\alpha = n/d$")
            ax.set_ylabel(r"$\omega$")
            ax.set_title(f"{'theory' if source == 'theory' else 'gradient descent'}: {label}", fontsize=9)
    if axes[0, 0].get_legend_handles_labels()[0]:
        axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle("Phase diagram: theory (top) and gradient descent (bottom)", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, POINTER)

"""Figure 7: finite-size scaling. Gradient descent at several dimensions ``d`` at one
``alpha`` of the default model, from both starts, against ``1/d``, with the weighted fit
``a + b/d`` (:func:`validation.statistics.fit_finite_size`) and the theory at ``1/d = 0``.
Its key numbers are the fits' intercepts against the theory."""
from __future__ import annotations

import numpy as np

from tidyio import number
from attnphase.sweeps.grid import fmt

from ..plan import INFORMED, default_model, model_label
from ..tables import Data, gd_rows, key_number, row, select, theory_value
from . import FigureSpec
from .drawing import BRANCH_COLORS, INIT_MARKERS, QUANTITY_LABELS, new_figure

NAME = "finite-size"
POINTER = ("docs/validation.md (its finite-size scan and its caveats: the positional start's q converges slowly) "
           "is the same study at larger dimensions")
#: (start, quantity) pairs drawn and fitted: each start's own order parameter, and both starts' errors
PANELS = (("positional", "m"), ("semantic", "theta_over_sigma2"), ("both", "test_error"), ("both", "train_loss"))


def title(plan) -> str:
    return f"Finite-size scaling at alpha = {fmt(plan.finite_size.alphas[0])}, omega = {fmt(default_model().omega)}"


def what(plan) -> str:
    return (f"Gradient descent at d = {', '.join(str(d) for d in plan.finite_size_ds)} ({plan.finite_size.seeds} "
            "runs per d and start; mean and standard error) against 1/d, the weighted fit a + b/d (lines) and the "
            "theory (fast precision, stars at 1/d = 0): the positional overlap m from the positional start, "
            "theta/sigma^2 from the semantic start, and the test error and the training loss from both.")


def tasks(b) -> list:
    spec = default_model()
    alpha = b.plan.finite_size.alphas[0]
    out = [b.point(spec, br, alpha) for br in INFORMED]
    for d in b.plan.finite_size_ds:
        out += b.gd(spec, b.plan.finite_size, d=d)
    return out


def _fits(rows: list, init: str, quantity: str):
    from validation.statistics import fit_finite_size

    sel = sorted(select(rows, source="gd", init=init, quantity=quantity), key=lambda r: number(r["d"]))
    sel = [r for r in sel if number(r["error"]) > 0]
    if len(sel) < 3:
        return None
    return fit_finite_size([number(r["d"]) for r in sel], [number(r["value"]) for r in sel],
                           [number(r["error"]) for r in sel])


def table(data: Data, plan) -> list:
    spec = default_model()
    model = model_label(spec)
    alpha = plan.finite_size.alphas[0]
    out = []
    for d in plan.finite_size_ds:
        out += gd_rows(data, model, d, quantities=("m", "theta_over_sigma2", "q", "test_error", "train_loss"))
    for branch in INFORMED:
        p = data.point(model, branch, alpha)
        if p is not None:
            for q in ("m", "theta_over_sigma2", "q", "test_error", "train_loss"):
                v, e = theory_value(p, q)
                out.append(row("theory", q, v, e, model=model, omega=spec.omega, branch=branch, alpha=alpha))
    for init in INFORMED:
        for q in ("m", "theta_over_sigma2", "q", "test_error", "train_loss"):
            fit = _fits(out, init, q)
            if fit is not None:
                out.append(row("fit", f"{q}_intercept", fit["a"], fit["a_se_scaled"], model=model, omega=spec.omega,
                               init=init, alpha=alpha))
                out.append(row("fit", f"{q}_slope", fit["b"], fit["b_se"], model=model, omega=spec.omega, init=init,
                               alpha=alpha))
    return out


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    spec = default_model()
    model = model_label(spec)
    for init, quantities in (("semantic", ("theta_over_sigma2", "q", "test_error", "train_loss")),
                             ("positional", ("m", "q", "test_error", "train_loss"))):
        for q in quantities:
            fit = select(rows, source="fit", init=init, quantity=f"{q}_intercept")
            th = select(rows, source="theory", branch=init, quantity=q)
            if not fit:
                continue
            ref = (number(th[0]["value"]), number(th[0]["error"]), "our theory (fast precision)") if th else None
            out.append(key_number(NAME, f"{q}_intercept", f"{q} from the {init} start, extrapolated to 1/d = 0",
                                  number(fit[0]["value"]), number(fit[0]["error"]), "weighted fit a + b/d; error: "
                                  "standard error scaled by the square root of chi^2 per degree of freedom where it "
                                  "exceeds one", model=model, omega=spec.omega, branch=init, theory=ref))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, len(PANELS), width=4.2, height=3.6)
    for ax, (which, q) in zip(axes[0], PANELS):
        inits = INFORMED if which == "both" else (which,)
        for init in inits:
            sel = sorted(select(rows, source="gd", init=init, quantity=q), key=lambda r: number(r["d"]))
            x = np.array([1.0 / number(r["d"]) for r in sel])
            v = np.array([number(r["value"]) for r in sel])
            e = np.array([number(r["error"]) for r in sel])
            color = BRANCH_COLORS[init]
            ax.errorbar(x, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=INIT_MARKERS[init], mfc="none", color=color,
                        capsize=2, label=f"GD, {init} start")
            a = select(rows, source="fit", init=init, quantity=f"{q}_intercept")
            b = select(rows, source="fit", init=init, quantity=f"{q}_slope")
            if a and b and x.size:
                xs = np.linspace(0.0, float(x.max()), 20)
                ax.plot(xs, number(a[0]["value"]) + number(b[0]["value"]) * xs, "-", color=color, lw=1)
            for r in select(rows, source="theory", branch=init, quantity=q):
                ax.plot([0.0], [number(r["value"])], "*", color=color, ms=11, label=f"theory, {init}")
        ax.set_xlabel(r"$1/d$")
        ax.set_ylabel(QUANTITY_LABELS.get(q, q))
        ax.legend(fontsize=7)
    fig.suptitle("Finite-size scaling of gradient descent against the theory", fontsize=10)
    return fig


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw, POINTER)

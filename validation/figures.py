"""Figures of ``attnphase validate``, drawn from its CSV files alone, and a Markdown table."""
from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from numerics.api import COMPETING_BRANCHES
from tidyio import atomic_output, read_rows


_PANELS = (("test_error", "test error"), ("train_loss", "training loss"),
           ("theta_over_sigma2", r"$\theta/\sigma^2$"), ("m", "$m$"))
#: the general model's panels: its outputs and the largest singular values of theta and m
_GENERAL_PANELS = (("test_error", "test error"), ("train_loss", "training loss"),
                   ("theta_sv_1", r"largest singular value of $\theta$"), ("m_sv_1", "largest singular value of $m$"))


_COLORS = {"semantic": "tab:blue", "positional": "tab:orange", "random": "tab:green",
           "trivial": "tab:gray", "mixed": "tab:purple", "linear": "k"}


def _f(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def plot_validate(out: str) -> str:
    """Fig. 3-like figure from ``validate.csv`` (+ ``theory_curves.csv`` when present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(os.path.join(out, "validate.csv"))
    curves_path = os.path.join(out, "theory_curves.csv")
    curves = read_rows(curves_path) if os.path.exists(curves_path) else []
    general = not any(r["quantity"] == "m" for r in rows)
    branches = tuple(dict.fromkeys(c["branch"] for c in curves)) if general else COMPETING_BRANCHES + ("linear",)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _GENERAL_PANELS if general else _PANELS):
        for branch in branches:
            pts = sorted(((_f(c["alpha"]), _f(c["value"])) for c in curves
                          if c["branch"] == branch and c["quantity"] == qty and c["converged"] == "True"))
            if pts:
                ax.plot(*zip(*pts), color=_COLORS[branch], ls="--" if branch == "linear" else "-",
                        label=f"theory {branch}")
        for init in sorted({r["init"] for r in rows}):
            sel = [r for r in rows if r["init"] == init and r["quantity"] == qty]
            if not sel:
                continue
            for branch in sorted({r["branch"] for r in sel}) if general else (None,):
                part = [r for r in sel if branch is None or r["branch"] == branch]
                # the general model's runs are grouped by the branch they reached: one marker per branch
                ax.errorbar([_f(r["alpha"]) for r in part], [_f(r["sim_mean"]) for r in part],
                            yerr=[_f(r["sim_sem"]) for r in part], fmt="o" if init != "linear" else "s",
                            color=_COLORS.get(init, "k"), capsize=3, ms=4,
                            mfc="none" if branch not in (None, init, "linear") else None,
                            label="sim linear baseline" if init == "linear" else
                            f"sim {init} start" + (f" ({branch})" if branch else ""))
        ax.set_xlabel(r"$\alpha$")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    d = rows[0]["d"] if rows else "?"
    fig.suptitle(f"theory (lines) vs simulation (mean ± sem over seeds), d = {d}", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "validate.png")
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def plot_dscan(out: str) -> str:
    """Quantities against ``1/d`` with the fitted lines and the theory at ``1/d = 0``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(os.path.join(out, "dscan.csv"))
    fits = read_rows(os.path.join(out, "dscan_fit.csv"))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _PANELS):
        for init in sorted({r["init"] for r in rows}):
            sel = sorted((r for r in rows if r["init"] == init and r["quantity"] == qty), key=lambda r: _f(r["d"]))
            if not sel:
                continue
            color = _COLORS.get(init, "k")
            x = [1 / _f(r["d"]) for r in sel]
            ax.errorbar(x, [_f(r["sim_mean"]) for r in sel], yerr=[_f(r["sim_sem"]) for r in sel], fmt="o",
                        color=color, capsize=3, ms=4, label=f"sim {init}")
            for fit in fits:
                if fit["init"] == init and fit["quantity"] == qty:
                    xx = np.linspace(0, max(x), 20)
                    ax.plot(xx, _f(fit["a"]) + _f(fit["b"]) * xx, color=color, lw=1)
                    if math.isfinite(_f(fit["theory"])):
                        ax.plot([0], [_f(fit["theory"])], marker="*", color=color, ms=10, ls="none")
        ax.set_xlabel("1/d")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    fig.suptitle("finite-size scan: fit a + b/d (lines), theory at 1/d = 0 (stars)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "dscan.png")
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def theory_column_overlaps(row: dict, sigma: float) -> dict:
    """Per student column ``j`` of a theory row (``numerics.result.FixedPoint.to_row``: packed
    ``m_a_j``, ``theta_j_c``): the largest and smallest over ``j`` of ``|m_.j|`` and ``|theta_j.|/sigma^2``, as
    ``validation.simulate.summary_statistics`` reports them for a run (keys ``m_col_max``, ...). Meaningful in
    the theory's gauge, where the directions have their roles (docs/theory.md, sections 4.9-4.10)."""
    r, t = int(_f(row["rank"])), int(_f(row["teacher_rank"]))
    k = sum(1 for a in range(1, 100) if f"m_{a}_1" in row) or 1
    m = np.array([[_f(row.get(f"m_{a}_{j}", 0.0)) for j in range(1, r + 1)] for a in range(1, k + 1)])
    theta = np.array([[_f(row.get(f"theta_{j}_{c}", 0.0)) for c in range(1, t + 1)] for j in range(1, r + 1)])
    m_col = np.linalg.norm(m, axis=0)
    th_col = np.linalg.norm(theta, axis=1) / sigma ** 2
    return {"m_col_max": float(m_col.max()), "m_col_min": float(m_col.min()),
            "theta_over_sigma2_col_max": float(th_col.max()), "theta_over_sigma2_col_min": float(th_col.min())}


_COLUMN_PANELS = ((("m_col_max", "m_col_min"), r"column $|m|$, largest and smallest"),
                  (("theta_over_sigma2_col_max", "theta_over_sigma2_col_min"),
                   r"column $|\theta|/\sigma^2$, largest and smallest"),
                  (("test_error",), "test error"))


def plot_column_overlaps(result_sets: Sequence[tuple], theory_rows: Sequence[dict], sigma: float, path: str,
                         title: str = "") -> str:
    """Per-column overlaps and test error of gradient-descent runs against alpha (every run a point, the
    largest column filled, the smallest open), with the theory's branches drawn over them (thick where a
    branch is the theory's global minimum, dotted elsewhere). ``result_sets``: ``(label, results)`` pairs,
    ``results`` being :func:`validation.simulate.simulate` results, one marker and colour per set;
    ``theory_rows``: rows of ``attnphase curve`` (``FixedPoint.to_row``), converged ones drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    branches = tuple(dict.fromkeys(r["branch"] for r in theory_rows))
    for ax, (keys, label) in zip(axes, _COLUMN_PANELS):
        for branch in branches:
            pts = sorted((r for r in theory_rows if r["branch"] == branch and str(r["converged"]) == "True"),
                         key=lambda r: _f(r["alpha"]))
            if not pts:
                continue
            values = [dict(theory_column_overlaps(r, sigma), test_error=_f(r["test_error"])) for r in pts]
            alphas = [_f(r["alpha"]) for r in pts]
            glob = [str(r.get("global_minimum")) == "True" for r in pts]
            for n, key in enumerate(keys):
                y = [v[key] for v in values]
                ax.plot(alphas, y, color=_COLORS.get(branch, "k"), ls=":", lw=1)
                # markers too: a branch that is the global minimum at one alpha alone has no segment
                ax.plot(alphas, [v if g else np.nan for v, g in zip(y, glob)], color=_COLORS.get(branch, "k"), lw=2.5,
                        marker="s", ms=4, label=f"theory {branch}" if n == 0 else None)
        for (name, results), (marker, color) in zip(result_sets, (("o", "k"), ("D", "tab:red"), ("^", "tab:green"))):
            for n, key in enumerate(keys):
                xs = [res["alpha"] for res in results for _ in res["runs"]]
                ys = [run[key] for res in results for run in res["runs"]]
                which = ", largest column" if n == 0 and len(keys) > 1 else ", smallest column" if n else ""
                ax.plot(xs, ys, marker, color=color, ms=4, ls="none", mfc=color if n == 0 else "none",
                        label=f"{name}{which}")
        ax.set_xlabel(r"$\alpha$")
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.suptitle(title or "gradient descent (points, one per run) and the theory's branches "
                          "(thick: global minimum)", fontsize=10)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path

"""Figures drawn from tidy rows alone (STYLE point 7)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_curves(rows, linear_test_error, summary, stem):
    """The paper's Figure-2-like panel: overlaps and test error against alpha, both
    branches, the global minimum bold, the linear baseline, alpha_c and alpha_l."""
    sigma2 = float(rows[0]["sigma"]) ** 2 if rows else 1.0
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    styles = {"semantic": "tab:blue", "positional": "tab:orange", "trivial": "tab:gray"}
    for branch, colour in styles.items():
        pts = sorted((r for r in rows if r["branch"] == branch), key=lambda r: float(r["alpha"]))
        if not pts:
            continue
        a = [float(r["alpha"]) for r in pts]
        glob = [str(r["global_minimum"]) == "True" for r in pts]
        over = [abs(float(r["theta"])) / sigma2 if branch == "semantic" else abs(float(r["m"])) / sigma2 for r in pts]
        label = r"$\theta/\sigma^2$ (semantic)" if branch == "semantic" else r"$m/\sigma^2$ (positional)"
        axes[0].plot(a, over, color=colour, lw=1, label=label)
        axes[1].plot(a, [float(r["test_error"]) for r in pts], color=colour, lw=1, label=branch)
        for ax, ys in ((axes[0], over), (axes[1], [float(r["test_error"]) for r in pts])):
            ax.plot([x for x, g in zip(a, glob) if g], [y for y, g in zip(ys, glob) if g], "o", ms=3, color=colour)
    axes[1].axhline(linear_test_error, color="k", ls="--", lw=1, label="linear baseline")
    for ax in axes:
        if summary.get("alpha_c"):
            ax.axvline(summary["alpha_c"], color="tab:red", ls=":", lw=1, label=r"$\alpha_c$")
        if summary.get("alpha_l"):
            ax.axvline(summary["alpha_l"], color="tab:green", ls=":", lw=1, label=r"$\alpha_l$")
        ax.set_xlabel(r"$\alpha$")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("overlap")
    axes[1].set_ylabel("test error")
    m = rows[0] if rows else {}
    fig.suptitle(f"omega={m.get('omega')}, sigma={m.get('sigma')}, lam={m.get('lam')}, attention={m.get('attention')}"
                 " (dots: global minimum)", fontsize=9)
    fig.tight_layout()
    paths = []
    for ext in ("png", "pdf"):
        path = f"{stem}.{ext}"
        fig.savefig(path, dpi=130)
        paths.append(path)
    plt.close(fig)
    return paths

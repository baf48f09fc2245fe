"""The replicon eigenvalues along the branches of curve CSVs written by ``attnphase curve --stability``
(docs/gamp.md, section 5).

    python benchmarks/gamp_stability_figure.py OUT.png CURVE.csv [CURVE.csv ...]

One row of panels per CSV: ``rs_stability`` (the smooth replicon eigenvalue; stable below 1) and
``rs_switching`` (the weight of the switching surfaces: the zero-temperature replicon eigenvalue
grows as ``beta`` times it), each with one standard error, per branch; and the alphas where
``rs_switching`` is above two standard errors, printed.
"""
from __future__ import annotations

import sys

BRANCH_COLOURS = {"semantic": "tab:blue", "positional": "tab:orange", "trivial": "tab:gray", "mixed": "tab:purple"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out, paths = argv[0], argv[1:]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tidyio import read_rows

    fig, axes = plt.subplots(len(paths), 2, figsize=(10, 3.2 * len(paths)), squeeze=False)
    for row_axes, path in zip(axes, paths):
        rows = [r for r in read_rows(path) if str(r.get("converged")) == "True" and str(r.get("rs_stability", "")) != ""]
        first = rows[0]
        for branch in BRANCH_COLOURS:
            pts = sorted((r for r in rows if r["branch"] == branch), key=lambda r: float(r["alpha"]))
            if not pts:
                continue
            a = [float(r["alpha"]) for r in pts]
            for ax, key in zip(row_axes, ("rs_stability", "rs_switching")):
                ax.errorbar(a, [float(r[key]) for r in pts], yerr=[float(r[key + "_error"]) for r in pts], fmt="o-",
                            ms=3, lw=1, color=BRANCH_COLOURS[branch], label=branch)
            unstable = [x for x, r in zip(a, pts) if float(r["rs_switching"]) > 2 * float(r["rs_switching_error"])]
            smooth = [x for x, r in zip(a, pts) if float(r["rs_stability"]) >= 1]
            print(f"{path}: {branch}: rs_switching > 2 standard errors at alpha = {', '.join(f'{x:g}' for x in unstable) or 'none'};"
                  f" rs_stability >= 1 at {', '.join(f'{x:g}' for x in smooth) or 'none'}")
        row_axes[0].axhline(1.0, color="k", ls="--", lw=1)
        row_axes[0].set_ylabel("rs_stability (smooth)")
        row_axes[1].set_ylabel("rs_switching")
        row_axes[1].axhline(0.0, color="k", lw=0.5)
        title = f"L={first.get('tokens', 2)}, r={first.get('rank', 1)}, omega={first.get('omega')}, {first.get('precision')}"
        for ax in row_axes:
            ax.set_xlabel("alpha")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

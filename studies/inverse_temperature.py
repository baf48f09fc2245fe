"""alpha_c and alpha_l of the student softmax at inverse temperature beta, beside the paper's model at
lam / beta that the identity of docs/theory.md, section 1.9 predicts (docs/extending.md).

Reads the ``--json`` outputs of

    attnphase thresholds --beta B --precision fast --json > DIR/beta_B.json
    attnphase thresholds --lam 0.01/B --precision fast --json > DIR/paper_beta_B.json

for every ``B`` found in DIR, prints the table (differences in units of the combined error) and draws
``--out`` (.png). Run: python studies/inverse_temperature.py DIR --out docs/figures/alpha_c_beta
"""
import argparse
import glob
import json
import math
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _read(path):
    """The JSON of a finished run, or None (a run still going, or stopped, leaves an empty file)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--out", default=None, help="figure stem (.png)")
    args = ap.parse_args()
    rows = []
    for path in glob.glob(os.path.join(args.directory, "beta_*.json")):
        beta = float(re.fullmatch(r"beta_(.*)\.json", os.path.basename(path)).group(1))
        partner = os.path.join(args.directory, f"paper_beta_{os.path.basename(path)[5:]}")
        hot, paper = _read(path), _read(partner)
        if hot is not None and paper is not None:
            rows.append((beta, hot, paper))
    rows.sort(key=lambda r: r[0])
    print(f"{'beta':>6} {'lam/beta':>9} {'alpha_c(beta)':>24} {'alpha_c paper(lam/beta)':>26} {'z':>6}"
          f" {'difference':>10} {'alpha_l(beta)':>24} {'alpha_l paper':>24} {'z':>6} {'difference':>10}")
    for beta, hot, paper in rows:
        line = f"{beta:6g} {paper['model']['lam']:9.6g}"
        for key in ("alpha_c", "alpha_l"):
            a, ea, b, eb = hot[key], hot[f"{key}_error"], paper[key], paper[f"{key}_error"]
            z = (a - b) / math.hypot(ea, eb)
            line += f" {a:12.7f} +- {ea:7.1e} {b:14.7f} +- {eb:7.1e} {z:6.2f} {a - b:10.1e}"
        print(line)
    if args.out:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        betas = [r[0] for r in rows]
        for key, marker in (("alpha_c", "o"), ("alpha_l", "s")):
            ax.errorbar(betas, [r[1][key] for r in rows], yerr=[r[1][f"{key}_error"] for r in rows], fmt=marker,
                        mfc="none", ms=9, label=f"{key}: softmax at beta, lam = 0.01")
            ax.errorbar(betas, [r[2][key] for r in rows], yerr=[r[2][f"{key}_error"] for r in rows], fmt=marker,
                        ms=4, label=f"{key}: paper's model at lam / beta")
        ax.set_xscale("log")
        ax.set_xlabel(r"$\beta$")
        ax.set_ylabel(r"$\alpha$")
        ax.legend(fontsize=7)
        ax.set_title("inverse temperature = weight decay / beta (omega = 0.3)", fontsize=9)
        fig.tight_layout()
        fig.savefig(args.out + ".png", dpi=130)
        print(f"wrote {args.out}.png")


if __name__ == "__main__":
    main()

"""The theory of the default model from Python: both branches at one alpha, then the thresholds.

    python examples/theory.py            # fast precision: about 40 s on 2 cores
    python examples/theory.py --quick    # draft precision, no thresholds: a few seconds

Needs no torch (``pip install -e .``).
"""
import argparse

from derivations import ModelSpec
from numerics.api import linear_baseline, solve_all, thresholds


def main(quick: bool) -> None:
    spec = ModelSpec(omega=0.3, sigma=0.5, lam=0.01)  # the defaults, spelled out
    precision = "draft" if quick else "fast"
    for fp in solve_all(spec, alpha=2.0, precision=precision):
        o = fp.values  # the 1 x 1 overlap matrices' entries by their bare names
        print(f"{fp.branch:>10}: q = {o['q']:.6f}, m = {o['m']:.6f}, theta = {o['theta']:.6f}, "
              f"test error = {fp.test_error:.6f}, training loss = {fp.train_loss:.6f}, "
              f"global minimum: {fp.global_minimum}")
    print(f"linear baseline test error = {linear_baseline(spec).test_error:.6f}")
    if not quick:  # error estimates need fast or high precision
        th = thresholds(spec, precision)
        print(f"alpha_c = {th.alpha_c:.6f} +- {th.alpha_c_error:.1e}, alpha_l = {th.alpha_l:.6f} +- {th.alpha_l_error:.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="draft precision, no thresholds")
    main(parser.parse_args().quick)

"""A new attention in one line: the equations are derived and generated from its expression.

    python examples/new_attention.py            # squareplus attention: branches and alpha_c (fast, minutes)
    python examples/new_attention.py --quick    # squareplus attention: both branches at alpha = 3 (draft)

``ModelSpec(attention=...)`` takes a built-in name (``softmax``, ``linear``, ``sigmoid``) or the
weight on one entry as an expression of the row's scores ``h1, ..., hL`` (docs/extending.md). The
first use of an expression derives and caches its code with SymPy (seconds). Needs no torch.
"""
import argparse

import numpy as np

from derivations import ModelSpec
from numerics.api import solve_all, thresholds

#: a smooth, positive stand-in for a ReLU-normalised attention, with no exponential to overflow
SQUAREPLUS = "(h1 + sqrt(h1**2 + 4))/(h1 + sqrt(h1**2 + 4) + h2 + sqrt(h2**2 + 4))"


def main(quick: bool) -> None:
    spec = ModelSpec(attention=SQUAREPLUS)
    print(f"attention: {spec.attention}")
    for fp in solve_all(spec, alpha=3.0, precision="draft" if quick else "fast"):
        print(f"alpha = 3, {fp.branch}: training loss {fp.train_loss:.6f}, test error {fp.test_error:.6f}, "
              f"global minimum: {fp.global_minimum}")
    if not quick:
        # its transition lies near alpha = 2.2 (docs/extending.md): the scan is widened around it
        th = thresholds(spec, "fast", np.linspace(0.5, 4.0, 12))
        print(f"alpha_c = {th.alpha_c:.6f} +- {th.alpha_c_error:.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="draft precision, no threshold")
    main(parser.parse_args().quick)

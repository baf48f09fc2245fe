"""Another attention nonlinearity: the equations are regenerated from the model specification.

    python examples/new_attention.py            # sigmoid attention: branches and alpha_c (fast, about 20 s)
    python examples/new_attention.py --quick    # sigmoid attention: both branches at alpha = 5 (draft)

``ModelSpec(attention=...)`` takes the names in ``derivations.spec.ATTENTIONS``; the first use of
a new one derives and caches its code with SymPy (minutes, once). Needs no torch.
"""
import argparse

from derivations import ModelSpec
from derivations.spec import ATTENTIONS
from numerics.api import solve_all, thresholds


def main(quick: bool) -> None:
    print(f"attentions: {', '.join(ATTENTIONS)}")
    spec = ModelSpec(attention="sigmoid")
    for fp in solve_all(spec, alpha=5.0, precision="draft" if quick else "fast"):
        print(f"sigmoid attention, alpha = 5, {fp.branch}: training loss {fp.train_loss:.6f}, "
              f"test error {fp.test_error:.6f}, global minimum: {fp.global_minimum}")
    if not quick:
        # sigmoid attention's transition lies near alpha = 4: the scan is widened around it
        th = thresholds(spec, "fast", alpha_min=0.5, alpha_max=6.0, n_scan=12)
        print(f"alpha_c = {th.alpha_c:.6f} +- {th.alpha_c_error:.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="draft precision, no threshold")
    main(parser.parse_args().quick)

"""The general model from Python: three tokens, or a rank-2 student, solved by quasi-Monte Carlo.

    python examples/general_model.py            # a rank-2 student's branches at alpha = 2, draft: minutes
    python examples/general_model.py --quick    # three tokens, the semantic branch at alpha = 1, draft

Each record carries the gauge invariants (eigenvalues of q, singular values of m and theta) with
errors from independent scramblings (docs/theory.md, section 4.9). Needs no torch.
"""
import argparse

from derivations import ModelSpec
from numerics.api import solve, solve_all


def show(p) -> None:
    inv = p.invariants
    print(f"{p.branch:>10}: eigenvalues of q {[round(v, 5) for v in inv['q_eigenvalues']]}, "
          f"singular values of m {[round(v, 5) for v in inv['m_singular_values']]}, "
          f"of theta {[round(v, 5) for v in inv['theta_singular_values']]}; "
          f"test error {p.test_error:.5f} +- {p.error['test_error']:.1e}, converged {p.converged}")


def main(quick: bool) -> None:
    if quick:
        show(solve(ModelSpec(tokens=3), 1.0, "semantic", "draft"))
    else:
        for p in solve_all(ModelSpec(rank=2), 2.0, "draft"):
            show(p)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one branch of a three-token model")
    main(parser.parse_args().quick)

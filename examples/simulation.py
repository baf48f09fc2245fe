"""Gradient descent on the finite-size model from Python, compared with the theory's branch.

    python examples/simulation.py            # d = 1000, 5 seeds of 5000 steps: about a minute on 2 cores
    python examples/simulation.py --quick    # d = 100, 2 seeds of 200 steps: a few seconds

Needs the simulation extra (``pip install -e '.[simulation]'``).
"""
import argparse

from derivations import ModelSpec
from numerics.api import solve
from validation.simulate import simulate


def main(quick: bool) -> None:
    spec, alpha = ModelSpec(), 2.0
    d, seeds, steps = (100, 2, 200) if quick else (1000, 5, 5000)
    result = simulate(spec, d, alpha, "semantic", seeds=seeds, steps=steps, device="cpu")
    theory = solve(spec, alpha, "semantic", "draft" if quick else "fast")
    for name, sim_value, theory_value in (("test error", result["test_error_mean"], theory.test_error),
                                          ("training loss", result["train_loss_mean"], theory.train_loss),
                                          ("theta / sigma^2", result["theta_over_sigma2_mean"],
                                           theory.overlaps.theta / spec.sigma ** 2)):
        print(f"{name:>16}: simulation {sim_value:.6f} (d = {d}, {seeds} seeds, {steps} steps), theory {theory_value:.6f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, short run")
    main(parser.parse_args().quick)

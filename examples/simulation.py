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
    if quick:
        print(f"a smoke test: at d = {d} and {steps} steps gradient descent is far from its end and from d -> "
              f"infinity, so the simulation is not expected to agree with the theory (run without --quick for that)")
    for name, key, theory_value in (("test error", "test_error", theory.test_error),
                                    ("training loss", "train_loss", theory.train_loss),
                                    ("theta / sigma^2", "theta_over_sigma2", theory.values["theta"] / spec.sigma ** 2)):
        sem = result[f"{key}_std"] / seeds ** 0.5  # the standard error of the mean over seeds
        print(f"{name:>16}: simulation {result[f'{key}_mean']:.6f} +- {sem:.1g} (d = {d}, {seeds} seeds, {steps} "
              f"steps; standard error over seeds), theory {theory_value:.6f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, short run")
    main(parser.parse_args().quick)

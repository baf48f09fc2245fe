"""Command-line options shared by every subcommand that takes a model."""
from __future__ import annotations

import argparse
import math
from typing import Optional

from derivations.spec import ATTENTIONS, DEFAULT_A, ModelSpec, parse_A


def add_model_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model (SPEC section 1)")
    g.add_argument("--omega", type=float, default=0.3, help="teacher weight of the positional matrix A (default 0.3)")
    g.add_argument("--sigma", type=float, default=0.5, help="std of the semantic token part (default 0.5)")
    g.add_argument("--lam", type=float, default=0.01, help="ridge strength / weight decay (default 0.01)")
    g.add_argument("--A", default=",".join(str(x) for row in DEFAULT_A for x in row),
                   help="teacher matrix A, row-major a11,a12,a21,a22 (default 0.6,0.4,0.4,0.6)")
    g.add_argument("--attention", default="softmax", choices=ATTENTIONS,
                   help="student attention nonlinearity (default softmax)")


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    """Build the ModelSpec; raises ModelSpecError (naming the parameter) on bad input."""
    return ModelSpec(sigma=args.sigma, lam=args.lam, omega=args.omega,
                     A=parse_A(args.A), attention=args.attention)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a machine-readable JSON object")


def simulation_option_error(steps: int, lr: Optional[float], n_test: int, seeds: int, seed: int) -> Optional[str]:
    """The first invalid gradient-descent run option, as a message naming the flag, or None.

    Shared by ``attnphase simulate``/``validate`` and the simulated phase diagram,
    which raise it as their own error type."""
    if steps < 0:
        return f"--steps: must be >= 0, got {steps}"
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        return f"--lr: must be a positive number, got {lr}"
    if n_test < 1:
        return f"--n-test: must be >= 1, got {n_test}"
    if seeds < 1:
        return f"--seeds: must be >= 1, got {seeds}"
    if seed < 0:
        return f"--seed: must be >= 0, got {seed}"
    return None

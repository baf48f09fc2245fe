"""The settings of a gradient-descent run (docs/theory.md, section 1.3) and their check.

Torch-free, so that the command line can offer the choices without importing torch.
Shared by ``attnphase simulate``/``validate`` and the simulated sweeps; a bad setting
raises :class:`RunSettingsError`, whose message names the command-line flag.
"""
from __future__ import annotations

import math
from typing import Optional

INITS = ("semantic", "positional", "random", "mixed")
OPTIMIZERS = ("gd", "adam")
#: how ``attnphase validate`` finds each point's students: the simulator's training, or message passing
METHODS = ("gd", "gamp")
DTYPE_NAMES = ("float32", "float64")
DEFAULT_LR = {"gd": 0.15, "adam": 0.01}
#: the ridge of the linear positional baseline (docs/theory.md, section 1.7), in the simulator and on the
#: numpy instances of message passing alike
LINEAR_RIDGE = 1e-4


class RunSettingsError(ValueError):
    """A gradient-descent run setting is invalid; the message starts with its flag."""


def check_run_settings(steps: int, lr: Optional[float], n_test: int, seeds: int, seed: int) -> None:
    """Raise :class:`RunSettingsError` on the first invalid run setting."""
    if steps < 1:  # without a step the "trained" student is its random start: nothing to report
        raise RunSettingsError(f"--steps: must be >= 1, got {steps}")
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise RunSettingsError(f"--lr: must be a positive number, got {lr}")
    if n_test < 1:
        raise RunSettingsError(f"--n-test: must be >= 1, got {n_test}")
    if seeds < 1:
        raise RunSettingsError(f"--seeds: must be >= 1, got {seeds}")
    if seed < 0:
        raise RunSettingsError(f"--seed: must be >= 0, got {seed}")


def check_dimension(d: int, flag: str = "--d", k: int = 1) -> None:
    """``d >= 2``, and above the number ``k`` of positional directions (they are orthonormal in ``R^d``)."""
    if d < 2:
        raise RunSettingsError(f"{flag}: must be >= 2, got {d}")
    if d <= k:
        raise RunSettingsError(f"{flag}: must exceed the number of positional directions k = {k}, got {d}")


def check_alpha(alpha: float, d: int, flag: str = "--alpha") -> None:
    """``alpha`` positive and leaving at least one training sample at dimension ``d``."""
    if not (math.isfinite(alpha) and alpha > 0):
        raise RunSettingsError(f"{flag}: must be a positive number, got {alpha}")
    if round(alpha * d) < 1:
        raise RunSettingsError(f"{flag}: alpha * d = {alpha * d:g} leaves no training sample")


def check_start(init: str, rank: int, flag: str = "--init") -> None:
    """``init`` one of :data:`INITS` and possible for a student of rank ``rank`` (the mixed
    start puts the two informed directions in different columns)."""
    if init not in INITS:
        raise RunSettingsError(f"{flag}: unknown start {init!r}; choose from {', '.join(INITS)}")
    if init == "mixed" and rank < 2:
        raise RunSettingsError(f"{flag}: the mixed start needs a student of rank >= 2 (--rank), got rank {rank}")

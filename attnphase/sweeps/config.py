"""What a sweep computes: the model, the grids, the theory precision and the simulation settings."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Callable, Optional

from numerics.api import COMPETING_BRANCHES
from numerics.api import PRECISIONS
from validation.run_settings import DTYPE_NAMES, INITS, OPTIMIZERS, check_alpha, check_dimension, check_run_settings

from . import SweepError
from .grid import fmt

#: the branches followed in each omega column of the two-token rank-one model (its thresholds need both);
#: the general model's are those of :func:`numerics.api.branches`, or ``branches``
THEORY_BRANCHES = COMPETING_BRANCHES
#: the starts of the simulated runs: the informed ones
SIM_INITS = INITS[:2]
WHATS = ("theory", "simulation", "both")


def every_branch(spec) -> bool:
    """Whether a diagram of ``spec`` follows every branch of the model and locates every change of the
    global branch: wherever the model's branches compared by default are not the paper's two
    (:func:`numerics.api.default_branches`; where they are, the diagram is theirs)."""
    from numerics.api import default_branches

    return tuple(default_branches(spec)) != tuple(COMPETING_BRANCHES)


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What to compute. ``spec`` gives the model; its ``omega`` is replaced per column. ``branches``:
    the branches followed in each column of the general model (default: every branch it has).
    ``stability``: each converged theory point also carries its replica-symmetric stability
    (``numerics.api.with_rs_stability``; docs/gamp.md, section 5)."""

    spec: object  # derivations.spec.ModelSpec
    omegas: tuple
    alphas: tuple
    what: str = "theory"
    precision: str = "fast"
    branches: tuple = ()
    d: int = 1000
    seeds: int = 1
    seed: int = 0
    steps: int = 5000
    lr: Optional[float] = None
    optimizer: str = "gd"
    dtype: str = "float32"
    n_test: int = 10000
    stability: bool = False

    def __post_init__(self):
        # rounded to 12 digits (sweeps.grid.fmt): keys and rows never carry float noise
        object.__setattr__(self, "omegas", tuple(float(fmt(w)) + 0.0 for w in self.omegas))
        object.__setattr__(self, "alphas", tuple(float(fmt(a)) + 0.0 for a in self.alphas))
        object.__setattr__(self, "branches", tuple(self.branches))
        self.validate()

    @property
    def every_branch(self) -> bool:
        """Whether a column follows every branch of the model (:func:`every_branch`)."""
        return every_branch(self.spec)

    @property
    def theory_branches(self) -> tuple:
        """The branches followed in each ``omega`` column, in the model's order of branches whatever
        the order given (it orders the tasks and breaks ties of the training loss)."""
        if not self.every_branch:
            return THEORY_BRANCHES
        from numerics.api import branches as general_branches

        return tuple(b for b in general_branches(self.spec) if not self.branches or b in self.branches)

    @property
    def kinds(self) -> tuple:
        return ("theory", "simulation") if self.what == "both" else (self.what,)

    def validate(self) -> None:
        if self.what not in WHATS:
            raise SweepError(f"--what: choose from {', '.join(WHATS)}, got {self.what!r}")
        if self.precision not in PRECISIONS:
            raise SweepError(f"--precision: choose from {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not self.omegas:
            raise SweepError("--omegas: empty grid")
        if not self.alphas:
            raise SweepError("--alphas: empty grid")
        for flag, values in (("--omegas", self.omegas), ("--alphas", self.alphas)):
            if len(set(values)) != len(values):
                raise SweepError(f"{flag}: grid values must be distinct at 12 significant digits, got "
                                 f"{', '.join(fmt(v) for v in values)}")
        self._validate_branches()
        for w in self.omegas:
            if not 0.0 <= w <= 1.0:
                raise SweepError(f"--omegas: values must lie in [0, 1], got {fmt(w)}")
        for a in self.alphas:
            if not a > 0:
                raise SweepError(f"--alphas: values must be > 0, got {fmt(a)}")
        if "simulation" in self.kinds:
            check_dimension(self.d)
            check_run_settings(self.steps, self.lr, self.n_test, self.seeds, self.seed)
            if self.optimizer not in OPTIMIZERS:
                raise SweepError(f"--optimizer: choose from {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
            if self.dtype not in DTYPE_NAMES:
                raise SweepError(f"--dtype: choose from {', '.join(DTYPE_NAMES)}, got {self.dtype!r}")
            for a in self.alphas:
                check_alpha(a, self.d)

    def _validate_branches(self) -> None:
        if not self.branches:
            return
        if not self.every_branch:
            raise SweepError(f"--branches: the two-token rank-one model's diagram follows "
                             f"{' and '.join(THEORY_BRANCHES)} (its thresholds need both); --branches is for the "
                             f"general model")
        from numerics.api import branches as general_branches

        have = general_branches(self.spec)
        for b in self.branches:
            if b not in have:
                raise SweepError(f"--branches: {b!r} is not a branch of this model; choose from {', '.join(have)}")
        if len(set(self.branches)) != len(self.branches):
            raise SweepError(f"--branches: each branch once, got {', '.join(self.branches)}")

    def spec_at(self, omega: float):
        return self.spec.replace(omega=float(omega))

    def model_settings(self) -> dict:
        """The model without ``omega`` (which varies across the sweep)."""
        d = self.spec.to_dict()
        d.pop("omega", None)
        d.pop("rho", None)
        return d

    def theory_settings(self, task_fn: Callable) -> dict:
        settings = {"kind": "theory", "model": self.model_settings(), "precision": self.precision,
                    "alphas": [fmt(a) for a in self.alphas], "branches": list(self.theory_branches),
                    "task": _callable_name(task_fn)}
        if self.stability:  # named only when asked, so that a folder without it keeps its settings
            settings["stability"] = True
        return settings

    def simulation_settings(self, task_fn: Callable) -> dict:
        return {"kind": "simulation", "model": self.model_settings(), "d": self.d, "seed": self.seed,
                "steps": self.steps, "lr": self.lr, "optimizer": self.optimizer, "dtype": self.dtype,
                "n_test": self.n_test, "inits": list(SIM_INITS), "task": _callable_name(task_fn)}


def settings_hash(settings: dict) -> str:
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _callable_name(fn: Callable) -> str:
    while hasattr(fn, "func"):  # functools.partial: its arguments (e.g. a test delay) do not change results
        fn = fn.func
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"

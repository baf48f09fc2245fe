"""Fixed points of the saddle-point equations, branch by branch (SPEC section 3).

A branch is an invariant subspace of the equations:

* ``semantic``: ``m = 0`` (the flip ``(xi, y) -> (-xi, -y)`` makes ``mhat = 0``);
* ``positional``: ``theta = 0`` (at ``theta = 0`` the teacher ``T(h*)`` is even in
  ``h* = sqrt(rho) y``, so ``y -> -y`` makes ``thetahat = 0`` for any ``A``);
* ``trivial``: ``m = theta = 0``;
* ``free``: nothing imposed (to test the stability of a branch).

The solver iterates only the free components but the reported residual is the
undamped residual of all eight order parameters, including the imposed ones.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Optional

import numpy as np

from derivations import ModelSpec

from .channel import ChannelRule
from .model import BoundModel, bind
from .overlaps import ALL_NAMES, HatOverlaps, Overlaps
from .solver import solve_fixed_point
from .state import free_energy, test_error, update_hat_overlaps, update_overlaps

log = logging.getLogger(__name__)

BRANCHES = ("semantic", "positional", "trivial")
FIXED_ZERO = {"semantic": ("m",), "positional": ("theta",), "trivial": ("m", "theta"), "free": ()}
DEFAULT_START = {
    "semantic": Overlaps(q=0.11, m=0.0, V=12.0, theta=0.15),
    "positional": Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0),
    "trivial": Overlaps(q=0.01, m=0.0, V=20.0, theta=0.0),
}


@dataclasses.dataclass(frozen=True)
class Precision:
    """A precision mode: the channel rule, the rule that estimates its error, the
    test-error rule pair and the solver tolerance."""

    name: str
    rule: ChannelRule
    check_rule: ChannelRule
    test_n: int
    test_check_n: int
    tol: float

    @property
    def solution_rule(self) -> ChannelRule:
        return self.check_rule


PRECISIONS = {
    # The reported values use the finer rule; the coarse one supplies the error
    # estimate. Rules chosen by the convergence study in docs/numerics.md.
    "fast": Precision("fast", ChannelRule(n_eta=20, n_r=8, n_u=8, n_t=20),
                      ChannelRule(n_eta=28, n_r=12, n_u=8, n_t=24), 16, 24, 1e-9),
    "high": Precision("high", ChannelRule(n_eta=40, n_r=14, n_u=10, n_t=32),
                      ChannelRule(n_eta=56, n_r=18, n_u=12, n_t=40), 28, 36, 1e-12),
}


@dataclasses.dataclass(frozen=True)
class FixedPoint:
    """One solution of the saddle-point equations with its outputs and error estimates."""

    alpha: float
    branch: str
    overlaps: Overlaps
    hats: HatOverlaps
    test_error: float
    train_loss: float
    converged: bool
    iterations: int
    residual: float               # undamped, all eight order parameters, relative
    error: dict                   # per-field error estimates (absolute)
    diagnostics: dict
    model: ModelSpec
    precision: str
    wall_time: float
    global_minimum: Optional[bool] = None

    def to_dict(self) -> dict:
        d = {"alpha": self.alpha, "branch": self.branch}
        d.update(dataclasses.asdict(self.overlaps))
        d.update(dataclasses.asdict(self.hats))
        d.update(test_error=self.test_error, train_loss=self.train_loss, converged=self.converged,
                 iterations=self.iterations, residual=self.residual, error=dict(self.error),
                 global_minimum=self.global_minimum, model=self.model.to_dict(), precision=self.precision,
                 wall_time=self.wall_time, diagnostics=dict(self.diagnostics))
        return d

    @property
    def values(self) -> dict:
        d = dict(zip(ALL_NAMES, np.concatenate([self.overlaps.as_array(), self.hats.as_array()])))
        d.update(test_error=self.test_error, train_loss=self.train_loss)
        return d


class _Map:
    """``x -> F(x)`` over the free overlaps of a branch; remembers the last channel side."""

    def __init__(self, model: BoundModel, alpha: float, branch: str, rule: ChannelRule):
        self.model, self.alpha, self.rule = model, alpha, rule
        self.zero = [("q", "m", "V", "theta").index(n) for n in FIXED_ZERO[branch]]
        self.free = [i for i in range(4) if i not in self.zero]
        self.evaluations = 0

    def full(self, x_free) -> np.ndarray:
        x = np.zeros(4)
        x[self.free] = x_free
        return x

    def __call__(self, x_free):
        ov = Overlaps.from_array(self.full(x_free))
        ov.validate()
        side = update_hat_overlaps(self.model, ov, self.alpha, self.rule)
        self.evaluations += 1
        new = update_overlaps(self.model, side.hats).as_array()
        return new[self.free]


def _solve_with_rule(model, alpha, branch, rule, start: Overlaps, tol, maxiter=80):
    F = _Map(model, alpha, branch, rule)
    x0 = start.as_array()[F.free]
    res = solve_fixed_point(F, x0, tol=tol, maxiter=maxiter, damping=1.0, anderson=4,
                            floor=np.array([1e-8, 1e-6, 1e-8, 1e-6])[F.free])
    ov = Overlaps.from_array(F.full(res.x))
    # undamped residual of all eight parameters at the returned point
    side = update_hat_overlaps(model, ov, alpha, rule)
    # the imposed zeros are exact symmetries (module docstring): evaluate the map on the branch
    ov2 = Overlaps.from_array(F.full(update_overlaps(model, side.hats).as_array()[F.free]))
    side2 = update_hat_overlaps(model, ov2, alpha, rule)
    x8 = np.concatenate([ov.as_array(), side.hats.as_array()])
    F8 = np.concatenate([update_overlaps(model, side.hats).as_array(), side2.hats.as_array()])
    scale = np.maximum(np.abs(x8), np.array([1e-8, 1e-6, 1e-8, 1e-6, 1e-10, 1e-8, 1e-8, 1e-8]))
    residual8 = float(np.max(np.abs(F8 - x8) / scale))
    return ov, side, res, residual8, F.evaluations + 2


def solve_branch(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                 start: Optional[Overlaps] = None, model: Optional[BoundModel] = None) -> FixedPoint:
    """Solve one branch at one ``alpha`` with error estimates.

    The fixed point is solved with the precision mode's coarse rule, then again
    with its finer rule from there; the finer values are reported and the
    difference is their error estimate (plus the test-error quadrature error and
    the solver residual). ``converged`` requires both solves to converge.
    """
    if branch not in FIXED_ZERO:
        raise ValueError(f"branch: unknown branch {branch!r}; choose from {', '.join(FIXED_ZERO)}")
    if not alpha > 0:
        raise ValueError(f"alpha: must be > 0, got {alpha}")
    prec = PRECISIONS[precision]
    model = model or bind(spec)
    t_start = time.perf_counter()
    start = start or DEFAULT_START.get(branch, DEFAULT_START["semantic"])
    start = Overlaps.from_array([start.as_array()[i] if n not in FIXED_ZERO[branch] else 0.0
                                 for i, n in enumerate(("q", "m", "V", "theta"))])
    ov_c, side_c, res_c, r8_c, n_c = _solve_with_rule(model, alpha, branch, prec.rule, start, prec.tol)
    ov_f, side_f, res_f, r8_f, n_f = _solve_with_rule(model, alpha, branch, prec.check_rule, ov_c, prec.tol)
    outputs = {}
    for tag, ov, side in (("c", ov_c, side_c), ("f", ov_f, side_f)):
        outputs[tag] = {
            **dict(zip(ALL_NAMES, np.concatenate([ov.as_array(), side.hats.as_array()]))),
            "test_error": test_error(model, ov, prec.test_n),
            "train_loss": free_energy(model, ov, side.hats, alpha, side.mean_envelope),
        }
    te_check = test_error(model, ov_f, prec.test_check_n)
    error = {k: abs(outputs["f"][k] - outputs["c"][k]) for k in outputs["f"]}
    error["test_error"] += abs(te_check - outputs["f"]["test_error"])
    # the solver's own contribution: residual times the scale of each component
    for k in ALL_NAMES:
        error[k] += r8_f * max(abs(outputs["f"][k]), 1e-12)
    fp = FixedPoint(
        alpha=float(alpha), branch=branch, overlaps=ov_f, hats=side_f.hats,
        test_error=te_check, train_loss=outputs["f"]["train_loss"],
        converged=bool(res_c.converged and res_f.converged and r8_f < 1e3 * prec.tol),
        iterations=res_c.iterations + res_f.iterations, residual=r8_f, error=error,
        diagnostics={
            "thetahat_other_form": side_f.thetahat_other_form,
            "Vhat_other_form": side_f.Vhat_other_form,
            "unresolved_weight": side_f.channel.unresolved_weight,
            "max_prox_gradient": side_f.channel.max_gradient_norm,
            "switch_fraction": side_f.channel.switch_fraction,
            "map_evaluations": n_c + n_f,
            "coarse_residual": r8_c,
        },
        model=spec, precision=precision, wall_time=time.perf_counter() - t_start,
    )
    if not fp.converged:
        log.warning("alpha=%g %s: not converged (residual %.2e)", alpha, branch, fp.residual)
    return fp

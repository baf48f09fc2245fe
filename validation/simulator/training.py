"""Training (docs/theory.md, sections 1.3-1.4): the starts, full-batch gradient descent or Adam,
for several students on one data set at once, with divergence checks and early stops.

Batches
-------
:func:`train_batch` trains the students of several starts of one
:class:`~validation.simulator.data.Problem` as one batched model (the students' rows stacked,
:mod:`validation.simulator.kernel`), each with its own optimiser, learning rate and early stop: the
passes over ``X`` serve every run, and each run's arithmetic is that of training it alone, so its
numbers are the same bit for bit, whatever the other runs of its batch and however many there
are (tested). :func:`train` is the batch of one.

Divergence
----------
A run whose risk or ``Q`` stops being finite gives :class:`SimulationDiverged`, naming the
seed, the run index and the first step at which it happened (found by replaying that run alone
from its start, checking every step); no record with NaN is returned. The other runs of its
batch go on.

Early stops
-----------
Training looks at each run every :data:`CHECK_EVERY` steps and on the recorded steps.

* Fixed point (gradient descent, always): when a step leaves ``Q`` unchanged to the last bit,
  every later step would too, so the run stops there and its record (loss curve, final risk and
  gradient) is the full run's exactly.
* :class:`StopRule` (optional): a run stops once, over ``patience`` consecutive looks, its
  training loss ``R(Q)`` has changed by at most ``loss_rtol`` relative since the look before and
  the gradient ``|dR/dQ|_F / sqrt(d)`` is at most ``grad_tol``. Its record is that of the full
  run's first ``steps_run`` steps (its loss curve ends there), not the full run's: how close that
  comes to the full run is measured by ``benchmarks/simulation.py --early-stop``.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, List, Optional, Sequence, Union

import numpy as np
import torch

from .attention import student_attention
from .data import STAT_DTYPE, Problem, position_basis, torch_generator
from .kernel import as_rows, batch_risk_and_grad, from_rows
from ..run_settings import DEFAULT_LR, OPTIMIZERS, check_start

RANDOM_INIT_SCALE = 0.1  # random start Q = 0.1 N(0, I) (docs/theory.md, section 1.4)
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
#: steps between looks at the early stops (module docstring), besides the recorded steps
CHECK_EVERY = 50


class SimulationDiverged(RuntimeError):
    """Training produced a non-finite risk or ``Q``.

    ``step`` is the first step ``s`` whose iterate ``Q_s`` (after ``s`` updates) or its
    risk is not finite."""

    def __init__(self, seed: int, run_index: int, step: int, detail: str = ""):
        super().__init__(f"run {run_index} of seed {seed} diverged at step {step}: "
                         f"the risk or Q is not finite{detail}")
        self.seed = seed
        self.run_index = run_index
        self.step = step
        self.detail = detail

    def __reduce__(self):  # pickled whole (a Dask worker hands it back as a run's outcome)
        return type(self), (self.seed, self.run_index, self.step, self.detail)


@dataclasses.dataclass(frozen=True)
class StopRule:
    """Stop a run whose training loss and gradient have settled (module docstring, "Early stops")."""

    loss_rtol: float = 1e-7
    grad_tol: float = 1e-7
    patience: int = 4

    def __post_init__(self):
        if not (self.loss_rtol >= 0 and self.grad_tol >= 0):
            raise ValueError(f"stop: loss_rtol and grad_tol must be >= 0, got {self.loss_rtol}, {self.grad_tol}")
        if self.patience < 1:
            raise ValueError(f"stop: patience must be >= 1, got {self.patience}")


def check_init(spec, init: str) -> None:
    """Raise :class:`~validation.run_settings.RunSettingsError` (a ``ValueError``) naming
    ``init`` if the start does not exist for this model."""
    check_start(init, spec.rank, "init")


def _columns(W: torch.Tensor) -> torch.Tensor:
    return W[:, None] if W.dim() == 1 else W


def _weight(W: torch.Tensor) -> torch.Tensor:
    return W[:, 0] if W.shape[1] == 1 else W


def initial_Q(problem: Problem, init: str) -> torch.Tensor:
    """The starts of docs/theory.md, section 1.4, for a student of rank ``r``.

    Column ``j`` of ``Q`` (``j = 1..r``):

    * ``random``: ``0.1 N(0, I_{d x r})``, drawn from the run's initialisation stream
      (independent of ``n`` and of the data);
    * ``semantic``: ``Q = Q*`` cut or padded to ``r`` columns: column ``j`` is teacher
      column ``Q*_j`` for ``j <= t``; further columns are those of the random start;
    * ``positional``: column ``j`` is ``e_j`` for ``j <= min(r, k)`` (for ``r = 1``,
      ``Q = mu_1/sqrt(d) = e_1``); further columns are those of the random start;
    * ``mixed`` (``r >= 2``): column 1 is ``Q*_1`` (semantic), column 2 is ``e_1``
      (positional), further columns those of the random start.

    Padding with zeros instead would not do: a zero column has zero gradient and
    stays zero under gradient descent, so the student would keep rank ``t``.
    """
    check_init(problem.spec, init)
    d, Qs = problem.d, problem.Qstar
    _, r, t, k = problem.spec.shape
    if init == "semantic" and r <= t:
        return _weight(_columns(Qs)[:, :r].clone())
    if init == "positional" and r == 1:
        return torch.full((d,), 1.0 / math.sqrt(d), dtype=Qs.dtype, device=Qs.device)
    g = torch_generator(problem.init_seed)
    Q = (RANDOM_INIT_SCALE * torch.randn((d,) if r == 1 else (d, r), generator=g, dtype=torch.float64))
    Q = _columns(Q.to(dtype=Qs.dtype, device=Qs.device))
    E = position_basis(d, k).to(dtype=Qs.dtype, device=Qs.device)
    if init == "semantic":
        Q[:, :t] = _columns(Qs)
    elif init == "positional":
        Q[:, :min(r, k)] = E[:, :min(r, k)]
    elif init == "mixed":
        Q[:, 0] = _columns(Qs)[:, 0]
        Q[:, 1] = E[:, 0]
    return _weight(Q)


@dataclasses.dataclass
class TrainResult:
    Q: torch.Tensor
    loss_curve: list  # [[step, R(Q)/d], ...]
    steps: int
    grad_norm: float  # |dR/dQ|_F / sqrt(d) at the end: how far from stationary GD stopped
    wall_time: float  # the training time of the run's batch, divided among its runs
    steps_run: int = -1  # the updates computed (fewer than steps after an early stop)
    stopped: str = ""  # "", "fixed point" or "converged" (module docstring, "Early stops")
    batch_runs: int = 1  # the runs trained together with it (itself included)


def _check_settings(steps, lr, optimizer, record_points) -> float:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps: must be an integer >= 0, got {steps!r}")
    lr = DEFAULT_LR[optimizer] if lr is None else float(lr)
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: must be a finite number > 0, got {lr}")
    if record_points < 1:
        raise ValueError(f"record_points: must be >= 1, got {record_points}")
    return lr


@dataclasses.dataclass(frozen=True)
class _Rule:
    """How one run of a batch is trained: its optimiser, learning rate and early stop."""

    optimizer: str
    lr: float
    stop: Optional[StopRule]


class _Optimizer:
    """Gradient descent or Adam on the stacked students ``W``, each row by its own :class:`_Rule`
    (elementwise: each run's update is the one it gets alone; rows that share an optimiser and a
    learning rate are updated together)."""

    def __init__(self, rules: Sequence[_Rule], W: torch.Tensor):
        self.rules = list(rules)
        adam = any(rule.optimizer == "adam" for rule in self.rules)
        self.state = [torch.zeros_like(W), torch.zeros_like(W)] if adam else []
        self._group()

    def _group(self) -> None:
        groups: dict = {}
        for row, rule in enumerate(self.rules):
            groups.setdefault((rule.optimizer, rule.lr), []).append(row)
        # a group of every row works on W itself (idx None), not on a gathered copy
        whole = len(groups) == 1
        self.groups = [(name, lr, rows, None if whole else torch.tensor(rows))
                       for (name, lr), rows in groups.items()]

    def moved(self, W: torch.Tensor, grad: torch.Tensor) -> list:
        """Per row: False where a gradient-descent step would leave the row unchanged to the last bit."""
        out = [True] * W.shape[0]
        for name, lr, rows, idx in self.groups:
            if name == "gd":
                Wg, g = (W, grad) if idx is None else (W[idx], grad[idx])
                for row, changed in zip(rows, (torch.add(Wg, g, alpha=-lr) != Wg).flatten(1).any(dim=1).tolist()):
                    out[row] = changed
        return out

    def step(self, t: int, W: torch.Tensor, grad: torch.Tensor) -> None:
        """``W`` after update ``t`` (in place)."""
        for name, lr, _, idx in self.groups:
            if idx is None:
                self._update(name, lr, t, W, grad, self.state)
                continue
            Wg, state = W[idx], [s[idx] for s in self.state] if name == "adam" else []
            self._update(name, lr, t, Wg, grad[idx], state)
            W[idx] = Wg
            for s, s_rows in zip(self.state, state):
                s[idx] = s_rows

    @staticmethod
    def _update(name: str, lr: float, t: int, W: torch.Tensor, grad: torch.Tensor, state: list) -> None:
        if name == "gd":
            W.add_(grad, alpha=-lr)
            return
        b1, b2 = ADAM_BETAS
        m1, m2 = state
        m1.mul_(b1).add_(grad, alpha=1 - b1)
        m2.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        c1 = 1 - b1 ** (t + 1)
        c2 = 1 - b2 ** (t + 1)
        W.addcdiv_(m1, (m2 / c2).sqrt_().add_(ADAM_EPS), value=-lr / c1)

    def keep(self, rows) -> None:
        self.state = [s[rows].contiguous() for s in self.state]
        self.rules = [self.rules[row] for row in rows]
        self._group()


def _per_run(k: int, value, name: str) -> list:
    """``value`` for each of ``k`` runs: one value for all, or a sequence of ``k``."""
    if isinstance(value, (list, tuple)):
        if len(value) != k:
            raise ValueError(f"{name}: give one value or one per start ({k}), got {len(value)}")
        return list(value)
    return [value] * k


def train(problem: Problem, init: str = "semantic", steps: int = 5000, lr: Optional[float] = None,
          optimizer: str = "gd", record_points: int = 200, Q0: Optional[torch.Tensor] = None,
          progress: Optional[Callable[[int], None]] = None, stop: Optional[StopRule] = None) -> TrainResult:
    """Full-batch training of ``R(Q)`` (docs/theory.md, section 1.3) from one start: gradient descent,
    or Adam (betas 0.9/0.999, eps 1e-8). :func:`train_batch` of one run; raises
    :class:`SimulationDiverged`."""
    (out,) = train_batch(problem, [init], steps, lr, optimizer, record_points,
                         None if Q0 is None else [Q0], progress, stop)
    if isinstance(out, SimulationDiverged):
        raise out
    return out


def train_batch(problem: Problem, inits: Sequence[str], steps: int = 5000, lr=None, optimizer="gd",
                record_points: int = 200, Q0: Optional[Sequence[torch.Tensor]] = None,
                progress: Optional[Callable[[int], None]] = None,
                stop=None) -> List[Union[TrainResult, SimulationDiverged]]:
    """Train one student per start of ``inits`` (or per matrix of ``Q0``) on ``problem`` as one
    batched model (module docstring). One outcome per run, in order: a :class:`TrainResult`, or the
    :class:`SimulationDiverged` of a run that diverged. ``lr``, ``optimizer`` and ``stop`` are one
    value for every run or a sequence of one per run (gradient descent and Adam runs of one data
    set share the batch's passes over ``X``).

    The loss curve records ``R(Q)/d`` at about ``record_points`` evenly spaced steps
    (the value at step ``t`` is the risk *before* update ``t``) and after the last step.
    ``progress(n)`` is told, at each recorded step and at the end, how many run-steps were
    taken since it was last told (``len(inits) * steps`` in all, early stops included).
    """
    n_runs = len(inits) if Q0 is None else len(Q0)
    rules = [_Rule(o, _check_settings(steps, r, o, record_points), st) for o, r, st in
             zip(_per_run(n_runs, optimizer, "optimizer"), _per_run(n_runs, lr, "lr"), _per_run(n_runs, stop, "stop"))]
    spec, batch, d = problem.spec, problem.train, problem.d
    attention = student_attention(spec)
    r = spec.rank
    if Q0 is None:
        starts = [initial_Q(problem, init) for init in inits]
    else:
        expected = (d,) if r == 1 else (d, r)
        for Q in Q0:
            if tuple(Q.shape) != expected:
                raise ValueError(f"Q0: must have shape {expected} for rank {r}, got {tuple(Q.shape)}")
        starts = list(Q0)
        inits = ["Q0"] * len(starts)
    k = len(starts)
    if k < 1:
        raise ValueError("inits: give at least one start")
    W = torch.cat([as_rows(Q) for Q in starts]).contiguous()
    W_start = W.clone()
    every = max(1, steps // max(1, record_points))
    record_steps = list(range(0, steps, every))
    steps_rec = record_steps + [steps]
    curve = torch.zeros(k, len(steps_rec), dtype=STAT_DTYPE, device=W.device)
    opt = _Optimizer(rules, W)
    # every admitted regulariser is the ridge of this strength (derivations.regulariser)
    ridge = spec.ridge_strength
    active = list(range(k))  # the runs still training, in the order of the rows of W
    outcomes: list = [None] * k
    settled = [0] * k  # looks in a row that met the stop rule
    last_R = [math.nan] * k
    told = 0
    t0 = time.perf_counter()

    def tell(upto: int) -> None:
        nonlocal told
        if progress and upto > told:
            progress(upto - told)
            told = upto

    def diverged(i: int, upto: int) -> SimulationDiverged:
        """Replay run ``i`` alone from its start, checking every step, for the first non-finite one."""
        Wi = W_start[i:i + 1].clone()
        opt_i = _Optimizer([rules[i]], Wi)
        first = upto
        for s in range(upto):
            R, grad = batch_risk_and_grad(Wi, batch, ridge, attention)
            if not (math.isfinite(float(R[0])) and math.isfinite(float(Wi.sum()))):
                first = s
                break
            opt_i.step(s, Wi, grad)
        return SimulationDiverged(problem.seed, problem.run_index, first,
                                  f" (d = {d}, alpha = {problem.alpha:g}, init = {inits[i]}, "
                                  f"{rules[i].optimizer} lr = {rules[i].lr:g})")

    end_R = [math.nan] * k  # R(Q)/d where a converged run stopped

    def finish(i: int, row: int, t: int, grad: torch.Tensor, how: str) -> None:
        outcomes[i] = TrainResult(Q=from_rows(W[row], r == 1), loss_curve=[], steps=steps,
                                  grad_norm=float(grad[row].norm()) / math.sqrt(d), wall_time=0.0,
                                  steps_run=t, stopped=how, batch_runs=k)

    with torch.inference_mode():
        for t in range(steps + 1):
            last = t == steps
            record = last or t % every == 0
            look = record or t % CHECK_EVERY == 0
            if not look:
                _, grad = batch_risk_and_grad(W, batch, ridge, attention, need_loss=False)
                opt.step(t, W, grad)
                continue
            stopping = any(rules[i].stop is not None for i in active)
            R, grad = batch_risk_and_grad(W, batch, ridge, attention, need_loss=record or stopping)
            values = finite = None
            if R is not None:
                if record:
                    curve[active, len(record_steps) if last else t // every] = R
                finite = (torch.isfinite(R) & torch.isfinite(W.sum(dim=(1, 2)))).tolist()
                values = R.tolist()
            moved = None if last else opt.moved(W, grad)
            rows = []  # those that go on
            for row, i in enumerate(active):
                stop_rule = rules[i].stop
                if finite is not None and not finite[row]:
                    outcomes[i] = diverged(i, t)
                elif last:
                    finish(i, row, t, grad, "")
                elif moved is not None and not moved[row]:
                    # every later step repeats this one: the rest of the curve is this risk
                    R_here = R[row] if R is not None else \
                        batch_risk_and_grad(W[row:row + 1].contiguous(), batch, ridge, attention)[0][0]
                    curve[i, -(-t // every):] = R_here
                    finish(i, row, t, grad, "fixed point")
                elif stop_rule is not None:
                    ok = _settled(stop_rule, values[row], last_R[i], grad[row], d)
                    settled[i] = settled[i] + 1 if ok else 0
                    last_R[i] = values[row]
                    if settled[i] >= stop_rule.patience:
                        end_R[i] = values[row] / d
                        finish(i, row, t, grad, "converged")
                    else:
                        rows.append(row)
                else:
                    rows.append(row)
            if last or not rows:
                break
            opt.step(t, W, grad)
            if len(rows) < len(active):
                W = W[rows].contiguous()
                opt.keep(rows)
                active = [active[row] for row in rows]
            if record:
                tell(k * t)
    tell(k * steps)
    wall = (time.perf_counter() - t0) / k
    curve_cpu = (curve / d).cpu().tolist()
    for i, out in enumerate(outcomes):
        if isinstance(out, TrainResult):
            points = [[s, v] for s, v in zip(steps_rec, curve_cpu[i])]
            if out.stopped == "converged":
                points = [p for p in points if p[0] < out.steps_run] + [[out.steps_run, end_R[i]]]
            out.loss_curve = points
            out.wall_time = wall
    return outcomes


def _settled(stop: StopRule, R: float, R_before: float, grad: torch.Tensor, d: int) -> bool:
    """One look at a run that meets ``stop``: ``R`` within ``loss_rtol`` (relative) of its value at the
    look before and ``|grad|_F / sqrt(d) <= grad_tol``."""
    if not math.isfinite(R_before):
        return False
    return abs(R - R_before) <= stop.loss_rtol * abs(R) and float(grad.norm()) / math.sqrt(d) <= stop.grad_tol

"""Seeded runs and their records: what a trained student is measured by (docs/theory.md, sections
1.5-1.7 and 4.9), one run (:func:`run_one`), the runs of one data set drawn once and trained in
batches (:func:`run_data_set`, :func:`run_starts`), and ``seeds`` runs with their aggregates
(:func:`simulate`, :func:`simulate_starts`)."""
from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch

from derivations.spec import ModelSpec

from .attention import student_attention
from .baseline import LINEAR_RIDGE, fit_linear_baseline, linear_test_error
from .data import Problem, choose_device, make_problem, position_basis
from .kernel import per_sample_loss, risk_and_grad
from .training import SimulationDiverged, StopRule, check_init, train_batch
from ..run_settings import DEFAULT_LR, OPTIMIZERS

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _columns(W: torch.Tensor) -> torch.Tensor:
    return W[:, None] if W.dim() == 1 else W


def overlaps(Q: torch.Tensor, problem: Problem) -> dict:
    """The order parameters of a student (docs/theory.md, section 4.1), float64 CPU tensors:
    ``q = sigma^2 Q^T Q/d`` (``r x r``), ``m`` (``k x r``, row ``a`` is ``e_a^T Q/sqrt(d)``)
    and ``theta = sigma^2 Q^T Q*/d`` (``r x t``)."""
    d, s2 = problem.d, problem.spec.sigma ** 2
    Q2 = _columns(Q).to(torch.float64)
    Qs = _columns(problem.Qstar).to(torch.float64)
    E = position_basis(d, problem.spec.k).to(Q2.device)
    return {"q": (s2 * (Q2.t() @ Q2) / d).cpu(),
            "m": ((E.t() @ Q2) / math.sqrt(d)).cpu(),
            "theta": (s2 * (Q2.t() @ Qs) / d).cpu()}


def summary_statistics(Q: torch.Tensor, problem: Problem) -> dict:
    """Flat scalar statistics of a student (docs/theory.md, sections 1.5 and 4.9).

    For every shape:

    * the invariants: ``q_eig_1 >= ... >= q_eig_r`` (eigenvalues of ``q``),
      ``m_sv_1 >= ...`` (the ``min(k, r)`` singular values of ``m``) and ``theta_sv_1 >= ...``
      (the ``min(r, t)`` singular values of ``theta``, with the ``sigma^2``);
    * per student column ``j``: ``|m|_j``, the norm of column ``j`` of ``m`` (over the
      ``k`` positional directions), and ``(theta/sigma^2)_j``, the norm of row ``j`` of
      ``theta/sigma^2`` (over the ``t`` teacher columns), i.e. ``|Q_j^T Q*|/d``; reported as
      their largest and smallest over the ``r`` columns (``m_col_max``, ``m_col_min``,
      ``theta_over_sigma2_col_max``, ``theta_over_sigma2_col_min``). For ``k = 1`` and
      ``t = 1`` these are the absolute overlaps of each column, as in the paper's
      appendix; they are not invariant under rotations of the columns of ``Q``.

    When ``r = t = k = 1`` also the overlaps of section 1.5, signed and absolute:
    ``m = mu_1.Q/d``, ``theta/sigma^2 = Q*.Q/d``, ``q = sigma^2|Q|^2/d``.
    """
    d, s2 = problem.d, problem.spec.sigma ** 2
    out = {}
    if problem.spec.shape[1:] == (1, 1, 1):
        Q64 = Q.to(torch.float64)
        m = float(Q64.sum()) / d
        th = float(problem.Qstar.to(torch.float64) @ Q64) / d
        q = s2 * float(Q64 @ Q64) / d
        out = {"m": abs(m), "theta_over_sigma2": abs(th), "q": q, "m_signed": m, "theta_over_sigma2_signed": th}
    o = overlaps(Q, problem)
    for j, v in enumerate(torch.linalg.eigvalsh(o["q"]).flip(0).tolist(), 1):
        out[f"q_eig_{j}"] = v
    for j, v in enumerate(torch.linalg.svdvals(o["m"]).tolist(), 1):
        out[f"m_sv_{j}"] = v
    for j, v in enumerate(torch.linalg.svdvals(o["theta"]).tolist(), 1):
        out[f"theta_sv_{j}"] = v
    m_col = o["m"].norm(dim=0)
    th_col = o["theta"].norm(dim=1) / s2
    out.update(m_col_max=float(m_col.max()), m_col_min=float(m_col.min()),
               theta_over_sigma2_col_max=float(th_col.max()), theta_over_sigma2_col_min=float(th_col.min()))
    return out


def test_error(Q: torch.Tensor, problem: Problem) -> float:
    """``E |Y - Yhat|_F^2 / (2d)`` estimated on the run's fresh test samples."""
    with torch.inference_mode():
        return float(per_sample_loss(Q, problem.test, student_attention(problem.spec)).mean())


def train_loss(Q: torch.Tensor, problem: Problem) -> float:
    """``R(Q) / d`` on the training set, ridge term included."""
    with torch.inference_mode():
        R, _ = risk_and_grad(Q, problem.train, problem.spec.ridge_strength, student_attention(problem.spec))
    return float(R) / problem.d


# --------------------------------------------------------------------------- runs


@dataclasses.dataclass(frozen=True)
class Training:
    """How one student of a data set is trained: its start and the settings of
    :func:`validation.simulator.training.train_batch` (``lr`` None: the optimiser's default)."""

    init: str
    steps: int = 5000
    lr: Optional[float] = None
    optimizer: str = "gd"
    record_points: int = 200
    stop: Optional[StopRule] = None


def run_data_set(spec: ModelSpec, d: int, alpha: float, trainings: Sequence[Training], seed: int = 0,
                 run_index: int = 0, dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
                 n_test: int = 10000, progress: Optional[Callable[[int], None]] = None) -> list:
    """Run ``run_index`` of ``seed`` once per element of ``trainings``: one data set (teacher, training
    and test sets, linear baseline) drawn once, and its students trained as one batch per shared
    number of steps and recorded points, each with its own optimiser, learning rate and early stop
    (:func:`validation.simulator.training.train_batch`). One JSON-ready
    record per training, each the record :func:`run_one` gives for it alone (timings apart:
    ``train_time`` and ``wall_time`` are the run's share of its batch's and of the call's), or the
    :class:`SimulationDiverged` of a run that diverged. ``steps_run``: the updates computed (fewer
    than ``steps`` after an early stop, :mod:`validation.simulator.training`). ``progress``: told
    the run-steps taken."""
    for tr in trainings:
        check_init(spec, tr.init)
    device = choose_device(None) if device is None else device
    t0 = time.perf_counter()
    problem = make_problem(spec, d, alpha, seed, run_index, n_test, dtype, device)
    groups = {}
    for j, tr in enumerate(trainings):
        groups.setdefault((tr.steps, tr.record_points), []).append(j)
    results = [None] * len(trainings)
    for (steps, record_points), members in groups.items():
        runs = [trainings[j] for j in members]
        out = train_batch(problem, [tr.init for tr in runs], steps, [tr.lr for tr in runs],
                          [tr.optimizer for tr in runs], record_points, progress=progress,
                          stop=[tr.stop for tr in runs])
        for j, result in zip(members, out):
            results[j] = result
    linear = linear_test_error(fit_linear_baseline(problem.train), problem.test)
    records = []
    for tr, result in zip(trainings, results):
        if isinstance(result, SimulationDiverged):
            records.append(result)
            continue
        records.append({
            "run_index": run_index,
            "seed": seed,
            "n": problem.n,
            "test_error": test_error(result.Q, problem),
            "train_loss": train_loss(result.Q, problem),
            **summary_statistics(result.Q, problem),
            "linear_test_error": linear,
            "final_grad_norm": result.grad_norm,
            "steps_run": result.steps_run,
            "train_time": result.wall_time,
            "step_time": result.wall_time / max(1, tr.steps),
        })
    wall = (time.perf_counter() - t0) / len(trainings)
    for tr, rec, result in zip(trainings, records, results):
        if isinstance(rec, dict):
            rec["wall_time"] = wall
            rec["loss_curve"] = result.loss_curve
            log.info("d=%d alpha=%g init=%s run %d: test %.6g train %.6g column |m| max %.4g theta/s2 max %.4g "
                     "(%.1f s)", d, alpha, tr.init, run_index, rec["test_error"], rec["train_loss"],
                     rec["m_col_max"], rec["theta_over_sigma2_col_max"], rec["wall_time"])
    return records


def run_starts(spec: ModelSpec, d: int, alpha: float, inits: Sequence[str], seed: int = 0, run_index: int = 0,
               steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
               dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
               n_test: int = 10000, record_points: int = 200, progress: Optional[Callable[[int], None]] = None,
               stop: Optional[StopRule] = None) -> list:
    """Run ``run_index`` of ``seed`` from each start of ``inits``, trained alike: :func:`run_data_set`."""
    return run_data_set(spec, d, alpha, [Training(init, steps, lr, optimizer, record_points, stop) for init in inits],
                        seed, run_index, dtype, device, n_test, progress)


def run_one(spec: ModelSpec, d: int, alpha: float, init: str, seed: int = 0, run_index: int = 0,
            steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
            dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
            n_test: int = 10000, record_points: int = 200, progress: Optional[Callable[[int], None]] = None,
            stop: Optional[StopRule] = None) -> dict:
    """One seeded run: draw, train, measure. Returns a JSON-ready record (:func:`run_starts` of one
    start); raises :class:`SimulationDiverged`."""
    (record,) = run_starts(spec, d, alpha, [init], seed, run_index, steps, lr, optimizer, dtype, device, n_test,
                           record_points, progress, stop)
    if isinstance(record, SimulationDiverged):
        raise record
    return record


AGGREGATED = ("test_error", "train_loss", "m", "theta_over_sigma2", "q", "linear_test_error")
#: the statistics of :func:`summary_statistics` that exist for every shape (indexed or per column)
_SHAPE_STATISTIC = re.compile(r"(q_eig|m_sv|theta_sv)_\d+|(m|theta_over_sigma2)_col_(max|min)")


def aggregated_keys(run: dict) -> list:
    """The record keys :func:`aggregate` summarises, in record order after the overlaps of
    docs/theory.md, section 1.5 (those exist for ``r = t = k = 1`` only)."""
    fixed = [k for k in AGGREGATED + ("m_signed", "theta_over_sigma2_signed") if k in run]
    return fixed + [k for k in run if _SHAPE_STATISTIC.fullmatch(k)]


def aggregate(runs: list) -> dict:
    """Means and standard deviations (ddof=1; 0 for a single run) over runs, as flat
    ``<key>_mean`` and ``<key>_std`` scalars for every key of :func:`aggregated_keys`."""
    out = {}
    for key in aggregated_keys(runs[0]):
        vals = np.array([r[key] for r in runs], dtype=float)
        out[f"{key}_mean"] = float(vals.mean())
        out[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    return out


def simulate_starts(spec: ModelSpec, d: int, alpha: float, inits: Sequence[str], seeds: int = 1, seed: int = 0,
                    steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
                    dtype: str = "float32", device: Optional[str] = None, n_test: int = 10000,
                    record_points: int = 200, progress: Optional[Callable[[int], None]] = None,
                    stop: Optional[StopRule] = None) -> Dict[str, dict]:
    """:func:`simulate` for each start of ``inits``, the starts of each run trained together
    (:func:`run_starts`): ``{init: result}``, each result that of :func:`simulate` for that start
    alone (timings apart). A diverged run raises its :class:`SimulationDiverged`, the first in the
    order ``(init, run)``."""
    for init in inits:
        check_init(spec, init)
    if dtype not in DTYPES:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    dev = choose_device(device)
    lr_used = DEFAULT_LR[optimizer] if lr is None else float(lr)
    t0 = time.perf_counter()
    by_run = [run_starts(spec, d, alpha, inits, seed, k, steps, lr_used, optimizer, DTYPES[dtype], dev, n_test,
                         record_points, progress, stop) for k in range(seeds)]
    for j in range(len(inits)):
        for records in by_run:
            if isinstance(records[j], SimulationDiverged):
                raise records[j]
    wall = (time.perf_counter() - t0) / len(inits)
    out = {}
    for j, init in enumerate(inits):
        runs = [records[j] for records in by_run]
        out[init] = {
            "model": spec.to_dict(), "d": d, "alpha": alpha, "n": runs[0]["n"], "init": init, "seeds": seeds,
            "seed": seed, "steps": steps, "lr": lr_used, "optimizer": optimizer, "dtype": dtype, "device": str(dev),
            "n_test": n_test, "linear_ridge": LINEAR_RIDGE, **aggregate(runs), "wall_time": wall, "runs": runs,
        }
    return out


def simulate(spec: ModelSpec, d: int, alpha: float, init: str, seeds: int = 1, seed: int = 0,
             steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
             dtype: str = "float32", device: Optional[str] = None, n_test: int = 10000,
             record_points: int = 200, progress: Optional[Callable[[int], None]] = None,
             stop: Optional[StopRule] = None) -> dict:
    """``seeds`` independent runs (run ``k`` seeded by ``SeedSequence(seed, spawn_key=(k,))``) and their
    aggregates. ``progress(n)``: told the steps taken, ``seeds * steps`` in all."""
    return simulate_starts(spec, d, alpha, [init], seeds, seed, steps, lr, optimizer, dtype, device, n_test,
                           record_points, progress, stop)[init]

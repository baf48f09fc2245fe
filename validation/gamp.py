"""GAMP on finite instances (docs/gamp.md): one seeded run (:func:`gamp_run`) and several with their
aggregates (:func:`gamp`), in the records' style of :mod:`validation.simulate`. Torch-free: the
instances are drawn by :mod:`validation.instances` (``data="numpy"``), or taken from the simulator's
own draw (``data="simulate"``, torch needed).

A record holds the overlaps' invariants at the fixed point (``q_eigenvalues_1``, ...,
``m_singular_values_1``, ..., ``theta_singular_values_1``, ..., ``V_eigenvalues_1``, ...: the names of
:class:`numerics.api.FixedPoint`), for two tokens and rank one also ``q``, ``m`` and ``theta`` (``m``
and ``theta`` in absolute value, ``m_signed`` and ``theta_signed`` with their sign), the training loss ``R/d`` and the test error on the run's fresh
samples, and GAMP's checks: ``risk_gradient_norm`` (``|dR/dQ|_F / |lam Q|_F``), ``grad_norm``
(``|dR/dQ|_F / sqrt(d)``, as gradient descent's ``final_grad_norm``), the iterations, the damping
that converged, the samples whose prox switched in the last iteration and the replicon eigenvalue of
the instance (``instance_stability``).

:func:`gamp_point` is the counterpart of :func:`validation.simulate.simulate` for ``attnphase validate
--method gamp``: its runs in the simulator's record names (:func:`simulation_names`), the linear
baseline on each instance, and the runs that did not converge kept beside them, each with its reason.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Callable, Optional, Sequence

import numpy as np

from derivations import ModelSpec

from numerics.api import GampError, SampleLoss, run_gamp
from validation.instances import draw_instance, from_problem, initial_Q, linear_test_error, overlaps, test_error

log = logging.getLogger(__name__)

DATA_SOURCES = ("numpy", "simulate")
#: the invariants of a record, as numerics.api.FixedPoint names them
INVARIANTS = ("q_eigenvalues", "m_singular_values", "theta_singular_values", "V_eigenvalues")


class GampRunFailed(RuntimeError):
    """A run's GAMP did not converge: the message names the run, each damping tried with the iteration
    where it went wrong, and the overlaps the last iterations wandered over."""

    def __init__(self, seed: int, run_index: int, error: GampError, plateau: dict):
        spread = ", ".join(f"{k} {v['mean']:.5g} +- {v['std']:.1e}" for k, v in plateau.items() if k != "switched")
        switched = plateau.get("switched", {}).get("mean", math.nan)
        super().__init__(f"run {run_index} of seed {seed}: {error}; over its last iterations the invariants were "
                         f"{spread}, with {switched:.3g} samples switching their prox minimum per iteration")
        self.seed, self.run_index, self.error, self.plateau = seed, run_index, error, plateau


def invariants(instance, Q, V=None) -> dict:
    """The gauge invariants of a student's overlaps (docs/theory.md, section 4.9), flat, named as
    :class:`numerics.api.FixedPoint` names them; ``V`` (GAMP's variance) adds its eigenvalues."""
    o = overlaps(instance, Q)
    values = {"q_eigenvalues": np.sort(np.linalg.eigvalsh(o["q"]))[::-1],
              "m_singular_values": np.linalg.svd(o["m"], compute_uv=False),
              "theta_singular_values": np.linalg.svd(o["theta"], compute_uv=False)}
    if V is not None:
        values["V_eigenvalues"] = np.sort(np.linalg.eigvalsh(np.asarray(V)))[::-1]
    out = {f"{name}_{i + 1}": float(v) for name, vals in values.items() for i, v in enumerate(vals)}
    if instance.spec.shape[1:] == (1, 1, 1):
        m, theta = float(o["m"][0, 0]), float(o["theta"][0, 0])
        out.update(q=float(o["q"][0, 0]), m=abs(m), theta=abs(theta), m_signed=m, theta_signed=theta)
    return out


def _plateau(history: Sequence[dict], window: int) -> dict:
    """Mean and spread of the tracked invariants (and of the switching samples) over the last ``window``
    iterations."""
    tail = list(history)[-window:]
    if not tail:
        return {}
    keys = [k for k in tail[0] if k.endswith("_1") or k == "switched"]
    return {k: {"mean": float(np.mean([h[k] for h in tail])), "std": float(np.std([h[k] for h in tail]))} for k in keys}


def instance_for(spec: ModelSpec, d: int, alpha: float, seed: int, run_index: int, data: str = "numpy",
                 dtype: str = "float64", n_test: int = 10000):
    """Run ``run_index`` of ``seed`` drawn by numpy (:func:`validation.instances.draw_instance`) or the
    simulator's own draw of it (``data="simulate"``)."""
    if data not in DATA_SOURCES:
        raise ValueError(f"data: choose from {', '.join(DATA_SOURCES)}, got {data!r}")
    if data == "numpy":
        return draw_instance(spec, d, alpha, seed, run_index, dtype, n_test)
    import torch

    from validation.simulate import make_problem

    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    return from_problem(make_problem(spec, d, alpha, seed, run_index, n_test, torch_dtype, torch.device("cpu")))


def gamp_run(spec: ModelSpec, d: int, alpha: float, init: str, seed: int = 0, run_index: int = 0,
             data: str = "numpy", dtype: str = "float64", n_test: int = 10000,
             dampings: Optional[Sequence[float]] = None, history: bool = False,
             progress: Optional[Callable] = None, plateau_window: int = 30, instance=None, **options) -> dict:
    """One seeded run: draw the instance, run GAMP from ``init`` (docs/theory.md, section 1.4), measure.
    Returns a JSON-ready record (module docstring); ``history``: with the per-iteration invariants.
    ``instance``: the run's instance already drawn (:func:`instance_for` of these arguments).
    ``options`` go to :func:`numerics.api.run_gamp`. Raises :class:`GampRunFailed` where GAMP does not
    converge, with the invariants' mean and spread over its last ``plateau_window`` iterations."""
    t0 = time.perf_counter()
    if instance is None:
        instance = instance_for(spec, d, alpha, seed, run_index, data, dtype, n_test)
    drawn = time.perf_counter() - t0

    def track(Q):
        return invariants(instance, Q)

    kwargs = dict(options)
    if dampings is not None:
        kwargs["dampings"] = tuple(dampings)
    try:
        res = run_gamp(spec, instance.X, instance.coef, initial_Q(instance, init), track=track, progress=progress,
                       **kwargs)
    except GampError as exc:
        raise GampRunFailed(seed, run_index, exc, _plateau(exc.history, plateau_window)) from None
    loss = SampleLoss(spec)
    record = {"run_index": run_index, "seed": seed, "n": instance.n, "data": data,
              "test_error": test_error(instance, res.Q, loss.loss), "train_loss": res.train_risk,
              **invariants(instance, res.Q, res.V),
              "risk_gradient_norm": res.risk_gradient_norm, "grad_norm": res.grad_norm,
              "iterations": res.iterations, "damping": res.damping, "converged": True,
              "switched_last": res.history[-1]["switched"], "instance_stability": res.instance_stability,
              "draw_time": drawn, "gamp_time": res.wall_time, "wall_time": time.perf_counter() - t0}
    if history:
        record["history"] = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in h.items()}
                             for h in res.history]
    log.info("d=%d alpha=%g init=%s run %d: train %.6g test %.6g in %d iterations (damping %g, %.1f s)", d, alpha, init,
             run_index, record["train_loss"], record["test_error"], res.iterations, res.damping, record["wall_time"])
    return record


#: the record keys :func:`gamp` summarises (the invariants besides)
AGGREGATED = ("test_error", "train_loss", "q", "m", "theta")


def aggregated_keys(run: dict) -> list:
    """The keys of a record that :func:`gamp` averages: test error, training loss, the overlaps of
    docs/theory.md, section 1.5 where they exist, and every invariant."""
    fixed = [k for k in AGGREGATED if k in run]
    return fixed + [k for k in run if any(k.startswith(n + "_") for n in INVARIANTS)]


def gamp(spec: ModelSpec, d: int, alpha: float, init: str, seeds: int = 1, seed: int = 0, data: str = "numpy",
         dtype: str = "float64", n_test: int = 10000, dampings: Optional[Sequence[float]] = None,
         progress: Optional[Callable] = None) -> dict:
    """``seeds`` runs (run ``k`` of ``seed``, as the simulator numbers them) and their means and standard
    deviations (``<key>_mean``, ``<key>_std``, ddof 1; 0 for one run)."""
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    t0 = time.perf_counter()
    runs = []
    for k in range(seeds):
        runs.append(gamp_run(spec, d, alpha, init, seed, k, data, dtype, n_test, dampings,
                             progress=(lambda t, r, k=k: progress(k, t, r)) if progress else None))
    out = {"model": spec.to_dict(), "d": d, "alpha": alpha, "n": runs[0]["n"], "init": init, "seeds": seeds,
           "seed": seed, "data": data, "dtype": dtype, "n_test": n_test}
    for key in aggregated_keys(runs[0]):
        vals = np.array([r[key] for r in runs], dtype=float)
        out[f"{key}_mean"] = float(vals.mean())
        out[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    out["wall_time"] = time.perf_counter() - t0
    out["runs"] = runs
    return out


# --------------------------------------------------------------------------- validate's points

#: GAMP's record name -> the simulator's (validation.simulator.records.summary_statistics); component
#: ``j`` is ``<name>_<j>`` in both
SIMULATION_PREFIXES = {"q_eigenvalues": "q_eig", "m_singular_values": "m_sv", "theta_singular_values": "theta_sv"}


def simulation_names(record: dict, spec: ModelSpec) -> dict:
    """A GAMP record under the names of a trained run's record, so that :mod:`validation.statistics`
    compares it as it compares gradient descent's: the invariants ``q_eig_j``, ``m_sv_j``,
    ``theta_sv_j``, and for two tokens and rank one ``theta_over_sigma2`` (``|Q*.Q| / d``), its signed
    value and ``m_signed``; ``final_grad_norm`` is GAMP's ``grad_norm``. GAMP's own checks are kept."""
    out = {}
    for key, value in record.items():
        name, _, j = key.rpartition("_")
        if name in SIMULATION_PREFIXES and j.isdigit():
            out[f"{SIMULATION_PREFIXES[name]}_{j}"] = value
        elif key not in ("theta", "theta_signed"):
            out[key] = value
    if "theta" in record:
        s2 = spec.sigma ** 2
        out.update(theta_over_sigma2=record["theta"] / s2, theta_over_sigma2_signed=record["theta_signed"] / s2)
    out["final_grad_norm"] = record["grad_norm"]
    return out


def gamp_point(spec: ModelSpec, d: int, alpha: float, init: str, seeds: int = 1, seed: int = 0,
               dtype: str = "float64", n_test: int = 10000, dampings: Optional[Sequence[float]] = None,
               progress: Optional[Callable[[int], None]] = None) -> dict:
    """``seeds`` GAMP runs from ``init`` (run ``k`` of ``seed``: the simulator's seed streams, numpy's
    draw) as ``attnphase validate --method gamp`` compares them: a result shaped as
    :func:`validation.simulate.simulate`'s (``runs`` in :func:`simulation_names`, each with the linear
    baseline's test error on its instance, ``linear_test_error``), with ``"method": "gamp"`` and the
    damping schedule. A run whose GAMP does not converge (:class:`GampRunFailed`) is no record of
    ``runs`` but an entry of ``not_converged``: its index, its reason (the message of
    :class:`GampRunFailed`) and its instance's ``linear_test_error``. ``progress(1)``: told each run done."""
    from numerics.api import DAMPINGS
    from validation.run_settings import LINEAR_RIDGE

    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    dampings = tuple(DAMPINGS if dampings is None else dampings)
    t0 = time.perf_counter()
    runs, failed = [], []
    n = None
    for k in range(seeds):
        instance = draw_instance(spec, d, alpha, seed, k, dtype, n_test)
        n = instance.n
        linear = linear_test_error(instance)
        try:
            record = gamp_run(spec, d, alpha, init, seed, k, "numpy", dtype, n_test, dampings, instance=instance)
        except GampRunFailed as exc:
            log.info("d=%d alpha=%g init=%s: %s", d, alpha, init, exc)
            failed.append({"run_index": k, "seed": seed, "reason": str(exc), "linear_test_error": linear})
        else:
            runs.append({**simulation_names(record, spec), "linear_test_error": linear})
        del instance
        if progress:
            progress(1)
    return {"model": spec.to_dict(), "d": d, "alpha": alpha, "n": n, "init": init, "seeds": seeds, "seed": seed,
            "method": "gamp", "damping": list(dampings), "dtype": dtype, "data": "numpy", "n_test": n_test,
            "linear_ridge": LINEAR_RIDGE, "wall_time": time.perf_counter() - t0, "runs": runs,
            "not_converged": failed}

"""What ``attnphase paper`` computes: the settings of each mode (:data:`PLANS`), the models
of the figures, and the tasks that compute their data (:class:`TaskBuilder`).

A task is a keyed unit of work run on a Dask worker; its rows go to one data file, and
the data decides what is done (:mod:`attnphase.sweeps.store`). Figures share tasks: the key says
what a task computes (model, grid, precision, dimension, seed), so two figures that need
the same branch curve or the same simulated run name the same task, and it runs once.

Modes
-----
``quick`` (at most 20 minutes on two cores): draft branch curves on a coarse ``alpha``
grid (draft is drawn, not quoted), thresholds in fast precision (their errors are
quoted), gradient descent at ``d = 200`` with few seeds, the phase diagram's
gradient-descent plane at ``d = 100`` on a coarse grid, and the histogram task's reduced
training. ``full``: fast branch curves on a fine grid, the paper's ``d = 1000`` for the
gradient-descent points, more seeds, a finer plane, the high-precision thresholds at
``omega = 0.3`` as a convergence check, and the histogram task's full training.

Either mode with ``gamp`` (``attnphase paper --gamp``): the order-parameters figure's
gradient-descent points (``gd``: its ``d``, seeds, ``alpha`` values and both informed starts) are
also run by GAMP (docs/gamp.md) on instances of the same seed streams (numpy's draw), one task each
(:meth:`TaskBuilder.gamp`), their rows in ``data/gamp_runs.csv``. The field is in the settings only
when it is on, so a folder computed without it keeps its settings hash.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from derivations import ModelSpec
from numerics.api import COMPETING_BRANCHES, DAMPINGS
from attnphase.histogram_task import experiment as histogram_experiment
from attnphase.sweeps.grid import fmt

from . import PaperError

#: the paper's second positional matrix (docs/theory.md, section 1.2)
SECOND_A = ((0.3, 0.7), (0.8, 0.2))
#: the informed starts of docs/theory.md, section 1.4 (order: semantic, positional)
INFORMED = COMPETING_BRANCHES
#: the data files of the computed rows (under the output folder)
THEORY_CURVES = "data/theory_curves.csv"
REFERENCE_POINTS = "data/reference_points.csv"
THRESHOLDS = "data/thresholds.csv"
GD_RUNS = "data/gd_runs.csv"
HISTOGRAM_RUNS = "data/histogram_runs.csv"
GAMP_RUNS = "data/gamp_runs.csv"
TASK_FILES = (THEORY_CURVES, REFERENCE_POINTS, THRESHOLDS, GD_RUNS, HISTOGRAM_RUNS, GAMP_RUNS)
#: GAMP's damping schedule in the plan's runs: the default of ``attnphase gamp``
GAMP_DAMPINGS = tuple(DAMPINGS)


def grid(start: float, stop: float, n: int) -> tuple:
    """``n`` evenly spaced values, both ends included, at 12 significant digits."""
    return tuple(float(fmt(v)) + 0.0 for v in np.linspace(start, stop, n))


@dataclasses.dataclass(frozen=True)
class Runs:
    """Gradient-descent runs of one kind: dimension, seeds per point, the ``alpha`` values,
    steps, learning rate (None: the optimiser's default) and fresh test samples. ``adam_stop``:
    Adam runs stop once settled (``validation.simulate.StopRule()``; their numbers stay within
    2.1e-3 relative of the full runs', at least 390 times below their spread over seeds at d = 1000:
    ``python benchmarks/simulation.py --shapes "" --early-stop``)."""

    d: int
    seeds: int
    alphas: tuple
    steps: int = 5000
    n_test: int = 10000
    lr: Optional[float] = None
    adam_stop: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every setting of a mode. ``alphas`` is the theory grid of every model (branch
    curves by continuation; the thresholds start from their rows)."""

    name: str
    curve_precision: str
    threshold_precision: str
    alphas: tuple
    reference_alpha: float
    diagram_omegas: tuple
    slice_omegas: tuple
    slice_lams: tuple
    slice_sigmas: tuple
    second_A_omegas: tuple
    gd: Runs                     # the default model: figures 1-3 and the omega = 0.3 slice
    slice_gd: Runs               # the other models of the slices and of the second A
    plane_gd: Runs               # the (alpha, omega) plane of the phase diagram
    plane_omegas: tuple
    finite_size_ds: tuple
    finite_size: Runs            # its d is unused: the d values are finite_size_ds
    starts: Runs                 # random starts, gradient descent and Adam
    rank_two: Runs
    histogram: dict              # histogram_task.experiment.HistogramConfig fields
    histogram_seeds: int
    rank_two_theory_alphas: tuple = (0.5, 1.5, 2.5)   # the rank-two branches (draft QMC: about a minute a point)
    high_check: bool = False     # thresholds at omega = 0.3 also in high precision
    seed: int = 0
    gamp: bool = False           # the gd points of the order-parameters figure also by GAMP

    def settings(self) -> dict:
        """The settings as plain data (the manifest's record; their hash guards a folder). ``gamp``
        is there only when on: the settings of a plan without it are those it had before the option."""
        d = dataclasses.asdict(self)
        if not self.gamp:
            del d["gamp"]
        return json_ready(d)


def json_ready(value):
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


QUICK_ALPHAS = grid(0.1, 2.5, 13)      # steps of 0.2
FULL_ALPHAS = grid(0.05, 2.5, 50)      # steps of 0.05
QUICK_GD_ALPHAS = (0.5, 0.9, 1.3, 1.7, 2.1, 2.5)
FULL_GD_ALPHAS = grid(0.25, 2.5, 10)
PUBLISHED_OMEGAS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)



def histogram_changes(config) -> dict:
    """The fields of a histogram-task configuration that differ from the full experiment's."""
    full = histogram_experiment.FULL
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(full, f.name)}


PLANS: Dict[str, Plan] = {
    "quick": Plan(
        name="quick", curve_precision="draft", threshold_precision="fast", alphas=QUICK_ALPHAS,
        reference_alpha=2.0, diagram_omegas=PUBLISHED_OMEGAS, slice_omegas=(0.1, 0.2, 0.3, 0.4),
        slice_lams=(0.005, 0.01, 0.05), slice_sigmas=(0.4, 0.5, 0.7), second_A_omegas=(0.14, 0.15),
        gd=Runs(200, 3, QUICK_GD_ALPHAS), slice_gd=Runs(200, 2, (0.5, 1.3, 2.1)),
        plane_gd=Runs(100, 1, QUICK_GD_ALPHAS), plane_omegas=(0.0, 0.1, 0.2, 0.3, 0.4),
        finite_size_ds=(50, 100, 200, 400), finite_size=Runs(0, 3, (2.0,)),
        starts=Runs(200, 4, (0.5, 1.3, 2.1), adam_stop=True), rank_two=Runs(200, 2, QUICK_GD_ALPHAS),
        histogram=histogram_changes(histogram_experiment.QUICK), histogram_seeds=3),
    "full": Plan(
        name="full", curve_precision="fast", threshold_precision="fast", alphas=FULL_ALPHAS,
        reference_alpha=2.0, diagram_omegas=grid(0.0, 0.45, 10), slice_omegas=(0.1, 0.2, 0.3, 0.4),
        slice_lams=(0.005, 0.01, 0.05), slice_sigmas=(0.4, 0.5, 0.7), second_A_omegas=(0.14, 0.15),
        gd=Runs(1000, 5, FULL_GD_ALPHAS), slice_gd=Runs(500, 3, FULL_GD_ALPHAS),
        plane_gd=Runs(500, 2, FULL_GD_ALPHAS), plane_omegas=grid(0.0, 0.45, 10),
        finite_size_ds=(100, 200, 400, 800, 1600), finite_size=Runs(0, 5, (2.0,)),
        starts=Runs(1000, 10, FULL_GD_ALPHAS, adam_stop=True), rank_two=Runs(1000, 5, FULL_GD_ALPHAS),
        histogram={}, histogram_seeds=3, rank_two_theory_alphas=grid(0.5, 2.5, 5), high_check=True),
}


# --------------------------------------------------------------------------- models


def default_model(omega: float = 0.3) -> ModelSpec:
    return ModelSpec(omega=float(omega))


def model_label(spec: ModelSpec) -> str:
    """A short name of a model: ``omega`` and every parameter that differs from the default
    model (``omega=0.3``, ``omega=0.3,lam=0.05``, ``omega=0.14,A=0.3,0.7;0.8,0.2``,
    ``omega=0.3,rank=2``). Equal models have equal labels, so their tasks are shared."""
    base, cols = ModelSpec().to_dict(), spec.to_dict()
    parts = [f"omega={fmt(spec.omega)}"]
    for k, v in cols.items():
        if k in ("omega", "rho") or v == base.get(k):
            continue
        if k == "A":
            parts.append("A=" + ";".join(",".join(fmt(x) for x in row) for row in v))
        elif isinstance(v, float):
            parts.append(f"{k}={fmt(v)}")
        else:
            parts.append(f"{k}={v}")
    return ",".join(parts)


# --------------------------------------------------------------------------- tasks


@dataclasses.dataclass(frozen=True)
class Task:
    """A keyed unit of work: ``fn(payload)`` on a worker gives ``{"rows": [...]}`` (or
    ``{"thresholds": {...}}``); its rows go to ``file``, ``n_rows`` of them. ``after``:
    tasks whose rows it starts from (added to the payload when they are stored).
    ``priority``: higher first (the long tasks, so that short ones fill the end)."""

    key: str
    kind: str
    fn: Callable
    payload: dict
    file: str
    n_rows: int
    model: str
    after: tuple = ()
    priority: int = 0


def default_functions() -> dict:
    """The task function of each kind (tests replace them with fakes)."""
    from attnphase.sweeps.tasks import simulation_run_task, theory_task

    from .tasks import gamp_run_task, histogram_run_task

    return {"curve": theory_task, "point": theory_task, "thresholds": theory_task, "gd": simulation_run_task,
            "histogram": histogram_run_task, "gamp": gamp_run_task}


def function_names(functions: dict) -> dict:
    """The importable names of the task functions (part of the settings: a fake's rows are
    not the real ones)."""
    out = {}
    for kind, fn in sorted(functions.items()):
        while hasattr(fn, "func"):  # functools.partial: its arguments (a test delay) do not change results
            fn = fn.func
        out[kind] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return out


class TaskBuilder:
    """The tasks of a plan, named so that equal work has one key."""

    def __init__(self, plan: Plan, functions: Optional[dict] = None):
        self.plan = plan
        self.functions = {**default_functions(), **(functions or {})}
        if not plan.gamp:  # the functions are part of the settings: a plan without GAMP names none
            self.functions.pop("gamp", None)

    def curve(self, spec: ModelSpec, branch: str, alphas: Optional[Sequence[float]] = None) -> Task:
        """``branch`` of ``spec`` along the plan's ``alphas`` (or ``alphas``: a model's curves are on
        one grid, so the key need not name it)."""
        label = model_label(spec)
        alphas = list(self.plan.alphas if alphas is None else alphas)
        payload = {"spec": spec, "omega": spec.omega, "alphas": alphas,
                   "precision": self.plan.curve_precision, "job": "branch", "branch": branch}
        return Task(f"curve:{label}:branch={branch}", "curve", self.functions["curve"], payload, THEORY_CURVES,
                    len(alphas), label, priority=3)

    def curves(self, spec: ModelSpec) -> list:
        return [self.curve(spec, b) for b in INFORMED]

    def thresholds(self, spec: ModelSpec, precision: Optional[str] = None) -> Task:
        """``alpha_c``, ``alpha_l`` and the spinodals, bracketed by the model's branch curves
        as read back from their data file."""
        label = model_label(spec)
        precision = precision or self.plan.threshold_precision
        payload = {"spec": spec, "omega": spec.omega, "alphas": list(self.plan.alphas), "precision": precision,
                   "job": "thresholds"}
        return Task(f"thresholds:{label}:precision={precision}", "thresholds", self.functions["thresholds"],
                    payload, THRESHOLDS, 1, label, after=tuple(t.key for t in self.curves(spec)), priority=2)

    def authors_curve(self, authors) -> Task:
        """Our branch at the ``alpha`` values of one of the authors' stored files
        (:class:`attnphase.paper.authors.AuthorsFile`), in the plan's curve precision, to set
        their points beside ours."""
        label = model_label(authors.spec)
        payload = {"spec": authors.spec, "omega": authors.spec.omega, "alphas": list(authors.alphas),
                   "precision": self.plan.curve_precision, "job": "branch", "branch": authors.branch}
        return Task(authors_key(authors), "curve", self.functions["curve"], payload, THEORY_CURVES,
                    len(authors.alphas), label, priority=3)

    def point(self, spec: ModelSpec, branch: str, alpha: Optional[float] = None) -> Task:
        """One branch at one ``alpha`` in fast precision, with error estimates (the key
        numbers at the reference alpha)."""
        label = model_label(spec)
        alpha = self.plan.reference_alpha if alpha is None else alpha
        payload = {"spec": spec, "omega": spec.omega, "alphas": [alpha], "precision": "fast", "job": "branch",
                   "branch": branch}
        return Task(f"point:{label}:alpha={fmt(alpha)}:branch={branch}", "point", self.functions["point"], payload,
                    REFERENCE_POINTS, 1, label, priority=3)

    def gd(self, spec: ModelSpec, runs: Runs, inits: Sequence[str] = INFORMED, optimizer: str = "gd",
           d: Optional[int] = None, alphas: Optional[Sequence[float]] = None) -> list:
        label = model_label(spec)
        d = runs.d if d is None else d
        out = []
        for a in (runs.alphas if alphas is None else alphas):
            for init in inits:
                for k in range(runs.seeds):
                    stop = runs.adam_stop and optimizer == "adam"
                    payload = {"spec": spec, "omega": spec.omega, "alpha": float(a), "init": init, "run_index": k,
                               "seed": self.plan.seed, "d": d, "steps": runs.steps, "lr": runs.lr,
                               "optimizer": optimizer, "dtype": "float32", "n_test": runs.n_test, "stop": stop}
                    key = (f"gd:{label}:d={d}:alpha={fmt(a)}:init={init}:opt={optimizer}"
                           + (":stop" if stop else "") + f":run={k}")
                    out.append(Task(key, "gd", self.functions["gd"], payload, GD_RUNS, 1, label, priority=1))
        return out

    def gamp(self, spec: ModelSpec, runs: Runs, inits: Sequence[str] = INFORMED) -> list:
        """GAMP at the points of ``runs`` (its ``d``, ``alphas`` and seeds) from ``inits``: run ``k`` of the
        plan's seed on numpy's draw of that run's seed streams (the gd runs' streams, another draw of
        the same law), GAMP's damping schedule :data:`GAMP_DAMPINGS`, float64, the runs' ``n_test``."""
        if "gamp" not in self.functions:
            raise RuntimeError("GAMP tasks asked of a plan without gamp")
        label = model_label(spec)
        out = []
        for a in runs.alphas:
            for init in inits:
                for k in range(runs.seeds):
                    payload = {"spec": spec, "omega": spec.omega, "alpha": float(a), "init": init, "run_index": k,
                               "seed": self.plan.seed, "d": runs.d, "n_test": runs.n_test, "dtype": "float64",
                               "dampings": list(GAMP_DAMPINGS)}
                    key = f"gamp:{label}:d={runs.d}:alpha={fmt(a)}:init={init}:run={k}"
                    out.append(Task(key, "gamp", self.functions["gamp"], payload, GAMP_RUNS, 1, label, priority=1))
        return out

    def histogram(self) -> list:
        out = []
        for kind in ("only_pos", "only_sem"):
            for k in range(self.plan.histogram_seeds):
                payload = {"config": dict(self.plan.histogram), "kind": kind, "seed": self.plan.seed,
                           "run_index": k}
                out.append(Task(f"histogram:{kind}:run={k}", "histogram", self.functions["histogram"], payload,
                                HISTOGRAM_RUNS, 1, "histogram", priority=3))
        return out


def authors_key(authors) -> str:
    """The key of :meth:`TaskBuilder.authors_curve`'s task."""
    return f"authors:{model_label(authors.spec)}:branch={authors.branch}"


def unique(tasks: Sequence[Task]) -> list:
    """The tasks without repeats (figures share tasks), in first-seen order."""
    seen, out = {}, []
    for t in tasks:
        if t.key in seen:
            continue
        seen[t.key] = t
        out.append(t)
    return out


def plan_named(name: str) -> Plan:
    try:
        return PLANS[name]
    except KeyError:
        raise PaperError(f"plan: choose from {', '.join(PLANS)}, got {name!r}") from None

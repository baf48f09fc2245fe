"""The task functions of a sweep (run on the Dask workers) and the rows they give.

Theory: one task per branch and ``omega`` column (:func:`theory_task`, ``job =
"branch"``) and one for the column's thresholds (``job = "thresholds"``), for every model through
one front: each branch of :attr:`attnphase.sweeps.config.SweepConfig.theory_branches` followed on the
grid (``numerics.api.follow``), then the thresholds from those rows (``numerics.api.thresholds``:
for the paper's two branches the crossing of their training losses and the spinodals, otherwise
every change of the global branch). The rows are the fixed points' records: the line quadrature's
scalars ``q, m, V, theta``, or packed components and invariants where the overlaps are matrices.
Simulation: one task per finite-size run (:func:`simulation_run_task`); the runner trains the
starts of one run together (:func:`batch_simulations`), each run's rows those of it alone. The writer
adds the model and solver columns to every row (:func:`theory_rows`,
:func:`simulation_rows`), in the model's one CSV schema
(:meth:`derivations.spec.ModelSpec.to_columns`).
"""
from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from typing import Callable, Optional

from tidyio import is_true, json_text, number

from .config import SIM_INITS, THEORY_BRANCHES, SweepConfig
from .grid import grid_text, simulation_key, theory_key
from .store import SIMULATION_CSV, THEORY_CSV, THRESHOLDS_CSV

log = logging.getLogger(__name__)

THRESHOLD_COLUMNS = ("task", "omega", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error",
                     "linear_test_error", "linear_test_error_error")
#: a branch row's first columns (every model's: the overlaps' components, named by the shape, follow)
FIRST_THEORY_COLUMNS = ("task", "omega", "alpha", "branch", "exists", "converged", "status", "test_error",
                         "test_error_error", "train_loss", "train_loss_error", "linear_test_error",
                         "linear_test_error_error")


@dataclasses.dataclass(frozen=True)
class Task:
    key: str
    kind: str  # "theory" | "simulation"
    fn: Callable
    payload: dict


def make_tasks(config: SweepConfig, theory_task: Callable, simulation_task: Callable) -> list:
    tasks = []
    if "theory" in config.kinds:
        branches = config.theory_branches
        for w in config.omegas:
            for job in branches + ("thresholds",):
                payload = {"spec": config.spec_at(w), "omega": w, "alphas": list(config.alphas),
                           "precision": config.precision, "job": "thresholds" if job == "thresholds" else "branch"}
                if job == "thresholds":
                    payload["branches"] = list(branches)  # whose rows it starts from
                else:
                    payload["branch"] = job
                    if config.stability:
                        payload["stability"] = True
                tasks.append(Task(theory_key(w, job), "theory", theory_task, payload))
    if "simulation" in config.kinds:
        for w in config.omegas:
            for a in config.alphas:
                for init in SIM_INITS:
                    for k in range(config.seeds):
                        tasks.append(Task(simulation_key(w, a, init, k), "simulation", simulation_task,
                                          {"spec": config.spec_at(w), "omega": w, "alpha": a, "init": init,
                                           "run_index": k, "seed": config.seed, "d": config.d,
                                           "steps": config.steps, "lr": config.lr, "optimizer": config.optimizer,
                                           "dtype": config.dtype, "n_test": config.n_test}))
    return tasks


def expected_rows(config: SweepConfig) -> Callable[[str, str], Optional[int]]:
    """``f(file name, task key)``: the rows the task of that key writes to that file (None
    when it writes none there): a branch task one per grid ``alpha`` to ``theory.csv``, a
    threshold task one to ``thresholds.csv``, a simulated run one to ``simulation.csv``.
    :meth:`attnphase.sweeps.store.SweepStore.recover` counts them to tell a finished task."""
    def rows(name: str, key: str) -> Optional[int]:
        if key.startswith("theory:"):
            if key.endswith(":thresholds"):
                return 1 if name == THRESHOLDS_CSV else None
            return len(config.alphas) if name == THEORY_CSV and ":branch=" in key else None
        if key.startswith("simulation:"):
            return 1 if name == SIMULATION_CSV else None
        return None

    return rows


def theory_task(payload: dict, api=None) -> dict:
    """One theory task at one ``omega`` (``payload["job"]``):

    * ``"branch"``: follow ``payload["branch"]`` along the ``alpha`` grid by continuation;
      returns ``{"rows": [...]}``, one row per grid ``alpha``, with the linear baseline and
      the spinodals met on the way (with ``payload["stability"]``, each converged point's
      replica-symmetric stability too);
    * ``"thresholds"``: ``alpha_c``, ``alpha_l``, every change of the global branch
      (``transitions``, JSON; ``alpha_c`` the first of them) and the spinodals where the line
      quadrature locates them; returns ``{"thresholds": {...}}``. No threshold gives NaN and
      its reason (:func:`_thresholds_job`).

    The two branch jobs are independent, so a branch that cannot be found does not lose
    the other, and a column's work spreads over several workers. The thresholds job
    starts from both branch jobs' rows (``payload["branch_rows"]``, added when they are
    stored; without them it brackets the roots with a draft scan of its own, as
    ``attnphase thresholds`` does); a branch that was not found gives rows with
    ``exists = False`` and then a thresholds row with its reason.
    ``api`` defaults to :mod:`numerics.api` (imported here, on the worker); tests pass a
    fake. Model and solver columns are added by the writer.
    """
    if api is None:
        from numerics import api
    # numpy RuntimeWarnings (overflow in exp inside the softmax, sqrt of a negative in a
    # rejected trial step) would be printed by every worker; they are counted into the
    # rows instead. Convergence flags and error estimates are in the rows.
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        result = (_thresholds_job if payload["job"] == "thresholds" else _branch_job)(payload, api)
    extra = {"runtime_warnings": sum(issubclass(w.category, RuntimeWarning) for w in caught),
             "task_wall_time": time.perf_counter() - t0}
    for r in result.get("rows", []):
        r.update(extra)
    if "thresholds" in result:
        result["thresholds"].update(extra)
    return result


DEFAULT_THEORY_TASK = theory_task


def _baseline(api, spec) -> tuple:
    baseline = api.linear_baseline(spec)
    return float(baseline.test_error), float(getattr(baseline, "error", float("nan")))


def _deterministic(api, spec, names) -> bool:
    """Whether ``names`` are solved by a deterministic integrator (:class:`numerics.api.Method`): their
    ends are bisected (spinodals), and the pair's crossing is found by Newton's method."""
    return api.method(spec, tuple(names)).deterministic


def _branch_job(payload: dict, api) -> dict:
    """A branch along the grid (``api.follow``): one row per grid ``alpha``, the fixed point's record
    (:meth:`numerics.result.FixedPoint.to_row`) with the linear baseline, the spinodals met on the
    way (the line quadrature's) and the curve's note, or where the branch was not found
    ``exists = False``."""
    spec, alphas, branch = payload["spec"], list(payload["alphas"]), payload["branch"]
    lin, lin_err = _baseline(api, spec)
    curve = api.follow(spec, alphas, branch, precision=payload["precision"])
    points = curve.points
    if payload.get("stability"):  # rs_stability, rs_switching and their errors in each converged point's row
        points = [api.with_rs_stability(p) for p in points]
    rows = _branch_rows(points, alphas, branch)
    extra = {"linear_test_error": lin, "linear_test_error_error": lin_err}
    if _deterministic(api, spec, (branch,)):
        extra.update(_curve_spinodal_columns([dict(sp) for sp in getattr(curve, "spinodals", [])]))
    extra["branch_note"] = str(getattr(curve, "note", "") or "")  # e.g. the branch was not found at its anchor
    for r in rows:
        r.update(extra)
    # one column order for every row and every task, whichever points exist
    rest = sorted({k for r in rows for k in r} - set(FIRST_THEORY_COLUMNS))
    return {"rows": [{k: r.get(k, "") for k in FIRST_THEORY_COLUMNS[2:] + tuple(rest)} for r in rows]}


def _curve_spinodal_columns(spinodals: list) -> dict:
    cols = {}
    for side in ("lower", "upper"):
        mine = [sp for sp in spinodals if sp.get("side") == side]
        cols[f"spinodal_{side}_alpha"] = float(mine[0]["alpha"]) if mine else float("nan")
        cols[f"spinodal_{side}_alpha_error"] = float(mine[0].get("alpha_error", float("nan"))) if mine \
            else float("nan")
        cols[f"spinodal_{side}_last_found"] = float(mine[0].get("last_found", float("nan"))) if mine \
            else float("nan")
    return cols


def _thresholds_job(payload: dict, api) -> dict:
    """The column's thresholds (``api.thresholds``, one :class:`numerics.thresholds.record.Thresholds`
    for every model) from its branch rows (``payload["branch_rows"]``; without them the branches are
    followed here): ``alpha_c``, ``alpha_l`` with their errors, the branch and whether at the jump
    ``alpha_l`` was found (Newton's method on the paper's pair), the spinodals (the line
    quadrature's), every change of the global branch (``transitions``, JSON; ``alpha_c`` the first)
    and the global branch at each scanned ``alpha`` (``global_minimum``, JSON; the scan method's).
    No threshold gives NaN and the reason (``threshold_status``: ``not_bracketed`` for a reason of
    the model, ``solver_failed`` where a solve the location needs failed)."""
    spec, branches = payload["spec"], tuple(payload.get("branches") or THEORY_BRANCHES)
    lin, lin_err = _baseline(api, spec)
    thr = {k: float("nan") for k in THRESHOLD_COLUMNS[2:6]}
    thr.update(linear_test_error=lin, linear_test_error_error=lin_err)
    rows = payload.get("branch_rows")
    thr["bracket_source"] = "own scan" if rows is None else "branch rows"
    pair = _deterministic(api, spec, branches) and set(branches) <= set(THEORY_BRANCHES)
    transitions, glob, notes, spinodals, fine = [], [], (), [], {}
    try:
        if pair:
            # the column's own branch rows bracket the roots (at the sweep's precision); without
            # them the root finder brackets on its own default scan, as ``attnphase thresholds`` does
            scan = None if rows is None else api.scan_curves_from_rows(rows)
            th = api.thresholds(spec, payload["precision"], scan=scan)
        else:
            th = api.thresholds(spec, payload["precision"], payload["alphas"], names=branches,
                                scan=None if rows is None else _matrix_scan(api, rows, branches))
    except api.ThresholdError as exc:
        status, message = "not_bracketed", str(exc)
    except api.ThresholdLocationError as exc:
        status, message = "solver_failed", str(exc)
    else:
        for k in THRESHOLD_COLUMNS[2:6]:
            thr[k] = float(getattr(th, k))
        transitions = [t.to_dict() for t in th.transitions]
        glob = [{"alpha": a, "branch": b} for a, b in th.global_branches()]
        notes, spinodals, fine = th.notes, [dict(sp) for sp in th.spinodals], th.details.get("fine", {})
        status, message = "ok", ""
        if not transitions:
            status = "not_bracketed"
            message = (f"the global minimum does not change branch on alpha in [{min(payload['alphas']):g}, "
                       f"{max(payload['alphas']):g}] ({glob[0]['branch']} throughout)")
            if th.alpha_l_status != "ok":
                message += f"; alpha_l {th.alpha_l_status}"
        elif th.alpha_l_status != "ok":  # alpha_c found, alpha_l off the scan: a result
            status, message = "alpha_l_not_bracketed", f"alpha_l {th.alpha_l_status}"
    first = transitions[0] if transitions else {}
    thr.update(alpha_l_branch=fine.get("branch_l", ""), alpha_l_at_jump=fine.get("at_jump", ""))
    thr.update(_spinodal_columns(spinodals))
    thr.update(spinodals=json_text(spinodals, indent=None), alpha_c_below=first.get("below", ""),
               alpha_c_above=first.get("above", ""), alpha_c_kind=first.get("kind", ""),
               transitions=json_text(transitions, indent=None), global_minimum=json_text(glob, indent=None),
               threshold_notes="; ".join(notes), threshold_status=status, threshold_message=message)
    return {"thresholds": thr}


def _matrix_scan(api, rows: list, branches: tuple) -> dict:
    """``{branch: BranchCurve}`` of the branch rows read back as fixed points (``api.from_row``), in
    the order of the branches, not of the file (the order the tasks finished in): of two branches
    with equal training losses the global minimum is then the same in every run."""
    rows = sorted((r for r in rows if is_true(r.get("exists"))),
                  key=lambda r: (branches.index(r["branch"]), number(r["alpha"])))
    points = [api.from_row(r) for r in rows]
    return {b: api.BranchCurve(b, [p for p in points if p.branch == b], []) for b in branches}


def _spinodal_columns(spinodals: list) -> dict:
    cols = {}
    for branch in THEORY_BRANCHES:
        mine = [s for s in spinodals if s.get("branch") == branch]
        first = mine[0] if mine else {}
        cols[f"spinodal_{branch}_alpha"] = float(first.get("alpha", float("nan")))
        cols[f"spinodal_{branch}_alpha_error"] = float(first.get("alpha_error", float("nan")))
        cols[f"spinodal_{branch}_side"] = str(first.get("side", ""))
    return cols


def _on_grid(points, alphas: list, branch: str) -> dict:
    """``{grid index: point}``; of two points at one grid ``alpha`` the converged one."""
    found = {}
    for p in points:
        i = min(range(len(alphas)), key=lambda j: abs(alphas[j] - p.alpha))
        if abs(alphas[i] - p.alpha) > 1e-9 * max(1.0, abs(p.alpha)):
            log.debug("%s point at alpha=%g is off the grid; not written", branch, p.alpha)
            continue
        if i not in found or (p.converged and not found[i].converged):
            found[i] = p
    return found


def _branch_rows(points, alphas: list, branch: str) -> list:
    """One row per grid ``alpha`` (the record's packed components, invariants, errors, status); a
    missing point (the branch ended) gets ``exists = False`` and empty values."""
    found = _on_grid(points, alphas, branch)
    rows = []
    for i, a in enumerate(alphas):
        if i in found:
            row = dict(found[i].to_row(), exists=True)
            # marked by comparing the branches of a grid point: theory_points.csv holds it
            row.pop("global_minimum", None)
        else:
            row = {"exists": False, "converged": False, "status": "not found"}
        row.update(alpha=a, branch=branch)
        rows.append(row)
    return rows


def simulation_run_task(payload: dict) -> dict:
    """One finite-size run (``validation.simulate.run_one``) on the CPU; drops the loss curve:
    :func:`simulation_batch_task` of one run, whose :class:`~validation.simulate.SimulationDiverged`
    it raises."""
    (out,) = simulation_batch_task({"batch": [payload]})["batch"]
    if isinstance(out, BaseException):
        raise out
    return out


#: what the runs of one batched task share (:func:`batch_simulations`): their data set
DATA_FIELDS = ("d", "alpha", "seed", "run_index", "n_test", "dtype")


def simulation_batch_task(payload: dict) -> dict:
    """The runs ``payload["batch"]`` (payloads of :func:`simulation_run_task` that share the model and
    :data:`DATA_FIELDS`) on their one data set, drawn once, those with the same number of steps as
    one batch, each with its own optimiser (``validation.simulate.run_data_set``), on the CPU. ``{"batch": [...]}``: per run, in order, what
    :func:`simulation_run_task` returns for it alone (timings apart), or its ``SimulationDiverged``.
    A payload's ``stop`` (when true): the early stop of ``validation.simulate.StopRule()``."""
    import torch

    from validation.simulate import DEFAULT_LR, DTYPES, SimulationDiverged, StopRule, Training, run_data_set

    runs = payload["batch"]
    p = runs[0]
    for other in runs[1:]:
        if any(other[f] != p[f] for f in DATA_FIELDS) or other["spec"] != p["spec"]:
            raise ValueError(f"a batch of runs must share {', '.join(DATA_FIELDS)} and the model")
    trainings = [Training(r["init"], r["steps"], r["lr"], r["optimizer"], 2, StopRule() if r.get("stop") else None)
                 for r in runs]
    records = run_data_set(p["spec"], p["d"], p["alpha"], trainings, seed=p["seed"], run_index=p["run_index"],
                           dtype=DTYPES[p["dtype"]], device=torch.device("cpu"), n_test=p["n_test"])
    out = []
    for run, rec in zip(runs, records):
        if isinstance(rec, SimulationDiverged):
            out.append(rec)
            continue
        rec.pop("loss_curve", None)
        rec["lr_used"] = DEFAULT_LR[run["optimizer"]] if run["lr"] is None else float(run["lr"])
        rec["alpha"], rec["init"] = run["alpha"], run["init"]
        out.append({"rows": [rec]})
    return {"batch": out}


def batch_simulations(tasks: list) -> list:
    """The tasks with the runs of :func:`simulation_run_task` that share a data set (the model and
    :data:`DATA_FIELDS`: the starts, optimisers and training settings of one run) joined into one
    task of :func:`simulation_batch_task`, in the place of the first: ``[(task, members)]``,
    ``members`` the tasks it stands for (itself alone when not joined). Each run's numbers are those
    of training it alone, so a task's rows do not depend on what it was joined with. Tasks of other
    functions (a test's fakes) are left as they are."""
    groups, order = {}, []
    for t in tasks:
        if t.fn is not simulation_run_task:
            order.append([t])
            continue
        key = (json_text(t.payload["spec"].to_dict(), sort_keys=True),) + tuple(repr(t.payload[f])
                                                                                   for f in DATA_FIELDS)
        if key not in groups:
            groups[key] = [t]
            order.append(groups[key])
        else:
            groups[key].append(t)
    out = []
    for members in order:
        if len(members) == 1:
            out.append((members[0], members))
            continue
        first = members[0]
        out.append((dataclasses.replace(first, key=f"{first.key}+{len(members) - 1}", fn=simulation_batch_task,
                                        payload={"batch": [m.payload for m in members]}), members))
    return out


def theory_rows(task: Task, result: dict, config: SweepConfig, shash: str) -> tuple:
    """``(theory.csv rows, thresholds.csv rows)`` of a finished theory task, with the model and solver columns."""
    spec = task.payload["spec"]
    model = spec.to_columns()
    common = {**model, "precision": config.precision, "alpha_grid": grid_text(config.alphas),
              "settings_hash": shash}
    rows = []
    for r in result.get("rows", []):
        row = {"task": task.key, "omega": task.payload["omega"], "alpha": r["alpha"], "branch": r["branch"]}
        row.update({k: v for k, v in r.items() if k not in row})
        for k, v in common.items():
            row.setdefault(k, v)
        # a grid point where the branch does not exist has no solution record (its cells
        # are empty): the model and the solver settings go in its row all the same
        row.update({k: v for k, v in common.items() if row[k] == ""})
        rows.append(row)
    thr = []
    if "thresholds" in result:
        t = {"task": task.key, "omega": task.payload["omega"]}
        t.update({k: v for k, v in result["thresholds"].items() if k not in t})
        for k, v in common.items():
            t.setdefault(k, v)
        thr.append(t)
    return rows, thr


def simulation_rows(task: Task, result: dict, config: SweepConfig, shash: str) -> list:
    p = task.payload
    common = {**p["spec"].to_columns(), "d": p["d"], "steps": p["steps"], "lr": p["lr"],
              "optimizer": p["optimizer"], "dtype": p["dtype"], "n_test": p["n_test"], "base_seed": p["seed"],
              "settings_hash": shash}
    rows = []
    for r in result["rows"]:
        row = {"task": task.key, "omega": p["omega"], "alpha": p["alpha"], "init": p["init"],
               "run_index": p["run_index"]}
        row.update({k: v for k, v in r.items() if k not in row})
        for k, v in common.items():
            row.setdefault(k, v)
        rows.append(row)
    return rows

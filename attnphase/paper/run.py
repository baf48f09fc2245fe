"""Planning, executing and resuming ``attnphase paper`` (:func:`run_paper`).

The figures of :data:`attnphase.paper.figures.REGISTRY` name their tasks (:mod:`attnphase.paper.plan`); the
union of those of the figures asked for is run on a Dask cluster (the embedded one of
:func:`attnphase.sweeps.runner.open_client`, or a scheduler's), each finished task's rows appended
to its data file at once (:class:`attnphase.sweeps.store.SweepStore`: one fsynced block, a checksum
per row). On start the data decides what is done (:meth:`~attnphase.sweeps.store.SweepStore.recover`),
so a killed run loses at most the tasks in flight. The settings of the plan are hashed
into ``manifest.json``; a folder of another plan is refused.

Then every figure whose tasks are all done is derived and drawn from the data files
alone, and ``summary.json`` and ``report.md`` are written from them
(:func:`write_outputs`).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from tidyio import read_table
from attnphase.sweeps.config import settings_hash
from attnphase.sweeps.runner import execute, open_client
from attnphase.sweeps.tasks import batch_simulations
from attnphase.sweeps.store import SweepStore, now

from . import PaperError
from .plan import TASK_FILES, THEORY_CURVES, Plan, Task, TaskBuilder, function_names, unique

log = logging.getLogger(__name__)

SECTION = "paper"


def figure_tasks(plan: Plan, builder: TaskBuilder, figures) -> list:
    """The tasks of ``figures``, each once; a task's ``after`` tasks are among them."""
    tasks = unique([t for f in figures for t in f.tasks(builder)])
    keys = {t.key for t in tasks}
    for t in tasks:
        missing = [k for k in t.after if k not in keys]
        if missing:
            raise RuntimeError(f"{t.key} starts from {missing}, which no figure computes")
    return tasks


def select_figures(only: Optional[Sequence[str]]):
    """The figures asked for (all by default); an unknown name is refused, naming the choices."""
    from .figures import REGISTRY

    if not only:
        return list(REGISTRY)
    names = [f.name for f in REGISTRY]
    for name in only:
        if name not in names:
            raise PaperError(f"--only: unknown figure {name!r}; choose from {', '.join(names)}")
    return [f for f in REGISTRY if f.name in only]


def run_paper(out, plan: Plan, only: Optional[Sequence[str]] = None, *, scheduler: Optional[str] = None,
              workers: Optional[int] = None, client=None, functions: Optional[dict] = None,
              progress: Optional[Callable[[int, int], None]] = None, command: str = "") -> dict:
    """Compute (or resume) the figures ``only`` (all by default) into ``out``, then write every
    figure whose data is complete, ``summary.json`` and ``report.md``. Returns the summary;
    ``summary["failed"]`` lists the tasks that failed (the others are kept).

    ``client``: an existing ``dask.distributed.Client``; else one to ``scheduler`` (reached
    before anything is written to ``out``), else an embedded cluster of ``workers`` processes.
    ``functions``: task functions by kind, replacing :func:`attnphase.paper.plan.default_functions`
    (tests); they must be importable by the workers. ``progress(done, total)``: told the
    number of tasks done. ``command``: the command line that regenerates the folder (for
    the report)."""
    import contextlib

    from .figures import REGISTRY
    from .report import write_outputs

    t_start, cpu_start = time.perf_counter(), time.process_time()
    figures = select_figures(only)
    builder = TaskBuilder(plan, functions)
    every = figure_tasks(plan, builder, REGISTRY)
    wanted = figure_tasks(plan, builder, figures)
    settings = {"plan": plan.settings(), "functions": function_names(builder.functions)}
    shash = settings_hash(settings)
    with contextlib.ExitStack() as stack:
        if client is None and scheduler:
            client = stack.enter_context(open_client(scheduler))
        store = stack.enter_context(SweepStore(out, what="paper"))
        _check_rows_of_other_settings(store, shash)
        store.check_settings({SECTION: settings})
        expected = {t.key: (t.file, t.n_rows) for t in every}
        dropped = store.recover(lambda name, key: expected[key][1] if expected.get(key, ("",))[0] == name else None,
                                TASK_FILES)
        pending = [t for t in wanted if t.key not in store.done]
        summary = {"out": str(store.out), "plan": plan.name, "figures_asked": [f.name for f in figures],
                   "tasks": len(wanted), "skipped": len(wanted) - len(pending), "computed": [], "failed": [],
                   "notes": [], "dropped_on_recovery": dropped, "settings_hash": shash, "run_started": now()}
        if progress:
            progress(summary["skipped"], summary["tasks"])
        worker_cpu = 0.0
        if pending:
            if client is not None:
                worker_cpu = _execute_counted(client, pending, store, shash, summary, progress)
            else:
                with open_client(None, workers, len(pending)) as cl:
                    summary["workers"] = len(cl.scheduler_info().get("workers", {}))
                    worker_cpu = _execute_counted(cl, pending, store, shash, summary, progress)
        summary["compute_wall_time"] = time.perf_counter() - t_start
        summary["cpu_s"] = time.process_time() - cpu_start + worker_cpu
        summary["notes"] = stored_notes(store.out, {t.key for t in every if t.key in store.done})
        write_outputs(store.out, plan, REGISTRY, {t.key for t in every if t.key in store.done},
                      {f.name: [t.key for t in figure_tasks(plan, builder, [f])] for f in REGISTRY}, summary,
                      command)
    summary["wall_time"] = time.perf_counter() - t_start
    return summary


def _check_rows_of_other_settings(store: SweepStore, shash: str) -> None:
    """Without a readable manifest, rows already there must all carry this plan's hash."""
    if store.manifest() is not None:
        return
    for name in TASK_FILES:
        hashes = {r.get("settings_hash") for r in read_table(store.out / name).rows}
        if hashes and hashes != {shash}:
            raise PaperError(f"--out: {store.out} holds {name} of other settings and no readable manifest.json; "
                             f"use another --out")


def process_cpu() -> tuple:
    """``(pid, CPU seconds)`` of the process that calls it (run on each worker)."""
    return os.getpid(), time.process_time()


def _workers_cpu(client) -> float:
    """The CPU seconds the cluster's worker processes other than this one have used so far (each process
    once: threads of one process share its count), or NaN where a worker cannot be asked."""
    try:
        per_process = dict(client.run(process_cpu).values())
    except Exception as exc:  # a remote cluster may refuse client.run; the run goes on without the count
        log.warning("the workers' CPU time could not be read: %s", exc)
        return float("nan")
    return float(sum(cpu for pid, cpu in per_process.items() if pid != os.getpid()))


def _execute_counted(client, pending: list, store: SweepStore, shash: str, summary: dict,
                     progress: Optional[Callable[[int, int], None]]) -> float:
    """:func:`_execute`, returning the CPU seconds the workers spent meanwhile."""
    before = _workers_cpu(client)
    _execute(client, pending, store, shash, summary, progress)
    return _workers_cpu(client) - before


def _execute(client, pending: list, store: SweepStore, shash: str, summary: dict,
             progress: Optional[Callable[[int, int], None]]) -> None:
    """The pending tasks on Dask (:func:`attnphase.sweeps.runner.execute`), by priority, each result
    stored as it arrives. A task that starts from others' rows is submitted once they are
    stored; if one of them fails, it fails too."""
    count = [summary["skipped"]]

    def store_result(task: Task, result: dict) -> None:
        store.add_task(task.key, task.file, task_rows(task, result, shash))
        summary["computed"].append(task.key)

    def tick() -> None:
        count[0] += 1
        if progress:
            progress(count[0], summary["tasks"])

    execute(client, pending, store.done, store_result=store_result,
            fail=lambda t, exc, tb: _fail(store, t, exc, tb, summary), tick=tick, priority=lambda t: t.priority,
            after=lambda t: t.after, prepare=lambda t: _with_rows_of(t, store), batch=batch_simulations)


def _with_rows_of(task: Task, store: SweepStore) -> Task:
    """The task with the rows of its ``after`` tasks, as read back from their file (the same
    text whether this run or an earlier one wrote them)."""
    import dataclasses

    keys = set(task.after)
    rows = [r for r in read_table(store.out / THEORY_CURVES).rows if r.get("task") in keys]
    return dataclasses.replace(task, payload={**task.payload, "branch_rows": rows})


def _fail(store: SweepStore, task: Task, exc: BaseException, tb: str, summary: dict) -> None:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    log.error("task %s failed: %s", task.key, msg)
    store.record_failure(task, msg, tb, summary["run_started"])
    summary["failed"].append({"task": task.key, "error": msg})


def task_rows(task: Task, result: dict, shash: str) -> list:
    """The rows of a finished task, each with its key, its model and the settings that
    decided it (the model's columns, the precision, the simulation settings)."""
    p = task.payload
    context = {"task": task.key, "model": task.model}
    if "spec" in p:
        context["omega"] = p["spec"].omega
    if task.kind in ("curve", "point", "thresholds"):
        context.update(precision=p["precision"])
    elif task.kind == "gd":
        context.update(alpha=p["alpha"], init=p["init"], run_index=p["run_index"], d=p["d"], steps=p["steps"],
                       lr=p["lr"], optimizer=p["optimizer"], dtype=p["dtype"], n_test=p["n_test"],
                       base_seed=p["seed"], early_stop=bool(p.get("stop")))
    elif task.kind == "gamp":
        context.update(alpha=p["alpha"], init=p["init"], run_index=p["run_index"], d=p["d"], dtype=p["dtype"],
                       n_test=p["n_test"], base_seed=p["seed"], method="gamp")
    elif task.kind == "histogram":
        context.update(config=p["config"], base_seed=p["seed"])
    body = [result["thresholds"]] if "thresholds" in result else result["rows"]
    model_columns = p["spec"].to_columns() if "spec" in p else {}
    rows = []
    for r in body:
        row = dict(context)
        row.update({k: v for k, v in r.items() if k not in context})
        for k, v in model_columns.items():
            if row.get(k, "") == "":
                row[k] = v
        row["settings_hash"] = shash
        rows.append(row)
    if len(rows) != task.n_rows:
        raise RuntimeError(f"{task.key} gave {len(rows)} rows, {task.n_rows} expected")
    return rows


def stored_notes(out, keys: set) -> list:
    """The notes of the finished tasks (a branch not found on part of a curve, a threshold that is not
    there), read back from the rows stored in ``out`` and sorted by task, so that a resumed run reports
    the notes of the tasks an earlier run computed, in the same order as an uninterrupted one."""
    notes = {}
    for name in TASK_FILES:
        for r in read_table(Path(out) / name).rows:
            key = r.get("task")
            if key not in keys or key in notes:
                continue
            if r.get("threshold_status", "ok") not in ("", "ok"):
                notes[key] = str(r.get("threshold_message", ""))
            elif r.get("branch_note"):
                notes[key] = str(r["branch_note"])
    return [{"task": k, "message": notes[k]} for k in sorted(notes)]

"""Running a sweep on Dask: the client, the submission of the tasks by priority, and storing
each result as it arrives."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Callable, Optional

from tidyio import atomic_write_text, read_csv_rows, render_csv

from . import SweepError
from .config import SweepConfig, settings_hash
from .grid import theory_key
from .store import DATA_CSVS, KIND_OF_CSV, SIMULATION_CSV, THEORY_CSV, THRESHOLDS_CSV, SweepStore, now
from .tasks import (DEFAULT_THEORY_TASK, Task, batch_simulations, expected_rows, make_tasks, simulation_rows,
                    simulation_run_task, theory_rows)

log = logging.getLogger(__name__)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


#: seconds to wait for a scheduler's port to accept a connection
PROBE_TIMEOUT = 5.0


def _probe(scheduler: str) -> None:
    """Fail at once when nothing listens at a ``tcp://HOST:PORT`` scheduler: Dask's client
    retries a refused connection until its timeout (24 s for a typo in the port)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(scheduler)
    if parts.scheme != "tcp":
        return
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise SweepError(f"--scheduler: expected tcp://HOST:PORT, got {scheduler} ({exc})") from None
    if not host or port is None:
        raise SweepError(f"--scheduler: expected tcp://HOST:PORT, got {scheduler}")
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise SweepError(f"--scheduler: cannot connect to {scheduler} ({why})") from None


@contextlib.contextmanager
def open_client(scheduler: Optional[str] = None, workers: Optional[int] = None, n_tasks: int = 1,
                connect_timeout: str = "20s"):
    """A ``dask.distributed.Client``: to ``scheduler`` if given, else to an embedded LocalCluster
    of ``workers`` single-threaded worker processes (default: the machine's cores, at most
    one per task)."""
    from distributed import Client, LocalCluster

    from numerics.api import WORKER_ENVIRONMENT

    if scheduler:
        _probe(scheduler)
        try:
            client = Client(scheduler, timeout=connect_timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SweepError(f"--scheduler: cannot connect to {scheduler} ({exc})") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or min(default_workers(), max(1, n_tasks))
    with _children_ignore_ctrl_c():
        # the dashboard on a free port: with None, Dask still asks for 8787, and a second run (or anything
        # else there) gets a four-line warning that it moved
        # one thread each, kernels and BLAS included: the workers fill the cores
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, env=dict(WORKER_ENVIRONMENT))
    with cluster, Client(cluster) as client:
        yield client


@contextlib.contextmanager
def _children_ignore_ctrl_c():
    """Processes started inside ignore SIGINT (an ignored signal stays ignored across exec, and
    Python then installs no handler of its own). Ctrl-C at a terminal reaches the whole process
    group: the workers would each print a traceback, while this process stops them anyway when
    it handles the interrupt. Here Ctrl-C is ignored only while the cluster starts."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_sweep(config: SweepConfig, out, *, scheduler: Optional[str] = None, workers: Optional[int] = None,
              client=None, theory_task: Optional[Callable] = None, simulation_task: Optional[Callable] = None,
              progress: bool = True, plot: bool = True) -> dict:
    """Run (or resume) a sweep into ``out``. Returns a summary; ``summary["failed"]`` lists failures.

    ``client``: an existing ``dask.distributed.Client`` (tests); otherwise one is opened
    with :func:`open_client`, to ``scheduler`` before anything is written to ``out`` (a
    scheduler that cannot be reached leaves no trace there). ``theory_task``/``simulation_task``
    replace the task functions (tests inject :func:`_fake_theory_task`); they must be
    importable by workers.
    """
    with contextlib.ExitStack() as stack:
        if client is None and scheduler:
            client = stack.enter_context(open_client(scheduler))
        return _run(config, out, workers, client, theory_task or DEFAULT_THEORY_TASK,
                    simulation_task or simulation_run_task, progress, plot)


def _run(config, out, workers, client, theory_task, simulation_task, progress, plot) -> dict:
    t_start = time.perf_counter()
    run_started = now()
    with SweepStore(out) as store:
        sections = {}
        if "theory" in config.kinds:
            sections["theory"] = config.theory_settings(theory_task)
        if "simulation" in config.kinds:
            sections["simulation"] = config.simulation_settings(simulation_task)
        store.check_settings(sections)
        hashes = {k: settings_hash(v) for k, v in sections.items()}
        dropped = store.recover(expected_rows(config), [n for n in DATA_CSVS if KIND_OF_CSV[n] in config.kinds])
        tasks = make_tasks(config, theory_task, simulation_task)
        pending = [t for t in tasks if t.key not in store.done]
        summary = {"out": str(store.out), "tasks": len(tasks), "skipped": len(tasks) - len(pending),
                   "computed": [], "failed": [], "dropped_on_recovery": dropped, "notes": [],
                   "settings_hash": hashes, "figures": []}
        if pending:
            if client is not None:
                _execute(client, pending, store, config, hashes, summary, run_started, progress)
            else:
                with open_client(None, workers, len(pending)) as cl:
                    summary["workers"] = len(cl.scheduler_info().get("workers", {}))
                    _execute(cl, pending, store, config, hashes, summary, run_started, progress)
        summary["not_converged"] = not_converged(store.out / THEORY_CSV)
        summary["compute_wall_time"] = time.perf_counter() - t_start
        if plot:
            _finish_outputs(store.out, summary)
    summary["wall_time"] = time.perf_counter() - t_start
    return summary


def not_converged(path) -> list:
    """``{omega, alpha, branch, status}`` of each point of a theory CSV that exists but did not
    converge (kept in the file with ``converged = False`` and drawn grey), read from the file so
    that a resumed sweep reports them too."""
    from tidyio import is_true, number

    return [{"omega": number(r["omega"]), "alpha": number(r["alpha"]), "branch": r.get("branch", ""),
             "status": r.get("status", "")}
            for r in read_csv_rows(path)[1] if is_true(r.get("exists", "True")) and not is_true(r.get("converged"))]


def _execute(client, pending: list, store: SweepStore, config: SweepConfig, hashes: dict, summary: dict,
             run_started: str, progress: bool) -> None:
    """The pending tasks on Dask (:func:`execute`), by :func:`task_priority`. A column's
    threshold task starts from its branch tasks' rows (:func:`_with_branch_rows`); if one
    of them fails, the threshold task is recorded as failed too, and a re-run does the
    failed ones."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    bar = tqdm(total=summary["tasks"], initial=summary["skipped"], unit="task", desc="phase-diagram",
               file=sys.stderr, disable=None if progress else True, mininterval=0.5, dynamic_ncols=True)

    def store_result(task: Task, result: dict) -> None:
        _store_result(store, task, result, config, hashes, summary)
        summary["computed"].append(task.key)

    try:
        with logging_redirect_tqdm():
            execute(client, pending, store.done, store_result=store_result,
                    fail=lambda t, exc, tb: _fail(store, t, exc, tb, run_started, summary),
                    tick=lambda: bar.update(1), priority=task_priority,
                    after=lambda t: _branch_keys(t) if _needs_branch_rows(t) else (),
                    prepare=lambda t: _with_branch_rows(t, store), batch=batch_simulations)
    finally:
        bar.close()


def execute(client, pending: list, done: set, *, store_result: Callable, fail: Callable, tick: Callable,
            priority: Callable = lambda t: 0, after: Callable = lambda t: (),
            prepare: Callable = lambda t: t, batch: Callable = lambda ts: [(t, [t]) for t in ts]) -> None:
    """Run ``pending`` tasks (each with ``key``, ``fn`` and ``payload``) on ``client`` and
    hand each result to ``store_result(task, result)`` as it arrives.

    Only as many tasks as the cluster has worker threads are in flight; the next one, by
    ``priority(task)`` (higher first; in the order given within a priority), is submitted
    when one finishes. Submitted all at once, the tasks were spread over the workers' own
    queues up front (each key is its own task group, so Dask neither queues them on the
    scheduler nor learns their durations to steal them): on the target diagram the
    workers then sat idle for 19% of the run, and in a two-column test one worker idled
    190 s of 339 s with a task queued on the other.

    A task whose ``after(task)`` keys are not all in ``done`` (the store's set, updated by
    ``store_result``) waits for them, then runs as ``prepare(task)`` (which adds their
    rows); if one of them fails, it is not run and fails too. A failure, a malformed
    result (``store_result`` raises) or a task not run goes to ``fail(task, exc,
    traceback text)``; ``tick()`` after each task settled. ``batch(tasks)`` may join ready tasks into
    one (``[(task, members)]``, :func:`attnphase.sweeps.tasks.batch_simulations`): a joined task's
    result is ``{"batch": [...]}``, one result or exception per member, each stored, failed and
    ticked as the member's own. On any exception from here (Ctrl-C), the tasks in flight are
    cancelled."""
    from distributed import as_completed

    token = uuid.uuid4().hex[:8]
    futures = {}
    done_now = as_completed()
    failed = set()
    waiting = {t.key: t for t in pending if after(t)}
    members = {}  # key of a joined task -> the tasks it stands for
    joined = []
    for t, ms in batch([t for t in pending if t.key not in waiting]):
        if len(ms) > 1:
            members[t.key] = ms
        joined.append(t)
    # a stable sort: within a priority, the order given
    ready = sorted(joined, key=lambda t: -priority(t))

    def submit(t) -> None:
        fut = client.submit(run_logged, t.fn, t.payload, key=f"{t.key}-{token}", pure=False, priority=priority(t))
        futures[fut] = t
        done_now.add(fut)

    def fill() -> None:
        slots = worker_threads(client)
        while ready and len(futures) < slots:
            submit(ready.pop(0))

    def release_waiting() -> None:
        for key, t in list(waiting.items()):
            deps = after(t)
            if all(d in done for d in deps):
                del waiting[key]
                ready.append(prepare(t))
            elif any(d in failed for d in deps):
                del waiting[key]
                failed.add(key)
                bad = ", ".join(d for d in deps if d in failed)
                fail(t, RuntimeError(f"not run: it starts from the rows of {bad}, which failed"), "")
                tick()
        ready.sort(key=lambda t: -priority(t))

    try:
        release_waiting()  # tasks whose inputs an earlier run finished
        fill()
        for fut in done_now:
            task = futures.pop(fut)
            ms = members.get(task.key, [task])
            try:
                if fut.status != "finished":
                    exc = fut.exception() if fut.status == "error" else RuntimeError(f"task {fut.status}")
                    tb = "".join(traceback.format_tb(fut.traceback())) if fut.status == "error" else ""
                    outcomes = [(exc, tb)] * len(ms)
                else:
                    result, messages = fut.result()
                    for message in messages:  # with its task, which says where on the grid
                        log.warning("%s: %s", task.key, message)
                    parts = result["batch"] if task.key in members else [result]
                    if len(parts) != len(ms):
                        raise RuntimeError(f"{task.key} gave {len(parts)} results, {len(ms)} expected")
                    outcomes = [(p, "") for p in parts]
            except Exception as exc:  # a malformed result: record it, keep going
                outcomes = [(exc, traceback.format_exc())] * len(ms)
            finally:
                fut.release()
            for m, (part, tb) in zip(ms, outcomes):
                try:
                    if isinstance(part, BaseException):
                        failed.add(m.key)
                        fail(m, part, tb)
                    else:
                        store_result(m, part)
                except Exception as exc:  # a malformed result: record it, keep going
                    failed.add(m.key)
                    fail(m, exc, traceback.format_exc())
                tick()
            if waiting:
                release_waiting()
            fill()
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise


def run_logged(fn: Callable, payload: dict) -> tuple:
    """``(fn(payload), messages)`` on a worker: the log records of level WARNING and above that
    the task emits (and its Python warnings) are kept as ``"logger: message"`` texts and handed
    to the client, which logs them with the task's key. On the worker itself they would reach
    the terminal through logging's last-resort handler, without saying which grid point."""
    import threading

    me = threading.get_ident()
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.thread == me:  # not another task's, where threads share a process (tests)
                messages.append(f"{record.name}: {' '.join(record.getMessage().split())}")

    logging.captureWarnings(True)
    handler = Keep(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        return fn(payload), messages
    finally:
        root.removeHandler(handler)


def worker_threads(client) -> int:
    """Worker threads in the cluster now (workers may join or leave a user's cluster)."""
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # a cluster that cannot say: one task at a time still finishes
        log.debug("could not read the cluster's worker threads; submitting one task at a time")
        return 1


def _needs_branch_rows(task: Task) -> bool:
    return task.kind == "theory" and task.payload.get("job") == "thresholds"


def _branch_keys(task: Task) -> tuple:
    return tuple(theory_key(task.payload["omega"], b) for b in task.payload["branches"])


def _with_branch_rows(task: Task, store: SweepStore) -> Task:
    """The threshold task with its column's branch rows, as read back from ``theory.csv``
    (the same text whether this run or an earlier one wrote them)."""
    keys = set(_branch_keys(task))
    _, rows = read_csv_rows(store.out / THEORY_CSV)
    mine = [r for r in rows if r.get("task") in keys]
    return dataclasses.replace(task, payload={**task.payload, "branch_rows": mine})


def task_priority(task: Task) -> int:
    """Branch tasks (the longest: ~90-170 s on the target diagram) before threshold tasks
    (~40-75 s), theory before simulations: the last tasks to run are then short ones,
    and fewer workers sit idle at the end of a sweep."""
    if task.kind != "theory":
        return 0
    return 1 if task.payload.get("job") == "thresholds" else 2


def _fail(store, task, exc, tb, run_started, summary):
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    log.error("task %s failed: %s", task.key, msg)
    store.record_failure(task, msg, tb, run_started)
    summary["failed"].append({"task": task.key, "error": msg})


def _store_result(store: SweepStore, task: Task, result: dict, config: SweepConfig, hashes: dict,
                  summary: dict) -> None:
    if task.kind == "theory":
        rows, thr = theory_rows(task, result, config, hashes["theory"])
        for t in thr:
            if t.get("threshold_status") != "ok":
                what = "alpha_l not found" if t.get("threshold_status") == "alpha_l_not_bracketed" \
                    else "thresholds not found"
                summary["notes"].append({"task": task.key, "message": f"{what}: {t.get('threshold_message')}"})
        if rows and rows[0].get("branch_note"):
            summary["notes"].append({"task": task.key, "message": rows[0]["branch_note"]})
        name, rows = (THRESHOLDS_CSV, thr) if task.payload.get("job") == "thresholds" else (THEORY_CSV, rows)
    else:
        name, rows = SIMULATION_CSV, simulation_rows(task, result, config, hashes["simulation"])
    store.add_task(task.key, name, rows)


def _finish_outputs(out: Path, summary: dict) -> None:
    """Derived point tables and figures, from the CSVs alone."""
    from . import figures as P

    for name in (THEORY_CSV, SIMULATION_CSV):
        path = out / name
        if not path.exists():
            continue
        try:
            points = P.points_from_csv(path)
            derived = out / ("theory_points.csv" if name == THEORY_CSV else "simulation_points.csv")
            if points:
                atomic_write_text(derived, render_csv(list(points[0]), points, True))
            summary["figures"] += [str(p) for p in P.plot_file(path)]
        except Exception as exc:  # a figure never loses the data; report it
            msg = f"{type(exc).__name__}: {exc}"
            log.error("figure from %s failed: %s", path, msg)
            summary["failed"].append({"task": f"plot:{name}", "error": msg})

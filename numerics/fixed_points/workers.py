"""Processes that solve the scramblings of a QMC fixed point side by side.

A QMC solve (:func:`numerics.fixed_points.qmc.solve_qmc`) solves scrambling 0 first; the other
``R - 1`` start from its fixed point and history and depend on nothing else, so they can be solved
in other processes. Within :func:`scramble_workers` ``(n)`` (``n > 1``) they are, in a pool of ``n``
processes started once (spawned: each imports the project and loads the model's generated code
from the cache on its first task). Each scrambling's nodes, starts, searches and dense checks are
its own, so the fixed point is the same as in one process, to the last bit
(``tests/test_qmc.py``). The default is one process: a sweep's Dask workers, which already fill
the cores, keep it.
"""
from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Dict

_WORKERS = contextvars.ContextVar("scramble_workers", default=1)
_POOLS: Dict[int, ProcessPoolExecutor] = {}


@contextlib.contextmanager
def scramble_workers(n: int):
    """Within the block, QMC solves hand their scramblings after the first to ``n`` processes
    (``1``: solved here, one after another)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"workers: must be a positive integer, got {n!r}")
    token = _WORKERS.set(n)
    try:
        yield
    finally:
        _WORKERS.reset(token)


def current_workers() -> int:
    """The processes a QMC solve started now uses for its scramblings (:func:`scramble_workers`)."""
    return _WORKERS.get()


def _one_thread_each() -> None:
    """A worker's own kernels and BLAS calls run on one thread: the pool's processes fill the cores."""
    import os

    from numerics.threads import WORKER_ENVIRONMENT

    os.environ.update(WORKER_ENVIRONMENT)


def pool(n: int) -> ProcessPoolExecutor:
    """The pool of ``n`` spawned processes, started on first use and kept for later solves (a pool
    of another size, or one whose process died, is shut down first)."""
    if n in _POOLS and getattr(_POOLS[n], "_broken", False):
        _POOLS.pop(n).shutdown(wait=False, cancel_futures=True)
    if n not in _POOLS:
        for other in _POOLS.values():
            other.shutdown(wait=False, cancel_futures=True)
        _POOLS.clear()
        _POOLS[n] = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_one_thread_each)
    return _POOLS[n]

"""One BLAS thread for the per-node work, and the compiled kernels' threads.

The channel integrators evaluate every quadrature or QMC node in vectorised numpy (and compiled)
kernels whose BLAS calls are small: a dot product over 16384 line nodes, batched 2 x 2 to 6 x 6
solves. OpenBLAS splits such calls over all cores by default, and where the other core is busy (a
second worker process, a Dask worker, the test suite) each split call waits for it: a dot product
of 16384 numbers took 2.4 ms with two threads and 0.15 ms with one beside a busy core, and a loaded
fixed point twice the time (``python benchmarks/kernels.py threads``). The parallelism of this
package is across processes (the scramblings' workers, Dask workers), one thread each, so the
per-node work asks for one BLAS thread wherever it runs.

The compiled kernels (:mod:`derivations.compiled`) are the exception: a call of the prox's Newton
kernel on many nodes is long (a millisecond or more), holds no Python lock, and is split in blocks
of nodes over :func:`kernel_threads` threads: ``ATTNPHASE_KERNEL_THREADS``, by default the cores
this process may use (:func:`numerics.prox.newton.compiled_newton`). Worker processes (the scramblings' pool, the embedded Dask cluster) are
started with one, so that a run never has more busy threads than cores.

:func:`one_blas_thread` is a context manager and a decorator; the limit is set through
threadpoolctl at the outermost entry (nested entries cost a counter) and restored at its exit, so
the caller's own numpy work keeps its threads. ``ATTNPHASE_BLAS_THREADS`` sets another count
(``0``: leave the libraries' own setting). The same entry keeps the memory the per-node work frees
for its reuse (:mod:`numerics.memory`).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from typing import Callable

import numpy as np

from numerics import memory

log = logging.getLogger(__name__)

_lock = threading.Lock()
_state = {"depth": 0, "limiter": None, "huge_pages": None}


def blas_threads() -> int:
    """The BLAS/OpenMP thread count for the per-node work (``ATTNPHASE_BLAS_THREADS``, default 1; 0: unchanged)."""
    return _count("ATTNPHASE_BLAS_THREADS", 1)


#: the environment of a worker process: one BLAS thread and one kernel thread
WORKER_ENVIRONMENT = {"ATTNPHASE_KERNEL_THREADS": "1", "ATTNPHASE_BLAS_THREADS": "1"}


def _count(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"{name}: expected a whole number of threads, got {text!r}") from None
    if count < 0:
        raise ValueError(f"{name}: expected 0 or more threads, got {count}")
    return count


@functools.lru_cache(maxsize=1)
def usable_cores() -> int:
    """The cores this process may run on (read once: the kernels ask at every call)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def kernel_threads() -> int:
    """Threads of a compiled kernel's call (``ATTNPHASE_KERNEL_THREADS``, default the usable cores); one
    within a block that :func:`split_over_threads` already runs in a kernel thread."""
    if getattr(_in_block, "active", False):
        return 1
    return max(1, _count("ATTNPHASE_KERNEL_THREADS", usable_cores()))


#: the compiled kernels' thread pools, by size (:func:`kernel_pool`)
_POOLS: dict = {}
#: whether this thread runs a block of :func:`split_over_threads` (its kernel calls then stay in it)
_in_block = threading.local()


def split_over_threads(run: Callable, n: int, per_thread: int, largest: int = 0) -> tuple:
    """``run(part)`` on the nodes ``0 .. n - 1`` (``part`` a slice of them), its outputs (arrays over the
    nodes) as a tuple: in one call, or, where each of the :func:`~numerics.threads.kernel_threads` gets
    at least ``per_thread`` nodes, in blocks of about equal size side by side in them, concatenated;
    with ``largest``, in blocks of at most ``largest`` nodes (one after the other in one thread).
    For calls that treat each node by itself (the same numbers either way) and hold no Python lock
    or spend most of their time in numpy's loops, which release it. Within a block, nested calls
    run in its thread (:func:`kernel_threads` is one there)."""
    threads = kernel_threads()
    side_by_side = threads > 1 and n // per_thread >= 2
    blocks = max(min(threads, n // per_thread), -(-n // largest) if largest else 1, 1)
    if side_by_side:
        blocks = -(-blocks // threads) * threads  # as many blocks for every thread
    if blocks == 1:
        return tuple(run(slice(0, n)))
    edges = np.linspace(0, n, blocks + 1).astype(int)
    parts = [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]
    results = map_over_threads(run, parts) if side_by_side else [run(part) for part in parts]
    return tuple(np.concatenate(r) for r in zip(*results))


def map_over_threads(run: Callable, items: list) -> list:
    """``[run(item) for item in items]``, side by side in the :func:`kernel_threads` where there are
    several of both, for items treated each by itself (the same numbers either way); within a run,
    nested calls stay in its thread (:func:`kernel_threads` is one there)."""
    threads = kernel_threads()
    if threads == 1 or len(items) < 2:
        return [run(item) for item in items]
    return list(kernel_pool(min(threads, len(items))).map(functools.partial(_block, run), items))


def _block(run: Callable, item):
    _in_block.active = True
    try:
        return run(item)
    finally:
        _in_block.active = False


def kernel_pool(n: int):
    """A pool of ``n`` threads for the compiled kernels, made once per size."""
    if n not in _POOLS:
        from concurrent.futures import ThreadPoolExecutor

        _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="attnphase-kernel")
    return _POOLS[n]


#: threadpoolctl's controller of the libraries loaded, and the count of Python modules when it was made
_controller: dict = {"modules": -1, "controller": None}


def _limit(count: int):
    """threadpoolctl's limiter at ``count`` threads for the BLAS/OpenMP libraries loaded, or None where
    threadpoolctl is not installed. The libraries are enumerated again only where modules were imported
    since the last enumeration (a BLAS comes with the extension module that links it): enumerating
    them cost 0.3 ms at every outermost entry, 4% of a draft evaluation."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        log.warning("threadpoolctl is not installed: the BLAS threads are not limited")
        return None
    if _controller["modules"] != len(sys.modules):
        _controller["modules"], _controller["controller"] = len(sys.modules), ThreadpoolController()
    return _controller["controller"].limit(limits=count, user_api="blas")


@contextlib.contextmanager
def _limited():
    # the limit is process-wide: the first entry (of any thread) sets it, the last exit restores
    # it, and nested per-node calls cost a counter
    with _lock:
        if _state["depth"] == 0:
            count = blas_threads()
            _state["limiter"] = _limit(count) if count > 0 else None
            memory.reuse_freed_memory()
            _state["huge_pages"] = memory.huge_pages(False)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                if _state["limiter"] is not None:
                    _state["limiter"].restore_original_limits()
                    _state["limiter"] = None
                if _state["huge_pages"] is not None:
                    memory.huge_pages(_state["huge_pages"])
                    _state["huge_pages"] = None


def one_blas_thread(fn=None):
    """Run ``fn`` (as a decorator) or a ``with`` block with the per-node thread count
    (:func:`blas_threads`)."""
    if fn is None:
        return _limited()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _limited():
            return fn(*args, **kwargs)

    return wrapper

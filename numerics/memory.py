"""Freed memory kept for reuse by the per-node work.

Every evaluation of a channel integrator allocates and frees temporaries over all its nodes: a few
MB for a line-quadrature block, tens of MB for a QMC scrambling. glibc's allocator hands blocks
above its mapping threshold (128 kB, raised as such blocks are freed, at most 32 MB) to the kernel
and takes them back fresh, and it returns the top of its heap once more than twice that is free; numpy
asks the kernel for transparent huge pages on every array of 4 MB or more. Each fresh page is a
fault that the kernel zeroes, so the same temporaries were faulted in at every evaluation: 0.5-0.8
million faults and a fifth to a third of the time of a high fixed point or a general (QMC) one went
to the kernel (``sys``), and 8% of a fast fixed point.

:func:`reuse_freed_memory` makes the allocator keep what is freed (no mappings of their own for
large blocks, the heap returned above 1 GB of free top only), once per process, where glibc is the
C library; :func:`huge_pages` turns numpy's huge-page requests off. Both are applied at the outermost
entry of the per-node work (:func:`numerics.threads.one_blas_thread`), which restores numpy's setting
at its exit.
``ATTNPHASE_KEEP_FREED_MEMORY=0`` leaves both as they are. The numbers do not change (the same
operations on the same values); a process keeps its peak memory for reuse until it exits.
Measured side by side (``python benchmarks/kernels.py allocator``, best of two): a fast fixed point
0.91 s -> 0.84 s, a high one 28.9 s -> 26.8 s, a ``(2, 2, 1)`` QMC one 20.1 s -> 16.1 s.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
from typing import Optional

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
#: the free top of the heap above which glibc returns it to the kernel
TRIM_THRESHOLD = 2**30

def enabled() -> bool:
    """Whether the per-node work keeps freed memory (``ATTNPHASE_KEEP_FREED_MEMORY``, default on)."""
    text = os.environ.get("ATTNPHASE_KEEP_FREED_MEMORY", "1").strip().lower()
    if text in ("1", "true", "yes", "on", ""):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"ATTNPHASE_KEEP_FREED_MEMORY: expected 1 or 0, got {text!r}")


def reuse_freed_memory() -> bool:
    """Make glibc's allocator keep freed blocks for reuse (module docstring), once per process;
    returns whether it is set (False where the C library is not glibc or the setting is off)."""
    return enabled() and _keep_freed_blocks()


@functools.lru_cache(maxsize=None)
def _keep_freed_blocks() -> bool:
    # tried once per process: the per-node work enters here at every outermost call, and
    # platform.libc_ver reads the interpreter's binary
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        return mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    except (OSError, AttributeError) as exc:  # pragma: no cover - a glibc without mallopt
        log.debug("mallopt is not available (%s): freed memory goes back to the kernel", exc)
        return False


def huge_pages(on: bool) -> Optional[bool]:
    """Set numpy's transparent huge-page requests; returns the previous setting, or None where they
    were left alone (the setting is off, or numpy has no switch)."""
    switch = _huge_page_switch() if enabled() else None
    return None if switch is None else bool(switch(on))


@functools.lru_cache(maxsize=None)
def _huge_page_switch():
    try:
        from numpy._core import multiarray
    except ImportError:  # pragma: no cover - numpy < 2
        from numpy.core import multiarray
    return getattr(multiarray, "_set_madvise_hugepage", None)

"""The two products of a training step with the data ``X`` (``(L n, d)``, contiguous): ``X v`` and
``X^T g`` for every column of a batch of students.

The two passes over ``X`` are most of a step (everything else works on the small arrays
``(k, r, L, n)``), and they are bandwidth-bound. ``m`` matrix-vector products read ``X`` ``m`` times; BLAS's matrix product with ``m`` columns reads it once but is not
tuned for so few columns and costs more than the ``m`` matrix-vector products
(benchmarks/simulation.py --kernels). On the CPU both products are therefore one compiled pass over
the rows of ``X`` for all ``m`` columns (numba), each column's sums independent of the others, so a
run's numbers do not depend on the other runs of its batch, bit for bit. ``X v`` sums each row in
SIMD lanes (numba's ``reassoc``), the sums of ``X^T g`` run over the rows in order; both round
differently from BLAS, within float rounding, which the simulator's statistics are checked against
(docs/validation.md).

Where numba cannot be imported, or a compiled call fails (a damaged cache, a dtype it does not take),
the products are numpy's BLAS matrix-vector products on one thread from then on, and one line says
so; numba's cache is keyed on this file, so a changed kernel is recompiled. On a GPU the products are
torch's.
"""
from __future__ import annotations

import logging

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

log = logging.getLogger(__name__)

#: numpy's BLAS, which the fallback runs on one thread: its threads split the sums of ``X^T g``, so
#: their number would change the numbers, and on two busy cores two threads took 11 times as long
#: for ``X^T g`` as one (benchmarks/simulation.py --kernels). Set around each call (2 microseconds),
#: so the caller's setting stands.
_NUMPY_BLAS = ThreadpoolController().select(user_api="blas").lib_controllers

try:
    import numba
except Exception as exc:  # noqa: BLE001 - any failure to import means: the BLAS products
    numba, _UNAVAILABLE = None, f"{type(exc).__name__}: {exc}"
else:
    _UNAVAILABLE = ""

#: the compiled products where numba imports; False: numpy's BLAS (the reference, for comparisons)
COMPILED = True

_JIT = dict(cache=True, nogil=True, error_model="numpy")

if numba is not None:
    @numba.njit(fastmath={"reassoc"}, **_JIT)
    def _rows_times(X, V, out):  # pragma: no cover - compiled
        # out[j, i] = sum_k X[i, k] V[j, k]: each row of X read once for every column
        rows, d = X.shape
        m = V.shape[0]
        for i in range(rows):
            for j in range(m):
                acc = X.dtype.type(0.0)
                for k in range(d):
                    acc += X[i, k] * V[j, k]
                out[j, i] = acc

    @numba.njit(**_JIT)
    def _transpose_times(X, G, out):  # pragma: no cover - compiled
        # out[j, k] = sum_i G[j, i] X[i, k], the rows i in order
        rows, d = X.shape
        m = G.shape[0]
        out[:, :] = 0.0
        for i in range(rows):
            for j in range(m):
                g = G[j, i]
                for k in range(d):
                    out[j, k] += g * X[i, k]
else:
    _rows_times = _transpose_times = None  # never called: the BLAS products serve

_failed = ""  # why the compiled products failed in this process ("" while they serve)


def _use_compiled(compiled) -> bool:
    compiled = COMPILED if compiled is None else compiled
    if compiled and numba is None:
        _fall_back(f"numba cannot be imported ({_UNAVAILABLE})")
    return compiled and numba is not None and not _failed


def _fall_back(why: str) -> None:
    """numpy's BLAS from now on in this process, said in one line."""
    global _failed
    if not _failed:
        log.warning("%s: the simulator's products with X run on numpy's BLAS", why)
        _failed = why


def _blas_matvecs(A: np.ndarray, V: np.ndarray, out: np.ndarray) -> None:
    threads = [lib.get_num_threads() for lib in _NUMPY_BLAS]
    try:
        for lib in _NUMPY_BLAS:
            lib.set_num_threads(1)
        for v, o in zip(V, out):
            np.matmul(A, v, out=o)
    finally:
        for lib, n in zip(_NUMPY_BLAS, threads):
            lib.set_num_threads(n)


def _products(kernel, X: torch.Tensor, A: torch.Tensor, B: torch.Tensor, out: torch.Tensor, compiled) -> None:
    """``out[j] = A @ B[j]``, ``A`` being ``X`` or ``X^T``: by the compiled ``kernel(X, B, out)`` where
    it serves; where it fails (a damaged cache, a dtype numba does not take), by the BLAS products
    from then on, never a partial result."""
    if X.device.type != "cpu":
        for j in range(B.shape[0]):
            torch.mv(A, B[j], out=out[j])
        return
    with np.errstate(all="ignore"):  # a diverging run is found and reported by training
        if _use_compiled(compiled):
            try:
                kernel(X.numpy(), B.contiguous().numpy(), out.numpy())
                return
            except Exception as exc:  # noqa: BLE001 - any failure of the compiled call: the reference serves
                _fall_back(f"the compiled product failed ({type(exc).__name__}: {str(exc).strip()[:200]})")
        _blas_matvecs(A.numpy(), B.numpy(), out.numpy())


def times_columns(X: torch.Tensor, V: torch.Tensor, out: torch.Tensor, compiled=None) -> None:
    """``out[j] = X @ V[j]`` for the rows ``V[j]`` (``(m, d)``; ``out``: ``(m, L n)``).
    ``compiled``: None for :data:`COMPILED`; False for numpy's BLAS (the reference)."""
    _products(_rows_times, X, X, V, out, compiled)


def transpose_times_columns(X: torch.Tensor, G: torch.Tensor, out: torch.Tensor, compiled=None) -> None:
    """``out[j] = X^T @ G[j]`` for the rows ``G[j]`` (``(m, L n)``; ``out``: ``(m, d)``).
    ``compiled``: None for :data:`COMPILED`; False for numpy's BLAS (the reference)."""
    _products(_transpose_times, X, X.t(), G, out, compiled)

"""The per-node work runs with one BLAS thread, whatever the environment, and the caller's
setting is restored afterwards (numerics.threads)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from numerics.threads import blas_threads, one_blas_thread


def _blas_counts():
    return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_the_limit_holds_inside_and_is_restored_outside():
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_counts()
        assert before and all(n == 2 for n in before.values())
        with one_blas_thread():
            assert all(n == 1 for n in _blas_counts().values())
            with one_blas_thread():  # nested entries leave the outer limit in place
                assert all(n == 1 for n in _blas_counts().values())
            assert all(n == 1 for n in _blas_counts().values())
        assert _blas_counts() == before


def test_the_channel_runs_under_the_limit(monkeypatch):
    """The line quadrature's per-node work sees one BLAS thread (observed from inside it: the numpy
    backend's dot products of the integrands with the weights; the compiled backend sums them in its
    kernel)."""
    from derivations import ModelSpec
    from numerics.model.bound import bind
    from numerics.channel.lines import accumulation

    seen = []
    original = np.dot

    def spy(*args, **kwargs):
        seen.append(max(_blas_counts().values()))
        return original(*args, **kwargs)

    monkeypatch.setattr(accumulation.np, "dot", spy)
    from numerics.api import Overlaps
    from numerics.channel.lines.expectations import update_hat_overlaps
    from numerics.precision import PRECISIONS

    with threadpool_limits(limits=2, user_api="blas"):
        update_hat_overlaps(bind(ModelSpec(), "numpy"), Overlaps(0.11, 0.0, 12.0, 0.15), 2.0,
                            PRECISIONS["draft"].check_rule)
    assert seen and set(seen) == {1}


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNPHASE_BLAS_THREADS", "0")
    assert blas_threads() == 0
    monkeypatch.setenv("ATTNPHASE_BLAS_THREADS", "two")
    with pytest.raises(ValueError, match="ATTNPHASE_BLAS_THREADS"):
        blas_threads()


def _huge_pages_setting():
    from numpy._core import multiarray

    before = multiarray._set_madvise_hugepage(True)
    multiarray._set_madvise_hugepage(before)
    return before


def test_the_per_node_work_keeps_freed_memory_and_restores_numpys_huge_pages():
    """Inside the per-node work numpy asks for no huge pages and glibc keeps freed blocks
    (numerics.memory); numpy's setting is the caller's again after the outermost exit."""
    import platform

    from numerics import memory

    caller = _huge_pages_setting()
    with one_blas_thread():
        assert _huge_pages_setting() is False
        with one_blas_thread():
            assert _huge_pages_setting() is False
        assert _huge_pages_setting() is False
    assert _huge_pages_setting() is caller
    if platform.libc_ver()[0] == "glibc":
        assert memory.reuse_freed_memory() is True


def test_the_memory_setting_can_be_turned_off(monkeypatch):
    """``ATTNPHASE_KEEP_FREED_MEMORY=0`` leaves numpy's huge pages alone; another value is a one-line
    error naming the variable."""
    from numerics import memory

    monkeypatch.setenv("ATTNPHASE_KEEP_FREED_MEMORY", "0")
    caller = _huge_pages_setting()
    with one_blas_thread():
        assert _huge_pages_setting() is caller
    assert memory.huge_pages(False) is None
    monkeypatch.setenv("ATTNPHASE_KEEP_FREED_MEMORY", "sometimes")
    with pytest.raises(ValueError, match="ATTNPHASE_KEEP_FREED_MEMORY"):
        memory.enabled()


def test_blocks_side_by_side_keep_their_order_and_run_nested_splits_in_their_thread(monkeypatch):
    """split_over_threads: blocks of at most ``largest`` nodes, their outputs concatenated in the
    nodes' order; a split nested in a block stays in that block's thread (one kernel thread there),
    so the pool never waits on itself."""
    import threading

    from numerics.threads import kernel_threads, split_over_threads

    monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "2")
    seen = []

    def inner(part):
        seen.append((threading.get_ident(), kernel_threads()))
        return (np.arange(part.start, part.stop) * 2.0,)

    def outer(part):
        doubled, = split_over_threads(inner, part.stop - part.start, 1)
        return np.arange(part.start, part.stop), doubled + 2.0 * part.start, np.array([threading.get_ident()])

    index, doubled, outers = split_over_threads(outer, 1000, 10, largest=150)
    assert np.array_equal(index, np.arange(1000)) and np.array_equal(doubled, 2.0 * np.arange(1000))
    assert len(outers) == 8  # blocks of at most 150 nodes, as many for each of the two threads
    # every nested call ran in one of the blocks' threads, which have one kernel thread each
    assert len(seen) == 8 and {threads for _, threads in seen} == {1}
    assert {ident for ident, _ in seen} <= set(outers.tolist())
    assert threading.get_ident() not in set(outers.tolist())
    assert kernel_threads() == 2  # the caller's thread is not marked


def test_the_libraries_are_enumerated_again_only_after_an_import(monkeypatch):
    """The limit's controller is kept between entries (enumerating the loaded libraries cost 0.3 ms
    at each) and made again where a module was imported since, which may have brought a BLAS."""
    import sys
    import types

    import threadpoolctl

    from numerics import threads

    made = []

    class Counting(threadpoolctl.ThreadpoolController):
        def __init__(self):
            made.append(self)
            super().__init__()

    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", Counting)
    monkeypatch.setitem(threads._controller, "modules", -1)
    monkeypatch.setitem(threads._controller, "controller", None)
    for _ in range(2):
        with one_blas_thread():
            pass
    assert len(made) == 1
    monkeypatch.setitem(sys.modules, "_attnphase_test_new_module", types.ModuleType("_attnphase_test_new_module"))
    with one_blas_thread():
        pass
    assert len(made) == 2

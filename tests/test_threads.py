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
    """The line quadrature's per-node work sees one BLAS thread (observed from inside it)."""
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
        update_hat_overlaps(bind(ModelSpec()), Overlaps(0.11, 0.0, 12.0, 0.15), 2.0, PRECISIONS["draft"].check_rule)
    assert seen and set(seen) == {1}


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNPHASE_BLAS_THREADS", "0")
    assert blas_threads() == 0
    monkeypatch.setenv("ATTNPHASE_BLAS_THREADS", "two")
    with pytest.raises(ValueError, match="ATTNPHASE_BLAS_THREADS"):
        blas_threads()

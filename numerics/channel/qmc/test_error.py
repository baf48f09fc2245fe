"""The test error of the general model by randomised quasi-Monte Carlo (docs/theory.md, section 4.12).

``(sigma^2 / 2) E |S(w) - T(h*)|_F^2`` with ``w_l = (P m)_l + zeta_l``: the generated
``test_error_integrand_x`` at the nodes of its own scrambled Sobol rule (no prox, so it affords
more points than the channel). The integrand is smooth, so the scrambled rule converges fast; the
spread over the scramblings is the standard error.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from numerics.model.general import GeneralModel
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.channel.qmc.nodes import GaussianNodes, preactivations
from numerics.threads import one_blas_thread, split_over_threads

#: nodes per block of the test error's pre-activations and integrand, so that their temporaries stay
#: a few MB: in one pass over the 2^21 x 8 nodes of a refined rule they were 0.3-0.5 GB each, mapped
#: afresh at every evaluation. The blocks go side by side in the kernels' threads (elementwise: the
#: same numbers)
TEST_BLOCK = 2**16


@one_blas_thread
def test_error_estimates(model: GeneralModel, ov: MatrixOverlaps, nodes: GaussianNodes,
                         points: Optional[int] = None) -> np.ndarray:
    """The test error from each scrambling of ``nodes`` (``(R,)``); ``points``: from the first
    ``points`` (a power of two) of each, itself a scrambled Sobol rule."""
    n = nodes.points if points is None else min(points, nodes.points)
    # the whole rule (its blocks are ranges of nodes), or a prefix of each scrambling (an index)
    rows = None if n == nodes.points else np.concatenate([nodes.rows(j)[:n] for j in range(nodes.scrambles)])
    Pm = model.positional_mean(ov.m)

    def run(block):
        zeta, hs, _ = preactivations(nodes, ov, model.spec.rho, Pm, block if rows is None else rows[block])
        with np.errstate(over="ignore", under="ignore"):
            return (model.test_error_integrand(zeta, hs, ov.m),)

    values, = split_over_threads(run, nodes.scrambles * n, TEST_BLOCK, TEST_BLOCK)
    return values.reshape(nodes.scrambles, n).mean(axis=1)


def test_error(model: GeneralModel, ov: MatrixOverlaps, nodes: GaussianNodes) -> Tuple[float, float]:
    """``(test error, its standard error)`` at ``ov``."""
    per = test_error_estimates(model, ov, nodes)
    return float(per.mean()), float(per.std(ddof=1) / np.sqrt(len(per)))

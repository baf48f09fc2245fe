"""The linear positional baseline (docs/theory.md, section 1.7): ``Yhat = B X`` with one ``L x L``
matrix ``B`` for every sample, fitted in closed form by ridge regression."""
from __future__ import annotations

import torch

from .data import Batch
from .kernel import loss_of_scores
from ..run_settings import LINEAR_RIDGE


def fit_linear_baseline(batch: Batch, ridge: float = LINEAR_RIDGE) -> torch.Tensor:
    """Closed-form ridge fit of ``Yhat = B X``.

    Minimises ``sum_i |Y_i - B X_i|_F^2 / (2d) + (ridge/2) |B|_F^2`` (the normalisation of
    the attention risk), whose minimiser solves ``B (sum_i G_i / d + ridge I) = sum_i C_i / d``.
    """
    L = batch.L
    Gs = batch.G.sum(0) / batch.d + ridge * torch.eye(L, dtype=batch.G.dtype, device=batch.G.device)
    Cs = batch.C.sum(0) / batch.d
    return torch.linalg.solve(Gs, Cs, left=False)  # B Gs = Cs  (Gs symmetric)


def linear_per_sample_loss(B: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``|Y_i - B X_i|_F^2 / (2d)`` per sample, shape ``(n,)``: the loss kernel's, with one matrix
    ``B`` in place of every sample's attention."""
    return loss_of_scores(B[:, :, None], batch)


def linear_risk_and_grad(B: torch.Tensor, batch: Batch, ridge: float = LINEAR_RIDGE):
    """The linear baseline's risk and its gradient in ``B`` (for checking the closed form)."""
    total = linear_per_sample_loss(B, batch).sum() + 0.5 * ridge * (B * B).sum()
    grad = (B @ batch.G.sum(0) - batch.C.sum(0)) / batch.d + ridge * B
    return total, grad


def linear_test_error(B: torch.Tensor, batch: Batch) -> float:
    """Mean of ``|Y - B X|_F^2 / (2d)`` over the batch."""
    return float(linear_per_sample_loss(B, batch).mean())

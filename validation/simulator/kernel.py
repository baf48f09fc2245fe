"""The loss kernel: the empirical risk of docs/theory.md, section 1.3 and its gradient, for any
``L``, ``r`` and attention, and for several students on one data set at once.

The per-sample loss

    loss_i = |Y_i - S(h_i) X_i|_F^2 / (2d)
           = [tr(Y Y^T) - 2 tr(S X Y^T) + tr(S X X^T S^T)] / (2d)

depends on the data only through the statistics ``G``, ``C``, ``|Y|^2`` of a
:class:`~validation.simulator.data.Batch` and on a student ``Q`` only through ``h = X Q / sqrt(d)``.
With ``P = d loss / d S = (S G - C) / d``, ``J = d loss / d logits`` (the attention's
:meth:`~validation.simulator.attention.Attention.pullback`, logits ``h h^T``) and
``d loss / d h = (J + J^T) h``, the gradient of ``R(Q) = sum_i loss_i + lam/2 |Q|_F^2`` is
``X^T g / sqrt(d) + lam Q``. ``lam`` is the ridge strength of the model's regulariser
(:attr:`derivations.spec.ModelSpec.ridge_strength`): every penalty a model admits, typed or not, is
``c(lam) w^2`` per entry, this ridge with ``lam = 2 c(lam)`` (:mod:`derivations.regulariser`).

Students
--------
The kernel works on ``W``, the students of a batch as an array ``(k, r, d)``: run ``i``'s ``Q``
is ``W[i]^T``, so the ``k`` students stacked side by side are the ``d x (k r)`` matrix ``W^T``.
A step reads ``X`` twice, once for ``h`` and once for the gradient. Everything between works on
arrays ``(k, r, L, n)`` and ``(k, L, L, n)`` (samples last, the runs first) in float64 whatever the working dtype (cheap, and it avoids
cancellation in the loss, a difference of O(d) terms); every operation there is elementwise in
the runs or sums over the small axes, so each run's numbers do not depend on the other runs of
its batch, bit for bit (tested). A single student is the batch of one
(:func:`risk_and_grad`).

The two products with ``X`` (:mod:`validation.simulator.products`) read it once per step each for
all ``k r`` columns of the batch (a compiled pass over its rows), so a batch of ``k`` runs costs
much less than ``k`` runs; they are most of a step's time at d = 1000. Batched products of many
tiny ``L x L`` matrices (``bmm``, ``einsum``) are orders of magnitude slower on the CPU than the
elementwise form used between them.
"""
from __future__ import annotations

import math

import torch

from .attention import as_attention, attention_matrix
from .data import STAT_DTYPE, Batch
from .products import times_columns, transpose_times_columns


def as_rows(Q: torch.Tensor) -> torch.Tensor:
    """A student ``Q`` (``(d,)`` or ``(d, r)``) as the ``(1, r, d)`` batch of one (a contiguous copy)."""
    return (Q[None, None] if Q.dim() == 1 else Q.t()[None]).contiguous()


def from_rows(rows: torch.Tensor, vector: bool) -> torch.Tensor:
    """One run's ``(r, d)`` rows as a student: ``(d,)`` when ``vector`` (then ``r = 1``), else
    ``(d, r)`` (a contiguous copy)."""
    return rows[0].clone() if vector else rows.t().contiguous()


def hidden(W: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``h = X Q / sqrt(d)`` of every student of ``W`` (``(k, r, d)``, contiguous) in float64,
    shape ``(k, r, L, n)``."""
    k, r, d = W.shape
    h = torch.empty(k * r, batch.L * batch.n, dtype=batch.X.dtype, device=batch.X.device)
    times_columns(batch.X, W.view(k * r, d), h)
    return h.to(STAT_DTYPE).mul_(1.0 / math.sqrt(batch.d)).view(k, r, batch.L, batch.n)


def _times_G(S: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``(S G)_ab = sum_c S_ac G_cb`` per sample, layout ``(..., L, L, n)``.

    A sum of ``L`` products of ``(..., L, L, n)`` arrays rather than one ``(..., L, L, L, n)``
    product: that array is large enough for torch to split it over threads, which stalls when
    the cores are shared."""
    SG = S[..., :, 0, None, :] * batch.Gt[0]
    for c in range(1, batch.L):
        SG.addcmul_(S[..., :, c, None, :], batch.Gt[c])
    return SG


def _loss_of(S: torch.Tensor, SG: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``|Y - S X|_F^2 / (2d) = (|Y|^2 + sum_ab S_ab (S G - 2 C)_ab) / (2d)`` per sample, shape
    ``(..., n)``, from ``S`` and ``S G`` in the layout ``(..., L, L, n)``."""
    return (batch.yy + (S * (SG - 2.0 * batch.Ct)).sum(dim=(-3, -2))) / (2.0 * batch.d)


def _logits(h: torch.Tensor) -> torch.Tensor:
    """``h h^T`` per sample: ``(..., L, L, n)`` from ``h`` of shape ``(..., r, L, n)``."""
    if h.shape[-3] == 1:  # rank one: the sum over r would be a copy
        h = h[..., 0, :, :]
        return h[..., :, None, :] * h[..., None, :, :]
    return (h[..., :, :, None, :] * h[..., :, None, :, :]).sum(dim=-4)


def loss_of_scores(S: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Per-sample loss of attention matrices ``S`` (layout ``(..., L, L, n)``, or ``(..., L, L, 1)``
    for one matrix shared by every sample, as the linear baseline's)."""
    return _loss_of(S, _times_G(S, batch), batch)


def loss_and_grad_h(h: torch.Tensor, batch: Batch, attention="softmax", need_loss: bool = True):
    """Per-run summed loss ``sum_i loss_i`` (shape ``h.shape[:-3]``; None unless ``need_loss``) and
    its gradient in ``h`` (the shape of ``h``, ``(..., r, L, n)``; module docstring)."""
    att = as_attention(attention)
    logits = _logits(h)
    S = att.weights(logits)
    SG = _times_G(S, batch)
    total = _loss_of(S, SG, batch).sum(dim=-1) if need_loss else None
    P = SG.sub_(batch.Ct).mul_(1.0 / batch.d)
    K = att.pullback(logits, S, P)
    K = K + K.transpose(-3, -2)
    g = K.mul_(h[..., 0, None, :, :]).sum(dim=-2)[..., None, :, :] if h.shape[-3] == 1 else \
        (K[..., None, :, :, :] * h[..., :, None, :, :]).sum(dim=-2)
    return total, g


def batch_risk_and_grad(W: torch.Tensor, batch: Batch, lam: float, attention="softmax", need_loss: bool = True):
    """``R`` of every student of ``W`` (``(k, r, d)``, contiguous): float64 of shape ``(k,)``, None
    unless ``need_loss``; and ``dR/dW``, ``(k, r, d)`` in the dtype of ``W``."""
    k, r, d = W.shape
    total, g = loss_and_grad_h(hidden(W, batch), batch, attention, need_loss)
    grad = torch.empty_like(W)
    transpose_times_columns(batch.X, g.to(W.dtype).view(k * r, batch.L * batch.n), grad.view(k * r, d))
    grad.mul_(1.0 / math.sqrt(batch.d)).add_(W, alpha=lam)
    R = None
    if need_loss:
        W64 = W.to(STAT_DTYPE)
        R = total + 0.5 * lam * (W64 * W64).sum(dim=(-2, -1))
    return R, grad


def risk_and_grad(Q: torch.Tensor, batch: Batch, lam: float, attention="softmax", need_loss: bool = True):
    """Empirical risk ``R(Q) = sum_i loss_i + lam/2 |Q|_F^2`` (float64 scalar; None unless
    ``need_loss``) and ``dR/dQ = X^T g / sqrt(d) + lam Q`` (dtype and shape of ``Q``), for ``Q``
    of shape ``(d,)`` or ``(d, r)``: :func:`batch_risk_and_grad` of the batch of one."""
    R, grad = batch_risk_and_grad(as_rows(Q), batch, lam, attention, need_loss)
    return (None if R is None else R[0]), from_rows(grad[0], Q.dim() == 1)


def per_sample_loss(Q: torch.Tensor, batch: Batch, attention="softmax") -> torch.Tensor:
    """Per-sample loss ``sum_l |y_l - yhat_l|^2 / (2d)`` (docs/theory.md, section 1.3), shape ``(n,)``, float64."""
    return batch_per_sample_loss(as_rows(Q), batch, attention)[0]


def batch_per_sample_loss(W: torch.Tensor, batch: Batch, attention="softmax") -> torch.Tensor:
    """Per-sample loss of every student of ``W`` (``(k, r, d)``), shape ``(k, n)``, float64."""
    S = as_attention(attention).weights(_logits(hidden(W, batch)))
    return loss_of_scores(S, batch)


def risk_autograd(Q: torch.Tensor, X3: torch.Tensor, Y3: torch.Tensor, lam: float, attention="softmax"):
    """Reference: the same risk written plainly over whole-batch ``(n, L, d)`` tensors (for autograd)."""
    d = X3.shape[-1]
    if Q.dim() == 1:
        h = torch.einsum("nld,d->nl", X3, Q) / math.sqrt(d)
    else:
        h = (X3 @ Q) / math.sqrt(d)
    S = attention_matrix(h, attention)
    Yhat = S @ X3
    return ((Y3 - Yhat) ** 2).sum() / (2 * d) + 0.5 * lam * (Q * Q).sum()

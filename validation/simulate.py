"""Finite-size simulations of the model of docs/theory.md, sections 1 and 4.1, in torch.

The data generator, the tied rank-``r`` attention student, its training by
full-batch gradient descent (or Adam) and the closed-form linear positional
baseline, for any number of tokens ``L``, student rank ``r``, teacher rank ``t``
and positional matrix ``P`` (``L x k``) of a :class:`~derivations.spec.ModelSpec`.

Shapes
------
A weight of rank one is a vector of ``R^d``; a weight of rank ``r > 1`` a ``d x r``
matrix. So ``Q`` has shape ``(d,)`` for ``r = 1`` and ``(d, r)`` otherwise, and the
teacher ``Q*`` shape ``(d,)`` for ``t = 1`` and ``(d, t)`` otherwise; every function
taking ``Q`` accepts both forms and returns gradients of the shape it was given.

Positions
---------
``mu_l = sqrt(d) sum_a P[l, a] e_a`` (docs/theory.md, section 4.1) with the
orthonormal vectors of :func:`position_basis`: ``e_1 = (1, ..., 1)/sqrt(d)`` (so
the two-token model is that of section 1.1) and, for ``a >= 2``, the real Fourier
vectors ``e_a[j] = sqrt(2/d) cos(2 pi f j/d)`` (``a = 2f``) or
``sqrt(2/d) sin(2 pi f j/d)`` (``a = 2f + 1``), ``j = 0..d-1``: dense, deterministic,
and orthonormal for ``d > k``.

Speed
-----
The per-sample loss (docs/theory.md, section 1.3)

    loss_i = |Y_i - S(h_i) X_i|_F^2 / (2d)
           = [tr(Y Y^T) - 2 tr(S X Y^T) + tr(S X X^T S^T)] / (2d)

depends on the data only through the ``L x L`` Gram statistics ``G = X X^T``,
``C = Y X^T`` and ``|Y|_F^2``, computed once per run (:class:`Batch`), and on
``Q`` only through ``h = X Q / sqrt(d)``. Its gradient is
``X^T g / sqrt(d) + lam Q`` with ``g = d loss / d h`` an ``(L n) x r`` array. So a
step reads ``X`` (stored as one contiguous ``(L n) x d`` matrix) twice per column
of ``Q``: once for ``h``, once for the gradient. Everything else works on the
per-sample statistics, in float64 whatever the working dtype (cheap, and it avoids
cancellation in the loss, which is a difference of O(d) terms).

Two implementations of that middle part give the same numbers (tested):

* two tokens and a rank-one student (:func:`loss_and_grad_h`): explicit formulas
  on length-``n`` columns (``S_11 = sigmoid(h_1 (h_1 - h_2))``, ...);
* any ``L`` and ``r`` (:func:`loss_and_grad_h_general`): broadcasting over arrays
  whose sample axis is last, ``(L, L, n)`` and ``(r, L, n)``, summing over the
  small axes.

Batched products of many tiny ``L x L`` matrices (``bmm``, ``einsum``) are orders of
magnitude slower on the CPU than either. The general path also uses
matrix-vector products, one per column of ``Q`` (a product of ``X`` with a ``d x r``
matrix of few columns is ~10 times slower on the CPU), and avoids operations that
torch splits over threads for small arrays, which stall when the cores are
oversubscribed (both measured by ``benchmarks/bench_simulation.py --kernels``). :func:`risk_and_grad` uses the first implementation for
a vector ``Q`` with ``L = 2`` and the second otherwise.

Seeding
-------
One integer ``seed`` determines everything. Run ``k`` of a call uses the numpy
``SeedSequence(seed, spawn_key=(k,))`` (the same child whatever the number of
runs), which spawns four independent streams: the teacher ``Q*``, the training
set, the test set and the random initialisation. (numpy's global state is never
used; bootstraps in :mod:`validation.statistics` take a ``numpy.random.Generator``
seeded from the same integer.) Each stream seeds a CPU ``torch.Generator``; data
are drawn in float64 on the CPU and then cast and moved to the device, so the data
do not depend on the device or the working dtype, and a fixed seed reproduces
bit-identical results on the CPU.

Divergence
----------
A run whose risk or ``Q`` stops being finite raises :class:`SimulationDiverged`
naming the seed, the run index and the first step at which it happened; no
record with NaN is returned.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
import time
from typing import Callable, Optional

import numpy as np
import torch

from derivations.spec import BUILTIN_ATTENTIONS, ModelSpec

from .run_settings import DEFAULT_LR, INITS, OPTIMIZERS, check_start  # noqa: F401  (part of this module's interface)

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64}
LINEAR_RIDGE = 1e-4
RANDOM_INIT_SCALE = 0.1  # random start Q = 0.1 N(0, I) (docs/theory.md, section 1.4)
STAT_DTYPE = torch.float64  # dtype of the per-sample L x L statistics
_LOG2_E = 1.0 / math.log(2.0)


class SimulationDiverged(RuntimeError):
    """Training produced a non-finite risk or ``Q``.

    ``step`` is the first step ``s`` whose iterate ``Q_s`` (after ``s`` updates) or its
    risk is not finite."""

    def __init__(self, seed: int, run_index: int, step: int, detail: str = ""):
        super().__init__(f"run {run_index} of seed {seed} diverged at step {step}: "
                         f"the risk or Q is not finite{detail}")
        self.seed = seed
        self.run_index = run_index
        self.step = step


def choose_device(device: Optional[str] = None) -> torch.device:
    """The device to run on: ``device`` if given, else CUDA when present, else the CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_seed_sequence(seed: int, run_index: int) -> np.random.SeedSequence:
    """The seed sequence of run ``run_index`` of a call with integer ``seed``."""
    return np.random.SeedSequence(int(seed), spawn_key=(int(run_index),))


def _torch_generator(ss: np.random.SeedSequence) -> torch.Generator:
    state = ss.generate_state(2, dtype=np.uint32)
    g = torch.Generator(device="cpu")
    g.manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return g


def _columns(W: torch.Tensor) -> torch.Tensor:
    """A weight as a ``d x rank`` matrix (a view; a vector is one column)."""
    return W[:, None] if W.dim() == 1 else W


def _weight(W: torch.Tensor) -> torch.Tensor:
    """A ``d x rank`` matrix in the module's convention: a vector when ``rank = 1``."""
    return W[:, 0] if W.shape[1] == 1 else W


@dataclasses.dataclass(frozen=True)
class Attention:
    """An attention as the simulator computes it: the spec's text (a built-in name or a canonical
    expression of one row of scores, :mod:`derivations.attention`), its role (``attention``, the
    student's, or ``teacher``) and the student's inverse temperature ``beta``.

    The built-ins have hand-written elementwise forms (the softmax at ``beta`` is the softmax of
    ``beta`` times the scores); every other attention, and every built-in with ``generated``, is
    computed from torch functions lambdified from the same row expression as the theory's, with
    its derivatives in each score (:func:`generated_row`). Tests check the two agree."""

    text: str = "softmax"
    role: str = "attention"
    beta: float = 1.0
    generated: bool = False

    @property
    def kind(self) -> str:
        """The hand-written form to use: a built-in name, or ``generated``."""
        return "generated" if self.generated or self.text not in BUILTIN_ATTENTIONS else self.text


def student_attention(spec: ModelSpec, generated: bool = False) -> Attention:
    return Attention(spec.attention, "attention", spec.beta, generated)


def teacher_attention(spec: ModelSpec, generated: bool = False) -> Attention:
    return Attention(spec.teacher, "teacher", 1.0, generated)


def _as_attention(attention) -> Attention:
    """An :class:`Attention` from itself or a built-in name."""
    if isinstance(attention, Attention):
        return attention
    if isinstance(attention, str) and attention in BUILTIN_ATTENTIONS:
        return Attention(attention)
    raise ValueError(f"attention: unknown nonlinearity {attention!r}; give a built-in name "
                     f"({', '.join(BUILTIN_ATTENTIONS)}) or an Attention (student_attention(spec))")


#: torch counterparts of the functions an attention expression may use (derivations.attention.FUNCTIONS)
_TORCH_FUNCTIONS = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "tanh": torch.tanh, "sinh": torch.sinh,
                    "cosh": torch.cosh, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "erf": torch.erf,
                    "Abs": torch.abs}


@functools.lru_cache(maxsize=64)
def generated_row(text: str, role: str, beta: float, L: int):
    """``(f, (df/dh1, ..., df/dhL))``: torch functions of ``L`` score tensors, lambdified from the
    row expression of the theory (:func:`derivations.attention.row_expression`) and its
    SymPy derivatives. A constant derivative comes back as a Python number."""
    import sympy as sp

    from derivations.attention import row_expression, score_symbols

    f = row_expression(text, L, role, beta)
    h = score_symbols(L)
    modules = [_TORCH_FUNCTIONS, "math"]
    return (sp.lambdify(h, f, modules=modules),
            tuple(sp.lambdify(h, sp.diff(f, x), modules=modules) for x in h))


def _as_tensor(value, like: torch.Tensor) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.full_like(like, float(value))


def _generated_rows(attention: Attention, score, L: int, slopes: bool = False):
    """``S[i][j] = f(s_ij, s_i(j+1), ...)`` (cyclic) from ``score(i, c)``, the logits' tensors, and with
    ``slopes`` also ``D[i][j][k] = dS_ij / ds_i(j+k)``."""
    f, df = generated_row(attention.text, attention.role, attention.beta, L)
    S, D = [], []
    for i in range(L):
        row, drow = [], []
        for j in range(L):
            args = [score(i, (j + k) % L) for k in range(L)]
            row.append(_as_tensor(f(*args), args[0]))
            if slopes:
                drow.append([_as_tensor(g(*args), args[0]) for g in df])
        S.append(row)
        D.append(drow)
    return S, D


def _slopes_to_J(P, D, L: int):
    """``J_ic = sum_j P_ij dS_ij/ds_ic``, ``d loss / d logits`` from ``P = d loss / d S``."""
    J = [[None] * L for _ in range(L)]
    for i in range(L):
        for j in range(L):
            for k in range(L):
                c = (j + k) % L
                term = P[i][j] * D[i][j][k]
                J[i][c] = term if J[i][c] is None else J[i][c] + term
    return J


# --------------------------------------------------------------------------- positions


def _check_dimension(d: int, k: int) -> None:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d: must be a positive integer, got {d!r}")
    if k >= d:
        raise ValueError(f"d: must exceed the number of positional directions k = {k}, got d = {d}")


def position_basis(d: int, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The orthonormal ``e_1..e_k`` of ``R^d`` as the columns of a ``d x k`` matrix (module docstring;
    :func:`validation.instances.position_basis`, the one definition, in numpy).

    ``e_1 = (1, ..., 1)/sqrt(d)``; ``e_{2f}`` and ``e_{2f+1}`` are the cosine and sine of
    frequency ``f``, orthonormal to ``e_1`` and to each other while ``2f < d``, which
    ``d > k`` guarantees."""
    from .instances import position_basis as basis

    _check_dimension(d, k)
    return torch.from_numpy(basis(d, k)).to(dtype)


def position_offsets(spec: ModelSpec, d: int) -> torch.Tensor:
    """``mu_l / sqrt(d) = sum_a P[l, a] e_a`` as an ``L x d`` float64 matrix."""
    P = torch.tensor(spec.positions, dtype=torch.float64)
    return P @ position_basis(d, spec.k).t()


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class Batch:
    """``n`` samples of ``L`` tokens, stored for fast training (see the module docstring).

    X : ``(L n, d)`` contiguous, *token-major*: rows ``l n .. (l + 1) n - 1`` are the
        tokens ``x_{i,l}``, so that ``X Q`` splits into ``L`` contiguous blocks
        ``h_l``. Working dtype.
    G : ``(n, L, L)`` float64, ``X_i X_i^T``.
    C : ``(n, L, L)`` float64, ``Y_i X_i^T``.
    yy : ``(n,)`` float64, ``|Y_i|_F^2``.
    """

    X: torch.Tensor
    G: torch.Tensor
    C: torch.Tensor
    yy: torch.Tensor
    n: int
    d: int
    L: int = 2

    def __post_init__(self):
        G, C = self.G, self.C
        self.yy_sum = self.yy.sum()
        # the general path's layout: entry (a, b) first, samples last
        self.Gt = G.permute(1, 2, 0).contiguous()
        self.Ct = C.permute(1, 2, 0).contiguous()
        if self.L != 2:
            return
        # columns used by the two-token code (float64, contiguous)
        self.g11, self.g12, self.g22 = G[:, 0, 0].contiguous(), G[:, 0, 1].contiguous(), G[:, 1, 1].contiguous()
        self.c11, self.c12 = C[:, 0, 0].contiguous(), C[:, 0, 1].contiguous()
        self.c21, self.c22 = C[:, 1, 0].contiguous(), C[:, 1, 1].contiguous()
        # softmax fast path: P_11 - P_12 = E1 + a F and P_21 - P_22 = E2 - b F with
        # a = S_11, b = S_22 (see loss_and_grad_h)
        d1, d2 = self.g11 - self.g12, self.g12 - self.g22
        self.sm_F = d1 - d2
        self.sm_E1 = d2 - (self.c11 - self.c12)
        self.sm_E2 = d1 - (self.c21 - self.c22)

    @property
    def X3(self) -> torch.Tensor:
        """``X`` as an ``(n, L, d)`` tensor (a copy)."""
        return self.X.view(self.L, self.n, self.d).transpose(0, 1).contiguous()


def teacher_matrix(hstar: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """``T = (1 - omega) T0(h* h*^T) + omega A`` (docs/theory.md, sections 1.2 and 4.1), ``T0`` the
    teacher's attention, for ``hstar`` of shape ``(n, L)`` (rank one) or ``(n, L, t)``."""
    A = torch.tensor(spec.A, dtype=hstar.dtype, device=hstar.device)
    S = attention_matrix(hstar, teacher_attention(spec))
    return (1.0 - spec.omega) * S + spec.omega * A


def sample_raw(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator):
    """Draw ``n`` samples of docs/theory.md, section 4.1 in float64 on the CPU.

    Returns ``(X, Y, Z)`` each of shape ``(n, L, d)``: ``x_l = mu_l/sqrt(d) + z_l`` with
    ``mu_l`` from :func:`position_offsets`, ``z_l ~ N(0, sigma^2 I)``, ``Y = T Z`` with the
    teacher seeing only the semantic part, ``h*_l = Q*^T z_l / sqrt(d)``.
    """
    L = spec.L
    Z = spec.sigma * torch.randn(n, L, d, generator=generator, dtype=torch.float64)
    Qs = Qstar.to(device="cpu", dtype=torch.float64)
    hstar = (Z @ Qs) / math.sqrt(d)
    T = teacher_matrix(hstar, spec)
    Y = T @ Z
    X = Z + position_offsets(spec, d)[None]
    return X, Y, Z


def _raw_chunks(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator, chunk: int):
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        yield start, stop, sample_raw(spec, d, stop - start, Qstar, generator)


def make_batch(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator,
               dtype: torch.dtype, device: torch.device, chunk: int = 4096) -> Batch:
    """Draw ``n`` samples and precompute their Gram statistics (drawn in chunks to bound memory)."""
    L = spec.L
    X_out = torch.empty(n * L, d, dtype=dtype, device=device)
    G = torch.empty(n, L, L, dtype=STAT_DTYPE)
    C = torch.empty(n, L, L, dtype=STAT_DTYPE)
    yy = torch.empty(n, dtype=STAT_DTYPE)
    for start, stop, (X, Y, _) in _raw_chunks(spec, d, n, Qstar, generator, chunk):
        G[start:stop] = X @ X.transpose(1, 2)
        C[start:stop] = Y @ X.transpose(1, 2)
        yy[start:stop] = (Y * Y).sum(dim=(1, 2))
        for l in range(L):
            X_out[l * n + start:l * n + stop] = X[:, l, :].to(dtype=dtype, device=device)
    return Batch(X=X_out, G=G.to(device), C=C.to(device), yy=yy.to(device), n=n, d=d, L=L)


def raw_training_set(problem: "Problem", chunk: int = 4096):
    """The run's training ``(X, Y)`` as ``(n, L, d)`` float64 CPU tensors, redrawn from its seed
    (the fast path keeps only ``X`` and the statistics; reference implementations need ``Y``)."""
    ss_train = run_seed_sequence(problem.seed, problem.run_index).spawn(4)[1]
    parts = list(_raw_chunks(problem.spec, problem.d, problem.n, problem.Qstar.double().cpu(),
                             _torch_generator(ss_train), chunk))
    return torch.cat([x for _, _, (x, _, _) in parts]), torch.cat([y for _, _, (_, y, _) in parts])


# --------------------------------------------------------------------------- student


def attention_matrix(h: torch.Tensor, attention) -> torch.Tensor:
    """The attention ``S(h)`` of ``h h^T`` for ``h`` of shape ``(n, L)`` (rank one) or ``(n, L, r)``,
    shape ``(n, L, L)``; ``attention`` an :class:`Attention` or a built-in name. Plain torch
    operations, differentiable by autograd (the reference of :func:`risk_autograd`)."""
    att = _as_attention(attention)
    logits = h[:, :, None] * h[:, None, :] if h.dim() == 2 else h @ h.transpose(1, 2)
    if att.kind == "softmax":
        return torch.softmax(att.beta * logits, dim=-1)
    if att.kind == "linear":
        return logits
    if att.kind == "sigmoid":
        return torch.sigmoid(logits)
    L = logits.shape[-1]
    S, _ = _generated_rows(att, lambda i, c: logits[:, i, c], L)
    return torch.stack([torch.stack(row, dim=-1) for row in S], dim=-2)


def _per_sample_loss(S11, S12, S21, S22, batch: Batch) -> torch.Tensor:
    """``|Y - S X|_F^2 / (2d)`` per sample from the Gram statistics (``L = 2``, ``S`` given entrywise)."""
    lin = S11 * batch.c11 + S12 * batch.c12 + S21 * batch.c21 + S22 * batch.c22
    quad = (S11 * S11 + S21 * S21) * batch.g11 + (S12 * S12 + S22 * S22) * batch.g22 \
        + 2.0 * (S11 * S12 + S21 * S22) * batch.g12
    return (batch.yy - 2.0 * lin + quad) / (2.0 * batch.d)


def _per_sample_loss_general(S: torch.Tensor, SG: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``|Y - S X|_F^2 / (2d) = (|Y|^2 + sum_ab S_ab (S G - 2 C)_ab) / (2d)`` per sample, from
    ``S`` and ``S G`` in the ``(L, L, n)`` layout."""
    return (batch.yy + (S * (SG - 2.0 * batch.Ct)).sum(dim=(0, 1))) / (2.0 * batch.d)


def _times_G(S: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``(S G)_ab = sum_c S_ac G_cb`` per sample, ``(L, L, n)`` layout.

    A sum of ``L`` products of ``(L, L, n)`` arrays rather than one ``(L, L, L, n)``
    product: that array is large enough for torch to split it over threads, which
    stalls when the cores are shared (see :func:`_attention_general`)."""
    SG = S[:, 0, None] * batch.Gt[None, 0]
    for c in range(1, batch.L):
        SG += S[:, c, None] * batch.Gt[None, c]
    return SG


def _attention_entries(h1: torch.Tensor, h2: torch.Tensor, attention, slopes: bool = False):
    """Entries ``S_11, S_12, S_21, S_22`` of the student attention for ``L = 2``, ``r = 1``; for a
    generated attention with ``slopes`` also its slopes ``D`` (:func:`_generated_rows`)."""
    att = _as_attention(attention)
    if att.kind == "softmax":  # S_11 = sigmoid(beta h_1 (h_1 - h_2)), S_22 = sigmoid(beta h_2 (h_2 - h_1)) (2.1)
        diff = h1 - h2 if att.beta == 1.0 else att.beta * (h1 - h2)
        a = torch.sigmoid(h1 * diff)
        b = torch.sigmoid(-h2 * diff)
        return a, 1.0 - a, 1.0 - b, b
    h12 = h1 * h2
    if att.kind == "linear":
        return h1 * h1, h12, h12, h2 * h2
    if att.kind == "sigmoid":
        s12 = torch.sigmoid(h12)
        return torch.sigmoid(h1 * h1), s12, s12, torch.sigmoid(h2 * h2)
    logits = ((h1 * h1, h12), (h12, h2 * h2))
    S, D = _generated_rows(att, lambda i, c: logits[i][c], 2, slopes)
    entries = (S[0][0], S[0][1], S[1][0], S[1][1])
    return entries + (D,) if slopes else entries


def _attention_general(h: torch.Tensor, attention, slopes: bool = False):
    """``S(h)`` in the ``(L, L, n)`` layout for ``h`` of shape ``(r, L, n)`` (with ``slopes``, a
    generated attention also returns its slopes ``D``, :func:`_generated_rows`)."""
    att = _as_attention(attention)
    logits = (h[:, :, None] * h[:, None]).sum(dim=0)
    if att.kind == "generated":
        S, D = _generated_rows(att, lambda i, c: logits[i, c], logits.shape[0], slopes)
        S = torch.stack([torch.stack(row) for row in S])
        return (S, D) if slopes else S
    if att.beta != 1.0:
        logits = logits * att.beta
    if att.kind == "softmax":
        # exp2, not torch.softmax or torch.exp: on the CPU those open a thread-parallel region
        # even for a few thousand float64 entries, which waits a scheduler slice (~16 ms) for
        # its second thread when the cores are oversubscribed (benchmarks/bench_simulation.py
        # --kernels); exp2 and the other elementwise operations here stay on one thread
        e = torch.exp2((logits - logits.amax(dim=1, keepdim=True)).mul_(_LOG2_E))
        return e.div_(e.sum(dim=1, keepdim=True))
    if att.kind == "linear":
        return logits
    return torch.sigmoid(logits)


def _hidden(Q: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``h = X Q / sqrt(d)`` in float64, shape ``(r, L, n)``, by one matrix-vector product per
    column of ``Q`` (see the module docstring)."""
    Q2 = _columns(Q)
    h = torch.empty(Q2.shape[1], batch.L * batch.n, dtype=batch.X.dtype, device=batch.X.device)
    for j in range(Q2.shape[1]):
        torch.mv(batch.X, Q2[:, j], out=h[j])
    return h.to(STAT_DTYPE).mul_(1.0 / math.sqrt(batch.d)).view(Q2.shape[1], batch.L, batch.n)


def per_sample_loss(Q: torch.Tensor, batch: Batch, attention="softmax") -> torch.Tensor:
    """Per-sample loss ``sum_l |y_l - yhat_l|^2 / (2d)`` (docs/theory.md, section 1.3), shape ``(n,)``, float64."""
    if batch.L == 2 and Q.dim() == 1:
        h = (batch.X @ Q).view(batch.L, batch.n).to(STAT_DTYPE) / math.sqrt(batch.d)
        return _per_sample_loss(*_attention_entries(h[0], h[1], attention), batch)
    S = _attention_general(_hidden(Q, batch), attention)
    return _per_sample_loss_general(S, _times_G(S, batch), batch)


def loss_and_grad_h(h1: torch.Tensor, h2: torch.Tensor, batch: Batch, attention="softmax",
                    need_loss: bool = True):
    """Summed loss ``sum_i loss_i`` (None unless ``need_loss``) and its gradient ``(g_1, g_2)`` in ``h``,
    for two tokens and a rank-one student.

    With ``P = d loss / d S = (S G - C) / d`` and ``J = d loss / d logits`` (logits
    ``h h^T``), ``d loss / d h = (J + J^T) h``. For the softmax, row ``a`` of ``J`` is
    ``u_a (1, -1)`` with ``u_a = S_a1 S_a2 (P_a1 - P_a2)``, so
    ``g_1 = 2 u_1 h_1 + (u_2 - u_1) h_2`` and ``g_2 = (u_2 - u_1) h_1 - 2 u_2 h_2``.
    At inverse temperature ``beta`` both ``u`` carry a factor ``beta``. A generated attention
    takes ``J`` from its slopes (:func:`_slopes_to_J`). Everything is elementwise on length-``n``
    columns.
    """
    att = _as_attention(attention)
    entries = _attention_entries(h1, h2, att, slopes=att.kind == "generated")
    S11, S12, S21, S22 = entries[:4]
    total = _per_sample_loss(S11, S12, S21, S22, batch).sum() if need_loss else None
    inv_d = 1.0 / batch.d
    if att.kind == "softmax":
        a, b = S11, S22
        u1 = (a * S12) * (batch.sm_E1 + a * batch.sm_F)
        u2 = (b * S21) * (batch.sm_E2 - b * batch.sm_F)
        if att.beta != 1.0:
            u1, u2 = att.beta * u1, att.beta * u2
        k12 = u2 - u1
        g1 = (2.0 * u1 * h1 + k12 * h2) * inv_d
        g2 = (k12 * h1 - 2.0 * u2 * h2) * inv_d
        return total, g1, g2
    P11 = S11 * batch.g11 + S12 * batch.g12 - batch.c11
    P12 = S11 * batch.g12 + S12 * batch.g22 - batch.c12
    P21 = S21 * batch.g11 + S22 * batch.g12 - batch.c21
    P22 = S21 * batch.g12 + S22 * batch.g22 - batch.c22
    if att.kind == "sigmoid":
        P11, P12 = P11 * S11 * (1 - S11), P12 * S12 * (1 - S12)
        P21, P22 = P21 * S21 * (1 - S21), P22 * S22 * (1 - S22)
    elif att.kind == "generated":
        (P11, P12), (P21, P22) = _slopes_to_J(((P11, P12), (P21, P22)), entries[4], 2)
    k12 = P12 + P21
    g1 = (2.0 * P11 * h1 + k12 * h2) * inv_d
    g2 = (k12 * h1 + 2.0 * P22 * h2) * inv_d
    return total, g1, g2


def loss_and_grad_h_general(h: torch.Tensor, batch: Batch, attention="softmax", need_loss: bool = True):
    """Summed loss (None unless ``need_loss``) and its gradient in ``h``, both for any ``L`` and ``r``.

    ``h`` has shape ``(r, L, n)`` (float64, see :func:`_hidden`); the gradient has the same shape. As in
    :func:`loss_and_grad_h`, ``P = (S G - C) / d``, ``J = d loss / d logits`` (for the
    softmax ``J_ab = S_ab (P_ab - sum_c S_ac P_ac)``, for the sigmoid ``P S (1 - S)``,
    for the linear attention ``P``; at inverse temperature ``beta`` the softmax's times ``beta``; a
    generated attention's from its slopes, :func:`_slopes_to_J`) and ``d loss / d h = (J + J^T) h``.
    """
    att = _as_attention(attention)
    S = _attention_general(h, att, slopes=att.kind == "generated")
    if att.kind == "generated":
        S, D = S
    SG = _times_G(S, batch)
    total = _per_sample_loss_general(S, SG, batch).sum() if need_loss else None
    P = (SG - batch.Ct).mul_(1.0 / batch.d)
    if att.kind == "softmax":
        J = S * (P - (S * P).sum(dim=1, keepdim=True))
        if att.beta != 1.0:
            J = att.beta * J
    elif att.kind == "generated":
        L = S.shape[0]
        J = torch.stack([torch.stack(row) for row in _slopes_to_J([[P[i, j] for j in range(L)] for i in range(L)],
                                                                     D, L)])
    elif att.kind == "sigmoid":
        J = P * S * (1.0 - S)
    else:
        J = P
    K = J + J.transpose(0, 1)
    g = (K[None] * h[:, None]).sum(dim=2)
    return total, g


def risk_and_grad_two_token(Q: torch.Tensor, batch: Batch, lam: float, attention="softmax",
                            need_loss: bool = True):
    """:func:`risk_and_grad` for two tokens and a vector ``Q`` (rank one), by :func:`loss_and_grad_h`."""
    inv = 1.0 / math.sqrt(batch.d)
    h = (batch.X @ Q).to(STAT_DTYPE).mul_(inv)
    n = batch.n
    total, g1, g2 = loss_and_grad_h(h[:n], h[n:], batch, attention, need_loss)
    g = torch.cat((g1, g2)).to(Q.dtype)
    grad = batch.X.t() @ g
    grad.mul_(inv).add_(Q, alpha=lam)
    R = None
    if need_loss:
        Q64 = Q.to(STAT_DTYPE)
        R = total + 0.5 * lam * (Q64 @ Q64)
    return R, grad


def risk_and_grad_general(Q: torch.Tensor, batch: Batch, lam: float, attention="softmax",
                          need_loss: bool = True):
    """:func:`risk_and_grad` for any ``L`` and ``Q`` of shape ``(d,)`` or ``(d, r)``, by
    :func:`loss_and_grad_h_general`."""
    Q2 = _columns(Q)
    h = _hidden(Q2, batch)
    total, g = loss_and_grad_h_general(h, batch, attention, need_loss)
    g = g.to(Q.dtype).view(g.shape[0], batch.L * batch.n)
    grad_t = torch.empty(g.shape[0], batch.d, dtype=Q.dtype, device=Q.device)
    for j in range(g.shape[0]):
        torch.mv(batch.X.t(), g[j], out=grad_t[j])
    grad = grad_t.t().mul_(1.0 / math.sqrt(batch.d)).add_(Q2, alpha=lam).contiguous()
    R = None
    if need_loss:
        Q64 = Q2.to(STAT_DTYPE)
        R = total + 0.5 * lam * (Q64 * Q64).sum()
    return R, grad.view_as(Q)


def risk_and_grad(Q: torch.Tensor, batch: Batch, lam: float, attention="softmax", need_loss: bool = True):
    """Empirical risk ``R(Q) = sum_i loss_i + lam/2 |Q|_F^2`` (float64 scalar; None unless
    ``need_loss``) and ``dR/dQ = X^T g / sqrt(d) + lam Q`` (dtype and shape of ``Q``)."""
    if batch.L == 2 and Q.dim() == 1:
        return risk_and_grad_two_token(Q, batch, lam, attention, need_loss)
    return risk_and_grad_general(Q, batch, lam, attention, need_loss)


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


# --------------------------------------------------------------------------- training


@dataclasses.dataclass
class Problem:
    """One run's data: the teacher, the training set (``n = alpha d``) and a test set."""

    spec: ModelSpec
    d: int
    alpha: float
    n: int
    Qstar: torch.Tensor
    train: Batch
    test: Batch
    init_seed: np.random.SeedSequence
    seed: int
    run_index: int


def make_problem(spec: ModelSpec, d: int, alpha: float, seed: int = 0, run_index: int = 0,
                 n_test: int = 10000, dtype: torch.dtype = torch.float32,
                 device: Optional[torch.device] = None) -> Problem:
    """Draw the teacher, the training set (``n = round(alpha d)``) and the test set of one run."""
    device = choose_device(None) if device is None else device
    _check_dimension(d, spec.k)
    n = int(round(alpha * d))
    if n < 1:
        raise ValueError(f"alpha: alpha * d = {alpha * d} gives no samples")
    if n_test < 1:
        raise ValueError(f"n_test: must be >= 1, got {n_test}")
    ss_teacher, ss_train, ss_test, ss_init = run_seed_sequence(seed, run_index).spawn(4)
    g_teacher = _torch_generator(ss_teacher)
    t = spec.teacher_rank
    Qstar = torch.randn((d,) if t == 1 else (d, t), generator=g_teacher, dtype=torch.float64)
    train = make_batch(spec, d, n, Qstar, _torch_generator(ss_train), dtype, device)
    test = make_batch(spec, d, n_test, Qstar, _torch_generator(ss_test), dtype, device)
    return Problem(spec=spec, d=d, alpha=alpha, n=n, Qstar=Qstar.to(dtype=dtype, device=device),
                   train=train, test=test, init_seed=ss_init, seed=seed, run_index=run_index)


def check_init(spec: ModelSpec, init: str) -> None:
    """Raise :class:`~validation.run_settings.RunSettingsError` (a ``ValueError``) naming
    ``init`` if the start does not exist for this model."""
    check_start(init, spec.rank, "init")


def initial_Q(problem: Problem, init: str) -> torch.Tensor:
    """The starts of docs/theory.md, section 1.4, for a student of rank ``r``.

    Column ``j`` of ``Q`` (``j = 1..r``):

    * ``random``: ``0.1 N(0, I_{d x r})``, drawn from the run's initialisation stream
      (independent of ``n`` and of the data);
    * ``semantic``: ``Q = Q*`` cut or padded to ``r`` columns: column ``j`` is teacher
      column ``Q*_j`` for ``j <= t``; further columns are those of the random start;
    * ``positional``: column ``j`` is ``e_j`` for ``j <= min(r, k)`` (for ``r = 1``,
      ``Q = mu_1/sqrt(d) = e_1``); further columns are those of the random start;
    * ``mixed`` (``r >= 2``): column 1 is ``Q*_1`` (semantic), column 2 is ``e_1``
      (positional), further columns those of the random start.

    Padding with zeros instead would not do: a zero column has zero gradient and
    stays zero under gradient descent, so the student would keep rank ``t``.
    """
    check_init(problem.spec, init)
    d, Qs = problem.d, problem.Qstar
    _, r, t, k = problem.spec.shape
    if init == "semantic" and r <= t:
        return _weight(_columns(Qs)[:, :r].clone())
    if init == "positional" and r == 1:
        return torch.full((d,), 1.0 / math.sqrt(d), dtype=Qs.dtype, device=Qs.device)
    g = _torch_generator(problem.init_seed)
    Q = (RANDOM_INIT_SCALE * torch.randn((d,) if r == 1 else (d, r), generator=g, dtype=torch.float64))
    Q = _columns(Q.to(dtype=Qs.dtype, device=Qs.device))
    E = position_basis(d, k).to(dtype=Qs.dtype, device=Qs.device)
    if init == "semantic":
        Q[:, :t] = _columns(Qs)
    elif init == "positional":
        Q[:, :min(r, k)] = E[:, :min(r, k)]
    elif init == "mixed":
        Q[:, 0] = _columns(Qs)[:, 0]
        Q[:, 1] = E[:, 0]
    return _weight(Q)


@dataclasses.dataclass
class TrainResult:
    Q: torch.Tensor
    loss_curve: list  # [[step, R(Q)/d], ...]
    steps: int
    grad_norm: float  # |dR/dQ|_F / sqrt(d) at the end: how far from stationary GD stopped
    wall_time: float


def train(problem: Problem, init: str = "semantic", steps: int = 5000, lr: Optional[float] = None,
          optimizer: str = "gd", record_points: int = 200, Q0: Optional[torch.Tensor] = None,
          progress: Optional[Callable[[int], None]] = None) -> TrainResult:
    """Full-batch training of ``R(Q)`` (docs/theory.md, section 1.3): gradient descent, or Adam
    (betas 0.9/0.999, eps 1e-8).

    The loss curve records ``R(Q)/d`` at about ``record_points`` evenly spaced steps
    (the value at step ``t`` is the risk *before* update ``t``) and after the last step.
    At each recorded step the risk and ``Q`` are checked to be finite; if not,
    training is replayed from the start, checking every step, to find the first
    non-finite one, and :class:`SimulationDiverged` is raised. ``progress(n)`` is told at
    each recorded step (and at the end) how many steps were taken since it was last told.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps: must be an integer >= 0, got {steps!r}")
    lr = DEFAULT_LR[optimizer] if lr is None else float(lr)
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: must be a finite number > 0, got {lr}")
    if record_points < 1:
        raise ValueError(f"record_points: must be >= 1, got {record_points}")
    spec, batch = problem.spec, problem.train
    attention = student_attention(spec)
    r = spec.rank
    if Q0 is None:
        Q = initial_Q(problem, init).contiguous()
    else:
        expected = (problem.d,) if r == 1 else (problem.d, r)
        if tuple(Q0.shape) != expected:
            raise ValueError(f"Q0: must have shape {expected} for rank {r}, got {tuple(Q0.shape)}")
        Q = Q0.clone().contiguous()
    every = max(1, steps // max(1, record_points))
    record_steps = list(range(0, steps, every))
    curve = torch.zeros(len(record_steps) + 1, dtype=STAT_DTYPE, device=Q.device)
    state = []
    if optimizer == "adam":
        state = [torch.zeros_like(Q), torch.zeros_like(Q)]
        b1, b2, eps = 0.9, 0.999, 1e-8

    def update(t: int, grad: torch.Tensor) -> None:
        if optimizer == "gd":
            Q.add_(grad, alpha=-lr)
            return
        m1, m2 = state
        m1.mul_(b1).add_(grad, alpha=1 - b1)
        m2.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        c1 = 1 - b1 ** (t + 1)
        c2 = 1 - b2 ** (t + 1)
        Q.addcdiv_(m1, (m2 / c2).sqrt_().add_(eps), value=-lr / c1)

    def finite(R: torch.Tensor) -> bool:
        # Q.sum() is finite iff every entry is, short of an overflow that only a diverged Q reaches
        return math.isfinite(float(R)) and math.isfinite(float(Q.sum()))

    def diverged(stop: int) -> SimulationDiverged:
        """Replay from the start, checking every step, for the first non-finite one (<= ``stop``)."""
        Q.copy_(Q_start)
        for s in state:
            s.zero_()
        first = stop
        for t in range(stop):
            R, grad = risk_and_grad(Q, batch, spec.lam, attention)
            if not finite(R):
                first = t
                break
            update(t, grad)
        return SimulationDiverged(problem.seed, problem.run_index, first,
                                  f" (d = {problem.d}, alpha = {problem.alpha:g}, init = {init}, "
                                  f"{optimizer} lr = {lr:g})")

    Q_start = Q.clone()
    t0 = time.perf_counter()
    j = 0
    with torch.inference_mode():
        for t in range(steps):
            record = t % every == 0
            R, grad = risk_and_grad(Q, batch, spec.lam, attention, need_loss=record)
            if record:
                if not finite(R):
                    raise diverged(t)
                curve[j] = R
                j += 1
                if progress and t:
                    progress(every)
            update(t, grad)
        R, grad = risk_and_grad(Q, batch, spec.lam, attention)
        if not finite(R):
            raise diverged(steps)
        if progress and steps:
            progress(steps - (len(record_steps) - 1) * every)
        curve[j] = R
        curve_cpu = (curve / problem.d).cpu().tolist()
        grad_norm = float(grad.norm()) / math.sqrt(problem.d)
    wall = time.perf_counter() - t0
    steps_rec = record_steps + [steps]
    return TrainResult(Q=Q, loss_curve=[[s, v] for s, v in zip(steps_rec, curve_cpu)], steps=steps,
                       grad_norm=grad_norm, wall_time=wall)


def overlaps(Q: torch.Tensor, problem: Problem) -> dict:
    """The order parameters of a student (docs/theory.md, section 4.1), float64 CPU tensors:
    ``q = sigma^2 Q^T Q/d`` (``r x r``), ``m`` (``k x r``, row ``a`` is ``e_a^T Q/sqrt(d)``)
    and ``theta = sigma^2 Q^T Q*/d`` (``r x t``)."""
    d, s2 = problem.d, problem.spec.sigma ** 2
    Q2 = _columns(Q).to(torch.float64)
    Qs = _columns(problem.Qstar).to(torch.float64)
    E = position_basis(d, problem.spec.k).to(Q2.device)
    return {"q": (s2 * (Q2.t() @ Q2) / d).cpu(),
            "m": ((E.t() @ Q2) / math.sqrt(d)).cpu(),
            "theta": (s2 * (Q2.t() @ Qs) / d).cpu()}


def summary_statistics(Q: torch.Tensor, problem: Problem) -> dict:
    """Flat scalar statistics of a student (docs/theory.md, sections 1.5 and 4.9).

    For every shape:

    * the invariants: ``q_eig_1 >= ... >= q_eig_r`` (eigenvalues of ``q``),
      ``m_sv_1 >= ...`` (the ``min(k, r)`` singular values of ``m``) and ``theta_sv_1 >= ...``
      (the ``min(r, t)`` singular values of ``theta``, with the ``sigma^2``);
    * per student column ``j``: ``|m|_j``, the norm of column ``j`` of ``m`` (over the
      ``k`` positional directions), and ``(theta/sigma^2)_j``, the norm of row ``j`` of
      ``theta/sigma^2`` (over the ``t`` teacher columns), i.e. ``|Q_j^T Q*|/d``; reported as
      their largest and smallest over the ``r`` columns (``m_col_max``, ``m_col_min``,
      ``theta_over_sigma2_col_max``, ``theta_over_sigma2_col_min``). For ``k = 1`` and
      ``t = 1`` these are the absolute overlaps of each column, as in the paper's
      appendix; they are not invariant under rotations of the columns of ``Q``.

    When ``r = t = k = 1`` also the overlaps of section 1.5, signed and absolute:
    ``m = mu_1.Q/d``, ``theta/sigma^2 = Q*.Q/d``, ``q = sigma^2|Q|^2/d``.
    """
    d, s2 = problem.d, problem.spec.sigma ** 2
    out = {}
    if problem.spec.shape[1:] == (1, 1, 1):
        Q64 = Q.to(torch.float64)
        m = float(Q64.sum()) / d
        th = float(problem.Qstar.to(torch.float64) @ Q64) / d
        q = s2 * float(Q64 @ Q64) / d
        out = {"m": abs(m), "theta_over_sigma2": abs(th), "q": q, "m_signed": m, "theta_over_sigma2_signed": th}
    o = overlaps(Q, problem)
    for j, v in enumerate(torch.linalg.eigvalsh(o["q"]).flip(0).tolist(), 1):
        out[f"q_eig_{j}"] = v
    for j, v in enumerate(torch.linalg.svdvals(o["m"]).tolist(), 1):
        out[f"m_sv_{j}"] = v
    for j, v in enumerate(torch.linalg.svdvals(o["theta"]).tolist(), 1):
        out[f"theta_sv_{j}"] = v
    m_col = o["m"].norm(dim=0)
    th_col = o["theta"].norm(dim=1) / s2
    out.update(m_col_max=float(m_col.max()), m_col_min=float(m_col.min()),
               theta_over_sigma2_col_max=float(th_col.max()), theta_over_sigma2_col_min=float(th_col.min()))
    return out


def test_error(Q: torch.Tensor, problem: Problem) -> float:
    """``E |Y - Yhat|_F^2 / (2d)`` estimated on the run's fresh test samples."""
    with torch.inference_mode():
        return float(per_sample_loss(Q, problem.test, student_attention(problem.spec)).mean())


def train_loss(Q: torch.Tensor, problem: Problem) -> float:
    """``R(Q) / d`` on the training set, ridge term included."""
    with torch.inference_mode():
        R, _ = risk_and_grad(Q, problem.train, problem.spec.lam, student_attention(problem.spec))
    return float(R) / problem.d


# --------------------------------------------------------------------------- linear baseline


def fit_linear_baseline(batch: Batch, ridge: float = LINEAR_RIDGE) -> torch.Tensor:
    """Closed-form ridge fit of ``Yhat = B X`` (docs/theory.md, section 1.7, linear positional baseline).

    Minimises ``sum_i |Y_i - B X_i|_F^2 / (2d) + (ridge/2) |B|_F^2`` (the normalisation of
    the attention risk), whose minimiser solves ``B (sum_i G_i / d + ridge I) = sum_i C_i / d``.
    """
    L = batch.L
    Gs = batch.G.sum(0) / batch.d + ridge * torch.eye(L, dtype=batch.G.dtype, device=batch.G.device)
    Cs = batch.C.sum(0) / batch.d
    return torch.linalg.solve(Gs, Cs, left=False)  # B Gs = Cs  (Gs symmetric)


def _linear_per_sample_loss(B: torch.Tensor, batch: Batch) -> torch.Tensor:
    if batch.L == 2:
        return _per_sample_loss(B[0, 0], B[0, 1], B[1, 0], B[1, 1], batch)
    S = B[:, :, None]
    return _per_sample_loss_general(S, _times_G(S, batch), batch)


def linear_risk_and_grad(B: torch.Tensor, batch: Batch, ridge: float = LINEAR_RIDGE):
    """The linear baseline's risk and its gradient in ``B`` (for checking the closed form)."""
    total = _linear_per_sample_loss(B, batch).sum() + 0.5 * ridge * (B * B).sum()
    grad = (B @ batch.G.sum(0) - batch.C.sum(0)) / batch.d + ridge * B
    return total, grad


def linear_test_error(B: torch.Tensor, batch: Batch) -> float:
    """Mean of ``|Y - B X|_F^2 / (2d)`` over the batch."""
    return float(_linear_per_sample_loss(B, batch).mean())


# --------------------------------------------------------------------------- runs


def run_one(spec: ModelSpec, d: int, alpha: float, init: str, seed: int = 0, run_index: int = 0,
            steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
            dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
            n_test: int = 10000, record_points: int = 200, progress: Optional[Callable[[int], None]] = None) -> dict:
    """One seeded run: draw, train, measure. Returns a JSON-ready record. ``progress``: see :func:`train`."""
    check_init(spec, init)
    device = choose_device(None) if device is None else device
    t0 = time.perf_counter()
    problem = make_problem(spec, d, alpha, seed, run_index, n_test, dtype, device)
    result = train(problem, init, steps, lr, optimizer, record_points, progress=progress)
    B = fit_linear_baseline(problem.train)
    record = {
        "run_index": run_index,
        "seed": seed,
        "n": problem.n,
        "test_error": test_error(result.Q, problem),
        "train_loss": train_loss(result.Q, problem),
        **summary_statistics(result.Q, problem),
        "linear_test_error": linear_test_error(B, problem.test),
        "final_grad_norm": result.grad_norm,
        "train_time": result.wall_time,
        "step_time": result.wall_time / max(1, steps),
        "wall_time": time.perf_counter() - t0,
        "loss_curve": result.loss_curve,
    }
    log.info("d=%d alpha=%g init=%s run %d: test %.6g train %.6g column |m| max %.4g theta/s2 max %.4g (%.1f s)",
             d, alpha, init, run_index, record["test_error"], record["train_loss"], record["m_col_max"],
             record["theta_over_sigma2_col_max"], record["wall_time"])
    return record


AGGREGATED = ("test_error", "train_loss", "m", "theta_over_sigma2", "q", "linear_test_error")
#: the statistics of :func:`summary_statistics` that exist for every shape (indexed or per column)
_SHAPE_STATISTIC = re.compile(r"(q_eig|m_sv|theta_sv)_\d+|(m|theta_over_sigma2)_col_(max|min)")


def aggregated_keys(run: dict) -> list:
    """The record keys :func:`aggregate` summarises, in record order after the overlaps of
    docs/theory.md, section 1.5 (those exist for ``r = t = k = 1`` only)."""
    fixed = [k for k in AGGREGATED + ("m_signed", "theta_over_sigma2_signed") if k in run]
    return fixed + [k for k in run if _SHAPE_STATISTIC.fullmatch(k)]


def aggregate(runs: list) -> dict:
    """Means and standard deviations (ddof=1; 0 for a single run) over runs, as flat
    ``<key>_mean`` and ``<key>_std`` scalars for every key of :func:`aggregated_keys`."""
    out = {}
    for key in aggregated_keys(runs[0]):
        vals = np.array([r[key] for r in runs], dtype=float)
        out[f"{key}_mean"] = float(vals.mean())
        out[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    return out


def simulate(spec: ModelSpec, d: int, alpha: float, init: str, seeds: int = 1, seed: int = 0,
             steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
             dtype: str = "float32", device: Optional[str] = None, n_test: int = 10000,
             record_points: int = 200, progress: Optional[Callable[[int], None]] = None) -> dict:
    """``seeds`` independent runs (run ``k`` seeded by ``SeedSequence(seed, spawn_key=(k,))``) and their
    aggregates. ``progress(n)``: told the steps taken, ``seeds * steps`` in all (:func:`train`)."""
    check_init(spec, init)
    if dtype not in DTYPES:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    dev = choose_device(device)
    torch_dtype = DTYPES[dtype]
    lr_used = DEFAULT_LR[optimizer] if lr is None else float(lr)
    t0 = time.perf_counter()
    runs = [run_one(spec, d, alpha, init, seed, k, steps, lr_used, optimizer, torch_dtype, dev, n_test, record_points,
                    progress) for k in range(seeds)]
    return {
        "model": spec.to_dict(),
        "d": d,
        "alpha": alpha,
        "n": runs[0]["n"],
        "init": init,
        "seeds": seeds,
        "seed": seed,
        "steps": steps,
        "lr": lr_used,
        "optimizer": optimizer,
        "dtype": dtype,
        "device": str(dev),
        "n_test": n_test,
        "linear_ridge": LINEAR_RIDGE,
        **aggregate(runs),
        "wall_time": time.perf_counter() - t0,
        "runs": runs,
    }

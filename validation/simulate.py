"""Finite-size simulations of the model of SPEC section 1, in torch.

The data generator, the tied rank-1 attention student, its training by
full-batch gradient descent (or Adam) and the closed-form linear positional
baseline.

Speed
-----
The per-sample loss (SPEC section 1)

    loss_i = |Y_i - S(h_i) X_i|_F^2 / (2d)
           = [tr(Y Y^T) - 2 tr(S X Y^T) + tr(S X X^T S^T)] / (2d)

depends on the data only through the ``L x L`` Gram statistics ``G = X X^T``,
``C = Y X^T`` and ``|Y|_F^2``, computed once per run (:class:`Batch`), and on
``Q`` only through ``h = X Q / sqrt(d)``. Its gradient is
``X^T g / sqrt(d) + lam Q`` with ``g = d loss / d h`` an ``n x L`` array. So a
step reads ``X`` (stored as one contiguous ``(n L) x d`` matrix) twice: one
matrix-vector product for ``h``, one for the gradient. Everything else works on
``n x L x L`` arrays, in float64 whatever the working dtype (cheap, and it
avoids cancellation in the loss, which is a difference of O(d) terms).

Seeding
-------
One integer ``seed`` determines everything. Run ``k`` of a call uses the numpy
``SeedSequence(seed, spawn_key=(k,))`` (the same child whatever the number of
runs), which spawns four independent streams: the teacher ``Q*``, the training
set, the test set and the random initialisation. (numpy's global state is never
used; bootstraps in :mod:`validation.statistics` take a ``numpy.random.Generator``
seeded from the same integer.) Each stream seeds a CPU
``torch.Generator``; data are drawn in float64 on the CPU and then cast and moved
to the device, so the data do not depend on the device or the working dtype,
and a fixed seed reproduces bit-identical results on the CPU.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Optional

import numpy as np
import torch

from derivations.spec import ModelSpec

from .run_settings import DEFAULT_LR, INITS, OPTIMIZERS  # noqa: F401  (part of this module's interface)

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64}
LINEAR_RIDGE = 1e-4
STAT_DTYPE = torch.float64  # dtype of the per-sample L x L statistics


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


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class Batch:
    """``n`` samples of ``L = 2`` tokens, stored for fast training (see the module docstring).

    X : ``(L n, d)`` contiguous, *token-major*: rows ``0..n-1`` are the first tokens
        ``x_{i,1}``, rows ``n..2n-1`` the second tokens, so that ``X Q`` splits into
        two contiguous columns ``h_1, h_2``. Working dtype.
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
        # columns used by the per-step code (float64, contiguous)
        self.g11, self.g12, self.g22 = G[:, 0, 0].contiguous(), G[:, 0, 1].contiguous(), G[:, 1, 1].contiguous()
        self.c11, self.c12 = C[:, 0, 0].contiguous(), C[:, 0, 1].contiguous()
        self.c21, self.c22 = C[:, 1, 0].contiguous(), C[:, 1, 1].contiguous()
        self.yy_sum = self.yy.sum()
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
    """``T = (1 - omega) softmax_rows(h* h*^T) + omega A`` for ``hstar`` of shape ``(n, L)`` (SPEC section 1)."""
    A = torch.tensor(spec.A, dtype=hstar.dtype, device=hstar.device)
    S = torch.softmax(hstar[:, :, None] * hstar[:, None, :], dim=-1)
    return (1.0 - spec.omega) * S + spec.omega * A


def sample_raw(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator):
    """Draw ``n`` samples of SPEC section 1 in float64 on the CPU.

    Returns ``(X, Y, Z)`` each of shape ``(n, L, d)``: ``x_l = mu_l/sqrt(d) + z_l`` with
    ``mu_1 = (1,...,1) = -mu_2``, ``z_l ~ N(0, sigma^2 I)``, ``Y = T Z`` with the teacher
    seeing only the semantic part, ``h*_l = z_l . Q* / sqrt(d)``.
    """
    L = spec.L
    Z = spec.sigma * torch.randn(n, L, d, generator=generator, dtype=torch.float64)
    Qs = Qstar.to(device="cpu", dtype=torch.float64)
    hstar = (Z @ Qs) / math.sqrt(d)
    T = teacher_matrix(hstar, spec)
    Y = T @ Z
    sign = torch.tensor([1.0, -1.0], dtype=torch.float64)  # mu_1 = ones, mu_2 = -mu_1
    X = Z + (sign / math.sqrt(d))[None, :, None]
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


def attention_matrix(h: torch.Tensor, kind: str) -> torch.Tensor:
    """Student attention ``S(h)`` for ``h`` of shape ``(n, L)``: the spec's nonlinearity of ``h h^T``."""
    logits = h[:, :, None] * h[:, None, :]
    if kind == "softmax":
        return torch.softmax(logits, dim=-1)
    if kind == "linear":
        return logits
    if kind == "sigmoid":
        return torch.sigmoid(logits)
    raise ValueError(f"unknown attention {kind!r}")


def _per_sample_loss(S11, S12, S21, S22, batch: Batch) -> torch.Tensor:
    """``|Y - S X|_F^2 / (2d)`` per sample from the Gram statistics (``S`` given entrywise)."""
    lin = S11 * batch.c11 + S12 * batch.c12 + S21 * batch.c21 + S22 * batch.c22
    quad = (S11 * S11 + S21 * S21) * batch.g11 + (S12 * S12 + S22 * S22) * batch.g22 \
        + 2.0 * (S11 * S12 + S21 * S22) * batch.g12
    return (batch.yy - 2.0 * lin + quad) / (2.0 * batch.d)


def _attention_entries(h1: torch.Tensor, h2: torch.Tensor, kind: str):
    """Entries ``S_11, S_12, S_21, S_22`` of the student attention for ``L = 2``."""
    if kind == "softmax":  # S_11 = sigmoid(h_1 (h_1 - h_2)), S_22 = sigmoid(h_2 (h_2 - h_1)) (SPEC section 2)
        diff = h1 - h2
        a = torch.sigmoid(h1 * diff)
        b = torch.sigmoid(-h2 * diff)
        return a, 1.0 - a, 1.0 - b, b
    h12 = h1 * h2
    if kind == "linear":
        return h1 * h1, h12, h12, h2 * h2
    if kind == "sigmoid":
        s12 = torch.sigmoid(h12)
        return torch.sigmoid(h1 * h1), s12, s12, torch.sigmoid(h2 * h2)
    raise ValueError(f"unknown attention {kind!r}")


def per_sample_loss(Q: torch.Tensor, batch: Batch, attention: str = "softmax") -> torch.Tensor:
    """SPEC section 1 per-sample loss ``sum_l |y_l - yhat_l|^2 / (2d)``, shape ``(n,)``, float64."""
    h = (batch.X @ Q).view(batch.L, batch.n).to(STAT_DTYPE) / math.sqrt(batch.d)
    return _per_sample_loss(*_attention_entries(h[0], h[1], attention), batch)


def loss_and_grad_h(h1: torch.Tensor, h2: torch.Tensor, batch: Batch, attention: str = "softmax",
                    need_loss: bool = True):
    """Summed loss ``sum_i loss_i`` (None unless ``need_loss``) and its gradient ``(g_1, g_2)`` in ``h``.

    With ``P = d loss / d S = (S G - C) / d`` and ``J = d loss / d logits`` (logits
    ``h h^T``), ``d loss / d h = (J + J^T) h``. For the softmax, row ``a`` of ``J`` is
    ``u_a (1, -1)`` with ``u_a = S_a1 S_a2 (P_a1 - P_a2)``, so
    ``g_1 = 2 u_1 h_1 + (u_2 - u_1) h_2`` and ``g_2 = (u_2 - u_1) h_1 - 2 u_2 h_2``.
    Everything is elementwise on length-``n`` columns: batched products of 2 x 2
    matrices (and a softmax over a length-2 axis) are orders of magnitude slower on the CPU.
    """
    S11, S12, S21, S22 = _attention_entries(h1, h2, attention)
    total = _per_sample_loss(S11, S12, S21, S22, batch).sum() if need_loss else None
    inv_d = 1.0 / batch.d
    if attention == "softmax":
        a, b = S11, S22
        u1 = (a * S12) * (batch.sm_E1 + a * batch.sm_F)
        u2 = (b * S21) * (batch.sm_E2 - b * batch.sm_F)
        k12 = u2 - u1
        g1 = (2.0 * u1 * h1 + k12 * h2) * inv_d
        g2 = (k12 * h1 - 2.0 * u2 * h2) * inv_d
        return total, g1, g2
    P11 = S11 * batch.g11 + S12 * batch.g12 - batch.c11
    P12 = S11 * batch.g12 + S12 * batch.g22 - batch.c12
    P21 = S21 * batch.g11 + S22 * batch.g12 - batch.c21
    P22 = S21 * batch.g12 + S22 * batch.g22 - batch.c22
    if attention == "sigmoid":
        P11, P12 = P11 * S11 * (1 - S11), P12 * S12 * (1 - S12)
        P21, P22 = P21 * S21 * (1 - S21), P22 * S22 * (1 - S22)
    k12 = P12 + P21
    g1 = (2.0 * P11 * h1 + k12 * h2) * inv_d
    g2 = (k12 * h1 + 2.0 * P22 * h2) * inv_d
    return total, g1, g2


def risk_and_grad(Q: torch.Tensor, batch: Batch, lam: float, attention: str = "softmax", need_loss: bool = True):
    """Empirical risk ``R(Q) = sum_i loss_i + lam/2 |Q|^2`` (float64 scalar; None unless
    ``need_loss``) and ``dR/dQ = X^T g / sqrt(d) + lam Q`` (dtype of ``Q``)."""
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


def risk_autograd(Q: torch.Tensor, X3: torch.Tensor, Y3: torch.Tensor, lam: float, attention: str = "softmax"):
    """Reference: the same risk written plainly over whole-batch ``(n, L, d)`` tensors (for autograd)."""
    d = X3.shape[-1]
    h = torch.einsum("nld,d->nl", X3, Q) / math.sqrt(d)
    S = attention_matrix(h, attention)
    Yhat = S @ X3
    return ((Y3 - Yhat) ** 2).sum() / (2 * d) + 0.5 * lam * (Q @ Q)


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
    spec.require_two_token_rank_one("the simulator")
    device = choose_device(None) if device is None else device
    n = int(round(alpha * d))
    if n < 1:
        raise ValueError(f"alpha * d = {alpha * d} gives no samples")
    ss_teacher, ss_train, ss_test, ss_init = run_seed_sequence(seed, run_index).spawn(4)
    g_teacher = _torch_generator(ss_teacher)
    Qstar = torch.randn(d, generator=g_teacher, dtype=torch.float64)
    train = make_batch(spec, d, n, Qstar, _torch_generator(ss_train), dtype, device)
    test = make_batch(spec, d, n_test, Qstar, _torch_generator(ss_test), dtype, device)
    return Problem(spec=spec, d=d, alpha=alpha, n=n, Qstar=Qstar.to(dtype=dtype, device=device),
                   train=train, test=test, init_seed=ss_init, seed=seed, run_index=run_index)


def initial_Q(problem: Problem, init: str) -> torch.Tensor:
    """SPEC section 1 initialisations: ``semantic`` Q = Q*, ``positional`` Q = mu_1/sqrt(d), ``random`` 0.1 N(0, I)."""
    d, Qs = problem.d, problem.Qstar
    if init == "semantic":
        return Qs.clone()
    if init == "positional":
        return torch.full((d,), 1.0 / math.sqrt(d), dtype=Qs.dtype, device=Qs.device)
    if init == "random":
        g = _torch_generator(problem.init_seed)  # its own stream: independent of n and of the data
        return (0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype=Qs.dtype, device=Qs.device)
    raise ValueError(f"unknown init {init!r}; choose from {', '.join(INITS)}")


@dataclasses.dataclass
class TrainResult:
    Q: torch.Tensor
    loss_curve: list  # [[step, R(Q)/d], ...]
    steps: int
    grad_norm: float  # |dR/dQ| / sqrt(d) at the end: how far from stationary GD stopped
    wall_time: float


def train(problem: Problem, init: str = "semantic", steps: int = 5000, lr: Optional[float] = None,
          optimizer: str = "gd", record_points: int = 200, Q0: Optional[torch.Tensor] = None) -> TrainResult:
    """Full-batch training of ``R(Q)`` (SPEC section 1): gradient descent, or Adam (betas 0.9/0.999, eps 1e-8).

    The loss curve records ``R(Q)/d`` at about ``record_points`` evenly spaced steps
    (the value at step ``t`` is the risk *before* update ``t``) and after the last step.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    lr = DEFAULT_LR[optimizer] if lr is None else float(lr)
    spec, batch = problem.spec, problem.train
    Q = (initial_Q(problem, init) if Q0 is None else Q0.clone()).contiguous()
    every = max(1, steps // max(1, record_points))
    record_steps = list(range(0, steps, every))
    curve = torch.zeros(len(record_steps) + 1, dtype=STAT_DTYPE, device=Q.device)
    if optimizer == "adam":
        m1 = torch.zeros_like(Q)
        m2 = torch.zeros_like(Q)
        b1, b2, eps = 0.9, 0.999, 1e-8
    t0 = time.perf_counter()
    j = 0
    with torch.inference_mode():
        for t in range(steps):
            record = t % every == 0
            R, grad = risk_and_grad(Q, batch, spec.lam, spec.attention, need_loss=record)
            if record:
                curve[j] = R
                j += 1
            if optimizer == "gd":
                Q.add_(grad, alpha=-lr)
            else:
                m1.mul_(b1).add_(grad, alpha=1 - b1)
                m2.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                c1 = 1 - b1 ** (t + 1)
                c2 = 1 - b2 ** (t + 1)
                Q.addcdiv_(m1, (m2 / c2).sqrt_().add_(eps), value=-lr / c1)
        R, grad = risk_and_grad(Q, batch, spec.lam, spec.attention)
        curve[j] = R
        curve_cpu = (curve / problem.d).cpu().tolist()
        grad_norm = float(grad.norm()) / math.sqrt(problem.d)
    wall = time.perf_counter() - t0
    steps_rec = record_steps + [steps]
    return TrainResult(Q=Q, loss_curve=[[s, v] for s, v in zip(steps_rec, curve_cpu)], steps=steps,
                       grad_norm=grad_norm, wall_time=wall)


def summary_statistics(Q: torch.Tensor, problem: Problem) -> dict:
    """SPEC section 1 overlaps, signed and absolute.

    ``m = mu_1.Q/d``, ``theta/sigma^2 = Q*.Q/d``, ``q = sigma^2|Q|^2/d``."""
    d, s2 = problem.d, problem.spec.sigma ** 2
    Q64 = Q.to(torch.float64)
    m = float(Q64.sum()) / d
    th = float(problem.Qstar.to(torch.float64) @ Q64) / d
    q = s2 * float(Q64 @ Q64) / d
    return {"m": abs(m), "theta_over_sigma2": abs(th), "q": q, "m_signed": m, "theta_over_sigma2_signed": th}


def test_error(Q: torch.Tensor, problem: Problem) -> float:
    """``E |Y - Yhat|_F^2 / (2d)`` estimated on the run's fresh test samples."""
    with torch.inference_mode():
        return float(per_sample_loss(Q, problem.test, problem.spec.attention).mean())


def train_loss(Q: torch.Tensor, problem: Problem) -> float:
    """``R(Q) / d`` on the training set, ridge term included."""
    with torch.inference_mode():
        R, _ = risk_and_grad(Q, problem.train, problem.spec.lam, problem.spec.attention)
    return float(R) / problem.d


# --------------------------------------------------------------------------- linear baseline


def fit_linear_baseline(batch: Batch, ridge: float = LINEAR_RIDGE) -> torch.Tensor:
    """Closed-form ridge fit of ``Yhat = B X`` (SPEC section 1, linear positional baseline).

    Minimises ``sum_i |Y_i - B X_i|_F^2 / (2d) + (ridge/2) |B|_F^2`` (the normalisation of
    the attention risk), whose minimiser solves ``B (sum_i G_i / d + ridge I) = sum_i C_i / d``.
    """
    L = batch.L
    Gs = batch.G.sum(0) / batch.d + ridge * torch.eye(L, dtype=batch.G.dtype, device=batch.G.device)
    Cs = batch.C.sum(0) / batch.d
    return torch.linalg.solve(Gs, Cs, left=False)  # B Gs = Cs  (Gs symmetric)


def linear_risk_and_grad(B: torch.Tensor, batch: Batch, ridge: float = LINEAR_RIDGE):
    """The linear baseline's risk and its gradient in ``B`` (for checking the closed form)."""
    total = _per_sample_loss(B[0, 0], B[0, 1], B[1, 0], B[1, 1], batch).sum() + 0.5 * ridge * (B * B).sum()
    grad = (B @ batch.G.sum(0) - batch.C.sum(0)) / batch.d + ridge * B
    return total, grad


def linear_test_error(B: torch.Tensor, batch: Batch) -> float:
    """Mean of ``|Y - B X|_F^2 / (2d)`` over the batch."""
    return float(_per_sample_loss(B[0, 0], B[0, 1], B[1, 0], B[1, 1], batch).mean())


# --------------------------------------------------------------------------- runs


def run_one(spec: ModelSpec, d: int, alpha: float, init: str, seed: int = 0, run_index: int = 0,
            steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
            dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
            n_test: int = 10000, record_points: int = 200) -> dict:
    """One seeded run: draw, train, measure. Returns a JSON-ready record."""
    device = choose_device(None) if device is None else device
    t0 = time.perf_counter()
    problem = make_problem(spec, d, alpha, seed, run_index, n_test, dtype, device)
    result = train(problem, init, steps, lr, optimizer, record_points)
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
    log.info("d=%d alpha=%g init=%s run %d: test %.6g train %.6g m %.4g theta/s2 %.4g (%.1f s)",
             d, alpha, init, run_index, record["test_error"], record["train_loss"], record["m"],
             record["theta_over_sigma2"], record["wall_time"])
    return record


AGGREGATED = ("test_error", "train_loss", "m", "theta_over_sigma2", "q", "linear_test_error")


def aggregate(runs: list) -> dict:
    """Means and standard deviations (ddof=1; 0 for a single run) over runs."""
    out = {}
    for key in AGGREGATED + ("m_signed", "theta_over_sigma2_signed"):
        vals = np.array([r[key] for r in runs], dtype=float)
        out[f"{key}_mean"] = float(vals.mean())
        out[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    return out


def simulate(spec: ModelSpec, d: int, alpha: float, init: str, seeds: int = 1, seed: int = 0,
             steps: int = 5000, lr: Optional[float] = None, optimizer: str = "gd",
             dtype: str = "float32", device: Optional[str] = None, n_test: int = 10000,
             record_points: int = 200, progress: bool = False) -> dict:
    """``seeds`` independent runs (run ``k`` seeded by ``SeedSequence(seed, spawn_key=(k,))``) and their aggregates."""
    dev = choose_device(device)
    torch_dtype = DTYPES[dtype]
    lr_used = DEFAULT_LR[optimizer] if lr is None else float(lr)
    t0 = time.perf_counter()
    iterator = range(seeds)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc=f"simulate d={d} alpha={alpha:g} {init}", unit="run", leave=False)
    runs = [run_one(spec, d, alpha, init, seed, k, steps, lr_used, optimizer, torch_dtype, dev, n_test, record_points)
            for k in iterator]
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

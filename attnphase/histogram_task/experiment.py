"""The histogram-task experiment (Cui, Behrens, Krzakala, Zdeborova 2024, section 1, Fig. 1).

A one-layer transformer reads a sequence of ``L`` tokens over an alphabet of ``T``
symbols and outputs, at each position, how many times that position's token occurs
in the sequence (``L + 1`` classes). Its single attention layer can be restricted so
that queries and keys see only the *semantic* part of the embedding (``only_sem``)
or only the *positional* part (``only_pos``); the values always see everything.
Both restricted models solve the task, with very different attention patterns.

Design
------
The embedding of token ``t`` at position ``i`` is the **concatenation**
``x_i = [E[t] | P[i]]`` of a semantic half (``d_model // 2`` features) and a
positional half (the rest). Queries and keys are ``Q = (x * m) W_Q^T`` and
``K = (x * m) W_K^T`` with a fixed 0/1 feature mask ``m`` (``only_sem``: ones on the
semantic half; ``only_pos``: ones on the positional half; ``both``: all ones). The
restriction is therefore exact, and the re-parameterisation into a ``both`` model is
exact too: ``(x * m) W^T = x (W diag(m))^T``, so zeroing the masked columns of
``W_Q`` and ``W_K`` and lifting the mask leaves the function unchanged
(:func:`reparameterise_to_both`).

Forward pass (one head, ``d_k = d_model``)::

    A   = softmax(Q K^T / sqrt(d_model))           # (L, L), rows sum to 1
    h   = LayerNorm(x + A V)                       # V = x W_V^T, residual
    y   = h + W_2 relu(W_1 h + b_1) + b_2          # MLP of width d_mlp, residual
    out = W_out y + b_out                          # logits over L + 1 classes

Training: cross-entropy averaged over all positions, Adam (lr 1e-3, betas 0.9/0.98).

Attention kind
--------------
:func:`attention_scores` measures, on held-out sequences, how much attention mass
moves when the tokens are resampled at fixed positions (``semantic_mass``, exactly 0
for ``only_pos``), how much moves when the positions are shuffled with the tokens
carried along (``positional_mass``, exactly 0 for ``only_sem``), and how strongly a
query attends to other occurrences of its own token (``same_token_boost``, 1 when
attention ignores token identity). Fractions of variance explained by positions or
by token pairs were tried first and discarded: the positional solution's attention
is nearly uniform, so its tiny variance made those fractions swing wildly.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from . import ATTENTION_KINDS

log = logging.getLogger(__name__)

SCORES = ("semantic_mass", "positional_mass", "same_token_boost")


# --------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class HistogramConfig:
    """Every setting of a histogram run; defaults are the full (paper) settings."""

    L: int = 10
    T: int = 15
    n_sequences: int = 50_000
    train_fraction: float = 0.7
    d_model: int = 64
    d_mlp: int = 128
    epochs: int = 20
    continue_epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    betas: tuple = (0.9, 0.98)
    n_score_sequences: int = 2000

    def validate(self) -> None:
        """Raise ``ValueError("name: message")`` on the first bad setting."""
        for name in ("L", "T", "n_sequences", "d_model", "d_mlp", "epochs", "batch_size", "n_score_sequences"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.continue_epochs < 0:
            raise ValueError(f"continue_epochs: must be >= 0, got {self.continue_epochs}")
        if self.d_model < 2:
            raise ValueError(f"d_model: must be >= 2 (semantic and positional halves), got {self.d_model}")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction: must be in (0, 1), got {self.train_fraction}")
        if not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if self.n_sequences > self.T ** self.L:
            raise ValueError(f"n_sequences: only {self.T ** self.L} distinct sequences exist, got {self.n_sequences}")


FULL = HistogramConfig()
# Reduced run for a 2-core laptop CPU: the same data, fewer epochs (docs/histogram.md has the timing).
QUICK = HistogramConfig(epochs=4, continue_epochs=1, n_score_sequences=1000)


def seed_everything(seed: int) -> None:
    """Seed python ``random``, numpy's global RNG and torch from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device(name: Optional[str] = None) -> torch.device:
    """``name`` if given, else ``cuda`` when available, else ``cpu``."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class HistogramData:
    """Sequences ``x`` (n, L) int64 in ``[0, T)`` and targets ``y`` (n, L) in ``[0, L]``."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    T: int
    L: int


def histogram_targets(x: np.ndarray) -> np.ndarray:
    """``y[s, i] = #{j : x[s, j] == x[s, i]}``, the count of position i's token."""
    x = np.asarray(x)
    return (x[:, :, None] == x[:, None, :]).sum(axis=2).astype(np.int64)


def sample_sequences(n: int, L: int, T: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct sequences, uniform over ``T**L`` and in random order.

    Duplicates are removed (keeping the first draw) and the set is topped up with
    fresh draws until it holds ``n`` distinct sequences.
    """
    if n > T ** L:
        raise ValueError(f"n_sequences: only {T ** L} distinct sequences exist, got {n}")
    out = np.empty((0, L), dtype=np.int64)
    while len(out) < n:
        draw = rng.integers(0, T, size=(max(n - len(out), 16) * 2, L), dtype=np.int64)
        pool = np.concatenate([out, draw])
        _, first = np.unique(pool, axis=0, return_index=True)
        out = pool[np.sort(first)]  # keeps the draw order, drops later duplicates
    return out[:n]


def make_dataset(cfg: HistogramConfig, seed: int) -> HistogramData:
    """The fixed dataset of a run: distinct sequences, split ``train_fraction`` / rest."""
    rng = np.random.default_rng(seed)
    x = sample_sequences(cfg.n_sequences, cfg.L, cfg.T, rng)
    y = histogram_targets(x)
    n_train = int(round(cfg.train_fraction * len(x)))
    return HistogramData(x[:n_train], y[:n_train], x[n_train:], y[n_train:], cfg.T, cfg.L)


# --------------------------------------------------------------------------- model


def feature_mask(kind: str, d_model: int) -> torch.Tensor:
    """The 0/1 mask over embedding features that queries and keys see."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention: must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
    d_sem = d_model // 2
    m = torch.ones(d_model)
    if kind == "only_sem":
        m[d_sem:] = 0.0
    elif kind == "only_pos":
        m[:d_sem] = 0.0
    return m


class HistogramTransformer(nn.Module):
    """One attention layer + layer norm + MLP + read-out (see the module docstring)."""

    def __init__(self, T: int, L: int, d_model: int = 64, d_mlp: int = 128, attention: str = "both"):
        super().__init__()
        self.T, self.L, self.d_model, self.d_mlp = T, L, d_model, d_mlp
        self.attention = attention
        d_sem = d_model // 2
        self.tok = nn.Embedding(T, d_sem)
        self.pos = nn.Embedding(L, d_model - d_sem)
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.ReLU(), nn.Linear(d_mlp, d_model))
        self.readout = nn.Linear(d_model, L + 1)
        self.register_buffer("qk_mask", feature_mask(attention, d_model))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        pos = self.pos.weight[: x.shape[1]].unsqueeze(0).expand(x.shape[0], -1, -1)
        return torch.cat([self.tok(x), pos], dim=-1)

    def attention_matrix(self, x: torch.Tensor, e: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Row-stochastic attention ``A`` of shape (batch, L, L)."""
        e = self.embed(x) if e is None else e
        qk_in = e * self.qk_mask
        scores = self.W_q(qk_in) @ self.W_k(qk_in).transpose(1, 2) / math.sqrt(self.d_model)
        return torch.softmax(scores, dim=-1)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        e = self.embed(x)
        a = self.attention_matrix(x, e)
        h = self.norm(e + a @ self.W_v(e))
        h = h + self.mlp(h)
        logits = self.readout(h)
        return (logits, a) if return_attention else logits


def reparameterise_to_both(model: HistogramTransformer) -> HistogramTransformer:
    """An unrestricted (``both``) model computing exactly the same function.

    ``(x * m) W^T = x (W diag(m))^T``: copy every parameter, zero the columns of
    ``W_Q`` and ``W_K`` that the mask hid, and lift the mask. The new model can then
    move those zero columns during further training.
    """
    new = HistogramTransformer(model.T, model.L, model.d_model, model.d_mlp, attention="both")
    new = new.to(next(model.parameters()).device)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    m = state.pop("qk_mask")
    state["W_q.weight"] = state["W_q.weight"] * m
    state["W_k.weight"] = state["W_k.weight"] * m
    state["qk_mask"] = torch.ones_like(m)
    new.load_state_dict(state)
    return new


# --------------------------------------------------------------------------- training


def _to_tensors(data: HistogramData, device: torch.device):
    t = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
    return t(data.x_train), t(data.y_train), t(data.x_val), t(data.y_val)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 4096) -> float:
    """Fraction of positions whose count is predicted exactly."""
    model.eval()
    correct = 0
    for s in range(0, len(x), batch):
        correct += (model(x[s:s + batch]).argmax(-1) == y[s:s + batch]).sum().item()
    return correct / y.numel()


def train(model: HistogramTransformer, data: HistogramData, epochs: int, cfg: HistogramConfig,
          device: torch.device, generator: torch.Generator, progress: Optional[bool] = None,
          desc: str = "") -> List[Dict[str, float]]:
    """Adam on mean cross-entropy; returns one history row per epoch.

    ``progress``: tqdm bar over epochs on stderr (``None``: only when stderr is a tty).
    """
    from tqdm.auto import tqdm

    xt, yt, xv, yv = _to_tensors(data, device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas))
    loss_fn = nn.CrossEntropyLoss()
    history = []
    bar = tqdm(range(epochs), desc=desc, unit="epoch", disable=None if progress is None else not progress,
               leave=False)
    for epoch in bar:
        model.train()
        perm = torch.randperm(len(xt), generator=generator).to(device)
        total, n = 0.0, 0
        for s in range(0, len(xt), cfg.batch_size):
            idx = perm[s:s + cfg.batch_size]
            logits = model(xt[idx])
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), yt[idx].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            n += len(idx)
        val = accuracy(model, xv, yv)
        history.append({"epoch": epoch + 1, "train_loss": total / n, "val_acc": val})
        bar.set_postfix(loss=f"{total / n:.4f}", val_acc=f"{val:.4f}")
        log.debug("%s epoch %d loss %.5f val_acc %.5f", desc, epoch + 1, total / n, val)
    bar.close()
    return history


# --------------------------------------------------------------------------- attention kind


@torch.no_grad()
def attention_scores(model: HistogramTransformer, x: np.ndarray, device: torch.device, seed: int = 0) -> Dict[str, float]:
    """What the attention depends on, on held-out sequences ``x`` (n, L) (module docstring).

    * ``semantic_mass``: attention mass that moves when the tokens are resampled at
      fixed positions, ``E 1/2 sum_j |A_ij(x) - A_ij(x')|`` averaged over queries ``i``,
      with ``x'`` another held-out sequence. Exactly 0 for ``only_pos``.
    * ``positional_mass``: attention mass that moves when the positions are shuffled
      with the tokens carried along, ``E 1/2 sum_j |A(x) - P^T A(P x) P|_ij``. Exactly 0
      for ``only_sem``.
    * ``same_token_boost``: attention mass on *other* positions holding the query's own
      token, divided by the mass the token-blind average attention ``E_x A(x)`` puts
      there. 1 means attention ignores whether a key matches the query; the semantic
      counting mechanism makes it large.
    """
    model.eval()
    x = np.asarray(x)
    n, L = x.shape
    rng = np.random.default_rng(seed)

    def attn(seqs: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(seqs, dtype=torch.long, device=device)
        return torch.cat([model.attention_matrix(t[s:s + 4096]) for s in range(0, n, 4096)]).double().cpu().numpy()

    a = attn(x)
    a_other = attn(np.roll(x, 1, axis=0))  # x' = the previous sequence
    perm = np.argsort(rng.random((n, L)), axis=1)
    a_perm = attn(np.take_along_axis(x, perm, axis=1))
    inv = np.argsort(perm, axis=1)
    a_back = np.take_along_axis(np.take_along_axis(a_perm, inv[:, :, None], axis=1), inv[:, None, :], axis=2)
    same = (x[:, :, None] == x[:, None, :]) & ~np.eye(L, dtype=bool)
    blind = (a.mean(axis=0)[None] * same).sum()
    return {"semantic_mass": float(0.5 * np.abs(a - a_other).sum(-1).mean()),
            "positional_mass": float(0.5 * np.abs(a - a_back).sum(-1).mean()),
            "same_token_boost": float((a * same).sum() / blind) if blind > 0 else float("nan")}


# --------------------------------------------------------------------------- experiments


def _mean_std(values: Sequence[float]) -> Dict[str, float]:
    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def run_one(kind: str, seed: int, data: HistogramData, cfg: HistogramConfig, device: torch.device,
            progress: Optional[bool] = None, reparam: bool = True):
    """Train one model (experiment 1) and, for a restricted kind, experiment 2.

    Returns ``(record, model, continued_model_or_None)``.
    """
    t0 = time.perf_counter()
    seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    model = HistogramTransformer(data.T, data.L, cfg.d_model, cfg.d_mlp, attention=kind).to(device)
    hist = train(model, data, cfg.epochs, cfg, device, gen, progress, desc=f"{kind} seed {seed}")
    score_x = data.x_val[: cfg.n_score_sequences]
    rec = {"seed": seed, "val_acc": hist[-1]["val_acc"], "train_loss": hist[-1]["train_loss"],
           "history": hist, **attention_scores(model, score_x, device)}
    log.info("%s seed %d: val_acc %.4f semantic mass %.3f positional mass %.3f boost %.2f", kind, seed,
             rec["val_acc"], rec["semantic_mass"], rec["positional_mass"], rec["same_token_boost"])
    cont = None
    if reparam and kind != "both":
        cont = reparameterise_to_both(model)
        xv = torch.as_tensor(data.x_val[:2048], dtype=torch.long, device=device)
        model.eval(), cont.eval()
        with torch.no_grad():
            diff = (model(xv) - cont(xv)).abs().max().item()
        acc0 = accuracy(cont, *[torch.as_tensor(a, dtype=torch.long, device=device) for a in (data.x_val, data.y_val)])
        hist2 = train(cont, data, cfg.continue_epochs, cfg, device, gen, progress, desc=f"{kind}->both seed {seed}")
        rec["reparam"] = {"max_abs_logit_diff": diff, "val_acc_at_reparam": acc0,
                          "val_acc_after": hist2[-1]["val_acc"] if hist2 else acc0,
                          "history": hist2, **{f"{k}_after": v for k, v in attention_scores(cont, score_x, device).items()}}
        rp = rec["reparam"]
        log.info("%s seed %d -> both: |dlogit| %.1e val_acc %.4f semantic mass %.3f positional mass %.3f "
                 "boost %.2f", kind, seed, diff, rp["val_acc_after"], rp["semantic_mass_after"],
                 rp["positional_mass_after"], rp["same_token_boost_after"])
    rec["wall_s"] = time.perf_counter() - t0
    return rec, model, cont


def summarise(kind: str, runs: List[dict]) -> dict:
    """One JSON record per model type: mean/std over seeds plus the per-seed runs."""
    acc = _mean_std([r["val_acc"] for r in runs])
    out = {"model": kind, "val_acc_mean": acc["mean"], "val_acc_std": acc["std"],
           "seeds": [r["seed"] for r in runs], "val_acc": [r["val_acc"] for r in runs],
           **{f"{m}_mean": _mean_std([r[m] for r in runs])["mean"] for m in SCORES},
           "wall_s": sum(r["wall_s"] for r in runs), "runs": runs}
    if runs and "reparam" in runs[0]:
        rp = [r["reparam"] for r in runs]
        after = _mean_std([r["val_acc_after"] for r in rp])
        out["reparam"] = {"max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in rp),
                          "val_acc_after_mean": after["mean"], "val_acc_after_std": after["std"],
                          **{f"{m}_after_mean": _mean_std([r[f"{m}_after"] for r in rp])["mean"] for m in SCORES}}
    return out


def run_experiment(cfg: HistogramConfig, kinds: Sequence[str] = ("only_sem", "only_pos"), n_seeds: int = 3,
                   seed: int = 0, device: Optional[torch.device] = None, progress: Optional[bool] = None,
                   n_examples: int = 4):
    """Experiments 1 and 2 for every kind and seed.

    The dataset is drawn once from ``seed``; run ``k`` is seeded with ``seed + 1 + k``.
    Returns ``(result_dict, examples)`` where ``examples`` maps a label to attention
    matrices (n_examples, L, L) on the first validation sequences (seed ``seed + 1``),
    with ``examples["tokens"]`` the sequences themselves.
    """
    cfg.validate()
    device = device or pick_device()
    t0 = time.perf_counter()
    data = make_dataset(cfg, seed)
    log.info("dataset: %d train, %d val sequences (L=%d, T=%d), device %s",
             len(data.x_train), len(data.x_val), cfg.L, cfg.T, device)
    ex_x = data.x_val[:n_examples]
    ex_t = torch.as_tensor(ex_x, dtype=torch.long, device=device)
    examples: Dict[str, np.ndarray] = {"tokens": ex_x}
    models = {}
    for kind in kinds:
        runs = []
        for k in range(n_seeds):
            rec, model, cont = run_one(kind, seed + 1 + k, data, cfg, device, progress)
            runs.append(rec)
            if k == 0:
                with torch.no_grad():
                    model.eval()
                    examples[kind] = model.attention_matrix(ex_t).cpu().numpy()
                    if cont is not None:
                        cont.eval()
                        examples[f"{kind}->both"] = cont.attention_matrix(ex_t).cpu().numpy()
        models[kind] = summarise(kind, runs)
    settings = dataclasses.asdict(cfg)
    settings["betas"] = list(cfg.betas)
    result = {"settings": settings, "n_seeds": n_seeds, "seed": seed, "device": str(device),
              "n_train": len(data.x_train), "n_val": len(data.x_val), "models": models,
              "wall_s": time.perf_counter() - t0}
    return result, examples


# --------------------------------------------------------------------------- figure


def save_examples(path, examples: Dict[str, np.ndarray]) -> None:
    """Write the example attention matrices (tidy data the plot reads)."""
    np.savez(path, **{k.replace("->", "_to_"): v for k, v in examples.items()})


def plot_attention(examples_path, out_png) -> None:
    """Attention matrices of each solution on a few example sequences (Fig. 1 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with np.load(examples_path) as f:
        ex = {k: f[k] for k in f.files}
    tokens = ex.pop("tokens")
    labels = [k for k in ("only_sem", "only_sem_to_both", "only_pos", "only_pos_to_both", "both") if k in ex]
    n = len(tokens)
    vmax = max(float(ex[lab].max()) for lab in labels)  # one colour scale: near-uniform rows look flat
    fig, axes = plt.subplots(len(labels), n, figsize=(2.6 * n, 2.6 * len(labels)), squeeze=False)
    for r, lab in enumerate(labels):
        for c in range(n):
            ax = axes[r, c]
            im = ax.imshow(ex[lab][c], vmin=0, vmax=vmax, cmap="viridis")
            ticks = [str(t) for t in tokens[c]]
            ax.set_xticks(range(len(ticks)), ticks, fontsize=6)
            ax.set_yticks(range(len(ticks)), ticks, fontsize=6)
            if c == 0:
                ax.set_ylabel(lab.replace("_to_", " -> "), fontsize=9)
    fig.suptitle("Histogram task: attention matrices (ticks = tokens; row = query; shared colour scale)",
                 fontsize=10)
    fig.tight_layout()
    fig.colorbar(im, ax=axes, shrink=0.6, label="attention weight")
    fig.savefig(out_png, dpi=120)
    plt.close(fig)

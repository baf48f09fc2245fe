"""Figure 10: the histogram task (docs/histogram.md): the test accuracy of the
positional-only and the semantic-only model against the published values, their
attention maps, and the training curves before and after the restriction is lifted."""
from __future__ import annotations

import json

import numpy as np

from tidyio import number

from ..tables import Data, key_number, published_rows, row, select
from . import FigureSpec
from .drawing import new_figure

NAME = "histogram"
KINDS = ("only_pos", "only_sem")
SCORES = ("semantic_mass", "positional_mass", "same_token_boost")
KIND_COLORS = {"only_pos": "tab:orange", "only_sem": "tab:blue"}


def title(plan) -> str:
    return "The histogram task: positional and semantic attention"


def what(plan) -> str:
    cfg = config(plan)
    epochs, after = cfg.epochs, cfg.continue_epochs
    return (f"A one-layer transformer counts each token's occurrences; its attention sees only the positional "
            f"(only_pos) or only the semantic (only_sem) part of the embedding ({plan.histogram_seeds} seeds; "
            f"{epochs} epochs restricted, then {after} with the restriction lifted; docs/histogram.md gives the "
            "settings). Left: test accuracy (mean and standard deviation over seeds) against the published values. "
            "Middle: validation accuracy per epoch, before and after the lift (the vertical line). Right: the "
            "attention matrices of the first seed on one held-out sequence, restricted and lifted.")


def config(plan):
    """The histogram task's settings of the plan (its changes to the full settings)."""
    import dataclasses

    from attnphase.histogram_task.experiment import FULL

    return dataclasses.replace(FULL, **plan.histogram)


def tasks(b) -> list:
    return b.histogram()


def table(data: Data, plan) -> list:
    out = published_rows(("test_accuracy",))
    for kind in KINDS:
        runs = data.histogram(kind)
        if not runs:
            continue
        for q, col in (("test_accuracy", "val_acc"), ("test_accuracy_after", "val_acc_after"),
                       *((s, s) for s in SCORES), *((f"{s}_after", f"{s}_after") for s in SCORES)):
            vals = np.array([number(r[col]) for r in runs])
            out.append(row("histogram", q, float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else np.nan,
                           model=kind, n=vals.size))
        for r in runs:
            first = json.loads(r["history"])
            after = json.loads(r["history_after"] or "[]")
            for i, h in enumerate(first + after, 1):
                out.append(row("curve", "val_acc", h["val_acc"], model=kind, run=int(r["run_index"]), epoch=i,
                               branch="restricted" if i <= len(first) else "lifted"))
        first_run = runs[0]
        if first_run.get("examples_attention"):
            tokens = json.loads(first_run["examples_tokens"])[0]
            for j, t in enumerate(tokens):
                out.append(row("attention", f"token_{j}", t, model=kind, run=0))
            for stage, col in (("restricted", "examples_attention"), ("lifted", "examples_attention_after")):
                if not first_run.get(col):
                    continue
                A = json.loads(first_run[col])[0]
                for i, line in enumerate(A):
                    for j, v in enumerate(line):
                        out.append(row("attention", f"attention_{i}_{j}", v, model=kind, branch=stage, run=0))
    return out


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    for kind in KINDS:
        r = select(rows, source="histogram", quantity="test_accuracy", model=kind)
        if not r:
            continue
        n = r[0]["n"]
        out.append(key_number(NAME, "test_accuracy", f"{kind}: test accuracy", number(r[0]["value"]),
                              number(r[0]["error"]), f"held-out sequences after {config(plan).epochs} epochs; mean "
                              f"and standard deviation over {n} seeds", model=kind, published_for={"quantity": "test_accuracy", "model": kind}))
        for q, label in (("test_accuracy_after", "test accuracy after the lift"),
                         ("semantic_mass", "semantic attention mass"), ("positional_mass", "positional attention mass"),
                         ("semantic_mass_after", "semantic attention mass after the lift"),
                         ("same_token_boost", "same-token boost")):
            s = select(rows, source="histogram", quantity=q, model=kind)
            if s:
                out.append(key_number(NAME, q, f"{kind}: {label}", number(s[0]["value"]), number(s[0]["error"]),
                                      f"mean and standard deviation over {n} seeds (docs/histogram.md)", model=kind))
    return out


def draw(rows: list):
    fig, axes = new_figure(1, 3, width=4.6, height=3.8)
    left, mid, right = axes[0]
    for i, kind in enumerate(KINDS):
        r = select(rows, source="histogram", quantity="test_accuracy", model=kind)
        if r:
            left.errorbar([i], [number(r[0]["value"])], yerr=[number(r[0]["error"]) if r[0]["error"] else 0.0],
                          fmt="o", color=KIND_COLORS[kind], capsize=4, label="ours" if i == 0 else None)
        p = select(rows, source="published", quantity="test_accuracy", model=kind)
        if p:
            left.errorbar([i + 0.15], [number(p[0]["value"])], yerr=[number(p[0]["error"])], fmt="s", mfc="none",
                          color="black", capsize=4, label="the paper" if i == 0 else None)
        for run in sorted({c["run"] for c in select(rows, source="curve", model=kind)}):
            c = sorted(select(rows, source="curve", model=kind, run=run), key=lambda x: number(x["epoch"]))
            mid.plot([number(x["epoch"]) for x in c], [number(x["value"]) for x in c], "-o", ms=3,
                     color=KIND_COLORS[kind], alpha=0.8, label=kind if run == "0" else None)
            restricted = [x for x in c if x["branch"] == "restricted"]
            if run == "0" and restricted and len(restricted) < len(c):
                mid.axvline(number(restricted[-1]["epoch"]) + 0.5, color="grey", lw=0.8)
    left.set_xticks(range(len(KINDS)), KINDS)
    left.set_xlim(-0.7, len(KINDS) - 0.3)
    left.set_ylabel("test accuracy")
    left.legend(fontsize=7)
    mid.set_xlabel("epoch")
    mid.set_ylabel("validation accuracy")
    mid.legend(fontsize=7)
    _attention_grid(fig, right, rows)
    fig.suptitle("Histogram task: accuracy, training curves and attention", fontsize=10)
    return fig


def _attention_grid(fig, ax, rows) -> None:
    """The four attention matrices (kind x restricted/lifted) side by side in one image."""
    blocks = []
    labels = []
    for kind in KINDS:
        for stage in ("restricted", "lifted"):
            sel = select(rows, source="attention", model=kind, branch=stage)
            if not sel:
                continue
            L = int(round(np.sqrt(len(sel))))
            A = np.full((L, L), np.nan)
            for r in sel:
                _, i, j = r["quantity"].split("_")
                A[int(i), int(j)] = number(r["value"])
            blocks.append(A)
            labels.append(f"{kind}, {stage}")
    ax.set_axis_off()
    if not blocks:
        return
    sub = ax.inset_axes([0, 0, 1, 1])
    sub.set_axis_off()
    gap = np.full((blocks[0].shape[0], 1), np.nan)
    image = np.concatenate(sum(([b, gap] for b in blocks), [])[:-1], axis=1)
    im = sub.imshow(image, cmap="viridis", vmin=0)
    step = blocks[0].shape[1] + 1
    for k, lab in enumerate(labels):
        sub.text(k * step + blocks[0].shape[1] / 2 - 0.5, -1.0, lab, ha="center", fontsize=6)
    fig.colorbar(im, ax=ax, shrink=0.6, label="attention weight")


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw)

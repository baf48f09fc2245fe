"""Task functions of the paper's plan that the lower packages do not already provide.

The branch curves, reference points and thresholds are :func:`attnphase.sweeps.tasks.theory_task`
and the gradient-descent runs :func:`attnphase.sweeps.tasks.simulation_run_task`; here are the
histogram task's run (:func:`histogram_run_task`), one model kind and seed per task, and one GAMP run
(:func:`gamp_run_task`).
"""
from __future__ import annotations

import dataclasses
import threading
import time

#: the plateau of a GAMP run that did not converge: its tracked invariant -> the row's column (for two
#: tokens and rank one they are |q|, |m| and |theta| of the iterate)
PLATEAU_COLUMNS = {"q_eigenvalues_1": "plateau_q", "m_singular_values_1": "plateau_m",
                   "theta_singular_values_1": "plateau_theta", "switched": "plateau_switched"}

#: example sequences whose attention matrices are kept (of the first validation sequences)
N_EXAMPLES = 4
#: the histogram task seeds torch's global generator (one per process): runs on threads of one
#: worker process take turns, so that a run's result depends on its seed alone
_GLOBAL_RNG = threading.Lock()


def histogram_run_task(payload: dict) -> dict:
    """One run of the histogram-task experiment (docs/histogram.md): train ``payload["kind"]``
    (``only_pos`` or ``only_sem``) with seed ``seed + 1 + run_index`` on the dataset of
    ``seed``, then lift the restriction and continue training. One row: the validation
    accuracy, the attention measures before and after, the per-epoch histories and, for
    the first run of a kind, the attention matrices on the first validation sequences
    (as JSON cells)."""
    import numpy as np
    import torch

    from attnphase.histogram_task import experiment as H

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = dataclasses.replace(H.FULL, **payload["config"])
    cfg.validate()
    device = torch.device("cpu")
    data = H.make_dataset(cfg, payload["seed"])
    run_seed = payload["seed"] + 1 + payload["run_index"]
    with _GLOBAL_RNG:
        rec, model, cont = H.run_one(payload["kind"], run_seed, data, cfg, device, progress=False)
    rp = rec.get("reparam", {})
    row = {"kind": payload["kind"], "run_index": payload["run_index"], "run_seed": run_seed,
           "n_train": len(data.x_train), "n_val": len(data.x_val), "val_acc": rec["val_acc"],
           "train_loss": rec["train_loss"], **{m: rec[m] for m in H.SCORES},
           "max_abs_logit_diff": rp.get("max_abs_logit_diff", float("nan")),
           "val_acc_at_reparam": rp.get("val_acc_at_reparam", float("nan")),
           "val_acc_after": rp.get("val_acc_after", float("nan")),
           **{f"{m}_after": rp.get(f"{m}_after", float("nan")) for m in H.SCORES},
           "history": rec["history"], "history_after": rp.get("history", [])}
    if payload["run_index"] == 0:
        x = torch.as_tensor(data.x_val[:N_EXAMPLES], dtype=torch.long, device=device)
        with torch.no_grad():
            model.eval()
            row["examples_tokens"] = np.asarray(data.x_val[:N_EXAMPLES]).tolist()
            row["examples_attention"] = model.attention_matrix(x).cpu().double().numpy().round(6).tolist()
            if cont is not None:
                cont.eval()
                row["examples_attention_after"] = cont.attention_matrix(x).cpu().double().numpy().round(6).tolist()
    row["run_wall_time"] = time.perf_counter() - t0
    return {"rows": [row]}


def gamp_run_task(payload: dict) -> dict:
    """One GAMP run (:func:`validation.gamp.gamp_run`, ``data="numpy"``): run ``run_index`` of ``seed``
    at ``d``, ``alpha`` from ``init``, with the damping schedule ``dampings``. One row, in the names of
    a gradient-descent run's record where they exist (:func:`validation.gamp.simulation_names`: ``q``,
    ``m``, ``theta_over_sigma2``, ``test_error``, ``train_loss``, ``q_eig_1``, ...) and GAMP's checks
    (``converged``, ``iterations``, ``damping``, ``risk_gradient_norm``, ...).

    A run that does not converge at any damping (:class:`validation.gamp.GampRunFailed`) is a row too:
    ``converged`` False, ``reason`` (the exception's message), and the mean and spread of the iterate's
    invariants over its last iterations as ``plateau_q``, ``plateau_m``, ``plateau_theta``,
    ``plateau_switched`` (each with ``_std``); it has no ``q``, ``m``, ... (no value is given as a
    fixed point's)."""
    from validation.gamp import GampRunFailed, gamp_run, simulation_names

    t0 = time.perf_counter()
    spec = payload["spec"]
    try:
        record = gamp_run(spec, payload["d"], payload["alpha"], payload["init"], seed=payload["seed"],
                          run_index=payload["run_index"], data="numpy", dtype=payload["dtype"],
                          n_test=payload["n_test"], dampings=payload["dampings"])
    except GampRunFailed as exc:
        row = {"run_index": payload["run_index"], "converged": False, "reason": str(exc),
               "iterations": len(exc.error.history),
               "damping": "", "risk_gradient_norm": ""}
        for name, column in PLATEAU_COLUMNS.items():
            if name in exc.plateau:
                row[column] = exc.plateau[name]["mean"]
                row[f"{column}_std"] = exc.plateau[name]["std"]
    else:
        row = {**simulation_names(record, spec), "reason": ""}
    row["alpha"], row["init"] = payload["alpha"], payload["init"]
    row["dampings"] = ";".join(format(float(x), "g") for x in payload["dampings"])
    row["run_wall_time"] = time.perf_counter() - t0
    return {"rows": [row]}

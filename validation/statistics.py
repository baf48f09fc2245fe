"""Theory against simulation, by statistics.

* :func:`compare_point` turns one :func:`validation.simulate.simulate` result into
  tidy rows ``(alpha, init, branch, quantity, sim_mean, sim_std, sim_sem, theory,
  theory_error, z, p_value)`` with ``z = (sim_mean - theory) / sqrt(sim_sem^2 +
  theory_error^2)``; :func:`failing` picks the rows whose ``|z|`` exceeds a tolerance.
  The two-token rank-one model is compared through its signed overlaps (below); any other
  model (docs/theory.md, section 4) through its invariants, run by run
  (:func:`compare_invariants`); :func:`compare` picks the one of the model.
* :func:`crossing_alpha` estimates where the semantic-start test error crosses the
  linear baseline, with a bootstrap over seeds.
* :func:`fit_finite_size` fits ``a + b/d`` to a finite-size scan.

The theory enters through a :class:`validation.theory_cache.Theory`.

Branch and sign conventions
---------------------------
The branch a start converged to is read from the simulation: ``semantic`` when
the mean ``|theta|/sigma^2`` exceeds the mean ``|m|``, ``positional`` otherwise,
``trivial`` when both are below ``TRIVIAL_CUT`` or below three times the overlap a
vector of the runs' norm has with ``Q*`` or ``mu_1`` by chance
(``sqrt(q / (sigma^2 d))``: at ``q = 0.45``, as linear attention's trivial point has,
that is 0.13 at ``d = 100``). The model is invariant under
``Q -> -Q``, so each run is first sign-fixed so that the branch's own order
parameter is positive (``theta`` on the semantic branch, ``m`` on the positional
one). The *other* parameter, whose theory value is 0, is then compared signed:
its distribution is symmetric about 0 (``Q* -> -Q*`` for ``theta``; the token swap
combined with the reflection of ``mu_1``, for ``m``, when ``A`` commutes with the
swap), whereas its absolute value has a positive ``O(1/sqrt(d))`` bias that would
make every z-score grow with the number of seeds.

The general model
-----------------
Each run is put on a branch of :data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES` by its invariants
(:func:`run_branch`): a student direction counts as semantic for each singular value of
``theta/sigma^2`` above the cut, as positional for each singular value of ``m`` above it,
with the cut of the rank-one rule (``TRIVIAL_CUT``, or three times the chance overlap of a
direction of norm ``sqrt(q_eig_1)`` with ``t`` teacher or ``k`` positional directions).
No semantic and no positional direction: ``trivial``; semantic only: ``semantic``;
positional only: ``positional``; both, in different directions (their counts add up to at
most ``r``): ``mixed``. A rank-one student with both overlaps is put on the branch of the
larger, as above. The runs of one point are grouped by branch and each group is compared
with the theory of its branch (runs from one start may end on different branches).
Invariants are unsigned: a singular value whose theory value is 0 is compared as it is,
and carries the positive ``O(d^{-1/2})`` bias of a norm.
"""
from __future__ import annotations

import logging
import math
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from derivations.spec import ModelSpec

from .theory_cache import INVARIANT_KEYS, OUTPUTS, QUANTITIES, Theory, invariant_point, theory_point


log = logging.getLogger(__name__)

TRIVIAL_CUT = 0.05
#: the columns of ``validate.csv`` and ``dscan.csv`` before and after the model's own
#: (:meth:`derivations.spec.ModelSpec.to_columns`)
STAT_FIELDS = ("d", "alpha", "init", "branch", "quantity", "n_seeds", "sim_mean", "sim_std", "sim_sem",
               "theory", "theory_error", "z", "p_value", "theory_converged", "theory_on_branch")
RUN_FIELDS = ("steps", "lr", "optimizer", "dtype", "seed", "n_test")
#: the same for message passing (``validate --method gamp``, :func:`validation.gamp.gamp_point`): its
#: damping schedule, the storage of ``X``, and how many of the point's runs converged and did not
GAMP_FIELDS = ("method", "damping", "runs_converged", "runs_not_converged", "dtype", "seed", "n_test")
#: the branch of the rows of a point none of whose GAMP runs converged (:func:`not_converged_rows`)
NOT_CONVERGED = "not_converged"


def csv_fields(spec: ModelSpec, method: str = "gd") -> tuple:
    """The columns of ``validate.csv``/``dscan.csv`` for runs of ``spec`` found by ``method`` (``gd``:
    the simulator's training, ``gamp``: message passing)."""
    return STAT_FIELDS + tuple(spec.to_columns()) + (GAMP_FIELDS if method == "gamp" else RUN_FIELDS)


# --------------------------------------------------------------------------- per-point comparison


def branch_of(result: dict) -> str:
    """The branch the runs of ``result`` converged to (see the module docstring)."""
    th = float(np.mean([r["theta_over_sigma2"] for r in result["runs"]]))
    m = float(np.mean([r["m"] for r in result["runs"]]))
    q = float(np.mean([r["q"] for r in result["runs"]]))
    chance = math.sqrt(q / (result["model"]["sigma"] ** 2 * result["d"]))
    if max(th, m) < max(TRIVIAL_CUT, 3 * chance):
        return "trivial"
    return "semantic" if th > m else "positional"


def sign_fixed(runs: Sequence[dict], branch: str) -> Dict[str, np.ndarray]:
    """Per-run values of each quantity, after fixing the sign of ``Q`` by the branch."""
    th = np.array([r["theta_over_sigma2_signed"] for r in runs])
    m = np.array([r["m_signed"] for r in runs])
    if branch == "semantic":
        s = np.where(th < 0, -1.0, 1.0)
    elif branch == "positional":
        s = np.where(m < 0, -1.0, 1.0)
    else:
        s = np.ones_like(th)
    out = {k: np.array([r[k] for r in runs], dtype=float) for k in ("test_error", "train_loss", "q")}
    out["theta_over_sigma2"] = s * th
    out["m"] = s * m
    return out


def stats_row(values: np.ndarray, theory: Optional[float], theory_error: float = 0.0) -> dict:
    """Mean, std (ddof 1), sem, ``z = (mean - theory)/sqrt(sem^2 + theory_error^2)`` and a two-sided
    t-test p-value (``k - 1`` degrees of freedom, the seeds')."""
    from scipy import stats as sps

    k = len(values)
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1)) if k > 1 else float("nan")
    sem = std / math.sqrt(k) if k > 1 else float("nan")
    z = p = float("nan")
    if theory is not None and math.isfinite(theory) and k > 1 and sem > 0:
        # without a stated theory error the z-score is the seed-only one, bit for bit
        scale = math.hypot(sem, theory_error) if theory_error else sem
        z = (mean - theory) / scale
        p = float(2 * sps.t.sf(abs(z), k - 1))
    return {"n_seeds": k, "sim_mean": mean, "sim_std": std, "sim_sem": sem,
            "theory": float("nan") if theory is None else float(theory),
            "theory_error": float(theory_error) if theory is not None else float("nan"), "z": z, "p_value": p}


def _context(result: dict) -> dict:
    if result.get("method") == "gamp":
        run = {"method": "gamp", "damping": ";".join(f"{g:g}" for g in result["damping"]),
               "runs_converged": len(result["runs"]), "runs_not_converged": len(result["not_converged"])}
    else:
        run = {"steps": result["steps"], "lr": result["lr"], "optimizer": result["optimizer"]}
    return {"d": result["d"], **result_spec(result).to_columns(), **run, "dtype": result["dtype"],
            "seed": result["seed"], "n_test": result["n_test"]}


def compare_point(result: dict, spec, theory: Optional[Theory], quantities: Iterable[str] = QUANTITIES) -> List[dict]:
    """Rows comparing one simulated point (``alpha``, ``init``) with the theory of its branch."""
    branch = branch_of(result)
    values = sign_fixed(result["runs"], branch)
    th = theory_point(theory, spec, result["alpha"], branch) if theory is not None else {}
    # no z-score against a solve that did not converge or left the branch: the branch
    # the simulation sits on has no theory counterpart there (see unmatched())
    usable = bool(th) and th["converged"] and th["on_branch"]
    rows = []
    for qty in quantities:
        row = {"alpha": result["alpha"], "init": result["init"], "branch": branch, "quantity": qty,
               **stats_row(values[qty], th.get(qty) if usable else None),
               "theory_converged": th.get("converged", ""),
               "theory_on_branch": th.get("on_branch", ""), "theory_present": th.get("present", "")}
        rows.append({**_context(result), **row})
    return rows


def run_branch(run: dict, spec: ModelSpec, d: int) -> str:
    """The branch one run of the general model ended on (module docstring, "The general model")."""
    _, r, t, k = spec.shape
    s2 = spec.sigma ** 2
    q = max(0.0, float(run.get("q_eig_1", 0.0)))
    unit = math.sqrt(q / (s2 * d))
    theta = [float(run[f"theta_sv_{j}"]) / s2 for j in range(1, min(r, t) + 1)]
    m = [float(run[f"m_sv_{j}"]) for j in range(1, min(r, k) + 1)]
    semantic = sum(x > max(TRIVIAL_CUT, 3 * unit * math.sqrt(t)) for x in theta)
    positional = sum(x > max(TRIVIAL_CUT, 3 * unit * math.sqrt(k)) for x in m)
    if semantic and positional:
        if semantic + positional <= r:
            return "mixed"
        return "semantic" if max(theta) > max(m) else "positional"
    return "semantic" if semantic else "positional" if positional else "trivial"


def invariant_quantities(run: dict) -> List[str]:
    """The quantities of a run compared with the theory's invariants: the invariants (in record
    order), then :data:`validation.theory_cache.OUTPUTS`."""
    prefixes = tuple(INVARIANT_KEYS.values())
    return [k for k in run if k.rsplit("_", 1)[0] in prefixes and k.rsplit("_", 1)[-1].isdigit()] + \
        list(OUTPUTS)


def branch_groups(result: dict) -> Dict[str, List[dict]]:
    """The runs of a general-model result grouped by :func:`run_branch`, in the order of
    :data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`."""
    from numerics.api import GENERAL_BRANCHES

    spec = result_spec(result)
    groups: Dict[str, List[dict]] = {}
    for run in result["runs"]:
        groups.setdefault(run_branch(run, spec, result["d"]), []).append(run)
    return {b: groups[b] for b in GENERAL_BRANCHES if b in groups}


def compare_invariants(result: dict, spec, theory: Optional[Theory]) -> List[dict]:
    """Rows comparing one simulated point of the general model with the theory's invariants
    (:func:`validation.theory_cache.invariant_point`): per branch the runs ended on
    (:func:`branch_groups`), per invariant and output, with the theory's stated error in the
    z-score. A branch the theory does not have at that alpha gives rows without a
    z-score and ``theory_on_branch`` False (see :func:`unmatched`)."""
    rows = []
    for branch, group in branch_groups(result).items():
        th = invariant_point(theory, spec, result["alpha"], branch) if theory is not None else None
        usable = th is not None and th["present"] and th["converged"]
        for qty in invariant_quantities(group[0]):
            values = np.array([run[qty] for run in group], dtype=float)
            theory_value = th["values"].get(qty) if usable else None
            row = {"alpha": result["alpha"], "init": result["init"], "branch": branch, "quantity": qty,
                   **stats_row(values, theory_value, th["errors"].get(qty, 0.0) if usable else 0.0),
                   "theory_converged": th["converged"] if th is not None and th["present"] else "",
                   "theory_on_branch": th["present"] if th is not None else ""}
            rows.append({**_context(result), **row})
    return rows


def signed_overlaps(spec) -> bool:
    """Whether ``spec`` is compared through its signed overlaps (the module docstring): where its theory
    records are the scalars ``q, m, V, theta`` (:class:`numerics.api.Method`), its runs are sign-fixed
    and read so; any other model through the invariants of its matrix overlaps."""
    from numerics.api import method

    return method(spec).signed_overlaps


def compare(result: dict, spec, theory: Optional[Theory]) -> List[dict]:
    """:func:`compare_point` for the two-token rank-one model (its signed overlaps, the module
    docstring), :func:`compare_invariants` otherwise; a GAMP point none of whose runs converged gives
    :func:`not_converged_rows` (one whose runs partly converged is compared through those)."""
    if not result["runs"]:
        return not_converged_rows(result, spec)
    if signed_overlaps(spec):
        return compare_point(result, spec, theory)
    return compare_invariants(result, spec, theory)


def not_converged_rows(result: dict, spec) -> List[dict]:
    """The rows of a GAMP point none of whose runs converged (:func:`validation.gamp.gamp_point`): one
    per quantity it would have had, on the branch :data:`NOT_CONVERGED`, with no runs (``n_seeds`` 0,
    ``runs_not_converged`` all of them) and so no mean and no z-score."""
    if signed_overlaps(spec):
        quantities = list(QUANTITIES)
    else:
        _, r, t, k = spec.shape
        quantities = ([f"q_eig_{j}" for j in range(1, r + 1)] + [f"m_sv_{j}" for j in range(1, min(r, k) + 1)]
                      + [f"theta_sv_{j}" for j in range(1, min(r, t) + 1)] + list(OUTPUTS))
    nan = float("nan")
    return [{**_context(result), "alpha": result["alpha"], "init": result["init"], "branch": NOT_CONVERGED,
             "quantity": qty, "n_seeds": 0, "sim_mean": nan, "sim_std": nan, "sim_sem": nan, "theory": nan,
             "theory_error": nan, "z": nan, "p_value": nan, "theory_converged": "", "theory_on_branch": ""}
            for qty in quantities]


def not_converged(results: Iterable[dict]) -> List[dict]:
    """The GAMP points with runs that did not converge (one entry per point): how many of how many, and
    each such run's reason."""
    out = []
    for res in results:
        if res.get("not_converged"):
            out.append({"d": res["d"], "alpha": res["alpha"], "init": res["init"], "runs": res["seeds"],
                        "not_converged": len(res["not_converged"]),
                        "reasons": [f["reason"] for f in res["not_converged"]]})
    return out


def linear_theory(theory: Optional[Theory], spec) -> Optional[float]:
    """The linear baseline's theory test error, or None: no theory, or none for this model (the
    baseline's quadrature covers the models it covers; ``validate`` reports the rows without it)."""
    from derivations.spec import ModelSpecError

    if theory is None:
        return None
    try:
        return float(theory.linear_baseline(spec).test_error)
    except ModelSpecError as exc:
        log.info("no linear-baseline theory for this model: %s", exc)
        return None


def linear_rows(result: dict, theory: Optional[Theory]) -> List[dict]:
    """The linear baseline's test error at one point (its data are shared by all starts of a seed), on
    every run's data set, those of GAMP runs that did not converge included."""
    vals = np.array([r["linear_test_error"] for r in result["runs"] + result.get("not_converged", [])])
    th = linear_theory(theory, result_spec(result))
    row = {"alpha": result["alpha"], "init": "linear", "branch": "linear", "quantity": "test_error",
           **stats_row(vals, th), "theory_converged": True if th is not None else ""}
    return [{**_context(result), **row}]


def result_spec(result: dict) -> ModelSpec:
    """The model of a simulation result (its ``model`` entry, :meth:`ModelSpec.to_dict`)."""
    model = {k: v for k, v in result["model"].items() if k != "rho"}
    return ModelSpec(**model)


def unmatched(rows: Sequence[dict]) -> List[dict]:
    """Simulated points whose branch has no converged theory solution (one entry per point)."""
    seen, out = set(), []
    for r in rows:
        key = (r["d"], r["alpha"], r["init"])
        bad = r.get("theory_converged") is False or r.get("theory_on_branch") is False
        if bad and key not in seen:
            seen.add(key)
            out.append({"d": r["d"], "alpha": r["alpha"], "init": r["init"], "branch": r["branch"],
                        "theory_converged": r["theory_converged"], "theory_on_branch": r["theory_on_branch"],
                        "theory_present": r.get("theory_present", "")})
    return out


def failing(rows: Sequence[dict], tolerance: float) -> List[dict]:
    """Rows with ``|z| > tolerance`` (rows without a z-score never fail)."""
    return [r for r in rows if isinstance(r.get("z"), float) and math.isfinite(r["z"]) and abs(r["z"]) > tolerance]


def final_loss_fall(run: dict, fraction: float = 0.1) -> float:
    """How far from flat a run's training loss was at the end: the fall of ``R/d`` over the last
    ``fraction`` of the steps (its recorded loss curve), relative to the final value."""
    curve = run["loss_curve"]
    tail = [v for s, v in curve if s >= (1 - fraction) * curve[-1][0]]
    return (tail[0] - tail[-1]) / abs(tail[-1])


# --------------------------------------------------------------------------- threshold from simulation


def crossing_alpha(alphas: Sequence[float], test: Sequence[np.ndarray], linear: Sequence[np.ndarray],
                   n_boot: int = 2000, rng: Optional[np.random.Generator] = None, paired: bool = True) -> dict:
    """Where ``mean(test - linear)`` changes sign from + to -, by linear interpolation in alpha.

    ``test[i]`` and ``linear[i]`` are per-seed values at ``alphas[i]``, paired by seed
    (a seed's linear baseline is fitted on the same training set). The error bar is the
    standard deviation over ``n_boot`` bootstrap resamples of the seeds. Run ``k`` at
    every alpha shares its teacher and a prefix of its data (same seed), so by default
    (``paired``, when every alpha has the same number of runs) one resample of the run
    indices is applied to all alphas; otherwise seeds are resampled independently per
    alpha. ``no_crossing_fraction`` counts resamples without a crossing.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    order = np.argsort(alphas)
    a = np.asarray(alphas, dtype=float)[order]
    diffs = [np.asarray(test[i], float) - np.asarray(linear[i], float) for i in order]

    def cross(means):
        for i in range(len(a) - 1):
            if means[i] > 0 >= means[i + 1]:
                return a[i] + (a[i + 1] - a[i]) * means[i] / (means[i] - means[i + 1])
        return float("nan")

    estimate = cross([x.mean() for x in diffs])
    paired = paired and len({len(x) for x in diffs}) == 1

    def resample():
        if paired:
            idx = rng.integers(0, len(diffs[0]), len(diffs[0]))
            return [x[idx].mean() for x in diffs]
        return [x[rng.integers(0, len(x), len(x))].mean() for x in diffs]

    boots = np.array([cross(resample()) for _ in range(n_boot)])
    ok = boots[np.isfinite(boots)]
    return {"alpha_cross": float(estimate),
            "alpha_cross_std": float(ok.std(ddof=1)) if len(ok) > 1 else float("nan"),
            "alpha_cross_p16": float(np.percentile(ok, 16)) if len(ok) else float("nan"),
            "alpha_cross_p84": float(np.percentile(ok, 84)) if len(ok) else float("nan"),
            "no_crossing_fraction": float(1 - len(ok) / n_boot), "n_boot": n_boot, "paired": paired,
            "alphas": [float(x) for x in a], "diff_mean": [float(x.mean()) for x in diffs]}


# --------------------------------------------------------------------------- d-scan fit


def fit_finite_size(ds: Sequence[float], means: Sequence[float], sems: Sequence[float]) -> dict:
    """Weighted least squares ``y = a + b/d`` (weights ``1/sem^2``).

    ``a_se`` is the standard error from the stated sems; ``chi2_dof`` measures
    whether the sems explain the scatter about the fit, and ``a_se_scaled`` is
    ``a_se * sqrt(max(1, chi2_dof))``, the honest error bar when they do not.
    """
    x = 1.0 / np.asarray(ds, float)
    y = np.asarray(means, float)
    s = np.asarray(sems, float)
    w = 1.0 / s ** 2
    M = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(M.T @ (M * w[:, None]))
    a, b = cov @ (M.T @ (w * y))
    resid = y - (a + b * x)
    dof = max(1, len(x) - 2)
    chi2 = float(np.sum(w * resid ** 2))
    a_se = float(math.sqrt(cov[0, 0]))
    return {"a": float(a), "b": float(b), "a_se": a_se, "b_se": float(math.sqrt(cov[1, 1])),
            "chi2_dof": chi2 / dof, "a_se_scaled": a_se * math.sqrt(max(1.0, chi2 / dof))}

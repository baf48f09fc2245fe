"""The paper authors' stored fixed points (``authors_data/theory/``, their README says what they
are) and their comparison with ours, field by field.

Their files name the branch by suffix: none = semantic, ``_para`` = positional, ``_agno`` = trivial,
``_Aalt`` = the second positional matrix. Their ``mse`` is twice the test error that both our
theory and their own gradient descent report (at ``omega = 0.3``, ``alpha = 2``: 0.002793 on the
semantic branch, against our 0.001408 and their runs' 0.001443), so ``mse / 2`` is set beside our
test error; their ``Phi`` is minus our training loss (-0.003599 against our 0.003588 there).
"""
from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path
from typing import Optional, Sequence

from derivations import ModelSpec

from .plan import SECOND_A

DATA = Path(__file__).resolve().parent / "authors_data" / "theory"
SOURCE = ("the authors' stored fixed point (their solver: a degree-7 cubature iterated to 1e-4; no stated "
          "error)")
BRANCH_OF_SUFFIX = {"": "semantic", "_para": "positional", "_agno": "trivial"}
#: (our field, their column, the factor that puts theirs on our scale)
FIELDS = (("q", "q", 1.0), ("m", "m", 1.0), ("V", "V", 1.0), ("theta", "theta", 1.0), ("test_error", "mse", 0.5),
          ("train_loss", "Phi", -1.0))
#: the fields that are zero on a branch by symmetry (theirs to their tolerance): not compared
ZERO_ON = {"semantic": ("m",), "positional": ("theta",), "trivial": ("m", "theta")}
NAME = re.compile(r"repl_softmax_Mixed_sig(?P<sigma>[\d.]+)_lamb(?P<lam>[\d.]+)_omega(?P<omega>[\d.]+)"
                  r"(?P<branch>_para|_agno)?(?P<alt>_Aalt)?\.csv$")
#: the authors' defining overlap counts as present above this (theirs are iterated to 1e-4)
PRESENT = 1e-3


@dataclasses.dataclass(frozen=True)
class AuthorsFile:
    """One of the authors' files: its name, the branch and the model it holds, its rows (each
    column as a float) in ``alpha`` order."""

    name: str
    branch: str
    spec: ModelSpec
    rows: tuple

    @property
    def alphas(self) -> tuple:
        return tuple(r["alpha"] for r in self.rows)


def read(path: Path) -> AuthorsFile:
    g = NAME.search(path.name)
    if g is None:
        raise ValueError(f"not an authors' theory file name: {path.name}")
    spec = ModelSpec(sigma=float(g["sigma"]), lam=float(g["lam"]), omega=float(g["omega"]),
                     A=SECOND_A if g["alt"] else None)
    with path.open(newline="") as f:
        rows = [{k: float(v) for k, v in r.items() if k} for r in csv.DictReader(f)]
    return AuthorsFile(path.name, BRANCH_OF_SUFFIX[g["branch"] or ""], spec,
                       tuple(sorted(rows, key=lambda r: r["alpha"])))


def files(folder: Path = DATA) -> tuple:
    return tuple(read(p) for p in sorted(folder.glob("*.csv")))


def files_of(spec: ModelSpec, folder: Path = DATA) -> tuple:
    """The authors' files of this model (every branch they stored)."""
    return tuple(f for f in files(folder) if f.spec == spec)


def on_branch(row: dict, branch: str, sigma: float) -> bool:
    """The authors' point lies on the branch its file names (its defining overlap above
    :data:`PRESENT`, the other one below)."""
    sem, pos = abs(row["theta"]) / sigma**2 > PRESENT, abs(row["m"]) > PRESENT
    return {"semantic": sem and not pos, "positional": pos and not sem, "trivial": not sem and not pos}[branch]


def compare(authors: AuthorsFile, ours: dict) -> list:
    """One record per ``alpha`` of the file and compared field: ``ours`` maps an ``alpha`` to our
    point there (a dict of values and ``<field>_error``; absent where our branch is not found).
    ``difference = ours - theirs``, ``in_our_errors`` = difference / our error (NaN where we state
    no error), ``their_point_on_branch``: False where their point lies on another branch than
    their file names."""
    out = []
    for r in authors.rows:
        p = _nearest(ours, r["alpha"])
        on = on_branch(r, authors.branch, authors.spec.sigma)
        for field, column, factor in FIELDS:
            if field in ZERO_ON[authors.branch]:
                continue
            theirs = r[column] * factor
            value = float(p[field]) if p is not None else math.nan
            err = float(p.get(f"{field}_error", math.nan)) if p is not None else math.nan
            diff = value - theirs
            out.append({"file": authors.name, "branch": authors.branch, "alpha": r["alpha"], "field": field,
                        "ours": value, "ours_error": err, "theirs": theirs, "difference": diff,
                        "relative": diff / abs(theirs) if theirs else math.nan,
                        "in_our_errors": diff / err if err > 0 else math.nan, "their_point_on_branch": on})
    return out


def _nearest(ours: dict, alpha: float) -> Optional[dict]:
    for a, p in ours.items():
        if abs(a - alpha) <= 1e-9 * max(1.0, abs(alpha)):
            return p
    return None


def worst(records: Sequence[dict]) -> dict:
    """Per field, over the records whose point is on its branch and ours found: the largest
    relative difference and the largest |difference| in our errors."""
    out = {}
    for field, _, _ in FIELDS:
        sel = [r for r in records if r["field"] == field and r["their_point_on_branch"] and math.isfinite(r["ours"])]
        if sel:
            rel = max(sel, key=lambda r: abs(r["relative"]) if math.isfinite(r["relative"]) else -1.0)
            z = [abs(r["in_our_errors"]) for r in sel if math.isfinite(r["in_our_errors"])]
            out[field] = {"relative": rel["relative"], "alpha": rel["alpha"], "in_our_errors": max(z) if z else math.nan}
    return out


# --------------------------------------------------------------------------- their rank-two gradient descent

EMPIRICS = Path(__file__).resolve().parent / "authors_data" / "empirics"
#: their runs per row of the rank-two table, and their dimension (their training loss is ``R``, ours ``R / d``)
RANK_TWO_RUNS, THEIR_D = 10, 1000
#: (our quantity, their column) of the rank-two table
RANK_TWO_COLUMNS = (("m_col_max", "attention_mag_max"), ("m_col_min", "attention_mag_min"),
                    ("theta_over_sigma2_col_max", "attention_thet_max"),
                    ("theta_over_sigma2_col_min", "attention_thet_min"), ("test_error", "attention_gen_error_mean"),
                    ("train_loss", "attention_train_error_mean"), ("linear_test_error", "linear_gen_error_mean"))
#: the invariants under rotations of the student's columns, as the norm of the two columns' values
INVARIANT_OF_COLUMNS = (("m_sv_1", "m_col_max", "m_col_min"),
                        ("theta_sv_1_over_sigma2", "theta_over_sigma2_col_max", "theta_over_sigma2_col_min"))


def column_invariant(means: Sequence[float], stds: Sequence[float], runs: int) -> tuple:
    """The root mean square over runs of the norm of the columns' values (for a rank-one teacher and
    one positional direction, the singular value of ``m`` or of ``theta / sigma^2``), from each
    column's mean and standard deviation over ``runs`` runs (ddof = 1): ``sqrt(sum_j (mean_j^2 +
    (runs - 1) / runs std_j^2))``; its error from the means' standard errors (delta method)."""
    square = sum(m * m + (runs - 1) / runs * s * s for m, s in zip(means, stds))
    value = math.sqrt(square)
    error = math.sqrt(sum((m * s / math.sqrt(runs)) ** 2 for m, s in zip(means, stds))) / value if value else math.nan
    return value, error


def rank_two_gd(folder: Path = EMPIRICS) -> list:
    """Their rank-two runs at ``omega = 0.3``: per ``alpha`` a dict of ``quantity -> (mean, standard
    error)`` on our scale, the column invariants (:func:`column_invariant`) included."""
    def load(kind):
        with (folder / f"results_{kind}_r=2_omega0.3.csv").open(newline="") as f:
            return {float(r["alpha"]): r for r in csv.DictReader(f)}

    mean, std = load("mean"), load("std")
    out = []
    for alpha in sorted(mean):
        m, s = mean[alpha], std[alpha]
        values = {}
        for ours, theirs in RANK_TWO_COLUMNS:
            scale = 1.0 / THEIR_D if ours == "train_loss" else 1.0
            values[ours] = (float(m[theirs]) * scale, float(s[theirs]) * scale / math.sqrt(RANK_TWO_RUNS))
        for name, hi, lo in INVARIANT_OF_COLUMNS:
            theirs = dict(RANK_TWO_COLUMNS)
            values[name] = column_invariant([float(m[theirs[hi]]), float(m[theirs[lo]])],
                                            [float(s[theirs[hi]]), float(s[theirs[lo]])], RANK_TWO_RUNS)
        out.append({"alpha": alpha, "omega": float(m["omega"]), "d": int(float(m["d"])), "values": values})
    return out


def _first_fall(alphas: Sequence[float], values: Sequence[float]) -> float:
    """Where ``values`` first falls from above zero to zero or below, by linear interpolation
    (NaN where it does not)."""
    for a0, a1, v0, v1 in zip(alphas, alphas[1:], values, values[1:]):
        if v0 > 0 >= v1:
            return float(a0 + (a1 - a0) * v0 / (v0 - v1))
    return math.nan


def stored_thresholds(files: Sequence[AuthorsFile], baseline: float) -> dict:
    """The thresholds that the authors' own stored points give (linear interpolation between their
    ``alpha`` values): ``alpha_c``, where the semantic branch's training loss (``-Phi``) falls below
    the positional one's, and ``alpha_l``, where the semantic test error (``mse / 2``) falls below
    ``baseline``. NaN where the files do not hold both branches or the crossing."""
    by_branch = {f.branch: f for f in files}
    out = {"alpha_c": math.nan, "alpha_l": math.nan}
    sem, pos = by_branch.get("semantic"), by_branch.get("positional")
    if sem is not None and pos is not None:
        at = {r["alpha"]: r for r in pos.rows}
        shared = [r for r in sem.rows if r["alpha"] in at]
        out["alpha_c"] = _first_fall([r["alpha"] for r in shared], [at[r["alpha"]]["Phi"] - r["Phi"] for r in shared])
    if sem is not None and math.isfinite(baseline):
        out["alpha_l"] = _first_fall([r["alpha"] for r in sem.rows], [r["mse"] / 2 - baseline for r in sem.rows])
    return out

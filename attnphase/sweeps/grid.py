"""Grid values and task keys of a sweep.

Grid values are rounded to 12 significant digits (:func:`fmt`), so that ``0:0.45:10``
gives ``0.15``, not ``0.15000000000000002``, in the files and the task keys.
"""
from __future__ import annotations

from typing import Sequence


def fmt(x: float) -> str:
    """The canonical text of a grid value (12 significant digits): used in task keys."""
    return format(float(x), ".12g")


def grid_text(values: Sequence[float]) -> str:
    """A compact text for a grid: ``START:STOP:N`` when evenly spaced, else comma-separated."""
    values = list(values)
    if len(values) == 1:
        return fmt(values[0])
    n = len(values)
    even = [float(fmt(values[0] + (values[-1] - values[0]) * i / (n - 1))) for i in range(n)]
    if even == values:
        return f"{fmt(values[0])}:{fmt(values[-1])}:{n}"
    return ",".join(fmt(v) for v in values)


def theory_key(omega: float, job: str) -> str:
    """``theory:omega=W:branch=B`` for a branch, ``theory:omega=W:thresholds`` for the thresholds."""
    return f"theory:omega={fmt(omega)}:" + (job if job == "thresholds" else f"branch={job}")


def simulation_key(omega: float, alpha: float, init: str, run_index: int) -> str:
    return f"simulation:omega={fmt(omega)}:alpha={fmt(alpha)}:init={init}:run={run_index}"

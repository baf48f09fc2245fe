"""Values of the cells of the CSVs this package writes (``numerics.phase``), read back
as text or given as the values themselves: shared by the figures drawn from a CSV and
the thresholds bracketed by a phase diagram's branch rows."""
from __future__ import annotations

import math


def number(cell) -> float:
    """A cell as a float; an empty or non-numeric cell is NaN."""
    if cell is None or cell == "":
        return math.nan
    try:
        return float(cell)
    except ValueError:
        return math.nan


def is_true(cell) -> bool:
    """A boolean cell (``True`` as written by the CSV writer, or a bool)."""
    return str(cell).strip().lower() in ("true", "1", "yes")

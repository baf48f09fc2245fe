"""Tidy data: the cells of the CSV files written here, reading such files back, and
numpy values in JSON.

A cell is read back as text (from a CSV) or given as the value itself (a row still in
memory); :func:`number` and :func:`is_true` read both, so that a row gives the same
result whether it was just computed or read back from a file.
"""
from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path


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


def complete_text(path) -> tuple:
    """The file's text up to its last newline, and whether a partial line followed (an
    interrupted write); ``("", False)`` for a missing file."""
    path = Path(path)
    if not path.exists():
        return "", False
    text = path.read_text(encoding="utf-8", errors="replace")
    cut = text.rfind("\n") + 1
    return text[:cut], cut != len(text)


def read_csv_rows(path) -> tuple:
    """``(header, rows)`` of a CSV, rows as dicts of strings; a trailing partial line is ignored."""
    text, _ = complete_text(path)
    if not text:
        return [], []
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    rows = [dict(zip(header, r)) for r in reader if r]
    return header, rows


def read_rows(path) -> list:
    """The rows of a CSV as dicts of strings (see :func:`read_csv_rows`)."""
    return read_csv_rows(path)[1]


def write_rows(path, rows) -> None:
    """Rows (dicts) as a CSV with the union of their keys as header, in order of appearance."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def json_default(value):
    """``json.dump``'s ``default``: numpy scalars and arrays as Python numbers and lists."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")

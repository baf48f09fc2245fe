"""Tidy data files: the cells of the CSV files written here, reading them back (with
their damage found, not hidden), writing every file whole, and JSON without NaN.

A cell is read back as text (from a CSV) or given as the value itself (a row still in
memory); :func:`number` and :func:`is_true` read both, so that a row gives the same
result whether it was just computed or read back from a file.

Writing
-------
Every file is written whole: to a temporary name in its folder, flushed, fsynced and
renamed over the target (:func:`atomic_write_text`, :func:`atomic_output` for writers
that take a path, such as ``savefig``), so a reader or a crash sees the old file or the
new one, never half of one. Only the append-only files of a resumable sweep are
appended to (:func:`append_text`), one fsynced block per finished task.

Reading back
------------
:func:`read_table` reads a CSV line by line and reports what it cannot read instead of
skipping it: a trailing partial line (an interrupted append), bytes that are not UTF-8,
a NUL byte, a row with the wrong number of cells, and, in files written with a
:data:`ROW_CHECK` column, a row whose checksum does not match its cells (a garbled
value). :func:`move_aside` renames a damaged file (never deletes it) with a warning.

JSON
----
:func:`json_text` is the one JSON writer: ``allow_nan=False``, numpy values as Python
ones, and a non-finite number written as ``null``, the record saying why in
``"null_reasons": {path: reason}`` (``"runs.0.test_error": "not finite (nan)"``), which
:func:`from_json` reads back into the number. :func:`write_checked_json` and
:func:`read_checked_json` add a checksum for files that are read back as data (caches).

Keyed results
-------------
:class:`KeyedStore` keeps results that took long to compute, one checked JSON file per key in a
folder, so that an interrupted computation resumes where it stopped and a finished result is never
computed again.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import hashlib
import io
import json
import logging
import math
import os
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

log = logging.getLogger(__name__)

#: the checksum column of rows that are read back as data (a resumed sweep)
ROW_CHECK = "row_check"
#: the key of a JSON record that says why its null values are null
NULL_REASONS = "null_reasons"


class UnreadableFile(ValueError):
    """A data file that cannot be read back as what it should be; the message names it."""


# --------------------------------------------------------------------------- cells


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


def cell(v) -> str:
    """The text of a value in a CSV cell: floats by ``repr`` (``nan``, ``inf``, ``-inf``
    when not finite), lists and dicts as JSON, one physical line per row."""
    if v is None:
        return ""
    if isinstance(v, float):  # np.float64 too (a float subclass whose repr is "np.float64(...)")
        v = float(v)
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (list, dict, tuple)):
        v = json_text(v, indent=None)
    if type(v).__module__ == "numpy":
        v = v.item() if hasattr(v, "item") else v
        return cell(v)
    return str(v).replace("\r", " ").replace("\n", " ")


def row_checksum(header: Sequence[str], cells: Sequence[str]) -> str:
    """CRC-32 of a row's non-empty cells with their column names, in column-name order: a
    column added later (empty in old rows) or a reordered header leaves it unchanged."""
    pairs = sorted((k, v) for k, v in zip(header, cells) if v != "" and k != ROW_CHECK)
    blob = "\x1f".join(f"{k}\x1e{v}" for k, v in pairs).encode("utf-8")
    return format(zlib.crc32(blob), "08x")


def render_csv(header: Sequence[str], rows: Iterable[dict], with_header: bool) -> str:
    """CSV text of ``rows`` in the columns of ``header``; a :data:`ROW_CHECK` column in the
    header gets each row's checksum."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if with_header:
        w.writerow(header)
    checked = ROW_CHECK in header
    for r in rows:
        cells = [cell(r.get(k, "")) for k in header]
        if checked:
            cells[list(header).index(ROW_CHECK)] = row_checksum(header, cells)
        w.writerow(cells)
    return buf.getvalue()


def frame(rows, columns: Sequence[str] = ()):
    """A pandas DataFrame of flat records (one row each, as written to a tidy CSV): the one
    conversion behind every result's ``to_frame()``. ``columns``: those of an empty frame."""
    import pandas as pd

    rows = list(rows)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(columns))


# --------------------------------------------------------------------------- reading


class Table:
    """A CSV read back: ``header``, the readable ``rows`` (dicts of strings) and
    ``problems``, one text per line that could not be read (with its line number)."""

    def __init__(self, header: list, rows: list, problems: list):
        self.header, self.rows, self.problems = header, rows, problems

    def __repr__(self):
        return f"Table({len(self.rows)} rows, {len(self.problems)} problems)"


def read_table(path, required: Sequence[str] = ()) -> Table:
    """Every line of a CSV that can be read, and a list of those that cannot (see the module
    docstring). ``required``: columns the header must have; without them no row is read.
    A missing file is an empty table."""
    path = Path(path)
    if not path.exists():
        return Table([], [], [])
    data = path.read_bytes()
    lines = data.split(b"\n")
    problems = []
    tail = lines.pop()  # after the last newline: b"" for a complete file
    partial = [f"line {len(lines) + 1}: partial line (an interrupted write)"] if tail else []
    header = None
    rows = []
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            if b"\x00" in raw:
                raise ValueError("NUL byte")
            text = raw.decode("utf-8")
            cells = next(csv.reader([text]))
        except (UnicodeDecodeError, ValueError, csv.Error, StopIteration) as exc:
            reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc) or "empty"
            problems.append(f"line {i}: unreadable ({reason})")
            if header is None:
                return Table([], [], problems + ["the header is unreadable: no row can be read"] + partial)
            continue
        if header is None:
            header = cells
            missing = [c for c in required if c not in header]
            if missing or len(set(header)) != len(header):
                what = f"lacks {', '.join(missing)}" if missing else "repeats a column"
                return Table(header, [], problems + [f"line {i}: the header {what}: no row can be read"] + partial)
            continue
        if len(cells) != len(header):
            problems.append(f"line {i}: {len(cells)} cells, the header has {len(header)}")
            continue
        if ROW_CHECK in header and cells[header.index(ROW_CHECK)] != row_checksum(header, cells):
            problems.append(f"line {i}: checksum mismatch (a changed value)")
            continue
        rows.append(dict(zip(header, cells)))
    if header is None and data.strip():
        problems.append("no header line")
    return Table(header or [], rows, problems + partial)


def read_csv_rows(path) -> tuple:
    """``(header, rows)`` of a CSV, rows as dicts of strings; unreadable lines are left out
    (:func:`read_table` says which)."""
    t = read_table(path)
    return t.header, t.rows


def read_rows(path) -> list:
    """The rows of a CSV as dicts of strings (see :func:`read_csv_rows`)."""
    return read_table(path).rows


def check_table(path, required: Sequence[str], what: str, numeric: Sequence[str] = (),
                finite: Sequence[str] = (), allow_empty: bool = False) -> Table:
    """The table of ``path``, which must exist, be readable throughout, have the ``required``
    columns and data rows (unless ``allow_empty``), numbers (``nan`` allowed) in the
    ``numeric`` columns and finite numbers in the ``finite`` ones; otherwise
    :class:`UnreadableFile` naming the file, what it should be and the first problem."""
    path = Path(path)
    if path.is_dir():
        raise UnreadableFile(f"{path}: is a folder, not {what}")
    if not path.is_file():
        raise UnreadableFile(f"{path}: no such file")
    t = read_table(path, required)
    if allow_empty and not t.header and not t.problems:  # an empty file, or a header of no columns
        return t
    missing = [c for c in required if c not in t.header]
    if missing and t.header:
        raise UnreadableFile(f"{path}: not {what} (no column {', '.join(missing)})")
    if t.problems:
        raise UnreadableFile(f"{path}: not {what}: {t.problems[0]}"
                             + (f" (and {len(t.problems) - 1} more)" if len(t.problems) > 1 else ""))
    if not t.rows and not allow_empty:
        raise UnreadableFile(f"{path}: not {what} (no data rows)")
    for i, r in enumerate(t.rows, 1):
        for c in tuple(numeric) + tuple(finite):
            v = number(r.get(c))
            if (c in finite and not math.isfinite(v)) or (math.isnan(v) and r.get(c, "").strip().lower() != "nan"):
                raise UnreadableFile(f"{path}: not {what}: data row {i}: {c} = {r.get(c)!r} is not a "
                                     f"{'finite ' if c in finite else ''}number")
    return t


# --------------------------------------------------------------------------- writing whole files


def fsync_dir(path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temporary_name(path: Path) -> Path:
    # same folder (rename is atomic only within a file system) and same suffix (writers such
    # as savefig and numpy.savez choose the format by it)
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


@contextlib.contextmanager
def atomic_output(path):
    """Yields a temporary path beside ``path``; when the block ends without an exception, the
    file written there is fsynced and renamed over ``path``; otherwise it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` whole (:func:`atomic_output`)."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def append_text(path, text: str) -> None:
    """Append ``text`` with one ``write``, flushed and fsynced (a resumable sweep's blocks)."""
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_rows(path, rows) -> None:
    """Rows (dicts) as a CSV with the union of their keys as header, in order of appearance,
    written whole."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    atomic_write_text(path, render_csv(fields, rows, True))


def move_aside(path, why: str) -> Path:
    """Rename a damaged file to ``<name>.unreadable-<UTC time>`` (never delete it) and warn,
    naming both. Returns the new path."""
    path = Path(path)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.with_name(f"{path.name}.unreadable-{stamp}")
    os.replace(path, target)
    fsync_dir(path.parent)
    log.warning("%s: %s; moved it aside to %s", path, why, target.name)
    return target


# --------------------------------------------------------------------------- JSON


def json_default(value):
    """``json.dump``'s ``default``: numpy scalars and arrays as Python numbers and lists, paths as text."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _plain(value):
    if type(value).__module__ == "numpy" or isinstance(value, os.PathLike):
        return _plain(json_default(value))
    return value


def nonfinite_reason(value: float) -> str:
    """Why a number is written as ``null``: ``"not finite (nan)"``, ``"... (inf)"`` or ``"... (-inf)"``."""
    return f"not finite ({float(value)})"


def _clean(value, path: str, reasons: dict, nulls: dict):
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        nulls[path] = reasons.get(path) or reasons.get(path.rsplit(".", 1)[-1]) or nonfinite_reason(value)
        return None
    if isinstance(value, dict):
        return {k: _clean(v, f"{path}.{k}" if path else str(k), reasons, nulls) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, f"{path}.{i}" if path else str(i), reasons, nulls) for i, v in enumerate(value)]
    return value


def finite_json(value, reasons: Optional[dict] = None):
    """``value`` ready for ``json.dumps(allow_nan=False)``: numpy values as Python ones, tuples
    as lists, and every NaN or infinity as ``None``. The record (``value`` if it is a dict,
    else each dict of a list) gains :data:`NULL_REASONS`, ``{path: reason}`` for each
    (``path`` joins keys and list indexes with dots); ``reasons`` gives the reason of a path,
    or of a last key, instead of :func:`nonfinite_reason`."""
    value = _plain(value)
    if isinstance(value, (list, tuple)):
        return [finite_json(v, reasons) for v in value]
    nulls = {}
    clean = _clean(value, "", reasons or {}, nulls)
    if nulls and isinstance(clean, dict):
        clean[NULL_REASONS] = {**(clean.get(NULL_REASONS) or {}), **nulls}
    return clean


def json_text(value, indent: Optional[int] = 1, sort_keys: bool = False) -> str:
    """THE JSON writer of the program (see the module docstring)."""
    return json.dumps(finite_json(value), indent=indent, sort_keys=sort_keys, allow_nan=False,
                      default=json_default)


def write_json(path, value) -> None:
    """``value`` as a JSON file (:func:`json_text`), written whole."""
    atomic_write_text(path, json_text(value) + "\n")


def from_json(value):
    """The inverse of :func:`finite_json`: the nulls listed in :data:`NULL_REASONS` are numbers
    again (NaN unless the reason says which infinity)."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    nulls = value.get(NULL_REASONS) if isinstance(value.get(NULL_REASONS), dict) else {}
    out = {k: from_json(v) for k, v in value.items() if not (k == NULL_REASONS and nulls)}
    for path, reason in nulls.items():
        *outer, last = path.split(".")
        target = out
        for p in outer:
            target = target[int(p) if isinstance(target, list) else p]
        key = int(last) if isinstance(target, list) else last
        if target[key] is None:
            text = str(reason)
            target[key] = float(text[text.rfind("(") + 1:-1]) if text.startswith("not finite (") else math.nan
    return out


def _canonical(value) -> str:
    return json_text(value, indent=None, sort_keys=True)


def write_checked_json(path, value) -> None:
    """A JSON file read back as data: ``{"crc32": ..., "data": value}``, written whole."""
    data = json.loads(_canonical(value))
    write_json(path, {"crc32": format(zlib.crc32(_canonical(data).encode()), "08x"), "data": data})


def read_checked_json(path):
    """The value of :func:`write_checked_json`; :class:`UnreadableFile` when the file does
    not parse or its checksum does not match (a truncated or garbled file)."""
    try:
        blob = json.loads(Path(path).read_text(encoding="utf-8"))
        data, crc = blob["data"], blob["crc32"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise UnreadableFile(f"{path}: not a checked JSON file ({type(exc).__name__}: {exc})") from None
    if format(zlib.crc32(_canonical(data).encode()), "08x") != crc:
        raise UnreadableFile(f"{path}: checksum mismatch (a changed value)")
    return from_json(data)


@contextlib.contextmanager
def folder_summary(path, summary: dict):
    """The JSON summary of a folder of results, marked incomplete until the block ends.

    Written first with ``"status": "incomplete"`` and why; if the block raises (Ctrl-C
    included) it is rewritten with the error, so a folder is never left looking finished
    when it is not; when the block ends it is rewritten from ``summary`` with
    ``"status": "complete"``, unless the block set ``status`` (and ``error``) itself."""
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(path, {"status": "incomplete", "error": f"not finished (started {started})", **summary})
    try:
        yield summary
    except BaseException as exc:
        write_json(path, {**summary, "status": "incomplete", "error": f"{type(exc).__name__}: {exc}".rstrip(": ")})
        raise
    summary.setdefault("status", "complete")
    write_json(path, {"status": summary["status"], **summary})


# --------------------------------------------------------------------------- keyed results


def key_digest(key: dict) -> str:
    """The name of ``key`` (a dict of JSON values) in a :class:`KeyedStore`: the first 16 hex digits of
    the SHA-256 of its JSON with sorted keys."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class KeyedStore:
    """Results by key, on disk: ``folder/<prefix><digest>.json`` per key (:func:`key_digest`), each
    written whole with a checksum (:func:`write_checked_json`) as ``{"key": key, "value": value}``.

    A file that does not read back whole, or that answers another key, is moved aside
    (:func:`move_aside`, with a warning) and counts as absent, so its result is computed again; a
    result is never overwritten by a second :meth:`put` of the same key unless asked."""

    def __init__(self, folder, prefix: str = "", what: str = "result"):
        self.folder = Path(folder)
        self.prefix = prefix
        #: what a result is, in the warnings (``unreadable cached simulation``)
        self.what = what

    def path(self, key: dict) -> Path:
        return self.folder / f"{self.prefix}{key_digest(key)}.json"

    def _read(self, path: Path):
        """``(key, value)`` of a stored file, or None (a damaged file moved aside)."""
        try:
            stored = read_checked_json(path)
            if not (isinstance(stored, dict) and set(stored) == {"key", "value"}):
                raise UnreadableFile(f"{path}: not a keyed result")
        except UnreadableFile as exc:
            move_aside(path, f"unreadable cached {self.what} ({exc}); it will be computed again")
            return None
        return stored["key"], stored["value"]

    def get(self, key: dict, default=None, valid: Optional[Callable[[object], bool]] = None):
        """The value stored for ``key``, or ``default``; with ``valid``, a stored value for which it is
        False (not what the key promises: a result of other settings) is moved aside too."""
        path = self.path(key)
        if not path.exists():
            return default
        found = self._read(path)
        if found is None:
            return default
        if found[0] != from_json(json.loads(_canonical(key))):
            move_aside(path, f"stored for another key ({found[0]}), not {key}")
            return default
        if valid is not None and not valid(found[1]):
            move_aside(path, f"not the {self.what} of {key}; it will be computed again")
            return default
        return found[1]

    def __contains__(self, key: dict) -> bool:
        return self.get(key, _ABSENT) is not _ABSENT

    def put(self, key: dict, value, replace: bool = False) -> None:
        """Store ``value`` for ``key`` (its file written whole); a key already stored is an error
        unless ``replace``."""
        if not replace and key in self:
            raise FileExistsError(f"{self.path(key)}: a result for {key} is stored already")
        self.folder.mkdir(parents=True, exist_ok=True)
        write_checked_json(self.path(key), {"key": key, "value": value})

    def cached(self, key: dict, compute: Callable[[], object]):
        """The stored value of ``key``, else ``compute()``, stored and returned."""
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            value = compute()
            self.put(key, value, replace=True)
            value = self.get(key)
        return value

    def items(self) -> Iterator[tuple]:
        """``(key, value)`` of every readable result in the folder (in file-name order)."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob(f"{self.prefix}*.json")):
            found = self._read(path)
            if found is not None:
                yield found

    def values(self) -> Iterator:
        return (value for _, value in self.items())


_ABSENT = object()

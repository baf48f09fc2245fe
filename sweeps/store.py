"""The files of a sweep's ``--out`` folder, crash-safe (see :mod:`sweeps`, "Resuming and crash safety").

Rows are appended as one fsynced block per task; a file is only ever replaced whole,
by writing a temporary file and renaming it over the old one.
"""
from __future__ import annotations

import csv
import datetime
import io
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from numerics.tidy import complete_text, json_default, read_csv_rows

from . import SweepError
from .config import settings_hash

if TYPE_CHECKING:
    from .tasks import Task

log = logging.getLogger(__name__)

THEORY_CSV = "theory.csv"
THRESHOLDS_CSV = "thresholds.csv"
SIMULATION_CSV = "simulation.csv"
FAILURES_CSV = "failures.csv"
DONE_FILE = "done.txt"
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"
DATA_CSVS = (THEORY_CSV, THRESHOLDS_CSV, SIMULATION_CSV)

MANIFEST_FORMAT = 1


def fsync_dir(path: Path) -> None:
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


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def append_text(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):  # np.float64 too (a float subclass whose repr is "np.float64(...)")
        v = float(v)
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (list, dict, tuple)):
        v = json.dumps(v, default=json_default)
    if type(v).__module__ == "numpy":
        v = v.item() if hasattr(v, "item") else v
        return cell(v)
    return str(v).replace("\r", " ").replace("\n", " ")  # one physical line per row


def render_csv(header: Sequence[str], rows: Sequence[dict], with_header: bool) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if with_header:
        w.writerow(header)
    for r in rows:
        w.writerow([cell(r.get(k, "")) for k in header])
    return buf.getvalue()


class SweepStore:
    """The files of one ``--out`` folder; holds an exclusive lock while open."""

    def __init__(self, out):
        self.out = Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SweepError(f"--out: cannot create {self.out} ({exc.strerror})") from None
        if not self.out.is_dir():
            raise SweepError(f"--out: {self.out} is not a folder")
        self._lock = None
        self.done: set = set()
        self._headers: dict = {}

    # -- locking
    def __enter__(self):
        import fcntl

        self._lock = open(self.out / LOCK_FILE, "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise SweepError(f"--out: another phase-diagram run is writing to {self.out}") from None
        return self

    def __exit__(self, *exc):
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- manifest
    def manifest(self) -> Optional[dict]:
        path = self.out / MANIFEST
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SweepError(f"--out: {path} is unreadable ({exc}); use another --out") from None

    def check_settings(self, sections: dict) -> None:
        """Record ``{kind: settings}``; refuse settings that differ from those already recorded."""
        manifest = self.manifest()
        if manifest is None:
            stray = [n for n in DATA_CSVS + (DONE_FILE,) if (self.out / n).exists()]
            if stray:
                raise SweepError(f"--out: {self.out} holds {', '.join(stray)} but no {MANIFEST}; "
                                 f"use another --out")
            manifest = {"format": MANIFEST_FORMAT, "created": now(), "sections": {}}
        changed = False
        for kind, settings in sections.items():
            h = settings_hash(settings)
            old = manifest["sections"].get(kind)
            if old is None:
                manifest["sections"][kind] = {"hash": h, "settings": settings}
                changed = True
            elif old["hash"] != h:
                diff = "; ".join(_diff(old.get("settings", {}), settings)) or "hash differs"
                raise SweepError(f"--out: {self.out} holds a {kind} sweep with other settings ({diff}); "
                                 f"use another --out, or delete the folder to start over")
        if changed:
            manifest["environment"] = _environment()
            atomic_write_text(self.out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    # -- recovery
    def recover(self) -> dict:
        """Drop a partial trailing line and the rows of unfinished tasks. Returns counts dropped."""
        text, partial = complete_text(self.out / DONE_FILE)
        if partial:
            atomic_write_text(self.out / DONE_FILE, text)
        self.done = {line for line in text.splitlines() if line}
        dropped = {}
        for name in DATA_CSVS:
            path = self.out / name
            if not path.exists():
                continue
            _, partial = complete_text(path)
            header, rows = read_csv_rows(path)
            keep = [r for r in rows if r.get("task") in self.done]
            if partial or len(keep) != len(rows):
                dropped[name] = len(rows) - len(keep) + int(partial)
                if header and keep:
                    atomic_write_text(path, render_csv(header, keep, True))
                else:
                    path.unlink()
                    fsync_dir(self.out)
            if path.exists():
                self._headers[name] = header
        path = self.out / FAILURES_CSV
        text, partial = complete_text(path)
        if partial:
            atomic_write_text(path, text)
        for name, n in dropped.items():
            log.info("%s: dropped %d row(s) of unfinished tasks or a partial line", name, n)
        return dropped

    # -- appending
    def append_rows(self, name: str, rows: list) -> None:
        """Append rows as one block (fsynced). New columns rewrite the file atomically with the union header."""
        if not rows:
            return
        path = self.out / name
        header = self._headers.get(name)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        if header is None or not path.exists():
            header = keys
            atomic_write_text(path, render_csv(header, rows, True))
        elif set(keys) <= set(header):
            append_text(path, render_csv(header, rows, False))
        else:
            old_header, old_rows = read_csv_rows(path)
            header = old_header + [k for k in keys if k not in old_header]
            atomic_write_text(path, render_csv(header, old_rows + list(rows), True))
        self._headers[name] = header

    def mark_done(self, key: str) -> None:
        append_text(self.out / DONE_FILE, key + "\n")
        self.done.add(key)

    def record_failure(self, task: Task, error: str, tb: str, run_started: str) -> None:
        row = {"run_started": run_started, "task": task.key, "kind": task.kind,
               "omega": task.payload.get("omega"), "alpha": task.payload.get("alpha", ""),
               "error": error, "traceback": tb.strip().replace("\n", " | ")}
        path = self.out / FAILURES_CSV
        header = list(row)
        append_text(path, render_csv(header, [row], not path.exists() or path.stat().st_size == 0))


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _environment() -> dict:
    import platform

    import dask
    import distributed
    import numpy

    return {"python": platform.python_version(), "numpy": numpy.__version__, "dask": dask.__version__,
            "distributed": distributed.__version__}


def _diff(old: dict, new: dict, prefix: str = "") -> list:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            if isinstance(a, list) and isinstance(b, list) and len(a) + len(b) > 6:
                a, b = f"{len(a)} values {a[0]}..{a[-1]}" if a else "[]", f"{len(b)} values {b[0]}..{b[-1]}" if b else "[]"
            out.append(f"{prefix}{k}: {a} -> {b}")
    return out

"""The files of a sweep's ``--out`` folder, crash-safe (see :mod:`sweeps`, "Resuming and crash safety").

Rows are appended as one fsynced block per task, each row with its checksum
(:data:`tidyio.ROW_CHECK`); a file is otherwise only ever replaced whole. What is
done is read from the data: a task is done when its file holds exactly the rows it gives,
all readable (:meth:`SweepStore.recover`).
"""
from __future__ import annotations

import collections
import datetime
import json
import logging
import os
from pathlib import Path
from typing import Callable, Optional

from tidyio import (ROW_CHECK, append_text, atomic_write_text, json_text, move_aside, read_table,
                           render_csv)

from . import SweepError
from .config import settings_hash

log = logging.getLogger(__name__)

THEORY_CSV = "theory.csv"
THRESHOLDS_CSV = "thresholds.csv"
SIMULATION_CSV = "simulation.csv"
FAILURES_CSV = "failures.csv"
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"
DATA_CSVS = (THEORY_CSV, THRESHOLDS_CSV, SIMULATION_CSV)
#: the sweep kind whose settings (``settings_hash`` column) decide the rows of each data file
KIND_OF_CSV = {THEORY_CSV: "theory", THRESHOLDS_CSV: "theory", SIMULATION_CSV: "simulation"}

MANIFEST_FORMAT = 1
#: files that mark the outputs of a command in a folder (those with a manifest name it there)
OTHER_OUTPUTS = {THEORY_CSV: "phase-diagram", SIMULATION_CSV: "phase-diagram", "curve.csv": "run",
                 "validate.json": "validate", "dscan.json": "validate", "histogram.json": "histogram",
                 "report.md": "paper"}


class SweepStore:
    """The files of one ``--out`` folder; holds an exclusive lock while open."""

    def __init__(self, out, what: str = "phase-diagram"):
        self.out = Path(out)
        self.what = what  # the command writing here, named when a second run is refused
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

        path = self.out / LOCK_FILE
        while True:
            lock = open(path, "a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                raise SweepError(f"--out: another {self.what} run is writing to {self.out}") from None
            # a run that just ended removes its lock file: the lock must be on the file now on disk
            try:
                current = os.fstat(lock.fileno()).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                current = False
            if current:
                self._lock = lock
                return self
            lock.close()

    def __exit__(self, *exc):
        if self._lock is not None:
            try:  # removed while still held, so that no other run can hold a lock on it
                (self.out / LOCK_FILE).unlink()
            except OSError:
                pass
            self._lock.close()
            self._lock = None

    # -- manifest
    def manifest(self) -> Optional[dict]:
        """The manifest, or None when there is none; an unreadable one is moved aside (the
        rows' ``settings_hash`` then stands in for it, see :meth:`check_settings`)."""
        path = self.out / MANIFEST
        if not path.exists():
            return None
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if not all({"hash", "settings"} <= set(sec) for sec in manifest["sections"].values()):
                raise ValueError("a section lacks its hash or its settings")
            return manifest
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            move_aside(path, f"unreadable ({type(exc).__name__}: {exc})")
            return None

    def check_settings(self, sections: dict) -> None:
        """Record ``{kind: settings}``; refuse settings that differ from those already recorded.

        Without a (readable) manifest, rows already in the folder are accepted only when
        every one carries the ``settings_hash`` of this run's settings of its kind."""
        manifest = self.manifest()
        self._refuse_other_commands(manifest)
        if manifest is None:
            self._check_rows_without_manifest(sections)
            manifest = {"format": MANIFEST_FORMAT, "created": now(), "command": self.what, "sections": {}}
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
            atomic_write_text(self.out / MANIFEST, json_text(manifest, sort_keys=True) + "\n")

    def _refuse_other_commands(self, manifest: Optional[dict]) -> None:
        """Refuse a folder that holds another command's outputs: its manifest names that command
        (a manifest written before it did is a paper run's if it has the paper's section), or a
        file of :data:`OTHER_OUTPUTS` is there."""
        other = None
        if manifest is not None:
            other = manifest.get("command") or ("paper" if "paper" in manifest["sections"] else "phase-diagram")
        if other in (None, self.what):
            other = next((command for name, command in OTHER_OUTPUTS.items()
                          if command != self.what and (self.out / name).exists()), None)
        if other is not None:
            raise SweepError(f"--out: {self.out} holds the outputs of attnphase {other}; a {self.what} run there "
                             f"would mix its files with them: use another --out")

    def _check_rows_without_manifest(self, sections: dict) -> None:
        for name in DATA_CSVS:
            hashes = {r.get("settings_hash") for r in read_table(self.out / name).rows}
            if not hashes:
                continue
            kind = KIND_OF_CSV[name]
            mine = settings_hash(sections[kind]) if kind in sections else None
            if hashes != {mine}:
                raise SweepError(f"--out: {self.out} holds {name} of other settings and no readable {MANIFEST}; "
                                 f"use another --out")

    # -- recovery
    def recover(self, expected_rows: Callable[[str, str], Optional[int]], files=DATA_CSVS) -> dict:
        """Read what is done from the data, and leave only that in the files.

        ``expected_rows(file name, task key)``: the rows that task writes to that file
        (None: a task that does not write there). A task is done when the file holds
        exactly that many readable rows of it. A file with an unreadable line (a partial
        line, a garbled row, a checksum that does not match) or rows of a task that is not
        done is moved aside (:func:`tidyio.move_aside`, with a warning naming it) and
        replaced by the rows of the done tasks; the others are computed again. ``files``: the
        data files of the kinds of sweep being run (the others are left as they are).
        Returns the number of lines and rows left out, per file."""
        self.done = set()
        dropped = {}
        for name in files:
            path = self.out / name
            table = read_table(path, required=("task", ROW_CHECK))
            counts = collections.Counter(r["task"] for r in table.rows)
            complete = {k for k, n in counts.items() if expected_rows(name, k) == n}
            keep = [r for r in table.rows if r["task"] in complete]
            lost = len(table.rows) - len(keep)
            if table.problems or lost:
                why = []
                if table.problems:
                    why.append(f"{len(table.problems)} unreadable line(s), first {table.problems[0]}")
                if lost:
                    n_tasks = len(set(counts) - complete)
                    why.append(f"{lost} row(s) of {n_tasks} task(s) whose rows are not all there")
                self._replace(path, table.header, keep,
                              "; ".join(why) + f"; the {len(complete)} complete task(s) are kept, the others "
                                               f"are computed again")
                dropped[name] = len(table.problems) + lost
            if keep:
                self._headers[name] = table.header
            self.done |= complete
        path = self.out / FAILURES_CSV
        table = read_table(path)
        if table.problems:
            self._replace(path, table.header, table.rows, f"{len(table.problems)} unreadable line(s) in a log")
        return dropped

    @staticmethod
    def _replace(path: Path, header: list, rows: list, why: str) -> None:
        """The damaged ``path`` moved aside, and ``rows`` written in its place (none: no file)."""
        if rows:
            tmp = path.with_name(f".{path.name}.recovered.tmp")
            atomic_write_text(tmp, render_csv(header, rows, True))
            move_aside(path, why)
            os.replace(tmp, path)
        else:
            move_aside(path, why)

    # -- appending
    def add_task(self, key: str, name: str, rows: list) -> None:
        """A finished task's rows, appended to ``name`` as one fsynced block: the task is done."""
        self.append_rows(name, rows)
        self.done.add(key)

    def append_rows(self, name: str, rows: list) -> None:
        """Append rows as one block (fsynced). New columns rewrite the file atomically with the union header."""
        if not rows:
            return
        path = self.out / name
        header = self._headers.get(name)
        keys = list(dict.fromkeys([k for r in rows for k in r] + [ROW_CHECK]))
        if header is None or not path.exists():
            header = keys
            atomic_write_text(path, render_csv(header, rows, True))
        elif set(keys) <= set(header):
            append_text(path, render_csv(header, rows, False))
        else:
            table = read_table(path, required=("task", ROW_CHECK))
            if table.problems:  # changed under a running sweep: keep the damaged file apart
                self._replace(path, table.header, table.rows, "changed while the sweep was writing it")
            header = table.header + [k for k in keys if k not in table.header]
            atomic_write_text(path, render_csv(header, table.rows + list(rows), True))
        self._headers[name] = header

    def record_failure(self, task, error: str, tb: str, run_started: str) -> None:
        """A row of the failures file for ``task``: anything with a ``key``, a ``kind`` and a ``payload``
        (a sweep's task or the paper's), so that the store depends on no kind of task."""
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

"""Before/after comparison of the command-line outputs on the default model.

A change that only reorganises code must leave every number the program writes
bitwise identical. This script runs a fixed set of commands into a folder
(``produce``) and compares two such folders (``compare``), file by file, value by
value, ignoring only what measures time (``wall_time``, ``task_wall_time``,
``train_time``, ``step_time``, ``compute_wall_time``, timestamps, the seconds in a
summary line) and the figures (a PDF embeds its creation date). The output folder's
own path reads the same in both.

    # with the code before the change (a checkout in OLD/):
    PYTHONPATH=OLD python benchmarks/compare_outputs.py produce /tmp/before --tree OLD
    # with the code after:
    python benchmarks/compare_outputs.py produce /tmp/after
    python benchmarks/compare_outputs.py compare /tmp/before /tmp/after

``produce`` takes about 8 minutes on 2 cores (``run``, ``solve``, ``thresholds``,
``curve``, a 2 x 9 ``phase-diagram`` and a short ``simulate``).

A change may alter an output on purpose; each such alteration is listed in
:data:`EXPECTED_CHANGES` (file, what changed, why), applied to the *before* side, and
everything else is still compared exactly. Today's list is empty: every output is compared
exactly. ``compare --one-by-one`` reads a *before* folder whose line-quadrature records carry
scalar entries in the one matrix schema (:func:`one_by_one_records`: the entries as ``1 x 1``
matrices, the integrator, the invariants and their errors derived from the entries), and compares
the rest exactly.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import re
import subprocess
import sys
import time

#: (``row_check`` is a checksum over the row's cells, its timings among them)
TIME_KEYS = {"wall_time", "task_wall_time", "train_time", "step_time", "compute_wall_time", "created",
             "run_started", "figures", "environment", "out", "curve_csv", "csv", "row_check"}


def commands(out: pathlib.Path) -> dict:
    """``{name: argv}``: each writes into ``out`` (stdout is kept as ``name.stdout``)."""
    return {
        "run": ["run", "--out", str(out / "run")],
        "solve": ["solve", "--alpha", "2", "--json"],
        "solve_positional": ["solve", "--alpha", "1.5", "--branch", "positional", "--json"],
        "thresholds": ["thresholds", "--json"],
        "curve": ["curve", "--alpha", "0.5:2.5:9", "--out", str(out / "curve.csv")],
        "phase_diagram": ["phase-diagram", "--omega", "0.2:0.3:2", "--alpha", "0.5:2.5:9", "--out",
                          str(out / "pd"), "--quiet", "--no-plot"],
        "simulate": ["simulate", "--d", "200", "--alpha", "1", "--seeds", "2", "--steps", "300", "--json",
                     "--init", "semantic"],
    }


def produce(out: pathlib.Path, python: str, tree: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.path.abspath(tree)
    for name, argv in commands(out).items():
        t0 = time.perf_counter()
        proc = subprocess.run([python, "-m", "attnphase.cli", *argv], capture_output=True, text=True, env=env,
                              cwd=tree or None)
        (out / f"{name}.stdout").write_text(proc.stdout)
        (out / f"{name}.status").write_text(f"{proc.returncode}\n")
        print(f"{name}: exit {proc.returncode} in {time.perf_counter() - t0:.1f} s", flush=True)


#: file -> the alterations of its rows (CSV) or entries (JSON) that are expected:
#: ``rename`` {old: new} (same value), ``add`` {column: value}, ``drop`` {column: the
#: column that already holds its value (checked; empty where a point does not exist)},
#: ``fill`` (a condition {column: value} and {column: value}: where the condition
#: holds, the columns, empty before, have these values after), ``split`` {column: (old value,
#: {new column: value})}, ``changed`` (keys, or dotted JSON paths, present on both
#: sides whose values may differ), ``value`` {dotted path: the value it must have after},
#: ``new`` (keys, dotted JSON paths or columns absent before: taken from after, and printed),
#: ``reformatted`` (prefixes of text lines dropped on both sides).
EXPECTED_CHANGES: dict = {}

#: a record of the two-token rank-one model as the line quadrature wrote it without the matrix schema:
#: the bare names it carries, and the invariant each entry is (``abs``: its modulus)
ENTRIES = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat")
INVARIANT_OF = {"q_eigenvalues": ("q", False), "V_eigenvalues": ("V", False), "m_singular_values": ("m", True),
                "theta_singular_values": ("theta", True)}


def one_by_one_records(obj):
    """``obj`` (a CSV's rows or a JSON document) with every fixed-point record of scalar entries (a
    mapping with ``branch`` and ``q`` but no ``integrator``) written in the one matrix schema of
    ``numerics.result``: the entries as ``1 x 1`` nested lists (JSON), the ``integrator``, the gauge
    invariants (each the entry or its modulus) and their errors (the entry's). Every other value is
    kept, so that a comparison after it is still exact."""
    if isinstance(obj, list):
        return [one_by_one_records(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    obj = {k: one_by_one_records(v) for k, v in obj.items()}
    if "branch" not in obj or "q" not in obj or "integrator" in obj:
        return obj
    cells = isinstance(obj["q"], str)  # a CSV row: its cells are text
    if cells and "exists" in obj:
        # a sweep's branch row: the record's row less its global_minimum (the points' file marks it);
        # a point that does not exist has empty values and says so in its status
        if obj.pop("global_minimum", "") != "":
            raise ValueError("a branch row marked global_minimum")
        if obj["exists"] == "False":
            fields = ("q", "m", "V", "theta", "test_error", "test_error_error", "train_loss", "train_loss_error")
            obj.update({k: "" for k in fields}, status="not found")
            obj.update({f"{name}_1{error}": "" for name in INVARIANT_OF for error in ("", "_error")})
            obj["integrator"] = ""
            return obj
    if cells:
        obj["integrator"] = "lines"
        for name, (entry, modulus) in INVARIANT_OF.items():
            if obj.get(entry, "") not in ("", "nan"):
                value = float(obj[entry])
                obj[f"{name}_1"] = repr(abs(value) if modulus else value)
            else:
                obj[f"{name}_1"] = obj.get(entry, "")
            if f"{entry}_error" in obj:
                obj[f"{name}_1_error"] = obj[f"{entry}_error"]
        return obj
    obj["integrator"] = "lines"
    obj["invariants"] = {name: [abs(obj[entry]) if modulus and obj[entry] is not None else obj[entry]]
                         for name, (entry, modulus) in INVARIANT_OF.items()}
    for entry in ENTRIES:
        obj[entry] = [[obj[entry]]]
    error = obj.get("error")
    if isinstance(error, dict):
        for name, (entry, _) in INVARIANT_OF.items():
            if entry in error:
                error[f"{name}_1"] = error[entry]
    reasons = obj.get("null_reasons")
    if isinstance(reasons, dict):
        for name, (entry, _) in INVARIANT_OF.items():
            if f"error.{entry}" in reasons:
                reasons[f"error.{name}_1"] = reasons[f"error.{entry}"]
    return obj


def _expected_row(before: dict, after: dict, change: dict, where: str) -> dict:
    """``before`` with the expected alterations applied (``after`` supplies what may differ)."""
    row = dict(before)
    for column in change.get("new", ()):
        if column in row:
            raise ValueError(f"{where}: {column} was there before")
        if column in after:
            row[column] = after[column]
            print(f"  new in {where}: {column} = {after[column]!r}"[:300])
    for old, new in change.get("rename", {}).items():
        row[new] = row.pop(old)
    row.update(change.get("add", {}))
    for column, holder in change.get("drop", {}).items():
        if row.get(column) not in ("", row.get(holder)):  # empty where the point does not exist
            raise ValueError(f"{where}: {column} = {row.get(column)!r} is not {holder} = {row.get(holder)!r}")
        row.pop(column)
    if "fill" in change:
        condition, values = change["fill"]
        if all(row.get(k) == v for k, v in condition.items()):
            for column, value in values.items():
                if row.get(column) != "":
                    raise ValueError(f"{where}: {column} = {row.get(column)!r}, expected an empty cell")
                row[column] = value
    for column, (old_value, new_columns) in change.get("split", {}).items():
        if row.get(column) != old_value:
            raise ValueError(f"{where}: {column} = {row.get(column)!r}, expected {old_value!r}")
        row.pop(column)
        row.update(new_columns)
    for key in change.get("changed", ()):
        if key in row and key in after:
            row[key] = after[key]
    return row


def _path(obj, dotted):
    parent, _, key = dotted.rpartition(".")
    for part in parent.split(".") if parent else ():
        obj = obj[part]
    return obj, key


def _expected(rel: str, before, after):
    change = EXPECTED_CHANGES.get(str(rel))
    if change is None:
        return before
    if isinstance(before, list) and isinstance(after, list):
        return [_expected_row(b, a, change, f"{rel} row {i}") if isinstance(b, dict) and isinstance(a, dict) else b
                for i, (b, a) in enumerate(zip(before, after))] + before[len(after):]
    before = json.loads(json.dumps(before))
    for dotted in change.get("new", ()):
        b_parent, key = _path(before, dotted)
        a_parent, _ = _path(after, dotted)
        if key in b_parent:
            raise ValueError(f"{rel}: {dotted} was there before")
        b_parent[key] = a_parent[key]
        print(f"  new in {rel}: {dotted} = {a_parent[key]!r}"[:300])
    for dotted in change.get("changed", ()):
        b_parent, key = _path(before, dotted)
        a_parent, _ = _path(after, dotted)
        b_parent[key] = a_parent[key]
    for dotted, value in change.get("value", {}).items():
        a_parent, key = _path(after, dotted)
        if a_parent[key] != value:
            raise ValueError(f"{rel}: {dotted} = {a_parent[key]!r}, expected {value!r}")
    return before


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIME_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _load(path: pathlib.Path, root: pathlib.Path):
    """The comparable content of an output file; the output folder's own path, which
    stdout and the JSON summaries name, reads as ``<out>``."""
    if path.suffix == ".csv":
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in rows]
    if path.suffix in (".json", ".stdout") or path.name.endswith(".status"):
        # the folder itself, and the seconds a sweep took (its summary line), read alike
        text = re.sub(r"\(\d+\.\d s\)", "(<seconds>)", path.read_text().replace(str(root), "<out>"))
        try:
            return _strip(json.loads(text))
        except ValueError:
            # a table: drop its "wall time" line
            return [line for line in text.splitlines() if "wall time" not in line]
    if path.suffix == ".txt":
        return sorted(path.read_text().splitlines())
    return None


def compare(before: pathlib.Path, after: pathlib.Path, one_by_one: bool = False) -> int:
    files = sorted({p.relative_to(before) for p in before.rglob("*") if p.is_file()}
                   | {p.relative_to(after) for p in after.rglob("*") if p.is_file()})
    bad = 0
    compared = 0
    for rel in files:
        if rel.suffix in (".pdf", ".png", ".lock") or rel.name.startswith("."):
            continue
        a, b = before / rel, after / rel
        if not a.exists() or not b.exists():
            print(f"MISSING {rel}: before {a.exists()}, after {b.exists()}")
            bad += 1
            continue
        va, vb = _load(a, before), _load(b, after)
        if va is None:
            continue
        prefixes = EXPECTED_CHANGES.get(str(rel), {}).get("reformatted")
        if prefixes:  # text lines reformatted on purpose: dropped on both sides
            va, vb = ([line for line in v if not line.startswith(prefixes)] for v in (va, vb))
        if one_by_one:
            va = one_by_one_records(va)
        try:
            va = _expected(rel, va, vb)
        except (ValueError, KeyError) as exc:
            print(f"UNEXPECTED {rel}: {exc}")
            bad += 1
            continue
        compared += 1
        if va != vb:
            bad += 1
            print(f"DIFFERS {rel}")
            if isinstance(va, list) and isinstance(vb, list):
                for i, (ra, rb) in enumerate(zip(va, vb)):
                    if ra != rb:
                        if isinstance(ra, dict) and isinstance(rb, dict):
                            keys = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
                            print(f"  row {i}: " + ", ".join(f"{k}: {ra.get(k)!r} -> {rb.get(k)!r}" for k in keys[:6]))
                        else:
                            print(f"  item {i}: {str(ra)[:200]!r} -> {str(rb)[:200]!r}")
                        break
                if len(va) != len(vb):
                    print(f"  {len(va)} -> {len(vb)} rows")
    print(f"{compared} files compared, {bad} differ (expected changes applied to: "
          f"{', '.join(sorted(EXPECTED_CHANGES))})")
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("produce")
    p.add_argument("out")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--tree", default="", help="a checkout to run (default: the installed package)")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--one-by-one", action="store_true",
                   help="BEFORE holds the line quadrature's records with scalar entries: compare them in the "
                        "matrix schema (one_by_one_records)")
    args = parser.parse_args(argv)
    if args.action == "produce":
        produce(pathlib.Path(args.out), args.python, args.tree)
        return 0
    return compare(pathlib.Path(args.before), pathlib.Path(args.after), args.one_by_one)


if __name__ == "__main__":
    sys.exit(main())

"""The outputs of ``attnphase paper`` drawn from the data files alone: each figure's tidy
table, drawing and key numbers, ``data/key_numbers.csv``, ``summary.json``
(:func:`write_outputs`), and ``report.md`` (:func:`write_report`).

``report.md`` is written from ``summary.json`` and ``data/key_numbers.csv`` only: every
number in it is read from those files (none is typed into this module), each formatted by
:func:`number_text`. It has one section per figure: what it shows, the command that
regenerates it alone, the figure, its key numbers against the published value where one
exists (or, for a simulated number, against our theory) with the difference, and, where
ours differ by more than our error bar, the evidence the data holds.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Optional

from tidyio import (atomic_write_text, from_json, number, read_table, render_csv, write_json)

from .published import PAPER, PUBLISHED
from .tables import (AGREES, DIFFERS, FIGURE_COLUMNS, KEY_COLUMNS, NOT_CONVERGED, Data, authors_rows,
                     authors_threshold_rows, select)

log = logging.getLogger(__name__)

KEY_NUMBERS = "data/key_numbers.csv"
SUMMARY = "summary.json"
REPORT = "report.md"
FORMATS = ("png", "pdf")


def figure_data(name: str) -> str:
    return f"data/{name}.csv"


def figure_files(name: str) -> list:
    return [f"figures/{name}.{ext}" for ext in FORMATS]


def regenerate_command(out, plan_name: str, only: Optional[str] = None, gamp: bool = False) -> str:
    parts = ["attnphase paper --out", str(out)]
    if plan_name == "quick":
        parts.append("--quick")
    if gamp:
        parts.append("--gamp")
    if only:
        parts += ["--only", only]
    return " ".join(parts)


def write_outputs(out, plan, registry, done: set, tasks_of: dict, summary: dict, command: str = "") -> None:
    """Every figure whose tasks are all done: its table (``data/<name>.csv``), its drawing from
    that file alone and its key numbers; then ``data/key_numbers.csv``, ``summary.json`` and
    ``report.md``. A figure that cannot be drawn is recorded as a failure; the others are
    written."""
    from .figures.drawing import save

    out = Path(out)
    data = Data(out)
    keys, figures = [], []
    for index, spec in enumerate(registry, 1):
        missing = [k for k in tasks_of[spec.name] if k not in done]
        info = {"index": index, "name": spec.name, "title": spec.title(plan), "what": spec.what(plan),
                "pointer": spec.pointer, "command": regenerate_command(out, plan.name, spec.name, plan.gamp),
                "tasks": len(tasks_of[spec.name]), "missing_tasks": len(missing), "complete": not missing,
                "data": figure_data(spec.name), "files": []}
        if not missing:
            try:
                rows = spec.table(data, plan)
                atomic_write_text(out / figure_data(spec.name), render_csv(FIGURE_COLUMNS, rows, True))
                back = read_table(out / figure_data(spec.name)).rows
                fig = spec.draw(back)
                info["files"] = [str(p.relative_to(out)) for p in save(fig, [out / f for f in
                                                                            figure_files(spec.name)])]
                keys += spec.key_numbers(data, back, plan)
                gamp = gamp_table(back)
                if gamp:
                    info["gamp"] = gamp
                files = spec.authors(plan)
                if files:
                    info["authors_points"] = authors_rows(data, files)
                    info["authors_precision"] = plan.curve_precision
                    info["authors_thresholds"] = authors_threshold_rows(data, files, plan.threshold_precision)
            except Exception as exc:  # a figure never loses the data, nor the other figures
                msg = f"{type(exc).__name__}: {exc}"
                log.error("figure %s failed: %s", spec.name, msg)
                summary["failed"].append({"task": f"figure:{spec.name}", "error": msg})
                info["complete"] = False
                info["error"] = msg
        figures.append(info)
    atomic_write_text(out / KEY_NUMBERS, render_csv(KEY_COLUMNS, keys, True))
    incomplete = [f["name"] for f in figures if not f["complete"]]
    record = {
        "status": "complete" if not summary["failed"] and not incomplete else "incomplete",
        "paper": PAPER, "plan": plan.name, "settings": plan.settings(), "command": command
        or regenerate_command(out, plan.name, gamp=plan.gamp), "figures": figures, "incomplete_figures": incomplete,
        "key_numbers": KEY_NUMBERS, "published": [vars(p) for p in PUBLISHED],
        "tasks": {k: summary[k] for k in ("tasks", "skipped")} | {"computed": len(summary["computed"]),
                                                                   "failed": len(summary["failed"])},
        "failed": summary["failed"], "notes": summary["notes"], "dropped_on_recovery": summary["dropped_on_recovery"],
        "settings_hash": summary["settings_hash"], "compute_wall_time": summary.get("compute_wall_time"),
        # this invocation's wall and CPU time (a resumed run counts only what it computed itself)
        "wall_s": summary.get("compute_wall_time"), "cpu_s": summary.get("cpu_s"),
        "workers": summary.get("workers"), "versions": package_versions(),
    }
    write_json(out / SUMMARY, record)
    write_report(out)


#: the packages whose versions a summary records
VERSIONED = ("attnphase", "numpy", "scipy", "sympy", "mpmath", "numba", "torch", "dask", "distributed", "pandas",
             "matplotlib")


def package_versions() -> dict:
    """``{package: version}`` of :data:`VERSIONED` (``None`` where one is not installed) and Python's."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


#: the quantities of the report's GAMP table, each with gradient descent's mean beside GAMP's where the
#: figure has it
GAMP_TABLE = ("m", "theta_over_sigma2", "q", "test_error", "train_loss")


def gamp_table(rows: list) -> list:
    """Per ``(alpha, init)`` of a figure's GAMP rows (source ``gamp``, as read back from its table): the
    runs, how many converged, and per quantity of :data:`GAMP_TABLE` GAMP's mean and standard error over
    the converged runs beside gradient descent's (``None`` where there is none), GAMP's mean iterations
    and ``risk_gradient_norm``. Empty without GAMP rows."""
    out = []
    counts = sorted(select(rows, source="gamp", quantity=NOT_CONVERGED),
                    key=lambda r: (number(r["alpha"]), r["init"]))
    for c in counts:
        at = dict(alpha=number(c["alpha"]), init=c["init"], d=c["d"], model=c["model"])

        def mean(source, quantity):
            r = next(iter(select(rows, source=source, quantity=quantity, **at)), None)
            return None if r is None else {"value": number(r["value"]), "error": number(r["error"]),
                                           "n": int(number(r["n"]))}

        entry = {"alpha": at["alpha"], "init": at["init"], "d": int(number(c["d"])), "runs": int(number(c["n"])),
                 "not_converged": int(number(c["value"]))}
        entry["converged"] = entry["runs"] - entry["not_converged"]
        entry["gamp"] = {q: mean("gamp", q) for q in GAMP_TABLE + ("iterations", "risk_gradient_norm")}
        entry["gd"] = {q: mean("gd", q) for q in GAMP_TABLE}
        out.append(entry)
    return out


# --------------------------------------------------------------------------- the report


def number_text(x, digits: int = 6) -> str:
    """A number as the report prints it: ``digits`` significant digits, ``-`` when absent."""
    x = number(x)
    if not math.isfinite(x):
        return "-"
    return format(x, f".{digits}g")


def _plus_minus(value, error, digits: int = 6) -> str:
    text = number_text(value, digits)
    if math.isfinite(number(error)) and text != "-":
        text += " +- " + number_text(error, 2)
    return text


def _read_summary(out: Path) -> dict:
    return from_json(json.loads((out / SUMMARY).read_text(encoding="utf-8")))


def write_report(out) -> str:
    """``report.md`` from ``summary.json`` and ``data/key_numbers.csv`` (see the module docstring)."""
    out = Path(out)
    summary = _read_summary(out)
    keys = read_table(out / KEY_NUMBERS).rows
    text = render_report(summary, keys)
    atomic_write_text(out / REPORT, text)
    return text


def _published_sources(summary: dict) -> set:
    return {p["source"] for p in summary["published"]}


def render_report(summary: dict, keys: list) -> str:
    lines = ["# The paper's figures, regenerated", "",
             f"{summary['paper']}.", "",
             f"Plan `{summary['plan']}`; the whole report is regenerated by `{summary['command']}` (a run "
             f"that stopped continues where it stopped). Status: {summary['status']}.", ""]
    if summary["incomplete_figures"]:
        lines += ["Figures not (yet) complete: " + ", ".join(f"`{n}`" for n in summary["incomplete_figures"])
                  + " (run the command of each section).", ""]
    lines += _comparison_section(summary, keys)
    for fig in summary["figures"]:
        lines += _figure_section(fig, [k for k in keys if k["figure"] == fig["name"]], summary)
    if summary["notes"]:
        lines += ["## Notes from the computation", ""]
        lines += [f"- `{n['task']}`: {n['message']}" for n in summary["notes"]]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _comparison_section(summary: dict, keys: list) -> list:
    published = _published_sources(summary)
    seen, rows = set(), []
    for k in keys:
        if k["reference_source"] not in published:
            continue
        ident = (k["quantity"], k["model"], k["branch"], k["omega"])
        if ident in seen:
            continue
        seen.add(ident)
        rows.append(k)
    lines = ["## Our numbers against the published ones", ""]
    if not rows:
        return lines + ["No key number with a published value has been computed yet.", ""]
    figure_index = {f["name"]: f["index"] for f in summary["figures"]}
    lines += ["Verdict: the difference against our error bar combined with the published error where the paper "
              "states one (the authors' theory thresholds and values read off a figure have none).", "",
              "| figure | quantity | model | ours | published | difference | verdict |", "|---|---|---|---|---|---|---|"]
    for k in rows:
        lines.append(f"| {figure_index[k['figure']]} | {k['label']} | {k['model']} | "
                     f"{_plus_minus(k['ours'], k['ours_error'])} | {_plus_minus(k['reference'], k['reference_error'])}"
                     f" | {number_text(k['difference'], 3)} | {k['verdict']} |")
    counted = [k for k in rows if not _finite_size(k)]
    differ = [k for k in counted if k["verdict"] == DIFFERS]
    agree = [k for k in counted if k["verdict"] == AGREES]
    others = len(counted) - len(differ) - len(agree)
    apart = len(rows) - len(counted)
    lines += ["", f"{len(agree)} agree and {len(differ)} differ by more than the stated precision of both sides "
                  "(our error bar combined with the published error, or with one unit in the last digit the paper "
                  "prints)" + (f"; {others} have no error bar to compare with" if others else "")
              + (f"; {apart} more set gradient descent at finite d beside the infinite-d value and are not counted "
                 "(their difference holds the finite-size shift)" if apart else "")
              + ". Each figure's section gives the evidence for those that differ.", ""]
    return lines


def _finite_size(key: dict) -> bool:
    """A key number of gradient descent at finite ``d`` set beside a theory value of ``d -> infinity``
    (``alpha_c_gd``, ``alpha_l_gd``): not a like-for-like comparison."""
    return str(key["quantity"]).endswith("_gd")


def _figure_section(fig: dict, keys: list, summary: dict) -> list:
    lines = [f"## Figure {fig['index']}: {fig['title']}", "", fig["what"], "",
             f"Regenerate it alone: `{fig['command']}`. Its data: `{fig['data']}`.", ""]
    if not fig["complete"]:
        why = fig.get("error") or f"{fig['missing_tasks']} of its {fig['tasks']} tasks are not done"
        return lines + [f"Not drawn: {why}.", ""]
    png = next((f for f in fig["files"] if f.endswith(".png")), None)
    if png:
        lines += [f"![{fig['title']}]({png})", ""]
    if keys:
        lines += ["| quantity | ours | how | compared with | source | difference | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for k in keys:
            lines.append(f"| {k['label']} | {_plus_minus(k['ours'], k['ours_error'])} | {k['ours_how']} | "
                         f"{_plus_minus(k['reference'], k['reference_error'])} | {k['reference_source'] or '-'} | "
                         f"{number_text(k['difference'], 3)} | {k['verdict'] or '-'} |")
        lines.append("")
    lines += _evidence(fig, keys, summary)
    lines += _gamp_section(fig)
    lines += _authors_points(fig)
    return lines


def _gamp_section(fig: dict) -> list:
    """GAMP's means beside gradient descent's at each point (``fig["gamp"]``, :func:`gamp_table`)."""
    entries = fig.get("gamp")
    if not entries:
        return []

    def cell(m):
        return "-" if m is None else _plus_minus(m["value"], m["error"])

    paired = [q for q in GAMP_TABLE if any(e["gd"][q] is not None for e in entries)]
    alone = [q for q in GAMP_TABLE if q not in paired] + ["iterations", "risk_gradient_norm"]
    lines = ["### GAMP beside gradient descent", "",
             "GAMP's mean and standard error over its runs that converged (a run that did not is counted, "
             "not averaged; `-`: none converged), beside gradient descent's over its runs at the same d, alpha and "
             "start where this figure has it; `risk_gradient_norm` is |dR/dQ| / |lam Q| at GAMP's fixed point.", "",
             "| alpha | start | d | GAMP converged | " + " | ".join(f"{q} GAMP | {q} GD" for q in paired)
             + "".join(f" | {q} GAMP" for q in alone) + " |",
             "|---|---|---|---|" + "---|---|" * len(paired) + "---|" * len(alone)]
    for e in entries:
        lines.append(f"| {number_text(e['alpha'], 4)} | {e['init']} | {e['d']} | {e['converged']} of {e['runs']} | "
                     + " | ".join(f"{cell(e['gamp'][q])} | {cell(e['gd'][q])}" for q in paired)
                     + "".join(f" | {cell(e['gamp'][q])}" for q in alone) + " |")
    failed = sum(e["not_converged"] for e in entries)
    if failed:
        lines += ["", f"{failed} of {sum(e['runs'] for e in entries)} GAMP runs did not converge; each is a row of "
                      "`data/gamp_runs.csv` with `converged` False, its reason and the plateau its iterate wandered "
                      "over."]
    return lines + [""]


def _authors_points(fig: dict) -> list:
    """The authors' stored fixed points of the figure's models beside ours: per file the largest
    differences, then every field at every ``alpha``."""
    from .authors import SOURCE, worst

    records = fig.get("authors_points")
    if not records:
        return []
    files = list(dict.fromkeys(r["file"] for r in records))
    lines = ["### The authors' stored fixed points beside ours", "",
             f"Theirs: {SOURCE}; their `mse / 2` is set beside our test error and their `-Phi` beside our "
             f"training loss. Ours: {fig['authors_precision']} precision at their `alpha` values"
             + (" (draft states no error, so the differences are not given in our errors)"
                if fig["authors_precision"] == "draft" else "") + ". A point of theirs whose overlaps put it on "
             "another branch than its file names is marked `*`.", "",
             "Thresholds: printed in the paper (the authors' solver, hard-coded in their plotting notebook), given by "
             "their stored points (linear interpolation between their alpha values; alpha_l where their semantic "
             "`mse / 2` meets our linear baseline of the model) and ours:", "",
             "| model | threshold | printed | their stored points | ours | linear baseline used |",
             "|---|---|---|---|---|---|"]
    for t in fig.get("authors_thresholds", []):
        lines.append(f"| {t['model']} | {t['quantity']} | {number_text(t['printed'])} | {number_text(t['stored'], 4)} | "
                     f"{_plus_minus(t['ours'], t['ours_error'])} | {number_text(t['baseline'])} |")
    lines += ["", "| file | branch | field | largest relative difference (at alpha) | largest |difference| in our errors |",
             "|---|---|---|---|---|"]
    for name in files:
        mine = [r for r in records if r["file"] == name]
        for field, w in worst(mine).items():
            lines.append(f"| `{name}` | {mine[0]['branch']} | {field} | {number_text(w['relative'], 3)} "
                         f"({number_text(w['alpha'], 4)}) | {number_text(w['in_our_errors'], 3)} |")
    lines += ["", "<details><summary>every field at every alpha</summary>", "",
              "| file | alpha | field | ours | theirs | difference | in our errors |", "|---|---|---|---|---|---|---|"]
    for r in records:
        mark = "" if r["their_point_on_branch"] else " *"
        lines.append(f"| `{r['file']}` | {number_text(r['alpha'], 4)} | {r['field']} | "
                     f"{_plus_minus(r['ours'], r['ours_error'])} | {number_text(r['theirs'])}{mark} | "
                     f"{number_text(r['difference'], 3)} | {number_text(r['in_our_errors'], 3)} |")
    return lines + ["", "</details>", ""]


def _evidence(fig: dict, keys: list, summary: dict) -> list:
    """For the key numbers that differ from the published value: how our error bar is
    made, the other key numbers of the figure that bear on them, and the project's
    documentation of the comparison."""
    published = _published_sources(summary)
    differ = [k for k in keys if k["verdict"] == DIFFERS and k["reference_source"] in published
              and not k["evidence_for"]]
    if not differ:
        return []
    lines = ["Where ours differ from the published values by more than our error bar: "
             + ", ".join(f"{k['label']} ({k['model']})" for k in differ) + ". The evidence:", ""]
    for how in dict.fromkeys(k["ours_how"] for k in differ):
        lines.append(f"- our error bar: {how};")
    quantities = {(k["quantity"], k["model"]) for k in differ}
    for k in keys:
        if (k["evidence_for"], k["model"]) in quantities:
            against = (f", {number_text(k['difference'], 3)} from the published value"
                       if k["reference_source"] in published else "")
            lines.append(f"- {k['label']}: {_plus_minus(k['ours'], k['ours_error'])} ({k['ours_how']}){against};")
    if fig["pointer"]:
        lines.append(f"- {fig['pointer']}.")
    return lines + [""]

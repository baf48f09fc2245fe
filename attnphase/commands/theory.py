"""``attnphase solve | curve | thresholds | run``: the theory from the command line."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time

from attnphase.costs import check_theory_points
from attnphase.errors import UsageError
from attnphase.options import (GRID_HELP, add_alias, add_dask_options, add_json_option,
                               add_model_options, add_precision_option, add_processes_option, check_dask_options,
                               check_distinct_outputs, check_not_input, check_output, failed, model_from_args,
                               parse_list, parse_range, positive_number, print_json, progress_bar, solve_processes,
                               typed_attention_budget)
from numerics.api import INTEGRATORS
from numerics.api import GENERAL_BRANCHES

log = logging.getLogger(__name__)


def _common(p, precision_help: str = ""):
    add_model_options(p)
    add_json_option(p)
    add_precision_option(p, precision_help)


def _integrator_option(p):
    p.add_argument("--integrator", choices=INTEGRATORS, default="auto",
                   help="channel integrator: lines (the line quadrature of the two-token rank-one model), qmc "
                        "(randomised quasi-Monte Carlo, any model), auto (lines where it applies; default)")


def _alphas_option(p, default: str, what: str):
    """``--alphas`` (a grid; ``--alpha`` is its old spelling here)."""
    p.add_argument("--alphas", default=default, metavar="GRID", help=f"{what}: {GRID_HELP} (default {default})")
    add_alias(p, "--alpha", "alphas")


#: what the theory commands cost, measured on a 2-core machine (README, "Results on the default model")
GENERAL_COST = ("The general model (--tokens, --rank, --teacher-rank, --positions, or --integrator qmc) is solved "
                "by quasi-Monte Carlo: a fast fixed point of (3, 1, 1) or (2, 2, 1) in about 3-4 s, larger "
                "models and finer rules longer.")


def register(sub):
    p = sub.add_parser("solve", help="fixed point(s) of the saddle-point equations at one alpha",
                       description="Solve the saddle-point equations at one alpha on one branch or all of them, "
                                   "and print every field with its error estimate, the test error and the "
                                   "training loss. Cost on 2 cores: about 1 s per branch at fast (the default three branches at "
                                   "alpha = 2: 3.5 s with the start), about 12 s per branch at high. "
                                   + GENERAL_COST)
    p.add_argument("--alpha", type=positive_number, required=True, help="samples per dimension (required)")
    p.add_argument("--branch", choices=GENERAL_BRANCHES + ("all",), default="all",
                   help="a branch, or all (default); mixed needs --rank >= 2")
    _common(p)
    _integrator_option(p)
    add_processes_option(p)
    p.add_argument("--stability", action="store_true",
                   help="also the replica-symmetric stability of each converged point (rs_stability: the replicon eigenvalue of the "
                        "prox's smooth response, stable only below 1; rs_switching: the weight of the switching "
                        "surfaces, unstable at zero temperature wherever above 0; docs/gamp.md, section 5; about 1-2 s "
                        "a point)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("curve", help="both branches by continuation in alpha, to a tidy CSV",
                       description="Follow branches by continuation along an alpha grid and write one CSV row per "
                                   "(alpha, branch). Cost on 2 cores: about 1.5-2 s of CPU per point and branch "
                                   "at fast, most of it locating where a branch ends (the default grid: about a "
                                   "minute), a tenth of a second at draft. " + GENERAL_COST)
    _alphas_option(p, "0.1:2.5:25", "the alpha grid")
    p.add_argument("--branches", default="semantic,positional", help="comma-separated (default semantic,positional)")
    p.add_argument("--out", default="curve.csv", help="CSV file to write (default curve.csv)")
    p.add_argument("--figure", action="store_true",
                   help="also draw q, the overlaps and the test error against alpha beside the CSV (.png, .pdf)")
    p.add_argument("--stability", action="store_true",
                   help="also the replica-symmetric stability of each converged point (rs_stability: the replicon eigenvalue of the "
                        "prox's smooth response, stable only below 1; rs_switching: the weight of the switching "
                        "surfaces, unstable at zero temperature wherever above 0; docs/gamp.md, section 5; about 1-2 s "
                        "a point)"" (--figure marks the points that are not stable)")
    p.add_argument("--compare", default="", metavar="CSV[,CSV...]",
                   help="with --figure: curve CSVs of other models (e.g. another --attention) to draw beside "
                        "(default none)")
    _common(p)
    _integrator_option(p)
    add_processes_option(p)
    p.set_defaults(func=cmd_curve)

    p = sub.add_parser("thresholds", help="alpha_c and alpha_l with error estimates, spinodals, linear baseline",
                       description="Locate alpha_c (the branches' training losses cross; for the general model "
                                   "every change of the global branch) and alpha_l (the global minimiser beats "
                                   "the linear baseline) with error estimates, and the spinodals. Cost on 2 "
                                   "cores: about 7 s (fast), about 60 s (high). " + GENERAL_COST)
    _alphas_option(p, "0.5:2.5:9", "the bracketing scan, the branches in draft precision, extended where the "
                                   "change or alpha_l lies beyond it")
    p.add_argument("--branches", default="",
                   help="general model: the branches compared (comma-separated; default every branch of the model)")
    p.add_argument("--scan", default="", metavar="CSV",
                   help="general model: reuse the branches of a curve CSV of the same model and precision "
                        "(attnphase curve --out CSV) as the scan; its alphas replace --alphas (default: solve "
                        "the scan)")
    _common(p)
    _integrator_option(p)
    add_processes_option(p)
    g = add_dask_options(p, embedded=False)
    g.description = ("general model: with --scheduler the branches of the scan are walked side by side on that "
                     "cluster's workers; by default one after another here")
    p.set_defaults(func=cmd_thresholds)

    p = sub.add_parser("run", help="the main job: branches, baseline, thresholds and the figure, into --out",
                       description="The main job: both branches along the alpha grid at draft precision "
                                   "(curve.csv and the figure), the linear baseline, and alpha_c, alpha_l and "
                                   "the spinodals at --precision (summary.json). Cost on 2 cores: about 11 s "
                                   "with the defaults. " + GENERAL_COST)
    p.add_argument("--out", default="results", help="output directory (default results/)")
    _alphas_option(p, "0.05:2.5:15", "the curve grid, always drawn at draft precision")
    _common(p, "precision of the thresholds (default fast; the curve is always draft). ")
    _integrator_option(p)
    p.set_defaults(func=cmd_run)


def _fixed(value: float, width: int, decimals: int) -> str:
    """``value`` to ``decimals`` places, never ``-0.000000``: a value that rounds to zero is ``0``
    (round first, then + 0.0, which turns -0.0 into 0.0)."""
    return f"{round(float(value), decimals) + 0.0:{width}.{decimals}f}"


def _fp_table(points):
    lines = [f"{'alpha':>7} {'branch':>10} {'q':>10} {'m':>10} {'V':>10} {'theta':>10} {'test_err':>11} "
             f"{'train_loss':>11} {'conv':>5} {'global':>6}"]
    for p in points:
        q, m, V, theta = (p.values[n] for n in ("q", "m", "V", "theta"))
        lines.append(f"{p.alpha:7.4f} {p.branch:>10} {_fixed(q, 10, 6)} {_fixed(m, 10, 6)} {_fixed(V, 10, 5)} "
                     f"{_fixed(theta, 10, 6)} {p.test_error:11.4e} {p.train_loss:11.4e} {str(p.converged):>5} "
                     f"{str(p.global_minimum):>6}")
    return "\n".join(lines)


def _with_error(value: float, error: float, zero: bool) -> str:
    """A value as a person reads it, to the digits its error supports (``0.1148173073771 +- 4.5e-12``,
    :func:`numerics.api.value_with_error`); ``0`` where the branch holds the field at zero; the value
    alone where there is no estimate (draft precision)."""
    from numerics.api import value_with_error

    return "0 (by symmetry)" if zero else value_with_error(value, error)


def _fields_table(points) -> str:
    """``solve``: each field of each branch found, with its error estimate (for the general model
    the packed components, the gauge invariants of docs/theory.md, section 4.9, test error and
    training loss); then each branch's status, iterations, residual and whether it is the global
    minimum."""
    from numerics.api import zero_by_symmetry

    # where each matrix is 1 x 1 its entry is its invariant: the invariants are not repeated
    first = points[0]
    names = [n for n in first.values if not (first.one_by_one and n[:n.rfind("_")] in first.invariants)]
    width = max(24, *(len(p.branch) + 2 for p in points))
    label = max(12, *(len(n) + 2 for n in names))
    lines = [f"alpha = {points[0].alpha:g}, precision {points[0].precision}",
             f"{'':{label}}" + "".join(f"{p.branch:>{width}}" for p in points)]
    for name in names:
        lines.append(f"{name:{label}}" + "".join(
            f"{_with_error(p.values[name], p.error.get(name, math.nan), name in zero_by_symmetry(p.branch)):>{width}}"
            for p in points))
    lines.append(f"{'status':{label}}" + "".join(f"{p.status:>{width}}" for p in points))
    lines.append(f"{'iterations':{label}}" + "".join(f"{p.iterations:>{width}d}" for p in points))
    lines.append(f"{'residual':{label}}" + "".join(f"{p.residual:>{width}.1e}" for p in points))
    compared = {True: "yes", False: "no"}
    lines.append(f"{'global min.':{label}}" + "".join(f"{compared.get(p.global_minimum, 'not compared'):>{width}}"
                                                      for p in points))
    if all(not math.isfinite(e) for p in points for e in p.error.values()):
        lines.append(f"no error estimates: precision {points[0].precision} solves with one rule (fast and high "
                     f"state them)")
    for p in points:
        if not p.converged:
            lines.append(f"{p.branch}: {p.diagnostics.get('reason', p.status)}")
    return "\n".join(lines)


def _check_branches(spec, args, names, flag: str = "--branches"):
    """How ``names`` are solved (:func:`numerics.api.method`); refuses (exit 2) an integrator or branch
    the model does not have."""
    from numerics.api import IntegratorError, method

    if "mixed" in names and spec.rank < 2:
        raise UsageError(f"{flag}: the mixed branch needs --rank >= 2, got rank {spec.rank}")
    try:
        return method(spec, names, args.integrator)
    except IntegratorError as exc:
        raise UsageError(f"--{exc}") from None


def _joined(values) -> str:
    return ",".join(f"{v + 0.0:.5g}" for v in values)  # + 0.0: no -0


def _invariants_table(points):
    """One line per point: the gauge invariants (docs/theory.md, section 4.9), test error and
    training loss with their stated errors, status and global minimum."""
    lines = [f"{'alpha':>7} {'branch':>10} {'eig q':>20} {'sv m':>18} {'sv theta':>18} {'test_err':>20} "
             f"{'train_loss':>20} {'status':>9} {'global':>6}"]
    for p in points:
        inv = p.invariants
        status = "ok" if p.converged else "FAILED"
        lines.append(f"{p.alpha:7.4f} {p.branch:>10} {_joined(inv['q_eigenvalues']):>20} "
                     f"{_joined(inv['m_singular_values']):>18} {_joined(inv['theta_singular_values']):>18} "
                     f"{p.test_error:11.5e}+-{p.error.get('test_error', float('nan')):7.1e} "
                     f"{p.train_loss:11.5e}+-{p.error.get('train_loss', float('nan')):7.1e} {status:>9} "
                     f"{str(p.global_minimum):>6}")
    for p in points:
        if not p.converged:
            lines.append(f"{p.branch} at alpha = {p.alpha:g}: {p.status}")
    return "\n".join(lines)


def _points_table(points) -> str:
    """The points as a person reads them: the entries where each matrix is ``1 x 1``, else the gauge
    invariants."""
    return _fp_table(points) if all(p.one_by_one for p in points) else _invariants_table(points)


def _absent(points, branches, alpha: float) -> list:
    """A note for each of ``branches`` without a point: its solve fell onto a smaller branch."""
    found = {p.branch for p in points}
    return [f"no {b} branch at alpha = {alpha:g}: its solve ends on a smaller branch" for b in branches
            if b not in found]


def _print_solve(points, payload, absent, args, t0: float) -> None:
    """The solve's table (or JSON on stdout) and a note for each absent branch (on stderr with
    --json, so that stdout stays one JSON document)."""
    if args.json:
        print_json(payload)
        for note in absent:
            sys.stderr.write(f"attnphase solve: note: {note}\n")
        return
    print(_fields_table(points) if points else "no branch found")
    for p in points:
        if p.stability is not None:
            st = p.stability
            print(f"{p.branch}: rs_stability {st['rs_stability']:.4g} +- {st['rs_stability_error']:.1g}, rs_switching "
                  f"{st['rs_switching']:.3g} +- {st['rs_switching_error']:.1g} (replica-symmetric stability needs the "
                  f"first below 1 and the second 0; docs/gamp.md, section 5)")
    for note in absent:
        print(f"note: {note}")
    print(f"wall time {time.perf_counter() - t0:.1f} s")


def cmd_solve(args) -> int:
    from numerics.api import branches, solve, solve_all

    spec = model_from_args(args)
    names = branches(spec) if args.branch == "all" else (args.branch,)
    _check_branches(spec, args, names, "--branch")
    t0 = time.perf_counter()
    with typed_attention_budget(args, spec), progress_bar(desc=f"solve alpha={args.alpha:g}"), solve_processes(args):
        if args.branch == "all":
            points = solve_all(spec, args.alpha, args.precision, args.integrator)
        else:
            # one branch is not compared with the others: its global_minimum stays None
            points = [solve(spec, args.alpha, args.branch, args.precision, args.integrator)]
        if args.stability:
            from numerics.api import with_rs_stability

            points = [with_rs_stability(p) for p in points]
        payload = [p.to_dict() for p in points] if args.branch == "all" else points[0].to_dict()
    absent = _absent(points, names, args.alpha) if args.branch == "all" else []
    _print_solve(points, payload, absent, args, t0)
    if not points:
        return failed("solve", f"no branch found at alpha = {args.alpha:g}")
    stuck = [f"{p.branch} ({p.status}, residual {p.residual:.1e})" for p in points if not p.converged]
    return failed("solve", f"not converged at alpha = {args.alpha:g}: {', '.join(stuck)}") if stuck else 0


def _curves(spec, alphas, names, precision, integrator, bar=None, first=None) -> dict:
    """Each branch of ``names`` followed on ``alphas`` (:func:`numerics.api.follow`); ``first()`` is
    called at each point found (the end of a :func:`typed_attention_budget`)."""
    from numerics.api import follow

    def progress(_):
        if first:
            first()
        if bar:
            bar.update(1)

    return {b: follow(spec, alphas, b, precision, integrator, progress=progress) for b in names}


def _marked(curves) -> list:
    """The points of ``curves``, the global minimum marked at each alpha."""
    from numerics.api import mark_global_minima

    return mark_global_minima([p for c in curves.values() for p in c.points])


def _curve_figures(args, spec, rows, spinodals, compare) -> list:
    """``curve --figure``: each branch's defining overlap and test error against alpha with the
    thresholds read off the grid (beside ``--compare`` files if given, the line quadrature's)."""
    stem = os.path.splitext(args.out)[0]
    if not rows:
        return []
    if compare:
        from attnphase.figures import plot_curve_files

        return plot_curve_files([args.out, *compare], stem, default_model=spec)
    from numerics.api import linear_baseline
    from attnphase.figures import grid_thresholds, plot_curves
    from tidyio import read_rows

    rows_back = read_rows(args.out)  # drawn from the file, as plot draws a sweep's
    baseline = linear_baseline(spec).test_error
    marks = {**grid_thresholds(rows_back, baseline), "spinodals": spinodals, "grid": True}
    return plot_curves(rows_back, baseline, marks, stem)


def cmd_curve(args) -> int:
    from tidyio import write_rows

    spec = model_from_args(args)
    alphas = parse_range(args.alphas, "--alphas", positive=True)
    names = parse_list(args.branches, "--branches", choices=GENERAL_BRANCHES)
    compare = parse_list(args.compare, "--compare", allow_empty=True)
    check_output(args.out, "file")
    figures = [os.path.splitext(args.out)[0] + ext for ext in (".png", ".pdf")] if args.figure else []
    for path in figures:
        check_output(path, "file", "--figure")
    check_distinct_outputs({"--out": [args.out], "--figure": figures})
    check_not_input({"--out": [args.out], "--figure": figures}, {"--compare": compare})
    solved = _check_branches(spec, args, names)
    check_theory_points(len(alphas) * len(names), args.precision, not solved.deterministic, "--alphas", "the curve",
                        args)
    if compare and not solved.signed_overlaps:
        raise UsageError("--compare: not available for the general model yet")
    if compare and not args.figure:
        raise UsageError("--compare: needs --figure")
    if compare:
        from attnphase.figures import read_curve_file
        from tidyio import UnreadableFile

        for path in compare:  # checked before the curve is computed
            try:
                read_curve_file(path)
            except UnreadableFile as exc:
                raise UsageError(f"--compare: {exc}") from None
    with typed_attention_budget(args, spec) as budget, progress_bar(len(alphas) * len(names), "curve", "pt") as bar, \
            solve_processes(args):
        curves = _curves(spec, alphas, names, args.precision, args.integrator, bar, first=budget.done)
    points = _marked(curves)
    if args.stability:
        from numerics.api import with_rs_stability

        points = [with_rs_stability(p) for p in points]
    rows = [p.to_row() for p in points]
    write_rows(args.out, rows)
    spin = [s for c in curves.values() for s in c.spinodals]
    notes = [c.note for c in curves.values() if c.note]
    figures = _curve_figures(args, spec, rows, spin, compare) if args.figure else []
    if args.json:
        print_json({"csv": args.out, "rows": len(rows), "spinodals": spin, "notes": notes, "figures": figures})
    else:
        print(f"wrote {len(rows)} rows to {args.out}" + (f"; figures: {', '.join(figures)}" if figures else ""))
        for sp in spin:
            print(_spinodal_line(sp))
        for n in notes:
            print(f"note: {n}")
    if not rows:
        why = f" ({'; '.join(notes)})" if notes else ""
        return failed("curve", f"no point of {', '.join(names)} was found{why}")
    stuck = [f"{p.branch} at alpha = {p.alpha:g}" for p in points if not p.converged]
    return failed("curve", f"{len(stuck)} point(s) not converged: {', '.join(stuck)}") if stuck else 0


def _model_differences(found, asked) -> str:
    """The parameters in which two models differ, as ``name = found (asked value)``."""
    a, b = found.to_columns(), asked.to_columns()
    return ", ".join(f"{k} = {a.get(k, 'none')} (asked {b.get(k, 'none')})" for k in a.keys() | b.keys()
                     if a.get(k) != b.get(k))


def _read_scan(path, spec, precision) -> list:
    """The fixed points of a curve CSV, checked to be of ``spec`` at ``precision`` (exit 2 if not)."""
    from numerics.api import from_row
    from tidyio import UnreadableFile, check_table

    needed = "--scan needs a curve CSV (attnphase curve --out CSV; its rows have an integrator column)"
    try:
        table = check_table(path, ("alpha", "branch", "converged", "train_loss", "precision"), "a curve CSV",
                            numeric=("alpha", "train_loss"), finite=("alpha",))
    except UnreadableFile as exc:
        raise UsageError(f"--scan: {exc}; {needed}") from None
    if "integrator" not in table.header:
        raise UsageError(f"--scan: {path} is a CSV without an integrator column; {needed}")
    try:
        points = [from_row(r) for r in table.rows]
    except KeyError as exc:
        raise UsageError(f"--scan: {path}: a row lacks the column {exc.args[0]}; {needed}") from None
    except ValueError as exc:
        raise UsageError(f"--scan: {path}: a row does not give a fixed point ({exc}); {needed}") from None
    for p in points:
        if p.model != spec:
            raise UsageError(f"--scan: {path} holds another model than asked: {_model_differences(p.model, spec)}")
        if p.precision != precision:
            raise UsageError(f"--scan: {path} was solved at precision {p.precision}, asked --precision {precision}")
    return points


def _print_thresholds(th) -> None:
    """The thresholds as a person reads them: the global branch along the scan (where it was
    scanned), every change of it (``alpha_c`` the first), ``alpha_l``, the baseline, the spinodals
    and the notes."""
    glob = th.global_branches()
    if glob:
        print("global minimum: " + ", ".join(f"{b} at {a:g}" for a, b in glob))
    _print_threshold_values(th)
    print(f"linear baseline test error = {th.linear_test_error:.12g}"
          + (f" +- {th.linear_test_error_error:.1e}" if th.linear_test_error_error > 0 else ""))
    for sp in th.spinodals:
        print(_spinodal_line(sp))
    for n in th.notes:
        print(f"note: {n}")


def _print_threshold_values(th) -> None:
    """Every change of the global branch (``alpha_c`` the first) and ``alpha_l``, one line each."""
    for t in th.transitions:
        print(f"alpha_c = {_threshold_text(t.alpha, t.error)}   {t.below} -> {t.above} ({t.kind})")
    print(f"alpha_l = {_threshold_text(th.alpha_l, th.alpha_l_error)}" if th.alpha_l_status == "ok"
          else f"alpha_l: {th.alpha_l_status}")


def _pm(error: float) -> str:
    return f"+- {error:.1e}" if math.isfinite(error) else "(no error stated at this precision)"


def _threshold_text(value: float, error: float) -> str:
    """``value +- error`` with the value to the error's second significant digit
    (:func:`numerics.api.value_with_error`; 8 decimals where no error is stated)."""
    from numerics.api import value_with_error

    if not (math.isfinite(error) and error > 0):
        return f"{value:.8f} {_pm(error)}"
    return value_with_error(value, error)


def _threshold_failure(th, alphas):
    """Why thresholds ``th`` are not a complete result (``None`` if they are): no change of the
    global branch on the scan, or ``alpha_l`` not found."""
    # the range scanned, which the thresholds may have extended beyond the one asked for
    scanned = [p.alpha for p in th.scan] or list(alphas)
    beyond = max(scanned) > max(alphas) * (1 + 1e-9) or min(scanned) < min(alphas) * (1 - 1e-9)
    extended = (f" (--alphas asked [{min(alphas):.4g}, {max(alphas):.4g}]; the scan went on where the change or "
                f"alpha_l could lie beyond it)") if beyond else ""
    if not th.transitions:
        return (f"the global minimum does not change branch on alpha in [{min(scanned):.4g}, {max(scanned):.4g}] "
                f"({th.global_branches()[0][1]} throughout){extended}")
    return None if th.alpha_l_status == "ok" else f"alpha_l {th.alpha_l_status}{extended}"


def _threshold_dict(th) -> dict:
    d = th.to_dict()
    if th.alpha_l_status != "ok":  # alpha_c found, alpha_l not: null in JSON
        d.update(alpha_l=None, alpha_l_error=None)
    return d


@contextlib.contextmanager
def _branch_mapper(args, n_branches: int):
    """``mapper(function, items)`` on the workers of ``--scheduler`` for the branches' walks of a scan,
    or None (one after another here, their solves' scramblings in ``--workers`` processes): two Dask
    workers walking the branches did not pay in the one run measured (docs/numerics.md, section 12)."""
    from attnphase.sweeps.runner import open_client

    if not args.scheduler:
        yield None
        return
    # with -v, the scheduler's own INFO lines (workers registered, connections) would drown the solver's;
    # Dask gives its modules' loggers levels of their own when it is imported, so each is raised
    import importlib

    importlib.import_module("distributed")
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] == "distributed" and isinstance(logger, logging.Logger):
            logger.setLevel(max(logging.WARNING, logger.level))
    with open_client(args.scheduler, None, n_tasks=n_branches) as client:
        def mapper(function, items):
            return client.gather(client.map(function, list(items), pure=False))

        yield mapper


def cmd_thresholds(args) -> int:
    from attnphase.sweeps import SweepError
    from numerics.api import (COMPETING_BRANCHES, BranchCurve, CrossingBeyondScan, ThresholdError,
                              ThresholdLocationError, branches, linear_baseline, thresholds)

    spec = model_from_args(args)
    check_dask_options(args, embedded=False)
    names = parse_list(args.branches, "--branches", choices=GENERAL_BRANCHES, allow_empty=True)
    if args.scan and not os.path.isfile(args.scan):
        raise UsageError(f"--scan: no such file: {args.scan}")
    # by default the paper's two branches where the line quadrature solves them (and no scan of
    # matrix records is given), every branch of the model otherwise
    default, names = not names, names or COMPETING_BRANCHES
    pair = not args.scan and set(names) == set(COMPETING_BRANCHES) and _check_branches(spec, args, names).deterministic
    if default and not pair:
        names = branches(spec)
    _check_branches(spec, args, names)
    alphas = parse_range(args.alphas, "--alphas", positive=True, min_points=3 if pair else 2)
    if not args.scan:
        check_theory_points(len(alphas) * len(names), "draft", not pair, "--alphas", "the thresholds' scan", args)
    scan = None
    if args.scan:
        points = _read_scan(args.scan, spec, args.precision)
        alphas = sorted({p.alpha for p in points})
        scan = {b: BranchCurve(b, [p for p in points if p.branch == b], []) for b in dict.fromkeys(
            p.branch for p in points)}
    try:
        # the line quadrature's pair and a given scan walk no branches
        walks = 0 if pair or scan is not None else len(names)
        with typed_attention_budget(args, spec) as budget, progress_bar(desc="thresholds", unit="solve") as bar, \
                _branch_mapper(args, walks) as mapper, solve_processes(args):
            th = thresholds(spec, args.precision, alphas, args.integrator, names, scan=scan,
                            progress=_reporter(bar, budget.done), mapper=mapper)
    except ThresholdError as exc:
        # e.g. linear attention: no positional branch, so no alpha_c. Exit status 1 and
        # one line, not a traceback; JSON keeps the baseline, which exists regardless
        message = str(exc) + (_wider_scan(alphas) if isinstance(exc, CrossingBeyondScan) else "")
        if args.json:
            print_json({"alpha_c": None, "alpha_c_error": None, "alpha_l": None, "alpha_l_error": None,
                        "linear_test_error": linear_baseline(spec).test_error, "error": message})
        return failed("thresholds", message)
    except (ThresholdLocationError, SweepError) as exc:
        return failed("thresholds", str(exc))
    if args.json:
        print_json(_threshold_dict(th))
    else:
        _print_thresholds(th)
        print(f"wall time {th.wall_time:.1f} s")
    why = _threshold_failure(th, alphas)
    return failed("thresholds", why) if why else 0


def _wider_scan(alphas) -> str:
    """How to look beyond a scan that the crossing lies outside of (the scan from ``alphas`` had
    already been extended as far as the record says)."""
    return (f"; --alphas START:STOP:N with a range beyond the one scanned looks further (asked: "
            f"{min(alphas):g} to {max(alphas):g})")


def cmd_run(args) -> int:
    """The main job: the branches compared along the grid at draft precision (``curve.csv`` and its
    figure), the linear baseline, and the thresholds at ``--precision`` from the same branches, into
    ``summary.json``."""
    from numerics.api import COMPETING_BRANCHES, ThresholdError, ThresholdLocationError, branches, linear_baseline, \
        thresholds
    from tidyio import folder_summary, write_rows

    spec = model_from_args(args)
    alphas = parse_range(args.alphas, "--alphas", positive=True, min_points=3)
    check_output(args.out, "folder")
    # the paper's two branches where the line quadrature solves them, else every branch of the model
    pair = _check_branches(spec, args, COMPETING_BRANCHES).deterministic
    names = COMPETING_BRANCHES if pair else branches(spec)
    if not pair:
        _check_branches(spec, args, names)
    check_theory_points(len(alphas) * len(names), "draft", not pair, "--alphas", "the curve", args)
    t0 = time.perf_counter()
    csv_path = os.path.join(args.out, "curve.csv")
    summary = {"model": spec.to_dict(), "branches": list(names), "curve_csv": csv_path, "curve_precision": "draft",
               "threshold_precision": args.precision}
    # summary.json says "incomplete" from the start until every file is written (a crash, a
    # failure or Ctrl-C leaves it so, with the error)
    with folder_summary(os.path.join(args.out, "summary.json"), summary):
        with typed_attention_budget(args, spec) as budget, progress_bar(len(names) * len(alphas), "branches",
                                                                         "pt") as bar:
            curves = _curves(spec, alphas, names, "draft", args.integrator, bar, first=budget.done)
        if any(not c.points for c in curves.values()) and "trivial" not in curves:
            # a regenerated model may lack a branch (linear attention has neither on [0.05, 2.5]):
            # the trivial one is then drawn too, so that the curve and figure are not empty
            curves = {**curves, **_curves(spec, alphas, ("trivial",), "draft", args.integrator)}
        points = _marked(curves)
        rows = [p.to_row() for p in points]
        write_rows(csv_path, rows)
        baseline = linear_baseline(spec)
        th, error = None, None
        try:
            with progress_bar(desc="thresholds", unit="solve") as bar:
                th = thresholds(spec, args.precision, alphas, args.integrator, scan=curves, progress=_reporter(bar))
            error = _threshold_failure(th, alphas)
        except (ThresholdError, ThresholdLocationError) as exc:
            error = f"thresholds: {exc}"
        summary.update(_run_summary(th, error, baseline, curves))
        summary["figures"] = _run_figures(rows, baseline, summary, args.out)
        summary["wall_time"] = time.perf_counter() - t0
        if error:
            summary.update(status="incomplete", error=error)
    if args.json:
        print_json(summary)
    else:
        shown = [p for p in points if p.global_minimum]
        print(f"the global minimum at each alpha: {len(shown)} of the {len(points)} points (every branch is in "
              f"{csv_path})")
        print(_points_table(shown))
        if th is not None:
            _print_threshold_values(th)
            print(f"linear baseline test error = {baseline.test_error:.10g}")
        print(f"wrote {csv_path}, {os.path.join(args.out, 'summary.json')}, {', '.join(summary['figures'])}")
        print(f"wall time {summary['wall_time']:.1f} s")
    return failed("run", f"{error} (summary.json marks the folder incomplete)") if error else 0


def _run_summary(th, error, baseline, curves) -> dict:
    """``run``'s summary, the same for every model: ``alpha_c``, ``alpha_l`` (``None`` where not
    found), the baseline, the spinodals and the thresholds' own record."""
    if th is None:
        th_dict = {"error": error.split(": ", 1)[-1]}
    else:
        th_dict = _threshold_dict(th)
    return {"alpha_c": th.alpha_c if th else None, "alpha_c_error": th.alpha_c_error if th else None,
            "alpha_l": th_dict.get("alpha_l"), "alpha_l_error": th_dict.get("alpha_l_error"),
            "linear_test_error": baseline.test_error,
            "spinodals": th.spinodals if th else [s for c in curves.values() for s in c.spinodals],
            "thresholds": th_dict}


def _run_figures(rows, baseline, summary, out) -> list:
    """``run``'s figure: each branch's defining overlap and test error, with the thresholds."""
    from attnphase.figures import plot_curves

    return plot_curves(rows, baseline.test_error, summary, os.path.join(out, "branches")) if rows else []


def _spinodal_line(sp: dict) -> str:
    side = f" ({sp['side']} end)" if sp.get("side") else ""
    return f"spinodal: {sp['branch']} branch ends at alpha = {sp['alpha']:.5f} +- {sp['alpha_error']:.1e}{side}"


def _reporter(bar, first=None):
    """A ``progress`` callback of the numerics: a message (the root finders) on the bar and in the
    log, or a count of solves done; ``first()`` is called at each (the end of a budget)."""
    def report(message):
        if first:
            first()
        if isinstance(message, int):
            bar.update(message)
            return
        log.info("%s", message)
        bar.set_postfix_str(str(message)[:60], refresh=False)
        bar.update(1)

    return report

"""``attnphase phase-diagram`` and ``attnphase plot``: sweeps over the ``(alpha, omega)`` plane (:mod:`sweeps`).

Heavy modules (dask, matplotlib, the solver, torch) are imported inside the command
functions, never at registration.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attnphase.costs import check_diagram, check_grid, check_simulations
from attnphase.errors import UsageError, require_simulation
from attnphase.options import whole_number
from attnphase.options import (GRID_HELP, add_alias, add_dask_options, add_json_option, add_model_options,
                               add_precision_option, check_dask_options, check_not_input, check_output, failed,
                               model_from_args, parse_list, parse_range, print_json,
                               typed_attention_budget)
from validation.run_settings import DTYPE_NAMES, OPTIMIZERS

FIGURE_FORMATS = ("png", "pdf", "svg")
DEFAULT_OMEGA = "0:0.45:10"
DEFAULT_ALPHA = "0.05:2.5:25"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "phase-diagram", conflict_handler="resolve",
        help="theory (and simulations) over an (alpha, omega) grid, on Dask, resumable",
        description="Follow the branches along the alpha grid for every omega (semantic and positional; for "
                    "the general model every branch it has, or --branches), find alpha_c(omega) (for the "
                    "general model the first change of the global branch, all changes in thresholds.csv), "
                    "alpha_l(omega) and the spinodals, and/or simulate the finite-size model on the grid. "
                    "Tasks (one per omega column, one per simulated run) run on an embedded Dask "
                    "LocalCluster or on --scheduler. Every finished task is appended to tidy CSVs in --out "
                    "at once; re-running the same command resumes. Exit status 1 when a task failed "
                    "(see OUT/failures.csv), 2 on bad input. Simulations need the simulation extra (pip install "
                    "'attnphase[simulation]'). Cost on 2 cores: about 9 minutes for the default theory grid "
                    "(10 x 25 points, fast); a simulated point costs about 7 s per run at d = 1000.")
    add_model_options(p)
    # the grid replaces the model group's single --omega (conflict_handler="resolve"), which stays
    # as the grid's old spelling
    p.add_argument("--omegas", default=DEFAULT_OMEGA, metavar="GRID",
                   help=f"the omega grid: {GRID_HELP} (default {DEFAULT_OMEGA})")
    add_alias(p, "--omega", "omegas")
    p.add_argument("--alphas", default=DEFAULT_ALPHA, metavar="GRID",
                   help=f"the alpha grid: {GRID_HELP} (default {DEFAULT_ALPHA})")
    add_alias(p, "--alpha", "alphas")
    p.add_argument("--what", default="theory", choices=("theory", "simulation", "both"),
                   help="what to compute (default theory)")
    p.add_argument("--branches", default="",
                   help="general model: the branches followed in each omega column (comma-separated; default "
                        "every branch of the model: semantic, positional, trivial, and mixed for --rank >= 2)")
    add_precision_option(p, "theory precision (default fast). ")
    p.add_argument("--stability", action="store_true",
                   help="also the replica-symmetric stability of each converged theory point (rs_stability, "
                        "rs_switching and their errors in theory.csv; docs/gamp.md, section 5; about 1-2 s a "
                        "point of a branch); the maps mark with a cross where the global branch is not "
                        "replica-symmetric stable")
    p.add_argument("--out", default="phase_out", help="output folder (default phase_out)")
    g = add_dask_options(p)
    g.add_argument("--no-plot", action="store_true", help="do not draw the figures at the end")
    s = p.add_argument_group("simulation (--what simulation|both; docs/theory.md, section 1)")
    s.add_argument("--d", type=whole_number, default=1000, help="dimension (default 1000)")
    s.add_argument("--seeds", type=whole_number, default=1, help="runs per grid point and start (default 1)")
    s.add_argument("--seed", type=whole_number, default=0,
                   help="base seed; run k uses SeedSequence(seed, spawn_key=(k,)) (default 0)")
    s.add_argument("--steps", type=whole_number, default=5000, help="full-batch steps (default 5000)")
    s.add_argument("--lr", type=float, default=None, help="learning rate (default 0.15 for gd, 0.01 for adam)")
    s.add_argument("--optimizer", default="gd", choices=OPTIMIZERS, help="optimiser (default gd)")
    s.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, help="working dtype (default float32)")
    s.add_argument("--n-test", type=whole_number, default=10000, help="fresh test samples per run (default 10000)")
    add_json_option(p)
    p.set_defaults(func=cmd_phase_diagram)

    q = subparsers.add_parser(
        "plot", help="redraw a phase diagram from its CSV alone",
        description="Draw the colour maps (training-loss difference, or the global branch for the general "
                    "model; global test error minus the linear baseline) over (alpha, omega) from theory.csv, "
                    "simulation.csv or *_points.csv, with "
                    "alpha_c, alpha_l and the spinodals from thresholds.csv (next to FILE by default). "
                    "Cost: a few seconds.")
    q.add_argument("file", metavar="FILE.csv", help="a CSV written by attnphase phase-diagram")
    q.add_argument("--thresholds", default=None, help="thresholds CSV (default: thresholds.csv next to FILE)")
    q.add_argument("--no-thresholds", action="store_true", help="draw no threshold curves")
    q.add_argument("--out", default=None, help="output folder (default: FILE's folder)")
    q.add_argument("--formats", default="png,pdf", help="comma-separated figure formats (default png,pdf)")
    q.set_defaults(func=cmd_plot)


def config_from_args(args):
    """The :class:`attnphase.sweeps.config.SweepConfig` of parsed arguments; bad input raises UsageError
    (or the library's own bad-input errors)."""
    from numerics.api import GENERAL_BRANCHES
    from attnphase.sweeps.config import SweepConfig

    omegas = parse_range(args.omegas, "--omegas")
    alphas = parse_range(args.alphas, "--alphas", positive=True)
    check_grid(len(omegas), len(alphas))
    for w in omegas:  # checked here so that the message names the grid option
        if not 0.0 <= w <= 1.0:
            raise UsageError(f"--omegas: values must lie in [0, 1], got {w:g}")
    args_at = argparse.Namespace(**{**vars(args), "omega": omegas[0]})
    spec = model_from_args(args_at, derives=args.what != "simulation")
    if args.what != "theory":
        check_simulations(len(omegas) * len(alphas) * args.seeds * 2, args.d, max(alphas), args.steps, args.n_test,
                          spec.tokens, spec.rank, args.dtype, args)
    if args.what != "simulation":  # refused here, not by every task on the workers
        from numerics.api import check_model_range

        check_model_range(spec)
    branches = parse_list(args.branches, "--branches", choices=GENERAL_BRANCHES, allow_empty=True)
    if args.stability and args.what == "simulation":
        raise UsageError("--stability: the stability is the theory's; give --what theory or both")
    check_dask_options(args)
    if args.what != "simulation":
        from numerics.api import method

        check_diagram(len(omegas), len(alphas), args.precision, not method(spec).deterministic, args, args.stability)
    return SweepConfig(spec=spec, omegas=omegas, alphas=alphas, what=args.what, precision=args.precision,
                       branches=tuple(branches),
                       d=args.d, seeds=args.seeds, seed=args.seed, steps=args.steps, lr=args.lr,
                       optimizer=args.optimizer, dtype=args.dtype, n_test=args.n_test,
                       stability=args.stability)


def cmd_phase_diagram(args, theory_task=None, simulation_task=None, client=None) -> int:
    """The command. ``theory_task``/``simulation_task``/``client`` are for tests (fakes)."""
    config = config_from_args(args)
    if config.what != "theory" and simulation_task is None:
        require_simulation()
    check_output(args.out, "folder")
    if config.what != "simulation" and theory_task is None:
        with typed_attention_budget(args, config.spec):  # derived here: the workers read the cache
            pass
    from attnphase.sweeps.runner import run_sweep

    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:  # Dask's INFO chatter only with -vv
        import distributed  # noqa: F401  (its import configures the "distributed" logger: do it first)

        logging.getLogger("distributed").setLevel(logging.WARNING)

    summary = run_sweep(config, args.out, scheduler=args.scheduler, workers=args.workers, client=client,
                        theory_task=theory_task, simulation_task=simulation_task, progress=args.progress,
                        plot=not args.no_plot)
    if args.json:
        print_json(summary)
    else:
        out = sys.stdout
        out.write(f"{summary['tasks']} tasks: {summary['skipped']} already done, "
                  f"{len(summary['computed'])} computed, {len(summary['failed'])} failed "
                  f"({summary['wall_time']:.1f} s) -> {summary['out']}\n")
        for w in summary["notes"]:
            out.write(f"note: {w['task']}: {w['message']}\n")
        for f in summary["figures"]:
            out.write(f"wrote {f}\n")
    for f in summary["failed"]:
        sys.stderr.write(f"FAILED {f['task']}: {f['error']}\n")
    if summary["failed"]:
        failures = Path(summary["out"]) / "failures.csv"
        return failed("phase-diagram", f"{len(summary['failed'])} task(s) failed (logged in {failures}); "
                                       f"re-run the same command to retry them")
    stuck = summary.get("not_converged", [])
    if stuck:
        from attnphase.sweeps.store import THEORY_CSV

        where = ", ".join(f"omega={p['omega']:g} alpha={p['alpha']:g} {p['branch']}" for p in stuck[:5])
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        return failed("phase-diagram", f"{len(stuck)} point(s) not converged: {where}{more} (kept in "
                                       f"{THEORY_CSV} with converged = False and drawn grey)")
    return 0


def cmd_plot(args) -> int:
    from tidyio import UnreadableFile
    from attnphase.sweeps import figures

    formats = parse_list(args.formats, "--formats", choices=FIGURE_FORMATS)
    out = args.out if args.out is not None else str(Path(args.file).parent)
    check_output(out, "folder")
    # every input is read and checked before drawing, and an error names its own file
    try:
        figures.read_diagram_file(args.file)
    except UnreadableFile as exc:
        raise UsageError(f"FILE.csv: {exc}") from None
    thresholds = False if args.no_thresholds else (args.thresholds or figures.default_thresholds(args.file))
    if thresholds:
        try:
            figures.read_thresholds(thresholds)
        except UnreadableFile as exc:
            flag = "--thresholds" if args.thresholds else "thresholds.csv next to FILE.csv (or --no-thresholds)"
            raise UsageError(f"{flag}: {exc}") from None
    check_not_input({"--out": figures.figure_paths(args.file, out, formats)},
                    {"FILE.csv": [args.file], "--thresholds": [thresholds] if thresholds else []})
    written = figures.plot_file(args.file, out, thresholds=thresholds, formats=formats)
    for w in written:
        sys.stdout.write(f"wrote {w}\n")
    return 0

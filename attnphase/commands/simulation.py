"""``attnphase simulate`` and ``attnphase validate``: finite-size simulations and their comparison
with the theory (:mod:`validation`).

torch is imported inside the command functions, never at registration.
"""
from __future__ import annotations

import argparse
import logging
import math
import sys

from attnphase.commands.gamp import add_damping_option, dampings
from attnphase.costs import check_gamp_runs, check_simulations
from attnphase.errors import UsageError, require_simulation
from attnphase.options import (GRID_HELP, add_alias, add_instance_options, add_json_option, add_model_options, add_precision_option,
                               check_output, failed, model_from_args, parse_list, parse_range, print_json,
                               progress_bar, typed_attention_budget, whole_number)
from validation.run_settings import (DTYPE_NAMES, INITS, METHODS, OPTIMIZERS, check_alpha, check_dimension,
                                     check_run_settings, check_start)

log = logging.getLogger(__name__)


def _add_training_options(p: argparse.ArgumentParser, gamp: bool = False) -> None:
    g = p.add_argument_group("training (docs/theory.md, section 1.3)")
    g.add_argument("--steps", type=whole_number, default=5000, help="full-batch steps (default 5000)")
    g.add_argument("--lr", type=float, default=None, help="learning rate (default 0.15 for gd, 0.01 for adam)")
    g.add_argument("--optimizer", default="gd", choices=OPTIMIZERS, help="optimiser (default gd)")
    if gamp:
        g.add_argument("--dtype", default=None, choices=DTYPE_NAMES,
                       help="working dtype (default float32); with --method gamp the storage of the design X "
                            "(default float64)")
    else:
        g.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, help="working dtype (default float32)")
    g.add_argument("--seed", type=whole_number, default=0,
                   help="integer seed; run k uses numpy SeedSequence(seed, spawn_key=(k,)) (default 0)")
    g.add_argument("--n-test", type=whole_number, default=10000, help="fresh samples for the test error (default 10000)")
    g.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="train the finite-size model (docs/theory.md, section 1) over seeds",
                              description="Train the tied rank-1 attention student on the data of docs/theory.md, "
                                          "section 1, "
                                          "one run per seed, and report test error, training loss, overlaps "
                                          "and the linear baseline. Needs the simulation extra (pip install "
                                          "'attnphase[simulation]'). Cost on 2 cores: about 7 s per run of 5000 "
                                          "steps at d = 1000 (the defaults), growing as d^2 * alpha.")
    add_instance_options(p)
    _add_training_options(p)
    add_model_options(p)
    add_json_option(p)
    p.set_defaults(func=cmd_simulate)

    v = subparsers.add_parser("validate", help="theory vs simulation over an alpha grid (or a d-scan)",
                              description="Simulate both informed starts over an alpha grid, compare with the "
                                          "theory of the branch each start converged to, write a tidy CSV and a "
                                          "figure; exit 1 when some |z| exceeds --tolerance. With --d-scan: fit "
                                          "a + b/d at fixed alpha and compare a with the theory. A model other "
                                          "than the two-token rank-one one (--tokens, --rank, --teacher-rank, "
                                          "--positions) is compared through its invariants, run by run on the "
                                          "branch each run reached, and against the theory's global minimum. "
                                          "Needs the simulation extra (pip install 'attnphase[simulation]'). "
                                          "Cost on 2 cores: 5-10 minutes with the defaults (40 runs of 5000 "
                                          "steps at d = 1000, about 7 s each, and the theory curves); "
                                          "finished runs are kept under OUT/runs. With --method gamp each run "
                                          "is message passing (docs/gamp.md) on the same seeds' instances "
                                          "instead, without torch, about 1-4 s a run at d = 1000; a point "
                                          "whose runs do not converge is said so (NOT CONVERGED), with no "
                                          "z-score from those runs.")
    v.add_argument("--alphas", default="0.5,1.0,1.5,2.0", metavar="GRID",
                   help=f"the alpha grid: {GRID_HELP} (default 0.5,1.0,1.5,2.0)")
    v.add_argument("--inits", default="semantic,positional",
                   help="comma-separated starts (default semantic,positional)")
    add_alias(v, "--init", "inits")
    v.add_argument("--d", type=whole_number, default=1000, help="dimension (default 1000)")
    v.add_argument("--seeds", type=whole_number, default=5, help="runs per point (default 5)")
    v.add_argument("--tolerance", type=float, default=3.0, help="fail when |z| exceeds this (default 3)")
    v.add_argument("--out", default="validate_out", help="output folder (default validate_out)")
    v.add_argument("--no-resume", action="store_true", help="recompute points cached under OUT/runs")
    v.add_argument("--sim-only", action="store_true", help="do not solve the theory (no z-scores)")
    add_precision_option(v, "theory precision (default fast for the two-token rank-one model, draft for any "
                            "other, whose QMC solves take minutes at fast). ", default=None)
    v.add_argument("--curve-points", type=whole_number, default=7,
                   help="extra evenly spaced alphas for the theory curves (default 7; 0: only the simulated ones)")
    v.add_argument("--d-scan", action="store_true",
                   help="finite-size scan at fixed --alpha over --d-values (default: the alpha grid at --d)")
    v.add_argument("--alpha", type=float, default=2.0, help="alpha of the d-scan (default 2)")
    v.add_argument("--d-values", default="100,200,400,800,1600",
                   help="d-scan dimensions (default 100,200,400,800,1600)")
    v.add_argument("--method", default="gd", choices=METHODS,
                   help="how each point's students are found: gd, trained by the simulator (the training "
                        "options below); gamp, message passing on the same seeds' instances drawn with numpy "
                        "(--damping, --dtype; the training options other than --seed and --n-test are not "
                        "used) (default gd)")
    add_damping_option(v)
    _add_training_options(v, gamp=True)
    add_model_options(v)
    add_json_option(v)
    v.set_defaults(func=cmd_validate)


# --------------------------------------------------------------------------- checks


#: the largest learning rate each working dtype holds (torch converts it to the dtype)
LARGEST = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def _check_common(args) -> None:
    check_run_settings(args.steps, args.lr, args.n_test, args.seeds, args.seed)
    if args.lr is not None and args.lr > LARGEST[args.dtype]:
        raise UsageError(f"--lr: must be at most {LARGEST[args.dtype]:.3g}, the largest {args.dtype}, got {args.lr:g}")
    if args.device:
        import torch

        try:
            torch.empty(0, device=args.device)
        except (RuntimeError, AssertionError, ValueError) as exc:
            raise UsageError(f"--device: {args.device!r} is not usable here ({str(exc).splitlines()[0]})") from None


def _sim_kwargs(args) -> dict:
    return {"seeds": args.seeds, "seed": args.seed, "steps": args.steps, "lr": args.lr,
            "optimizer": args.optimizer, "dtype": args.dtype, "device": args.device, "n_test": args.n_test}


# --------------------------------------------------------------------------- commands


def cmd_simulate(args) -> int:
    require_simulation()
    spec = model_from_args(args, derives=False)
    check_dimension(args.d, k=spec.k)
    check_alpha(args.alpha, args.d)
    _check_common(args)
    check_start(args.init, spec.rank)
    check_simulations(args.seeds, args.d, args.alpha, args.steps, args.n_test, spec.tokens, spec.rank, args.dtype,
                      args)
    from validation.simulate import AGGREGATED, aggregated_keys, simulate

    with progress_bar(args.seeds * args.steps, f"simulate d={args.d} alpha={args.alpha:g} {args.init}",
                      "step") as bar:
        result = simulate(spec, args.d, args.alpha, args.init, progress=bar.update, **_sim_kwargs(args))
    if args.json:
        print_json(result)
        return 0
    out = sys.stdout
    out.write(f"d={result['d']} alpha={result['alpha']:g} n={result['n']} init={result['init']} "
              f"attention={spec.attention} teacher={spec.teacher}" + (f" beta={spec.beta:g}" if spec.beta != 1 else "")
              + f" optimizer={result['optimizer']} lr={result['lr']:g} steps={result['steps']} "
              f"dtype={result['dtype']} device={result['device']}\n")
    # the overlaps of docs/theory.md, section 1.5 for the two-token rank-one model; the
    # invariants and per-column overlaps of section 4.9 for any other shape
    first = result["runs"][0]
    cols = AGGREGATED if all(c in first for c in AGGREGATED) else tuple(aggregated_keys(first))
    widths = [max(18, len(c)) for c in cols]
    out.write("run  " + " ".join(f"{c:>{w}s}" for c, w in zip(cols, widths)) + f" {'s/step':>9s}\n")
    for r in result["runs"]:
        out.write(f"{r['run_index']:<4d} " + " ".join(f"{r[c]:{w}.6g}" for c, w in zip(cols, widths))
                  + f" {r['step_time']:9.2e}\n")
    out.write("mean " + " ".join(f"{result[c + '_mean']:{w}.6g}" for c, w in zip(cols, widths)) + "\n")
    if len(result["runs"]) > 1:
        out.write("std  " + " ".join(f"{result[c + '_std']:{w}.6g}" for c, w in zip(cols, widths)) + "\n")
    else:  # one run has no spread: not a spread of 0
        out.write("std  (one run: no spread; --seeds 2 or more gives one)\n")
    out.write(f"wall time {result['wall_time']:.1f} s\n")
    return 0


def _global_minimum_line(g: dict) -> str:
    """One point of ``summary["global_minimum"]`` as a line: where its runs went, and the theory's minimum."""
    reached = ", ".join(f"{b} {n}/{g['runs']}" for b, n in g["reached"].items())
    losses = ", ".join(f"{b} {v['train_loss']:.6g}" if "train_loss" in v else f"{b} absent"
                       for b, v in g["theory_train_loss"].items())
    return (f"GLOBAL alpha={g['alpha']:g} init={g['init']}: runs reached {reached}; theory global minimum "
            f"{g['theory_global'] or 'none'} ({g['runs_at_global']}/{g['runs']} runs there; theory training "
            f"losses: {losses})")


def _refuse_repeats(values, flag: str) -> None:
    """A grid names each point once (a repeated one would be simulated twice and break the
    interpolation of the crossing)."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise UsageError(f"{flag}: {', '.join(f'{v:g}' for v in repeated)} given more than once")


def _crossing_line(c: dict) -> str:
    if math.isfinite(c["alpha_cross"]):
        spread = (f" +- {c['alpha_cross_std']:.3f} (bootstrap over seeds)" if math.isfinite(c["alpha_cross_std"])
                  else " (no bootstrap spread: too few resamples cross)")
        return f"semantic-start test error crosses the linear baseline at alpha = {c['alpha_cross']:.3f}{spread}"
    alphas = c.get("alphas") or [math.nan]
    return (f"semantic-start test error does not cross the linear baseline from above on alpha in "
            f"[{min(alphas):g}, {max(alphas):g}]")


def _check_runs(args, runs: int, d: int, alpha: float, spec, d_flag: str = "--d") -> None:
    """The cost of ``runs`` runs of the method (:mod:`attnphase.costs`)."""
    if args.method == "gamp":
        check_gamp_runs(runs, d, alpha, args.n_test, spec.tokens, spec.rank, args.dtype, args, d_flag)
    else:
        check_simulations(runs, d, alpha, args.steps, args.n_test, spec.tokens, spec.rank, args.dtype, args, d_flag)


def _not_converged_line(p: dict) -> str:
    converged = p["runs"] - p["not_converged"]
    compared = ("no rows compared" if not converged else "the one that did compared (one run: no z-score)"
                if converged == 1 else f"z-scores from the {converged} that did")
    more = f" (and {len(p['reasons']) - 1} more)" if len(p["reasons"]) > 1 else ""
    return (f"NOT CONVERGED alpha={p['alpha']:g} init={p['init']}: GAMP converged on {converged} of {p['runs']} "
            f"runs, {compared}; {p['reasons'][0]}{more}")


def _print_validate(summary: dict, args, schedule) -> None:
    """What ``validate`` prints: the files written, then a line per failing row, per point without a
    theory, per point whose GAMP runs did not converge, per global-minimum check and the crossing."""
    gamp = schedule is not None
    name = "dscan" if args.d_scan else "validate"
    if gamp:
        sys.stdout.write(f"method=gamp damping={','.join(f'{g:g}' for g in schedule)} dtype={args.dtype}: "
                         f"message passing on the instances of seed {args.seed}, runs 0-{args.seeds - 1}\n")
    sys.stdout.write(f"wrote {args.out}/{name}.csv, {args.out}/{name}.png, {args.out}/{name}.json\n")
    for f in summary["failing"]:
        sys.stdout.write("FAIL " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in f.items()) + "\n")
    for u in summary.get("unmatched", []):
        why = ("which the theory does not have at this alpha (its solve falls to the trivial point)"
               if u.get("theory_present") is False else
               f"whose theory solve did not converge or left the branch (converged={u['theory_converged']}, "
               f"on_branch={u['theory_on_branch']})")
        sys.stdout.write(f"NO THEORY alpha={u['alpha']:g} init={u['init']}: the simulation sits on the "
                         f"{u['branch']} branch, {why}\n")
    for p in summary.get("not_converged", []):
        sys.stdout.write(_not_converged_line(p) + "\n")
    for g in summary.get("global_minimum", []):
        sys.stdout.write(_global_minimum_line(g) + "\n")
    if "crossing" in summary:
        sys.stdout.write(_crossing_line(summary["crossing"]) + "\n")


def cmd_validate(args) -> int:
    gamp = args.method == "gamp"
    if not gamp:
        require_simulation()
    if args.dtype is None:  # X is stored in float64 by GAMP, the simulator trains in float32
        args.dtype = "float64" if gamp else "float32"
    _check_common(args)
    schedule = dampings(args.damping) if gamp else None
    if args.curve_points < 0:
        raise UsageError(f"--curve-points: must be >= 0, got {args.curve_points}")
    if not (math.isfinite(args.tolerance) and args.tolerance > 0):
        raise UsageError(f"--tolerance: must be a positive number, got {args.tolerance}")
    inits = parse_list(args.inits, "--inits", choices=INITS)
    spec = model_from_args(args, derives=not args.sim_only)
    if not args.sim_only:  # the theory's range, before any simulation
        from numerics.api import check_model_range

        check_model_range(spec)
    for init in inits:
        check_start(init, spec.rank, "--inits")
    if args.d_scan:
        d_values = parse_list(args.d_values, "--d-values", item=int)
        _refuse_repeats(d_values, "--d-values")
        for d in d_values:
            check_dimension(d, "--d-values", spec.k)
            check_alpha(args.alpha, d)
            _check_runs(args, len(inits) * args.seeds * len(d_values), d, args.alpha, spec, d_flag="--d-values")
    else:
        check_dimension(args.d, k=spec.k)
        alphas = parse_range(args.alphas, "--alphas")
        for a in alphas:
            check_alpha(a, args.d, "--alphas")
        _check_runs(args, len(inits) * args.seeds * len(alphas), args.d, max(alphas), spec)
    check_output(args.out, "folder")
    from validation import runs
    from validation.theory_cache import default_theory

    from numerics.api import default_precision

    # by default fast where the line quadrature solves the theory (seconds a point), draft where QMC does
    precision = args.precision or default_precision(spec)
    theory = None if args.sim_only else default_theory(precision)
    if theory is not None:
        with typed_attention_budget(args, spec):  # derived before the simulations, not after them
            pass

    if gamp:
        sim_kwargs = {"seeds": args.seeds, "seed": args.seed, "dtype": args.dtype, "n_test": args.n_test,
                      "dampings": schedule}
    else:
        sim_kwargs = _sim_kwargs(args)
    n_points = len(inits) * (len(d_values) if args.d_scan else len(alphas))
    total, unit = (n_points * args.seeds, "run") if gamp else (n_points * args.seeds * args.steps, "step")
    with progress_bar(total, f"validate: {'GAMP runs' if gamp else 'simulations'}", unit) as bar:
        if args.d_scan:
            summary = runs.run_dscan(spec, args.alpha, inits, d_values, sim_kwargs, args.out, args.tolerance,
                                     theory, resume=not args.no_resume, progress=bar.update, method=args.method)
        else:
            summary = runs.run_validate(spec, alphas, inits, args.d, sim_kwargs, args.out, args.tolerance,
                                        theory, curve_points=args.curve_points, resume=not args.no_resume,
                                        progress=bar.update, method=args.method)
    if args.json:
        print_json(summary)
    else:
        _print_validate(summary, args, schedule)
    if theory is not None and summary["failing"]:
        return failed("validate", f"{len(summary['failing'])} row(s) with |z| > {args.tolerance}")
    return 0

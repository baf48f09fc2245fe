"""``attnphase gamp``: message passing (GAMP) on finite instances of the model (:mod:`validation.gamp`,
docs/gamp.md). Needs only the theory install (numpy); ``--data simulate`` takes the simulator's own
draw of each instance, which needs torch.
"""
from __future__ import annotations

import sys

from attnphase.errors import UsageError, require_simulation
from attnphase.options import (add_instance_options, add_json_option, add_model_options, model_from_args, parse_list,
                               print_json, progress_bar, whole_number)
from validation.run_settings import check_alpha, check_dimension, check_start

DATA_CHOICES = ("numpy", "simulate")


def register(subparsers) -> None:
    p = subparsers.add_parser("gamp", help="message passing (GAMP) on finite instances: the ERM's stationary points",
                              description="Run GAMP on finite instances of the model of docs/theory.md, section 1 "
                                          "(one per seed, the simulator's seeding), from the starts of section "
                                          "1.4: the prox of each sample's exact loss with the matrix variance V, "
                                          "the ridge's linear denoiser. Its fixed point is a stationary point of "
                                          "the empirical risk (risk_gradient_norm = |dR/dQ| / |lam Q|). Reports "
                                          "test error, training loss, the overlaps' invariants and V "
                                          "(docs/gamp.md). A run that does not converge with any damping tried "
                                          "ends the command with exit status 1, naming the iteration where each "
                                          "damping went wrong. Cost on 2 cores: about 2-4 s per run at d = 1000, "
                                          "alpha = 2 (semantic start), growing as d^2 alpha; X takes 8 L n d "
                                          "bytes (half with --dtype float32).")
    add_instance_options(p)
    p.add_argument("--seed", type=whole_number, default=0,
                   help="integer seed; run k uses numpy SeedSequence(seed, spawn_key=(k,)) (default 0)")
    p.add_argument("--data", default="numpy", choices=DATA_CHOICES,
                   help="numpy: instances drawn here with numpy from the seed's streams (the simulator's law, "
                        "not its draw); simulate: the simulator's own draw (needs torch) (default numpy)")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32"),
                   help="storage of the design X (default float64)")
    add_damping_option(p)
    p.add_argument("--n-test", type=whole_number, default=10000, help="fresh samples for the test error (default 10000)")
    add_model_options(p)
    add_json_option(p)
    p.set_defaults(func=cmd_gamp)


def add_damping_option(p) -> None:
    """``--damping``: GAMP's damping schedule (``attnphase gamp``, ``attnphase validate --method gamp``)."""
    p.add_argument("--damping", default="0.5,0.25", metavar="LIST",
                   help="damping schedule: each factor in (0, 1] is taken where the one before stalled; 1 is "
                        "plain GAMP, whose overlaps follow the state evolution (default 0.5,0.25)")


def dampings(text: str) -> list:
    values = parse_list(text, "--damping", item=float)
    for v in values:
        if not 0.0 < v <= 1.0:
            raise UsageError(f"--damping: each factor must be in (0, 1], got {v:g}")
    return values


COLUMNS_SCALAR = ("test_error", "train_loss", "q", "m", "theta", "V_eigenvalues_1")


def cmd_gamp(args) -> int:
    spec = model_from_args(args)
    check_dimension(args.d, k=spec.k)
    check_alpha(args.alpha, args.d)
    check_start(args.init, spec.rank)
    if args.seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {args.seeds}")
    if args.seed < 0:
        raise UsageError(f"--seed: must be >= 0, got {args.seed}")
    if args.n_test < 1:
        raise UsageError(f"--n-test: must be >= 1, got {args.n_test}")
    schedule = dampings(args.damping)
    if args.data == "simulate":
        require_simulation()
    from validation.gamp import aggregated_keys, gamp

    with progress_bar(None, f"gamp d={args.d} alpha={args.alpha:g} {args.init}", "iteration") as bar:
        def progress(k, t, residual):
            bar.set_postfix_str(f"run {k} residual {residual:.1e}", refresh=False)
            bar.update(1)

        result = gamp(spec, args.d, args.alpha, args.init, args.seeds, args.seed, args.data, args.dtype, args.n_test,
                      schedule, progress=progress)
    if args.json:
        print_json(result)
        return 0
    out = sys.stdout
    out.write(f"d={result['d']} alpha={result['alpha']:g} n={result['n']} init={result['init']} data={result['data']} "
              f"dtype={result['dtype']} damping schedule {','.join(f'{g:g}' for g in schedule)}\n")
    first = result["runs"][0]
    cols = [c for c in COLUMNS_SCALAR if c in first] if "q" in first else aggregated_keys(first)
    widths = [max(12, len(c)) for c in cols]
    extra = ("iterations", "damping", "risk_gradient_norm", "gamp_time")
    out.write("run  " + " ".join(f"{c:>{w}s}" for c, w in zip(cols, widths))
              + f" {'iter':>5s} {'damping':>7s} {'risk_grad':>9s} {'s':>6s}\n")
    for r in result["runs"]:
        out.write(f"{r['run_index']:<4d} " + " ".join(f"{r[c]:{w}.6g}" for c, w in zip(cols, widths))
                  + f" {r[extra[0]]:5d} {r[extra[1]]:7g} {r[extra[2]]:9.2e} {r[extra[3]]:6.1f}\n")
    out.write("mean " + " ".join(f"{result[c + '_mean']:{w}.6g}" for c, w in zip(cols, widths)) + "\n")
    out.write("std  " + " ".join(f"{result[c + '_std']:{w}.6g}" for c, w in zip(cols, widths)) + "\n")
    out.write(f"wall time {result['wall_time']:.1f} s\n")
    return 0

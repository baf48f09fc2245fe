"""``attnphase histogram``: the paper's histogram-task experiment (:mod:`histogram_task`)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os

from attnphase.errors import UsageError, require_simulation
from attnphase.options import whole_number
from attnphase.options import add_json_option, check_output, parse_list, print_json
from attnphase.histogram_task import ATTENTION_KINDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "histogram",
        help="train a one-layer transformer on the histogram task (positional vs semantic attention)",
        description="Experiment 1: train only_sem and only_pos attention on the histogram task over several "
                    "seeds. Experiment 2: re-parameterise each into an unrestricted model with the same "
                    "function, continue training and measure whether the attention keeps its kind. Needs the simulation extra "
                    "(pip install 'attnphase[simulation]'). Cost on 2 cores: 2-4 minutes with --quick, about 15 "
                    "CPU-minutes for the full run.",
    )
    p.add_argument("--quick", action="store_true",
                   help="reduced run for a 2-core CPU (2-4 minutes on 2 shared cores; see docs/histogram.md; "
                        "default the full run)")
    p.add_argument("--epochs", type=whole_number, default=None, help="training epochs (default 20, --quick 4)")
    p.add_argument("--continue-epochs", type=whole_number, default=None,
                   help="epochs of training after lifting the restriction (default 10, --quick 1; 0 skips)")
    p.add_argument("--seeds", type=whole_number, default=3, help="number of training seeds per model type (default 3)")
    p.add_argument("--seed", type=whole_number, default=0,
                   help="base seed: the dataset uses it, run k uses seed+1+k (default 0)")
    p.add_argument("--n-sequences", type=whole_number, default=None, help="distinct sequences (default 50000)")
    p.add_argument("--batch-size", type=whole_number, default=None, help="minibatch size (default 32)")
    p.add_argument("--models", default="only_sem,only_pos",
                   help="comma-separated model types among only_sem, only_pos, both (default only_sem,only_pos)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=whole_number, default=1,
                   help="torch CPU threads (default 1: the model is tiny and extra threads only contend)")
    p.add_argument("--out", default=None,
                   help="directory for histogram.json, attention_examples.npz and histogram_attention.png "
                        "(default: write no files)")
    add_json_option(p)
    p.set_defaults(func=run)


def _config(args):
    from attnphase.histogram_task.experiment import FULL, QUICK

    base = QUICK if args.quick else FULL
    over = {"epochs": args.epochs, "continue_epochs": args.continue_epochs,
            "n_sequences": args.n_sequences, "batch_size": args.batch_size}
    for name, value in over.items():
        if value is not None and (value < 0 if name == "continue_epochs" else value <= 0):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: must be {'>= 0' if name == 'continue_epochs' else '> 0'}, got {value}")
    cfg = dataclasses.replace(base, **{k: v for k, v in over.items() if v is not None})
    try:
        cfg.validate()
    except ValueError as exc:
        name, _, msg = str(exc).partition(": ")
        raise UsageError(f"--{name.replace('_', '-')}: {msg}") from None
    return cfg


def run(args: argparse.Namespace) -> int:
    require_simulation()
    if args.threads <= 0:
        raise UsageError(f"--threads: must be > 0, got {args.threads}")
    if args.seeds <= 0:
        raise UsageError(f"--seeds: must be > 0, got {args.seeds}")
    kinds = parse_list(args.models, "--models", choices=ATTENTION_KINDS)
    cfg = _config(args)
    if args.out:
        check_output(args.out, "folder")

    import torch

    from attnphase.histogram_task import experiment as H
    from tidyio import atomic_output, folder_summary

    try:
        device = H.pick_device(args.device)
        torch.empty(0, device=device)
    except (RuntimeError, ValueError, AssertionError) as exc:
        raise UsageError(f"--device: {str(exc).splitlines()[0]}") from None
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    progress = None if args.progress else False
    with contextlib.ExitStack() as stack:
        # histogram.json says "incomplete" until the run and its files are done
        result = stack.enter_context(folder_summary(os.path.join(args.out, "histogram.json"), {})) \
            if args.out else {}
        found, examples = H.run_experiment(cfg, kinds=list(dict.fromkeys(kinds)), n_seeds=args.seeds,
                                           seed=args.seed, device=device, progress=progress)
        result.update(found, quick=bool(args.quick))
        if args.out:
            npz = os.path.join(args.out, "attention_examples.npz")
            png = os.path.join(args.out, "histogram_attention.png")
            with atomic_output(npz) as tmp:
                H.save_examples(tmp, examples)
            with atomic_output(png) as tmp:
                H.plot_attention(npz, tmp)
            result["figure"] = png
    if args.json:
        print_json(result)
    else:
        _print_table(result)
    return 0


def _print_table(result: dict) -> None:
    print(f"histogram task: {result['n_train']} train / {result['n_val']} val sequences, "
          f"{result['n_seeds']} seed(s), device {result['device']}, {result['wall_s']:.0f} s")
    print("attention: sem = semantic mass, pos = positional mass, boost = same-token boost (docs/histogram.md)")
    print(f"{'model':<9} {'val acc':>17} {'sem':>6} {'pos':>6} {'boost':>6} | {'after -> both':>17} "
          f"{'sem':>6} {'pos':>6} {'boost':>6} {'|dlogit|':>8}")
    for kind, r in result["models"].items():
        line = (f"{kind:<9} {r['val_acc_mean']:.4f} +- {r['val_acc_std']:.4f} {r['semantic_mass_mean']:6.3f} "
                f"{r['positional_mass_mean']:6.3f} {r['same_token_boost_mean']:6.2f} |")
        if "reparam" in r:
            rp = r["reparam"]
            line += (f" {rp['val_acc_after_mean']:.4f} +- {rp['val_acc_after_std']:.4f} "
                     f"{rp['semantic_mass_after_mean']:6.3f} {rp['positional_mass_after_mean']:6.3f} "
                     f"{rp['same_token_boost_after_mean']:6.2f} {rp['max_abs_logit_diff']:8.1e}")
        print(line)
    if "figure" in result:
        print(f"figure: {result['figure']}")

"""GAMP against gradient descent at d = 1000 (docs/gamp.md, section 6): the whole commands side by
side, and gradient descent on GAMP's own instances.

    OPENBLAS_NUM_THREADS=1 python benchmarks/gamp_vs_gd.py [--d 1000 --alpha 2 --init semantic --seeds 4]

1. ``attnphase gamp --seeds S --json`` and ``attnphase simulate --seeds S --json`` (the paper's 5000 steps
   of lr 0.15), each timed whole (process start to exit), one after the other; their training losses
   (means and spreads over the seeds: different draws of the same law).
2. For each seed, the simulator's gradient descent on the instance GAMP ran on
   (``validation.instances.to_problem``): the two training losses and the distance of the estimates.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def timed(argv):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "attnphase.cli", *argv, "--no-progress", "--json"],
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--init", default="semantic")
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    common = ["--d", str(args.d), "--alpha", str(args.alpha), "--init", args.init, "--seeds", str(args.seeds)]
    t_gamp, gamp = timed(["gamp", *common])
    t_gd, gd = timed(["simulate", *common])
    print(f"attnphase gamp     {args.seeds} runs: {t_gamp:7.1f} s whole command; train loss "
          f"{gamp['train_loss_mean']:.7f} +- {gamp['train_loss_std']:.1e} (runs' spread)")
    print(f"attnphase simulate {args.seeds} runs: {t_gd:7.1f} s whole command; train loss "
          f"{gd['train_loss_mean']:.7f} +- {gd['train_loss_std']:.1e} (runs' spread)")
    print(f"time ratio gamp / simulate: {t_gamp / t_gd:.3f}; difference of the mean train losses "
          f"{gamp['train_loss_mean'] - gd['train_loss_mean']:+.2e} against the runs' spread {gd['train_loss_std']:.1e}")
    from derivations import ModelSpec
    from validation.instances import draw_instance, to_problem
    from validation.simulate import train, train_loss

    spec = ModelSpec()
    for run in gamp["runs"]:
        inst = draw_instance(spec, args.d, args.alpha, run["seed"], run["run_index"])
        problem = to_problem(inst)
        t0 = time.perf_counter()
        res = train(problem, args.init)
        t = time.perf_counter() - t0
        loss = train_loss(res.Q, problem)
        print(f"run {run['run_index']}: same instance, GAMP {run['train_loss']:.9f} in {run['gamp_time']:.1f} s "
              f"({run['iterations']} iterations), GD {loss:.9f} in {t:.1f} s (5000 steps, final |grad|/sqrt(d) "
              f"{res.grad_norm:.1e}); relative difference {(loss - run['train_loss']) / run['train_loss']:+.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

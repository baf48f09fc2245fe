"""Per-step time of our training loop beside a plain autograd implementation.

Both train the same problem (docs/theory.md, section 1; default d = 1000, n = 2000, float32)
from the same start, by full-batch gradient descent with lr 0.15, measured side by
side in one run. They are interleaved in blocks, so a change of load on a shared
machine hits both. "Plain autograd" is the loss written over whole-batch
``(n, L, d)`` tensors (``validation.simulate.risk_autograd``) and ``backward()``.

    python benchmarks/bench_simulation.py [--d 1000] [--alpha 2] [--blocks 5]

Prints the per-step times, their ratio, the projected time of a 5000-step run
and the largest difference between the two trajectories (they must agree).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from derivations.spec import ModelSpec  # noqa: E402
from validation import simulate as sim  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--alpha", type=float, default=2.0)
    ap.add_argument("--dtype", default="float32", choices=sorted(sim.DTYPES))
    ap.add_argument("--blocks", type=int, default=5, help="interleaved measurement blocks")
    ap.add_argument("--ours-steps", type=int, default=100, help="our steps per block")
    ap.add_argument("--autograd-steps", type=int, default=10, help="autograd steps per block")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)

    device = sim.choose_device(args.device)
    dtype = sim.DTYPES[args.dtype]
    spec = ModelSpec()
    lr = sim.DEFAULT_LR["gd"]
    p = sim.make_problem(spec, args.d, args.alpha, seed=0, n_test=1, dtype=dtype, device=device)
    X3, Y3 = (t.to(dtype=dtype, device=device) for t in sim.raw_training_set(p))  # (n, L, d) for autograd
    assert torch.equal(X3, p.train.X3)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def ours(Q, steps):
        with torch.inference_mode():
            for _ in range(steps):
                _, g = sim.risk_and_grad(Q, p.train, spec.lam, need_loss=False)
                Q.add_(g, alpha=-lr)
        return Q

    def autograd(Q, steps):
        Q = Q.clone().requires_grad_(True)
        for _ in range(steps):
            R = sim.risk_autograd(Q, X3, Y3, spec.lam)
            (g,) = torch.autograd.grad(R, Q)
            with torch.no_grad():
                Q -= lr * g
        return Q.detach()

    # agreement of the trajectories
    Q0 = p.Qstar.clone()
    Qa = ours(Q0.clone(), args.autograd_steps)
    Qb = autograd(Q0.clone(), args.autograd_steps)
    diff = float((Qa - Qb).norm() / Qb.norm())

    t_ours, t_auto = [], []
    Qo, Qg = Q0.clone(), Q0.clone()
    ours(Qo, 5)
    autograd(Qg, 1)
    for _ in range(args.blocks):
        sync()
        t = time.perf_counter()
        ours(Qo, args.ours_steps)
        sync()
        t_ours.append((time.perf_counter() - t) / args.ours_steps)
        t = time.perf_counter()
        Qg = autograd(Qg, args.autograd_steps)
        sync()
        t_auto.append((time.perf_counter() - t) / args.autograd_steps)

    mo, ma = statistics.median(t_ours), statistics.median(t_auto)
    print(f"device={device} dtype={args.dtype} d={args.d} n={p.n} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} cpu={platform.processor() or platform.machine()} "
          f"load1={os.getloadavg()[0]:.2f}")
    print(f"{'implementation':<22s} {'s/step (median)':>16s} {'min':>10s} {'max':>10s} {'5000 steps':>11s}")
    for name, ts, m in (("ours (Gram stats)", t_ours, mo), ("plain autograd", t_auto, ma)):
        print(f"{name:<22s} {m:16.5f} {min(ts):10.5f} {max(ts):10.5f} {5000 * m:10.1f}s")
    print(f"speed-up {ma / mo:.1f}x; trajectories after {args.autograd_steps} steps differ by "
          f"{diff:.1e} (relative norm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

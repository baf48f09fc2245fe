"""Per-step time of our training loop beside a plain autograd implementation, per model shape.

For each shape ``(L, r, t)`` (default: (2,1,1), (3,1,1), (2,2,1)) both implementations
train the same problem (docs/theory.md, sections 1 and 4.1; d = 1000, n = 2000,
float32) from the semantic start by full-batch gradient descent with lr 0.15,
measured side by side in one run. They are interleaved in blocks, so a change of
load on a shared machine hits both. "Ours" is ``validation.simulate.risk_and_grad``
(Gram statistics, analytic gradient); "plain autograd" is the loss written over whole-batch ``(n, L, d)`` tensors
(``validation.simulate.risk_autograd``) and ``backward()``.

``--before PATH`` also times the whole training loop of the default model
(``validation.simulate.train``, semantic start) with the simulator file of the checkout
at ``PATH`` beside this checkout's, in one process, in blocks of alternating order, and
checks that both end at the same ``Q`` bit for bit.

``--kernels`` also times the two choices of the general path beside the obvious
torch form: ``X Q`` for a ``d x r`` matrix ``Q`` as one matrix product and as ``r``
matrix-vector products, and the softmax over the token axis by ``torch.softmax`` and
by the exp2 form of ``validation.simulate``.

    python benchmarks/bench_simulation.py [--d 1000] [--alpha 2] [--blocks 5] [--before PATH] [--kernels]

Every timing is a median over blocks (min and max beside it), after a warm-up of
``--warmup`` seconds per implementation.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ((2, 1, 1), (3, 1, 1), (2, 2, 1))


def _import_simulator(root: str):
    sys.path.insert(0, root)
    from derivations.spec import ModelSpec
    from validation import simulate as sim

    return ModelSpec, sim


def _warm(fn, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()


def _row(name: str, ts) -> str:
    m = statistics.median(ts)
    return f"{name:<34s} {1000 * m:10.2f} {1000 * min(ts):9.2f} {1000 * max(ts):9.2f} {5000 * m:9.1f}s"


def bench_shapes(args, torch, ModelSpec, sim, device, dtype) -> None:
    lr = sim.DEFAULT_LR["gd"]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    print(f"{'shape / implementation':<34s} {'ms/step':>10s} {'min':>9s} {'max':>9s} {'5000 st.':>10s}")
    for L, r, t in args.shapes:
        spec = ModelSpec(tokens=L, rank=r, teacher_rank=t)
        p = sim.make_problem(spec, args.d, args.alpha, seed=0, n_test=1, dtype=dtype, device=device)
        X3, Y3 = (x.to(dtype=dtype, device=device) for x in sim.raw_training_set(p))  # (n, L, d) for autograd
        assert torch.equal(X3, p.train.X3)

        def gd(step_fn):
            def run(Q, steps):
                with torch.inference_mode():
                    for _ in range(steps):
                        _, g = step_fn(Q, p.train, spec.lam, need_loss=False)
                        Q.add_(g, alpha=-lr)
                return Q
            return run

        def autograd(Q, steps):
            Q = Q.clone().requires_grad_(True)
            for _ in range(steps):
                R = sim.risk_autograd(Q, X3, Y3, spec.lam)
                (g,) = torch.autograd.grad(R, Q)
                with torch.no_grad():
                    Q -= lr * g
            return Q.detach()

        impls = [("ours", gd(sim.risk_and_grad), args.ours_steps)]
        impls.append(("plain autograd", autograd, args.autograd_steps))

        Q0 = sim.initial_Q(p, "semantic").contiguous()
        ref = autograd(Q0.clone(), args.autograd_steps)
        diffs = {name: float((fn(Q0.clone(), args.autograd_steps) - ref).norm() / ref.norm())
                 for name, fn, _ in impls[:-1]}
        state = {name: Q0.clone() for name, _, _ in impls}
        for name, fn, _ in impls:
            _warm(lambda: fn(state[name], 1), args.warmup)
        times = {name: [] for name, _, _ in impls}
        for _ in range(args.blocks):
            for name, fn, steps in impls:
                sync()
                t0 = time.perf_counter()
                out = fn(state[name], steps)
                sync()
                times[name].append((time.perf_counter() - t0) / steps)
                state[name] = out
        for name, _, _ in impls:
            print(_row(f"({L},{r},{t}) {name}", times[name]))
        auto = statistics.median(times["plain autograd"])
        print(f"    speed-up over autograd {auto / statistics.median(times['ours']):.1f}x; after "
              f"{args.autograd_steps} steps Q differs from autograd's by "
              + ", ".join(f"{v:.1e} ({k})" for k, v in diffs.items()) + " (relative norm)")


def bench_kernels(args, torch, ModelSpec, sim, device, dtype) -> None:
    """The two choices of the general path, each beside the obvious torch form."""
    p = sim.make_problem(ModelSpec(), args.d, args.alpha, seed=0, n_test=1, dtype=dtype, device=device)
    X, n = p.train.X, p.n

    def timed(fn, reps=20):
        _warm(fn, args.warmup / 2)
        ts = []
        for _ in range(args.blocks):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            ts.append((time.perf_counter() - t0) / reps)
        return ts

    print(f"\nX Q with X ({X.shape[0]} x {X.shape[1]}) {args.dtype}:")
    for r in (1, 2, 3):
        Q = torch.randn(args.d, r, dtype=dtype, device=device)
        print(_row(f"r = {r}: one matrix product", timed(lambda: X @ Q)))
        print(_row(f"r = {r}: r matrix-vector products", timed(lambda: [X @ Q[:, j] for j in range(r)])))
    print(f"\nsoftmax over the L axis of an (L, L, n = {n}) float64 array:")
    for L in (2, 3):
        g = torch.Generator().manual_seed(L)
        logits = (0.3 * torch.randn(L, L, n, generator=g, dtype=torch.float64)).to(device)
        softmax = sim.Attention("softmax")
        print(_row(f"L = {L}: torch.softmax", timed(lambda: torch.softmax(logits, dim=1))))
        print(_row(f"L = {L}: exp2 form (ours)", timed(lambda: softmax.weights(logits))))


def _load_simulator_file(path: str, name: str):
    """``validation/simulate.py`` of another checkout as module ``name`` (its imports resolve
    in this checkout, e.g. ``derivations.spec``)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "validation", "simulate.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def bench_before_after(args, torch, ModelSpec, sim, device, dtype) -> None:
    """The default model's whole training loop (``train``, semantic start) with the simulator of
    ``--before`` and with this checkout's, in one process, in alternating blocks."""
    impls = {"before": _load_simulator_file(args.before, "simulate_before"), "after": sim}
    problems = {name: mod.make_problem(ModelSpec(), args.d, args.alpha, seed=0, n_test=1, dtype=dtype,
                                       device=device) for name, mod in impls.items()}
    for name, mod in impls.items():
        _warm(lambda: mod.train(problems[name], "semantic", steps=20), args.warmup)
    times = {name: [] for name in impls}
    ends = {}
    for block in range(args.blocks):
        for name in (("before", "after") if block % 2 == 0 else ("after", "before")):
            res = impls[name].train(problems[name], "semantic", steps=args.train_steps)
            times[name].append(res.wall_time / args.train_steps)
            Q = res.Q.double().cpu()
            ends[name] = (float(Q.sum()), float(Q @ Q), res.loss_curve[-1][1])
    print(f"\ndefault model, whole training loop (train(), {args.train_steps} steps per block, alternating):")
    for name in impls:
        print(_row(f"{name} ({os.path.abspath(args.before) if name == 'before' else 'this checkout'})",
                   times[name]))
    ratio = statistics.median(times["after"]) / statistics.median(times["before"])
    same = "bit-identical" if ends["before"] == ends["after"] else f"DIFFERENT {ends}"
    print(f"    after / before = {ratio:.3f} (medians); final Q and loss {same}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--alpha", type=float, default=2.0)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--shapes", default=",".join("%d%d%d" % s for s in SHAPES),
                    help="comma-separated L r t digits, e.g. 211,311,221")
    ap.add_argument("--blocks", type=int, default=5, help="interleaved measurement blocks")
    ap.add_argument("--ours-steps", type=int, default=50, help="our steps per block")
    ap.add_argument("--autograd-steps", type=int, default=5, help="autograd steps per block")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per implementation")
    ap.add_argument("--device", default=None)
    ap.add_argument("--before", default=None, help="a checkout whose simulator to time beside this one")
    ap.add_argument("--train-steps", type=int, default=500, help="training steps per before/after block")
    ap.add_argument("--kernels", action="store_true", help="also time the general path's kernels beside torch's")
    args = ap.parse_args(argv)
    args.shapes = [tuple(int(c) for c in s) for s in args.shapes.split(",") if s]

    import torch

    ModelSpec, sim = _import_simulator(os.path.join(HERE, ".."))
    device = sim.choose_device(args.device)
    dtype = sim.DTYPES[args.dtype]
    print(f"device={device} dtype={args.dtype} d={args.d} n={round(args.alpha * args.d)} "
          f"threads={torch.get_num_threads()} torch={torch.__version__} "
          f"cpu={platform.processor() or platform.machine()} load1={os.getloadavg()[0]:.2f}")
    bench_shapes(args, torch, ModelSpec, sim, device, dtype)
    if args.kernels:
        bench_kernels(args, torch, ModelSpec, sim, device, dtype)
    if args.before:
        bench_before_after(args, torch, ModelSpec, sim, device, dtype)
    print(f"load1 at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The simulator's training step and runs, each measured beside the obvious alternative in one run.

For each shape ``(L, r, t)`` (default: (2,1,1), (3,1,1), (2,2,1)) our kernel and a plain autograd
implementation train the same problem (docs/theory.md, sections 1 and 4.1; d = 1000, n = 2000,
float32) from the semantic start by full-batch gradient descent with lr 0.15, interleaved in
blocks, so a change of load on a shared machine hits both. "Ours" is
``validation.simulate.risk_and_grad`` (Gram statistics, analytic gradient); "plain autograd" is the
loss written over whole-batch ``(n, L, d)`` tensors (``validation.simulate.risk_autograd``) and
``backward()``; the table ends on the speed-up and how far the two students are apart.

``--kernels`` also times the choices of the kernel beside the obvious forms: ``X Q`` for a ``d x r``
matrix ``Q`` as one matrix product and as ``r`` matrix-vector products (torch's and numpy's), the
pullback ``X^T g`` with numpy's BLAS on one thread and on two, and the softmax over the token axis by
``torch.softmax`` and by the exp2 form of ``validation.simulate``.

``--data-sets`` measures runs per CPU-second of the paper plan's runs at ``--d`` (1000): each kind of
data set (the semantic and positional starts of one run with the random start by gradient descent and
by Adam; the random start's two optimisers; the rank-two student), as separate runs (one ``run_one``
per start, each drawing its data) and as the runs of one data set drawn once and trained in batches
(``run_data_set``, Adam with the plan's early stop unless ``--plan-full-adam``), alternating, at each of
``--plan-alphas``, weighted as the full plan has them, with the largest relative difference of a run's
numbers between the two (0 for gradient descent: the batch changes no run's arithmetic). With
``--baseline`` the separate runs are those of the plan before its data sets were shared (numpy's BLAS
products, Adam to the end): the ratio is then the plan's runs per CPU-second now against then, and the
difference the two products' float rounding (and Adam's early stop).

``--products`` trains the semantic and positional starts of one data set with the compiled products
and with numpy's BLAS, at each of ``--plan-alphas`` for ``--early-stop-seeds`` seeds, and prints the
largest change of each final statistic beside its standard error over the seeds.

``--early-stop`` runs Adam from the random start to the end and with ``StopRule()``, side by side,
and prints how far each stopped run's numbers are from its full run's beside their spread over seeds.

    python benchmarks/simulation.py [--d 1000] [--alpha 2] [--blocks 5] [--kernels] [--data-sets
        [--plan-full-adam] [--baseline]] [--products] [--early-stop] [--shapes ""] [--threads N]

Every timing is a median over blocks (min and max beside it), after a warm-up of ``--warmup``
seconds per implementation. Before and after a change, the training loop is ``benchmarks/ab.py``'s
``train`` and ``data-set`` cases.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

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
                        _, g = step_fn(Q, p.train, spec.ridge_strength, need_loss=False)
                        Q.add_(g, alpha=-lr)
                return Q
            return run

        def autograd(Q, steps):
            Q = Q.clone().requires_grad_(True)
            for _ in range(steps):
                R = sim.risk_autograd(Q, X3, Y3, spec.ridge_strength)
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
    from validation.simulator import products

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
        rows = Q.t().contiguous()
        h = torch.empty(r, X.shape[0], dtype=dtype, device=device)
        print(_row(f"r = {r}: one matrix product", timed(lambda: X @ Q)))
        print(_row(f"r = {r}: r matrix-vector products", timed(lambda: [X @ Q[:, j] for j in range(r)])))
        if device.type == "cpu":
            Xn, Qn = X.numpy(), Q.numpy()
            print(_row(f"r = {r}: numpy, one matrix product", timed(lambda: Xn @ Qn)))
            print(_row(f"r = {r}: numpy, r mat-vec", timed(lambda: products.times_columns(X, rows, h, compiled=False))))
            print(_row(f"r = {r}: one compiled pass (ours)", timed(lambda: products.times_columns(X, rows, h))))
    if device.type == "cpu":
        from threadpoolctl import threadpool_limits

        Xn = X.numpy()
        g = np.random.default_rng(0).standard_normal(Xn.shape[0]).astype(Xn.dtype)
        print(f"\nX^T g (the pullback) by numpy's BLAS, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}:")
        for threads in (1, 2):
            with threadpool_limits(threads, user_api="blas"):
                print(_row(f"{threads} BLAS thread{'s' if threads > 1 else ''}", timed(lambda: g @ Xn)))
        G3, out3 = torch.randn(3, Xn.shape[0], dtype=dtype), torch.empty(3, Xn.shape[1], dtype=dtype)
        print(_row("3 columns: BLAS mat-vecs, 1 thread", timed(
            lambda: products.transpose_times_columns(X, G3, out3, compiled=False))))
        print(_row("3 columns: one compiled pass (ours)", timed(lambda: products.transpose_times_columns(X, G3, out3))))
    print(f"\nsoftmax over the L axis of an (L, L, n = {n}) float64 array:")
    for L in (2, 3):
        g = torch.Generator().manual_seed(L)
        logits = (0.3 * torch.randn(L, L, n, generator=g, dtype=torch.float64)).to(device)
        softmax = sim.Attention("softmax")
        print(_row(f"L = {L}: torch.softmax", timed(lambda: torch.softmax(logits, dim=1))))
        print(_row(f"L = {L}: exp2 form (ours)", timed(lambda: softmax.weights(logits))))


#: the runs of the full paper plan at d = 1000 (attnphase.paper.plan, PLANS["full"]) per alpha of its grid,
#: as its tasks join them (attnphase.sweeps.tasks.batch_simulations): runs 0-4 of the default model share
#: a data set between the semantic and positional starts (gradient descent) and the random start (by
#: gradient descent and by Adam); runs 5-9 between the random start's two optimisers; the rank-two
#: student's 5 runs are alone. Each entry: (the data sets of that kind, its runs as (start, optimiser)).
PLAN_DATA_SETS = {"4 runs: sem, pos, random gd, adam": (5, (("semantic", "gd"), ("positional", "gd"),
                                                          ("random", "gd"), ("random", "adam"))),
                  "2 runs: random gd, adam": (5, (("random", "gd"), ("random", "adam"))),
                  "rank two: random gd": (5, (("random", "gd"),))}


def bench_data_sets(args, torch, ModelSpec, sim, device, dtype) -> None:
    """Runs per CPU-second of the paper plan's runs at ``--d`` (default 1000): each kind of data set of
    :data:`PLAN_DATA_SETS` as separate runs (one ``run_one`` per run, each drawing its data) and as one
    ``run_data_set`` (the data drawn once, the runs trained alike in one batch), both with Adam's early
    stop unless ``--plan-full-adam``, alternating, at each ``--plan-alphas``; CPU seconds from
    ``time.process_time`` (every thread of the process). ``--baseline``: the separate runs as the plan
    ran them before the data sets were shared (numpy's BLAS matrix-vector products, Adam to the end),
    so the ratio is the plan's runs per CPU-second now against then."""
    from validation.simulator import products

    stop = None if args.plan_full_adam else sim.StopRule()
    keys = ("test_error", "train_loss", "q_eig_1", "m_sv_1", "theta_sv_1", "linear_test_error")
    ways = ("separate", "one data set")
    cpu = {(kind, way): 0.0 for kind in PLAN_DATA_SETS for way in ways}
    worst = 0.0
    print(f"\npaper plan's runs at d = {args.d} ({args.plan_steps} steps, {args.plan_n_test} test samples, "
          f"alphas {args.plan_alphas}; Adam's early stop {stop}):")
    print(f"{'alpha / data set':<40s} {'separate cpu s':>14s} {'data set cpu s':>14s} {'ratio':>6s} {'max rel diff':>13s}")
    for ai, alpha in enumerate(args.plan_alphas):
        for ki, (kind, (_, runs)) in enumerate(PLAN_DATA_SETS.items()):
            spec = ModelSpec(rank=2) if kind.startswith("rank two") else ModelSpec()
            kw = dict(seed=0, run_index=0, dtype=dtype, device=device, n_test=args.plan_n_test)
            out, spent = {}, {}
            for way in (ways if (ai + ki) % 2 == 0 else ways[::-1]):
                c0 = time.process_time()
                # two recorded points, as the plan's task records (attnphase.sweeps.tasks)
                products.COMPILED = not (args.baseline and way == "separate")
                if way == "separate":
                    then = None if args.baseline else stop
                    out[way] = [sim.run_one(spec, args.d, alpha, init, steps=args.plan_steps, optimizer=opt,
                                            record_points=2, stop=then if opt == "adam" else None, **kw)
                                for init, opt in runs]
                else:
                    trainings = [sim.Training(init, args.plan_steps, None, opt, 2, stop if opt == "adam" else None)
                                 for init, opt in runs]
                    out[way] = sim.run_data_set(spec, args.d, alpha, trainings, **kw)
                spent[way] = time.process_time() - c0
                products.COMPILED = True
                cpu[(kind, way)] += spent[way]
            diff = max(abs(a[k] - b[k]) / abs(a[k]) for a, b in zip(*(out[w] for w in ways)) for k in keys)
            worst = max(worst, diff)
            print(f"{f'{alpha:g} {kind}':<40s} {spent[ways[0]]:14.2f} {spent[ways[1]]:14.2f} "
                  f"{spent[ways[0]] / spent[ways[1]]:6.2f} {diff:13.1e}")
    totals = {way: sum(n * cpu[(kind, way)] for kind, (n, _) in PLAN_DATA_SETS.items()) for way in ways}
    runs = len(args.plan_alphas) * sum(n * len(r) for n, r in PLAN_DATA_SETS.values())
    print(f"    the plan's mix ({runs // len(args.plan_alphas)} runs per alpha): {runs / totals[ways[0]]:.3f} runs per "
          f"CPU-second separate, {runs / totals[ways[1]]:.3f} as data sets: ratio "
          f"{totals[ways[0]] / totals[ways[1]]:.2f}; largest relative difference of a run's numbers {worst:.1e}")


def bench_early_stop(args, torch, ModelSpec, sim, device, dtype) -> None:
    """Adam from the random start (the paper plan's Adam runs) at ``--d``, run to the end and with
    the early stop of ``StopRule()``, side by side: the steps run, the CPU seconds, and how far each
    stopped run's numbers are from its full run's, beside the spread of those numbers over seeds."""
    rule = sim.StopRule()
    keys = ("test_error", "train_loss", "m", "theta_over_sigma2", "q")
    print(f"\nAdam, random start, d = {args.d}, {args.plan_steps} steps: full runs and early stops ({rule}):")
    print(f"{'alpha run':<12s} {'steps run':>9s} {'full cpu s':>10s} {'stop cpu s':>10s}  "
          + " ".join(f"{k:>17s}" for k in keys))
    for alpha in args.plan_alphas:
        full_runs, diffs = [], {k: [] for k in keys}
        for k in range(args.early_stop_seeds):
            kw = dict(seed=0, run_index=k, steps=args.plan_steps, optimizer="adam", dtype=dtype, device=device,
                      n_test=args.plan_n_test)
            c0 = time.process_time()
            full = sim.run_one(ModelSpec(), args.d, alpha, "random", **kw)
            c1 = time.process_time()
            stopped = sim.run_one(ModelSpec(), args.d, alpha, "random", stop=rule, **kw)
            c2 = time.process_time()
            full_runs.append(full)
            for key in keys:
                diffs[key].append(abs(stopped[key] - full[key]) / abs(full[key]))
            print(f"{f'{alpha:g} {k}':<12s} {stopped['steps_run']:9d} {c1 - c0:10.2f} {c2 - c1:10.2f}  "
                  + " ".join(f"{diffs[key][-1]:17.1e}" for key in keys))
        spread = {key: statistics.stdev([r[key] for r in full_runs]) / abs(statistics.mean([r[key] for r in full_runs]))
                  for key in keys} if len(full_runs) > 1 else {}
        if spread:
            print(f"{'  seed spread':<12s} {'':9s} {'':10s} {'':10s}  " + " ".join(f"{spread[key]:17.1e}" for key in keys)
                  + "  (relative std over runs)")


def bench_products(args, torch, ModelSpec, sim, device, dtype) -> None:
    """The runs of one data set (semantic and positional starts, gradient descent, ``--plan-steps``)
    trained with the compiled products and with numpy's BLAS, at each ``--plan-alphas`` for
    ``--early-stop-seeds`` seeds: the largest change of each final statistic beside its standard
    error over the seeds, and the CPU seconds of each."""
    from validation.simulator import products

    keys = ("test_error", "train_loss", "m", "theta_over_sigma2", "q")
    trainings = [sim.Training(init, args.plan_steps, None, "gd", 2, None) for init in ("semantic", "positional")]
    print(f"\nsemantic and positional starts, gradient descent, d = {args.d}, {args.plan_steps} steps: "
          "compiled products against BLAS")
    print(f"{'alpha start':<16s} " + " ".join(f"{k + ' diff/SE':>26s}" for k in keys))
    cpu = {True: 0.0, False: 0.0}
    for alpha in args.plan_alphas:
        out = {True: [], False: []}
        for seed in range(args.early_stop_seeds):
            for compiled in ((True, False) if seed % 2 == 0 else (False, True)):
                products.COMPILED = compiled
                c0 = time.process_time()
                out[compiled].append(sim.run_data_set(ModelSpec(), args.d, alpha, trainings, seed=seed, dtype=dtype,
                                                      device=device, n_test=args.plan_n_test))
                cpu[compiled] += time.process_time() - c0
        products.COMPILED = True
        for j, tr in enumerate(trainings):
            cells = []
            for key in keys:
                new = np.array([runs[j][key] for runs in out[True]])
                old = np.array([runs[j][key] for runs in out[False]])
                se = old.std(ddof=1) / np.sqrt(len(old)) if len(old) > 1 else float("nan")
                diff = float(np.abs(new - old).max())
                cells.append(f"{diff:12.1e} {diff / se:6.1e}" if se > 0 else f"{diff:12.1e} {'-':>6s}")
            print(f"{f'{alpha:g} {tr.init}':<16s} " + " ".join(f"{c:>26s}" for c in cells))
    print(f"    CPU seconds: compiled {cpu[True]:.1f}, BLAS {cpu[False]:.1f} (ratio {cpu[False] / cpu[True]:.2f})")


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
    ap.add_argument("--kernels", action="store_true", help="also time the general path's kernels beside torch's")
    ap.add_argument("--data-sets", action="store_true", help="the paper plan's runs per CPU-second, separate "
                                                                "and as the runs of one data set")
    ap.add_argument("--plan-alphas", default="0.5,2.0", help="comma-separated alphas of --plan")
    ap.add_argument("--plan-steps", type=int, default=5000)
    ap.add_argument("--plan-n-test", type=int, default=10000)
    ap.add_argument("--baseline", action="store_true", help="--data-sets: the separate runs as before the data "
                    "sets were shared (BLAS products, Adam to the end)")
    ap.add_argument("--plan-full-adam", action="store_true", help="--data-sets: Adam runs without the early stop")
    ap.add_argument("--early-stop", action="store_true",
                    help="Adam runs to the end and with the early stop, side by side (--plan-alphas, --d)")
    ap.add_argument("--early-stop-seeds", type=int, default=3, help="seeds of --early-stop and --products")
    ap.add_argument("--products", action="store_true",
                    help="one data set's runs with the compiled products and with BLAS: the change of each "
                         "final statistic beside its standard error over seeds (--plan-alphas, --plan-steps, --d)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    args.shapes = [tuple(int(c) for c in s) for s in args.shapes.split(",") if s]
    args.plan_alphas = [float(a) for a in args.plan_alphas.split(",") if a]

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    ModelSpec, sim = _import_simulator(os.path.join(HERE, ".."))
    device = sim.choose_device(args.device)
    dtype = sim.DTYPES[args.dtype]
    print(f"device={device} dtype={args.dtype} d={args.d} n={round(args.alpha * args.d)} "
          f"threads={torch.get_num_threads()} torch={torch.__version__} "
          f"cpu={platform.processor() or platform.machine()} load1={os.getloadavg()[0]:.2f}")
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    sections = ((bool(args.shapes), bench_shapes), (args.data_sets, bench_data_sets),
                (args.early_stop, bench_early_stop), (args.kernels, bench_kernels),
                (args.products, bench_products))
    for wanted, section in sections:
        if wanted:
            section(args, torch, ModelSpec, sim, device, dtype)
    print(f"load1 at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

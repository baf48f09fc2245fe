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

``--closed-form`` (with ``--before``) times one step of the default model by the ``L = 2`` closed
form and the general form of that checkout (same matrix-vector products) beside this checkout's one
kernel, and the part a closed form replaces (``h -> loss, dloss/dh``) alone, for one run and for a
batch of two.

``--plan`` (with ``--before``) measures runs per CPU-second of the paper plan's runs at ``--d``
(1000): each kind (the semantic and positional starts of one run, the random start by gradient
descent and by Adam, the rank-two student) with that checkout (one ``run_one`` per start) and this
one (the runs of a data set drawn once and trained in batches, ``run_data_set``, Adam with the
plan's early stop unless ``--plan-full-adam``), old and new alternating, at each of
``--plan-alphas``, weighted as the full plan has them; it prints the largest relative difference of
a run's numbers between the two.

``--early-stop`` runs Adam from the random start to the end and with ``StopRule()``, side by side,
and prints how far each stopped run's numbers are from its full run's beside their spread over seeds.

``--kernels`` also times the two choices of the general path beside the obvious
torch form: ``X Q`` for a ``d x r`` matrix ``Q`` as one matrix product and as ``r``
matrix-vector products, and the softmax over the token axis by ``torch.softmax`` and
by the exp2 form of ``validation.simulate``.

    python benchmarks/bench_simulation.py [--d 1000] [--alpha 2] [--blocks 5] [--before PATH] [--kernels]
        [--closed-form] [--plan [--plan-full-adam]] [--early-stop] [--shapes ""] [--threads N]

``--before PATH``: a checkout (e.g. ``git worktree add /tmp/before <commit>``) whose
``validation.simulate`` is loaded beside this one in the same process.

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
        rows = Q.t().contiguous()
        h = torch.empty(r, X.shape[0], dtype=dtype, device=device)
        print(_row(f"r = {r}: one matrix product", timed(lambda: X @ Q)))
        print(_row(f"r = {r}: r matrix-vector products", timed(lambda: [X @ Q[:, j] for j in range(r)])))
        if device.type == "cpu":
            Xn, Qn = X.numpy(), Q.numpy()
            print(_row(f"r = {r}: numpy, one matrix product", timed(lambda: Xn @ Qn)))
            print(_row(f"r = {r}: numpy, r mat-vec (ours, + f64)", timed(lambda: sim.hidden(rows[None], p.train))))
    print(f"\nsoftmax over the L axis of an (L, L, n = {n}) float64 array:")
    for L in (2, 3):
        g = torch.Generator().manual_seed(L)
        logits = (0.3 * torch.randn(L, L, n, generator=g, dtype=torch.float64)).to(device)
        softmax = sim.Attention("softmax")
        print(_row(f"L = {L}: torch.softmax", timed(lambda: torch.softmax(logits, dim=1))))
        print(_row(f"L = {L}: exp2 form (ours)", timed(lambda: softmax.weights(logits))))


def _load_simulator_file(path: str, name: str):
    """``validation.simulate`` of the checkout at ``path``, its package loaded as ``name`` (so that
    its own relative imports resolve in that checkout; ``derivations`` resolves in this one)."""
    package = importlib.util.spec_from_file_location(name, os.path.join(path, "validation", "__init__.py"),
                                                     submodule_search_locations=[os.path.join(path, "validation")])
    module = importlib.util.module_from_spec(package)
    sys.modules[name] = module
    package.loader.exec_module(module)
    return importlib.import_module(f"{name}.simulate")


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


def bench_closed_form(args, torch, ModelSpec, sim, device, dtype) -> None:
    """Per step, the default model (L = 2, r = 1): the ``L = 2`` closed form and the general form
    of the simulator of ``--before`` (the same matrix-vector products), and this checkout's
    single kernel, interleaved on one problem from one start."""
    old = _load_simulator_file(args.before, "simulate_before")
    forms = {"before: L = 2 closed form": (old, getattr(old, "risk_and_grad_two_token", None)),
             "before: general form": (old, getattr(old, "risk_and_grad_general", None)),
             "after: the one kernel": (sim, sim.risk_and_grad)}
    forms = {k: v for k, v in forms.items() if v[1] is not None}
    problems = {id(mod): mod.make_problem(ModelSpec(), args.d, args.alpha, seed=0, n_test=1, dtype=dtype,
                                          device=device) for mod, _ in forms.values()}
    lr, lam = sim.DEFAULT_LR["gd"], ModelSpec().lam

    def steps(mod, fn, Q, n):
        p = problems[id(mod)]
        with torch.inference_mode():
            for _ in range(n):
                _, g = fn(Q, p.train, lam, need_loss=False)
                Q.add_(g, alpha=-lr)
        return Q

    state = {name: sim.initial_Q(problems[id(sim)], "semantic").clone() for name in forms}
    for name, (mod, fn) in forms.items():
        _warm(lambda: steps(mod, fn, state[name], 1), args.warmup)
    times = {name: [] for name in forms}
    for block in range(args.blocks):
        order = list(forms) if block % 2 == 0 else list(reversed(forms))
        for name in order:
            mod, fn = forms[name]
            t0 = time.perf_counter()
            steps(mod, fn, state[name], args.ours_steps)
            times[name].append((time.perf_counter() - t0) / args.ours_steps)
    print(f"\ndefault model, one step of gradient descent (d = {args.d}, n = {round(args.alpha * args.d)}, "
          f"{args.ours_steps} steps per block, alternating):")
    for name in forms:
        print(_row(name, times[name]))
    med = {name: statistics.median(t) for name, t in times.items()}
    if len(med) < 3:
        return
    names = list(forms)
    print(f"    general / closed form (before) = {med[names[1]] / med[names[0]]:.3f}; "
          f"after / closed form (before) = {med[names[2]] / med[names[0]]:.3f} (medians)")
    # the part a closed form replaces: h -> (loss, dloss/dh), alone, for one run and for a batch of two
    p_old, p_new = problems[id(old)], problems[id(sim)]
    Q = sim.initial_Q(p_new, "semantic")
    h = sim.hidden(torch.stack([Q, Q])[:, None].contiguous(), p_new.train)
    h1, h2 = h[0, 0, 0].contiguous(), h[0, 0, 1].contiguous()
    middles = {"before: closed form, one run": lambda: old.loss_and_grad_h(h1, h2, p_old.train, need_loss=False),
               "after: general form, one run": lambda: sim.loss_and_grad_h(h[:1], p_new.train, need_loss=False),
               "after: general form, two runs": lambda: sim.loss_and_grad_h(h, p_new.train, need_loss=False)}
    for fn in middles.values():
        _warm(fn, args.warmup / 2)
    mt = {name: [] for name in middles}
    for block in range(args.blocks):
        for name, fn in middles.items():
            t0 = time.perf_counter()
            for _ in range(args.ours_steps):
                fn()
            mt[name].append((time.perf_counter() - t0) / args.ours_steps)
    print("the loss and its gradient in h alone (what a closed form replaces):")
    for name in middles:
        print(_row(name, mt[name]))
    mm = [statistics.median(mt[n]) for n in middles]
    step = med[names[2]]
    print(f"    a closed form on this kernel would take a step from {1000 * step:.2f} ms to about "
          f"{1000 * (step - mm[1] + mm[0]):.2f} ms (ratio {step / (step - mm[1] + mm[0]):.3f}); in a batch of two "
          f"the general form costs {mm[2] / 2 / mm[0]:.2f} times the closed form per run")


#: the runs of the full paper plan at d = 1000 (attnphase.paper.plan, PLANS["full"]) per alpha of its grid,
#: as its tasks join them (attnphase.sweeps.tasks.batch_simulations): runs 0-4 of the default model share
#: a data set between the semantic and positional starts (gradient descent) and the random start (by
#: gradient descent and by Adam); runs 5-9 between the random start's two optimisers; the rank-two
#: student's 5 runs are alone. Each entry: (the data sets of that kind, its runs as (start, optimiser)).
PLAN_DATA_SETS = {"4 runs: sem, pos, random gd, adam": (5, (("semantic", "gd"), ("positional", "gd"),
                                                          ("random", "gd"), ("random", "adam"))),
                  "2 runs: random gd, adam": (5, (("random", "gd"), ("random", "adam"))),
                  "rank two: random gd": (5, (("random", "gd"),))}


def bench_plan(args, torch, ModelSpec, sim, device, dtype) -> None:
    """Runs per CPU-second of the paper plan's runs at ``--d`` (default 1000): each kind of data set of
    :data:`PLAN_DATA_SETS` with the simulator of ``--before`` (one ``run_one`` per run, as its plan ran
    them) and with this checkout's (one ``run_data_set``, Adam with the plan's early stop unless
    ``--plan-full-adam``), old and new alternating, at each ``--plan-alphas``; CPU seconds from
    ``time.process_time`` (every thread of the process)."""
    old = _load_simulator_file(args.before, "simulate_before")
    stop = None if args.plan_full_adam else sim.StopRule()
    keys = ("test_error", "train_loss", "q_eig_1", "m_sv_1", "theta_sv_1", "linear_test_error")
    cpu = {(kind, which): 0.0 for kind in PLAN_DATA_SETS for which in ("old", "new")}
    worst = 0.0
    print(f"\npaper plan's runs at d = {args.d} ({args.plan_steps} steps, {args.plan_n_test} test samples, "
          f"alphas {args.plan_alphas}; new Adam early stop {stop}):")
    print(f"{'alpha / data set':<40s} {'old cpu s':>10s} {'new cpu s':>10s} {'old/new':>8s} {'max rel diff':>13s}")
    for ai, alpha in enumerate(args.plan_alphas):
        for ki, (kind, (_, runs)) in enumerate(PLAN_DATA_SETS.items()):
            spec = ModelSpec(rank=2) if kind.startswith("rank two") else ModelSpec()
            kw = dict(seed=0, run_index=0, dtype=dtype, device=device, n_test=args.plan_n_test)
            out, spent = {}, {}
            for which in (("old", "new") if (ai + ki) % 2 == 0 else ("new", "old")):
                c0 = time.process_time()
                if which == "old":
                    out[which] = [old.run_one(spec, args.d, alpha, init, steps=args.plan_steps, optimizer=opt,
                                              record_points=2, **kw) for init, opt in runs]
                else:
                    # two recorded points, as the plan's task records (attnphase.sweeps.tasks)
                    trainings = [sim.Training(init, args.plan_steps, None, opt, 2, stop if opt == "adam" else None)
                                 for init, opt in runs]
                    out[which] = sim.run_data_set(spec, args.d, alpha, trainings, **kw)
                spent[which] = time.process_time() - c0
                cpu[(kind, which)] += spent[which]
            diff = max(abs(a[k] - b[k]) / abs(a[k]) for a, b in zip(out["old"], out["new"]) for k in keys)
            worst = max(worst, diff)
            print(f"{f'{alpha:g} {kind}':<40s} {spent['old']:10.2f} {spent['new']:10.2f} "
                  f"{spent['old'] / spent['new']:8.2f} {diff:13.1e}")
    totals = {which: sum(n * cpu[(kind, which)] for kind, (n, _) in PLAN_DATA_SETS.items()) for which in ("old", "new")}
    runs = len(args.plan_alphas) * sum(n * len(r) for n, r in PLAN_DATA_SETS.values())
    print(f"    the plan's mix ({runs // len(args.plan_alphas)} runs per alpha): {runs / totals['old']:.3f} runs per "
          f"CPU-second old, {runs / totals['new']:.3f} new: new/old = {totals['old'] / totals['new']:.2f}; "
          f"largest relative difference of a run's numbers {worst:.1e} (Adam: early stop against full run)")


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
    ap.add_argument("--closed-form", action="store_true",
                    help="with --before: one step of its L = 2 closed form and general form beside this kernel")
    ap.add_argument("--plan", action="store_true", help="with --before: the paper plan's runs per CPU-second")
    ap.add_argument("--plan-alphas", default="0.5,2.0", help="comma-separated alphas of --plan")
    ap.add_argument("--plan-steps", type=int, default=5000)
    ap.add_argument("--plan-n-test", type=int, default=10000)
    ap.add_argument("--plan-full-adam", action="store_true", help="--plan: new Adam runs without the early stop")
    ap.add_argument("--early-stop", action="store_true",
                    help="Adam runs to the end and with the early stop, side by side (--plan-alphas, --d)")
    ap.add_argument("--early-stop-seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    args.shapes = [tuple(int(c) for c in s) for s in args.shapes.split(",") if s]
    args.plan_alphas = [float(a) for a in args.plan_alphas.split(",") if a]
    if (args.closed_form or args.plan) and not args.before:
        ap.error("--closed-form and --plan need --before PATH (the checkout to compare with)")

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
    sections = ((bool(args.shapes), bench_shapes), (args.closed_form, bench_closed_form), (args.plan, bench_plan),
                (args.early_stop, bench_early_stop), (args.kernels, bench_kernels),
                (bool(args.before), bench_before_after))
    for wanted, section in sections:
        if wanted:
            section(args, torch, ModelSpec, sim, device, dtype)
    print(f"load1 at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The per-node kernels and their environment, each choice measured beside its alternative in one table.

    python benchmarks/kernels.py prox-forms
    OPENBLAS_NUM_THREADS=1 python benchmarks/kernels.py general [--shapes 2,1,1 3,2,2] [--no-plain]
    python benchmarks/kernels.py node-blocks [--precision fast] [--rounds 2]
    python benchmarks/kernels.py allocator [--rounds 2]
    python benchmarks/kernels.py threads [--repeats 3] [--command "solve --alpha 2 ..."]
    python benchmarks/kernels.py splits [--rounds 30]

* ``prox-forms``: the generated prox Newton terms of the paper's model (objective, gradient,
  Hessian) in three forms: ``sympy.diff`` of the objective with opaque logistics; every logistic over
  one canonical argument (``expressions.shared_logistics``); and the derivatives taken through the
  logistic values (``expressions.prox_derivatives``), which ``derivations`` generates. The minimum over
  30 interleaved calls on 16384 random nodes, the exponentials and arithmetic operators of the
  generated source, the ratio to the first form and the largest difference from the generated one.
* ``general``: per shape ``(L, r, t)``: the cold generation time (``generated_functions`` in a
  fresh process with an empty cache: the derivation of docs/theory.md, section 4, and the numpy
  code); the per-node time of the generated ``prox_newton``, of ``prox_newton_of_T`` (given the
  teacher's matrix, what the prox's Newton iteration calls) with its largest difference from it, of
  the plain ``sympy.diff`` of the exp-form objective lambdified with CSE and its ratio to the
  generated kernel, and of ``channel_moments``: the minimum over interleaved calls on 65536 random
  nodes, one thread.
* ``node-blocks``: whole QMC fixed points (``(3, 1, 1)`` semantic, ``(2, 2, 1)`` mixed, alpha = 2)
  with the per-node functions evaluated in the blocks of ``numerics.model.general.NODE_BLOCK`` and
  with every node in one call, each in its own process, alternating: the best wall and CPU time of
  each, their ratio, and the largest difference of the overlaps (the blocks change no arithmetic, so
  it must be zero). The generated functions make a temporary of the node batch's size per
  operation; 32768 nodes' temporaries leave the processor's cache, blocks of 4096 stay in it.
* ``allocator``: the memory the per-node work frees kept for reuse (``numerics.memory``, the default)
  and left alone (``ATTNPHASE_KEEP_FREED_MEMORY=0``), each variant in its own process (glibc's
  setting cannot be undone within one), alternating: three checked channel evaluations with the fast
  reporting rule, a fast and a high fixed point at alpha = 2 from a warm start, and a ``(2, 2, 1)``
  QMC one with four times the fast rule's points; the best wall time of each, the ratio, the kernel's
  (``sys``) seconds, and whether every run gave the same values to the last bit.
* ``threads``: ``attnphase solve`` (the paper's model, fast) with the library's one-BLAS-thread
  limit (``numerics.threads``, the default), without it (``ATTNPHASE_BLAS_THREADS=0``), and with the
  environment's ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1``, quiet and beside a process keeping one
  core busy, interleaved: the median of the solve's own ``wall time`` and the ratio to the
  environment's single thread.
* ``splits``: channel evaluations (the paper's model at a semantic point near its lower end; the
  draft and both fast rules, with and without the checks) with the continuation split over the
  kernel threads from 2 x 2048 nodes and the integrands from 2 x 32768 (old), and from 2 x
  ``numerics.prox.newton.PARALLEL_PATH_NODES`` and 2 x
  ``numerics.channel.lines.accumulation.PARALLEL_INTEGRANDS`` (new), alternating in one process at
  overlaps moved by 1e-6 each round: the median time of each, their ratio, and whether the two gave
  the same numbers (they must: each node is treated by itself, and the sums go chunk by chunk).

The kernels are ``derivations``' and ``numerics``' own functions (there is no public name for a
kernel), measured as those modules call them.
"""
from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


# --------------------------------------------------------------------------- prox-forms


def cmd_prox_forms(args) -> None:
    import sympy as sp

    from derivations import ModelSpec
    from derivations import symbols as S
    from derivations.expressions import prox_derivatives, shared_logistics
    from derivations.model import prox_objective

    spec = ModelSpec(omega=0.3)
    arguments = (S.h1, S.h2, S.w1, S.w2, S.hs1, S.hs2, S.V) + S.PARAMS
    obj = prox_objective(spec, logistic=True)
    second = [(S.h1, S.h1), (S.h1, S.h2), (S.h2, S.h2)]
    plain = (obj,) + tuple(sp.diff(obj, h) for h in S.H) + tuple(sp.diff(obj, *hh) for hh in second)
    shared = tuple(shared_logistics(e) for e in plain)
    obj_shared = shared_logistics(obj)
    grad, hess = prox_derivatives(obj_shared, S.H)
    forms = {"sympy.diff, opaque logistics": plain, "logistics shared": shared,
             "shared + chain rule (generated)": (obj_shared,) + grad + hess}
    rng = np.random.default_rng(0)
    values = tuple(rng.normal(size=(6, 16384))) + (11.0, 0.5, 0.1, 0.3, 0.25, 0.6, 0.4, 0.4, 0.6)
    functions = {name: sp.lambdify(arguments, exprs, modules="numpy", cse=True) for name, exprs in forms.items()}
    reference = functions["shared + chain rule (generated)"](*values)
    best = dict.fromkeys(functions, np.inf)
    for _ in range(30):
        for name, f in functions.items():
            t = time.perf_counter()
            f(*values)
            best[name] = min(best[name], time.perf_counter() - t)
    first = best["sympy.diff, opaque logistics"]
    print(f"{'form':34s} {'ms':>7s} {'ratio':>6s} {'exp':>4s} {'ops':>5s}  max |diff| to generated")
    for name, f in functions.items():
        src = inspect.getsource(f)
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(f(*values), reference))
        print(f"{name:34s} {best[name] * 1e3:7.3f} {first / best[name]:6.2f} {src.count('exp('):4d} "
              f"{sum(src.count(c) for c in '*+-/'):5d}  {diff:.1e}")


# --------------------------------------------------------------------------- general

NODES = 65536
_COLD = ("import time; t = time.perf_counter()\n"
         "from derivations import ModelSpec, generated_functions\n"
         "generated_functions(ModelSpec(tokens={L}, rank={r}, teacher_rank={t}))\n"
         "print(time.perf_counter() - t)\n")


def _cold_generation(L, r, t) -> float:
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", _COLD.format(L=L, r=r, t=t)], capture_output=True, text=True,
                             env={**os.environ, "ATTNPHASE_CACHE_DIR": cache}, check=True)
    return float(out.stdout.split()[-1])


def _plain_newton(spec):
    """``(objective, gradient, Hessian upper triangle)`` by ``sympy.diff`` of the exp-form objective."""
    import sympy as sp

    from derivations import symbols as S
    from derivations.model import prox_objective

    ms = S.matrix_symbols(spec.shape)
    H = S.components(ms.h)
    obj = prox_objective(spec)
    grad = [sp.diff(obj, h) for h in H]
    hess = [sp.diff(grad[i], H[j]) for i in range(len(H)) for j in range(i, len(H))]
    arguments = H + S.components(ms.w) + S.components(ms.hs) + ms.packed("V") + ms.params
    return sp.lambdify(arguments, (obj, *grad, *hess), modules="numpy", cse=True)


def _random_arguments(names, rng) -> list:
    values = []
    for name in names:
        if name.startswith("V"):
            values.append(1.0 if name == "V" or name[-1] == name[-2] else 0.1)
        elif name.startswith(("m_", "m")) and not name.startswith("moment"):
            values.append(0.2)
        else:
            values.append(rng.normal(size=NODES))
    return values


def _per_node_microseconds(functions, arguments, rounds=10) -> list:
    best = [np.inf] * len(functions)
    for _ in range(rounds):
        for i, (f, a) in enumerate(zip(functions, arguments)):
            t = time.perf_counter()
            f(*a)
            best[i] = min(best[i], time.perf_counter() - t)
    return [b / NODES * 1e6 for b in best]


def cmd_general(args) -> None:
    from derivations import ModelSpec, generated_functions

    rng = np.random.default_rng(0)
    print(f"{'(L, r, t)':10s} {'Lr':>3s} {'generate s':>10s} {'newton us':>10s} {'of T us':>7s} {'T diff':>9s} "
          f"{'plain us':>9s} {'ratio':>6s} {'moments us':>10s}  max |newton - plain|")
    for shape in args.shapes:
        L, r, t = (int(x) for x in shape.split(","))
        spec = ModelSpec(tokens=L, rank=r, teacher_rank=t)
        seconds = _cold_generation(L, r, t)
        gm = generated_functions(spec)
        P = gm.params(spec)
        names = list(inspect.signature(gm.prox_newton).parameters)[:-len(P)]
        newton_args = _random_arguments(names, rng) + list(P)
        moment_names = list(inspect.signature(gm.channel_moments).parameters)[:-len(P)]
        moment_args = _random_arguments(moment_names, rng) + list(P)
        n_h, n_hs = L * r, L * t
        teacher = gm.teacher(*newton_args[2 * n_h:2 * n_h + n_hs], *P)
        of_T_args = (newton_args[:2 * n_h] + [np.broadcast_to(x, (NODES,)) for x in teacher]
                     + newton_args[2 * n_h + n_hs:])
        functions = [gm.prox_newton, gm.channel_moments, gm.prox_newton_of_T]
        arguments = [newton_args, moment_args, of_T_args]
        if not args.no_plain:
            functions.append(_plain_newton(spec))
            arguments.append(newton_args)
        times = _per_node_microseconds(functions, arguments)
        of_T_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(gm.prox_newton(*newton_args),
                                                                      gm.prox_newton_of_T(*of_T_args)))
        if args.no_plain:
            plain, ratio, diff = "-", "-", "-"
        else:
            plain, ratio = f"{times[3]:9.2f}", f"{times[3] / times[0]:6.2f}"
            diff = f"{max(float(np.max(np.abs(a - b))) for a, b in zip(functions[0](*newton_args), functions[3](*newton_args))):.1e}"
        print(f"{str((L, r, t)):10s} {L * r:3d} {seconds:10.1f} {times[0]:10.2f} {times[2]:7.2f} {of_T_diff:9.1e} "
              f"{plain:>9s} {ratio:>6s} {times[1]:10.2f}  {diff}", flush=True)


# --------------------------------------------------------------------------- node-blocks

_BLOCKS_CHILD = r"""
import json, resource, sys, time
import numerics.model.general as general
from derivations import ModelSpec
from numerics.api import solve

block, shape, branch, precision = sys.argv[1:5]
if block == "all":
    general.NODE_BLOCK = 1 << 40
spec = ModelSpec(omega=0.3, **json.loads(shape))
t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
fp = solve(spec, 2.0, branch, precision)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - t0,
                  "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "overlaps": fp.overlaps.pack().tolist(), "converged": fp.converged}))
"""


def cmd_node_blocks(args) -> None:
    print(f"{'task':28s} {'old wall':>9s} {'new wall':>9s} {'old cpu':>8s} {'new cpu':>8s} {'cpu new/old':>11s} "
          f"{'max |diff|':>10s}   (old: every node in one call; new: blocks)")
    for shape, branch in (({"tokens": 3}, "semantic"), ({"rank": 2}, "mixed")):
        best, values = {"all": None, "blocks": None}, {}
        for _ in range(args.rounds):
            for variant in ("all", "blocks"):
                out = subprocess.run([sys.executable, "-c", _BLOCKS_CHILD, variant, json.dumps(shape), branch,
                                      args.precision], check=True, capture_output=True, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                values[variant] = r["overlaps"]
                if best[variant] is None or r["cpu"] < best[variant]["cpu"]:
                    best[variant] = r
        diff = max(abs(a - b) for a, b in zip(values["all"], values["blocks"]))
        old, new = best["all"], best["blocks"]
        print(f"{f'{shape} {branch} ({args.precision})':28s} {old['wall']:9.1f} {new['wall']:9.1f} {old['cpu']:8.1f} "
              f"{new['cpu']:8.1f} {new['cpu'] / old['cpu']:11.3f} {diff:10.1e}", flush=True)


# --------------------------------------------------------------------------- allocator

_ALLOCATOR_CHILD = r"""
import json, resource, sys, time
from derivations import ModelSpec
from numerics.api import Overlaps, solve
from numerics.model.bound import bind
from numerics.channel.lines.expectations import update_hat_overlaps
from numerics.precision import PRECISIONS
from numerics.channel.qmc.precision import refined

spec = ModelSpec()
warm = Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582)
point = Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858)
update_hat_overlaps(bind(spec), point, 1.0, PRECISIONS["fast"].check_rule)  # generated code loaded
solve(ModelSpec(rank=2), 2.0, "mixed", "draft", integrator="qmc")
cases = {
    "channel evaluation (fast reporting rule) x3": lambda: [update_hat_overlaps(bind(spec), point, 1.0,
                                                            PRECISIONS["fast"].check_rule).hats for _ in range(3)],
    "fast fixed point, alpha = 2, warm start": lambda: solve(spec, 2.0, "semantic", "fast", start=warm).values,
    "high fixed point, alpha = 2, warm start": lambda: solve(spec, 2.0, "semantic", "high", start=warm).values,
    "(2, 2, 1) mixed, QMC fast, 4x the points": lambda: solve(ModelSpec(rank=2), 2.0, "mixed", refined("fast", 2),
                                                               integrator="qmc").values,
}
out = {}
for name, case in cases.items():
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    values = case()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out[name] = {"wall": time.perf_counter() - t0, "sys": r1.ru_stime - r0.ru_stime,
                 "cpu": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, "values": repr(values)}
print(json.dumps(out))
"""

#: the allocator's variants: the library's default (freed memory kept, numerics.memory) and left alone
ALLOCATOR_VARIANTS = {"kept": "1", "left alone": "0"}


def cmd_allocator(args) -> None:
    runs = {}
    for _ in range(args.rounds):
        for variant, flag in ALLOCATOR_VARIANTS.items():
            out = subprocess.run([sys.executable, "-c", _ALLOCATOR_CHILD], capture_output=True, text=True,
                                 check=True, env={**os.environ, "ATTNPHASE_KEEP_FREED_MEMORY": flag})
            for task, r in json.loads(out.stdout.splitlines()[-1]).items():
                runs.setdefault(task, {}).setdefault(variant, []).append(r)
    print(f"{'task':<46} {'wall kept':>9} {'left alone':>10} {'ratio':>6} {'sys kept':>9} {'left alone':>10}  "
          f"same values")
    for task, r in runs.items():
        kept, alone = (min(r[v], key=lambda x: x["wall"]) for v in ALLOCATOR_VARIANTS)
        same = len({x["values"] for v in ALLOCATOR_VARIANTS for x in r[v]}) == 1
        print(f"{task:<46} {kept['wall']:9.2f} {alone['wall']:10.2f} {alone['wall'] / kept['wall']:6.2f} "
              f"{kept['sys']:9.2f} {alone['sys']:10.2f}  {same}")


# --------------------------------------------------------------------------- threads

THREAD_CONFIGS = {
    "limited": {},
    "unlimited": {"ATTNPHASE_BLAS_THREADS": "0"},
    "env 1 thread": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
}


def _busy(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10000))


def _solve_seconds(command: str, extra: dict) -> float:
    out = subprocess.run([sys.executable, "-m", "attnphase.cli", *shlex.split(command)], env={**os.environ, **extra},
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"wall time ([0-9.]+) s", out).group(1))


def cmd_threads(args) -> None:
    _solve_seconds(args.command, {})  # the generated code's cache
    for load in ("quiet", "one core busy"):
        stop = multiprocessing.Event()
        busy = None
        if load != "quiet":
            busy = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
            busy.start()
            time.sleep(0.5)
        times = {name: [] for name in THREAD_CONFIGS}
        try:
            for _ in range(args.repeats):
                for name, extra in THREAD_CONFIGS.items():
                    times[name].append(_solve_seconds(args.command, extra))
        finally:
            stop.set()
            if busy is not None:
                busy.join()
        ref = statistics.median(times["env 1 thread"])
        print(f"{load}: {args.command}")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"  {name:14s} median {med:6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})  "
                  f"ratio to env 1 thread {med / ref:5.2f}")


# --------------------------------------------------------------------------- splits


def cmd_splits(args) -> None:
    import dataclasses

    from derivations import ModelSpec
    from numerics.channel.lines import accumulation, expectations
    from numerics.model.bound import bind
    from numerics.overlaps import Overlaps
    from numerics.precision import PRECISIONS
    from numerics.prox import newton

    model = bind(ModelSpec())
    point = Overlaps(q=0.0682, m=0.0, V=27.0, theta=0.0945)
    rules = {"draft": PRECISIONS["draft"].rule, "fast coarse": PRECISIONS["fast"].rule,
             "fast reporting": PRECISIONS["fast"].check_rule}
    splits = {"old": (2048, 32768), "new": (newton.PARALLEL_PATH_NODES, accumulation.PARALLEL_INTEGRANDS)}
    print(f"nodes per thread of a split (continuation, integrands): old {splits['old']}, new {splits['new']}; "
          f"{os.environ.get('ATTNPHASE_KERNEL_THREADS', 'default')} kernel threads")
    print(f"{'evaluation':26s} {'old ms':>8s} {'new ms':>8s} {'new/old':>8s}  same numbers")
    saved = splits["new"]
    try:
        for name, rule in rules.items():
            for checked in (False, True):
                rule_k = dataclasses.replace(rule, check_global=checked)
                expectations.channel_expectations(model, point, rule_k)
                times, values = {k: [] for k in splits}, {k: set() for k in splits}
                for i in range(args.rounds):
                    at = dataclasses.replace(point, q=point.q * (1 + 1e-6 * (i + 1)))
                    for variant, split in splits.items():
                        newton.PARALLEL_PATH_NODES, accumulation.PARALLEL_INTEGRANDS = split
                        expectations._LAST_EVALUATION.clear()
                        t0 = time.perf_counter()
                        res = expectations.channel_expectations(model, at, rule_k)
                        times[variant].append(time.perf_counter() - t0)
                        values[variant].add((i, tuple(res.expectations.values())))
                old, new = (1e3 * statistics.median(times[k]) for k in splits)
                label = f"{name}, {'checked' if checked else 'unchecked'}"
                print(f"{label:26s} {old:8.2f} {new:8.2f} {new / old:8.3f}  {values['old'] == values['new']}")
    finally:
        newton.PARALLEL_PATH_NODES, accumulation.PARALLEL_INTEGRANDS = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("prox-forms", help="the paper model's prox Newton terms in three generated forms")
    g = sub.add_parser("general", help="generation time and per-node cost of the general kernels")
    g.add_argument("--shapes", nargs="+", default=["2,1,1", "3,1,1", "2,2,1", "2,1,2", "3,2,2"])
    g.add_argument("--no-plain", action="store_true", help="skip the sympy.diff comparison")
    b = sub.add_parser("node-blocks", help="QMC fixed points with and without blocks of nodes")
    b.add_argument("--precision", default="fast")
    b.add_argument("--rounds", type=int, default=2)
    a = sub.add_parser("allocator", help="freed memory kept for reuse (numerics.memory) and left alone")
    a.add_argument("--rounds", type=int, default=2)
    t = sub.add_parser("threads", help="the BLAS thread limit, quiet and beside a busy core")
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--command", default="solve --alpha 2 --branch semantic --omega 0.3")
    f = sub.add_parser("splits", help="channel evaluations with the kernels' old and new splits over the threads")
    f.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    {"prox-forms": cmd_prox_forms, "general": cmd_general, "node-blocks": cmd_node_blocks,
     "allocator": cmd_allocator, "threads": cmd_threads, "splits": cmd_splits}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

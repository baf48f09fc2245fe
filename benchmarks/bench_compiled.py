"""The compiled backend against the numpy one, side by side: first-use compile time, cached start,
and the per-node Newton iteration.

For each shape, in fresh processes on an empty cache folder:

* ``generate``: the numpy functions generated (derivation, code, written to the cache);
* ``compile``: the compiled module generated and its Newton kernel compiled by numba (first use);
* ``cached start``: a new process loading both from the cache (numba imported, the kernel loaded);

then, in this process, ``--nodes`` random nodes minimised from ``w`` by the numpy reference of the
saddle-free Newton iteration (:func:`numerics.prox.newton.saddle_free_newton`) and by the compiled
kernel on one thread and on ``--threads`` threads, with the largest difference of the minima.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_compiled.py [--shapes 2,1,1 3,1,1 2,2,1] [--nodes 20000]

Targets (issue of the compiled kernels): the same minima to rounding; a compiled Newton several
times the numpy one's speed per thread.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

_STEP = """
import sys, time
t0 = time.perf_counter()
from derivations import ModelSpec, generated_functions
L, r, t = map(int, sys.argv[1].split(","))
generated_functions(ModelSpec(tokens=L, rank=r, teacher_rank=t), sys.argv[2])
print(time.perf_counter() - t0)
"""


def _fresh(shape: str, backend: str, cache: str) -> float:
    env = dict(os.environ, ATTNPHASE_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", _STEP, shape, backend], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _newton_times(shape, nodes: int, threads: int):
    from derivations import ModelSpec, generated_functions
    from numerics.model.general import GeneralModel
    from numerics.prox.newton import compiled_newton, curvature_floor, saddle_free_newton

    L, r, t = shape
    spec = ModelSpec(tokens=L, rank=r, teacher_rank=t)
    model = GeneralModel(spec, "numpy")
    kernel = generated_functions(spec, "compiled").newton_prox_newton_of_T
    rng = np.random.default_rng(0)
    V = np.diag(np.linspace(8.0, 14.0, r))
    w = 0.6 * rng.standard_normal((nodes, model.n_h))
    T = model.teacher(0.5 * rng.standard_normal((nodes, L * t)))
    floor = curvature_floor(V)
    t0 = time.perf_counter()
    ref = saddle_free_newton(lambda a, b, c: model.prox_newton(a, b, c, V),
                             lambda a, b, c: model.prox_objective(a, b, c, V), w, w, T, floor)
    t_numpy = time.perf_counter() - t0
    out = {}
    for k in (1, threads):
        os.environ["ATTNPHASE_KERNEL_THREADS"] = str(k)
        compiled_newton(kernel, w[:8], w[:8], T[:8], model.pack("V", V), model.params, floor, 1e-11, 60, None, None,
                        1e-2, None)
        t0 = time.perf_counter()
        got = compiled_newton(kernel, w, w, T, model.pack("V", V), model.params, floor, 1e-11, 60, None, None, 1e-2,
                              None)
        out[k] = time.perf_counter() - t0
    os.environ.pop("ATTNPHASE_KERNEL_THREADS", None)
    return t_numpy, out[1], out[threads], float(np.max(np.abs(got[0] - ref[0])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["2,1,1", "3,1,1", "2,2,1"])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"{'shape':<8} {'generate':>9} {'compile':>8} {'cached start':>13} {'Newton numpy':>13} {'compiled 1 thr':>15} "
          f"{'ratio':>6} {f'{args.threads} threads':>10} {'max |dh|':>9}")
    for shape in args.shapes:
        with tempfile.TemporaryDirectory() as cache:
            generate = _fresh(shape, "numpy", cache)
            compile_ = _fresh(shape, "compiled", cache)
            cached = _fresh(shape, "compiled", cache)
        t_np, t1, tk, diff = _newton_times(tuple(map(int, shape.split(","))), args.nodes, args.threads)
        print(f"{shape:<8} {generate:8.1f}s {compile_:7.1f}s {cached:12.2f}s {t_np:12.3f}s {t1:14.3f}s "
              f"{t_np / t1:6.1f} {tk:9.3f}s {diff:9.1e}")


if __name__ == "__main__":
    main()

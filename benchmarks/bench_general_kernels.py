"""Cold generation time and per-node cost of the general kernels, shape by shape, side by side.

For each shape ``(L, r, t)`` (default positions and teacher matrix):

* ``generate s``: wall time of a first ``generated_functions(spec)`` in a fresh process with an
  empty cache directory (the derivation of docs/theory.md, section 4, and the numpy code);
* ``newton``: per-node time of the generated ``prox_newton`` (objective, gradient and Hessian
  in the ``L r`` variables, derivatives through opaque logistic/softmax values, CSE);
* ``of T``: the same terms from ``prox_newton_of_T``, given the teacher's matrix of the same ``h*``
  (what the prox's Newton iteration calls, the teacher computed once per search), and their largest
  difference from ``newton``;
* ``plain``: the same terms from ``sympy.diff`` of the exp-form objective, lambdified with CSE
  (the straightforward way), and its ratio to the generated kernel;
* ``moments``: per-node time of ``channel_moments``.

Times per node are the minimum over interleaved calls on 65536 random nodes, one thread.
Run: OPENBLAS_NUM_THREADS=1 python benchmarks/bench_general_kernels.py [--shapes 2,1,1 3,2,2] [--no-plain]
"""
import argparse
import inspect
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

NODES = 65536
COLD = ("import time; t = time.perf_counter()\n"
        "from derivations import ModelSpec, generated_functions\n"
        "generated_functions(ModelSpec(tokens={L}, rank={r}, teacher_rank={t}))\n"
        "print(time.perf_counter() - t)\n")


def cold_generation(L, r, t):
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", COLD.format(L=L, r=r, t=t)], capture_output=True, text=True,
                             env={**os.environ, "ATTNPHASE_CACHE_DIR": cache}, check=True)
    return float(out.stdout.split()[-1])


def plain_newton(spec):
    """``(objective, gradient, Hessian upper triangle)`` by ``sympy.diff`` of the exp-form objective."""
    import sympy as sp

    from derivations import symbols as S
    from derivations.model import prox_objective

    ms = S.matrix_symbols(spec.shape)
    H = S.components(ms.h)
    obj = prox_objective(spec)
    grad = [sp.diff(obj, h) for h in H]
    hess = [sp.diff(grad[i], H[j]) for i in range(len(H)) for j in range(i, len(H))]
    args = H + S.components(ms.w) + S.components(ms.hs) + ms.packed("V") + ms.params
    return sp.lambdify(args, (obj, *grad, *hess), modules="numpy", cse=True)


def random_arguments(names, spec, rng):
    values = []
    for name in names:
        if name.startswith("V"):
            values.append(1.0 if name == "V" or name[-1] == name[-2] else 0.1)
        elif name.startswith(("m_", "m")) and not name.startswith("moment"):
            values.append(0.2)
        else:
            values.append(rng.normal(size=NODES))
    return values


def best_of(functions, arguments, rounds=10):
    best = [np.inf] * len(functions)
    for _ in range(rounds):
        for i, (f, a) in enumerate(zip(functions, arguments)):
            t = time.perf_counter()
            f(*a)
            best[i] = min(best[i], time.perf_counter() - t)
    return [b / NODES * 1e6 for b in best]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["2,1,1", "3,1,1", "2,2,1", "2,1,2", "3,2,2"])
    parser.add_argument("--no-plain", action="store_true", help="skip the sympy.diff comparison")
    args = parser.parse_args()

    from derivations import ModelSpec, generated_functions

    rng = np.random.default_rng(0)
    print(f"{'(L, r, t)':10s} {'Lr':>3s} {'generate s':>10s} {'newton us':>10s} {'of T us':>7s} {'T diff':>9s} "
          f"{'plain us':>9s} {'ratio':>6s} {'moments us':>10s}  max |newton - plain|")
    for shape in args.shapes:
        L, r, t = (int(x) for x in shape.split(","))
        spec = ModelSpec(tokens=L, rank=r, teacher_rank=t)
        seconds = cold_generation(L, r, t)
        gm = generated_functions(spec)
        P = gm.params(spec)
        names = list(inspect.signature(gm.prox_newton).parameters)[:-len(P)]
        newton_args = random_arguments(names, spec, rng) + list(P)
        moment_names = list(inspect.signature(gm.channel_moments).parameters)[:-len(P)]
        moment_args = random_arguments(moment_names, spec, rng) + list(P)
        n_h, n_hs = L * r, L * t
        teacher = gm.teacher(*newton_args[2 * n_h:2 * n_h + n_hs], *P)
        of_T_args = (newton_args[:2 * n_h] + [np.broadcast_to(x, (NODES,)) for x in teacher]
                     + newton_args[2 * n_h + n_hs:])
        functions = [gm.prox_newton, gm.channel_moments, gm.prox_newton_of_T]
        arguments = [newton_args, moment_args, of_T_args]
        if not args.no_plain:
            functions.append(plain_newton(spec))
            arguments.append(newton_args)
        times = best_of(functions, arguments)
        of_T_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(gm.prox_newton(*newton_args),
                                                                      gm.prox_newton_of_T(*of_T_args)))
        if args.no_plain:
            plain, ratio, diff = "-", "-", "-"
        else:
            plain, ratio = f"{times[3]:9.2f}", f"{times[3] / times[0]:6.2f}"
            diff = f"{max(float(np.max(np.abs(a - b))) for a, b in zip(functions[0](*newton_args), functions[3](*newton_args))):.1e}"
        print(f"{str((L, r, t)):10s} {L * r:3d} {seconds:10.1f} {times[0]:10.2f} {times[2]:7.2f} {of_T_diff:9.1e} "
              f"{plain:>9s} {ratio:>6s} {times[1]:10.2f}  {diff}", flush=True)


if __name__ == "__main__":
    main()

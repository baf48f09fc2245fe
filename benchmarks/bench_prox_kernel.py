"""The generated prox Newton terms (objective, gradient, Hessian) in three forms, side by side.

* ``sympy.diff`` of the objective with opaque logistics;
* the same with every logistic over one canonical argument (``codegen._shared_logistics``);
* and with the derivatives taken through the logistic values (``codegen._prox_derivatives``),
  which is what ``derivations`` generates now.

Prints the minimum over 30 interleaved calls on 16384 random nodes, the number of
exponentials and of arithmetic operators in the generated source, and the ratio to the
first form. Run: python benchmarks/bench_prox_kernel.py
"""
import inspect
import time

import numpy as np
import sympy as sp

from derivations import ModelSpec
from derivations import symbols as S
from derivations.codegen import _prox_derivatives, _shared_logistics
from derivations.model import prox_objective


def main():
    spec = ModelSpec(omega=0.3)
    args = (S.h1, S.h2, S.w1, S.w2, S.hs1, S.hs2, S.V) + S.PARAMS
    obj = prox_objective(spec, logistic=True)
    second = [(S.h1, S.h1), (S.h1, S.h2), (S.h2, S.h2)]
    plain = (obj,) + tuple(sp.diff(obj, h) for h in S.H) + tuple(sp.diff(obj, *hh) for hh in second)
    shared = tuple(_shared_logistics(e) for e in plain)
    obj_shared = _shared_logistics(obj)
    grad, hess = _prox_derivatives(obj_shared, S.H)
    forms = {"sympy.diff, opaque logistics": plain, "logistics shared": shared,
             "shared + chain rule (generated)": (obj_shared,) + grad + hess}
    rng = np.random.default_rng(0)
    values = tuple(rng.normal(size=(6, 16384))) + (11.0, 0.5, 0.1, 0.3, 0.25, 0.6, 0.4, 0.4, 0.6)
    functions = {name: sp.lambdify(args, exprs, modules="numpy", cse=True) for name, exprs in forms.items()}
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


if __name__ == "__main__":
    main()

"""The compiled backend: the generated per-node functions as numba kernels.

For the ``compiled`` backend :func:`derivations.codegen.generated_functions` writes a module
(:func:`compiled_source`) holding, for every per-node function of :data:`PER_NODE`,

* ``_node_<name>``: the expression as a scalar function of scalars (SymPy's ``math`` printer with
  common subexpressions, the same expressions as the numpy backend's), compiled by numba;
* ``_vec_<name>``: a compiled loop of it over the nodes;
* ``<name>``: the numpy backend's signature and outputs (arrays broadcast together in, one array
  or a tuple of arrays of their shape out), calling that loop;

and ``newton_prox_newton_of_T``: the whole per-node saddle-free Newton iteration of
:mod:`derivations.kernels` bound to the prox objective in the teacher's matrix, so that a node
iterates to its own tolerance with no Python in between, and ``follow_prox_newton_of_T``, the
continuation along paths of nodes built on it; for a two-token, rank-one channel, ``line_sums_channel_integrands``,
the line quadrature's weighted sums of the channel integrands in one pass over its nodes, and
``weighted_sum_test_error_integrand``, the test error's. The functions
evaluated once per evaluation of the saddle-point map
(the prior side, the conjugates from averaged moments) are the numpy backend's.

numba caches the machine code next to the generated module (``__pycache__`` beside it), keyed by
the module's file, which is named by the content key of :func:`derivations.codegen.cache_key`; a
changed model or generator never reuses a stale kernel.
"""
from __future__ import annotations

import inspect
import logging
import re
from typing import Dict, Sequence, Tuple

import numpy as np

log = logging.getLogger(__name__)

#: per-node functions compiled (the others of a model are evaluated once per map evaluation)
PER_NODE = ("loss", "dloss_dhstar", "teacher", "attention", "prox_objective", "prox_grad", "prox_hess",
            "prox_newton", "prox_objective_of_T", "prox_newton_of_T", "channel_moments", "test_error_integrand_x",
            "preactivations", "channel_integrands", "test_error_integrand")
#: the prox objective that gets a Newton kernel: (terms function, objective-only function); in the
#: teacher's matrix ``T``, computed once per node, where the terms in ``h*`` recompute the teacher's
#: softmax at every step (70 against 98 ns a node at two tokens)
NEWTON_KERNELS = (("prox_newton_of_T", "prox_objective_of_T"),)
#: the functions of :mod:`derivations.kernels` a compiled module exports, by their names there: each
#: is exported as ``<entry>_<terms>`` for each of :data:`NEWTON_KERNELS`
ENTRY_POINTS = {"newton_nodes": "newton", "follow_paths": "follow", "grid_starts": "grid", "switch_lines": "switch"}
#: the pitchfork radii of the line quadrature's teacher rays (:mod:`derivations.pitchfork_kernel`),
#: generated where ``prox_hess`` takes these node arguments (a two-token, rank-one prox)
PITCHFORK = "pitchfork_prox_hess"
PITCHFORK_NODE_ARGS = ("h1", "h2", "w1", "w2", "hs1", "hs2", "V")
#: the line quadrature's weighted sums of the channel integrands (:func:`line_sums_source`), generated
#: where ``channel_integrands`` takes these node arguments (a two-token, rank-one channel)
LINE_SUMS = "line_sums_channel_integrands"
LINE_SUMS_NODE_ARGS = ("h1", "h2", "xi1", "xi2", "y1", "y2", "q", "m", "V", "theta")
#: the weighted sum of the test-error integrand over a rule's nodes (:func:`test_error_sum_source`),
#: generated where ``test_error_integrand`` takes these node arguments (a two-token, rank-one channel)
TEST_ERROR_SUM = "weighted_sum_test_error_integrand"
TEST_ERROR_NODE_ARGS = ("xi1", "xi2", "y1", "y2", "q", "m", "theta")
#: every compiled function: cached next to its module; float errors as numpy's (inf and nan, no
#: exception: the solver reports non-finite values as its own error); no fast-math, so the
#: arithmetic is IEEE's, as numpy's
JIT = '@njit(cache=True, nogil=True, error_model="numpy")'


def numba_version() -> str:
    """numba's version, or ``""`` where it cannot be imported."""
    try:
        import numba
    except Exception:  # noqa: BLE001 - any failure to import means: no compiled backend
        return ""
    return numba.__version__


def _scalar_source(name: str, args: tuple, expr) -> str:
    """``_node_<name>``: the expression as a scalar numba function (SymPy's math printer, CSE)."""
    import sympy as sp

    f = sp.lambdify(args, expr, modules="math", cse=True)
    src = inspect.getsource(f)
    header, _, body = src.partition("\n")
    if not header.startswith("def _lambdifygenerated("):
        raise RuntimeError(f"unexpected lambdify output for {name}: {header}")
    header = header.replace("def _lambdifygenerated(", f"def _node_{name}(", 1)
    return f"{JIT}\n{header}\n{_paired_exponentials(body)}"


#: a common subexpression's assignment in the printed body
_CSE_LINE = re.compile(r"^(?P<indent> +)(?P<name>x\d+) = ")


def _paired_exponentials(body: str) -> str:
    """``body`` with ``exp(xN)`` and ``exp(-xN)`` of one common subexpression ``xN`` computed as one
    exponential and its reciprocal: the generated sigmoids come in such pairs (the channel integrands and
    the test error's take eight exponentials of four arguments). Each pair's exponential is assigned right
    after ``xN``; ``1 / exp(x)`` differs from ``exp(-x)`` by at most an ulp, and overflows where it does
    (a sigmoid's limits stay exact)."""
    lines = body.split("\n")
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        match = _CSE_LINE.match(line)
        if match is None:
            continue
        name = match["name"]
        plus, minus, pair = f"exp({name})", f"exp(-{name})", f"_e_{name}"
        rest = "\n".join(lines[i + 1:])
        if plus in rest and minus in rest:
            out.append(f"{match['indent']}{pair} = {plus}")
            for j in range(i + 1, len(lines)):
                lines[j] = lines[j].replace(plus, pair).replace(minus, f"(1/{pair})")
    return "\n".join(out)


def _vector_source(name: str, n_args: int, n_params: int, n_out: int, tuple_out: bool) -> str:
    call = ", ".join([f"cols[{i}, i]" for i in range(n_args)] + [f"p[{i}]" for i in range(n_params)])
    lines = [JIT, f"def _vec_{name}(cols, p):", "    N = cols.shape[1]",
             f"    out = np.empty(({n_out}, N))", "    for i in range(N):", f"        r = _node_{name}({call})"]
    if tuple_out:
        lines += [f"        out[{k}, i] = r[{k}]" for k in range(n_out)]
    else:
        lines.append("        out[0, i] = r")
    lines.append("    return out")
    return "\n".join(lines)


def _wrapper_source(name: str, arg_names: Sequence[str], n_args: int, tuple_out: bool, doc: str) -> str:
    node, params = arg_names[:n_args], arg_names[n_args:]
    doc = doc.replace("\\", "\\\\").replace('"""', "'''")
    return (f"def {name}({', '.join(arg_names)}):\n    \"\"\"{doc}\n    \"\"\"\n"
            f"    return call_vectorised(_vec_{name}, ({', '.join(node)}{',' if len(node) == 1 else ''}), "
            f"({', '.join(params)}{',' if len(params) == 1 else ''}), {tuple_out})")


#: the template's call of the terms, a statement of its own (:mod:`derivations.kernels`)
_TERMS_CALL = re.compile(r"^(?P<indent> *)(?P<target>\w+) = _TERMS\((?P<at>h|trial), i, w, c, v, p, g, H\)$",
                         flags=re.M)
#: the template's call of the objective alone, at the line search's trial point
_OBJECTIVE_CALL = "_OBJECTIVE(trial, i, w, c, v, p)"


def bind_terms(body: str, terms: str, objective: str, groups: Dict[str, int], n_params: int, n_h: int) -> str:
    """The iteration's source ``body`` bound to a model: ``_N_H`` the number ``n_h``, and its ``_TERMS`` and
    ``_OBJECTIVE`` calls written out in place as the scalar functions ``_node_<terms>`` and
    ``_node_<objective>`` of node ``i``'s entries of the arrays ``h`` (or ``trial``), ``w``, ``c`` and of
    ``v``, ``p``, the gradient and the Hessian (the upper triangle, row by row, as the terms return
    them) unpacked into ``g`` and ``H``. In place, because a numba call that passes arrays costs more
    than a two-token node's terms (:mod:`derivations.kernels`)."""
    def row(array, count):
        return [f"{array}[i, {k}]" for k in range(count)]

    def entries(array, count):
        return [f"{array}[{k}]" for k in range(count)]

    rest = row("w", groups["w"]) + row("c", groups["c"]) + entries("v", groups["v"]) + entries("p", n_params)

    def terms_block(match):
        at = row("h", n_h) if match["at"] == "h" else entries("trial", n_h)
        lines = [f"terms_out = _node_{terms}({', '.join(at + rest)})"]
        lines += [f"g[{j}] = terms_out[{1 + j}]" for j in range(n_h)]
        e = 1 + n_h
        for a in range(n_h):
            for b in range(a, n_h):
                lines.append(f"H[{a}, {b}] = terms_out[{e}]")
                if a != b:
                    lines.append(f"H[{b}, {a}] = terms_out[{e}]")
                e += 1
        lines.append(f"{match['target']} = terms_out[0]")
        return "\n".join(match["indent"] + line for line in lines)

    body, n_terms = _TERMS_CALL.subn(terms_block, body)
    body = re.sub(r"\b_N_H\b", str(n_h), body)
    n_objective = body.count(_OBJECTIVE_CALL)
    body = body.replace(_OBJECTIVE_CALL, f"_node_{objective}({', '.join(entries('trial', n_h) + rest)})")
    if n_terms != 2 or n_objective != 2:
        raise RuntimeError(f"the kernel template calls _TERMS {n_terms} and _OBJECTIVE {n_objective} times "
                           "in the forms bind_terms writes out; expected twice (at the iterate and at the "
                           "line search's full-length trial) and twice (the line search, the grid of starts)")
    return body


def _bound_template(module, first: str, rename, bind) -> str:
    """The functions of a kernel template ``module`` (:mod:`derivations.kernels`,
    :mod:`derivations.pitchfork_kernel`) from ``def first`` on, for a generated module: each renamed by
    ``rename(name)``, then the template's calls written out by ``bind(body)``, checked that none of its
    ``TEMPLATE_NAMES`` is left, and each compiled (:data:`JIT`)."""
    src = inspect.getsource(module)
    body = src[src.index(f"def {first}"):]
    for fn in re.findall(r"^def (\w+)\(", body, flags=re.M):
        body = re.sub(rf"\b{fn}\b", rename(fn), body)
    body = bind(body)
    left = [name for name in module.TEMPLATE_NAMES if re.search(rf"\b{name}\b", body)]
    if left:
        raise RuntimeError(f"the kernel template still names {', '.join(left)} after binding")
    body = re.sub(r"^def ", JIT + "\ndef ", body, flags=re.M)
    return body.replace("  # pragma: no cover - compiled in a generated module", "").replace("  # pragma: no cover", "")


def _kernel_source(terms: str, objective: str, groups: Dict[str, int], n_params: int, n_h: int) -> str:
    """The iteration of :mod:`derivations.kernels` bound to the model's terms (:func:`bind_terms`), its
    entry points renamed ``newton_<terms>``, ``follow_<terms>``, ``grid_<terms>`` and ``switch_<terms>``
    (:data:`ENTRY_POINTS`)."""
    from . import kernels

    body = _bound_template(kernels, "newton_nodes",
                           lambda fn: f"{ENTRY_POINTS[fn]}_{terms}" if fn in ENTRY_POINTS else f"{fn}_{terms}",
                           lambda body: bind_terms(body, terms, objective, groups, n_params, n_h))
    constants = "\n".join(f"{k} = {getattr(kernels, k)!r}"
                          for k in ("LINE_SEARCH_HALVINGS", "ARMIJO", "FULL_STEP"))
    return constants + "\n\n\n" + body


def pitchfork_source(n_params: int) -> str:
    """:mod:`derivations.pitchfork_kernel` bound to a model: its ``_HESS(hs1, hs2, V, p)`` written out
    as the scalar ``_node_prox_hess`` at ``h = w = 0`` with the parameters unpacked, its functions
    renamed with the suffix ``_prox_hess`` (the entry point :data:`PITCHFORK`) and compiled."""
    from . import pitchfork_kernel

    params = ", ".join(f"p[{k}]" for k in range(n_params))

    def bind(body):
        body, n = re.subn(r"\b_HESS\(hs1, hs2, V, p\)",
                          f"_node_prox_hess(0.0, 0.0, 0.0, 0.0, hs1, hs2, V, {params})", body)
        if n != 1:
            raise RuntimeError("the pitchfork template calls _HESS(hs1, hs2, V, p) once, in that form")
        return body

    return _bound_template(pitchfork_kernel, "pitchfork_radii",
                           lambda fn: PITCHFORK if fn == "pitchfork_radii" else f"{fn}_prox_hess", bind)


def line_sums_source(n_out: int, n_params: int) -> str:
    """:data:`LINE_SUMS`: the weighted sums of the ``n_out`` channel integrands over nodes, chunk by chunk,
    in one compiled pass, without arrays of the integrands, of their arguments or of their products with
    the weights. Chunk ``k`` holds the nodes ``edges[k] <= i < edges[k + 1]``; node ``i`` has the prox ``h1[i],
    h2[i]``, ``w1[i], w2[i]``, the teacher pre-activations ``hs1[i], hs2[i]`` and the weight
    ``weight[i]``; its standard-normal ``(xi1, xi2, y1, y2) = B (w1 - mu1, w2 - mu2, hs1, hs2)`` (the
    line quadrature's affine map, ``numerics.channel.lines.accumulation.xi_y``); ``ov`` holds ``q, m, V,
    theta``. Returns ``(chunks, n_out)``: each chunk's sums, its nodes added in order."""
    call = ", ".join(["h1[i]", "h2[i]", "a[0]", "a[1]", "a[2]", "a[3]", "ov[0]", "ov[1]", "ov[2]", "ov[3]"]
                     + [f"p[{k}]" for k in range(n_params)])
    lines = [JIT, f"def {LINE_SUMS}(h1, h2, w1, w2, hs1, hs2, weight, B, mu, ov, p, edges):",
             f"    out = np.zeros((edges.shape[0] - 1, {n_out}))",
             "    a = np.empty(4)",
             "    for k in range(edges.shape[0] - 1):",
             "        for i in range(edges[k], edges[k + 1]):",
             "            r0 = w1[i] - mu[0]",
             "            r1 = w2[i] - mu[1]",
             "            for j in range(4):",
             "                a[j] = B[j, 0] * r0 + B[j, 1] * r1 + B[j, 2] * hs1[i] + B[j, 3] * hs2[i]",
             f"            r = _node_channel_integrands({call})",
             "            wi = weight[i]"]
    lines += [f"            out[k, {j}] += r[{j}] * wi" for j in range(n_out)]
    lines.append("    return out")
    return "\n".join(lines)


def test_error_sum_source(n_params: int) -> str:
    """:data:`TEST_ERROR_SUM`: the test-error integrand at the nodes ``xi1, xi2, y1, y2`` (``s`` holds ``q, m,
    theta``) times their ``weight``, summed in one compiled pass in the nodes' order, without an array of
    the integrand or of its arguments."""
    call = ", ".join(["xi1[i]", "xi2[i]", "y1[i]", "y2[i]", "s[0]", "s[1]", "s[2]"]
                     + [f"p[{k}]" for k in range(n_params)])
    return "\n".join([JIT, f"def {TEST_ERROR_SUM}(xi1, xi2, y1, y2, weight, s, p):", "    total = 0.0",
                      "    for i in range(weight.shape[0]):",
                      f"        total += _node_test_error_integrand({call}) * weight[i]", "    return total"])


def compiled_source(exprs: Dict[str, Tuple[tuple, object, str]], names: Sequence[str], n_params: int,
                    n_h: int, header: str) -> str:
    """The source of a model's compiled module: :data:`PER_NODE` functions among ``names`` and the
    Newton kernels (``exprs``: :func:`derivations.expressions.build_expressions`)."""
    parts = [header, "from math import *  # noqa: F401,F403 - the math printer's functions",
             "import numpy as np", "from numba import njit", "", "from derivations.compiled import call_vectorised",
             "from derivations.kernel_linalg import eigen_direction, max_abs"]
    for name in names:
        if name not in PER_NODE:
            continue
        args, expr, doc = exprs[name]
        tuple_out = isinstance(expr, tuple)
        n_args = len(args) - n_params
        parts.append(_scalar_source(name, args, expr))
        parts.append(_vector_source(name, n_args, n_params, len(expr) if tuple_out else 1, tuple_out))
        parts.append(_wrapper_source(name, [a.name for a in args], n_args, tuple_out,
                                     f"{name}: {doc} (compiled; per-node arguments broadcast together)"))
    for terms, objective in NEWTON_KERNELS:
        if terms not in names:
            continue
        args = exprs[terms][0]
        groups = _argument_groups([a.name for a in args[:len(args) - n_params]], n_h)
        parts.append(_kernel_source(terms, objective, groups, n_params, n_h))
    if "prox_hess" in names and tuple(a.name for a in exprs["prox_hess"][0][:-n_params]) == PITCHFORK_NODE_ARGS:
        parts.append(pitchfork_source(n_params))
    integrands = exprs.get("channel_integrands")
    if ("channel_integrands" in names and isinstance(integrands[1], tuple)
            and tuple(a.name for a in integrands[0][:-n_params]) == LINE_SUMS_NODE_ARGS):
        parts.append(line_sums_source(len(integrands[1]), n_params))
    test_error = exprs.get("test_error_integrand")
    if ("test_error_integrand" in names and not isinstance(test_error[1], tuple)
            and tuple(a.name for a in test_error[0][:-n_params]) == TEST_ERROR_NODE_ARGS):
        parts.append(test_error_sum_source(n_params))
    return "\n\n\n".join(parts) + "\n"


def _argument_groups(node_args: Sequence[str], n_h: int) -> Dict[str, int]:
    """How a prox function's per-node arguments split: ``n_h`` of ``h``, ``n_h`` of ``w``, the teacher
    values ``c`` and the packed ``V`` (its names start with ``V``)."""
    n_v = sum(1 for a in node_args if a == "V" or a.startswith("V_"))
    return {"h": n_h, "w": n_h, "c": len(node_args) - 2 * n_h - n_v, "v": n_v}


def call_vectorised(kernel, node_args: tuple, params: tuple, tuple_out: bool):
    """Run a compiled loop on arguments broadcast together: one array, or a tuple of arrays, of
    their broadcast shape (the numpy backend's outputs)."""
    arrays = [np.asarray(a, dtype=float) for a in node_args]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    n = int(np.prod(shape))
    cols = np.empty((len(arrays), n))
    for i, a in enumerate(arrays):
        cols[i].reshape(shape)[...] = a
    out = kernel(cols, np.asarray(params, dtype=float))
    if tuple_out:
        return tuple(o.reshape(shape) for o in out)
    return out[0].reshape(shape)


def compiled_names(names: Sequence[str]) -> Tuple[str, ...]:
    """The functions a compiled module exports for a model with the functions ``names``."""
    return tuple(n for n in names if n in PER_NODE) + tuple(f"{entry}_{t}" for t, _ in NEWTON_KERNELS if t in names
                                                           for entry in ENTRY_POINTS.values())


def _import(path, key: str):
    """The generated module at ``path``, imported as a module of its own (numba's cache needs its file)."""
    import importlib.util
    import sys

    name = f"_attnphase_compiled_{key}"
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _warm_up(module, names: Sequence[str], n_params: int, n_h: int) -> None:
    """Call the Newton kernels, the continuations, the grids of starts and (for ``h`` in ``R^2``) the
    switch location once on one node, so that each is compiled (or
    loaded from numba's cache) now and a failure to compile is raised here rather than in a solve; the
    per-node functions compile at their first call (:class:`_FirstCall`). The argument types are the
    callers' (:mod:`numerics.prox.newton`), so that no call compiles another specialisation."""
    params = np.full(n_params, 0.5)
    for terms, _ in NEWTON_KERNELS:
        if f"newton_{terms}" not in names:
            continue
        groups = _argument_groups(_node_arguments(module, terms, n_params), n_h)
        h, c, v = np.full((1, n_h), 0.1), np.full((1, groups["c"]), 0.5), np.full(groups["v"], 2.0)
        getattr(module, f"newton_{terms}")(h, h.copy(), c, v, params, 1e-6, 1e-11, 2, np.empty((0, n_h)),
                                           np.empty(0), 1e-2, -1)
        getattr(module, f"follow_{terms}")(h, np.zeros((1, 1)), np.full((1, 1, n_h), 0.1), c,
                                           np.ones(1, dtype=np.int64), 0, 1, v, params, 1e-6, 1e-11, 2,
                                           np.empty((1, n_h)), np.empty(1), np.empty(1))
        getattr(module, f"grid_{terms}")(h, c, v, params, np.ones(1), np.ones(2), np.full((2, n_h), 0.5), 1)
        if n_h == 2:  # the line quadrature's switch location (its lines lie in R^2)
            one = np.ones(1)
            getattr(module, f"switch_{terms}")(-one, one, h, -h, one, one, one, one, one, np.eye(2), h.copy(), c,
                                               2.0, v, params, 1e-6, 1e-11, 2, 2, 1e-7, 1e-2)


class _FirstCall:
    """A compiled per-node function that compiles (or loads from numba's cache) at its first call;
    where numba cannot compile it, the numpy backend's function serves, with one logged line."""

    def __init__(self, name: str, compiled, fallback, label: str):
        self.name, self.compiled, self.fallback, self.label = name, compiled, fallback, label
        self.__doc__ = compiled.__doc__
        self.__signature__ = inspect.signature(compiled)
        self._call = self._first

    def __call__(self, *args):
        return self._call(*args)

    def _first(self, *args):
        from numba.core.errors import NumbaError

        for attempt in (0, 1):
            try:
                out = self.compiled(*args)
            except NumbaError as exc:
                log.warning("compiled backend: %s of %s did not compile (%s): the numpy backend's %s is used",
                            self.name, self.label, _reason(exc), self.name)
                break
            except Exception as exc:  # noqa: BLE001 - numba's cache of it did not load
                if attempt == 0:
                    log.warning("compiled backend: the cache of %s did not load (%s); compiling it afresh", self.name,
                                type(exc).__name__)
                    _remove_function_cache(self.compiled, self.name)
                    continue
                log.warning("compiled backend: %s of %s failed (%s: %s): the numpy backend's %s is used", self.name,
                            self.label, type(exc).__name__, str(exc)[:200], self.name)
                break
            self._call = self.compiled
            return out
        self._call = self.fallback
        return self.fallback(*args)


def _remove_function_cache(wrapper, name: str) -> None:
    """numba's cache files of ``name``'s compiled loop and scalar function (of the module of the
    Python ``wrapper``); their in-process dispatchers then compile afresh at the next call."""
    import pathlib

    path = pathlib.Path(inspect.getfile(wrapper))
    for f in _numba_cache_files(path):
        if f.name.startswith((f"{path.stem}._vec_{name}-", f"{path.stem}._node_{name}-")):
            f.unlink(missing_ok=True)
    module = inspect.getmodule(wrapper)
    for kind in ("_vec_", "_node_"):
        dispatcher = getattr(module, kind + name, None)
        cache = getattr(dispatcher, "_cache", None)
        if cache is not None and hasattr(cache, "flush"):
            cache.flush()


def _node_arguments(module, terms: str, n_params: int):
    return list(inspect.signature(getattr(module, terms)).parameters)[:-n_params]


def _numba_cache_files(path) -> list:
    import pathlib

    path = pathlib.Path(path)
    folder = path.parent / "__pycache__"
    return sorted(folder.glob(f"{path.stem}.*.nb[ic]")) if folder.is_dir() else []


def remove_cache(path) -> None:
    """Remove the compiled module at ``path`` and numba's machine code of it (a damaged cache)."""
    import pathlib

    for f in _numba_cache_files(path) + [pathlib.Path(path)]:
        f.unlink(missing_ok=True)


def load_compiled(path, key: str, names: Sequence[str], n_params: int, n_h: int, fallback: Dict[str, object],
                  label: str) -> Dict[str, object]:
    """``{name: function}`` of the compiled module at ``path``: the Newton kernels and continuations
    compiled or loaded from numba's cache now, the per-node functions at their first call (``fallback``: the numpy
    functions that serve where one does not compile; ``label`` names the model in that line)."""
    import time

    t0 = time.perf_counter()
    cached = bool(_numba_cache_files(path))
    module = _import(path, key)
    _warm_up(module, names, n_params, n_h)
    log.info("%s the compiled kernels of %s in %.1f s", "loaded" if cached else "compiled", path,
             time.perf_counter() - t0)
    kernels = tuple(f"{entry}_" for entry in ENTRY_POINTS.values())
    functions = {name: getattr(module, name) if name.startswith(kernels)
                 else _FirstCall(name, getattr(module, name), fallback[name], label) for name in names}
    pitchfork = pitchfork_kernel(module, n_params, label)
    if pitchfork is not None:
        functions[PITCHFORK] = pitchfork
    for name, load in ((LINE_SUMS, line_sums_kernel), (TEST_ERROR_SUM, test_error_sum_kernel)):
        kernel = load(module, n_params, label)
        if kernel is not None:
            functions[name] = kernel
    return functions


def _optional_kernel(module, name: str, warm_up: tuple, what: str, instead: str, label: str):
    """The module's kernel ``name``, compiled or loaded from numba's cache now by a call on ``warm_up``;
    None where the module has none, or where numba cannot compile it: then ``instead`` serves, one logged
    line says so (``what`` of ``label`` did not compile), and the module's other kernels stay compiled."""
    from numba.core.errors import NumbaError

    kernel = getattr(module, name, None)
    if kernel is None:
        return None
    try:
        kernel(*warm_up)
    except NumbaError as exc:
        log.warning("compiled backend: %s of %s did not compile (%s): %s", what, label, _reason(exc), instead)
        return None
    return kernel


def pitchfork_kernel(module, n_params: int, label: str):
    """The module's pitchfork radii (:data:`PITCHFORK`), or None: then the numpy iteration serves
    (``numerics.channel.lines.teacher_nodes.pitchfork_radii``; :func:`_optional_kernel`)."""
    one = np.ones(1)
    return _optional_kernel(module, PITCHFORK, (0.5 * one, one, one, 0.0 * one, np.eye(2), 2.0, np.full(n_params, 0.5),
                                                1e-300, 1e-15, 1e-300, 2.0),
                            "the pitchfork radii", "the numpy iteration is used", label)


def line_sums_kernel(module, n_params: int, label: str):
    """The module's weighted sums of the channel integrands (:data:`LINE_SUMS`), or None: then the
    integrands are evaluated as arrays and summed by numpy (``numerics.channel.lines.accumulation``;
    :func:`_optional_kernel`)."""
    one = np.full(1, 0.5)
    return _optional_kernel(module, LINE_SUMS, (one, one, one, one, one, one, one, np.eye(4), np.zeros(2),
                                                np.array([0.1, 0.0, 2.0, 0.1]), np.full(n_params, 0.5),
                                                np.array([0, 1])),
                            "the line quadrature's sums", "numpy sums them", label)


def test_error_sum_kernel(module, n_params: int, label: str):
    """The module's weighted sum of the test-error integrand (:data:`TEST_ERROR_SUM`), or None: then the
    integrand is evaluated as an array and summed by numpy (``numerics.model.saddle_point.test_error``;
    :func:`_optional_kernel`)."""
    one = np.full(1, 0.5)
    return _optional_kernel(module, TEST_ERROR_SUM, (one, one, one, one, one, np.array([0.1, 0.0, 0.1]),
                                                     np.full(n_params, 0.5)),
                            "the test error's sum", "numpy sums it", label)


def _reason(exc: Exception) -> str:
    """A compile error's first line (at most 200 characters), or its type where it has no message."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__

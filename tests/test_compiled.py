"""The compiled backend (derivations.compiled, numerics.backend): the numba kernels generated from
the model's expressions give the numpy backend's numbers, the per-node Newton kernel runs the
numpy reference's iteration, fixed points of both integrators agree to 1e-10, and where numba or
a cache fails the numpy backend serves with one logged line."""
import logging
import subprocess
import sys

import numpy as np
import pytest

from derivations import ModelSpec, generated_functions
from numerics.api import solve, use_backend
from numerics.model.general import GeneralModel
from numerics.prox.newton import compiled_newton, curvature_floor, saddle_free_newton

SQUAREPLUS = "(h1 + sqrt(h1**2 + 4)) / ((h1 + sqrt(h1**2 + 4)) + (h2 + sqrt(h2**2 + 4)))"


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(tokens=3), ModelSpec(attention=SQUAREPLUS)],
                         ids=["paper", "three tokens", "typed"])
def test_per_node_functions_equal_the_numpy_ones(spec):
    compiled, reference = generated_functions(spec, "compiled"), generated_functions(spec, "numpy")
    assert compiled.backend == "compiled"
    params = reference.params(spec)
    rng = np.random.default_rng(1)
    for name in ("loss", "teacher", "prox_newton_of_T", "channel_moments"):
        n_args = len(reference.arguments[name]) - len(params)
        # positive arguments where the model needs them (V, the packed variances come last)
        args = [np.abs(a) + 0.5 for a in 0.8 * rng.standard_normal((n_args, 257))]
        got, want = compiled.functions[name](*args, *params), reference.functions[name](*args, *params)
        got, want = (np.broadcast_arrays(*np.atleast_1d(*x)) if isinstance(x, tuple) else [x] for x in (got, want))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=name)


def test_the_two_by_two_saddle_free_direction_is_the_eigendecompositions():
    """The kernels' direction ``-U diag(1 / max(|lambda|, floor)) U^T g`` of a 2 x 2 Hessian, in closed
    form, is numpy's ``eigh``'s to rounding of ``|H|`` (relative to the direction, times the Hessian's
    condition where the floor does not bound it): definite, indefinite, diagonal, nearly multiple
    eigenvalues and eigenvalues below the floor, over six decades of scale."""
    pytest.importorskip("numba")
    from derivations.kernel_linalg import eigen_direction

    rng = np.random.default_rng(0)
    floor = 1e-6
    for k in range(3000):
        A = rng.standard_normal((2, 2))
        H = A + A.T
        if k % 3 == 0:
            H[0, 1] = H[1, 0] = 0.0
        if k % 5 == 0:
            H = np.eye(2) + 1e-9 * H
        if k % 7 == 0:
            H[1, 1] = H[0, 1] ** 2 / H[0, 0] + 1e-8 * rng.standard_normal()  # an eigenvalue below the floor
        H *= 10.0 ** rng.uniform(-3, 3)
        g = rng.standard_normal(2)
        d = np.empty(2)
        eigen_direction(H, g, floor, d)
        lam, U = np.linalg.eigh(H)
        kept = np.maximum(np.abs(lam), floor)
        want = -U @ ((U.T @ g) / kept)
        condition = np.max(np.abs(lam)) / np.min(kept)
        assert np.max(np.abs(d - want)) <= 1e-14 * condition * np.max(np.abs(want)), (H, g)


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(rank=2)], ids=["paper", "rank two"])
def test_the_newton_kernel_runs_the_reference_iteration(spec):
    """From the same starts (``w``, reflections, far points) with and without a known minimum and a
    cap, the kernel and the numpy reference stop at the same points with the same objectives; the
    kernel split over threads gives the same bits as in one call."""
    model = GeneralModel(spec, "numpy")
    kernel = generated_functions(spec, "compiled").newton_prox_newton_of_T
    rng = np.random.default_rng(2)
    N, n = 5000, model.n_h
    V = np.diag(np.linspace(8.0, 14.0, spec.rank))
    w = 0.6 * rng.standard_normal((N, n))
    T = model.teacher(0.5 * rng.standard_normal((N, spec.L * spec.teacher_rank)))
    h0 = np.where(rng.random((N, 1)) < 0.5, -w, w + rng.standard_normal((N, n)))
    floor, v = curvature_floor(V), model.pack("V", V)

    def reference(h, **kw):
        return saddle_free_newton(lambda a, b, c: model.prox_newton(a, b, c, V),
                                  lambda a, b, c: model.prox_objective(a, b, c, V), h, w, T, floor, **kw)

    first = reference(w)
    for kw in ({}, {"known": first[0], "known_objective": first[1], "capture": 1e-2, "cap": 4}):
        want = reference(h0, **kw)
        got = compiled_newton(kernel, h0, w, T, v, model.params, floor, 1e-11, 60, kw.get("known"),
                              kw.get("known_objective"), kw.get("capture", 1e-2), kw.get("cap"))
        # the same nodes stop by the same test; converged ones at the same minimum to rounding, those a
        # search stopped part-way (NaN gradient norm) where rounding has moved their few steps apart
        stopped = np.isnan(want[2])
        assert np.array_equal(np.isnan(got[2]), stopped)
        np.testing.assert_allclose(got[0][~stopped], want[0][~stopped], rtol=0, atol=1e-11)
        np.testing.assert_allclose(got[1][~stopped], want[1][~stopped], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(got[0][stopped], want[0][stopped], rtol=0, atol=1e-7)
        np.testing.assert_allclose(got[1][stopped], want[1][stopped], rtol=1e-8, atol=1e-12)
    whole = kernel(h0, w, T, np.asarray(v, float), np.asarray(model.params, float), floor, 1e-11, 60,
                   np.empty((0, n)), np.empty(0), 1e-2, -1)
    split = compiled_newton(kernel, h0, w, T, v, model.params, floor, 1e-11, 60, None, None, 1e-2, None)
    for a, b in zip(whole, split):
        assert np.array_equal(a, b, equal_nan=True)


def test_the_continuation_kernel_runs_newton_node_by_node(monkeypatch):
    """The compiled continuation along paths (one kernel call) gives the bits of its numpy loop run on
    the compiled Newton kernel, node k of every path one batch at a time; split over threads in
    blocks of paths, the same bits again."""
    from numerics.model.bound import bind
    from numerics.prox import newton as prox_newton

    model = bind(ModelSpec(), "compiled")
    rng = np.random.default_rng(3)
    S, K, V = 3000, 9, 12.0
    lengths = np.sort(rng.integers(2, K + 1, S))[::-1]
    running = np.count_nonzero(lengths[None, :] > np.arange(K)[:, None], axis=1)
    t = np.cumsum(0.1 + rng.random((K, S)), axis=0)
    w = 0.6 * rng.standard_normal((S, 2))[None] + 0.05 * t[..., None] * rng.standard_normal((S, 2))[None]
    c = model.teacher_matrix(0.5 * rng.standard_normal((S, 2)))
    h0 = w[0] + 0.01 * rng.standard_normal((S, 2))
    monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "1")
    whole = prox_newton.follow_paths(model, h0, t, w, c, running, V, tol=1e-12)
    assert np.isfinite(whole[1]).all() and np.all(whole[2] < 1e-12)

    class NewtonOnly:  # the numpy loop of follow_paths, each batch by the compiled Newton kernel
        backend, gm, params, pack = "numpy", model.gm, model.params, model.pack

    def compiled_newton_only(m, h, w_, c_, V_, tol, maxiter, **kw):
        return prox_newton.compiled_newton(model.gm.newton_prox_newton_of_T, h, w_, c_, model.pack("V", V_),
                                           model.params, prox_newton.curvature_floor(V_), tol, maxiter, None, None,
                                           1e-2, None)

    monkeypatch.setattr(prox_newton, "newton", compiled_newton_only)
    loop = prox_newton.follow_paths(NewtonOnly(), h0, t, w, c, running, V, tol=1e-12)
    monkeypatch.setattr(prox_newton, "PARALLEL_PATH_NODES", 64)
    monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "3")
    split = prox_newton.follow_paths(model, h0, t, w, c, running, V, tol=1e-12)
    assert whole[0].shape == (running.sum(), 2)
    for a, b, d in zip(whole, loop, split):
        assert np.array_equal(a, b, equal_nan=True) and np.array_equal(a, d, equal_nan=True)


@pytest.mark.parametrize("precision", ["draft", "fast"])
def test_the_switch_kernel_runs_the_batch_loops_steps(monkeypatch, precision):
    """The compiled switch location (``switch_<terms>``, line by line) gives the bits of its numpy batch
    loop on the compiled Newton kernel, where the semantic and the positional points have switched
    lines; split over threads in blocks of lines, the same bits again."""
    from numerics.channel.lines import expectations, switches
    from numerics.channel.lines.teacher_nodes import gaussian_factor, polar_teacher_nodes
    from numerics.model.bound import bind
    from numerics.overlaps import Overlaps
    from numerics.precision import PRECISIONS

    model = bind(ModelSpec(), "compiled")
    rule = PRECISIONS[precision].check_rule
    for ov in (Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582), Overlaps(q=0.2, m=0.3, V=8.0, theta=0.0)):
        factor = gaussian_factor(model, ov)
        lines = expectations.channel_lines(model, ov, rule, factor, polar_teacher_nodes(model, ov.V, factor.L_hh, rule))
        args = (model, rule, ov.V, lines.w_of, lines.t0, lines.hs1, lines.hs2, lines.has_pair)
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "1")
        loop = switches.locate_switches(*args, teacher=lines.teacher)
        kernel = switches.locate_switches(*args, teacher=lines.teacher, geometry=lines)
        monkeypatch.setattr(switches, "PARALLEL_LINES", 8)
        monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "3")
        split = switches.locate_switches(*args, teacher=lines.teacher, geometry=lines)
        monkeypatch.setattr(switches, "PARALLEL_LINES", 256)
        assert 5 < np.count_nonzero(loop.switched) < lines.has_pair.sum()
        for a, b, c in zip((loop.t_split, *loop.left, *loop.right, loop.switched),
                           (kernel.t_split, *kernel.left, *kernel.right, kernel.switched),
                           (split.t_split, *split.left, *split.right, split.switched)):
            assert np.array_equal(a, b) and np.array_equal(a, c)


def test_the_pitchfork_kernel_finds_the_numpy_iterations_radii():
    """The compiled pitchfork radii of the teacher rays give the bits of scipy's Chandrupatla iteration
    (``find_roots``) on the numpy margin, ray by ray, at both fast rules' angles, at models and ``V``
    where the pair of minima is born on some rays and not on others."""
    from numerics.channel.lines import teacher_nodes
    from numerics.model.bound import bind
    from numerics.overlaps import Overlaps
    from numerics.solver.bracketed_roots import find_roots

    rays = 0
    for omega, sigma in ((0.0, 0.5), (0.3, 0.5), (0.7, 1.0)):
        model = bind(ModelSpec(omega=omega, sigma=sigma), "compiled")
        assert teacher_nodes.PITCHFORK in model.gm.functions
        for V in (0.5, 2.0, 12.7, 80.0):
            L_hh = teacher_nodes.gaussian_factor(model, Overlaps(q=0.07, m=0.0, V=V, theta=0.05 * sigma)).L_hh
            for n in (20, 28):
                beta = 2 * np.pi * (np.arange(n) + 0.5) / n
                c, s = np.cos(beta), np.sin(beta)
                grid = np.linspace(0.0, 12.0, 65)
                margins = teacher_nodes.bifurcation_margin(model, V, L_hh, c[None, :], s[None, :], grid[:, None])
                born = np.nonzero((margins < 0).any(axis=0) & (margins[0] > 0))[0]
                if not born.size:
                    continue
                first = (margins < 0).argmax(axis=0)[born]
                lo, hi = grid[first - 1], grid[first]
                numpy = find_roots(lambda r, c_, s_: teacher_nodes.bifurcation_margin(model, V, L_hh, c_, s_, r),
                                   lo, hi, args=(c[born], s[born]))
                compiled = teacher_nodes.pitchfork_radii(model, V, L_hh, lo, hi, c[born], s[born])
                assert numpy.success.all() and np.array_equal(numpy.success, compiled.success)
                assert np.array_equal(numpy.x, compiled.x)
                rays += born.size
    assert rays > 100


@pytest.mark.parametrize("attention", ["softmax", SQUAREPLUS], ids=["paper", "typed"])
def test_the_test_error_sum_kernel_gives_the_integrands_sum(monkeypatch, attention):
    """The compiled weighted sum of the test-error integrand (one pass, ``TEST_ERROR_SUM``) gives the
    test error of the integrand evaluated as an array and summed by numpy, to rounding, at a semantic and
    a positional point."""
    from derivations.compiled import TEST_ERROR_SUM
    from numerics.model.bound import bind
    from numerics.model.saddle_point import test_error
    from numerics.overlaps import Overlaps

    model = bind(ModelSpec(attention=attention), "compiled")
    kernel, calls = model.gm.functions[TEST_ERROR_SUM], []
    monkeypatch.setitem(model.gm.functions, TEST_ERROR_SUM, lambda *a: calls.append(1) or kernel(*a))
    for ov in (Overlaps(q=0.114816, m=0.0, V=12.6686, theta=0.158157), Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)):
        summed = test_error(model, ov, 16)
        with monkeypatch.context() as m:
            m.delitem(model.gm.functions, TEST_ERROR_SUM)
            arrays = test_error(model, ov, 16)
        assert summed == pytest.approx(arrays, rel=1e-13)
    assert len(calls) == 2


@pytest.mark.parametrize("which", ["pitchfork", "line sums", "test error sum"])
def test_an_optional_kernel_that_does_not_compile_leaves_numpy_with_one_line(caplog, which):
    """Where numba cannot compile a model's pitchfork radii (its line sums, its test error's sum), the numpy
    iteration (the integrands' arrays summed by numpy) serves them, one line says so, and nothing else of
    the module is dropped."""
    from numba.core.errors import TypingError

    from derivations import compiled

    name, load, says = {"pitchfork": (compiled.PITCHFORK, compiled.pitchfork_kernel,
                                      ("pitchfork radii of attention h1**3 did not compile", "numpy iteration")),
                        "line sums": (compiled.LINE_SUMS, compiled.line_sums_kernel,
                                      ("line quadrature's sums of attention h1**3 did not compile", "numpy sums")),
                        "test error sum": (compiled.TEST_ERROR_SUM, compiled.test_error_sum_kernel,
                                           ("test error's sum of attention h1**3 did not compile",
                                            "numpy sums it"))}[which]

    class Module:
        pass

    def refuse(*args):
        raise TypingError("no such function for these types")

    module = Module()
    setattr(module, name, refuse)
    with caplog.at_level(logging.WARNING, logger="derivations.compiled"):
        assert load(module, 3, "attention h1**3") is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert all(part in line for part in says)
    assert load(Module(), 3, "any") is None


@pytest.mark.parametrize("attention", ["softmax", SQUAREPLUS], ids=["paper", "typed"])
def test_the_line_sums_kernel_gives_the_integrands_sums(monkeypatch, attention):
    """The compiled weighted sums of the channel integrands (one pass over the nodes, ``LINE_SUMS``) give
    the channel expectations of the integrands evaluated as arrays and summed by numpy, to rounding
    (the order of the additions differs), at a switched semantic point and a positional one, with the
    checks and without; a chunk's sum is the same however the chunks are shared between threads."""
    import dataclasses

    from derivations.compiled import LINE_SUMS
    from numerics.channel.lines import ChannelRule, accumulation, channel_expectations, expectations
    from numerics.model.bound import bind
    from numerics.overlaps import Overlaps

    def fresh(ov, rule):  # without the last evaluation's kept sums
        expectations._LAST_EVALUATION.clear()
        return channel_expectations(model, ov, rule)

    model = bind(ModelSpec(attention=attention), "compiled")
    kernel, calls = model.gm.functions[LINE_SUMS], []
    small = ChannelRule(n_eta=16, n_r=8, n_u=6, n_t=16)

    def counted(*args):
        calls.append(1)
        return kernel(*args)

    def patch():
        monkeypatch.setattr(accumulation, "CHUNK", 900)  # several chunks
        monkeypatch.setitem(model.gm.functions, LINE_SUMS, counted)

    patch()
    for ov in (Overlaps(q=0.114816, m=0.0, V=12.6686, theta=0.158157), Overlaps(q=0.05, m=0.25, V=14.0, theta=0.0)):
        for rule in (small, dataclasses.replace(small, check_global=False)):
            fused = fresh(ov, rule)
            monkeypatch.setenv("ATTNPHASE_KERNEL_THREADS", "3")
            monkeypatch.setattr(accumulation, "PARALLEL_INTEGRANDS", 500)
            split = fresh(ov, rule)
            monkeypatch.delitem(model.gm.functions, LINE_SUMS)
            used = len(calls)
            arrays = fresh(ov, rule)
            assert used >= 4 and len(calls) == used  # the kernel made both sums, and not the third
            monkeypatch.undo()
            patch()
            calls.clear()
            assert split.expectations == fused.expectations
            for name, value in arrays.expectations.items():
                assert fused.expectations[name] == pytest.approx(value, rel=1e-13, abs=1e-16), name


def test_the_grid_kernel_keeps_the_grids_lowest_points_in_order():
    """The global prox's grid of starts (``grid_<terms>``): at every node the ``keep`` points of lowest
    objective, lowest first, are those the grid's objectives sorted give, the points to the bit (a
    NaN objective last, ties in the grid's order); with it the compiled global prox finds the numpy
    backend's minima."""
    from numerics.model.bound import bind
    from numerics.prox.scalar import _polar_grid, global_prox

    model = bind(ModelSpec(), "compiled")
    rng = np.random.default_rng(4)
    N, V = 2000, 12.0
    w, hs = 0.8 * rng.standard_normal((N, 2)), 0.6 * rng.standard_normal((N, 2))
    T = model.teacher_matrix(hs)
    radius = rng.uniform(0.0, 3.0, N)
    radius[:5] = 0.0  # every grid point at w: all objectives tie
    radii, directions = _polar_grid(12, 4)
    got = model.gm.grid_prox_newton_of_T(w, T, np.array([V]), np.asarray(model.params, float), radius, radii,
                                         directions, 3)
    points = w[None] + (radii[:, None] * radius[None])[..., None] * directions[:, None, :]
    f = np.stack([model.gm.prox_objective_of_T(p[:, 0], p[:, 1], w[:, 0], w[:, 1], *T.T, V, *model.params)
                  for p in points])
    order = np.argsort(f, axis=0, kind="stable")[:3]
    assert np.array_equal(got, np.take_along_axis(points, order[..., None], 0))
    assert np.array_equal(got[:, :5], np.broadcast_to(w[None, :5], (3, 5, 2)))
    # where every objective is NaN (a NaN radius), the first grid points: NaN, and no other node moved
    nan_model = bind(ModelSpec(), "compiled")
    bad = np.where(np.arange(N) < 3, np.nan, radius)
    got = nan_model.gm.grid_prox_newton_of_T(w, T, np.array([V]), np.asarray(model.params, float), bad, radii,
                                             directions, 3)
    assert np.isnan(got[:, :3]).all() and np.array_equal(got[:, 3:], np.take_along_axis(points, order[..., None], 0)[:, 3:])
    compiled, reference = (global_prox(bind(ModelSpec(), backend), w[:, 0], w[:, 1], hs[:, 0], hs[:, 1], V)
                           for backend in ("compiled", "numpy"))
    for a, b in zip(compiled, reference):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def _fixed_point_values(fp):
    """Every number of the record but the time and the residual (both solves converge below it)."""
    row = fp.to_row()
    return np.array([v for k, v in sorted(row.items()) if isinstance(v, float) and k not in ("wall_time", "residual")])


@pytest.mark.parametrize("spec, branch, integrator", [
    (ModelSpec(), "semantic", "lines"),
    (ModelSpec(attention=SQUAREPLUS), "positional", "lines"),
    (ModelSpec(), "positional", "qmc"),
], ids=["lines", "lines, typed attention", "qmc"])
def test_fixed_points_of_both_backends_agree(spec, branch, integrator):
    fps = {}
    for backend in ("numpy", "compiled"):
        with use_backend(backend):
            fps[backend] = solve(spec, 1.0, branch, "draft", integrator)
    a, b = (_fixed_point_values(fps[k]) for k in ("numpy", "compiled"))
    assert fps["numpy"].converged and fps["compiled"].converged
    np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-13)


def test_without_numba_the_numpy_backend_runs_and_one_line_says_so(monkeypatch, caplog):
    import derivations.compiled
    import derivations.codegen as codegen

    monkeypatch.setattr(derivations.compiled, "numba_version", lambda: "")
    monkeypatch.setattr(codegen, "_MEMO", {k: v for k, v in codegen._MEMO.items() if v.backend != "compiled"})
    monkeypatch.setattr(codegen, "_FALLBACKS", set())
    with caplog.at_level(logging.WARNING, logger="derivations.codegen"):
        gm = generated_functions(ModelSpec(), "compiled")
        generated_functions(ModelSpec(), "compiled")
    assert gm.backend == "numpy"
    lines = [r.getMessage() for r in caplog.records if "numpy backend" in r.getMessage()]
    assert len(lines) == 1 and "numba cannot be imported" in lines[0]


def test_expressions_that_do_not_compile_fall_back_with_one_line(monkeypatch, caplog):
    import derivations.codegen as codegen

    def refuse(*args, **kwargs):
        raise TypeError("not compilable")

    monkeypatch.setattr("derivations.compiled.compiled_source", refuse)
    spec = ModelSpec(attention="h1**3/(1 + h1**2)")
    monkeypatch.setattr(codegen, "_FALLBACKS", set())
    with caplog.at_level(logging.WARNING, logger="derivations.codegen"):
        gm = generated_functions(spec, "compiled")
    assert gm.backend == "numpy"
    (line,) = [r.getMessage() for r in caplog.records]
    assert spec.attention in line and "not compilable" in line and "numpy backend" in line


def test_a_damaged_compiled_cache_is_compiled_afresh(tmp_path):
    """Garbage in numba's cache files and in the generated module: the next process rebuilds them
    and gives the same numbers."""
    script = (
        "import numpy as np\n"
        "from derivations import ModelSpec, generated_functions\n"
        "gm = generated_functions(ModelSpec(), 'compiled')\n"
        "assert gm.backend == 'compiled', gm.backend\n"
        "P = gm.params(ModelSpec())\n"
        "x = np.linspace(-1, 1, 8)\n"
        "print(repr(float(np.sum(gm.prox_objective(x, -x, x, x, x, -x, 12.0, *P)))))\n"
        "print(repr(float(gm.newton_prox_newton_of_T(np.full((1, 2), 0.3), np.full((1, 2), 0.2),"
        " np.full((1, 4), 0.5), np.array([12.0]), np.array(P, float), 1e-7, 1e-12, 60, np.empty((0, 2)),"
        " np.empty(0), 1e-2, -1)[1][0])))\n")
    import shutil

    from derivations.cache import cache_dir

    generated_functions(ModelSpec(), "compiled")
    # the cache of this process, copied with its times (numba's index checks them): the first run loads it
    shutil.copytree(cache_dir(), tmp_path / "derivations", copy_function=shutil.copy2)
    env = {"ATTNPHASE_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def run():
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr
        return out.stdout, out.stderr

    first, _ = run()
    folder = tmp_path / "derivations"
    for f in (folder / "__pycache__").glob("*compiled*.nb[ic]"):
        f.write_bytes(b"\x00garbage")
    second, log = run()
    assert second == first
    for f in folder.glob("*compiled*.py"):
        f.write_text("this is not python(\n")
    third, log = run()
    assert third == first and "compiling it afresh" in log

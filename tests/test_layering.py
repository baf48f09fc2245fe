"""The packages import one way: tidyio (tidy CSV/JSON files, at the bottom) -> derivations ->
numerics -> validation -> attnphase.sweeps -> attnphase.paper -> attnphase (the command-line
program, and its figures); attnphase.histogram_task stands apart, and attnphase.paper uses it.
Benchmarks, studies, examples and tests sit on top: they may import any of these, and nothing imports them.
Numerics computes and does not draw: no module of it imports matplotlib.

Every module's imports are parsed (``ast``), including imports inside functions and
relative imports, and each edge to another of our packages must be allowed.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: our packages, and which of them each may import (itself always)
LIBRARIES = ("tidyio", "derivations", "numerics", "validation", "attnphase.histogram_task", "attnphase.sweeps",
             "attnphase.paper", "attnphase")
ALLOWED = {
    "tidyio": set(),
    "derivations": {"tidyio"},
    "numerics": {"tidyio", "derivations"},
    "validation": {"tidyio", "derivations", "numerics"},
    "attnphase.histogram_task": {"tidyio"},
    "attnphase.sweeps": {"tidyio", "derivations", "numerics", "validation"},
    "attnphase.paper": {"tidyio", "derivations", "numerics", "validation", "attnphase.sweeps",
                        "attnphase.histogram_task"},
    "attnphase": set(LIBRARIES) - {"attnphase"},
    "benchmarks": set(LIBRARIES),
    "studies": set(LIBRARIES),
    "examples": set(LIBRARIES),
    "tests": set(LIBRARIES),
}


def unit(module: str):
    """The unit of :data:`ALLOWED` that holds ``module`` (the longest matching prefix), or None."""
    best = None
    for key in ALLOWED:
        if (module == key or module.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    return best


def imported_modules(source: str, module: str, is_package: bool = False) -> list:
    """``(line, absolute module name)`` of every import in ``source``, the source of
    ``module`` (a dotted name); relative imports are resolved against it."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append((node.lineno, target))
    return found


def forbidden_edges(source: str, module: str, is_package: bool = False) -> list:
    """The imports of ``module`` that break the layering, as ``"module:line -> target"``."""
    own = unit(module)
    bad = []
    for line, target in imported_modules(source, module, is_package):
        top = unit(target)
        if top is not None and top != own and top not in ALLOWED[own]:
            bad.append(f"{module}:{line} -> {target}")
    return bad


def our_modules():
    for package in ("tidyio", "derivations", "numerics", "validation", "attnphase", "benchmarks", "studies",
                    "examples", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            yield name, path, is_package


def test_every_package_is_checked():
    modules = {name for name, _, _ in our_modules()}
    for package in ALLOWED:
        assert any(unit(name) == package for name in modules), package
    assert len(modules) > 40  # every module of every package, not only the packages


def test_no_module_imports_against_the_layering():
    bad = []
    for name, path, is_package in our_modules():
        bad += forbidden_edges(path.read_text(), name, is_package)
    assert bad == []


def test_numerics_does_not_draw():
    drawing = [f"{name}:{line}" for name, path, is_package in our_modules() if unit(name) == "numerics"
               for line, target in imported_modules(path.read_text(), name, is_package)
               if target.split(".")[0] == "matplotlib"]
    assert drawing == []


@pytest.mark.parametrize("source, module", [
    # a back-edge hidden inside a function of a numerics module
    ("def f():\n    from attnphase.options import x\n    return x\n", "numerics.channel.lines.rule"),
    # numerics importing the layer above it, at the top
    ("import validation\n", "numerics.solver.iteration"),
    # nothing imports the benchmarks or the tests
    ("from benchmarks.compare_outputs import main\n", "attnphase.paper.run"),
    ("from studies.omega_zero_minima import one_run\n", "validation.runs"),
    ("from tests.fakes import FakeTheoryAPI\n", "attnphase.sweeps.tasks"),
    ("from examples.theory import main\n", "numerics.api"),
    # a library importing the command-line program from a method
    ("class Store:\n    def close(self):\n        import attnphase.cli\n", "attnphase.sweeps.store"),
    # the files' module is at the bottom
    ("from numerics.overlaps import BRANCHES\n", "tidyio"),
    # histogram_task depends on none of ours
    ("import numpy\nfrom derivations.spec import ModelSpec\n", "attnphase.histogram_task.experiment"),
])
def test_the_checker_flags_a_back_edge(source, module):
    assert forbidden_edges(source, module) != []


def test_the_checker_allows_downward_and_own_imports():
    source = ("import numpy\nfrom derivations import ModelSpec\nfrom . import tidy\nfrom .channel.rule import ChannelRule\n"
              "def f():\n    from numerics.api import solve_branch\n")
    assert forbidden_edges(source, "numerics.fixed_points.lines") == []
    assert forbidden_edges("from attnphase.sweeps.config import SweepConfig\nimport attnphase.histogram_task\n", "attnphase.cli") == []
    # relative imports resolve inside the package: numerics.channel.lines.geometry importing .rule
    assert imported_modules("from .rule import ChannelRule\nfrom .. import tidy\n", "numerics.channel.lines.geometry") == [
        (1, "numerics.channel.lines.rule"), (2, "numerics.channel")]
    assert imported_modules("from . import SweepError\n", "attnphase.sweeps", is_package=True) == [(1, "attnphase.sweeps")]


def numerics_internals(source: str, module: str, is_package: bool = False) -> list:
    """The imports of ``module`` (above numerics) of a numerics module other than ``numerics.api``."""
    return [f"{module}:{line} -> {target}" for line, target in imported_modules(source, module, is_package)
            if target.split(".")[0] == "numerics" and target not in ("numerics", "numerics.api")]


def test_the_layers_above_numerics_import_its_api_alone():
    """validation and attnphase reach numerics through ``numerics.api`` only: its internals may move."""
    bad = []
    for name, path, is_package in our_modules():
        if unit(name) in ("validation", "attnphase", "attnphase.sweeps", "attnphase.paper"):
            bad += numerics_internals(path.read_text(), name, is_package)
    assert bad == []
    assert numerics_internals("def f():\n    from numerics.prox.matrix import GlobalProx\n", "validation.runs") != []

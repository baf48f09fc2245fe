"""An installation without the simulation extra (no torch): the theory runs and never imports
torch; a simulation command says in one line which extra it needs, exit status 1."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: runs ``attnphase ARGS`` in a process where torch cannot be imported (as if it were not
#: installed), then checks that nothing imported it
WITHOUT_TORCH = """
import importlib, pkgutil, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoTorch())
from attnphase.cli import main

status = main(sys.argv[1:])
if status == 0:  # the theory's packages import without torch too
    import derivations, numerics, attnphase.sweeps
    for package in (derivations, numerics, attnphase.sweeps):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith(".tasks"):  # the sweeps' simulation task is torch's
                importlib.import_module(module.name)
assert "torch" not in sys.modules, "torch was imported"
sys.exit(status)
"""


def _without_torch(*argv, cwd):
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_the_theory_runs_without_torch(tmp_path):
    proc = _without_torch("solve", "--alpha", "2", "--precision", "draft", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "semantic" in proc.stdout and "positional" in proc.stdout


@pytest.mark.slow
def test_the_main_job_runs_without_torch(tmp_path):
    """README's first command: ``attnphase run`` (about 80 s of CPU)."""
    proc = _without_torch("run", "--out", "results", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "results" / "summary.json").is_file() and "alpha_c = 1.2515" in proc.stdout


@pytest.mark.parametrize("argv", [
    ["simulate", "--d", "20", "--steps", "1"],
    ["validate", "--d", "20", "--steps", "1", "--out", "v"],
    ["histogram", "--quick"],
    ["phase-diagram", "--what", "simulation", "--out", "p"],
    ["paper", "--out", "p", "--quick"],
])
def test_a_simulation_names_the_extra_it_needs(tmp_path, argv):
    proc = _without_torch(*argv, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (f"attnphase {argv[0]}: error: needs torch, which this installation lacks: "
                           f"pip install 'attnphase[simulation]'\n")
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_the_test_extra_installs_the_simulations():
    """README's second command (``pip install -e '.[test]'``) keeps installing torch, the first
    (``pip install -e .``) no longer does."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("torch") for d in project["dependencies"])
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["simulation"])
    assert "attnphase[simulation]" in project["optional-dependencies"]["test"]

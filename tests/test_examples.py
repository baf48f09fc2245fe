"""The scripts of examples/ run (in their quick mode), so that the API they document cannot rot."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: each script, and lines its quick output must hold
EXPECTED = {
    "theory.py": ("  semantic: q = 0.11", "positional: q = 0.05", "linear baseline test error = 0.00197"),
    "simulation.py": ("a smoke test: at d = 100 and 200 steps", "      test error: simulation",
                      "   training loss: simulation", "theta / sigma^2: simulation", "standard error over seeds"),
    "general_model.py": ("  semantic: eigenvalues of q", "converged True"),
    "new_attention.py": ("attention: (h1 + sqrt(h1**2 + 4))/", "alpha = 3, semantic: training loss 0.0069",
                         "alpha = 3, positional: "),
}


def test_every_example_is_run():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_in_its_quick_mode(script):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in EXPECTED[script]:
        assert line in proc.stdout, (line, proc.stdout)


def test_the_readme_python_block_runs_and_prints_what_the_readme_says():
    """The README's Python block, run as written: it exits 0 and prints the fixed point the text
    below it quotes."""
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```python\n")[1:]
    assert blocks, "the README has no Python block"
    for block in blocks:
        code = block.split("```", 1)[0]
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    quoted = next(line for line in text.splitlines() if line.startswith("semantic branch at alpha = 2 (fast"))
    printed = proc.stdout.strip().splitlines()[-1]

    def fields(line):  # name -> (value, stated error)
        return {n: (float(v), float(e or 0)) for n, v, e in re.findall(r"(\w+) = ([-\d.e+]+)(?: \+- ([\d.e+-]+))?",
                                                                      line.split(": ", 1)[1])}

    ours, readme = fields(printed), fields(quoted)
    assert set(ours) == set(readme) == {"q", "m", "V", "theta", "test_error", "train_loss"}, (printed, quoted)
    for name, (value, error) in ours.items():  # the same point, to its stated error
        assert abs(value - readme[name][0]) <= 2 * error + 1e-12 * abs(value), (name, printed, quoted)

"""One vocabulary of options: one name per meaning in every command, the old spellings hidden
but working, every default and every command's cost stated in --help, values that start with '-'."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from attnphase import cli
from attnphase.errors import UsageError
from attnphase.options import parse_range

#: options that need no stated default: flags, and the help and verbosity options
_NO_DEFAULT = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction, argparse._CountAction)


def _commands():
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _visible(parser):
    return [a for a in parser._actions if a.help != argparse.SUPPRESS and a.option_strings]


def test_every_help_states_every_default():
    missing = [f"{name} {a.option_strings[0]}" for name, p in _commands().items() for a in _visible(p)
               if not isinstance(a, _NO_DEFAULT) and not a.required and "default" not in a.help]
    assert missing == []


def test_every_command_states_its_cost_on_two_cores():
    assert [name for name, p in _commands().items() if "Cost" not in p.description] == []


def test_no_restructuredtext_in_any_help():
    texts = [cli.build_parser().format_help()] + [p.format_help() for p in _commands().values()]
    assert [t.splitlines()[0] for t in texts if "``" in t or ":func:" in t or ":mod:" in t] == []


def test_one_name_per_meaning():
    """A quantity's name takes one value, its plural a grid or list: the same in every command."""
    commands = _commands()

    def names(command):
        return {s for a in _visible(commands[command]) for s in a.option_strings}

    for command in ("solve", "simulate"):
        assert "--alpha" in names(command) and "--alphas" not in names(command)
    for command in ("curve", "thresholds", "run", "phase-diagram", "validate"):
        assert "--alphas" in names(command)
    assert "--omegas" in names("phase-diagram") and "--omega" not in names("phase-diagram")
    assert "--init" in names("simulate") and "--inits" in names("validate") and "--init" not in names("validate")
    every = {s for c in commands for s in names(c)}
    assert "--no-progress" in every and "--quiet" not in every and "--format" not in every
    assert all("--no-progress" in names(c) for c in commands)


@pytest.mark.parametrize("argv, dest, value", [
    (["curve", "--alpha", "0.1:1:3"], "alphas", "0.1:1:3"),
    (["thresholds", "--alpha", "0.5:2.5:9"], "alphas", "0.5:2.5:9"),
    (["run", "--alpha", "0.05:2.5:15"], "alphas", "0.05:2.5:15"),
    (["phase-diagram", "--alpha", "0.2:2:5"], "alphas", "0.2:2:5"),
    (["phase-diagram", "--omega", "0:0.3:4"], "omegas", "0:0.3:4"),
    (["validate", "--init", "semantic"], "inits", "semantic"),
    (["phase-diagram", "--quiet"], "progress", False),
    (["paper", "--out", "x", "--quiet"], "progress", False),
    (["histogram", "--no-progress"], "progress", False),
    (["solve", "--alpha", "1"], "progress", True),
    (["derive", "--format", "latex"], "format", "latex"),
])
def test_old_spellings_still_work(argv, dest, value):
    assert getattr(cli.build_parser().parse_args(argv), dest) == value


def test_new_spellings_take_the_defaults():
    args = cli.build_parser().parse_args(["phase-diagram"])
    assert (args.omegas, args.alphas, args.progress) == ("0:0.45:10", "0.05:2.5:25", True)
    assert cli.build_parser().parse_args(["curve"]).alphas == "0.1:2.5:25"


@pytest.mark.parametrize("argv, dest, value", [
    (["solve", "--alpha", "1", "--A", "-0.2,1.2,0.4,0.6"], "A", "-0.2,1.2,0.4,0.6"),
    (["curve", "--alphas", "-1:2:3"], "alphas", "-1:2:3"),
    (["curve", "--alpha", "-1:2:3"], "alphas", "-1:2:3"),
    (["solve", "--alpha", "1", "--omega", "-.5"], "omega", -0.5),
    (["phase-diagram", "--omegas", "-0.1,0.2"], "omegas", "-0.1,0.2"),
])
def test_values_may_start_with_a_minus(argv, dest, value):
    assert getattr(cli.build_parser().parse_args(argv), dest) == value


def test_a_negative_grid_is_refused_by_its_own_check(capsys, tmp_path):
    assert cli.main(["curve", "--alphas", "-1:2:3", "--out", str(tmp_path / "c.csv")]) == 2
    assert capsys.readouterr().err == ("attnphase curve: error: --alphas: every value must be a positive number, "
                                       "got '-1:2:3'\n")
    assert cli.main(["solve", "--alpha", "1", "--A", "-0.2,1.2,0.4,0.6", "--integrator", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err  # --A's value was taken as a value


def test_a_grid_is_a_range_a_list_or_a_number():
    assert parse_range("0.5:2:4", "--alphas") == list(np.linspace(0.5, 2, 4))
    assert parse_range("0.5, 1,2", "--alphas") == [0.5, 1.0, 2.0]
    assert parse_range("1.5", "--alphas") == [1.5]
    for text, what in (("1,1", "a value is repeated"), ("1,nan", "values must be finite"),
                       ("0:1:3,2", "expected START:STOP:N or a comma-separated list, not both"), ("1,x", "expected comma-separated numbers")):
        with pytest.raises(UsageError, match=f"^--alphas: {what}"):
            parse_range(text, "--alphas")
    with pytest.raises(UsageError, match="needs at least 3 values"):
        parse_range("1,2", "--alphas", min_points=3)


def test_derive_has_one_json_option(capsys):
    assert cli.main(["derive", "--json", "--latex"]) == 2
    assert capsys.readouterr().err == "attnphase derive: error: --json, --latex: choose one output format, " \
                                      "got json, latex\n"
    assert cli.main(["derive", "--format", "json"]) == 0
    old = capsys.readouterr().out
    assert cli.main(["derive", "--json"]) == 0
    assert capsys.readouterr().out == old

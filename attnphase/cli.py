"""The ``attnphase`` command-line program.

Each subcommand lives next to the code it drives and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a function
``func(args) -> int``. Modules are imported lazily (torch is slow to import).
Bad input raises :class:`UsageError` or :class:`derivations.spec.ModelSpecError`;
both become one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> module providing ``register(subparsers)``; order is the help order.
SUBCOMMANDS = {
    "derive": "derivations.cli",
    "solve": "numerics.cli",
    "curve": "numerics.cli",
    "thresholds": "numerics.cli",
    "run": "numerics.cli",
    "simulate": "validation.cli",
    "validate": "validation.cli",
    "phase-diagram": "numerics.phase_cli",
    "plot": "numerics.phase_cli",
    "histogram": "validation.histogram_cli",
}


from attnphase.errors import UsageError  # noqa: E402  (re-exported for subcommand modules)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnphase", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module_name in dict.fromkeys(SUBCOMMANDS.values()):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # not written yet in this checkout
                continue
            raise
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    from derivations.spec import ModelSpecError

    try:
        return int(args.func(args) or 0)
    except (UsageError, ModelSpecError) as exc:
        sys.stderr.write(f"attnphase {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("attnphase: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())

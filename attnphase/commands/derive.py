"""``attnphase derive``: print the replica free energy and the eight saddle-point equations."""
from __future__ import annotations

import json
import logging

from attnphase.options import add_json_option, add_model_options, model_from_args

log = logging.getLogger(__name__)

FORMATS = ("text", "latex", "json")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "derive",
        help="derive the free energy and saddle-point equations (docs/theory.md, section 2) with SymPy",
        description="Derive the replica free energy and the eight saddle-point equations of the model "
                    "(docs/theory.md, section 2) by symbolic differentiation, and print them as text, LaTeX or JSON.",
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    add_json_option(p)
    add_model_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from derivations.report import report

    spec = model_from_args(args)
    fmt = "json" if getattr(args, "json", False) else args.format
    rep = report(spec)
    if fmt == "json":
        print(json.dumps(rep.as_json(), indent=2))
    elif fmt == "latex":
        print(rep.as_latex())
    else:
        print(rep.as_text())
    return 0

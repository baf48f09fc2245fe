"""``attnphase derive``: print the replica free energy and the eight saddle-point equations."""
from __future__ import annotations

import logging

from attnphase.options import add_json_option, add_model_options, model_from_args, print_json, progress_bar

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
    with progress_bar(desc="derive"):  # SymPy takes minutes for a new shape (then it is cached)
        rep = report(spec)
    if fmt == "json":
        print_json(rep.as_json())
    elif fmt == "latex":
        print(rep.as_latex())
    else:
        print(rep.as_text())
    return 0

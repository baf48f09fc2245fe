"""``attnphase derive``: print the replica free energy and the eight saddle-point equations."""
from __future__ import annotations

import argparse
import logging

from attnphase.errors import UsageError
from attnphase.options import (add_json_option, add_model_options, model_from_args, print_json, progress_bar,
                               typed_attention_budget)

log = logging.getLogger(__name__)

FORMATS = ("text", "latex", "json")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "derive",
        help="derive the free energy and saddle-point equations (docs/theory.md, section 2) with SymPy",
        description="Derive the replica free energy and the eight saddle-point equations of the model "
                    "(docs/theory.md, section 2) by symbolic differentiation, and print them as text, LaTeX or JSON. "
                    "Cost on 2 cores: under a second for a model shape derived before (the code is cached), "
                    "minutes for a new shape.",
    )
    p.add_argument("--latex", action="store_true", help="print LaTeX (default: text)")
    add_json_option(p)
    # the old spelling of --latex and --json
    p.add_argument("--format", choices=FORMATS, default=None, help=argparse.SUPPRESS)
    add_model_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from derivations.report import report

    spec = model_from_args(args)
    asked = {f for f, on in (("json", args.json), ("latex", args.latex), (args.format, args.format)) if on}
    if len(asked) > 1:
        raise UsageError(f"--json, --latex: choose one output format, got {', '.join(sorted(asked))}")
    fmt = asked.pop() if asked else "text"
    # SymPy takes minutes for a new shape (then it is cached)
    with typed_attention_budget(args, spec) as budget, progress_bar(desc="derive"):
        budget.stage("the derivation")
        rep = report(spec)
    if fmt == "json":
        print_json(rep.as_json())
    elif fmt == "latex":
        print(rep.as_latex())
    else:
        print(rep.as_text())
    return 0

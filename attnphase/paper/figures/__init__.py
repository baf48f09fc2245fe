"""The figures of the paper, one module each, and their registry (:data:`REGISTRY`).

Each module defines a :class:`FigureSpec`: its name (what ``--only`` takes), what it
shows, the tasks that compute its data (:class:`attnphase.paper.plan.TaskBuilder`), its tidy table
(rows of :data:`attnphase.paper.tables.FIGURE_COLUMNS`, from the computed data), its key numbers
(:func:`attnphase.paper.tables.key_number`) and its drawing, which reads the table back from its
CSV file only.
"""
from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """One figure of the report.

    ``title(plan)`` and ``what(plan)``: the section's title and what it shows (text, the
    numbers in it taken from the plan and the models); ``tasks(builder)``: its tasks;
    ``table(data, plan)``: its tidy rows; ``key_numbers(data, rows, plan)``: its key numbers;
    ``draw(rows)``: a matplotlib Figure from the rows read back from its CSV; ``pointer``:
    where the project documents the comparison further (empty if nowhere); ``authors(plan)``: the
    authors' stored fixed points (:class:`attnphase.paper.authors.AuthorsFile`) of the figure's
    models, set beside ours in its section."""

    name: str
    title: Callable
    what: Callable
    tasks: Callable
    table: Callable
    key_numbers: Callable
    draw: Callable
    pointer: str = ""
    authors: Callable = lambda plan: ()


def _registry() -> tuple:
    from . import (finite_size, generalisation, histogram, loss_gap, order_parameters, phase_diagram, rank_two,
                   second_positional_matrix, slices, starts)

    return tuple(m.FIGURE for m in (order_parameters, generalisation, loss_gap, phase_diagram, slices,
                                    second_positional_matrix, finite_size, starts, rank_two, histogram))


#: the figures in report order
REGISTRY = _registry()

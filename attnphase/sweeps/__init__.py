"""Parameter sweeps on Dask, resumable: phase diagrams over the ``(alpha, omega)`` plane
(docs/theory.md, section 3).

Modules: :mod:`attnphase.sweeps.grid` (grid values and task keys), :mod:`attnphase.sweeps.config` (what
to compute), :mod:`attnphase.sweeps.tasks` (the task functions run on the workers, and the rows
they give), :mod:`attnphase.sweeps.store` (the crash-safe files), :mod:`attnphase.sweeps.runner` (the Dask
execution) and :mod:`attnphase.sweeps.figures` (figures drawn from the CSVs alone).

What is computed
----------------
*Theory*: three tasks per ``omega`` column: the semantic and the positional branch,
each followed by continuation along the ``alpha`` grid (``numerics.api.follow``, the line
quadrature, with the linear baseline), and then ``alpha_c(omega)`` and ``alpha_l(omega)`` by
root-finding (``numerics.api.thresholds``), bracketed by the two branch tasks' rows as
read back from ``theory.csv`` (so a resumed sweep starts from the same values as an
uninterrupted one). The threshold task is submitted when both branch tasks of its
column are stored; the spinodals in its row are theirs.

For any other model (``L`` tokens, student rank ``r``, teacher rank ``t``, any ``P``;
docs/theory.md, section 4) a column has one task per branch of the model
(``numerics.api.branches``: semantic, positional, trivial, and mixed for
``r >= 2``; or ``--branches``), each followed along the grid by the same
``numerics.api.follow`` (the QMC integrator), and a thresholds task
(the same ``numerics.api.thresholds``) that starts from their rows and locates every change
of the global branch (``alpha_c`` is the first) and ``alpha_l``.

*Simulation*: one task per finite-size run ``(omega, alpha, init, run_index)``
(``validation.simulate.run_one``), from the semantic and the positional start.

Files (all under ``--out``)
---------------------------
``theory.csv``      one row per (omega, alpha, branch), tidy; every model parameter and
                    solver setting is in the row. A grid point where a branch does not
                    exist (past its spinodal) has ``exists = False`` and empty values;
                    ``spinodal_{lower,upper}_alpha(_error)`` are where the branch ended.
``thresholds.csv``  one row per omega: ``alpha_c, alpha_c_error, alpha_l, alpha_l_error``,
                    the linear baseline, the spinodals (one column group per branch, all of
                    them as JSON in ``spinodals``) and ``threshold_status``/``_message``;
                    for the general model every change of the global branch as JSON in
                    ``transitions`` (``alpha_c`` is the first) and the global branch at
                    each grid ``alpha`` in ``global_minimum``.
``simulation.csv``  one row per simulated run.
``theory_points.csv``, ``simulation_points.csv``  derived per-grid-point differences
                    (rewritten at the end of a run; the figures are drawn from the CSVs).
``failures.csv``    an append-only log of failed tasks (``run_started`` says which run).
``manifest.json``   the settings of each kind of sweep and their hash.

Every data row names its task (``task``) and carries the checksum of its cells
(``row_check``, :data:`tidyio.ROW_CHECK`).

Resuming and crash safety
-------------------------
A finished task's rows are appended to the CSV as one block, flushed and fsynced. The
data decides what is done: on start a task is done when its file holds exactly the rows
it gives, every one readable (:meth:`attnphase.sweeps.store.SweepStore.recover`). A file with an
unreadable line (cut by a crash, garbled: a checksum that does not match) or rows of a
task that is not done is moved aside under a new name (never deleted, with a warning),
and the rows of the done tasks are written in its place, so a SIGKILL or a damaged file
at any moment loses at most the tasks it touched, which are computed again. Re-running
skips the done tasks. The settings that decide the values of a row (the model without ``omega``,
the solver precision and the ``alpha`` grid for the theory; the model and the training
settings for simulations) are hashed into ``manifest.json``; a run with other settings
and the same ``--out`` is refused. Extending the ``omega`` grid (or ``--seeds``) adds
tasks to an existing sweep.
"""


class SweepError(ValueError):
    """Bad sweep input or an ``--out`` folder that cannot be used; the message names the option."""

"""The simulator's front: the public names of :mod:`validation.simulator` (see its docstring for
the parts), as callers import them (``from validation.simulate import simulate``)."""
from __future__ import annotations

from .run_settings import DEFAULT_LR, INITS, OPTIMIZERS, check_start
from .simulator.attention import (Attention, as_attention, attention_matrix, generated_row, student_attention,
                                  teacher_attention)
from .simulator.baseline import (LINEAR_RIDGE, fit_linear_baseline, linear_per_sample_loss, linear_risk_and_grad,
                                 linear_test_error)
from .simulator.data import (STAT_DTYPE, Batch, Problem, choose_device, make_batch, make_problem, position_basis,
                             position_offsets, raw_training_set, run_seed_sequence, sample_raw, teacher_matrix,
                             torch_generator)
from .simulator.kernel import (batch_per_sample_loss, batch_risk_and_grad, hidden, loss_and_grad_h,
                               per_sample_loss, risk_and_grad, risk_autograd)
from .simulator.records import (AGGREGATED, DTYPES, Training, aggregate, aggregated_keys, overlaps, run_data_set,
                                run_one, run_starts, simulate, simulate_starts, summary_statistics, test_error,
                                train_loss)
from .simulator.training import (CHECK_EVERY, RANDOM_INIT_SCALE, SimulationDiverged, StopRule, TrainResult, check_init, initial_Q,
                                 train, train_batch)

__all__ = [
    "AGGREGATED", "Attention", "CHECK_EVERY", "Batch", "DEFAULT_LR", "DTYPES", "INITS", "LINEAR_RIDGE", "OPTIMIZERS", "Problem",
    "RANDOM_INIT_SCALE", "STAT_DTYPE", "SimulationDiverged", "StopRule", "TrainResult", "Training", "aggregate",
    "aggregated_keys", "as_attention", "attention_matrix", "batch_per_sample_loss", "batch_risk_and_grad",
    "check_init", "check_start", "choose_device", "fit_linear_baseline", "generated_row", "hidden", "initial_Q",
    "linear_per_sample_loss", "linear_risk_and_grad", "linear_test_error", "loss_and_grad_h", "make_batch",
    "make_problem", "overlaps", "per_sample_loss", "position_basis", "position_offsets", "raw_training_set",
    "risk_and_grad", "risk_autograd", "run_data_set", "run_one", "run_seed_sequence", "run_starts", "sample_raw", "simulate",
    "simulate_starts", "student_attention", "summary_statistics", "teacher_attention", "teacher_matrix",
    "test_error", "torch_generator", "train", "train_batch", "train_loss",
]

"""Optimisers and learning-rate schedules with PyTorch's names and semantics."""
from loom.optim import lr_scheduler
from loom.optim.algorithms import (ASGD, LBFGS, SGD, Adadelta, Adafactor, Adagrad, Adam, Adamax, AdamW, Muon, NAdam,
                                   RAdam, RMSprop, Rprop, SparseAdam)
from loom.optim.optimizer import Optimizer
from loom.optim.swap import swap_in_optimizer_params_and_state

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
           "Rprop", "ASGD", "LBFGS", "Adafactor", "Muon", "SparseAdam", "swap_in_optimizer_params_and_state",
           "lr_scheduler"]

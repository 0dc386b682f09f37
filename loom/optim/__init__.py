"""Optimisers and learning-rate schedules with PyTorch's names and semantics."""
from loom.optim import lr_scheduler
from loom.optim.algorithms import (ASGD, LBFGS, SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, NAdam, RAdam, RMSprop,
                                   Rprop)
from loom.optim.optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
           "Rprop", "ASGD", "LBFGS", "lr_scheduler"]

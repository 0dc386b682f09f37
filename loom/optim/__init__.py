"""Optimisers and learning-rate schedules with PyTorch's names and semantics."""
from loom.optim import lr_scheduler
from loom.optim.algorithms import SGD, Adagrad, Adam, AdamW, RMSprop
from loom.optim.optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]

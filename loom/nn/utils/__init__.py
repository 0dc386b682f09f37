"""Helpers over a model's parameters: gradient clipping, flattening to one vector, weight/spectral norm and
parametrizations."""
from loom.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from loom.nn.utils import rnn
from loom.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from loom.nn.utils import parametrize, parametrizations
from loom.nn.utils.weight_norm import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "rnn", "parametrize", "parametrizations",
           "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]

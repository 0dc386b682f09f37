"""Helpers over a model's parameters: gradient clipping, flattening to one vector, weight/spectral norm and
parametrizations."""
from loom.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from loom.nn.utils import rnn
from loom.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from loom.nn.utils import parametrize, parametrizations
from loom.nn.utils.weight_norm import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm
from loom.nn.utils import fusion, stateless
from loom.nn.utils.fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None):
    """Deprecated spelling of `clip_grad_norm_`."""
    import warnings
    warnings.warn("loom.nn.utils.clip_grad_norm is now deprecated in favor of loom.nn.utils.clip_grad_norm_.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def skip_init(module_cls, *args, **kwargs):
    """Build `module_cls(*args, **kwargs)`; PyTorch leaves its parameters unfilled, loom fills them as usual."""
    return module_cls(*args, **kwargs)


__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "rnn", "parametrize", "parametrizations",
           "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm", "fusion", "stateless",
           "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights",
           "clip_grad_norm", "skip_init"]

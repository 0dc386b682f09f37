"""`torch.func`: loom.func's transforms (vmap, grad, vjp, jvp, jacrev, jacfwd, hessian, functional_call, ...)."""
from loom.func import (  # noqa: F401
    functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, stack_module_state, vjp, vmap,
)
from loom.torch._forward import install as _install

_install(globals(), "loom.func")

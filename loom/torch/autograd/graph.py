"""`torch.autograd.graph`: the saved-tensor hook contexts, as far as loom's autograd can honour them.

loom's backward rules read their forward inputs from the recorded graph, not from a list of saved
tensors a hook could repack: `save_on_cpu` is exact (every tensor already lives in CPU memory) and
`saved_tensors_hooks` with user hooks raises a loom error instead of silently not calling them.
"""
from __future__ import annotations

from loom.errors import AutogradError


class saved_tensors_hooks:  # noqa: N801
    """`with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` is not supported by loom.

    Raises
    ------
    AutogradError
        On entering the region: loom's autograd keeps no saved-tensor list for the hooks to pack.
    """

    def __init__(self, pack_hook, unpack_hook) -> None:
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        raise AutogradError(
            "loom.torch.autograd.graph.saved_tensors_hooks: custom pack/unpack hooks for saved tensors are not "
            "supported (loom's backward reads its forward values from the recorded graph); use "
            "torch.utils.checkpoint to trade memory for recompute, or torch.autograd.graph.save_on_cpu, which "
            "loom honours")

    def __exit__(self, *exc) -> bool:
        return False


class save_on_cpu:  # noqa: N801
    """Keep saved tensors in CPU memory: on loom, a CPU-only build, they already are, so it changes nothing.

    Examples
    --------
    >>> import loom.torch as torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> with torch.autograd.graph.save_on_cpu(pin_memory=True):
    ...     y = (x * x).sum()
    >>> y.backward(); x.grad.tolist()
    [2.0, 2.0]
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        self.pin_memory, self.device_type = pin_memory, device_type

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


class disable_saved_tensors_hooks:  # noqa: N801
    """Forbid saved-tensor hooks in the region: loom never runs any, so it changes nothing."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

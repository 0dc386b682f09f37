"""ZeRO stage 1: optimizer state sharded across data-parallel ranks, with PyTorch's interface.

``ZeroRedundancyOptimizer(params, optimizer_class=loom.optim.Adam, lr=...)``
gives each parameter one owning rank; each rank keeps optimizer state
(Adam's moments, ...) only for the parameters it owns and updates only
those, then every owner broadcasts its updated parameters, so all replicas
stay identical while each holds about 1/N of the optimizer state. Gradients
must already be averaged across ranks (as `DistributedDataParallel` leaves
them). The result equals the wrapped optimizer run on every parameter in
one process.

Checkpoints: `consolidate_state_dict` + `state_dict` give the full state in
the wrapped optimizer's format on one rank (as in PyTorch);
`sharded_state_dict` / `load_sharded_state_dict` give each rank's own
share, keyed by global parameter index, for `loom.distributed.checkpoint`,
which can then be loaded on a different number of ranks.

Examples
--------
.. code-block:: python

    model = DistributedDataParallel(net)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=loom.optim.Adam, lr=1e-3)
    loss.backward()
    opt.step()
"""
from __future__ import annotations

import collections
from typing import Any

import numpy as np

from loom.distributed.process_group import DistributedError, is_initialized, resolve
from loom.errors import LoomError
from loom.optim.optimizer import Optimizer

__all__ = ["ZeroRedundancyOptimizer"]


def _partition(sizes: list[int], world: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the rank with the fewest elements so far."""
    load = [0] * world
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


class ZeroRedundancyOptimizer(Optimizer):
    """Wrap `optimizer_class` so each rank keeps state for, and updates, only its share of the parameters.

    Parameters
    ----------
    params : iterable of Tensors or of dicts (parameter groups)
        Every rank must pass the same parameters in the same order.
    optimizer_class : a `loom.optim.Optimizer` subclass
    process_group : ProcessGroup, optional
        The data-parallel ranks (default: all). Without an initialised
        process group this process owns every parameter.
    parameters_as_bucket_view : bool
        Accepted for PyTorch compatibility; parameters keep their own storage.
    overlap_with_ddp : bool
        Must be False (overlapping the update with DDP's communication is not
        implemented).
    **defaults
        The wrapped optimizer's options (``lr``, ``betas``, ...).

    It is a `loom.optim.Optimizer`, so learning-rate schedulers drive it:
    they edit `param_groups`, and `step` passes the options down.
    """

    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view: bool = False,
                 overlap_with_ddp: bool = False, **defaults: Any) -> None:
        from loom.tensor import Tensor

        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer: optimizer_class must be a "
                            f"loom.optim.Optimizer subclass, got {optimizer_class!r}")
        if overlap_with_ddp:
            raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer: overlap_with_ddp=True is not "
                            "supported; the update runs after backward")
        if isinstance(params, Tensor):
            raise TypeError("loom.distributed.optim.ZeroRedundancyOptimizer: params must be an iterable of Tensors "
                            "or dicts, got a single Tensor")
        groups = list(params)
        if not groups:
            raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.optimizer_class = optimizer_class
        self.defaults = dict(defaults)
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._group = resolve(process_group, "ZeroRedundancyOptimizer") if is_initialized() else None
        self.rank = self._group.rank() if self._group is not None else 0
        self.world_size = self._group.size() if self._group is not None else 1
        # The full groups, as the user sees them (schedulers edit their options; `step` copies them down).
        self.param_groups: list[dict[str, Any]] = []
        for g in groups:
            ps = g["params"]
            ps = [ps] if isinstance(ps, Tensor) else list(ps)
            self.param_groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ps})
        self._params = [p for g in self.param_groups for p in g["params"]]
        if len({id(p) for p in self._params}) != len(self._params):
            raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer: a parameter appears twice")
        self._owner = _partition([int(np.prod(p.shape)) for p in self._params], self.world_size)
        self._index = {id(p): i for i, p in enumerate(self._params)}
        local_groups = []
        self._local_of_group: list[int | None] = []
        for g in self.param_groups:
            mine = [p for p in g["params"] if self._owner[self._index[id(p)]] == self.rank]
            if mine:
                self._local_of_group.append(len(local_groups))
                local_groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": mine})
            else:
                self._local_of_group.append(None)
        self.optim = optimizer_class(local_groups, **defaults) if local_groups else None
        if self.optim is not None:  # Fill each full group's options with the wrapped optimizer's defaults.
            for g, li in zip(self.param_groups, self._local_of_group):
                if li is not None:
                    for k, v in self.optim.param_groups[li].items():
                        g.setdefault(k, v)
            for g in self.param_groups:
                for k, v in self.optim.defaults.items():
                    g.setdefault(k, v)
        self._consolidated: dict | None = None

    # ------------------------------------------------------------ the step
    @property
    def state(self):
        """The wrapped optimizer's state: this rank's parameters only."""
        return self.optim.state if self.optim is not None else collections.defaultdict(dict)

    def owned_parameters(self) -> list:
        """The parameters this rank updates."""
        return [p for i, p in enumerate(self._params) if self._owner[i] == self.rank]

    def zero_grad(self, set_to_none: bool = True) -> None:
        from loom.tensor import zeros_like
        for p in self._params:
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad)

    def _sync_options(self) -> None:
        if self.optim is None:
            return
        for g, li in zip(self.param_groups, self._local_of_group):
            if li is not None:
                local = self.optim.param_groups[li]
                for k, v in g.items():
                    if k != "params":
                        local[k] = v

    def step(self, closure=None):
        """Update this rank's parameters with the wrapped optimizer, then broadcast every owner's parameters."""
        loss = None
        if closure is not None:
            from loom.autograd.grad_mode import enable_grad
            with enable_grad():
                loss = closure()
        self._sync_options()
        if self.optim is not None:
            self.optim.step()
        self._broadcast_parameters()
        return loss

    def _broadcast_parameters(self) -> None:
        if self._group is None or self.world_size == 1:
            return
        from loom.autograd.grad_mode import no_grad
        from loom.distributed.collectives import broadcast
        from loom.tensor import tensor

        src_ranks = self._group._ranks
        for r in range(self.world_size):
            owned = [p for i, p in enumerate(self._params) if self._owner[i] == r]
            if not owned:
                continue
            by_dtype: dict[Any, list] = collections.defaultdict(list)
            for p in owned:
                by_dtype[p.dtype].append(p)
            for dtype, ps in by_dtype.items():
                if r == self.rank:
                    flat = np.concatenate([np.asarray(p.detach().numpy()).reshape(-1) for p in ps])
                else:
                    like = np.asarray(ps[0].detach().numpy())
                    flat = np.empty(sum(int(np.prod(p.shape)) for p in ps), dtype=like.dtype)
                buf = tensor(flat, dtype=dtype)
                broadcast(buf, src=src_ranks[r], group=self._group)
                if r != self.rank:
                    values = buf.numpy()
                    at = 0
                    with no_grad():
                        for p in ps:
                            n = int(np.prod(p.shape))
                            p.copy_(tensor(values[at:at + n].reshape(p.shape), dtype=dtype))
                            at += n

    # ------------------------------------------------------------ checkpoints
    def _global_state(self) -> dict[int, dict]:
        """This rank's state, keyed by global parameter index."""
        if self.optim is None:
            return {}
        local = self.optim.state_dict()
        local_params = [p for g in self.optim.param_groups for p in g["params"]]
        return {self._index[id(local_params[int(li)])]: st for li, st in local["state"].items()}

    def _groups_for_dict(self) -> list[dict]:
        out = []
        at = 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(at, at + len(g["params"])))
            at += len(g["params"])
            out.append(packed)
        return out

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's share onto global rank `to` (collective); `state_dict` on `to` then returns it."""
        mine = self._global_state()
        if self._group is None:
            self._consolidated = {"state": mine, "param_groups": self._groups_for_dict()}
            return
        from loom.tensor import tensor
        root = self._group.group_rank(to, "ZeroRedundancyOptimizer.consolidate_state_dict")
        plain = {i: {k: (("__tensor__", np.asarray(v.numpy()), v.dtype.name) if hasattr(v, "numpy") else v)
                     for k, v in st.items()} for i, st in mine.items()}
        parts = self._group._comm.gather(plain, root=root)
        self._consolidated = None
        if self.rank == root:
            import loom.dtypes as dt
            state: dict[int, dict] = {}
            for part in parts:
                for i, st in part.items():
                    state[i] = {k: (tensor(v[1], dtype=dt.as_dtype(v[2])) if isinstance(v, tuple) and len(v) == 3
                                    and v[0] == "__tensor__" else v) for k, v in st.items()}
            self._consolidated = {"state": dict(sorted(state.items())), "param_groups": self._groups_for_dict()}

    def state_dict(self) -> dict[str, Any]:
        """The full state in the wrapped optimizer's format (after `consolidate_state_dict` on this rank)."""
        if self._consolidated is None:
            raise DistributedError("loom.distributed.optim.ZeroRedundancyOptimizer.state_dict: call "
                                   "consolidate_state_dict(to=rank) first, on every rank, and read state_dict on "
                                   f"that rank (this is rank {self.rank})")
        return self._consolidated

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a full state (from `state_dict`, or the wrapped optimizer's own): each rank keeps its share."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise LoomError(f"loom.distributed.optim.ZeroRedundancyOptimizer.load_state_dict: the state has "
                            f"{len(groups)} parameter groups, the optimizer {len(self.param_groups)}")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer.load_state_dict: a parameter "
                                f"group's size differs ({len(mine['params'])} vs {len(theirs['params'])})")
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
        position = {int(idx): k for k, idx in enumerate(i for g in groups for i in g["params"])}
        state = {position[int(i)]: st for i, st in state_dict["state"].items()}
        self.load_sharded_state_dict({"state": state, "param_groups": self._groups_for_dict()})

    def sharded_state_dict(self) -> dict[str, Any]:
        """This rank's share, keyed by global parameter index, for `loom.distributed.checkpoint.save`.

        The ``state`` entries differ between ranks (each parameter's state is
        on its owner only); ``param_groups`` is the same on every rank.
        """
        return {"state": self._global_state(), "param_groups": self._groups_for_dict()}

    def load_sharded_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state keyed by global parameter index (from any number of ranks' shares); keep this rank's part."""
        groups = state_dict.get("param_groups", [])
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
        self._sync_options()
        if self.optim is None:
            return
        local_params = [p for g in self.optim.param_groups for p in g["params"]]
        local_index = {id(p): li for li, p in enumerate(local_params)}
        state = {}
        for i, st in state_dict.get("state", {}).items():
            i = int(i)
            if not 0 <= i < len(self._params):
                raise LoomError(f"loom.distributed.optim.ZeroRedundancyOptimizer: the state names parameter {i}, "
                                f"but the optimizer has {len(self._params)}")
            p = self._params[i]
            if id(p) in local_index:
                state[local_index[id(p)]] = st
        local = self.optim.state_dict()
        local["state"] = state
        self.optim.load_state_dict(local)

    def add_param_group(self, param_group: dict) -> None:
        raise LoomError("loom.distributed.optim.ZeroRedundancyOptimizer.add_param_group: adding groups after "
                        "construction is not supported; pass every group to the constructor")

    def __repr__(self) -> str:
        return (f"ZeroRedundancyOptimizer({self.optimizer_class.__name__}, rank {self.rank} of {self.world_size}, "
                f"owns {len(self.owned_parameters())} of {len(self._params)} parameters)")

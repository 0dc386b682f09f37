"""`swap_in_optimizer_params_and_state`: run an optimiser on other parameters and state for a while."""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Iterator

from loom.errors import LoomError
from loom.tensor import Tensor

_NAME = "loom.optim.swap_in_optimizer_params_and_state"


def _groups_to_swap(optimizer, parameters: list, state_dict: Any) -> tuple[dict, list[tuple[dict, dict, list]]]:
    """Check `state_dict` against the live optimiser; return its state and (live group, saved group, params)."""
    if not optimizer.state:
        raise LoomError(f"{_NAME}: the optimizer's state is not initialised yet (take a step first)")
    if not isinstance(state_dict, dict):
        raise LoomError(f"{_NAME}: expected an optimizer.state_dict()-style dict, got {type(state_dict).__name__}")
    state, groups = state_dict.get("state"), state_dict.get("param_groups")
    if not isinstance(state, dict) or any(isinstance(k, Tensor) or not isinstance(v, dict)
                                          for k, v in state.items()):
        raise LoomError(f"{_NAME}: swapin_optim_state['state'] must map packed parameter ids (ints) to "
                        "per-parameter state dicts")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        raise LoomError(f"{_NAME}: swapin_optim_state['param_groups'] must be a list of "
                        f"{len(optimizer.param_groups)} group dicts (one per live group), got "
                        f"{len(groups) if isinstance(groups, list) else type(groups).__name__}")
    out, offset, seen = [], 0, set()
    for i, (live, saved) in enumerate(zip(optimizer.param_groups, groups)):
        ids = saved.get("params") if isinstance(saved, dict) else None
        if not isinstance(ids, list) or not all(isinstance(j, int) for j in ids):
            raise LoomError(f"{_NAME}: param group {i} must be a dict whose 'params' is a list of packed ids")
        if len(ids) != len(live["params"]):
            raise LoomError(f"{_NAME}: param group {i} has {len(ids)} params, the live group "
                            f"{len(live['params'])}")
        if set(saved) != set(live):
            raise LoomError(f"{_NAME}: param group {i}'s keys differ from the live group's: only saved "
                            f"{sorted(set(saved) - set(live))}, only live {sorted(set(live) - set(saved))}")
        if offset + len(ids) > len(parameters):
            raise LoomError(f"{_NAME}: got {len(parameters)} parameters, fewer than the optimizer's groups hold")
        out.append((live, saved, parameters[offset:offset + len(ids)]))
        offset += len(ids)
        seen.update(ids)
    extra = [k for k in state if k not in seen]
    if extra:
        raise LoomError(f"{_NAME}: swapin_optim_state['state'] has ids {extra!r} that no param group lists")
    return state, out


@contextlib.contextmanager
def swap_in_optimizer_params_and_state(optimizer, swapin_parameters: dict[str, Tensor],
                                       swapin_optim_state: dict[str, Any]) -> Iterator[None]:
    """Within the block, `optimizer` works on `swapin_parameters` and `swapin_optim_state`; it is restored after.

    As `torch.optim.swap_in_optimizer_params_and_state`. Unlike ``load_state_dict``, the parameters are
    swapped too, so ``optimizer.step()`` updates the given tensors. In-place updates of the state's
    tensors show in `swapin_optim_state`; new entries or replaced tensors do not.

    Parameters
    ----------
    optimizer : loom.optim.Optimizer
        The live optimiser; its state must be initialised (a step taken).
    swapin_parameters : dict of str to Tensor
        The parameters to use, in the order of the optimiser's groups (``model.named_parameters()`` order).
    swapin_optim_state : dict
        State in ``optimizer.state_dict()`` layout: ``"state"`` keyed by packed ids and ``"param_groups"``
        with the live groups' keys (their hyperparameters are used within the block).

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.SGD([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> other = loom.zeros(2, requires_grad=True)
    >>> other.grad = loom.ones(2)
    >>> with loom.optim.swap_in_optimizer_params_and_state(opt, {"w": other}, opt.state_dict()):
    ...     opt.step()
    >>> other.tolist(), w.tolist()
    ([-0.10000000149011612, -0.10000000149011612], [0.800000011920929, 0.800000011920929])
    """
    state, swaps = _groups_to_swap(optimizer, list(swapin_parameters.values()), swapin_optim_state)
    live_state = optimizer.state
    snapshots = [dict(g) for g in optimizer.param_groups]
    try:
        swapped: collections.defaultdict[Tensor, dict] = collections.defaultdict(dict)
        for live, saved, params in swaps:
            live["params"] = params
            live.update({k: v for k, v in saved.items() if k != "params"})
            for p, i in zip(params, saved["params"]):
                swapped[p] = dict(state.get(i, {}))
        optimizer.state = swapped
        yield
    finally:
        for g, snap in zip(optimizer.param_groups, snapshots):
            g.clear()
            g.update(snap)
        optimizer.state = live_state

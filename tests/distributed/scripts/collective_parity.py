"""The parity harness (tests/parity/harness.py) on N ranks: the differentiable collectives against
torch.distributed.nn.functional over gloo (all_reduce, all_gather, broadcast, all_to_all), outputs and
gradients (second order for all_reduce), each rank with its own inputs and cotangents, eager, through the
compiler and traced by loom.function."""
import socket
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as tdist  # noqa: E402
import torch.distributed.nn.functional as tfn  # noqa: E402

import loom.distributed as dist  # noqa: E402
import loom.distributed.nn.functional as lfn  # noqa: E402
from tests.parity.harness import Case, randn, run_case  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # torch marks its nn.functional collectives deprecated.
dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
port = None
if r == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
port = dist.GroupMember.WORLD._comm.bcast(port, root=0)
tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=n)


def F(lib):
    return tfn if lib is torch else lfn


CASES = [
    Case("all_reduce", lambda lib, x: F(lib).all_reduce(x * x), (randn(2, 3, dtype=np.float64),),
         second_order=True),
    Case("all_gather", lambda lib, x: lib.stack(F(lib).all_gather(x.sin())), (randn(3, dtype=np.float64),)),
    Case("broadcast", lambda lib, x: F(lib).broadcast(x.exp(), src=n - 1), (randn(2, 2, dtype=np.float64),)),
    Case("all_to_all", lambda lib, x: lib.stack(F(lib).all_to_all([lib.zeros(2, dtype=x.dtype) for _ in range(n)],
                                                                   [x[k] * (k + 1) for k in range(n)])),
         (randn(n, 2, dtype=np.float64),)),
]
# reduce_scatter and reduce: gloo has no reduce_scatter, and torch's reduce leaves the other ranks' values
# unspecified; both are checked against finite differences in collective_graph.py.
for case in CASES:
    for mode in ("eager", "compiled", "traced"):
        run_case(case, mode=mode, seed=r)
        print(f"rank {r}: parity {case.name} {mode} ok", flush=True)

tdist.destroy_process_group()
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)

"""Join the MPI jobs of separately started launchers (one per machine) into one communicator.

``python -m loom.distributed.run --nnodes M --node-rank R`` starts one
``mpirun`` per machine, so each machine's ranks begin in their own
``MPI_COMM_WORLD``. Here they become one: node 0's first rank opens an MPI
port (``MPI_Open_port``) and hands its name to node k over the gRPC control
plane (key ``mpi/port/k``); the ranks merged so far accept
(``MPI_Comm_accept``), node k's ranks connect (``MPI_Comm_connect``), and the
two sides merge (``MPI_Intercomm_merge``). Nodes join in order, and the result
is renumbered so that global rank = the node's first rank + local rank.

Open MPI 4 connects two ``mpirun`` jobs only when both were given the same
``ompi-server`` (the launcher on node 0 starts one and passes its URI to every
node), and the data then flows over Open MPI's usual transports (TCP between
machines): every machine must reach the others' addresses directly.
"""
from __future__ import annotations

import atexit
import os
from typing import Any

from loom.distributed._errors import DistributedError


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return int(value) if value else default
    except ValueError:
        raise DistributedError(f"loom.distributed: environment variable {name}={value!r} is not an integer") from None


def needs_join(MPI: Any) -> bool:
    """Whether this process belongs to a launcher of a multi-machine job whose ranks MPI does not all see."""
    return _env_int("LOOM_DIST_NNODES", 1) > 1 and MPI.COMM_WORLD.Get_size() < _env_int("WORLD_SIZE", 0)


def join_world(MPI: Any) -> Any:
    """The communicator of every rank of every node, ordered by global rank (collective over all of them)."""
    from loom.distributed.control import job_client
    node, nnodes = _env_int("LOOM_DIST_NODE_RANK", 0), _env_int("LOOM_DIST_NNODES", 1)
    offset, world_size = _env_int("LOOM_DIST_RANK_OFFSET", 0), _env_int("WORLD_SIZE", 0)
    timeout = float(os.environ.get("LOOM_DIST_RDZV_TIMEOUT", "60"))
    client = job_client()
    if client is None:
        raise DistributedError("loom.distributed.init_process_group: this is node "
                               f"{node} of {nnodes}, but the launcher's control plane is not in the environment "
                               "(LOOM_DIST_MASTER_CONTROL, LOOM_DIST_TOKEN); start every node with `python -m "
                               "loom.distributed.run --nnodes M --node-rank R --master ADDR:PORT`")
    local = MPI.COMM_WORLD
    try:
        if node == 0:
            comm, port = local, (MPI.Open_port() if local.Get_rank() == 0 else None)
        else:
            port = None
            name = client.get(f"mpi/port/{node}", timeout) if local.Get_rank() == 0 else None
            comm = _merge(local.Connect(name, root=0), high=True)
        for k in range(node + 1, nnodes):
            if comm.Get_rank() == 0:  # Node 0's first rank: it holds the port.
                client.put(f"mpi/port/{k}", str(port))
            merged = _merge(comm.Accept(port, root=0), high=False)
            if comm is not local:
                comm.Free()
            comm = merged
    finally:
        client.close()
    me = offset + local.Get_rank()
    world = comm.Split(0, key=me)
    if comm is not local:
        comm.Free()
    if world.Get_size() != world_size or world.Get_rank() != me:
        raise DistributedError(f"loom.distributed.init_process_group: joining the nodes gave rank "
                               f"{world.Get_rank()} of {world.Get_size()}, expected {me} of {world_size}")
    atexit.register(_disconnect, world)
    return world


def _merge(inter: Any, high: bool) -> Any:
    merged = inter.Merge(high=high)
    inter.Free()
    return merged


def _disconnect(comm: Any) -> None:
    """Leave the joined communicator together, so that no node finalises MPI while another still sends."""
    from mpi4py import MPI
    if MPI.Is_initialized() and not MPI.Is_finalized():
        comm.Barrier()
        comm.Free()

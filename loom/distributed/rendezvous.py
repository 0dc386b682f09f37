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


# Processes started one by one with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each an
# MPI singleton: rank 0 starts an ``ompi-server`` and serves a small TCP rendezvous at MASTER_ADDR:MASTER_PORT;
# each rank learns the server's URI there (Open MPI must know it before MPI starts, through the
# ``pmix_server_uri`` MCA variable), then the ranks join one by one as the nodes of a multi-machine job do.
_TORCH: dict[str, Any] = {}


def torch_style(init_method: str | None, world_size: int, rank: int) -> tuple[int, int, str, int] | None:
    """(world size, rank, address, port) when this process was started on its own by the user for a world of
    several ranks, torchrun style: the variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or
    ``init_method="tcp://ADDR:PORT"`` with `rank` and `world_size`; None otherwise (MPI started the ranks)."""
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ or _env_int("LOOM_DIST_NNODES", 1) > 1:
        return None
    size = world_size if world_size not in (-1, None) else _env_int("WORLD_SIZE", 1)
    me = rank if rank not in (-1, None) else _env_int("RANK", -1)
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if init_method and init_method.startswith("tcp://"):
        addr, _, port = init_method[len("tcp://"):].rstrip("/").rpartition(":")
        addr = addr.strip("[]")
    if size <= 1 or not addr or not port:
        return None
    if not port.isdigit():
        raise DistributedError(f"loom.distributed.init_process_group: the rendezvous port {port!r} is not a number")
    return size, me, addr, int(port)


def _send_line(sock: Any, text: str) -> None:
    sock.sendall(text.encode() + b"\n")


def _recv_line(sock: Any, what: str) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise DistributedError(f"loom.distributed.init_process_group: the rendezvous at "
                                   f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} closed while "
                                   f"this rank waited for {what} (did rank 0 fail?)")
        data += chunk
    return data.decode().strip()


def torch_style_prepare(size: int, rank: int, addr: str, port: int, timeout: float) -> None:
    """Before MPI starts: meet at MASTER_ADDR:MASTER_PORT and point Open MPI at rank 0's ``ompi-server``."""
    import socket
    import time
    if "mpi4py.MPI" in __import__("sys").modules:
        raise DistributedError("loom.distributed.init_process_group: WORLD_SIZE > 1 with MASTER_ADDR/MASTER_PORT "
                               "(ranks started one by one), but MPI was started before init_process_group; call "
                               "init_process_group before anything that imports mpi4py")
    if not 0 <= rank < size:
        raise DistributedError(f"loom.distributed.init_process_group: rank {rank} (RANK={os.environ.get('RANK')!r}) "
                               f"must be in [0, {size}) (world size {size}): give each process its own RANK")
    deadline = time.monotonic() + timeout
    _TORCH.update(rank=rank, size=size)
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        # Under torchrun, its agent's TCPStore holds MASTER_PORT and torchrun ends the others when a rank fails.
        from datetime import timedelta

        from torch.distributed import TCPStore
        store = TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=timeout))
        prefix = f"loom/{os.environ['TORCHELASTIC_RUN_ID']}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        _TORCH.update(store=store, prefix=prefix)
        if rank == 0:
            store.set(f"{prefix}/uri", _start_ompi_server(deadline))
        os.environ["OMPI_MCA_pmix_server_uri"] = store.get(f"{prefix}/uri").decode()
        return
    if rank == 0:
        uri = _start_ompi_server(deadline)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("", port))
        except OSError as e:
            raise DistributedError(f"loom.distributed.init_process_group: rank 0 cannot listen on MASTER_PORT={port} "
                                   f"({e}); choose a free port") from None
        listener.listen(size)
        peers: dict[int, Any] = {}
        listener.settimeout(max(0.1, deadline - time.monotonic()))
        while len(peers) < size - 1:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                missing = sorted(set(range(1, size)) - set(peers))
                raise DistributedError(f"loom.distributed.init_process_group: ranks {missing} did not reach the "
                                       f"rendezvous at {addr}:{port} within {timeout:g} s") from None
            conn.settimeout(None)
            other = int(_recv_line(conn, "its rank"))
            if other in peers or not 0 < other < size:
                _send_line(conn, f"error rank {other} is taken or not in [1, {size})")
                raise DistributedError(f"loom.distributed.init_process_group: two processes say RANK={other} (or it "
                                       f"is outside [0, {size})); give each process its own RANK")
            peers[other] = conn
        for conn in peers.values():
            _send_line(conn, uri)
        _TORCH.update(peers=peers, listener=listener)
    else:
        while True:
            try:
                sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise DistributedError(f"loom.distributed.init_process_group: rank 0 did not open the rendezvous "
                                           f"at MASTER_ADDR={addr} MASTER_PORT={port} within {timeout:g} s") from None
                time.sleep(0.1)
        sock.settimeout(None)
        _send_line(sock, str(rank))
        uri = _recv_line(sock, "the rendezvous")
        if uri.startswith("error "):
            raise DistributedError(f"loom.distributed.init_process_group: rank 0 refused this process: {uri[6:]}")
        _TORCH.update(sock=sock)
    os.environ["OMPI_MCA_pmix_server_uri"] = uri


def _start_ompi_server(deadline: float) -> str:
    """Start Open MPI's ``ompi-server`` for this job (it ends with this process) and return its URI."""
    import atexit
    import shutil
    import signal
    import subprocess
    import tempfile
    import time
    exe = shutil.which("ompi-server")
    if exe is None:
        raise DistributedError("loom.distributed.init_process_group: ranks started one by one need Open MPI's "
                               "ompi-server (apt-get install openmpi-bin), which is not on PATH")
    uri_file = os.path.join(tempfile.mkdtemp(prefix="loom-rdzv-"), "ompi-server.uri")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    from loom.distributed.run import _die_with_parent
    server = subprocess.Popen(_die_with_parent([exe, "--no-daemonize", "-r", uri_file], signal.SIGKILL),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    def stop() -> None:
        if server.poll() is None:
            server.kill()
            server.wait()
    atexit.register(stop)
    uri = ""
    while not uri:
        if server.poll() is not None or time.monotonic() > deadline:
            raise DistributedError("loom.distributed.init_process_group: Open MPI's ompi-server did not start")
        time.sleep(0.02)
        uri = open(uri_file).read().strip() if os.path.exists(uri_file) else ""
    return uri


def torch_style_join(MPI: Any) -> Any:
    """After MPI started: join the singletons in rank order into one communicator (collective over all ranks)."""
    import atexit
    rank, size = _TORCH["rank"], _TORCH["size"]
    store = _TORCH.get("store")
    comm = MPI.COMM_SELF
    links: dict = {}
    if rank == 0:
        port = MPI.Open_port()
        for k in range(1, size):
            if store is not None:
                store.set(f"{_TORCH['prefix']}/port/{k}", port)
            else:
                _send_line(_TORCH["peers"][k], port)
            merged = _merge(comm.Accept(port, root=0), high=False)
            if comm is not MPI.COMM_SELF:
                comm.Free()
            comm = merged
        MPI.Close_port(port)
        if store is None:
            _TORCH["listener"].close()
            links = _TORCH["peers"]
    else:
        if store is not None:
            port = store.get(f"{_TORCH['prefix']}/port/{rank}").decode()
        else:
            port = _recv_line(_TORCH["sock"], "the MPI port")
            links = {0: _TORCH["sock"]}
        comm = _merge(MPI.COMM_SELF.Connect(port, root=0), high=True)
        while comm.Get_size() < size:
            merged = _merge(comm.Accept("", root=0), high=False)
            comm.Free()
            comm = merged
    world = comm.Split(0, key=rank)
    if comm is not MPI.COMM_SELF:
        comm.Free()
    if world.Get_size() != size or world.Get_rank() != rank:
        raise DistributedError(f"loom.distributed.init_process_group: joining the ranks gave rank "
                               f"{world.Get_rank()} of {world.Get_size()}, expected {rank} of {size}")
    atexit.register(_disconnect, world)
    if links:
        _watch(links, rank)
        atexit.register(_say_bye, links)
    return world


def _say_bye(links: dict) -> None:
    """At a normal exit: tell the linked ranks that this one ends on purpose (the watchdog lets it go)."""
    for sock in links.values():
        try:
            _send_line(sock, "bye")
        except OSError:
            pass


def _watch(links: dict, me: int) -> None:
    """Separately started ranks are separate MPI jobs, which MPI_Abort does not reach: each keeps its rendezvous
    connection (rank 0 one to every rank) and a watchdog thread that ends this process when a linked rank's
    connection closes without its goodbye (it raised, exited with an error or was killed), so none waits forever
    in a collective; rank 0 ending takes the others with it."""
    import selectors
    import sys
    import threading

    def run() -> None:
        sel = selectors.DefaultSelector()
        for peer, sock in links.items():
            sel.register(sock, selectors.EVENT_READ, peer)
        open_links = len(links)
        while open_links:
            for key, _ in sel.select():
                try:
                    data = key.fileobj.recv(64)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if b"bye" in data:
                    sel.unregister(key.fileobj)
                    open_links -= 1
                elif not data:
                    print(f"loom.distributed: rank {key.data} ended without finishing (it raised, exited with an "
                          f"error or was killed); ending rank {me} too", file=sys.stderr, flush=True)
                    os._exit(1)

    threading.Thread(target=run, name="loom-rank-watchdog", daemon=True).start()

"""The job's control plane over gRPC: heartbeats, rendezvous of launchers, a key-value store, job status.

One `ControlServer` per launcher listens (on loopback unless told otherwise)
and accepts a call only with the job's token in its metadata; a call without
it is refused with ``UNAUTHENTICATED``. Messages are small JSON payloads over
gRPC's generic handlers, so no generated code is needed. Its methods:

- ``Heartbeat``: a rank says it is alive; the launcher names the ones that stop.
- ``Join``: a launcher (node) registers its process count; once all ``nnodes``
  have joined, each gets the job's configuration (world size, its first global
  rank, and what the master added, e.g. the ``ompi-server`` URI).
- ``Put``/``Get``: a small key-value store for what ranks exchange before
  their data plane exists (MPI port names, NCCL unique ids).
- ``Barrier``: a rank waits until every rank of a group has reached the same
  barrier; one that waits too long learns which have not (`monitored_barrier`).
- ``Status``: a launcher reports a failure or its end and learns whether
  another node failed; the master names a node that stops calling.

`ControlClient` calls them and turns refusals and timeouts into
`DistributedError`.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any, Callable

from loom.distributed._errors import DistributedError

SERVICE = "loom.distributed.Control"
_TOKEN_KEY = "loom-job-token"
# Longest a server thread waits inside one Get/Join before answering "not yet" (the client asks again).
_LONG_POLL_S = 1.0


class ControlPlaneError(DistributedError):
    """The control plane refused a call (wrong token), could not be reached, or a rendezvous failed."""


def new_token() -> str:
    """A random per-job token that every call must present."""
    return secrets.token_hex(16)


class ControlServer:
    """The control plane of one launcher; with ``nnodes > 1`` on node 0, the master of the job.

    `last_seen` maps rank to (monotonic time of its last heartbeat, pid).
    `config` is added to the configuration every node receives from `Join`.
    """

    def __init__(self, token: str, host: str = "127.0.0.1", port: int = 0, nnodes: int = 1,
                 config: dict | None = None) -> None:
        import grpc  # type: ignore[import-untyped]
        from concurrent import futures
        self.token = token
        self.nnodes = nnodes
        self.config = dict(config or {})
        self.last_seen: dict[int, tuple[float, int]] = {}
        self.nodes: dict[int, dict] = {}            # node rank -> what it sent to Join
        self.node_seen: dict[int, float] = {}        # node rank -> monotonic time of its last Status
        self.done: dict[int, int] = {}               # node rank -> its exit code, once ended
        self.failures: list[str] = []                # What nodes reported, first first.
        self._kv: dict[str, str] = {}
        self._arrived: dict[str, set[int]] = {}      # barrier key -> the ranks that have reached it
        self._cond = threading.Condition()
        self._grpc = grpc
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        methods = {"Heartbeat": self._heartbeat, "Join": self._join, "Put": self._put, "Get": self._get,
                   "Status": self._status, "Barrier": self._barrier}
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            name: grpc.unary_unary_rpc_method_handler(self._guard(fn)) for name, fn in methods.items()})
        self._server.add_generic_rpc_handlers((handler,))
        try:
            self.port = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as e:  # grpcio raises when it cannot bind.
            raise ControlPlaneError(f"loom.distributed.control: cannot listen on {host}:{port} ({e}); is the port "
                                    "in use, or the address not this machine's?") from e
        if self.port == 0:
            raise ControlPlaneError(f"loom.distributed.control: cannot listen on {host}:{port} (in use, or not an "
                                    "address of this machine)")
        self.address = f"{host}:{self.port}"
        self._server.start()

    def _guard(self, fn: Callable[[dict], dict]) -> Callable[[bytes, Any], bytes]:
        """Wrap a method: refuse a call without the job's token, decode and encode JSON."""
        def handle(request: bytes, context: Any) -> bytes:
            if dict(context.invocation_metadata()).get(_TOKEN_KEY) != self.token:
                context.abort(self._grpc.StatusCode.UNAUTHENTICATED, "loom.distributed: wrong or missing job token")
            return json.dumps(fn(json.loads(request))).encode()
        return handle

    def _heartbeat(self, msg: dict) -> dict:
        with self._cond:
            self.last_seen[int(msg["rank"])] = (time.monotonic(), int(msg["pid"]))
        return {"ok": True}

    def _join(self, msg: dict) -> dict:
        node, nnodes, nproc = int(msg["node_rank"]), int(msg["nnodes"]), int(msg["nproc"])
        with self._cond:
            if nnodes != self.nnodes:
                return {"error": f"node {node} was started with --nnodes {nnodes}, but the master expects "
                                 f"{self.nnodes}"}
            if not 0 <= node < self.nnodes:
                return {"error": f"node rank {node} is outside [0, {self.nnodes})"}
            seen = self.nodes.get(node)
            if seen is not None and seen["pid"] != msg["pid"]:
                return {"error": f"node rank {node} has already joined (from {seen['host']}, pid {seen['pid']}); "
                                 "every launcher needs its own --node-rank"}
            self.nodes[node] = {"nproc": nproc, "host": str(msg.get("host", "?")), "pid": msg["pid"]}
            self.node_seen[node] = time.monotonic()
            self._cond.notify_all()
            wait = min(float(msg.get("wait", 0.0)), _LONG_POLL_S)
            self._cond.wait_for(lambda: len(self.nodes) == self.nnodes, timeout=wait)
            if len(self.nodes) < self.nnodes:
                return {"waiting": sorted(set(range(self.nnodes)) - set(self.nodes))}
            offsets, total = [], 0
            for r in range(self.nnodes):
                offsets.append(total)
                total += self.nodes[r]["nproc"]
            return {"config": dict(self.config, world_size=total, offsets=offsets,
                                   nprocs=[self.nodes[r]["nproc"] for r in range(self.nnodes)])}

    def _put(self, msg: dict) -> dict:
        with self._cond:
            self._kv[str(msg["key"])] = str(msg["value"])
            self._cond.notify_all()
        return {"ok": True}

    def _get(self, msg: dict) -> dict:
        key, wait = str(msg["key"]), min(float(msg.get("wait", 0.0)), _LONG_POLL_S)
        with self._cond:
            self._cond.wait_for(lambda: key in self._kv, timeout=wait)
            return {"value": self._kv[key]} if key in self._kv else {}

    def _barrier(self, msg: dict) -> dict:
        key, ranks, wait = str(msg["key"]), [int(r) for r in msg["ranks"]], min(float(msg.get("wait", 0.0)),
                                                                                   _LONG_POLL_S)
        with self._cond:
            arrived = self._arrived.setdefault(key, set())
            arrived.add(int(msg["rank"]))
            self._cond.notify_all()
            self._cond.wait_for(lambda: arrived.issuperset(ranks), timeout=wait)
            missing = sorted(set(ranks) - arrived)
            return {"missing": missing} if missing else {"done": True}

    def _status(self, msg: dict) -> dict:
        node = int(msg["node_rank"])
        with self._cond:
            self.node_seen[node] = time.monotonic()
            if msg.get("failure"):
                self.failures.append(f"node {node}: {msg['failure']}")
            if msg.get("done") is not None:
                self.done[node] = int(msg["done"])
            return {"failures": list(self.failures)}

    def silent(self, timeout: float) -> dict[int, tuple[float, int]]:
        """Ranks whose last heartbeat is older than `timeout` seconds: {rank: (seconds silent, pid)}."""
        now = time.monotonic()
        with self._cond:
            return {r: (now - t, pid) for r, (t, pid) in self.last_seen.items() if now - t > timeout}

    def silent_nodes(self, timeout: float) -> dict[int, float]:
        """Joined nodes still running whose last `Status` call is older than `timeout`: {node: seconds}."""
        now = time.monotonic()
        with self._cond:
            return {n: now - t for n, t in self.node_seen.items() if n not in self.done and now - t > timeout}

    def report(self, node: int, failure: str | None = None, done: int | None = None) -> list[str]:
        """What `Status` does, for the launcher that hosts the server (no RPC to itself)."""
        return self._status({"node_rank": node, "failure": failure, "done": done})["failures"]

    def stop(self) -> None:
        """Stop serving (pending calls are cut off)."""
        self._server.stop(grace=None)


class ControlClient:
    """Calls a `ControlServer` with the job's token; errors become `ControlPlaneError`."""

    def __init__(self, address: str, token: str) -> None:
        import grpc
        self.address, self._token, self._grpc = address, token, grpc
        self._channel = grpc.insecure_channel(address)

    def call(self, method: str, msg: dict, timeout: float = 5.0) -> dict:
        """One call; raises `ControlPlaneError` when refused or unreachable within `timeout` seconds."""
        stub = self._channel.unary_unary(f"/{SERVICE}/{method}")
        try:
            reply = stub(json.dumps(msg).encode(), timeout=timeout, metadata=((_TOKEN_KEY, self._token),))
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code == self._grpc.StatusCode.UNAUTHENTICATED:
                raise ControlPlaneError(f"loom.distributed.control: the control plane at {self.address} refused "
                                        "the job token; start every node with the token node 0 printed "
                                        "(--token or LOOM_DIST_TOKEN)") from None
            raise ControlPlaneError(f"loom.distributed.control: {method} to {self.address} failed: "
                                    f"{code.name if code else e}") from None
        return json.loads(reply)

    def _poll(self, method: str, msg: dict, done: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """Call `method` until `done(reply)` or `timeout`; unreachable servers are retried within it."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ControlPlaneError(f"loom.distributed.control: {what} at {self.address} did not complete "
                                        f"within {timeout:g} s ({last})")
            wait = max(0.0, min(_LONG_POLL_S, left - 0.5))  # The server answers before the call's deadline.
            try:
                reply = self.call(method, dict(msg, wait=wait), timeout=min(left, wait + 2.0))
            except ControlPlaneError as e:
                if "refused the job token" in str(e):
                    raise
                if not last.startswith("waiting"):
                    last = str(e).split(": ", 1)[-1]
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            if "error" in reply:
                raise ControlPlaneError(f"loom.distributed.control: {what} refused: {reply['error']}")
            if done(reply):
                return reply
            last = f"waiting for node(s) {reply['waiting']}" if "waiting" in reply else "not there yet"

    def join(self, node_rank: int, nnodes: int, nproc: int, host: str, pid: int, timeout: float) -> dict:
        """Register this node and wait until every node has: the job's configuration."""
        msg = {"node_rank": node_rank, "nnodes": nnodes, "nproc": nproc, "host": host, "pid": pid}
        return self._poll("Join", msg, lambda r: "config" in r, timeout, "the rendezvous")["config"]

    def put(self, key: str, value: str) -> None:
        """Store `value` under `key` for every rank of the job."""
        self.call("Put", {"key": key, "value": value})

    def get(self, key: str, timeout: float) -> str:
        """The value stored under `key`, waiting up to `timeout` seconds for some rank to put it."""
        msg = {"key": key}
        return self._poll("Get", msg, lambda r: "value" in r, timeout, f"waiting for key {key!r}")["value"]

    def barrier(self, key: str, rank: int, ranks: list[int], timeout: float) -> None:
        """Wait until every rank of `ranks` has called `barrier` with `key`; after `timeout` seconds raise a
        `ControlPlaneError` naming the ranks that have not."""
        deadline = time.monotonic() + timeout
        missing: list[int] = list(ranks)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ControlPlaneError(f"loom.distributed.monitored_barrier: rank(s) {missing} did not reach the "
                                        f"barrier within {timeout:g} s (rank {rank} waited for ranks {ranks})")
            wait = max(0.0, min(_LONG_POLL_S, left - 0.1))
            reply = self.call("Barrier", {"key": key, "rank": rank, "ranks": ranks, "wait": wait},
                              timeout=wait + 5.0)
            if reply.get("done"):
                return
            missing = reply.get("missing", missing)

    def status(self, node_rank: int, failure: str | None = None, done: int | None = None) -> list[str]:
        """Report this node's failure or end; returns the failures every node has reported."""
        return self.call("Status", {"node_rank": node_rank, "failure": failure, "done": done}, timeout=2.0)["failures"]

    def close(self) -> None:
        self._channel.close()


def heartbeat_once(address: str, token: str, rank: int, pid: int, timeout: float = 2.0) -> None:
    """Send one heartbeat (raises grpc.RpcError when refused or unreachable)."""
    import grpc
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{SERVICE}/Heartbeat")
        call(json.dumps({"rank": rank, "pid": pid}).encode(), timeout=timeout, metadata=((_TOKEN_KEY, token),))


def start_heartbeats(address: str, token: str, rank: int, pid: int, interval: float,
                     first_within: float = 10.0, orphan_after: float = 0.0) -> threading.Thread:
    """Send a heartbeat every `interval` seconds from a daemon thread, for as long as the process lives.

    The first one is sent before returning (retried for up to `first_within`
    seconds), so the launcher knows the rank before its program starts: a rank
    that hangs early is still one whose heartbeats stop. With `orphan_after`
    > 0, a rank whose launcher has stopped listening (connections refused)
    for that many seconds ends itself: the launcher was killed, and nothing
    else would end a rank waiting in a collective.
    """
    import grpc
    deadline = time.monotonic() + first_within
    while True:
        try:
            heartbeat_once(address, token, rank, pid)
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)

    def loop() -> None:
        channel = grpc.insecure_channel(address)
        call = channel.unary_unary(f"/{SERVICE}/Heartbeat")
        payload = json.dumps({"rank": rank, "pid": pid}).encode()
        answered = time.monotonic()
        while True:
            try:
                call(payload, timeout=max(interval, 1.0), metadata=((_TOKEN_KEY, token),))
                answered = time.monotonic()
            except grpc.RpcError as e:  # The launcher may be busy (the next beat tries again) or gone.
                gone = e.code() == grpc.StatusCode.UNAVAILABLE if hasattr(e, "code") else False
                if not gone:
                    answered = time.monotonic()
                elif orphan_after > 0 and time.monotonic() - answered > orphan_after:
                    import os
                    import sys
                    print(f"loom.distributed: rank {rank} (pid {pid}): its launcher's control plane at {address} "
                          f"has refused connections for {orphan_after:g} s (the launcher is gone); exiting",
                          file=sys.stderr, flush=True)
                    os._exit(1)
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="loom-heartbeat", daemon=True)
    thread.start()
    return thread


def job_client() -> ControlClient | None:
    """A client of the job's master control plane, from the launcher's environment; None outside a launcher."""
    import os
    address = os.environ.get("LOOM_DIST_MASTER_CONTROL") or os.environ.get("LOOM_DIST_CONTROL")
    token = os.environ.get("LOOM_DIST_TOKEN")
    if not address or not token:
        return None
    return ControlClient(address, token)

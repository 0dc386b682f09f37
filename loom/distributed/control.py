"""The launcher's control plane over gRPC: ranks send heartbeats, the launcher notices one that stops.

The server binds to loopback unless told otherwise and accepts a call only
with the job's token in its metadata (a random string the launcher hands to
its ranks through the environment). Messages are small JSON payloads over
gRPC's generic handlers, so no generated code is needed. Only heartbeats are
implemented; the rendezvous of separately launched machines is not.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any

SERVICE = "loom.distributed.Control"
_TOKEN_KEY = "loom-job-token"


def new_token() -> str:
    """A random per-job token that every call must present."""
    return secrets.token_hex(16)


class ControlServer:
    """Receives heartbeats; `last_seen` maps rank to (monotonic time of its last heartbeat, pid)."""

    def __init__(self, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        import grpc
        from concurrent import futures
        self.token = token
        self.last_seen: dict[int, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._grpc = grpc
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Heartbeat": grpc.unary_unary_rpc_method_handler(self._heartbeat),
        })
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        self.address = f"{host}:{self.port}"
        self._server.start()

    def _heartbeat(self, request: bytes, context: Any) -> bytes:
        if dict(context.invocation_metadata()).get(_TOKEN_KEY) != self.token:
            context.abort(self._grpc.StatusCode.UNAUTHENTICATED, "loom.distributed: wrong or missing job token")
        msg = json.loads(request)
        with self._lock:
            self.last_seen[int(msg["rank"])] = (time.monotonic(), int(msg["pid"]))
        return b"ok"

    def silent(self, timeout: float) -> dict[int, tuple[float, int]]:
        """Ranks whose last heartbeat is older than `timeout` seconds: {rank: (seconds silent, pid)}."""
        now = time.monotonic()
        with self._lock:
            return {r: (now - t, pid) for r, (t, pid) in self.last_seen.items() if now - t > timeout}

    def stop(self) -> None:
        """Stop serving (pending calls are cut off)."""
        self._server.stop(grace=None)


def heartbeat_once(address: str, token: str, rank: int, pid: int, timeout: float = 2.0) -> None:
    """Send one heartbeat (raises grpc.RpcError when refused or unreachable)."""
    import grpc
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{SERVICE}/Heartbeat")
        call(json.dumps({"rank": rank, "pid": pid}).encode(), timeout=timeout, metadata=((_TOKEN_KEY, token),))


def start_heartbeats(address: str, token: str, rank: int, pid: int, interval: float,
                     first_within: float = 10.0) -> threading.Thread:
    """Send a heartbeat every `interval` seconds from a daemon thread, for as long as the process lives.

    The first one is sent before returning (retried for up to `first_within`
    seconds), so the launcher knows the rank before its program starts: a rank
    that hangs early is still one whose heartbeats stop.
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
        while True:
            try:
                call(payload, timeout=max(interval, 1.0), metadata=((_TOKEN_KEY, token),))
            except grpc.RpcError:
                pass  # The launcher may be gone or busy; the next beat tries again.
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="loom-heartbeat", daemon=True)
    thread.start()
    return thread

"""The gRPC control plane: heartbeats register a rank, a call without the job's token is refused."""
import shutil
import time

import pytest

grpc = pytest.importorskip("grpc", reason="the control plane needs grpcio: pip install 'loom-dl[distributed]'")

from loom.distributed.control import ControlServer, heartbeat_once, new_token  # noqa: E402


def test_heartbeats_need_the_job_token_and_silence_is_reported():
    server = ControlServer(new_token())
    try:
        assert server.address.startswith("127.0.0.1:")  # Loopback unless told otherwise.
        heartbeat_once(server.address, server.token, rank=3, pid=1234)
        assert set(server.last_seen) == {3} and server.last_seen[3][1] == 1234
        with pytest.raises(grpc.RpcError) as err:
            heartbeat_once(server.address, "not-the-token", rank=4, pid=1)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert 4 not in server.last_seen
        assert server.silent(5.0) == {}
        time.sleep(0.3)
        quiet = server.silent(0.2)
        assert list(quiet) == [3] and quiet[3][0] >= 0.2 and quiet[3][1] == 1234
    finally:
        server.stop()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI (mpirun)")
def test_monitored_barrier_names_the_late_rank_over_the_control_plane():
    from tests.distributed.test_distributed import _ok, launch
    out = _ok(launch("monitored_barrier.py"))
    assert "rank 0: late rank named: loom.distributed.monitored_barrier: rank(s) [1] did not reach" in out, out
    for r in (0, 1):
        assert f"rank {r}: 3 monitored barriers passed ok" in out and f"rank {r}: job goes on" in out, out

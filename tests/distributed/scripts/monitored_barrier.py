"""monitored_barrier over the launcher's gRPC control plane: every rank passes it; a rank that is late is named
by the ranks that waited for it (they raise a DistributedError after the timeout), and the job goes on once
it arrives. Prints one line per check, 'ALL OK' at the end."""
import datetime
import time

import loom.distributed as dist

dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
for _ in range(3):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
print(f"rank {r}: 3 monitored barriers passed ok", flush=True)
if r == n - 1:
    time.sleep(4)   # Late: the others give up on it first.
    dist.monitored_barrier(timeout=30)
else:
    try:
        dist.monitored_barrier(timeout=1.5)
        raise SystemExit(f"rank {r}: the barrier did not wait for rank {n - 1}")
    except dist.DistributedError as e:
        assert f"rank(s) [{n - 1}] did not reach the barrier within 1.5 s" in str(e), str(e)
        print(f"rank {r}: late rank named: {e}", flush=True)
dist.barrier()   # The data plane is untouched by the control plane's barriers.
print(f"rank {r}: job goes on after the late rank arrived ok", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)

"""Rank 1 SIGKILLs (or SIGSTOPs) itself while rank 0 waits in an all_reduce that can never complete.

argv[1]: a directory where each rank writes its pid, and rank 1 the time of its death.
argv[2]: "kill" (default) or "stop" (the process hangs: only missing heartbeats tell).
"""
import os
import signal
import sys
import time
from pathlib import Path

import loom
import loom.distributed as dist

out = Path(sys.argv[1])
dist.init_process_group("gloo")
r = dist.get_rank()
(out / f"pid{r}").write_text(str(os.getpid()))
dist.barrier()
if r == 1:
    (out / "killed_at").write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGSTOP if sys.argv[2:] == ["stop"] else signal.SIGKILL)
t = loom.ones(4)
dist.all_reduce(t)  # Never returns: rank 1 is gone.
print("rank 0 passed an all_reduce whose peer is dead", flush=True)

"""A torch.distributed user's mistakes on 2 ranks; each must end in a clear error, never a hang.

``mismatch``: the ranks pass tensors of different shapes (then dtypes) to one collective: every rank gets an
error naming both, and the job can go on. ``raise``: rank 1 raises before a collective that rank 0 is waiting
in: the job ends with an error, rank 0 does not hang.
"""
import sys

import loom.torch as torch
import loom.torch.distributed as dist

mode = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()

if mode == "mismatch":
    for what, t in (("shape", torch.ones(3 + rank)), ("dtype", torch.ones(3, dtype=torch.float32 if rank == 0
                                                                            else torch.int64))):
        try:
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001  (the user catches it as PyTorch's RuntimeError)
            print(f"rank {rank}: {what} mismatch raised {type(e).__name__}: {e}", flush=True)
            print(f"rank {rank}: is RuntimeError {isinstance(e, RuntimeError)}", flush=True)
        else:
            print(f"rank {rank}: {what} mismatch NOT raised", flush=True)
    # Mistakes only one rank can see (its own arguments): every rank must raise, none may wait.
    for name, call in (
            ("all_gather", lambda: dist.all_gather([torch.zeros(2) for _ in range(2)], torch.ones(2 + rank))),
            ("gather", lambda: dist.gather(torch.ones(2), [torch.zeros(3)] * 2 if rank == 0 else None, dst=0)),
            ("scatter", lambda: dist.scatter(torch.zeros(2), [torch.ones(2)] if rank == 1 else None, src=1)),
            ("all_to_all_single", lambda: dist.all_to_all_single(
                torch.zeros(4), torch.ones(4), input_split_sizes=[1, 3] if rank == 0 else None)),
            ("all_to_all", lambda: dist.all_to_all([torch.zeros(2), torch.zeros(2)],
                                                   [torch.ones(2), torch.ones(1 + 2 * rank)]))):
        try:
            call()
        except Exception as e:  # noqa: BLE001
            print(f"rank {rank}: {name} mistake raised {type(e).__name__}: {e}", flush=True)
        else:
            print(f"rank {rank}: {name} mistake NOT raised", flush=True)
    # The group still works after the errors.
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t)
    print(f"rank {rank}: after the errors all_reduce gives {t.tolist()}", flush=True)
    outs = [torch.zeros(2) for _ in range(2)]
    dist.all_gather(outs, torch.ones(2) * rank)
    print(f"rank {rank}: after the errors all_gather gives {[o.tolist() for o in outs]}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: ALL OK", flush=True)
elif mode == "raise":
    if rank == 1:
        raise ValueError("user error on rank 1")
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce returned although rank 1 failed", flush=True)
elif mode == "exit":
    if rank == 1:
        sys.exit(3)
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce returned although rank 1 exited", flush=True)

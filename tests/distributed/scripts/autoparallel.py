"""Auto-parallel on N ranks: the pass picks data parallelism for a big batch and a small weight, model
parallelism for a tiny batch and big weights, and each plan, run on the ranks, equals the single-process run of
the same traced training step. The choices are asserted under fixed rates (an idle machine's: on this loaded,
oversubscribed one the measured MPI latency swings by 100x); the plans made with the rates measured here
(`calibrate`) are run and checked too."""
import numpy as np

import loom.distributed as dist
from loom.distributed import autoparallel as ap
from loom.distributed import sbp as S
from tests.distributed.mlp_steps import mlp_step

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
mesh = S.placement()
cost = ap.calibrate()


def check(step, args, weights, name):
    values = ap.inputs_of(step, *args)
    for rates in (cost, ap.DEFAULT_COST):
        p = ap.plan(step, mesh, cost=rates)
        want = p.graph.run(*values)
        got = ap.execute(p, *values)
        for k, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name}: output {k}")
        if r == 0:
            print(ap.explain(p), flush=True)
    # The latency is a fit's intercept, clamped at 0: on a loaded machine it may be 0.
    assert cost.link.latency >= 0 and cost.link.bandwidth > 0 and cost.matmul_flops > 0, cost
    by_shape = {v.shape: p.signature(v) for v in p.graph.inputs}
    return p, by_shape, [w.shape for w in weights]


# Big batch, small weights: data parallel (batch split, weights broadcast, gradients all-reduced).
p, sig, (w1, w2) = check(*mlp_step(4096, 16, 32, 8), "data parallel")
assert sig[(4096, 16)] == S.split(0) and sig[w1] == S.broadcast and sig[w2] == S.broadcast, sig
reduced = [b for b in p.boxings() if b[4] == "all_reduce" and b[1] is None and b[0] in p.state]
assert len(reduced) == 2, p.boxings()  # Both weights' gradients (their updates) are all-reduced.
print(f"rank {r}: data parallel chosen ok", flush=True)

# Tiny batch, big weights: the weights are split (model parallel) and no weight-sized tensor moves.
p, sig, (w1, w2) = check(*mlp_step(2, 128, 512, 128), "model parallel")
assert sig[w1].is_split and sig[w2].is_split, sig
assert all(b[2] != S.partial_sum or np.prod(b[0].shape) < 128 * 512 for b in p.boxings()), p.boxings()
print(f"rank {r}: model parallel chosen ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)

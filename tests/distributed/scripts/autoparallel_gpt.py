"""Auto-parallel on a traced GPT training step (embeddings, layer norm, causal attention, GELU MLP, cross-entropy,
SGD): every node gets a signature from the rule table, and the plan run on the ranks equals one process."""
import numpy as np

import loom.distributed as dist
from loom.distributed import autoparallel as ap
from loom.distributed import sbp as S
from tests.distributed.mlp_steps import gpt_step

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
mesh = S.placement()
step, (idx, tgt) = gpt_step()
values = ap.inputs_of(step, idx, tgt)
p = ap.plan(step, mesh)
split_nodes = sum(1 for v in p.graph.topological_order() if p.signature(v) != S.broadcast)
assert split_nodes > len(p.graph) // 2, (split_nodes, len(p.graph))  # Most of the step runs sharded.
want = p.graph.run(*values)
got = ap.execute(p, *values)
for k, (a, b) in enumerate(zip(got, want)):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"output {k}")
if r == 0:
    print("\n".join(ap.explain(p).splitlines()[-4:]), flush=True)
print(f"rank {r}: gpt plan ({split_nodes} of {len(p.graph)} nodes sharded) equals one process ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)

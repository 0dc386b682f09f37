"""Boxing over several ranks inside `loom.function`: a traced SGD step whose global tensors change signature
(split -> split by all_to_all, split -> broadcast by all_gather, partial_sum -> broadcast by all_reduce,
partial_sum -> split by reduce_scatter, uneven splits included; on 4 ranks also along the axes of a 2 x 2
mesh) compiles to one graph per rank holding those collectives, and its losses and parameters equal the same
step run eagerly and the dense single-process computation (1e-6, float64). Prints one line per check,
'ALL OK' at the end."""
import numpy as np

import loom
import loom.distributed as dist
from loom.distributed import sbp as S

dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
TOL = dict(rtol=1e-6, atol=1e-6)
B = S.broadcast
LR, CALLS = 0.05, 4


def value(*shape):
    return loom.tensor(rng.standard_normal(shape), dtype=loom.float64)


X, W1, W2 = value(2 * n + 1, 5), value(5, 2 * n), value(2 * n, n + 1)   # Rows and output columns split unevenly.
mesh = S.placement()


def model():
    """The parameters as global tensors (W1 replicated, W2 split by rows) and an SGD over this rank's parts."""
    w1 = S.from_full(W1.detach().clone().requires_grad_(True), mesh, B)
    w2 = S.from_full(W2.detach().clone().requires_grad_(True), mesh, S.split(0))
    return w1, w2, loom.optim.SGD([w1.local, w2.local], lr=LR)


def body(params, scale):
    w1, w2, opt = params
    opt.zero_grad()
    xs = S.from_full(X, mesh, S.split(0))
    h = ((xs * scale) @ w1).tanh()                 # split(0) @ broadcast: split(0); w1's gradient is all-reduced
    cols = h.to_global(sbp=S.split(1))             # all_to_all
    p = cols @ w2                                  # split(1) @ split(0): partial_sum
    q = p.to_global(sbp=S.split(1))                # reduce_scatter
    whole = p.to_global(sbp=B)                     # all_reduce
    rows = h.to_global(sbp=B)                      # all_gather
    loss = (q ** 2).mean() + (whole * whole).sum() * 0.01 + rows.tanh().sum() * 0.1
    loss.backward()
    opt.step()
    return loss.full().detach()                    # A partial sum made whole: one more all_reduce


def dense(w1, w2, scale):
    h = ((X * scale) @ w1).tanh()
    p = h @ w2
    return (p ** 2).mean() + (p * p).sum() * 0.01 + h.tanh().sum() * 0.1


traced_params, eager_params = model(), model()
step = loom.function(lambda scale: body(traced_params, scale))
ref_w1, ref_w2 = W1.detach().clone().requires_grad_(True), W2.detach().clone().requires_grad_(True)
ref_opt = loom.optim.SGD([ref_w1, ref_w2], lr=LR)
for k in range(CALLS):   # The first call runs eagerly, the second traces, the rest replay the graph.
    scale = loom.tensor(1.0 + 0.1 * k, dtype=loom.float64)
    got = step(scale)
    want = body(eager_params, scale)
    ref_opt.zero_grad()
    ref = dense(ref_w1, ref_w2, scale)
    ref.backward()
    ref_opt.step()
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL, err_msg=f"rank {r}: traced vs eager, call {k}")
    np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), **TOL, err_msg=f"rank {r}: vs dense, call {k}")
for name, (a, b, full) in {"W1": (traced_params[0], eager_params[0], ref_w1),
                           "W2": (traced_params[1], eager_params[1], ref_w2)}.items():
    np.testing.assert_allclose(a.local.detach().numpy(), b.local.detach().numpy(), **TOL, err_msg=name)
    np.testing.assert_allclose(a.full().detach().numpy(), full.detach().numpy(), **TOL, err_msg=name)
print(f"rank {r}: traced boxing equals eager and dense ok", flush=True)

assert step.trace_count == 1 and len(step._cache) == 1, (step.trace_count, len(step._cache))
graph = next(iter(step._cache.values())).graph
ops = {v.op for v in graph}
for op in ("all_gather", "all_reduce", "reduce_scatter", "all_to_all"):
    assert op in ops, (op, sorted(ops))
print(f"rank {r}: traced step holds all_gather all_reduce reduce_scatter all_to_all ok", flush=True)

# On 4 ranks, a 2 x 2 mesh: boxing along one mesh axis, then both, over the axes' sub-groups, inside the trace.
if n == 4:
    grid = S.placement(shape=(2, 2))
    X2, W3 = value(5, 6), value(6, 4)

    def grid_model():
        w = S.from_full(W3.detach().clone().requires_grad_(True), grid, (B, S.split(1)))
        return w, loom.optim.SGD([w.local], lr=LR)

    def grid_body(params, scale):
        w, opt = params
        opt.zero_grad()
        x = S.from_full(X2, grid, (S.split(0), S.split(1)))      # Rows over axis 0 (unevenly), features over 1.
        y = (x * scale).to_global(sbp=(S.split(0), B)) @ w        # all_gather along axis 1: y is (split(0), split(1))
        loss = (y.to_global(sbp=(B, B)) ** 2).mean()              # all_gather along both axes
        loss.backward()                                           # w's gradient: all_reduce along axis 0
        opt.step()
        return loss.full().detach()

    traced_grid, eager_grid = grid_model(), grid_model()
    grid_step = loom.function(lambda scale: grid_body(traced_grid, scale))
    ref_w = W3.detach().clone().requires_grad_(True)
    ref_opt = loom.optim.SGD([ref_w], lr=LR)
    for k in range(CALLS):
        scale = loom.tensor(1.0 + 0.1 * k, dtype=loom.float64)
        got, want = grid_step(scale), grid_body(eager_grid, scale)
        ref_opt.zero_grad()
        ref = (((X2 * scale) @ ref_w) ** 2).mean()
        ref.backward()
        ref_opt.step()
        np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL, err_msg=f"rank {r}: 2x2 traced vs eager {k}")
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), **TOL, err_msg=f"rank {r}: 2x2 vs dense {k}")
    np.testing.assert_allclose(traced_grid[0].full().detach().numpy(), ref_w.detach().numpy(), **TOL)
    assert grid_step.trace_count == 1
    print(f"rank {r}: 2x2 mesh traced boxing ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)

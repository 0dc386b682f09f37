"""The collective primitives (loom.ir.collective) on N ranks: values, gradients against distributed finite
differences, loom.function traces (one graph, the collective one of its nodes) equal to eager, and send/recv
carrying a two-stage model's activations forward and gradients back."""
import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.nn.functional as dfn
from loom.distributed import comm

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
ranks = tuple(range(n))
EPS = 1e-6


def check(name, got, want, tol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol,
                               err_msg=f"rank {r}: {name}")
    print(f"rank {r}: {name} ok", flush=True)


def weights(shape, seed):
    """A cotangent of `shape` that differs between ranks (so cross-rank terms show in the gradient)."""
    return np.random.default_rng(1000 * seed + r).standard_normal(shape)


def fd_grad(f, x0: np.ndarray, w: np.ndarray) -> np.ndarray:
    """d/dx_r of the global loss sum_k <w_k, f(x)_k>, by central differences: each rank's each element in turn."""
    grad = np.zeros(x0.size)
    for q in range(n):
        size = int(comm.broadcast(np.array(x0.size), q, ranks))
        for j in range(size):
            vals = []
            for sign in (1.0, -1.0):
                x = x0.copy().reshape(-1)
                if r == q:
                    x[j] += sign * EPS
                y = f(loom.tensor(x.reshape(x0.shape), dtype=loom.float64)).numpy()
                vals.append(comm.all_reduce(np.array(float((w * y).sum())), "sum", ranks))
            if r == q:
                grad[j] = (vals[0] - vals[1]) / (2 * EPS)
    return grad.reshape(x0.shape)


def autograd_grad(f, x0, w):
    x = loom.tensor(x0, dtype=loom.float64, requires_grad=True)
    (f(x) * loom.tensor(w)).sum().backward()
    return x.grad.numpy()


def traced(f, x0, w):
    """The same loss and gradient through loom.function; returns (value, grad, collective ops in the graph)."""
    wt = loom.tensor(w)

    def step(x):
        y = f(x)
        loss = (y * wt).sum()
        (g,) = loom.autograd.grad([loss], [x])
        return y, g
    fn = loom.function(step)
    for _ in range(2):   # The first call runs eagerly; the second traces, compiles and runs the graph.
        x = loom.tensor(x0, dtype=loom.float64, requires_grad=True)
        y, g = fn(x)
    graph = next(iter(fn._cache.values())).graph
    kinds = sorted(node.op for node in graph if loom.ir.PRIMITIVES.get(node.op) is not None
                   and loom.ir.PRIMITIVES[node.op].kind == "collective")
    return y.numpy(), g.numpy(), kinds


def x_for(shape, seed):
    return np.random.default_rng(seed + 17 * r).standard_normal(shape)


CASES = {
    # name: (f, input shape, expected forward value from every rank's input, ops in the traced graph)
    "all_reduce sum": (lambda x: dfn.all_reduce(x * 2), (2, 3),
                       lambda xs: 2 * sum(xs), ["all_reduce", "all_reduce"]),
    "all_reduce avg": (lambda x: dfn.all_reduce(x.sin(), op=dist.ReduceOp.AVG), (3,),
                       lambda xs: sum(np.sin(v) for v in xs) / n, ["all_reduce", "all_reduce"]),
    "all_gather": (lambda x: loom.stack(dfn.all_gather(x * x)), (2, 2),
                   lambda xs: np.stack([v * v for v in xs]), ["all_gather", "reduce_scatter"]),
    "reduce_scatter": (lambda x: dfn.reduce_scatter(loom.zeros(2), [x[k] for k in range(n)]), (n, 2),
                       lambda xs: sum(v[r] for v in xs), ["all_gather", "reduce_scatter"]),
    "broadcast": (lambda x: dfn.broadcast(x.exp(), src=n - 1), (3,),
                  lambda xs: np.exp(xs[n - 1]), ["broadcast", "reduce"]),
    "reduce": (lambda x: dfn.reduce(x * 3, dst=0), (2,),
               lambda xs: 3 * sum(xs) if r == 0 else np.zeros(2), ["broadcast", "reduce"]),
    "all_to_all": (lambda x: loom.stack(dfn.all_to_all([loom.zeros(2)] * n, [x[k] * (k + 1) for k in range(n)])),
                   (n, 2), lambda xs: np.stack([xs[k][r] * (r + 1) for k in range(n)]), ["all_to_all", "all_to_all"]),
}

for seed, (name, (f, shape, want, ops)) in enumerate(CASES.items()):
    x0, w = x_for(shape, seed), weights(shape if name != "all_gather" else (n,) + shape, seed)
    if name == "reduce_scatter":
        w = weights(shape[1:], seed)
    xs = [comm.broadcast(x0, q, ranks) for q in range(n)]   # Every rank's input, to compute the expected value.
    check(f"{name} value", f(loom.tensor(x0, dtype=loom.float64)).numpy(), want(xs))
    g = autograd_grad(f, x0, w)
    check(f"{name} grad vs finite differences", g, fd_grad(f, x0, w), tol=1e-5)
    y_t, g_t, kinds = traced(f, x0, w)
    check(f"{name} loom.function value", y_t, want(xs))
    check(f"{name} loom.function grad", g_t, g, tol=1e-12)
    assert kinds == sorted(ops), (name, kinds)
    print(f"rank {r}: {name} traced as one graph with {kinds} ok", flush=True)

# Closed form: all_reduce twice (second order through the collective): d/dx_r sum_k <w_k, (sum_j x_j)^2>.
x0 = x_for((3,), 99)
w = weights((3,), 99)
x = loom.tensor(x0, requires_grad=True, dtype=loom.float64)
(dfn.all_reduce(x) ** 2 * loom.tensor(w)).sum().backward()
s = comm.all_reduce(x0, "sum", ranks)
check("all_reduce closed form", x.grad.numpy(), 2 * s * comm.all_reduce(w, "sum", ranks))

# send/recv: a two-stage model, rank 0 -> rank 1, the gradient of the activation coming back.
if n >= 2:
    rng = np.random.default_rng(5)
    W0, W1, xin = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal((5, 4))
    a, b = loom.tensor(W0, requires_grad=True), loom.tensor(W1, requires_grad=True)
    ref = (loom.tensor(xin) @ a).tanh() @ b
    ref_loss = (ref * ref).sum()
    ref_loss.backward()
    if r == 0:
        w0 = loom.tensor(W0, requires_grad=True)
        h = (loom.tensor(xin) @ w0).tanh()
        token = dfn.send(h, dst=1, tag=3)
        check("send token", token.detach().numpy(), 0.0)
        token.backward()          # Receives dL/dh from rank 1 and continues into this stage.
        check("send/recv stage 0 grad", w0.grad.numpy(), a.grad.numpy(), tol=1e-10)
    elif r == 1:
        w1 = loom.tensor(W1, requires_grad=True)
        h = dfn.recv((5, 3), loom.float64, src=0, tag=3)
        loss = ((h @ w1) ** 2).sum()
        check("send/recv loss", loss.detach().numpy(), ref_loss.detach().numpy(), tol=1e-10)
        loss.backward()           # Sends dL/dh back to rank 0.
        check("send/recv stage 1 grad", w1.grad.numpy(), b.grad.numpy(), tol=1e-10)
    # A group that is not the whole world, named by its ranks.
    sub = dist.new_group([0, 1])
    if r in (0, 1):
        x = loom.tensor(np.full(2, r + 1.0), requires_grad=True)
        y = dfn.all_reduce(x, group=sub)
        check("subgroup all_reduce", y.detach().numpy(), np.full(2, 3.0))
        y.sum().backward()
        check("subgroup all_reduce grad", x.grad.numpy(), np.full(2, 2.0))

dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)

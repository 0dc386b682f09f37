"""The ops of an MLP and a GPT on global tensors, each under signatures from the rule table, against one
process (values and gradients), and moving global tensors between placements (send/recv)."""
import numpy as np

import loom
import loom.distributed as dist
import loom.nn.functional as F
from loom.distributed import sbp as S

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
mesh = S.placement()
rng = np.random.default_rng(0)
close = dict(rtol=1e-5, atol=1e-5)
B, P = S.broadcast, S.partial_sum


def full(*shape):
    return loom.tensor(rng.standard_normal(shape).astype(np.float32))


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def grad_of(g: S.GlobalTensor):
    return S.GlobalTensor(g.local.grad, mesh, g._grad_layout(), g.shape).numpy()


# Linear: data parallel, column parallel, row parallel (the bias goes in once, as a partial sum).
x, w, b = full(8, 6), full(4 * n, 6), full(4 * n)
want = F.linear(x, w, b)
xr, wr, br = leaf(x), leaf(w), leaf(b)
(F.linear(xr, wr, br) ** 2).sum().backward()
for sx, sw, sb, out in ((S.split(0), B, B, S.split(0)), (B, S.split(0), S.split(0), S.split(1)),
                        (S.split(1), S.split(1), B, P)):
    gx, gw, gb = (S.from_full(leaf(t), mesh, s) for t, s in ((x, sx), (w, sw), (b, sb)))
    y = S.linear(gx, gw, gb)
    assert y.sbp == out, (sx, sw, sb, y.sbp)
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), **close)
    (y ** 2).sum().backward()
    np.testing.assert_allclose(grad_of(gw), wr.grad.numpy(), **close, err_msg=f"{sx} {sw} {sb}")
    np.testing.assert_allclose(grad_of(gb), br.grad.numpy(), **close, err_msg=f"{sx} {sw} {sb}")
    np.testing.assert_allclose(grad_of(gx), xr.grad.numpy(), **close, err_msg=f"{sx} {sw} {sb}")
print(f"rank {r}: linear ok", flush=True)

# Embedding: batch split, feature split, vocabulary split (Megatron: partial sums).
V, C, T = 5 * n, 4, 6
idx = loom.tensor(rng.integers(0, V, (T,)).astype(np.int64))
table = full(V, C)
tr = leaf(table)
want = F.embedding(idx, tr)
(want * want).sum().backward()
for si, st, out in ((S.split(0), B, S.split(0)), (B, S.split(1), S.split(1)), (B, S.split(0), P)):
    gt = S.from_full(leaf(table), mesh, st)
    h = S.embedding(S.from_full(idx, mesh, si), gt)
    assert h.sbp == out, (si, st, h.sbp)
    np.testing.assert_allclose(h.numpy(), want.detach().numpy(), **close)
    (h * h).sum().backward()
    np.testing.assert_allclose(grad_of(gt), tr.grad.numpy(), **close, err_msg=f"{si} {st}")
print(f"rank {r}: embedding ok", flush=True)

# Layer norm, softmax, reshape, transpose with the rows split; softmax over a split dim is boxed first.
x = full(4 * n, 6)
ln_w, ln_b = full(6), full(6)
xr, wr, br = leaf(x), leaf(ln_w), leaf(ln_b)
ref = F.softmax(F.layer_norm(xr, (6,), wr, br).reshape(2 * n, 2, 6).transpose(0, 1), dim=-1)
(ref * ref).sum().backward()
gx, gw, gb = S.from_full(leaf(x), mesh, S.split(0)), S.from_full(leaf(ln_w), mesh, B), S.from_full(leaf(ln_b), mesh, B)
h = S.layer_norm(gx, 6, gw, gb)
assert h.sbp == S.split(0), h.sbp
h = h.reshape(2 * n, 2, 6)
assert h.sbp == S.split(0), h.sbp
h = h.transpose(0, 1)
assert h.sbp == S.split(1), h.sbp
h = h.softmax(dim=-1)
assert h.sbp == S.split(1), h.sbp
np.testing.assert_allclose(h.numpy(), ref.detach().numpy(), **close)
(h * h).sum().backward()
for g_, want_ in ((gx, xr), (gw, wr), (gb, br)):
    np.testing.assert_allclose(grad_of(g_), want_.grad.numpy(), **close)
col = S.from_full(x, mesh, S.split(1)).softmax(dim=1)  # Split along the softmax dim: boxed to a legal split.
assert col.sbp == S.split(0), col.sbp
np.testing.assert_allclose(col.numpy(), F.softmax(x, dim=1).numpy(), **close)
print(f"rank {r}: layer_norm softmax reshape transpose ok", flush=True)

# Cross-entropy of row-split logits: a partial sum of the mean; the logits' gradient is the whole one's slice.
logits, target = full(4 * n, 7), loom.tensor(rng.integers(0, 7, (4 * n,)).astype(np.int64))
lr_ = leaf(logits)
ref = F.cross_entropy(lr_, target)
ref.backward()
gl = S.from_full(leaf(logits), mesh, S.split(0))
loss = S.cross_entropy(gl, S.from_full(target, mesh, S.split(0)))
assert loss.sbp == P, loss.sbp
np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), **close)
loss.backward()
np.testing.assert_allclose(grad_of(gl), lr_.grad.numpy(), **close)
print(f"rank {r}: cross_entropy ok", flush=True)

# The table chooses, the user does not: mismatched inputs are boxed into the cheapest legal signature.
a, bb = full(16 * n, 6), full(6, 2 * n)
y = S.from_full(a, mesh, S.split(0)) @ S.from_full(bb, mesh, S.split(0))  # k split on b only: small b is gathered.
assert y.sbp == S.split(0), y.sbp
np.testing.assert_allclose(y.numpy(), (a @ bb).numpy(), **close)
y = S.from_full(bb.T, mesh, S.split(1)) @ S.from_full(a.T, mesh, S.split(0))  # k split on both: legal, partial sums.
assert y.sbp == S.partial_sum, y.sbp
np.testing.assert_allclose(y.numpy(), (bb.T @ a.T).numpy(), **close)
print(f"rank {r}: boxing into legal signatures ok", flush=True)

# Crossing placements: from some ranks to others (send/recv), values intact, non-members hold nothing.
first, last = S.placement(ranks=[0]), S.placement(ranks=[n - 1])
v = full(3 * n, 4)
t0 = S.from_full(v, first, B)
t1 = t0.to_global(placement=last, sbp=S.split(0))
assert t1.placement == last and t1.sbp == S.split(0) and t1.shape == (3 * n, 4)
if r == n - 1:
    np.testing.assert_allclose(t1.numpy(), v.numpy())
else:
    assert t1.local is None
t2 = S.from_full(v, mesh, S.split(0)).to_global(placement=last, sbp=B)
if r == n - 1:
    np.testing.assert_allclose(t2.local.numpy(), v.numpy())
t3 = t1.to_global(placement=mesh, sbp=S.split(1))
assert t3.sbp == S.split(1)
np.testing.assert_allclose(t3.numpy(), v.numpy())
np.testing.assert_allclose(t3.local.numpy(), v.numpy()[:, [c for c in range(4) if
                                                           S._bounds(4, n)[r][0] <= c < S._bounds(4, n)[r][1]]])
ps = t0.to_global(placement=mesh, sbp=P)  # Receivers off the first rank of a partial sum get zeros, no message.
np.testing.assert_allclose(ps.numpy(), v.numpy())
assert (r == 0) == bool(np.abs(ps.local.numpy()).sum() > 0)
print(f"rank {r}: crossing placements ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)

"""loom.ops: custom ops from inline C and from a shared library, in every execution mode, with gradient checks."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import loom
from loom.autograd import gradcheck, gradgradcheck
from loom.errors import LoomError, LoomTypeError, LoomValueError, ShapeError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="custom ops need a C compiler")

# softplus(x) = log(1 + exp(x)) computed stably, float32 and float64; its derivative is sigmoid(x).
SOFTPLUS_C = """
#define BODY(T) { const T *x = in[0].data; T *y = out->data; int64_t n = loom_numel(out);          \\
    _Pragma("omp parallel for num_threads(nthreads) if (n > 65536)")                               \\
    for (int64_t i = 0; i < n; i++) { T v = x[i]; y[i] = v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)); } }
int test_softplus(const loom_tensor *in, int64_t n_in, loom_tensor *out, const double *attrs, int64_t n_attrs,
                  int64_t nthreads) {
    if (in[0].dtype == LOOM_FLOAT32) BODY(float)
    else if (in[0].dtype == LOOM_FLOAT64) BODY(double)
    else return 3;
    return 0;
}
"""

# Row-wise weighted sum: (N, D) x (D,) -> (N,), scaled by the attribute `scale`.
ROWDOT_C = """
int test_rowdot(const loom_tensor *in, int64_t n_in, loom_tensor *out, const double *attrs, int64_t n_attrs,
                int64_t nthreads) {
    if (in[0].dtype != LOOM_FLOAT64 || in[1].dtype != LOOM_FLOAT64) return 7;
    const double *x = in[0].data, *w = in[1].data; double *y = out->data;
    int64_t n = in[0].shape[0], d = in[0].shape[1];
    for (int64_t i = 0; i < n; i++) { double s = 0; for (int64_t j = 0; j < d; j++) s += x[i * d + j] * w[j];
                                      y[i] = s * attrs[0]; }
    return 0;
}
"""


def _softplus_backward(g, inputs, output):
    return (g * loom.sigmoid(inputs[0]),)


@pytest.fixture(scope="module")
def softplus():
    return loom.ops.custom_op("test_softplus", cpu_source=SOFTPLUS_C, backward=_softplus_backward)


def _rowdot_shape(xs, ws, scale):
    if len(xs) != 2 or ws != (xs[1],):
        raise ShapeError(f"test_rowdot: expected (N, D) and (D,), got {xs} and {ws}")
    return (xs[0],)


@pytest.fixture(scope="module")
def rowdot():
    def backward(g, inputs, output, scale):
        x, w = inputs
        return (g[:, None] * w[None, :] * scale, (g[:, None] * x).sum(0) * scale)
    return loom.ops.custom_op("test_rowdot", _rowdot_shape, cpu_source=ROWDOT_C, attrs=("scale",),
                              backward=backward)


def test_forward_matches_numpy_in_float32_and_float64(softplus):
    v = np.array([-30.0, -1.0, 0.0, 0.5, 40.0])
    for d in (loom.float32, loom.float64):
        y = softplus(loom.tensor(v, dtype=d))
        assert y.dtype == d
        np.testing.assert_allclose(y.numpy(), np.logaddexp(0, v), rtol=1e-6)


def test_gradients_by_finite_differences(softplus, rowdot):
    x = loom.tensor([-2.0, -0.3, 0.0, 1.7], dtype=loom.float64, requires_grad=True)
    assert gradcheck(softplus, (x,))
    assert gradgradcheck(softplus, (x,))   # backward is loom ops, so it is differentiable again
    rng = np.random.default_rng(0)
    a = loom.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = loom.tensor(rng.standard_normal(4), requires_grad=True)
    assert gradcheck(lambda a, w: rowdot(a, w, scale=0.5), (a, w))


def test_attrs_and_shape_function(rowdot):
    x = loom.tensor(np.arange(6.0).reshape(2, 3), dtype=loom.float64)
    w = loom.tensor([1.0, 0.5, 2.0], dtype=loom.float64)
    np.testing.assert_allclose(rowdot(x, w, scale=2.0).numpy(), 2 * (np.arange(6.0).reshape(2, 3) @ [1, 0.5, 2]))
    with pytest.raises(ShapeError, match=r"expected \(N, D\) and \(D,\)"):
        rowdot(x, loom.ones(4, dtype=loom.float64), scale=1.0)
    with pytest.raises(LoomTypeError, match=r"takes attrs \['scale'\]; missing \['scale'\]"):
        rowdot(x, w)
    with pytest.raises(LoomError, match="test_rowdot: the C function returned error code 7"):
        rowdot(x.float(), w.float(), scale=1.0).numpy()


@pytest.mark.parametrize("mode", ["eager-reference", "eager-compiled", "function-c", "function-reference"])
def test_every_mode_trains_the_same(softplus, mode):
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((4, 3)).astype(np.float32) * 0.5
    xs = [loom.tensor(rng.standard_normal((6, 4)).astype(np.float32)) for _ in range(4)]

    def train(kind):
        w = loom.tensor(w0, requires_grad=True)
        opt = loom.optim.SGD([w], lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = softplus(x @ w).mean()
            loss.backward()
            opt.step()
            return loss
        fn = step
        previous = loom.get_backend()
        if kind.startswith("function"):
            fn = loom.function(step, backend=kind.split("-")[1])
        else:
            loom.set_backend(kind.split("-")[1])
        try:
            losses = [float(fn(x)) for x in xs]
        finally:
            loom.set_backend(previous)
        return losses, w.detach().numpy()

    ref = train("eager-reference")
    got = train(mode)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)
    # The reference: softplus written in loom ops, differentiated by loom.
    w = loom.tensor(w0, requires_grad=True)
    loss = loom.nn.functional.softplus(xs[0] @ w).mean()
    np.testing.assert_allclose(ref[0][0], float(loss), rtol=1e-6)


def test_op_appears_in_traced_graph(softplus):
    fn = loom.function(lambda x: softplus(x) * 2, backend="c", warmup=0)
    fn(loom.ones(3))
    assert "test_softplus" in fn.explain()


def test_not_differentiable_without_backward():
    op = loom.ops.custom_op("test_copy_nograd", cpu_source="""
int test_copy_nograd(const loom_tensor *in, int64_t n, loom_tensor *out, const double *a, int64_t na, int64_t t) {
    memcpy(out->data, in[0].data, loom_numel(out) * 4); return 0; }""")
    x = loom.ones(3, requires_grad=True)
    y = op(x)
    assert not y.requires_grad
    np.testing.assert_array_equal(y.numpy(), [1, 1, 1])


def test_definition_errors():
    with pytest.raises(LoomValueError, match="must be a C identifier"):
        loom.ops.custom_op("bad-name", cpu_source="")
    with pytest.raises(LoomValueError, match="built-in primitive"):
        loom.ops.custom_op("matmul", cpu_source="")
    with pytest.raises(LoomError, match="compiling custom op test_broken failed"):
        loom.ops.custom_op("test_broken", cpu_source="int test_broken( { return 0; }")
    with pytest.raises(LoomError, match="defines no function 'test_missing'"):
        loom.ops.custom_op("test_missing", cpu_source="int something_else(void) { return 0; }")


LIBRARY_C = """
#include <stdint.h>
#include <string.h>
typedef struct { void *data; int64_t ndim; const int64_t *shape; int64_t dtype; } loom_tensor;
const char *loom_ops_manifest(void) {
    return "[{\\"name\\": \\"libtest_scale\\", \\"entry\\": \\"scale\\", \\"attrs\\": [\\"k\\"]},"
           " {\\"name\\": \\"libtest_rowsum\\", \\"entry\\": \\"rowsum\\", \\"shape\\": \\"rowsum_shape\\"}]";
}
int scale(const loom_tensor *in, int64_t n, loom_tensor *out, const double *a, int64_t na, int64_t t) {
    const float *x = in[0].data; float *y = out->data; int64_t m = 1;
    for (int64_t i = 0; i < out->ndim; i++) m *= out->shape[i];
    for (int64_t i = 0; i < m; i++) y[i] = x[i] * (float)a[0];
    return 0;
}
int64_t rowsum_shape(int64_t n, const int64_t *ndims, const int64_t *const *shapes, const double *a, int64_t *out) {
    if (n != 1 || ndims[0] != 2) return -1;
    out[0] = shapes[0][0];
    return 1;
}
int rowsum(const loom_tensor *in, int64_t n, loom_tensor *out, const double *a, int64_t na, int64_t t) {
    const float *x = in[0].data; float *y = out->data;
    for (int64_t i = 0; i < in[0].shape[0]; i++) { float s = 0;
        for (int64_t j = 0; j < in[0].shape[1]; j++) s += x[i * in[0].shape[1] + j]; y[i] = s; }
    return 0;
}
"""


def test_load_library(tmp_path):
    src = tmp_path / "myops.c"
    src.write_text(LIBRARY_C)
    so = tmp_path / "libmyops.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    ops = loom.ops.load_library(so, backward={"libtest_scale": lambda g, inputs, out, k: (g * k,)})
    assert sorted(ops) == ["libtest_rowsum", "libtest_scale"]
    x = loom.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = ops["libtest_scale"](x, k=3.0)
    np.testing.assert_array_equal(y.detach().numpy(), 3 * np.arange(6).reshape(2, 3))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 3.0))
    np.testing.assert_array_equal(ops["libtest_rowsum"](x.detach()).numpy(), [3.0, 12.0])
    with pytest.raises(ShapeError, match="libtest_rowsum: the shape function rejected"):
        ops["libtest_rowsum"](loom.ones(3))
    assert loom.ops.get("libtest_rowsum") is ops["libtest_rowsum"]
    bad = tmp_path / "nomanifest.c"
    bad.write_text("int f(void) { return 0; }")
    subprocess.run(["gcc", "-shared", "-fPIC", str(bad), "-o", str(tmp_path / "bad.so")], check=True)
    with pytest.raises(LoomError, match="exports no loom_ops_manifest"):
        loom.ops.load_library(tmp_path / "bad.so")


def test_custom_op_example_runs():
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "examples" / "custom_op.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "gradcheck and gradgradcheck of swish: passed" in proc.stdout
    first, last = (float(v) for v in proc.stdout.split("eager:  loss ")[1].split(" over")[0].split(" -> "))
    assert last < first * 0.5
    diff = float(proc.stdout.split("largest difference from eager ")[1].rstrip(")\n"))
    assert diff < 1e-4

"""Add an operation in C to loom and train with it: a fused "swish" activation, x * sigmoid(beta * x).

The C function is compiled once by the system C compiler (and cached on
disk); its gradient is given in loom ops, so it is differentiable to any
order. The example checks the gradient against finite differences, then
trains a small classifier on scikit-learn's 8x8 digits with the custom op as
its activation, eagerly and as one traced `loom.function` step, and shows
that both give the same losses.

    python examples/custom_op.py            # a few hundred steps
    python examples/custom_op.py --smoke    # a short run, for tests
"""
from __future__ import annotations

import argparse

import numpy as np

import loom
import loom.nn as nn

SWISH_C = r"""
int swish(const loom_tensor *in, int64_t n_in, loom_tensor *out, const double *attrs, int64_t n_attrs,
          int64_t nthreads) {
    if (in[0].dtype != LOOM_FLOAT32 && in[0].dtype != LOOM_FLOAT64) return 1;   /* unsupported dtype */
    int64_t n = loom_numel(out);
    double beta = attrs[0];
    if (in[0].dtype == LOOM_FLOAT32) {
        const float *x = in[0].data; float *y = out->data; float b = (float)beta;
        #pragma omp parallel for num_threads(nthreads) if (n > 65536)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-b * x[i]));
    } else {
        const double *x = in[0].data; double *y = out->data;
        #pragma omp parallel for num_threads(nthreads) if (n > 65536)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0 + exp(-beta * x[i]));
    }
    return 0;
}
"""


def swish_backward(grad, inputs, output, beta):
    """d/dx x*s(bx) = s(bx) + b*x*s(bx)*(1 - s(bx)), in loom ops (so it is differentiable again)."""
    (x,) = inputs
    s = loom.sigmoid(beta * x)
    return (grad * (s + beta * x * s * (1 - s)),)


swish = loom.ops.custom_op("swish", attrs=("beta",), cpu_source=SWISH_C, backward=swish_backward)


class Swish(nn.Module):
    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = beta

    def forward(self, x):
        return swish(x, beta=self.beta)


def load_digits():
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:
        raise SystemExit("this example needs scikit-learn for its data (the 8x8 digits): "
                         "pip install scikit-learn") from None
    d = sk_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def train(x, y, steps: int, traced: bool, seed: int = 0) -> list[float]:
    loom.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 64), Swish(1.5), nn.Linear(64, 10))
    opt = loom.optim.Adam(model.parameters(), lr=1e-2)

    def step(xb, yb):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss
    fn = loom.function(step) if traced else step
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        idx = rng.integers(0, len(x), 128)
        losses.append(float(fn(loom.tensor(x[idx]), loom.tensor(y[idx]))))
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--smoke", action="store_true", help="a short run (for tests)")
    args = p.parse_args()
    steps = 20 if args.smoke else args.steps

    t = loom.tensor(np.linspace(-3, 3, 7), dtype=loom.float64, requires_grad=True)
    loom.autograd.gradcheck(lambda v: swish(v, beta=1.5), (t,))
    loom.autograd.gradgradcheck(lambda v: swish(v, beta=1.5), (t,))
    print("gradcheck and gradgradcheck of swish: passed")

    x, y = load_digits()
    eager = train(x, y, steps, traced=False)
    traced = train(x, y, steps, traced=True)
    diff = max(abs(a - b) for a, b in zip(eager, traced))
    print(f"eager:  loss {eager[0]:.4f} -> {eager[-1]:.4f} over {steps} steps")
    print(f"traced: loss {traced[0]:.4f} -> {traced[-1]:.4f} (largest difference from eager {diff:.2e})")


if __name__ == "__main__":
    main()

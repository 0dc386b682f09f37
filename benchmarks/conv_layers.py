"""Per-layer timing of loom's conv2d primitives: oneDNN (plain and blocked layouts) against NumPy im2col + sgemm.

The shapes are the `cnn` and `resnet` workloads' (batch 64, 28x28): each
forward, input gradient and weight gradient they run, plus a few other shape
classes (1x1, strided, depthwise). Median of `--repeats` calls, ms. With
``--cold`` the caches are flushed before each call, as in a training step,
where every activation was written long before a convolution reads it.

    python benchmarks/conv_layers.py --threads 2 --cold
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import loom  # noqa: E402
from loom.codegen import conv as native  # noqa: E402
from loom.ir import conv as ref  # noqa: E402

GEO = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
P1 = dict(GEO, padding=(1, 1, 1, 1))
S2, S2P1 = dict(GEO, stride=(2, 2)), dict(GEO, stride=(2, 2), padding=(1, 1, 1, 1))
LAYERS = [  # name, x shape, w shape, attrs
    ("cnn conv1 1->32 28x28", (64, 1, 28, 28), (32, 1, 3, 3), GEO),
    ("cnn conv2 32->64 26x26", (64, 32, 26, 26), (64, 32, 3, 3), GEO),
    ("1x1 64->128 14x14", (64, 64, 14, 14), (128, 64, 1, 1), GEO),
    ("3x3 s2 p1 64->128 28x28", (32, 64, 28, 28), (128, 64, 3, 3), dict(GEO, stride=(2, 2), padding=(1, 1, 1, 1))),
    ("depthwise 3x3 p1 128 14x14", (32, 128, 14, 14), (128, 1, 3, 3), dict(GEO, padding=(1, 1, 1, 1), groups=128)),
    ("resnet stem 1->16 p1 28x28", (64, 1, 28, 28), (16, 1, 3, 3), P1),
    ("resnet 16->16 p1 28x28", (64, 16, 28, 28), (16, 16, 3, 3), P1),
    ("resnet 16->32 s2 p1 28x28", (64, 16, 28, 28), (32, 16, 3, 3), S2P1),
    ("resnet 1x1 s2 16->32 28x28", (64, 16, 28, 28), (32, 16, 1, 1), S2),
    ("resnet 32->32 p1 14x14", (64, 32, 14, 14), (32, 32, 3, 3), P1),
    ("resnet 64->64 p1 7x7", (64, 64, 7, 7), (64, 64, 3, 3), P1),
]


def median_ms(fn, repeats, clock=time.perf_counter, flush=None):
    fn()
    times = []
    for _ in range(repeats):
        if flush is not None:
            flush()
        t = clock()
        fn()
        times.append(clock() - t)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=loom.get_num_threads())
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cpu", action="store_true", help="process CPU time instead of wall time (a loaded machine)")
    ap.add_argument("--cold", action="store_true", help="flush the caches before each call (as in a training step)")
    args = ap.parse_args()
    loom.set_num_threads(args.threads)
    if not native.available(timeout=300):
        print("native convolution library unavailable:", native._state["error"])
        return 1
    rng = np.random.default_rng(0)
    clock = time.process_time if args.cpu else time.perf_counter
    junk = np.ones(32 << 20, np.float32)  # 128 MB: more than any last-level cache here.

    def flush():
        junk[::16] += 1.0
    flush_fn = flush if args.cold else None
    print(f"threads {args.threads}, median of {args.repeats} ({'CPU' if args.cpu else 'wall'} ms, "
          f"{'cold' if args.cold else 'warm'} caches), load average {os.getloadavg()}")
    print(f"{'layer':<30}{'op':<20}{'plain':>8}{'blocked':>9}{'im2col+sgemm':>14}{'ref/plain':>10}{'ref/blocked':>12}"
          f"{'chosen':>9}")
    for name, xs, ws, attrs in LAYERS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        y = ref.reference_conv2d(x, w, attrs)
        gy = rng.standard_normal(y.shape).astype(np.float32)
        calls = [("conv2d", x, w, attrs), ("conv2d_input_grad", gy, w, dict(attrs, input_size=xs[2:])),
                 ("conv2d_weight_grad", x, gy, dict(attrs, kernel_size=ws[2:]))]
        for op, a, b, at in calls:
            t_plain = median_ms(lambda: native.run(op, a, b, at, blocked=False), args.repeats, clock, flush_fn)
            t_blocked = median_ms(lambda: native.run(op, a, b, at, blocked=True), args.repeats, clock, flush_fn)
            t_ref = median_ms(lambda: ref.REFERENCE[op](a, b, at), args.repeats, clock, flush_fn)
            chosen = native.choose(op, ws, at)
            print(f"{name:<30}{op:<20}{t_plain:>8.2f}{t_blocked:>9.2f}{t_ref:>14.2f}{t_ref / t_plain:>10.2f}"
                  f"{t_ref / t_blocked:>12.2f}{chosen:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

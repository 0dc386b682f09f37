"""int8 quantisation of the Fashion-MNIST CNN: accuracy, latency and size against float32 and onnxruntime.

The CNN of examples/fashion_cnn.py (conv 1->32 3x3, conv 32->64 3x3, 2x2 max pooling, fc 9216->128,
fc 128->10, ReLU after all but the last) written as a ``loom.nn.Sequential``. It is trained briefly in
float32 (``--train-samples`` images, Adam, under ``loom.function``), or loaded from the ``model.safetensors``
that examples/fashion_cnn.py writes (``--weights``). Then, all in one run:

- test accuracy (10,000 images) of float32, post-training int8 with each activation observer (min-max,
  entropy, percentile) and quantisation-aware training (``--qat-steps`` fine-tuning steps, then convert),
  beside the float32 model fine-tuned for the same steps (QAT trains further; the control shows how much
  of its figure is that);
- latency at batch 1 and 64: loom's int8 model vs ``loom.function`` of the float model, each the median of
  ``--repeats`` interleaved timings (inputs converted from and results to NumPy included on both sides);
- weight bytes, float32 vs int8 (weights alone, and with their per-channel scales and int32 biases);
- onnxruntime's own int8 quantisation (``quantize_static``, QDQ, per-channel int8 weights, uint8
  activations, min-max calibration on the same batches) of loom's exported float ONNX, and loom's QDQ
  export run by onnxruntime: accuracy and latency beside loom's.

Threads: loom uses ``loom.get_num_threads()`` (``--threads`` sets it) and onnxruntime the same count.
The machine's load (``uptime``) is printed before and after, since timings on a shared machine are noisy.

    python benchmarks/quantization.py                       # ~5-10 minutes on 2 cores
    python benchmarks/quantization.py --threads 1
    python benchmarks/quantization.py --weights runs/fashion_cnn/model.safetensors --qat-steps 0
    python benchmarks/quantization.py --quick               # a smoke run: tiny training, few repeats

Fashion-MNIST is read from ``--data`` (default: Debian's /usr/share/datasets/fashion-mnist, from the
package ``dataset-fashion-mnist``); the script says what is missing and exits with status 2 without it.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loom  # noqa: E402
import loom.nn as nn  # noqa: E402
import loom.nn.functional as F  # noqa: E402
from loom import quantization as Q  # noqa: E402

MEAN, STD = 0.2860, 0.3530
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
# examples/fashion_cnn.py's parameter names -> this Sequential's.
EXAMPLE_NAMES = {"conv1": "0", "conv2": "2", "fc1": "7", "fc2": "9"}


def cnn() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def load_data(root: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from loom.data.datasets import FashionMNIST
    try:
        train, test = FashionMNIST(root, train=True), FashionMNIST(root, train=False)
    except FileNotFoundError as e:
        print(f"error: Fashion-MNIST is missing: {e}\nInstall Debian's dataset-fashion-mnist package (it fills "
              f"{DEFAULT_DATA}) or pass --data DIR holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
              "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.", file=sys.stderr)
        raise SystemExit(2) from None

    def norm(images: np.ndarray) -> np.ndarray:
        return ((images.astype(np.float32) / 255 - MEAN) / STD)[:, None]

    return norm(train.images), train.labels.astype(np.int64), norm(test.images), test.labels.astype(np.int64)


def train_float(model: nn.Module, x: np.ndarray, y: np.ndarray, samples: int, epochs: int, seed: int) -> float:
    opt = loom.optim.Adam(model.parameters(), lr=1e-3)

    @loom.function
    def step(xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    model.train()
    for epoch in range(epochs):
        idx = rng.permutation(len(x))[:samples]
        losses = []
        for i in range(0, len(idx) - 63, 64):
            b = idx[i:i + 64]
            losses.append(step(loom.tensor(x[b]), loom.tensor(y[b])).item())
        print(f"  float32 epoch {epoch + 1}: {len(losses)} steps of 64, mean loss {np.mean(losses):.4f}", flush=True)
    model.eval()
    return time.perf_counter() - t0


def finetune(model: nn.Module, x: np.ndarray, y: np.ndarray, steps: int, seed: int, traced: bool) -> float:
    """`steps` Adam steps (lr 1e-4) on random batches of 64: the QAT run, and its float32 control."""
    opt = loom.optim.Adam(model.parameters(), lr=1e-4)

    def step(xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    run = loom.function(step) if traced else step  # QAT observers read values: eager only.
    rng = np.random.default_rng(seed + 1)
    t0 = time.perf_counter()
    model.train()
    losses = []
    for _ in range(steps):
        b = rng.integers(0, len(x), 64)
        losses.append(run(loom.tensor(x[b]), loom.tensor(y[b])).item())
    if losses:
        print(f"  {'float32' if traced else 'QAT'} fine-tuning: {steps} steps of 64, loss {np.mean(losses[:10]):.4f} "
              f"-> {np.mean(losses[-10:]):.4f}", flush=True)
    model.eval()
    return time.perf_counter() - t0


def accuracy(predict, x: np.ndarray, y: np.ndarray, batch: int = 250) -> float:
    correct = 0
    for i in range(0, len(x), batch):
        correct += int((np.asarray(predict(x[i:i + batch])).argmax(1) == y[i:i + batch]).sum())
    return correct / len(x)


def median_ms(fns: dict, x: np.ndarray, repeats: int, inner: int) -> dict[str, float]:
    """Median over `repeats` rounds of each function's mean time over `inner` calls; rounds interleave them."""
    for fn in fns.values():  # Warm-up: compile, build, first-touch.
        fn(x)
        fn(x)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(inner):
                fn(x)
            times[name].append((time.perf_counter() - t) / inner * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "(uptime unavailable)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="folder with the Fashion-MNIST *-ubyte.gz files")
    p.add_argument("--weights", help="model.safetensors from examples/fashion_cnn.py (skips float training)")
    p.add_argument("--save-weights", help="write the trained float32 model here (for --weights in a later run)")
    p.add_argument("--train-samples", type=int, default=15000, help="images per float32 training epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--qat-steps", type=int, default=150, help="QAT fine-tuning steps of 64 images (0: skip)")
    p.add_argument("--calib-batches", type=int, default=8, help="calibration batches of 64 training images")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, help="loom.set_num_threads (onnxruntime uses the same count)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smoke run: 1,024 training images, 5 QAT steps, "
                   "2,000 test images, 3 repeats")
    args = p.parse_args()
    if args.quick:
        args.train_samples, args.qat_steps, args.repeats, args.calib_batches = 1024, 5, 3, 2
    if args.threads:
        loom.set_num_threads(args.threads)
    threads = loom.get_num_threads()
    print(f"load before: {uptime()}")
    print(f"threads: {threads}; int8 kernel path: {Q.kernels.default_path()} (compiled: {Q.kernels.features()})")

    xtr, ytr, xte, yte = load_data(args.data)
    if args.quick:
        xte, yte = xte[:2000], yte[:2000]
    loom.manual_seed(args.seed)
    model = cnn()
    if args.weights:
        state = loom.load(args.weights)
        state = {EXAMPLE_NAMES.get(k.split(".")[0], k.split(".")[0]) + "." + k.split(".", 1)[1]: v
                 for k, v in state.items()}
        model.load_state_dict(state)
        model.eval()
        print(f"float32 model: loaded from {args.weights}")
    else:
        secs = train_float(model, xtr, ytr, args.train_samples, args.epochs, args.seed)
        print(f"float32 model: trained on {args.epochs} x {args.train_samples} images in {secs:.0f} s")
        if args.save_weights:
            loom.save(model.state_dict(), args.save_weights)

    @loom.function
    def float_fn(x):
        with loom.no_grad():
            return model(x)

    def float_predict(x):
        return float_fn(loom.tensor(x)).numpy()

    rng = np.random.default_rng(args.seed + 2)
    calib = [xtr[rng.integers(0, len(xtr), 64)] for _ in range(args.calib_batches)]
    rows = [("float32 (loom.function)", accuracy(float_predict, xte, yte))]
    qmodels = {}
    for mode in ("minmax", "entropy", "percentile"):
        t = time.perf_counter()
        qm = Q.quantize(model, [loom.tensor(c) for c in calib], Q.get_default_qconfig(mode))
        print(f"  PTQ {mode}: calibrated and converted in {time.perf_counter() - t:.1f} s", flush=True)
        qmodels[mode] = qm
        rows.append((f"loom int8 PTQ ({mode})", accuracy(qm.run_numpy, xte, yte)))
    if args.qat_steps:
        qat = Q.prepare_qat(copy.deepcopy(model))
        secs = finetune(qat, xtr, ytr, args.qat_steps, args.seed, traced=False)
        qmodels["qat"] = Q.convert(qat)
        rows.append((f"loom int8 QAT ({args.qat_steps} more steps, {secs:.0f} s)",
                     accuracy(qmodels["qat"].run_numpy, xte, yte)))
        # The control: the same extra steps in float32, so QAT's gain is not mistaken for quantisation's.
        control = copy.deepcopy(model)
        finetune(control, xtr, ytr, args.qat_steps, args.seed, traced=True)
        with loom.no_grad():
            rows.append((f"float32 after the same {args.qat_steps} steps (control)",
                         accuracy(lambda a: control(loom.tensor(a)).numpy(), xte, yte)))

    ort_rows, ort_fns = onnxruntime_side(model, qmodels["minmax"], calib, xte, yte, threads)
    rows += ort_rows

    print("\naccuracy on", len(xte), "Fashion-MNIST test images")
    base = rows[0][1]
    for name, acc in rows:
        print(f"  {name:48s} {acc * 100:6.2f}%  ({(acc - base) * 100:+.2f} points)")

    qm = qmodels["minmax"]
    print(f"\nlatency, ms per call (median of {args.repeats} interleaved rounds, {threads} thread(s))")
    for batch, inner in ((1, 20), (64, 2)):
        x = xte[:batch].copy()
        fns = {"loom float32": float_predict, "loom int8": lambda a: qm(loom.tensor(a)).numpy(), **ort_fns}
        ms = median_ms(fns, x, args.repeats, inner)
        f32 = ms["loom float32"]
        print(f"  batch {batch:3d}: " + ", ".join(f"{k} {v:.3f}" for k, v in ms.items())
              + f"  -> loom int8 {f32 / ms['loom int8']:.2f}x faster than loom float32")

    fbytes = sum(p.numel() * 4 for p in model.parameters())
    wbytes = sum(p.numel() * 4 for n, p in model.named_parameters() if n.endswith("weight"))
    qw = sum(s.weight_int8.size for s in qm.steps if hasattr(s, "weight_int8"))
    print(f"\nweights: float32 {wbytes:,} B (all parameters {fbytes:,} B); int8 {qw:,} B ({wbytes / qw:.2f}x "
          f"smaller); with per-channel scales and int32 biases {qm.weight_bytes():,} B "
          f"({fbytes / qm.weight_bytes():.2f}x smaller than all float32 parameters)")
    print(f"load after: {uptime()}")


def plain_float_onnx(model: nn.Sequential, path: Path) -> None:
    """The CNN as plain Conv/Relu/MaxPool/Flatten/Gemm nodes, to quantise without loom's exporter's lowering.

    loom.onnx.export writes ReLU as Where(x <= 0, 0, x) and biases through Expand over the run-time shape,
    which onnxruntime's quantiser does not fuse; this graph shows its quantisation on the same weights at
    its best.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, x = [], [], "input"
    for i, m in enumerate(model):
        y = f"t{i}"
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            w, b = f"w{i}", f"b{i}"
            inits += [numpy_helper.from_array(m.weight.detach().numpy(), w),
                      numpy_helper.from_array(m.bias.detach().numpy(), b)]
            nodes.append(helper.make_node("Conv", [x, w, b], [y]) if isinstance(m, nn.Conv2d)
                         else helper.make_node("Gemm", [x, w, b], [y], transB=1))
        elif isinstance(m, nn.ReLU):
            nodes.append(helper.make_node("Relu", [x], [y]))
        elif isinstance(m, nn.MaxPool2d):
            nodes.append(helper.make_node("MaxPool", [x], [y], kernel_shape=[2, 2], strides=[2, 2]))
        elif isinstance(m, nn.Flatten):
            nodes.append(helper.make_node("Flatten", [x], [y], axis=1))
        else:  # Dropout: the identity at inference.
            continue
        x = y
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                           ["batch", 1, 28, 28])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def onnxruntime_side(model, qm, calib, xte, yte, threads):
    """onnxruntime's own int8 quantisation of loom's float ONNX, and loom's QDQ export, run by onnxruntime."""
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quant_pre_process,
                                              quantize_static)
    except ImportError as e:
        print(f"onnxruntime comparison skipped: {e} (pip install 'loom-dl[onnx]')")
        return [], {}

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {"input": x}

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # Sleep when idle, as loom's threads.
    tmp = Path(tempfile.mkdtemp(prefix="loom-quant-bench-"))
    loom.onnx.export(model, (loom.tensor(calib[0]),), tmp / "float.onnx", input_names=["input"],
                     output_names=["output"], dynamic_axes={"input": {0: "batch"}})
    plain_float_onnx(model, tmp / "plain.onnx")
    for src, dst in (("float", "ort_int8"), ("plain", "ort_int8_plain")):
        quant_pre_process(str(tmp / f"{src}.onnx"), str(tmp / f"{src}_pre.onnx"))
        quantize_static(str(tmp / f"{src}_pre.onnx"), str(tmp / f"{dst}.onnx"), Reader(),
                        quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    Q.export_qdq(qm, (1, 1, 28, 28), tmp / "loom_qdq.onnx")
    sessions = {name: ort.InferenceSession(str(tmp / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
                for name in ("float", "ort_int8", "ort_int8_plain", "loom_qdq")}

    def runner(sess):
        return lambda x: sess.run(None, {"input": x})[0]

    rows = [("onnxruntime float32 (loom's ONNX export)", accuracy(runner(sessions["float"]), xte, yte)),
            ("onnxruntime int8 (its quantize_static)", accuracy(runner(sessions["ort_int8"]), xte, yte)),
            ("onnxruntime int8 (quantize_static, plain graph)", accuracy(runner(sessions["ort_int8_plain"]), xte,
                                                                        yte)),
            ("onnxruntime running loom's QDQ export", accuracy(runner(sessions["loom_qdq"]), xte, yte))]
    fns = {"ort float32": runner(sessions["float"]), "ort int8": runner(sessions["ort_int8"]),
           "ort int8 plain": runner(sessions["ort_int8_plain"]), "ort on loom QDQ": runner(sessions["loom_qdq"])}
    return rows, fns


if __name__ == "__main__":
    main()

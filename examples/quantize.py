"""Quantise the Fashion-MNIST CNN to int8: post-training, then quantisation-aware, then export as QDQ ONNX.

The CNN of examples/fashion_cnn.py, written as a ``loom.nn.Sequential`` (what ``loom.quantization``
quantises), is trained briefly in float32; then

1. post-training quantisation: ``loom.quantization.quantize(model, calibration_batches)`` observes a few
   training batches (min-max by default; ``--observer entropy`` or ``percentile`` for histogram
   calibration) and converts the model to int8 (per-channel int8 weights, uint8 activations, int32
   accumulation in loom's int8 C kernels);
2. quantisation-aware training (``--qat-steps``): ``prepare_qat`` puts fake-quant modules (straight-through
   gradients) around the layers, the model trains a little more, and ``convert`` makes it int8;
3. the int8 model is written as QDQ ONNX, checked by ``onnx.checker`` and run by onnxruntime, whose
   outputs are compared with loom's int8 model.

Test accuracy of each, and the weight bytes, are printed and written to ``metrics.json``. Needs
``pip install 'loom-dl[onnx]'`` for the export step. For timings see benchmarks/quantization.py.

    python examples/quantize.py                          # 1 epoch on 6,000 images, PTQ, 100 QAT steps, export
    python examples/quantize.py --observer entropy --qat-steps 0
    python examples/quantize.py --smoke                  # a few batches, for tests
"""
from __future__ import annotations

import copy
from itertools import islice

from _common import Timer, out_dir
from _fashion import accuracy, fashion_parser, fit, load_images, make_loaders, normalize, write_metrics

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom import quantization as Q


def cnn() -> nn.Sequential:
    """examples/fashion_cnn.py's Net as a Sequential (ReLU modules instead of F.relu calls in forward)."""
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def main() -> None:
    p = fashion_parser("quantize", __doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples-per-epoch", type=int, default=6000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--observer", choices=["minmax", "entropy", "percentile"], default="minmax")
    p.add_argument("--calib-batches", type=int, default=16, help="training batches observed for calibration")
    p.add_argument("--qat-steps", type=int, default=100, help="quantisation-aware fine-tuning steps (0: skip)")
    args = p.parse_args()
    if args.smoke:
        args.samples_per_epoch, args.calib_batches, args.qat_steps = 64, 2, 3

    loom.manual_seed(args.seed)
    data = load_images(args.data, fallback=not args.no_fallback)
    train_loader, test_loader = make_loaders(data, args.batch_size, args.seed, args.smoke, args.samples_per_epoch)
    print(f"{data.name}: training the CNN in float32 on {len(train_loader.sampler)} images, {args.epochs} epoch(s)")
    model = cnn()
    fit(model, loom.optim.Adam(model.parameters(), lr=1e-3), train_loader, test_loader, args.epochs,
        progress_bar=not args.no_progress, test_each_epoch=False)
    results = {"float32": accuracy(model, test_loader)}

    timer = Timer()
    calibration = [normalize(x) for x, _ in islice(train_loader, args.calib_batches)]
    qmodel = Q.quantize(model, calibration, Q.get_default_qconfig(args.observer))
    print(f"post-training quantisation ({args.observer} observer, {len(calibration)} batches) in {timer}")
    results["int8_ptq"] = accuracy(qmodel, test_loader)

    if args.qat_steps:
        qat = Q.prepare_qat(copy.deepcopy(model))
        opt = loom.optim.Adam(qat.parameters(), lr=1e-4)
        for x, y in islice(_forever(train_loader), args.qat_steps):
            loss = F.cross_entropy(qat(normalize(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        qat_model = Q.convert(qat.eval())
        results["int8_qat"] = accuracy(qat_model, test_loader)

    float_bytes = sum(p.numel() * 4 for p in model.parameters())
    for name, acc in results.items():
        print(f"{name:9s} test accuracy {acc:.4f} ({(acc - results['float32']) * 100:+.2f} points)")
    print(f"weights: float32 {float_bytes:,} bytes, int8 {qmodel.weight_bytes():,} bytes "
          f"({float_bytes / qmodel.weight_bytes():.2f}x smaller, per-channel scales and int32 biases included)")

    out = out_dir(args.out)
    path = out / "fashion_cnn_int8_qdq.onnx"
    import onnxruntime as ort
    Q.export_qdq(qmodel, (1, 1, 28, 28), path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = normalize(next(iter(test_loader))[0]).numpy()
    diff = float(np.abs(session.run(None, {"input": x})[0] - qmodel(loom.tensor(x)).numpy()).max())
    print(f"QDQ ONNX written to {path}; onnxruntime vs loom int8 max |diff| {diff:.2e}")
    write_metrics(out, data=data.name, **{f"{k}_accuracy": v for k, v in results.items()}, float_bytes=float_bytes,
                  int8_bytes=qmodel.weight_bytes(), onnx_path=str(path), onnxruntime_max_abs_diff=diff)


def _forever(loader):
    while True:
        yield from loader


if __name__ == "__main__":
    main()

"""Train the Fashion-MNIST CNN briefly, export it to ONNX, run it in onnxruntime and compare with loom.

The exported model takes raw pixels in [0, 1] (the input normalisation is part
of the graph) with a dynamic batch axis; it is checked by ``onnx.checker``,
run by onnxruntime at batch 1 and at batch 64 over the test images, and its
logits are compared with loom's (they agree within 1e-5, and so do the
predictions). Needs ``pip install 'loom-dl[onnx]'``.

    python examples/onnx_export.py                 # one epoch on 6,000 images, then export
    python examples/onnx_export.py --smoke         # a few batches, for tests
"""
from __future__ import annotations

import time

from _common import Timer, fmt_seconds, out_dir
from _fashion import MEAN, STD, fashion_parser, fit, load_images, make_loaders, write_metrics
from fashion_cnn import Net

import numpy as np

import loom
import loom.nn as nn


class Deployed(nn.Module):
    """The trained network behind the input normalisation, so the ONNX model takes raw pixels."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: loom.Tensor) -> loom.Tensor:
        return self.net((x - MEAN) / STD)


def main() -> None:
    p = fashion_parser("onnx_export", __doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples-per-epoch", type=int, default=6000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    if args.smoke:
        args.epochs, args.samples_per_epoch = 1, 64

    import onnx
    import onnxruntime as ort

    loom.manual_seed(args.seed)
    data = load_images(args.data, fallback=not args.no_fallback)
    train_loader, test_loader = make_loaders(data, args.batch_size, args.seed, args.smoke, args.samples_per_epoch)
    print(f"{data.name}: training the CNN on {len(train_loader.sampler)} images for {args.epochs} epoch(s)")
    net = Net()
    optimizer = loom.optim.Adam(net.parameters(), lr=args.lr)
    hist = fit(net, optimizer, train_loader, test_loader, args.epochs, progress_bar=not args.no_progress)

    model = Deployed(net).eval()
    out = out_dir(args.out)
    path = out / "fashion_cnn.onnx"
    timer = Timer()
    loom.onnx.export(model, (loom.zeros(2, 1, 28, 28),), path, input_names=["pixels"], output_names=["logits"],
                     dynamic_axes={"pixels": {0: "batch"}})
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    print(f"exported to {path} ({path.stat().st_size / 1e6:.2f} MB, opset 17, IR version 10) in {timer}")

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.concatenate([x.numpy() for x, _ in test_loader])
    labels = np.concatenate([y.numpy() for _, y in test_loader])
    results = {}
    for batch in (1, 64):
        diffs, loom_pred, ort_pred, loom_s, ort_s = [], [], [], 0.0, 0.0
        n = len(images) if batch > 1 else min(len(images), 32)
        for start in range(0, n, batch):
            x = images[start:start + batch]
            t0 = time.perf_counter()
            with loom.no_grad():
                ref = model(loom.from_numpy(x)).numpy()
            t1 = time.perf_counter()
            (got,) = session.run(["logits"], {"pixels": x})
            t2 = time.perf_counter()
            loom_s, ort_s = loom_s + t1 - t0, ort_s + t2 - t1
            diffs.append(float(np.abs(got - ref).max()))
            loom_pred.append(ref.argmax(1))
            ort_pred.append(got.argmax(1))
        loom_pred, ort_pred = np.concatenate(loom_pred), np.concatenate(ort_pred)
        results[batch] = {"images": n, "max_abs_diff": max(diffs),
                          "same_predictions": bool((loom_pred == ort_pred).all()),
                          "loom_accuracy": float((loom_pred == labels[:n]).mean()),
                          "onnxruntime_accuracy": float((ort_pred == labels[:n]).mean()),
                          "loom_seconds": loom_s, "onnxruntime_seconds": ort_s}
        r = results[batch]
        print(f"batch {batch}: {n} test images, onnxruntime vs loom max |diff| {r['max_abs_diff']:.2e}, "
              f"same predictions: {r['same_predictions']}, accuracy loom {r['loom_accuracy']:.4f} / onnxruntime "
              f"{r['onnxruntime_accuracy']:.4f}; time loom {fmt_seconds(loom_s)}, onnxruntime {fmt_seconds(ort_s)}")
    write_metrics(out, data=data.name, onnx_path=str(path), epoch_loss=hist["epoch_loss"],
                  test_acc=hist["test_acc"], **{f"batch{b}": r for b, r in results.items()})
    worst = max(r["max_abs_diff"] for r in results.values())
    print(f"onnxruntime matches loom: max |diff| {worst:.2e} (tolerance 1e-5)")
    if worst > 1e-5:
        raise SystemExit("onnx_export: onnxruntime's outputs differ from loom's by more than 1e-5")


if __name__ == "__main__":
    main()

"""Train a small ResNet (BasicBlocks with BatchNorm) on Fashion-MNIST.

A CIFAR-style ResNet scaled to 28x28 grey images: a 3x3 stem with 16 channels,
then three stages of BasicBlocks with 16, 32 and 64 channels (the last two
halve the resolution: 28 -> 14 -> 7), global average pooling and a linear
classifier. Each BasicBlock is conv3x3-BN-ReLU-conv3x3-BN plus a shortcut (a
1x1 conv and BN where the shape changes), then ReLU. SGD with momentum 0.9,
weight decay 5e-4 and a one-cycle learning rate peaking at 0.1, mini-batches of
64. Test accuracy is measured on the whole test set.

loom still runs on its NumPy reference interpreter: the default run (one
epoch of 60,000 images) took 10 minutes (10 ms per training image on a 2-core
machine shared with another job) and reached 87.8% test accuracy; on a busier
machine it took 44 ms per image. ``--samples-per-epoch N`` trains each epoch
on N images drawn at random (9,600 images: 76.8%).

    python examples/fashion_resnet.py                         # 1 epoch, 1 block per stage, ~87.8%
    python examples/fashion_resnet.py --blocks 2 --epochs 5   # ResNet-14, a long run
    python examples/fashion_resnet.py --smoke                 # a few batches, for tests
"""
from __future__ import annotations

from _common import Timer, fmt_seconds, out_dir
from _fashion import fashion_parser, fit, load_images, make_loaders, plot_history, write_metrics

import loom
import loom.nn as nn
import loom.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x: loom.Tensor) -> loom.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, blocks: int = 1, widths: tuple[int, ...] = (16, 32, 64), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU())
        stages, in_planes = [], widths[0]
        for i, planes in enumerate(widths):
            for j in range(blocks):
                stages.append(BasicBlock(in_planes, planes, stride=2 if i > 0 and j == 0 else 1))
                in_planes = planes
        self.layers = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: loom.Tensor) -> loom.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(self.pool(x).flatten(1))


def main() -> None:
    p = fashion_parser("fashion_resnet", __doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples-per-epoch", type=int, default=None,
                   help="train each epoch on this many images drawn at random (default: all)")
    p.add_argument("--blocks", type=int, default=1, help="BasicBlocks per stage")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1, help="peak learning rate of the one-cycle schedule")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    args = p.parse_args()
    if args.smoke:
        args.epochs, args.batch_size, args.samples_per_epoch, args.lr = 2, 32, None, 0.05

    loom.manual_seed(args.seed)
    data = load_images(args.data, fallback=not args.no_fallback, download=args.download)
    train_loader, test_loader = make_loaders(data, args.batch_size, args.seed, args.smoke, args.samples_per_epoch)
    n_train, n_test = len(train_loader.sampler), len(test_loader.dataset)
    model = ResNet(blocks=args.blocks)
    n_params = sum(q.numel() for q in model.parameters())
    print(f"{data.name}: {n_train} of {len(train_loader.dataset)} train images per epoch, {n_test} test images; "
          f"ResNet with {args.blocks} BasicBlock(s) per stage (16/32/64 channels, {n_params} parameters), SGD "
          f"momentum 0.9, one-cycle lr up to {args.lr}, batch {args.batch_size}, {args.epochs} epoch(s)")

    optimizer = loom.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    scheduler = loom.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr,
                                                   total_steps=args.epochs * len(train_loader))
    timer = Timer()
    hist = fit(model, optimizer, train_loader, test_loader, args.epochs, scheduler, desc="resnet",
               progress_bar=not args.no_progress)

    out = out_dir(args.out)
    png = plot_history(out / "loss.png", hist, f"ResNet on {data.name}")
    per_epoch = sum(hist["epoch_seconds"]) / len(hist["epoch_seconds"])
    per_image = per_epoch / n_train
    write_metrics(out, data=data.name, test_accuracy=hist["test_acc"][-1], epochs=args.epochs,
                  samples_per_epoch=n_train, seconds_per_epoch=per_epoch,
                  seconds_per_full_epoch=per_image * len(train_loader.dataset), total_seconds=timer.elapsed(), **hist)
    print(f"test accuracy {hist['test_acc'][-1]:.4f} on {n_test} {data.name} test images after {args.epochs} "
          f"epoch(s) of {n_train} images ({fmt_seconds(per_epoch)} per epoch, "
          f"{1000 * per_image:.1f} ms per training image, so {fmt_seconds(per_image * len(train_loader.dataset))} "
          f"per full epoch; {timer} in all); loss curve: {png}")


if __name__ == "__main__":
    main()

"""resnet: a small CIFAR-style ResNet of BasicBlocks with BatchNorm on 28x28 images, batch 64, SGD.

A 3x3 stem with 16 channels, then one BasicBlock per stage at 16, 32 and 64
channels (the last two halve the resolution: 28 -> 14 -> 7; their shortcuts
are a 1x1 conv and BatchNorm), global average pooling and a linear classifier:
the training-stack issue's Fashion-MNIST ResNet. SGD with momentum 0.9 and
weight decay 5e-4. BatchNorm runs in training mode, so every step also
updates the running statistics. Data: synthetic standard-normal images.
"""
from __future__ import annotations

from loom.bench.workloads import Workload, synthetic_images

BATCH = 64
WIDTHS = (16, 32, 64)
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4


def model(a):
    """The ResNet as loom or torch modules."""
    nn, F = a.nn, a.F

    class BasicBlock(nn.Module):
        def __init__(self, in_planes: int, planes: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.shortcut = nn.Identity()
            if stride != 1 or in_planes != planes:
                self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                              nn.BatchNorm2d(planes))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, WIDTHS[0], 3, padding=1, bias=False), nn.BatchNorm2d(WIDTHS[0]),
                                      nn.ReLU())
            blocks, in_planes = [], WIDTHS[0]
            for i, planes in enumerate(WIDTHS):
                blocks.append(BasicBlock(in_planes, planes, stride=1 if i == 0 else 2))
                in_planes = planes
            self.layers = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(in_planes, 10)

        def forward(self, x):
            return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))
    return ResNet()


def optimizer(a, params):
    return a.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)


def loss(a, m, x, y):
    return a.F.cross_entropy(m(x), y)


WORKLOAD = Workload(
    name="resnet", description="ResNet (BasicBlock x3, BatchNorm, 16-32-64) on 28x28, batch 64, SGD (training step)",
    samples_per_step=BATCH, unit="samples", steps=3, quick_steps=1,
    batches=lambda rng: synthetic_images(rng, 4, BATCH, (1, 28, 28), 10),
    model=model, optimizer=optimizer, loss=loss)

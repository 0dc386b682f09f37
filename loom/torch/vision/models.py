"""`torchvision.models`: the ResNet family (resnet18 ... resnet152, resnext, wide_resnet) with torchvision's
layer structure, parameter names (so its state_dicts load) and initialisation.

Pretrained weights are not downloaded: `weights` (or the old `pretrained=True`)
raises loom's error; load a torchvision checkpoint with
``model.load_state_dict(torch.load(path))`` instead.

Examples
--------
>>> from loom.torch.vision import models
>>> m = models.resnet18(num_classes=10)
>>> sum(p.numel() for p in m.parameters())
11181642
"""
from __future__ import annotations

from loom import nn
from loom.errors import LoomValueError

__all__ = ["ResNet", "BasicBlock", "Bottleneck", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
           "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2"]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding, no bias (followed by BatchNorm)."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution, no bias."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None) -> None:
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise LoomValueError("loom.torch.vision.models.BasicBlock: only supports groups=1 and base_width=64")
        if dilation > 1:
            raise LoomValueError("loom.torch.vision.models.BasicBlock: dilation > 1 is not supported")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1, 3x3 (strided, grouped) and 1x1 convolutions with a residual connection (ResNet-50 and up)."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None) -> None:
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet: a 7x7 stem, four stages of `block`, global average pooling and a linear head."""

    def __init__(self, block, layers, num_classes: int = 1000, zero_init_residual: bool = False, groups: int = 1,
                 width_per_group: int = 64, replace_stride_with_dilation=None, norm_layer=None) -> None:
        super().__init__()
        self._norm_layer = norm_layer or nn.BatchNorm2d
        self.inplanes = 64
        self.dilation = 1
        replace_stride_with_dilation = replace_stride_with_dilation or [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise LoomValueError("loom.torch.vision.models.ResNet: replace_stride_with_dilation should be None or a "
                                 f"3-element tuple, got {replace_stride_with_dilation}")
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       norm_layer(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation,
                        norm_layer)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                                dilation=self.dilation, norm_layer=norm_layer))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.avgpool(x).flatten(1)
        return self.fc(x)


def _resnet(name: str, block, layers, weights, progress, kwargs) -> ResNet:
    if kwargs.pop("pretrained", False) or weights is not None:
        raise LoomValueError(f"loom.torch.vision.models.{name}: pretrained weights are not downloaded by loom; "
                             f"build the model with weights=None and load a checkpoint with "
                             "model.load_state_dict(torch.load(path))")
    return ResNet(block, layers, **kwargs)


def resnet18(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-18 (BasicBlock, [2, 2, 2, 2])."""
    return _resnet("resnet18", BasicBlock, [2, 2, 2, 2], weights, progress, kwargs)


def resnet34(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-34 (BasicBlock, [3, 4, 6, 3])."""
    return _resnet("resnet34", BasicBlock, [3, 4, 6, 3], weights, progress, kwargs)


def resnet50(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-50 (Bottleneck, [3, 4, 6, 3])."""
    return _resnet("resnet50", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


def resnet101(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-101 (Bottleneck, [3, 4, 23, 3])."""
    return _resnet("resnet101", Bottleneck, [3, 4, 23, 3], weights, progress, kwargs)


def resnet152(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-152 (Bottleneck, [3, 8, 36, 3])."""
    return _resnet("resnet152", Bottleneck, [3, 8, 36, 3], weights, progress, kwargs)


def resnext50_32x4d(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNeXt-50 32x4d (grouped Bottleneck)."""
    kwargs.setdefault("groups", 32)
    kwargs.setdefault("width_per_group", 4)
    return _resnet("resnext50_32x4d", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


def resnext101_32x8d(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNeXt-101 32x8d (grouped Bottleneck)."""
    kwargs.setdefault("groups", 32)
    kwargs.setdefault("width_per_group", 8)
    return _resnet("resnext101_32x8d", Bottleneck, [3, 4, 23, 3], weights, progress, kwargs)


def wide_resnet50_2(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """Wide ResNet-50-2 (Bottleneck twice as wide)."""
    kwargs.setdefault("width_per_group", 128)
    return _resnet("wide_resnet50_2", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


def wide_resnet101_2(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """Wide ResNet-101-2 (Bottleneck twice as wide)."""
    kwargs.setdefault("width_per_group", 128)
    return _resnet("wide_resnet101_2", Bottleneck, [3, 4, 23, 3], weights, progress, kwargs)

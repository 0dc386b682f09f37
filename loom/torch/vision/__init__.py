"""loom.torch.vision: the torchvision pieces PyTorch programs use, over loom.

`datasets` (MNIST, FashionMNIST, CIFAR10, CIFAR100 with torchvision's
signature and root layout), `transforms` (Compose, ToTensor, Normalize,
Resize, CenterCrop, RandomCrop, RandomResizedCrop, flips, Pad, Grayscale,
Lambda, ...), `models` (the ResNet family, without pretrained weights) and
`utils` (make_grid, save_image). Images are PIL images when
Pillow is installed, as torchvision gives them, else uint8 NumPy arrays
(HW or HWC), which every transform here also accepts.

Examples
--------
>>> from loom.torch.vision import transforms
>>> t = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
>>> t(np.zeros((2, 2), np.uint8)).tolist()
[[[-1.0, -1.0], [-1.0, -1.0]]]
"""
from loom.torch.vision import datasets, models, transforms, utils

__all__ = ["TORCHVISION_MODULES", "datasets", "models", "transforms", "utils"]

# What `python -m loom.torch` maps `torchvision` and its submodules to (module name -> loom module name).
TORCHVISION_MODULES = {
    "torchvision": "loom.torch.vision",
    "torchvision.datasets": "loom.torch.vision.datasets",
    "torchvision.models": "loom.torch.vision.models",
    "torchvision.transforms": "loom.torch.vision.transforms",
    "torchvision.transforms.functional": "loom.torch.vision.transforms.functional",
    "torchvision.utils": "loom.torch.vision.utils",
}

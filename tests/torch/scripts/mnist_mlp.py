"""An MNIST-style classifier written for PyTorch (random data so it needs no download).

Run unchanged by `python -m loom.torch mnist_mlp.py OUT_DIR`; it prints one loss per step.
Weights and data come from NumPy so PyTorch and loom start from the same values.
"""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.dropout = nn.Dropout(0.0)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout(x)
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    use_mps = torch.backends.mps.is_available()
    device = torch.device("cuda" if use_cuda else "mps" if use_mps else "cpu")
    torch.manual_seed(1)
    if use_cuda:
        torch.cuda.manual_seed_all(1)
    torch.backends.cudnn.benchmark = True

    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.standard_normal((160, 1, 8, 8)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 10, 160)).long()
    loader = DataLoader(TensorDataset(images, labels), batch_size=8, shuffle=False,
                        pin_memory=use_cuda, num_workers=0)

    model = Net().to(device)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.uniform(-0.2, 0.2, tuple(p.shape)).astype(np.float32)))
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = StepLR(optimizer, step_size=10, gamma=0.5)

    model.train()
    for step, (data, target) in enumerate(loader):
        if step == args.steps:
            break
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.7f}")

    path = os.path.join(args.out_dir, "mnist_mlp.pt")
    torch.save(model.state_dict(), path)
    restored = Net()
    restored.load_state_dict(torch.load(path, weights_only=True))
    restored.eval()
    with torch.no_grad():
        same = torch.allclose(restored(images[:8]), model.eval()(images[:8]))
    print(f"restored {same}")


if __name__ == "__main__":
    main()

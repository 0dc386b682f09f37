"""Train a DCGAN on Fashion-MNIST and write an 8x8 grid of generated images.

The generator maps 64-d Gaussian noise through transposed convolutions
(1 -> 7 -> 14 -> 28 pixels) with BatchNorm and ReLU to a tanh image; the
discriminator mirrors it with strided convolutions, BatchNorm and LeakyReLU(0.2)
down to one logit. Both use Adam (lr 2e-4, betas (0.5, 0.999)) and the
non-saturating loss, binary cross-entropy with logits, as in Radford et al.
(2016). Weights start from N(0, 0.02) (BatchNorm scales from N(1, 0.02)).

The run writes ``samples.png`` (64 images from fixed noise), ``loss.png`` (the
discriminator's and generator's losses) and the generator's weights. The
default 1,000 steps (64,000 images, about one epoch) took 15.5 minutes on a
2-core machine shared with another job (0.9 s per step) and give blurry but
clearly recognisable trousers, pullovers, shirts, dresses and shoes; 250 steps
(``--steps 250``) give only rough garment silhouettes.

    python examples/dcgan_fashion.py                  # 1,000 steps of 64 images
    python examples/dcgan_fashion.py --steps 3000     # about three epochs
    python examples/dcgan_fashion.py --smoke          # a few steps, for tests
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import Timer, fmt_seconds, out_dir, plot_curves, progress
from _fashion import fashion_parser, load_images, make_loaders, write_metrics

import loom
import loom.nn as nn
from loom.data import transforms as T

to_tanh_range = T.Normalize((0.5,), (0.5,))  # [0, 1] -> [-1, 1], the generator's tanh range.


class Generator(nn.Module):
    def __init__(self, nz: int = 64, ngf: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 7, 1, 0, bias=False),        # (ngf*4, 7, 7)
            nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),   # (ngf*2, 14, 14)
            nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 1, 4, 2, 1, bias=False),         # (1, 28, 28)
            nn.Tanh(),
        )

    def forward(self, z: loom.Tensor) -> loom.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, ndf * 2, 4, 2, 1, bias=False),                  # (ndf*2, 14, 14)
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),            # (ndf*4, 7, 7)
            nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, 1, 7, 1, 0, bias=False),                  # (1, 1, 1): one logit
        )

    def forward(self, x: loom.Tensor) -> loom.Tensor:
        return self.net(x).flatten()


def weights_init(m: nn.Module) -> None:
    """DCGAN's initialisation: convolutions from N(0, 0.02), BatchNorm scales from N(1, 0.02)."""
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def save_grid(path: Path, images: np.ndarray, nrow: int = 8, pad: int = 2) -> Path:
    """Write (N, 1, H, W) images in [-1, 1] as one grey PNG, `nrow` per row, `pad` pixels apart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, _, h, w = images.shape
    rows = -(-n // nrow)
    grid = np.ones((rows * (h + pad) + pad, nrow * (w + pad) + pad), np.float32)
    for i, img in enumerate((images[:, 0] + 1) / 2):
        r, c = divmod(i, nrow)
        grid[pad + r * (h + pad):pad + r * (h + pad) + h, pad + c * (w + pad):pad + c * (w + pad) + w] = img
    grid = np.kron(np.clip(grid, 0, 1), np.ones((4, 4), np.float32))  # 4x larger, crisp pixels.
    path.parent.mkdir(parents=True, exist_ok=True)
    plt.imsave(path, grid, cmap="gray", vmin=0.0, vmax=1.0)
    return path


def main() -> None:
    p = fashion_parser("dcgan_fashion", __doc__)
    p.add_argument("--steps", type=int, default=1000, help="training steps (one discriminator and one generator "
                                                          "update each)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--nz", type=int, default=64, help="size of the noise vector")
    p.add_argument("--width", type=int, default=32, help="base channel count of both networks")
    p.add_argument("--lr", type=float, default=2e-4)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.batch_size = 8, 32

    loom.manual_seed(args.seed)
    data = load_images(args.data, fallback=not args.no_fallback, download=args.download)
    loader, _ = make_loaders(data, args.batch_size, args.seed, args.smoke)
    netG, netD = Generator(args.nz, args.width), Discriminator(args.width)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCEWithLogitsLoss()
    optD = loom.optim.Adam(netD.parameters(), lr=args.lr, betas=(0.5, 0.999))
    optG = loom.optim.Adam(netG.parameters(), lr=args.lr, betas=(0.5, 0.999))
    fixed_noise = loom.randn(64, args.nz, 1, 1)
    print(f"{data.name}: {len(loader.dataset)} training images; DCGAN (nz {args.nz}, width {args.width}), Adam lr "
          f"{args.lr} betas (0.5, 0.999), batch {args.batch_size}, {args.steps} steps "
          f"({args.steps / len(loader):.2f} epochs)")

    hist: dict[str, list[float]] = {"loss_d": [], "loss_g": [], "d_real": [], "d_fake": []}
    timer = Timer()
    bar = progress(total=args.steps, desc="dcgan", disable=args.no_progress)
    batches = iter(loader)
    for _ in range(args.steps):
        try:
            real, _ = next(batches)
        except StopIteration:  # A new epoch: a fresh shuffle.
            batches = iter(loader)
            real, _ = next(batches)
        real = to_tanh_range(real)
        n = real.shape[0]
        ones, zeros = loom.ones(n), loom.zeros(n)

        # Discriminator: push D(real) up and D(G(z)) down.
        fake = netG(loom.randn(n, args.nz, 1, 1))
        out_real, out_fake = netD(real), netD(fake.detach())
        loss_d = criterion(out_real, ones) + criterion(out_fake, zeros)
        optD.zero_grad()
        loss_d.backward()
        optD.step()

        # Generator: make D call its images real (the non-saturating loss).
        loss_g = criterion(netD(fake), ones)
        optG.zero_grad()
        loss_g.backward()
        optG.step()

        hist["loss_d"].append(loss_d.item())
        hist["loss_g"].append(loss_g.item())
        hist["d_real"].append(out_real.sigmoid().mean().item())
        hist["d_fake"].append(out_fake.sigmoid().mean().item())
        bar.update(1)
        bar.set_postfix(loss_d=f"{hist['loss_d'][-1]:.3f}", loss_g=f"{hist['loss_g'][-1]:.3f}")
    bar.close()
    seconds = timer.elapsed()

    out = out_dir(args.out)
    with loom.no_grad():
        samples = netG(fixed_noise).numpy()
    grid = save_grid(out / "samples.png", samples)
    steps = list(range(1, args.steps + 1))
    png = plot_curves(out / "loss.png", {"discriminator": (steps, hist["loss_d"]),
                                         "generator": (steps, hist["loss_g"])},
                      xlabel="step", ylabel="binary cross-entropy", title=f"DCGAN on {data.name}")
    loom.save(netG.state_dict(), out / "generator.safetensors")
    tail = max(1, args.steps // 10)
    final = {k: float(np.mean(v[-tail:])) for k, v in hist.items()}
    write_metrics(out, data=data.name, steps=args.steps, seconds=seconds, seconds_per_step=seconds / args.steps,
                  final=final, **hist)
    print(f"{args.steps} steps in {fmt_seconds(seconds)} ({seconds / args.steps:.2f} s per step); over the last "
          f"{tail} steps: loss D {final['loss_d']:.3f}, loss G {final['loss_g']:.3f}, D(real) {final['d_real']:.3f}, "
          f"D(G(z)) {final['d_fake']:.3f}")
    print(f"samples: {grid}; loss curves: {png}")


if __name__ == "__main__":
    main()

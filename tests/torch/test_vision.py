"""loom.torch.vision: transforms against Pillow and torchvision's documented semantics, PNG output, datasets on disk."""
import doctest
import gzip
import importlib
import io
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

import loom
from loom.errors import LoomError
from loom.torch.vision import datasets, transforms as T, utils
from loom.torch.vision.transforms import functional as TF

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageOps  # noqa: E402

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (13, 17, 3), dtype=np.uint8)
GREY = RNG.integers(0, 256, (13, 17), dtype=np.uint8)


@pytest.mark.parametrize("name", ["loom.torch.vision", "loom.torch.vision.transforms", "loom.torch.vision.utils",
                                  "loom.torch.vision.datasets", "loom.torch.vision.transforms.functional",
                                  "loom.torch.vision.models"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), extraglobs={"loom": loom, "np": np},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_to_tensor_pil_array_and_pil_to_tensor():
    for arr in (RGB, GREY):
        for pic in (Image.fromarray(arr), arr):
            x = T.ToTensor()(pic)
            chw = arr.transpose(2, 0, 1) if arr.ndim == 3 else arr[None]
            assert x.dtype is loom.float32 and x.shape == chw.shape
            np.testing.assert_allclose(x.numpy(), chw / np.float32(255), rtol=0, atol=1e-7)
        assert T.PILToTensor()(Image.fromarray(arr)).tolist() == (arr.transpose(2, 0, 1) if arr.ndim == 3
                                                                    else arr[None]).tolist()
    x = T.Normalize((0.5, 0.25, 0.0), (0.5, 0.5, 2.0))(T.ToTensor()(Image.fromarray(RGB)))
    np.testing.assert_allclose(x[1].numpy(), (RGB[:, :, 1] / 255 - 0.25) / 0.5, atol=1e-6)


@pytest.mark.parametrize("mode,pil_filter", [("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC),
                                             ("nearest", Image.NEAREST)])
@pytest.mark.parametrize("size", [(5, 7), (20, 30), (13, 9)])
def test_resize_matches_pillow(mode, pil_filter, size):
    f = RNG.random((13, 17)).astype(np.float32)
    ref = np.asarray(Image.fromarray(f).resize(size[::-1], pil_filter))
    out = T.Resize(size, interpolation=mode)(f)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=1e-6)
    t = T.Resize(size, interpolation=mode)(loom.tensor(np.stack([f, 2 * f])))  # A [C, H, W] tensor.
    np.testing.assert_allclose(t.numpy(), np.stack([ref, 2 * ref]), atol=1e-5)
    u8 = T.Resize(size, interpolation=mode)(RGB)
    pil = T.Resize(size, interpolation=mode)(Image.fromarray(RGB))
    assert isinstance(pil, Image.Image) and pil.size == size[::-1]
    assert np.abs(u8.astype(int) - np.asarray(pil).astype(int)).max() <= 1


def test_resize_int_keeps_aspect_ratio_as_torchvision():
    # torchvision: the short side becomes `size`, the long one int(size * long / short).
    assert T.Resize(10)(np.zeros((15, 37), np.uint8)).shape == (10, 24)
    assert T.Resize(10)(Image.fromarray(np.zeros((37, 15), np.uint8))).size == (10, 24)
    assert T.Resize(10, max_size=20)(np.zeros((15, 37), np.uint8)).shape == (8, 20)
    assert T.Resize((4, 6))(loom.zeros(2, 3, 8, 8)).shape == (2, 3, 4, 6)
    with pytest.raises(loom.LoomValueError, match="max_size"):
        T.Resize(10, max_size=10)(np.zeros((15, 37), np.uint8))


def test_resize_of_a_tensor_that_requires_grad_is_differentiable():
    x = loom.tensor(RNG.random((1, 4, 6)).astype(np.float32), requires_grad=True)
    y = T.Resize((2, 3))(x)
    np.testing.assert_allclose(y.detach().numpy(), T.Resize((2, 3))(x.detach()).numpy(), atol=1e-6)
    y.sum().backward()
    # y = Wh x Ww^T, so d(sum y)/dx = outer(column sums of Wh, column sums of Ww).
    wh, ww = T.resample_matrix(4, 2), T.resample_matrix(6, 3)
    np.testing.assert_allclose(x.grad.numpy()[0], np.outer(wh.sum(0), ww.sum(0)), atol=1e-6)


def test_center_crop_rounds_and_pads_as_torchvision():
    img = np.arange(25, dtype=np.uint8).reshape(5, 5)
    # top = left = int(round((5 - 2) / 2)) = round(1.5) = 2.
    assert T.CenterCrop(2)(img).tolist() == [[12, 13], [17, 18]]
    assert np.asarray(T.CenterCrop(2)(Image.fromarray(img))).tolist() == [[12, 13], [17, 18]]
    small = np.array([[1, 2], [3, 4]], np.uint8)
    # A 3x5 crop of 2x2: pads (left 1, top 0, right 2, bottom 1) with zeros.
    expected = [[0, 1, 2, 0, 0], [0, 3, 4, 0, 0], [0, 0, 0, 0, 0]]
    assert T.CenterCrop((3, 5))(small).tolist() == expected
    assert np.asarray(T.CenterCrop((3, 5))(Image.fromarray(small))).tolist() == expected
    assert T.CenterCrop(2)(loom.tensor(img[None])).tolist() == [[[12, 13], [17, 18]]]


def test_pad_modes_match_numpy_and_pil():
    for mode, np_mode in (("constant", "constant"), ("edge", "edge"), ("reflect", "reflect"),
                          ("symmetric", "symmetric")):
        out = T.Pad((1, 2, 3, 1), padding_mode=mode)(GREY)
        np.testing.assert_array_equal(out, np.pad(GREY, ((2, 1), (1, 3)), mode=np_mode))
    pil = T.Pad(2, fill=7)(Image.fromarray(RGB))
    assert isinstance(pil, Image.Image) and pil.size == (21, 17)
    np.testing.assert_array_equal(np.asarray(ImageOps.expand(Image.fromarray(RGB), 2, fill=(7, 7, 7))), pil)


def test_random_crop_and_flips_keep_pil_and_agree_with_arrays():
    for cls in (T.RandomCrop,):
        a = cls(8, padding=2, generator=np.random.default_rng(3))(GREY)
        b = cls(8, padding=2, generator=np.random.default_rng(3))(Image.fromarray(GREY))
        assert isinstance(b, Image.Image) and np.array_equal(a, np.asarray(b))
    flipped = T.RandomHorizontalFlip(p=1.0)(Image.fromarray(RGB))
    np.testing.assert_array_equal(np.asarray(flipped), np.asarray(ImageOps.mirror(Image.fromarray(RGB))))
    np.testing.assert_array_equal(np.asarray(T.RandomVerticalFlip(p=1.0)(Image.fromarray(GREY))), GREY[::-1])
    assert T.RandomHorizontalFlip(p=0.0)(GREY) is GREY


def test_grayscale_matches_pillow_and_torchvision_weights():
    pil = T.Grayscale()(Image.fromarray(RGB))
    assert pil.mode == "L"
    np.testing.assert_array_equal(T.Grayscale()(RGB), np.asarray(pil))
    three = T.Grayscale(3)(Image.fromarray(RGB))
    assert three.mode == "RGB" and np.array_equal(np.asarray(three)[:, :, 2], np.asarray(pil))
    x = T.ToTensor()(RGB)
    g = T.Grayscale(num_output_channels=3)(x)
    expected = 0.2989 * x[0].numpy() + 0.587 * x[1].numpy() + 0.114 * x[2].numpy()
    assert g.shape == (3, 13, 17)
    np.testing.assert_allclose(g[2].numpy(), expected, atol=1e-6)


def test_random_resized_crop_params_and_output():
    t = T.RandomResizedCrop((6, 4), generator=np.random.default_rng(0))
    for _ in range(20):
        top, left, h, w = t.get_params(RGB)
        assert 0 <= top and top + h <= 13 and 0 <= left and left + w <= 17
        area = h * w / (13 * 17)
        assert 0.08 * 0.8 <= area <= 1.0 and 3 / 4 * 0.7 <= w / h <= 4 / 3 * 1.3
    assert np.asarray(t(Image.fromarray(RGB))).shape == (6, 4, 3)
    # The whole image at its own aspect ratio: the crop is the image, so the result is a plain resize.
    whole = T.RandomResizedCrop((6, 8), scale=(1.0, 1.0), ratio=(17 / 13, 17 / 13))
    np.testing.assert_array_equal(whole(RGB), T.Resize((6, 8))(RGB))


def test_compose_lambda_pipeline_on_pil():
    t = T.Compose([T.Resize(32), T.CenterCrop(28), T.Grayscale(), T.ToTensor(), T.Lambda(lambda x: x * 2)])
    x = t(Image.fromarray(RGB))
    assert x.shape == (1, 28, 28) and x.max().item() <= 2.0


def test_make_grid_layout_by_hand():
    imgs = loom.tensor(np.arange(5 * 2 * 2, dtype=np.float32).reshape(5, 1, 2, 2))
    g = utils.make_grid(imgs, nrow=3, padding=1, pad_value=-1).numpy()
    assert g.shape == (3, 2 * 3 + 1, 3 * 3 + 1)  # 2 rows of 3 tiles, each 2x2 plus a 1-pixel border.
    np.testing.assert_array_equal(g[0, 1:3, 1:3], imgs[0, 0].numpy())
    np.testing.assert_array_equal(g[2, 4:6, 4:6], imgs[4, 0].numpy())  # Image 4: row 1, column 1.
    assert (g[:, 4:6, 7:9] == -1).all() and (g[:, 0, :] == -1).all()
    n = utils.make_grid(imgs, normalize=True).numpy()
    assert n.min() == 0.0 and n.max() == 1.0
    single = utils.make_grid(loom.ones(1, 2, 2))
    assert single.shape == (3, 2, 2)


def _read_png_by_hand(data: bytes) -> np.ndarray:
    """Decode an unfiltered 8-bit PNG without Pillow: check the chunks and CRCs, inflate IDAT."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + n
    w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    channels = {0: 1, 2: 3, 6: 4}[color]
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + w * channels)
    assert depth == 8 and (raw[:, 0] == 0).all() and b"IEND" in chunks
    return raw[:, 1:].reshape(h, w, channels).squeeze(-1) if channels == 1 else raw[:, 1:].reshape(h, w, channels)


def test_write_png_is_a_real_png(tmp_path):
    for pixels in (GREY, RGB):
        path = tmp_path / "x.png"
        utils.write_png(path, pixels)
        np.testing.assert_array_equal(_read_png_by_hand(path.read_bytes()), pixels)
        np.testing.assert_array_equal(np.asarray(Image.open(path)), pixels)


def test_save_image_writes_a_readable_png_with_every_writer(tmp_path, monkeypatch):
    batch = loom.tensor(RNG.random((4, 3, 5, 6)).astype(np.float32))
    expected = np.clip(utils.make_grid(batch, nrow=2).numpy() * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)
    utils.save_image(batch, tmp_path / "pil.png", nrow=2)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "pil.png").convert("RGB")), expected)
    buf = io.BytesIO()
    utils.save_image(batch, buf, format="png", nrow=2)
    assert buf.getvalue()[:4] == b"\x89PNG"

    import builtins
    real_import = builtins.__import__
    blocked = {"PIL"}

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] in blocked:
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    utils.save_image(batch, tmp_path / "mpl.png", nrow=2)  # matplotlib's writer.
    blocked.add("matplotlib")
    utils.save_image(batch, tmp_path / "own.png", nrow=2)  # loom's writer.
    with pytest.raises(loom.LoomValueError, match="only PNG"):
        utils.save_image(batch, tmp_path / "own.jpg")
    monkeypatch.undo()
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "mpl.png").convert("RGB")), expected)
    np.testing.assert_array_equal(_read_png_by_hand((tmp_path / "own.png").read_bytes()), expected)


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes()


def _mnist_raw(root, name: str, n: int = 6):
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    images = RNG.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = RNG.integers(0, 10, n, dtype=np.uint8)
    for split in ("train", "t10k"):
        (raw / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(images)))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx(labels))  # Uncompressed, as torchvision leaves it.
    return images, labels


@pytest.mark.parametrize("cls", [datasets.MNIST, datasets.FashionMNIST])
def test_mnist_from_a_local_raw_folder(tmp_path, cls):
    images, labels = _mnist_raw(tmp_path, cls.__name__)
    ds = cls(str(tmp_path), train=False)
    img, label = ds[1]
    assert isinstance(img, Image.Image) and img.mode == "L" and img.size == (28, 28)
    assert np.array_equal(np.asarray(img), images[1]) and label == int(labels[1]) and isinstance(label, int)
    assert ds.data.shape == (6, 28, 28) and ds.targets.dtype is loom.int64 and len(ds.classes) == 10
    assert ds.raw_folder == str(tmp_path / cls.__name__ / "raw") and "Number of datapoints: 6" in repr(ds)
    ds = cls(tmp_path, transform=T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))]),
             target_transform=lambda y: y + 100)
    x, y = next(iter(loom.data.DataLoader(ds, batch_size=4)))
    assert x.shape == (4, 1, 28, 28) and x.dtype is loom.float32 and y.tolist() == (labels[:4] + 100).tolist()
    np.testing.assert_allclose(x[0, 0].numpy(), (images[0] / 255 - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)


def test_mnist_without_pillow_gives_arrays_that_to_tensor_accepts(tmp_path, monkeypatch):
    images, _ = _mnist_raw(tmp_path, "MNIST")
    monkeypatch.setattr(datasets, "Image", None)
    img, _ = datasets.MNIST(tmp_path, train=False)[0]
    assert isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.shape == (28, 28)
    x = T.Compose([T.RandomCrop(28, padding=2), T.Resize(14), T.ToTensor()])(img)
    assert x.shape == (1, 14, 14)


def test_mnist_missing_names_the_raw_folder_and_url(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        datasets.MNIST(tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte.gz") in msg and "download=True" in msg
    assert "https://" in msg


def test_cifar10_from_the_torchvision_folder(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = RNG.integers(0, 256, (3, 3072), dtype=np.uint8)
    (folder / "test_batch").write_bytes(pickle.dumps({"data": data, "labels": [3, 1, 4]}, protocol=2))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    ds = datasets.CIFAR10(str(tmp_path), train=False)
    img, label = ds[2]
    assert isinstance(img, Image.Image) and img.mode == "RGB" and img.size == (32, 32) and label == 4
    np.testing.assert_array_equal(np.asarray(img), data[2].reshape(3, 32, 32).transpose(1, 2, 0))
    assert ds.data.shape == (3, 32, 32, 3) and ds.targets == [3, 1, 4] and ds.class_to_idx["c4"] == 4
    x, _ = datasets.CIFAR10(tmp_path, train=False, transform=T.ToTensor())[0]
    assert x.shape == (3, 32, 32)


def test_functional_matches_the_classes_and_torchvision_crop_semantics():
    img = Image.fromarray(RGB)
    assert np.array_equal(np.asarray(TF.hflip(img)), RGB[:, ::-1]) and np.array_equal(TF.vflip(GREY), GREY[::-1])
    assert np.array_equal(TF.resize(RGB, [6]), T.Resize(6)(RGB)) and TF.get_image_size(img) == [17, 13]
    assert TF.get_dimensions(img) == [3, 13, 17] and TF.get_dimensions(T.ToTensor()(GREY)) == [1, 13, 17]
    # crop past the border reads zeros (torchvision pads): 2 rows from row 12 of 13, 3 columns from column -1.
    out = TF.crop(GREY, 12, -1, 2, 3)
    assert out.tolist() == [[0, *GREY[12, :2].tolist()], [0, 0, 0]]
    assert np.asarray(TF.crop(Image.fromarray(GREY), 12, -1, 2, 3)).tolist() == out.tolist()
    x = TF.resized_crop(T.ToTensor()(RGB), 2, 3, 8, 8, [4, 4])
    assert x.shape == (3, 4, 4)
    np.testing.assert_allclose(TF.normalize(TF.to_tensor(GREY), [0.5], [0.5]).numpy(),
                               (GREY / np.float32(255) - 0.5)[None] / 0.5, atol=1e-6)
    assert np.asarray(TF.to_grayscale(img)).tolist() == np.asarray(img.convert("L")).tolist()


def test_image_folder_and_dataset_folder(tmp_path):
    for cls, colour in (("dog", (200, 10, 10)), ("cat", (10, 200, 10))):
        (tmp_path / cls / "sub").mkdir(parents=True)
        Image.new("RGB", (5, 4), colour).save(tmp_path / cls / "a.png")
        Image.new("L", (5, 4), 7).save(tmp_path / cls / "sub" / "b.PNG")
        (tmp_path / cls / "notes.txt").write_text("not an image")
    ds = datasets.ImageFolder(str(tmp_path), transform=T.ToTensor())
    assert ds.classes == ["cat", "dog"] and ds.class_to_idx == {"cat": 0, "dog": 1} and ds.targets == [0, 0, 1, 1]
    x, y = ds[2]
    assert y == 1 and x.shape == (3, 4, 5) and abs(x[0, 0, 0].item() - 200 / 255) < 1e-6
    grey_as_rgb, _ = datasets.ImageFolder(tmp_path)[1]
    assert grey_as_rgb.mode == "RGB" and grey_as_rgb.getpixel((0, 0)) == (7, 7, 7)
    texts = datasets.DatasetFolder(tmp_path, loader=lambda p: Path(p).read_text(), extensions=(".txt",))
    assert len(texts) == 2 and texts[1] == ("not an image", 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        datasets.ImageFolder(tmp_path)
    assert len(datasets.ImageFolder(tmp_path, allow_empty=True).classes) == 3
    with pytest.raises(FileNotFoundError, match="no class folder"):
        datasets.ImageFolder(tmp_path / "empty")


def test_fake_data_is_deterministic_per_index():
    ds = datasets.FakeData(size=5, image_size=(1, 6, 4), num_classes=3)
    a, b = ds[2], ds[2]
    assert a[0].mode == "L" and a[0].size == (4, 6) and np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
    assert a[1] == b[1] and all(0 <= ds[i][1] < 3 for i in range(5))
    assert not np.array_equal(np.asarray(ds[0][0]), np.asarray(ds[1][0]))
    with pytest.raises(IndexError):
        ds[5]


NO_PILLOW = textwrap.dedent("""
    import gzip, sys, importlib.abc
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "PIL":
                raise ImportError("Pillow is blocked for this test")
    sys.meta_path.insert(0, Block())
    import numpy as np
    from pathlib import Path
    from loom.torch.vision import datasets, transforms as T, utils
    root = Path(sys.argv[1])
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    def idx(a):
        return bytes([0, 0, 8, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape) + a.tobytes()
    imgs = np.arange(2 * 28 * 28, dtype=np.uint64).reshape(2, 28, 28).astype(np.uint8)
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(imgs)))
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(np.array([4, 2], np.uint8))))
    ds = datasets.MNIST(str(root), train=False,
                        transform=T.Compose([T.Pad(2), T.CenterCrop(28), T.RandomHorizontalFlip(0.0),
                                             T.Resize(14), T.ToTensor()]))
    x, y = ds[1]
    raw_img, _ = datasets.MNIST(str(root), train=False)[1]
    assert type(raw_img) is np.ndarray and raw_img.shape == (28, 28) and y == 2 and x.shape == (1, 14, 14)
    utils.save_image(x, root / "x.png")
    assert "PIL" not in sys.modules and "matplotlib.image" not in sys.modules
    print("ok", (root / "x.png").read_bytes()[:4])
""")


def test_everything_works_without_pillow(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", NO_PILLOW, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ok b'\\x89PNG'" in proc.stdout
    # Written by loom's own PNG writer (Pillow and matplotlib were unavailable there); it reads back here.
    assert _read_png_by_hand((tmp_path / "x.png").read_bytes()).shape == (14, 14, 3)
    assert Image.open(tmp_path / "x.png").size == (14, 14)


def test_random_apply_choice_grayscale_and_convert_dtype():
    add = T.Lambda(lambda v: v + 1)
    assert T.RandomApply([add, add], p=1.0)(0) == 2 and T.RandomApply([add], p=0.0)(0) == 0
    choose = T.RandomChoice([T.Lambda(lambda v: "a"), T.Lambda(lambda v: "b")], p=[1, 3],
                            generator=np.random.default_rng(0))
    picks = [choose(None) for _ in range(400)]
    assert 0.15 < picks.count("a") / 400 < 0.35  # p = 1/4.
    assert T.RandomChoice([add], generator=np.random.default_rng(0))(1) == 2
    grey = T.RandomGrayscale(p=1.0)(Image.fromarray(RGB))
    luma = np.asarray(Image.fromarray(RGB).convert("L"))
    assert grey.mode == "RGB" and np.array_equal(np.asarray(grey)[:, :, 0], luma)
    assert T.RandomGrayscale(p=0.0)(RGB) is RGB
    u8 = loom.tensor(np.array([[[0, 1, 128, 255]]], np.uint8))
    f = T.ConvertImageDtype(loom.float32)(u8)
    np.testing.assert_allclose(f.numpy(), [[[0, 1 / 255, 128 / 255, 1]]], rtol=1e-6)
    # torchvision: float -> uint8 is x * (255 + 1 - 0.001), truncated.
    assert T.ConvertImageDtype(loom.uint8)(loom.tensor([[[0.0, 0.5, 0.999, 1.0]]])).tolist() == [[[0, 127, 255, 255]]]
    assert T.ConvertImageDtype(loom.int32)(u8).tolist() == [[[0, 1 << 23, 128 << 23, 255 << 23]]]
    with pytest.raises(loom.LoomTypeError, match="ConvertImageDtype"):
        T.ConvertImageDtype(loom.float32)(RGB)


def test_torchvision_module_map_names_importable_modules():
    import loom.torch.vision as vision
    for tv_name, loom_name in vision.TORCHVISION_MODULES.items():
        module = importlib.import_module(loom_name)
        assert module.__name__ == loom_name and tv_name.split(".")[0] == "torchvision"
    assert vision.transforms.functional.hflip is TF.hflip


def test_color_jitter_pil_uses_image_enhance():
    from PIL import ImageEnhance
    img = Image.fromarray(RGB)
    for kw, enhancer in (("brightness", ImageEnhance.Brightness), ("contrast", ImageEnhance.Contrast),
                         ("saturation", ImageEnhance.Color)):
        out = T.ColorJitter(**{kw: (1.7, 1.7)})(img)
        assert np.array_equal(np.asarray(out), np.asarray(enhancer(img).enhance(1.7))), kw
    hue = T.ColorJitter(hue=(0.25, 0.25))(img)
    h = np.asarray(img.convert("HSV"))[:, :, 0].astype(int)
    shifted = np.asarray(hue.convert("HSV"))[:, :, 0].astype(int)
    assert hue.mode == "RGB" and np.mean(np.abs((shifted - h) % 256 - 64) <= 3) > 0.9  # 0.25 turn = 64 of 256.


def test_color_jitter_tensor_formulas_by_hand():
    import colorsys
    x = loom.tensor(RNG.random((3, 4, 5)).astype(np.float32))
    a = x.numpy().astype(np.float64)
    grey = 0.2989 * a[0] + 0.587 * a[1] + 0.114 * a[2]
    cases = {"brightness": np.clip(1.5 * a, 0, 1), "contrast": np.clip(0.6 * a + 0.4 * grey.mean(), 0, 1),
             "saturation": np.clip(0.3 * a + 0.7 * grey, 0, 1)}
    for kw, expected in cases.items():
        f = {"brightness": 1.5, "contrast": 0.6, "saturation": 0.3}[kw]
        np.testing.assert_allclose(T.ColorJitter(**{kw: (f, f)})(x).numpy(), expected, atol=1e-6, err_msg=kw)
    out = T.ColorJitter(hue=(0.1, 0.1))(x).numpy()
    for i, j in ((0, 0), (2, 3), (3, 4)):
        h, s, v = colorsys.rgb_to_hsv(*a[:, i, j])
        np.testing.assert_allclose(out[:, i, j], colorsys.hsv_to_rgb((h + 0.1) % 1.0, s, v), atol=1e-6)
    red = loom.tensor(np.array([1.0, 0.0, 0.0], np.float32).reshape(3, 1, 1))
    assert T.ColorJitter(hue=(0.5, 0.5))(red).flatten().tolist() == [0.0, 1.0, 1.0]


def test_color_jitter_uint8_arrays_order_and_ranges():
    img = np.array([[[100, 200, 0]]], np.uint8)
    assert T.ColorJitter(brightness=(1.5, 1.5))(img).tolist() == [[[150, 255, 0]]]
    assert T.ColorJitter()(img) is img
    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1, generator=np.random.default_rng(1))
    order, factors = jitter.get_params()
    assert sorted(order) == [0, 1, 2, 3] and all(0.6 <= f <= 1.4 for f in factors[:3]) and -0.1 <= factors[3] <= 0.1
    out = jitter(Image.fromarray(RGB))
    assert out.size == (17, 13) and out.mode == "RGB"
    with pytest.raises(loom.LoomValueError, match="hue"):
        T.ColorJitter(hue=0.6)


def test_resnet_models_have_torchvisions_structure_and_run():
    from loom.torch.vision import models
    # torchvision's parameter counts for these constructors.
    assert sum(p.numel() for p in models.resnet18().parameters()) == 11689512
    assert sum(p.numel() for p in models.resnet50().parameters()) == 25557032
    assert sum(p.numel() for p in models.resnext50_32x4d().parameters()) == 25028904
    m = models.resnet18(num_classes=10)
    sd = m.state_dict()
    assert len(sd) == 122 and "layer2.0.downsample.0.weight" in sd and "layer4.1.bn2.num_batches_tracked" in sd
    assert tuple(sd["fc.weight"].shape) == (10, 512)
    m.eval()
    with loom.no_grad():
        assert tuple(m(loom.randn(2, 3, 32, 32)).shape) == (2, 10)
    with pytest.raises(LoomError, match="pretrained weights are not downloaded"):
        models.resnet18(weights="IMAGENET1K_V1")
    with pytest.raises(LoomError, match="pretrained weights are not downloaded"):
        models.resnet50(pretrained=True)

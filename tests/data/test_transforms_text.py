"""Image transforms (torchvision semantics, NumPy HWC and loom CHW inputs) and the char/byte tokenizers."""
import numpy as np
import pytest
import torch

import loom
from loom.data import transforms as T
from loom.data.text import ByteTokenizer, CharTokenizer


def test_to_tensor_like_torchvision():
    img = np.random.default_rng(0).integers(0, 256, (5, 4, 3), dtype=np.uint8)
    x = T.ToTensor()(img)
    assert x.shape == (3, 5, 4) and x.dtype is loom.float32
    ref = torch.from_numpy(img.transpose(2, 0, 1).copy()).float().div(255)  # torchvision's ToTensor for uint8.
    np.testing.assert_array_equal(x.numpy(), ref.numpy())
    grey = T.ToTensor()(np.full((2, 3), 255, np.uint8))
    assert grey.shape == (1, 2, 3) and grey.tolist() == [[[1.0] * 3] * 2]
    f = T.ToTensor()(np.full((2, 2, 1), 7.0, np.float64))
    assert f.dtype is loom.float64 and f.max().item() == 7.0  # Non-uint8 keeps values and dtype.
    assert T.ToTensor()(loom.tensor(img)).tolist() == x.tolist()
    with pytest.raises(ValueError):
        T.ToTensor()(np.zeros((1, 2, 3, 4), np.uint8))


def test_normalize_tensor_and_array():
    x = loom.rand(2, 3, 4, 4)
    out = T.Normalize([0.1, 0.2, 0.3], [0.5, 0.25, 2.0])(x)
    ref = (torch.from_numpy(x.numpy()) - torch.tensor([0.1, 0.2, 0.3]).view(3, 1, 1)) / \
        torch.tensor([0.5, 0.25, 2.0]).view(3, 1, 1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)
    arr = np.ones((1, 2, 2), np.float32)
    assert T.Normalize([0.5], [0.25])(arr).tolist() == [[[2.0, 2.0], [2.0, 2.0]]]
    with pytest.raises(ValueError, match="zero"):
        T.Normalize([0.0], [0.0])
    with pytest.raises(ValueError, match="channels"):
        T.Normalize([0.0, 0.0], [1.0, 1.0])(loom.zeros(3, 2, 2))
    with pytest.raises(TypeError):
        T.Normalize([0.0], [1.0])(loom.zeros(1, 2, 2, dtype=loom.int64))


def test_random_crop_windows_and_padding_modes():
    img = np.arange(25, dtype=np.uint8).reshape(5, 5, 1)
    rng = np.random.default_rng(0)
    for _ in range(20):
        out = T.RandomCrop(3, generator=rng)(img)
        top, left = divmod(int(out[0, 0, 0]), 5)
        np.testing.assert_array_equal(out, img[top:top + 3, left:left + 3])
    padded = T.RandomCrop(7, padding=1, generator=rng)(img)
    assert padded.shape == (7, 7, 1) and padded[0].sum() == 0 and padded[1:6, 1:6].tolist() == img.tolist()
    edge = T.RandomCrop(7, padding=1, padding_mode="edge", generator=rng)(img)
    assert edge[0, 0, 0] == 0 and edge[6, 6, 0] == 24
    refl = T.RandomCrop((5, 7), padding=(1, 0), padding_mode="reflect")(img)
    assert refl[:, 0, 0].tolist() == img[:, 1, 0].tolist()
    sym = T.RandomCrop((5, 7), padding=(1, 0), padding_mode="symmetric")(img)
    assert sym[:, 0, 0].tolist() == img[:, 0, 0].tolist()
    grown = T.RandomCrop(6, pad_if_needed=True, fill=9)(img)
    assert grown.shape == (6, 6, 1) and (grown == 9).any()
    with pytest.raises(ValueError, match="larger than"):
        T.RandomCrop(6)(img)


def test_random_crop_on_tensors_matches_arrays():
    chw = loom.arange(2 * 5 * 5, dtype=loom.float32).reshape(2, 5, 5)
    hwc = chw.numpy().transpose(1, 2, 0)
    for mode in ("constant", "edge", "reflect", "symmetric"):
        a = T.RandomCrop(5, padding=2, padding_mode=mode, generator=np.random.default_rng(3))(chw)
        b = T.RandomCrop(5, padding=2, padding_mode=mode, generator=np.random.default_rng(3))(hwc)
        assert isinstance(a, loom.Tensor) and a.shape == (2, 5, 5)
        np.testing.assert_array_equal(a.numpy(), b.transpose(2, 0, 1))
    batched = T.RandomCrop(3)(loom.zeros(4, 2, 5, 5))
    assert batched.shape == (4, 2, 3, 3)


def test_flips_probability_and_layouts():
    t = loom.arange(6).reshape(1, 2, 3)
    assert T.RandomHorizontalFlip(p=1.0)(t).tolist() == [[[2, 1, 0], [5, 4, 3]]]
    assert T.RandomHorizontalFlip(p=0.0)(t).tolist() == t.tolist()
    assert T.RandomVerticalFlip(p=1.0)(t).tolist() == [[[3, 4, 5], [0, 1, 2]]]
    hwc = np.arange(6).reshape(2, 3, 1)
    assert T.RandomHorizontalFlip(p=1.0)(hwc)[:, :, 0].tolist() == [[2, 1, 0], [5, 4, 3]]
    flips = [T.RandomHorizontalFlip(generator=np.random.default_rng(0))(hwc)[0, 0, 0] == 2 for _ in range(1)]
    rng = np.random.default_rng(1)
    flips = [T.RandomHorizontalFlip(generator=rng)(hwc)[0, 0, 0] == 2 for _ in range(400)]
    assert 0.4 < np.mean(flips) < 0.6
    with pytest.raises(ValueError):
        T.RandomHorizontalFlip(p=2)


def test_default_randomness_is_seedable():
    pipeline = T.Compose([T.RandomCrop(3, padding=1), T.RandomHorizontalFlip(), T.Lambda(lambda a: a * 2)])
    img = np.arange(16, dtype=np.float32).reshape(4, 4, 1)
    with T.use_rng(np.random.default_rng(42)):
        a = [pipeline(img) for _ in range(5)]
    with T.use_rng(42):
        b = [pipeline(img) for _ in range(5)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    T.manual_seed(7)
    c = [pipeline(img) for _ in range(5)]
    T.manual_seed(7)
    d = [pipeline(img) for _ in range(5)]
    assert all(np.array_equal(x, y) for x, y in zip(c, d))
    assert "RandomCrop" in repr(pipeline)
    with pytest.raises(TypeError):
        T.Lambda(3)


def test_char_tokenizer_round_trip_and_save_load(tmp_path):
    text = "To be, or not to be: that is the question.\n"
    tok = CharTokenizer(text)
    assert tok.vocab == sorted(set(text)) and tok.vocab_size == len(set(text)) == len(tok)
    ids = tok.encode(text)
    assert tok.decode(ids) == text and tok.decode(np.array(ids)) == text and tok.decode(loom.tensor(ids)) == text
    assert tok.encode_array(text).tolist() == ids and tok.encode_array(text).dtype == np.int64
    assert all(tok.itos[tok.stoi[c]] == c for c in tok.vocab)
    with pytest.raises(ValueError, match="'Z' is not in the vocabulary"):
        tok.encode("Z")
    with pytest.raises(ValueError, match="'Z'"):
        tok.encode_array("abZ")
    with pytest.raises(ValueError):
        tok.decode([999])
    tok.save(tmp_path / "tok.json")
    assert CharTokenizer.load(tmp_path / "tok.json") == tok
    ByteTokenizer().save(tmp_path / "b.json")
    with pytest.raises(loom.LoomError, match="not a saved char tokenizer"):
        CharTokenizer.load(tmp_path / "b.json")
    with pytest.raises(ValueError):
        CharTokenizer()


def test_byte_tokenizer_utf8_round_trip(tmp_path):
    tok = ByteTokenizer()
    for s in ["", "plain", "ünïcödé ☃ 日本語 🙂"]:
        ids = tok.encode(s)
        assert ids == list(s.encode("utf-8")) and all(0 <= i < 256 for i in ids) and tok.decode(ids) == s
        assert tok.encode_array(s).tolist() == ids
    assert tok.vocab_size == 256 and tok.decode([0xE2, 0x98]) == "\ufffd"
    with pytest.raises(ValueError):
        tok.decode([256])
    tok.save(tmp_path / "b.json")
    assert ByteTokenizer.load(tmp_path / "b.json").decode(tok.encode("é")) == "é"

"""PyTorch's zip checkpoint format: loom writes what torch.load reads, and reads what torch.save writes."""
import collections
import io
import struct
import zipfile

import numpy as np
import pytest
import torch

import loom
from loom.errors import LoomError


def _state(t):
    return t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()


def _loom_np(t):
    return t.float().numpy() if t.dtype is loom.bfloat16 else t.numpy()


DTYPES = [(loom.float32, torch.float32), (loom.float64, torch.float64), (loom.float16, torch.float16),
          (loom.bfloat16, torch.bfloat16), (loom.int64, torch.int64), (loom.int32, torch.int32),
          (loom.int16, torch.int16), (loom.int8, torch.int8), (loom.uint8, torch.uint8), (loom.bool, torch.bool)]


@pytest.mark.parametrize("ld,td", DTYPES, ids=[d[0].name for d in DTYPES])
def test_every_dtype_round_trips_both_ways(tmp_path, ld, td):
    values = [[0, 1, 1], [1, 0, 1]] if ld is loom.bool else [[-3.5, 0.25, 7], [100, -1, 2]]
    if ld in (loom.uint8,):
        values = [[0, 255, 7], [1, 2, 3]]
    lt = loom.tensor(values, dtype=ld)
    loom.io.torch_save({"x": lt}, tmp_path / "l.pt")
    tt = torch.load(tmp_path / "l.pt", weights_only=True)["x"]
    assert tt.dtype == td and tt.shape == (2, 3)
    np.testing.assert_array_equal(_state(tt), _loom_np(lt))
    torch.save({"x": tt}, tmp_path / "t.pt")
    back = loom.io.torch_load(tmp_path / "t.pt")["x"]
    assert back.dtype is ld
    np.testing.assert_array_equal(_loom_np(back), _loom_np(lt))


def test_loom_file_reads_in_torch_with_structure_and_plain_values(tmp_path):
    x = loom.arange(12.0).reshape(3, 4)
    obj = {"w": x, "nested": [loom.ones(2), (loom.zeros(1), {"deep": loom.tensor(5)})], "n": 3, "f": 1.5,
           "s": "text", "none": None, "flag": True, "od": collections.OrderedDict(a=1, b=loom.ones(1)),
           "dtype": loom.float16, "size": x.shape, "bytes": b"\x00\xff", "empty": loom.zeros(0, 3), 7: "int key"}
    loom.io.torch_save(obj, tmp_path / "m.pt")
    t = torch.load(tmp_path / "m.pt", weights_only=True)
    assert t["w"].tolist() == x.tolist()
    assert t["nested"][0].tolist() == [1.0, 1.0] and isinstance(t["nested"][1], tuple)
    assert t["nested"][1][1]["deep"].item() == 5 and t["nested"][1][1]["deep"].shape == ()
    assert (t["n"], t["f"], t["s"], t["none"], t["flag"], t[7]) == (3, 1.5, "text", None, True, "int key")
    assert type(t["od"]) is collections.OrderedDict and list(t["od"]) == ["a", "b"]
    assert t["dtype"] is torch.float16 and t["size"] == torch.Size([3, 4]) and isinstance(t["size"], torch.Size)
    assert t["bytes"] == b"\x00\xff" and t["empty"].shape == (0, 3)


def test_records_are_laid_out_as_pytorch_writes_them(tmp_path):
    loom.io.torch_save({"a": loom.ones(3), "b": loom.ones(5, dtype=loom.int64)}, tmp_path / "m.pt")
    with zipfile.ZipFile(tmp_path / "m.pt") as z:
        names = z.namelist()
        assert names[0] == "archive/data.pkl"
        assert {"archive/version", "archive/byteorder", "archive/.data/serialization_id",
                "archive/data/0", "archive/data/1"} <= set(names)
        assert z.read("archive/byteorder") == b"little" and z.read("archive/version") == b"3\n"
        assert len(z.read("archive/.data/serialization_id")) == 40
        assert z.read("archive/data.pkl")[:2] == b"\x80\x02"  # Protocol 2.
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        infos = z.infolist()
    raw = (tmp_path / "m.pt").read_bytes()
    for info in infos:
        n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
        assert (info.header_offset + 30 + n + e) % 64 == 0, info.filename


def test_shared_storage_and_views_survive_both_ways(tmp_path):
    base = loom.arange(20.0).reshape(4, 5)
    obj = {"base": base, "view": base[1:, 2:], "t": base.t(), "row": base[2], "strided": base[:, ::2]}
    loom.io.torch_save(obj, tmp_path / "l.pt")
    t = torch.load(tmp_path / "l.pt", weights_only=True)
    ptr = t["base"].untyped_storage().data_ptr()
    assert all(v.untyped_storage().data_ptr() == ptr for v in t.values())
    assert t["view"].storage_offset() == 7 and t["view"].stride() == (5, 1) and t["t"].stride() == (1, 5)
    for k, v in obj.items():
        assert t[k].tolist() == v.tolist(), k
    with zipfile.ZipFile(tmp_path / "l.pt") as z:
        assert [n for n in z.namelist() if "/data/" in n] == ["archive/data/0"]  # One storage, written once.

    tb = torch.arange(20.0).reshape(4, 5)
    torch.save({"base": tb, "view": tb[1:, 2:], "t": tb.t(), "strided": tb[:, ::2]}, tmp_path / "t.pt")
    r = loom.io.torch_load(tmp_path / "t.pt")
    assert r["view"].tolist() == tb[1:, 2:].tolist() and r["t"].tolist() == tb.t().tolist()
    assert r["strided"].tolist() == tb[:, ::2].tolist()
    r["base"][1, 2] = -1.0  # They share storage in loom too, as in PyTorch.
    assert r["view"][0, 0].item() == -1.0 and r["t"][2, 1].item() == -1.0


def test_lone_views_and_offsets_from_torch(tmp_path):
    big = torch.arange(30.0)
    torch.save({"tail": big[10:20], "mat": big[:24].reshape(4, 6).t()[1:]}, tmp_path / "t.pt")
    r = loom.io.torch_load(tmp_path / "t.pt")
    assert r["tail"].tolist() == big[10:20].tolist()
    assert r["mat"].tolist() == big[:24].reshape(4, 6).t()[1:].tolist()


def test_file_objects_both_ways():
    buf = io.BytesIO()
    loom.io.torch_save({"w": loom.ones(2, 2)}, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    buf.seek(0)
    assert loom.io.torch_load(buf)["w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    tbuf = io.BytesIO()
    torch.save({"w": torch.full((3,), 2.0)}, tbuf)
    tbuf.seek(0)
    assert loom.io.torch_load(tbuf)["w"].tolist() == [2.0, 2.0, 2.0]
    tbuf.seek(0)
    assert loom.load(tbuf)["w"].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(LoomError, match="from a path"):
        loom.load(io.BytesIO(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "))


def test_state_dict_from_torch_loads_into_loom_module(tmp_path):
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    torch.save(tm.state_dict(), tmp_path / "sd.pt")
    sd = loom.load(tmp_path / "sd.pt")  # loom.load routes a PyTorch file to torch_load.
    assert isinstance(sd, collections.OrderedDict) and list(sd) == list(tm.state_dict())
    lm = loom.nn.Sequential(loom.nn.Linear(4, 3), loom.nn.ReLU(), loom.nn.Linear(3, 2))
    lm.load_state_dict(sd)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(lm(loom.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-6)
    loom.io.torch_save(lm.state_dict(), tmp_path / "back.pt")
    tm2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    tm2.load_state_dict(torch.load(tmp_path / "back.pt", weights_only=True))
    for a, b in zip(tm.parameters(), tm2.parameters()):
        assert torch.equal(a, b)


def test_optimizer_state_dict_round_trips(tmp_path):
    tw = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    topt = torch.optim.Adam([tw], lr=0.1)
    for _ in range(3):
        topt.zero_grad()
        (tw ** 2).sum().backward()
        topt.step()
    torch.save(topt.state_dict(), tmp_path / "opt.pt")
    sd = loom.io.torch_load(tmp_path / "opt.pt")
    assert sd["state"][0]["step"].item() == 3.0 and sd["param_groups"][0]["params"] == [0]
    lw = loom.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with loom.no_grad():
        lw.copy_(loom.tensor(tw.detach().numpy()))
    lopt = loom.optim.Adam([lw], lr=0.1)
    lopt.load_state_dict(sd)
    for _ in range(2):
        lopt.zero_grad()
        topt.zero_grad()
        (lw ** 2).sum().backward()
        (tw ** 2).sum().backward()
        lopt.step()
        topt.step()
    np.testing.assert_allclose(lw.detach().numpy(), tw.detach().numpy(), rtol=1e-6)
    loom.io.torch_save(lopt.state_dict(), tmp_path / "lopt.pt")
    back = torch.load(tmp_path / "lopt.pt", weights_only=True)
    assert back["state"][0]["step"].item() == 5.0
    np.testing.assert_allclose(back["state"][0]["exp_avg"].numpy(), topt.state_dict()["state"][0]["exp_avg"].numpy(),
                               rtol=1e-6)
    assert back["param_groups"][0]["betas"] == (0.9, 0.999)


def test_parameters_keep_their_type_and_requires_grad(tmp_path):
    torch.save({"p": torch.nn.Parameter(torch.ones(2)), "frozen": torch.nn.Parameter(torch.ones(1), False)},
               tmp_path / "t.pt")
    r = loom.io.torch_load(tmp_path / "t.pt")
    assert isinstance(r["p"], loom.nn.Parameter) and r["p"].requires_grad
    assert not r["frozen"].requires_grad
    loom.io.torch_save({"p": loom.nn.Parameter(loom.ones(2))}, tmp_path / "l.pt")
    assert isinstance(torch.load(tmp_path / "l.pt", weights_only=True)["p"], torch.nn.Parameter)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_restricted_unpickler_refuses_foreign_classes(tmp_path, capsys):
    torch.save({"x": torch.ones(1), "evil": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(LoomError, match=r"refuses to unpickle the global builtins\.print"):
        loom.io.torch_load(tmp_path / "evil.pt")
    with pytest.raises(LoomError, match="weights_only=False"):
        loom.load(tmp_path / "evil.pt")
    assert capsys.readouterr().out == ""
    torch.save({"arr": np.ones(2)}, tmp_path / "np.pt")
    with pytest.raises(LoomError, match="numpy"):
        loom.io.torch_load(tmp_path / "np.pt")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    with pytest.raises(LoomError, match="torch.nn.modules.linear.Linear"):
        loom.io.torch_load(tmp_path / "module.pt")
    with pytest.raises(LoomError, match="state_dict"):
        loom.io.torch_load(tmp_path / "module.pt", weights_only=False)


def test_whole_loom_module_with_weights_only_false(tmp_path):
    m = loom.nn.Sequential(loom.nn.Linear(3, 2), loom.nn.Tanh())
    loom.io.torch_save(m, tmp_path / "m.pt")
    with pytest.raises(LoomError, match="refuses to unpickle the global loom.nn"):
        loom.io.torch_load(tmp_path / "m.pt")
    m2 = loom.io.torch_load(tmp_path / "m.pt", weights_only=False)
    assert type(m2) is loom.nn.Sequential
    x = loom.ones(4, 3)
    np.testing.assert_array_equal(m2(x).detach().numpy(), m(x).detach().numpy())
    assert isinstance(m2[0].weight, loom.nn.Parameter) and m2[0].weight.requires_grad


def test_unsupported_content_gives_clear_errors(tmp_path):
    torch.save({"c": torch.ones(2, dtype=torch.float8_e4m3fn)}, tmp_path / "c.pt")
    with pytest.raises(LoomError, match="UntypedStorage"):
        loom.io.torch_load(tmp_path / "c.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(LoomError, match="legacy"):
        loom.io.torch_load(tmp_path / "legacy.pt")
    with pytest.raises(LoomError, match="legacy torch.save"):
        loom.load(tmp_path / "legacy.pt")
    with pytest.raises(LoomError, match="CPU only"):
        loom.io.torch_load(tmp_path / "legacy.pt", map_location="cuda:0")
    with pytest.raises(FileNotFoundError):
        loom.io.torch_load(tmp_path / "missing.pt")


def test_truncated_and_corrupt_archives_give_loom_errors(tmp_path):
    torch.save({"w": torch.arange(100.0), "b": torch.ones(3)}, tmp_path / "t.pt")
    raw = (tmp_path / "t.pt").read_bytes()
    for cut in (10, len(raw) // 2, len(raw) - 30):
        (tmp_path / "cut.pt").write_bytes(raw[:cut])
        with pytest.raises(LoomError, match="loom.io.torch_load"):
            loom.io.torch_load(tmp_path / "cut.pt")
    with zipfile.ZipFile(tmp_path / "t.pt") as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    at = info.header_offset + 30 + n + e + 40
    flipped = raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:]
    (tmp_path / "flip.pt").write_bytes(flipped)
    with pytest.raises(LoomError, match="CRC"):
        loom.io.torch_load(tmp_path / "flip.pt")
    with zipfile.ZipFile(tmp_path / "nodata.pt", "w") as z:
        z.writestr("archive/data.pkl", zipfile.ZipFile(tmp_path / "t.pt").read("t/data.pkl"))
    with pytest.raises(LoomError, match="no record 'archive/data/"):
        loom.io.torch_load(tmp_path / "nodata.pt")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("x.txt", "hello")
    with pytest.raises(LoomError, match="without a data.pkl"):
        loom.io.torch_load(tmp_path / "other.zip")


def test_save_to_a_path_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "ckpt.pt"
    loom.io.torch_save({"w": loom.ones(2)}, target)
    import loom.io.torch_format as tf

    def boom(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(tf, "_write_archive", boom)
    with pytest.raises(KeyboardInterrupt):
        loom.io.torch_save({"w": loom.zeros(2)}, target)
    assert loom.io.torch_load(target)["w"].tolist() == [1.0, 1.0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_loom_save_keeps_its_own_format_for_pt_names(tmp_path):
    loom.save({"w": loom.ones(2)}, tmp_path / "x.pt")
    assert not zipfile.is_zipfile(tmp_path / "x.pt")  # A safetensors file, whatever the suffix.
    assert loom.load(tmp_path / "x.pt")["w"].tolist() == [1.0, 1.0]
    loom.io.torch_save({"w": loom.ones(2)}, tmp_path / "y.pt")
    assert loom.load(tmp_path / "y.pt")["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_protocols_both_ways(tmp_path, protocol):
    tb = torch.arange(6.0).reshape(2, 3)
    torch.save({"v": tb[:, 1:], "set": {1, 2}, "b": b"xy"}, tmp_path / "t.pt", pickle_protocol=protocol)
    r = loom.io.torch_load(tmp_path / "t.pt")
    assert r["v"].tolist() == [[1.0, 2.0], [4.0, 5.0]] and r["set"] == {1, 2} and r["b"] == b"xy"
    x = loom.arange(6.0).reshape(2, 3)
    loom.io.torch_save({"v": x[:, 1:], "x": x}, tmp_path / "l.pt", pickle_protocol=protocol)
    # PyTorch's own weights_only unpickler stops at protocol 4's FRAME opcode, even in files torch.save wrote.
    t = torch.load(tmp_path / "l.pt", weights_only=protocol == 2)
    assert t["v"].tolist() == [[1.0, 2.0], [4.0, 5.0]]
    assert t["v"].untyped_storage().data_ptr() == t["x"].untyped_storage().data_ptr()
    with pytest.raises(LoomError, match="legacy"):
        loom.io.torch_save({}, tmp_path / "x.pt", _use_new_zipfile_serialization=False)


def test_tensor_state_from_a_file_sets_only_public_attributes(tmp_path):
    t = torch.ones(2)
    t.note = "kept"
    t._hidden = 1  # A private name is loom's bookkeeping on a loom tensor: a file must not set it.
    torch.save({"t": t}, tmp_path / "t.pt")
    r = loom.io.torch_load(tmp_path / "t.pt")["t"]
    assert r.tolist() == [1.0, 1.0] and r.note == "kept" and not hasattr(r, "_hidden")

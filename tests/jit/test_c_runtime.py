"""loom.jit.save dumps run by the standalone C runtime (libloomrt) match loom's Python results."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.errors import LoomError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "c_runtime" / "main.c"
RTOL, ATOL = 1e-5, 1e-6


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(20, 32), nn.Linear(32, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), -1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=1, padding=1)
        self.fc = nn.Linear(6 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class GPT(nn.Module):
    """One pre-norm block: embeddings, layer norm, causal attention, a GELU MLP, softmax over the vocabulary."""

    def __init__(self, vocab=11, d=16, context=8, heads=2):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(loom.arange(t))
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return F.softmax(self.head(self.ln_f(x)), -1)


@pytest.fixture(scope="module")
def runtime():
    return loom.jit.build_runtime(example=EXAMPLE)


def _python(model, *args):
    with loom.no_grad():
        out = model(*args)
    return out.numpy()


def _run_c(runtime, dump, arrays, tmp_path, expect_ok=True):
    """Run the example binary on `arrays`; (returncode, stdout, stderr, outputs)."""
    files = []
    for k, a in enumerate(arrays):
        files.append(str(tmp_path / f"in{k}.npy"))
        np.save(files[-1], a)
    out_dir = tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    r = subprocess.run([runtime.example, str(dump), *files, "--out", str(out_dir)], capture_output=True, text=True,
                       timeout=60)
    if expect_ok:
        assert r.returncode == 0, r.stderr
    outs = [np.load(out_dir / f"output{k}.npy") for k in range(len(list(out_dir.glob("output*.npy"))))]
    return r.returncode, r.stdout, r.stderr, outs


def _check_model(runtime, tmp_path, model, x):
    model.eval()
    dump = loom.jit.save(model, (x,), tmp_path / "dump")
    expected = _python(model, x)
    _, stdout, _, outs = _run_c(runtime, dump, [x.numpy()], tmp_path)
    assert stdout.startswith(f"output 0: float32{list(expected.shape)}")
    assert outs[0].dtype == expected.dtype and outs[0].shape == expected.shape
    np.testing.assert_allclose(outs[0], expected, rtol=RTOL, atol=ATOL)
    return dump


def test_mlp_matches_python(runtime, tmp_path):
    loom.manual_seed(0)
    dump = _check_model(runtime, tmp_path, MLP(), loom.randn(4, 20))
    manifest = json.loads((dump_path := Path(dump)).joinpath("manifest.json").read_text())
    assert manifest["format"] == "loom.dump" and manifest["version"] == 1
    assert [r["kind"] for r in manifest["inputs"]].count("input") == 1
    assert {r["key"] for r in manifest["inputs"] if r["kind"] == "weight"} == \
        {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert all((dump_path / k["library"]).exists() and (dump_path / k["source"]).exists() for k in manifest["kernels"])


def test_cnn_matches_python(runtime, tmp_path):
    loom.manual_seed(1)
    dump = _check_model(runtime, tmp_path, CNN(), loom.randn(3, 1, 8, 8))
    ops = {n["op"] for n in json.loads(Path(dump, "graph.json").read_text())["nodes"]}
    assert {"conv2d", "max_pool2d_index", "gather", "matmul", "fused"} <= ops


def test_gpt_matches_python(runtime, tmp_path):
    loom.manual_seed(2)
    idx = loom.tensor(np.random.default_rng(0).integers(0, 11, (2, 8)))
    _check_model(runtime, tmp_path, GPT(), idx)


def test_movement_and_library_ops(runtime, tmp_path):
    """Views, pad, flip, strided slices, where, casts, an integer operand, several outputs and inputs."""
    def f(x, y):
        a = x.permute(1, 0).reshape(-1) + 1
        b = F.pad(x, (1, 2, 0, 1), value=-3.0).flip(0)[::2] * 2
        c = (y.float() @ x[:, :3].permute(1, 0)[:2].permute(1, 0)).sum(0)
        d = loom.where(x > 0, x, x * 0.1).max(1)[0]
        e = F.pad(x.permute(1, 0).reshape(2, 6), (1, 1)).exp()
        return a, b, c, d, e, x.reshape(4, 3).cumsum(0)

    loom.manual_seed(10)
    x, y = loom.randn(3, 4), loom.tensor(np.arange(6, dtype=np.int64).reshape(2, 3))
    dump = loom.jit.save(f, (x, y), tmp_path / "d")
    _, _, _, outs = _run_c(runtime, dump, [x.numpy(), y.numpy()], tmp_path)
    expected = f(x, y)
    assert len(outs) == len(expected) == 6
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def _check_function(runtime, tmp_path, f, *args):
    dump = loom.jit.save(f, args, tmp_path / "d")
    _, _, _, outs = _run_c(runtime, dump, [a.numpy() for a in args], tmp_path)
    with loom.no_grad():
        expected = f(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        assert got.dtype == want.numpy().dtype
        np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)
    return dump


def test_sort_and_scatter_ops(runtime, tmp_path):
    """argsort (stable, NaN largest, both directions, floats and ints, through sort/topk) and scatter_add."""
    x = loom.tensor(np.array([[3, np.nan, 1, 3, -np.inf, 2], [0, 0, 5, -1, 5, np.nan]], np.float32))
    i = loom.tensor(np.array([[5, -3, 5, 0, 7, 5], [2, 2, 9, -7, 0, 1]], np.int64))
    idx = loom.tensor(np.array([[0, 2, 2], [1, 0, 3]], np.int64))

    def f(x, i):
        return (x.argsort(-1), x.argsort(0, descending=True), x.sort(1, descending=True)[1], x.topk(2)[1],
                i.argsort(-1, descending=True), i.argsort(-1), loom.zeros(2, 4).scatter_add(1, idx, x[:, :3] * 2),
                loom.zeros(2, 4, dtype=loom.int64).scatter_add(1, idx, i[:, 3:]))

    _check_function(runtime, tmp_path, f, x, i)


def test_integer_division(runtime, tmp_path):
    """Integer div/floordiv/mod stay outside kernels; libloomrt floors as loom does and reports a zero divisor."""
    i = loom.tensor(np.array([[7, -7, 9, -9], [0, 5, -5, 12]], np.int64))
    d = loom.tensor(np.array([[2, 2, -4, -4], [3, -3, 3, 5]], np.int64))

    def f(i, d):
        return i // d, i % d, loom.remainder(i.int(), d.int()), i // 3

    dump = _check_function(runtime, tmp_path, f, i, d)
    assert {"floordiv", "mod"} <= {n["op"] for n in json.loads(Path(dump, "graph.json").read_text())["nodes"]}
    _fails(runtime, dump, [i.numpy(), np.zeros((2, 4), np.int64)], tmp_path, "ZeroDivisionError",
           "integer division by zero")


def test_attention_module_copies_kernel_inputs(runtime, tmp_path):
    """nn.MultiheadAttention gives kernels whose inputs need a movement op applied first (manifest "copies")."""
    loom.manual_seed(12)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q, k, v = loom.randn(2, 5, 16), loom.randn(2, 5, 16), loom.randn(2, 5, 16)
    dump = _check_function(runtime, tmp_path, lambda q, k, v: mha(q, k, v), q, k, v)
    manifest = json.loads(Path(dump, "manifest.json").read_text())
    assert any(kn["copies"] for kn in manifest["kernels"])


def test_dump_is_the_documented_format(tmp_path):
    """graph.json reads back with loom.ir.load and computes the model; the weights are plain safetensors."""
    from safetensors.numpy import load_file

    loom.manual_seed(3)
    model = MLP().eval()
    x = loom.randn(2, 20, requires_grad=True)
    (x * 2).sum().backward()  # An argument's .grad is not traced as an input.
    dump = Path(loom.jit.save(model, x, tmp_path / "d"))
    x = x.detach()
    graph = loom.ir.load(str(dump / "graph.json"))
    weights = load_file(str(dump / "weights.safetensors"))
    np.testing.assert_array_equal(weights["fc1.weight"], model.fc1.weight.detach().numpy())
    roles = json.loads((dump / "manifest.json").read_text())["inputs"]
    assert [r["name"] for r in roles if r["kind"] == "input"] == ["x"]
    feeds = [x if r["kind"] == "input" else loom.tensor(weights[r["key"]]) for r in roles]
    (out,) = graph.run(*feeds)
    np.testing.assert_allclose(out.numpy(), _python(model, x), rtol=RTOL, atol=ATOL)


def test_ctypes_api_runs_twice_and_reports_errors(runtime, tmp_path):
    loom.manual_seed(4)
    model = MLP().eval()
    dump = loom.jit.save(model, loom.randn(3, 20), tmp_path / "d")
    lib = ctypes.CDLL(runtime.library)
    lib.loomrt_load.restype = ctypes.c_void_p
    lib.loomrt_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.loomrt_error.restype = ctypes.c_char_p
    lib.loomrt_error.argtypes = [ctypes.c_void_p]
    lib.loomrt_set_input.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    lib.loomrt_run.argtypes = [ctypes.c_void_p]
    lib.loomrt_get_output.restype = ctypes.c_void_p
    lib.loomrt_get_output.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    lib.loomrt_free.argtypes = [ctypes.c_void_p]
    err = ctypes.create_string_buffer(1024)
    m = lib.loomrt_load(str(dump).encode(), err, 1024)
    assert m, err.value
    try:
        assert lib.loomrt_run(m) == -1
        assert b"was not set" in lib.loomrt_error(m)
        bad = np.zeros(5, np.float32)
        assert lib.loomrt_set_input(m, 0, bad.ctypes.data, bad.nbytes) == -1
        assert b"needs 240 bytes" in lib.loomrt_error(m)
        for seed in (5, 6):
            x = loom.tensor(np.random.default_rng(seed).standard_normal((3, 20), dtype=np.float32))
            a = np.ascontiguousarray(x.numpy())
            assert lib.loomrt_set_input(m, 0, a.ctypes.data, a.nbytes) == 0
            assert lib.loomrt_run(m) == 0, lib.loomrt_error(m)
            n = ctypes.c_size_t()
            ptr = lib.loomrt_get_output(m, 0, ctypes.byref(n))
            got = np.frombuffer(ctypes.string_at(ptr, n.value), np.float32).reshape(3, 10)
            np.testing.assert_allclose(got, _python(model, x), rtol=RTOL, atol=ATOL)
        assert lib.loomrt_get_output(m, 3, ctypes.byref(n)) is None
        assert b"output 3 out of range" in lib.loomrt_error(m)
    finally:
        lib.loomrt_free(m)


def test_load_runs_the_dump_from_python(runtime, tmp_path):
    loom.manual_seed(13)
    model = GPT().eval()
    idx = loom.tensor(np.random.default_rng(1).integers(0, 11, (2, 8)))
    cm = loom.jit.load(loom.jit.save(model, idx, tmp_path / "d"), runtime)
    assert cm.inputs == [("idx", "int64", (2, 8))] and cm.outputs == [("float32", (2, 8, 11))]
    for seed in (2, 3):  # The same loaded model, new inputs.
        other = np.random.default_rng(seed).integers(0, 11, (2, 8))
        (got,) = cm(other)
        np.testing.assert_allclose(got, _python(model, loom.tensor(other)), rtol=RTOL, atol=ATOL)
    with pytest.raises(LoomError, match=r"must have shape \[2, 8\], got \[1, 8\]"):
        cm(np.zeros((1, 8), np.int64))
    with pytest.raises(LoomError, match="IndexError: loom.embedding: index 11 is out of range"):
        cm(np.full((2, 8), 11, np.int64))
    cm.close()
    with pytest.raises(LoomError, match="closed"):
        cm(other)
    with pytest.raises(LoomError, match="cannot open .*manifest.json"):
        loom.jit.load(tmp_path / "missing", runtime)


def test_kernels_can_be_built_later(runtime, tmp_path):
    loom.manual_seed(7)
    model = MLP().eval()
    x = loom.randn(2, 20)
    dump = Path(loom.jit.save(model, x, tmp_path / "d", compile_kernels=False))
    assert list((dump / "kernels").glob("*.c")) and not list((dump / "kernels").glob("*.so"))
    rc, _, stderr, _ = _run_c(runtime, dump, [x.numpy()], tmp_path, expect_ok=False)
    assert rc == 1 and "cannot be loaded" in stderr and "python -m loom.jit --kernels" in stderr
    built = loom.jit.build_kernels(dump)
    assert built and all(os.path.exists(p) for p in built)
    _, _, _, outs = _run_c(runtime, dump, [x.numpy()], tmp_path)
    np.testing.assert_allclose(outs[0], _python(model, x), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------- errors

@pytest.fixture(scope="module")
def mlp_dump(tmp_path_factory):
    loom.manual_seed(8)
    folder = tmp_path_factory.mktemp("mlp")
    x = loom.randn(2, 20)
    return Path(loom.jit.save(MLP().eval(), x, folder / "dump")), x.numpy()


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _fails(runtime, dump, arrays, tmp_path, *needles):
    rc, stdout, stderr, _ = _run_c(runtime, dump, arrays, tmp_path, expect_ok=False)
    assert rc == 1, stdout
    assert stderr.startswith("error: ")
    for n in needles:
        assert n in stderr, stderr
    print(stderr)


def test_missing_dump(runtime, tmp_path):
    _fails(runtime, tmp_path / "nowhere", [np.zeros((2, 20), np.float32)], tmp_path, "cannot open",
           "nowhere/manifest.json")


def test_truncated_weights(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    w = dump / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "weights.safetensors: truncated", "ends at byte")
    w.write_bytes(w.read_bytes()[:5])
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "truncated", "8-byte length")


def test_corrupted_weights_header(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    w = dump / "weights.safetensors"
    raw = bytearray(w.read_bytes())
    raw[8:12] = b"\x00\x01{]"
    w.write_bytes(bytes(raw))
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "weights.safetensors: bad header", "JSON error at byte")


def test_unknown_graph_version(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    g = dump / "graph.json"
    g.write_text(g.read_text().replace('"version": 1', '"version": 7', 1))
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "format version 7 is not supported", "reads version 1")


def test_unknown_dump_version(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    m = dump / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["version"] = 2
    m.write_text(json.dumps(manifest))
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "dump version 2 is not supported")


def test_unknown_op(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    g = dump / "graph.json"
    g.write_text(g.read_text().replace('"op": "matmul"', '"op": "matmul_v9"', 1))
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, "d/graph.json: node", "op 'matmul_v9' is not supported by libloomrt")


def test_inconsistent_graph_shapes(runtime, mlp_dump, tmp_path):
    dump = _copy(mlp_dump[0], tmp_path / "d")
    g = dump / "graph.json"
    doc = json.loads(g.read_text())
    node = next(n for n in doc["nodes"] if n["op"] == "matmul")
    node["shape"][-1] += 1
    g.write_text(json.dumps(doc))
    _fails(runtime, dump, [mlp_dump[1]], tmp_path, f"node {node['id']}", "shapes do not fit")


def test_without_blas(tmp_path):
    """The plain-loop build (no scipy-openblas32) runs matmul and conv2d to the same results."""
    rt = loom.jit.build_runtime(tmp_path / "rt", example=EXAMPLE, blas=False)
    assert not rt.blas
    loom.manual_seed(11)
    _check_model(rt, tmp_path, CNN(), loom.randn(2, 1, 8, 8))


def test_bad_inputs(runtime, mlp_dump, tmp_path):
    dump, x = mlp_dump
    _fails(runtime, dump, [x.astype(np.float64)], tmp_path, "holds '<f8'", "is float32")
    _fails(runtime, dump, [x[:1]], tmp_path, "needs 160 bytes")
    _fails(runtime, dump, [x, x], tmp_path, "takes 1 input(s), got 2")


def test_index_check_fails_at_run_time(runtime, tmp_path):
    loom.manual_seed(9)
    idx = loom.tensor(np.zeros((1, 8), np.int64))
    dump = loom.jit.save(GPT().eval(), idx, tmp_path / "gpt")
    bad = np.zeros((1, 8), np.int64)
    bad[0, 3] = 42
    _fails(runtime, dump, [bad], tmp_path, "IndexError", "42")


def test_save_refuses_what_it_cannot_dump(tmp_path):
    drop = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))  # Training mode: draws random numbers.
    with pytest.raises(LoomError, match="random"):
        loom.jit.save(drop, loom.randn(2, 4), tmp_path / "a")
    with pytest.raises(LoomError, match="NumPy array"):
        loom.jit.save(drop.eval(), np.zeros((2, 4), np.float32), tmp_path / "b")
    half = nn.Linear(4, 2).eval().to(loom.bfloat16)
    with pytest.raises(LoomError, match="cannot be generated as C: output dtype bfloat16"):
        loom.jit.save(half, loom.randn(2, 4).to(loom.bfloat16), tmp_path / "d")


def test_jit_is_still_loom_function():
    f = loom.jit(lambda x: x * 2)
    assert isinstance(f, loom.Function)
    np.testing.assert_array_equal(f(loom.ones(3)).numpy(), np.full(3, 2, np.float32))
    g = loom.jit(level=2)(lambda x: x + 1)
    np.testing.assert_array_equal(g(loom.ones(2)).numpy(), np.full(2, 2, np.float32))

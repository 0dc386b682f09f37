"""loom's int8 C kernels, exactly against NumPy int64 references, on every compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import loom
from loom.quantization import kernels as K

PATHS = ["scalar", "avx2", "vnni", "numpy"]
SIZES = [(1, 1, 1), (3, 5, 7), (2, 4, 32), (5, 9, 33), (7, 13, 95), (17, 3, 300), (4, 130, 64)]


def ref_gemm(a, w):
    return a.astype(np.int64) @ w.astype(np.int64).T


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        line = next(ln for ln in f if ln.startswith("flags"))
    return set(line.split(":")[1].split())


def emulate_maddubs(a, w):
    """What a plain vpmaddubsw + vpmaddwd sequence computes: adjacent pairs saturated to int16."""
    k = a.shape[1] + a.shape[1] % 2
    a2 = np.zeros((a.shape[0], k), np.int64)
    w2 = np.zeros((w.shape[0], k), np.int64)
    a2[:, :a.shape[1]], w2[:, :w.shape[1]] = a, w
    pairs = a2[:, None, 0::2] * w2[None, :, 0::2] + a2[:, None, 1::2] * w2[None, :, 1::2]
    return np.clip(pairs, -32768, 32767).sum(-1)


def test_features_match_the_cpu():
    f, flags = K.features(), cpu_flags()
    assert f["scalar"]
    assert f["avx2"] == ("avx2" in flags)
    assert f["vnni"] == ("avx_vnni" in flags or {"avx512_vnni", "avx512vl"} <= flags)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_gemm_exact_random(path, m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-10_000, 10_000, n).astype(np.int32)
    out = K.gemm(a, K.pack_weight(w), bias, path=path)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, ref_gemm(a, w) + bias)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("wv", [-128, 127, -64, 63])
def test_gemm_saturation_corners(path, wv):
    """All-255 inputs against extreme weights: pairs of products reach 2*255*128, past int16."""
    a = np.full((3, 67), 255, np.uint8)
    w = np.full((5, 67), wv, np.int8)
    w[1, ::2] = -wv - 1 if wv < 0 else -wv  # Mixed signs too.
    pw = K.pack_weight(w)
    assert pw.narrow == bool(-64 <= w.min() and w.max() <= 63)
    expect = ref_gemm(a, w)
    np.testing.assert_array_equal(K.gemm(a, pw, path=path), expect)
    if not pw.narrow:  # The naive sequence would be wrong here: the test exercises the case it must avoid.
        assert (emulate_maddubs(a, w) != expect).any()


@pytest.mark.parametrize("narrow", [False, True])
def test_avx2_both_routes(narrow):
    """AVX2 without VNNI: the widening route for full-range weights, vpmaddubsw for 7-bit ones."""
    rng = np.random.default_rng(3)
    lo, hi = (-64, 64) if narrow else (-128, 128)
    a = rng.integers(0, 256, (9, 200), dtype=np.uint8)
    a[0] = 255
    w = rng.integers(lo, hi, (11, 200), dtype=np.int8)
    w[0] = lo
    pw = K.pack_weight(w)
    assert pw.narrow == narrow
    np.testing.assert_array_equal(K.gemm(a, pw, path="avx2"), ref_gemm(a, w))
    pw.narrow = False  # The widening route is exact for 7-bit weights too.
    np.testing.assert_array_equal(K.gemm(a, pw, path="avx2"), ref_gemm(a, w))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("out_dtype,relu", [("uint8", False), ("uint8", True), ("int8", False), ("int8", True),
                                            ("float32", False), ("float32", True)])
def test_fused_requantisation(path, out_dtype, relu):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (13, 75), dtype=np.uint8)
    w = rng.integers(-128, 128, (6, 75), dtype=np.int8)
    bias = rng.integers(-50_000, 50_000, 6).astype(np.int32)
    mult = ((rng.random(6) + 0.2) * 3e-3).astype(np.float32)
    zp = 100 if out_dtype == "uint8" else -3
    out = K.gemm(a, K.pack_weight(w), bias, mult, out_dtype, zp, relu, path=path)
    acc = (ref_gemm(a, w) + bias).astype(np.int32)
    f = acc.astype(np.float32) * mult
    if out_dtype == "float32":
        expect = np.maximum(f, 0) if relu else f
        np.testing.assert_array_equal(out, expect)
        return
    lo, hi = (0, 255) if out_dtype == "uint8" else (-128, 127)
    expect = np.clip(np.rint(f) + zp, max(lo, zp) if relu else lo, hi)
    assert out.dtype == np.dtype(out_dtype)
    np.testing.assert_array_equal(out.astype(np.int64), expect.astype(np.int64))
    assert out.max() == hi and (out.min() == lo or relu)  # Both clamps reached: output saturation is covered.


@pytest.mark.parametrize("path", ["scalar", "avx2", "vnni"])
def test_paths_agree_with_threads(path, monkeypatch):
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (301, 290), dtype=np.uint8)
    w = rng.integers(-128, 128, (37, 290), dtype=np.int8)
    pw = K.pack_weight(w)
    monkeypatch.setattr(K, "par_min", lambda: 1 << 16)  # So this small GEMM goes parallel.
    assert 301 * 37 * 290 >= K.par_min()
    before = loom.get_num_threads()
    try:
        loom.set_num_threads(2)
        two = K.gemm(a, pw, path=path)
        loom.set_num_threads(1)
        one = K.gemm(a, pw, path=path)
    finally:
        loom.set_num_threads(before)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, ref_gemm(a, w))


def test_default_path_capped_without_vnni(monkeypatch):
    """LOOM_Q8_PATH=avx2 runs a VNNI machine as a CPU without VNNI would."""
    monkeypatch.setenv("LOOM_Q8_PATH", "avx2")
    assert K.default_path() == ("avx2" if K.features()["avx2"] else "scalar")
    monkeypatch.setenv("LOOM_Q8_PATH", "scalar")
    assert K.default_path() == "scalar"
    monkeypatch.setenv("LOOM_Q8_PATH", "sse9")
    with pytest.raises(loom.errors.LoomValueError, match="LOOM_Q8_PATH"):
        K.default_path()


@pytest.mark.parametrize("geom", [((3, 3), (1, 1), (0, 0), (1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1)),
                                  ((2, 3), (1, 2), (1, 0), (2, 1)), ((1, 1), (1, 1), (0, 0), (1, 1))])
def test_im2col_matches_numpy(geom):
    kernel, stride, padding, dilation = geom
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (2, 9, 8, 5), dtype=np.uint8)
    c = K.im2col(x, kernel, stride, padding, dilation, 77)
    n = K.im2col(x, kernel, stride, padding, dilation, 77, path="numpy")
    np.testing.assert_array_equal(c, n)
    k = kernel[0] * kernel[1] * 5
    assert c.shape[1] == k
    if any(padding):
        assert (c == 77).any()
    # Column (i, j, ch) of output row (0, 0, 0) is the input pixel the tap reads (or the pad value).
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            ih, iw = i * dilation[0] - padding[0], j * dilation[1] - padding[1]
            inside = 0 <= ih < 9 and 0 <= iw < 8
            got = c[0, (i * kernel[1] + j) * 5:(i * kernel[1] + j + 1) * 5]
            np.testing.assert_array_equal(got, x[0, ih, iw] if inside else np.full(5, 77))


def test_gemm_errors():
    pw = K.pack_weight(np.ones((2, 4), np.int8))
    with pytest.raises(loom.errors.DTypeError, match="uint8"):
        K.gemm(np.ones((1, 4), np.int8), pw)
    with pytest.raises(loom.errors.ShapeError, match="4 columns"):
        K.gemm(np.ones((1, 3), np.uint8), pw)
    with pytest.raises(loom.errors.LoomValueError, match="needs mult"):
        K.gemm(np.ones((1, 4), np.uint8), pw, out_dtype="uint8")
    with pytest.raises(loom.errors.DTypeError, match="int8"):
        K.pack_weight(np.ones((2, 4), np.float32))
    with pytest.raises(loom.errors.ShapeError, match="out must be"):
        K.gemm(np.ones((1, 4), np.uint8), pw, out=np.empty((1, 2), np.float32))
    out = np.empty((1, 2), np.int32)
    assert K.gemm(np.ones((1, 4), np.uint8), pw, out=out) is out and out.tolist() == [[4, 4]]


@pytest.mark.parametrize("march,bits", [("x86-64", 0), ("haswell", 2)])
def test_source_built_for_cpus_without_vnni(tmp_path, march, bits):
    """The same C source compiled for a plain x86-64 CPU (scalar only) and for AVX2 without VNNI.

    Both run here (this CPU has what they need) and give the exact results; asking for VNNI falls back.
    """
    import ctypes
    import platform
    import shutil
    import subprocess

    from loom.codegen import build
    from loom.quantization._csrc import SOURCE
    cc = shutil.which(build.compiler())
    if cc is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs an x86-64 C compiler")
    src, lib = tmp_path / "q8.c", tmp_path / "q8.so"
    src.write_text(SOURCE)
    flags = [f for f in build.BASE_FLAGS if not f.startswith("-march")]
    subprocess.run([cc, *flags, f"-march={march}", str(src), "-o", str(lib), "-lm"], check=True, timeout=120)
    so = ctypes.CDLL(str(lib))
    got = np.zeros(1, np.int32)
    so.loom_q8_features(ctypes.c_void_p(got.ctypes.data))
    assert got[0] == bits
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (11, 70), dtype=np.uint8)
    a[0] = 255
    w = rng.integers(-128, 128, (19, 70), dtype=np.int8)
    w[0] = -128
    pw = K.pack_weight(w)
    out = np.zeros((11, 19), np.int32)
    i32, i64, p = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
    so.loom_q8_gemm.argtypes = [i32, i32, i32, i64, i64, i64, p, i64, p, p, p, i32, i32, i32, i32, i32, p, i64]
    so.loom_q8_gemm.restype = None
    for path in (0, 1, 2):
        out[:] = 0
        so.loom_q8_gemm(path, 1, int(pw.narrow), 11, 19, 70, a.ctypes.data, 70, pw.data.ctypes.data, None, None, 0,
                        0, 0, 0, 0, out.ctypes.data, 19)
        np.testing.assert_array_equal(out, ref_gemm(a, w))

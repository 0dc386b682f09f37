"""The kernel cache runs only code loom built: planted, tampered or foreign libraries are never loaded, unsafe
cache directories are refused for a private one, and what loom creates is private (0700).

The tests run as root, as the reported attack did; "another user" is uid 12345 (os.chown).
"""
import hashlib
import os
import stat
import subprocess
import warnings

import numpy as np
import pytest

import loom
from loom.codegen import KernelCacheWarning, build, cache, clear_memory, get_kernel, render, reset_stats, stats, trust
from loom.codegen import run_reference
from tests.codegen.test_cache import arrays, body

OTHER_UID = 12345

# Only root can give a file to another user; the other cases run as anyone.
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="os.chown to another uid needs root")

PLANTED = r"""
#include <stdio.h>
#include <stdint.h>
__attribute__((constructor)) static void planted(void) {
  FILE *f = fopen(MARKER, "w");
  if (f) { fputs("planted code ran", f); fclose(f); }
}
int32_t loom_call(void *objects, void *meta) { return 0; }  /* Leaves the output as it was: a wrong result. */
"""

NO_ENTRY = "int not_loom_call(void) { return 1; }\n"


def compile_c(tmp_path, source: str, name: str, *defines: str) -> str:
    src, so = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", *defines, str(src), "-o", str(so)], check=True, capture_output=True)
    return str(so)


@pytest.fixture
def planted(tmp_path):
    """A shared object whose constructor writes a marker file and whose loom_call computes nothing."""
    marker = tmp_path / "marker"
    so = compile_c(tmp_path, PLANTED, "planted", f'-DMARKER="{marker}"')
    return so, marker


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache directory (0700, ours), nothing in memory, counters at zero, no warning given yet."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(root))
    monkeypatch.setattr(cache, "_WARNED", set())
    clear_memory()
    reset_stats()
    yield root
    clear_memory()


def key_of(g) -> str:
    spec = render(g)
    return cache.kernel_key(spec.source, spec.uses_mvec and build.mvec_available(), build.compiler_id())


def lib_path(root, key: str) -> str:
    return os.path.join(root, "kernels", key[:2], key + ".so")


def plant(root, key: str, so: str, index: str | None = None) -> str:
    """Copy `so` to the library path for `key` under `root` (the index holds `index`'s hash if given)."""
    path = lib_path(root, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(so, "rb") as f, open(path, "wb") as g:
        g.write(f.read())
    if index is not None:
        with open(path + ".sha256", "w") as f:
            f.write(sha256(index) + "\n")
    return path


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_result(k, g, batch: int) -> None:
    """The kernel's result is the reference result (a sentinel shows an output the kernel never wrote)."""
    out = np.full(g.outputs[0].shape, 12345.0, g.outputs[0].dtype.np)
    k(arrays(batch), out)
    np.testing.assert_allclose(out, run_reference(g, arrays(batch)), rtol=1e-6)


def cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, KernelCacheWarning)]


def test_planted_library_without_index_is_not_loaded(fresh, planted):
    so, marker = planted
    g = body(3)
    path = plant(fresh, key_of(g), so)
    with pytest.warns(KernelCacheWarning, match="has no hash index") as rec:
        k = get_kernel(g)
    assert path in str(rec[0].message)
    assert not marker.exists()
    assert k.ready and stats()["builds"] == 1 and stats()["untrusted"] == 1 and stats()["disk_hits"] == 0
    check_result(k, g, 3)
    with open(path + ".sha256") as f:
        assert f.read().strip() == sha256(path)  # The rebuild replaced the file and recorded its hash.
    assert not marker.exists()


@pytest.mark.parametrize("fault", [pytest.param("library-foreign", marks=as_root),
                                   pytest.param("index-foreign", marks=as_root), "library-group-writable",
                                   "library-symlink", "index-symlink"])
def test_planted_library_with_matching_index_is_not_trusted(fresh, planted, tmp_path, fault):
    """A correct hash proves nothing when the library or the index could have been written by someone else."""
    so, marker = planted
    g = body(4)
    key = key_of(g)
    path = plant(fresh, key, so, index=so)
    if fault == "library-foreign":
        os.chown(path, OTHER_UID, OTHER_UID)
        reason = "owned by uid 12345"
    elif fault == "index-foreign":
        os.chown(path + ".sha256", OTHER_UID, OTHER_UID)
        reason = "hash index .* owned by uid 12345"
    elif fault == "library-group-writable":
        os.chmod(path, 0o775)
        reason = "group- or world-writable"
    elif fault == "library-symlink":
        os.unlink(path)
        os.symlink(so, path)
        reason = "cannot be opened safely"
    else:
        os.rename(path + ".sha256", tmp_path / "index")
        os.symlink(tmp_path / "index", path + ".sha256")
        reason = "hash index .* cannot be opened safely"
    with pytest.warns(KernelCacheWarning, match=reason):
        k = get_kernel(g)
    assert not marker.exists()
    assert k.ready and stats()["untrusted"] == 1 and stats()["builds"] == 1
    check_result(k, g, 4)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
    assert not marker.exists()


@pytest.mark.parametrize("tamper", ["flip-byte", "swap-for-planted"])
def test_tampered_library_is_detected_and_rebuilt(fresh, planted, tamper):
    so, marker = planted
    g = body(5)
    k = get_kernel(g)
    assert k.ready and stats()["builds"] == 1
    path = lib_path(fresh, k.key)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if tamper == "flip-byte":
        data[len(data) // 2] ^= 0x01
    else:
        with open(so, "rb") as f:
            data = bytearray(f.read())
    with open(path + ".new", "wb") as f:  # Owned by us, not writable by others: only the hash tells.
        f.write(data)
    os.replace(path + ".new", path)  # A new file: writing into the one this process has mapped would crash it.
    clear_memory()
    reset_stats()
    with pytest.warns(KernelCacheWarning, match="SHA-256 .* does not match|but loom built it with"):
        k = get_kernel(g)
    assert not marker.exists()
    assert k.ready and stats()["untrusted"] == 1 and stats()["builds"] == 1 and stats()["disk_hits"] == 0
    check_result(k, g, 5)
    with open(path, "rb") as f:
        rebuilt = f.read()
    assert rebuilt != bytes(data)
    with open(path + ".sha256") as f:
        assert f.read().strip() == hashlib.sha256(rebuilt).hexdigest()
    clear_memory()  # The rebuilt library now loads from disk without a word.
    reset_stats()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        k = get_kernel(g)
    assert not cache_warnings(rec) and stats()["disk_hits"] == 1 and stats()["untrusted"] == 0


def test_library_without_entry_point_is_rebuilt(fresh, tmp_path):
    """A library loom vouches for by hash but without loom_call is corrupt: rebuilt, not an AttributeError."""
    g = body(6)
    key = key_of(g)
    path = plant(fresh, key, compile_c(tmp_path, NO_ENTRY, "noentry"))
    trust.write_index(path, sha256(path))
    with pytest.warns(KernelCacheWarning, match="no entry point loom_call"):
        k = get_kernel(g)
    assert k.ready and stats()["builds"] == 1 and stats()["untrusted"] == 1
    check_result(k, g, 6)


def test_compiler_output_without_entry_point_falls_back(fresh, tmp_path, monkeypatch, caplog):
    """A compiler that produces a library without loom_call: the kernel fails over to the reference path."""
    fake = tmp_path / "cc-noentry"
    fake.write_text('#!/bin/sh\ncase "$*" in *-dump*) exec gcc "$@";; esac\nprev=; out=\n'
                    'for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
                    f"printf '{NO_ENTRY.strip()}\\n' | gcc -shared -fPIC -x c - -o \"$out\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LOOM_CC", str(fake))
    with caplog.at_level("WARNING", logger="loom.codegen"):
        g = body(7)
        k = get_kernel(g)
    assert k.failed and not k.ready and stats()["build_failures"] == 1
    assert any("no entry point loom_call" in r.getMessage() for r in caplog.records)
    check_result(k, g, 7)


def _make_shared_dir(tmp_path, how: str):
    """A cache directory, at `tmp_path/shared`, that another user owns or may write."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    if how == "group-writable":
        shared.chmod(0o770)
        return shared, "group- or world-writable"
    if how == "world-writable":
        shared.chmod(0o1777)  # The sticky bit does not make a cache root safe.
        return shared, "group- or world-writable"
    os.chown(shared, OTHER_UID, OTHER_UID)
    return shared, "owned by uid 12345, not by the current user"


@as_root  # The planted files belong to another user.
@pytest.mark.parametrize("how", ["group-writable", "world-writable", "foreign"])
def test_unsafe_cache_dir_is_refused_for_a_private_one(tmp_path, monkeypatch, planted, how):
    so, marker = planted
    shared, reason = _make_shared_dir(tmp_path, how)
    g = body(8)
    key = key_of(g)
    path = plant(shared, key, so, index=so)  # A planted library with a matching index, as its owner would leave.
    for p in (path, path + ".sha256", os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        os.chown(p, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(shared))
    monkeypatch.setattr(cache, "_WARNED", set())
    clear_memory()
    reset_stats()
    try:
        with pytest.warns(KernelCacheWarning, match=reason) as rec:
            k = get_kernel(g)
        msg = cache_warnings(rec)[0]
        used = cache.cache_dir()
        assert str(shared) in msg and used in msg and used != str(shared)
        st = os.stat(used)
        assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
        assert k.ready and stats()["builds"] == 1 and stats()["disk_hits"] == 0
        assert os.path.exists(lib_path(used, key))
        check_result(k, g, 8)
        assert not marker.exists()
    finally:
        clear_memory()


@pytest.mark.parametrize("level", ["kernels-writable", pytest.param("shard-foreign", marks=as_root), "shard-symlink"])
def test_unsafe_level_inside_the_cache_is_refused(fresh, tmp_path, planted, level):
    so, marker = planted
    g = body(9)
    key = key_of(g)
    path = plant(fresh, key, so, index=so)
    shard = os.path.dirname(path)
    if level == "kernels-writable":
        os.chmod(os.path.dirname(shard), 0o777)
        bad, reason = os.path.dirname(shard), "group- or world-writable"
    elif level == "shard-foreign":
        os.chown(shard, OTHER_UID, OTHER_UID)
        bad, reason = shard, "owned by uid 12345"
    else:
        os.rename(shard, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", shard)
        bad, reason = shard, "not a directory"
    with pytest.warns(KernelCacheWarning, match=reason) as rec:
        k = get_kernel(g)
    assert bad in cache_warnings(rec)[0]
    assert cache.cache_dir() != str(fresh)
    assert k.ready and not marker.exists()
    check_result(k, g, 9)


@pytest.mark.parametrize("parent", ["world-writable", "sticky", pytest.param("foreign", marks=as_root)])
def test_directories_above_the_cache_are_checked(tmp_path, monkeypatch, parent):
    """Whoever can rename entries of a parent can swap the cache: only a sticky one (as /tmp) is safe."""
    up = tmp_path / "up"
    up.mkdir()
    root = up / "cache"
    root.mkdir(mode=0o700)
    if parent == "world-writable":
        up.chmod(0o777)
    elif parent == "sticky":
        up.chmod(0o1777)
    else:
        os.chown(up, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(root))
    clear_memory()
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            used = cache.cache_dir()
        msgs = cache_warnings(rec)
        if parent == "sticky":
            assert used == str(root) and not msgs
        else:
            assert used != str(root) and len(msgs) == 1 and f"{up} is" in msgs[0]
    finally:
        clear_memory()


def test_new_directories_and_files_are_private(tmp_path, monkeypatch):
    """Every level loom creates is 0700, and no file it writes is writable by others, whatever the umask."""
    root = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("LOOM_CACHE_DIR", str(root))
    clear_memory()
    old = os.umask(0)
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            k = get_kernel(body(10))
        assert k.ready and not cache_warnings(rec)
    finally:
        os.umask(old)
        clear_memory()
    path = lib_path(root, k.key)
    for d in (tmp_path / "a", tmp_path / "a" / "b", root, root / "kernels", os.path.dirname(path)):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700, (d, oct(st.st_mode))
    for f in (path, path + ".sha256"):
        st = os.lstat(f)
        assert st.st_uid == os.geteuid() and not st.st_mode & 0o022, (f, oct(st.st_mode))


def test_each_kind_of_fault_is_warned_once(fresh, planted):
    so, marker = planted
    graphs = [body(2, loom.float32), body(2, loom.float64)]
    for g in graphs:
        plant(fresh, key_of(g), so)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        kernels = [get_kernel(g) for g in graphs]
    assert len(cache_warnings(rec)) == 1 and stats()["untrusted"] == 2 and stats()["builds"] == 2
    assert all(k.ready for k in kernels) and not marker.exists()

"""loom.data.download against a loopback HTTP server with Range support: full, resumed, corrupt, unreachable, cached."""
import hashlib
import warnings

import pytest

from loom.data import download as dl
from loom.data.errors import LoomFileNotFoundError
from tests.data._loopback import serve

PAYLOAD = bytes(range(256)) * 1000  # 256,000 bytes


def _res(base, name="blob.bin", sha256=hashlib.sha256(PAYLOAD).hexdigest(), **kw):
    return dl.Resource(name, (f"{base}/{name}",), sha256=sha256, **kw)


def test_full_download_then_cache_hit_makes_no_request(tmp_path):
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        path = dl.download(_res(base), tmp_path, progress=False)
        assert path == tmp_path / "blob.bin" and path.read_bytes() == PAYLOAD
        assert not (tmp_path / "blob.bin.part").exists()
        assert srv.requests == [("/blob.bin", None)]
        again = dl.fetch(_res(base), [tmp_path / "elsewhere.bin"], tmp_path, "the blob")
        assert again == path and len(srv.requests) == 1


def test_resume_after_interrupted_transfer_uses_range(tmp_path):
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        srv.cut_after = 100_000
        path = dl.download(_res(base), tmp_path, progress=False)
        assert path.read_bytes() == PAYLOAD
        assert srv.requests == [("/blob.bin", None), ("/blob.bin", "bytes=100000-")]


def test_resume_from_a_part_file_left_by_an_earlier_run(tmp_path):
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:12345])
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        assert dl.download(_res(base), tmp_path, progress=False).read_bytes() == PAYLOAD
        assert srv.requests == [("/blob.bin", "bytes=12345-")]


def test_server_without_range_support_restarts_from_zero(tmp_path):
    (tmp_path / "blob.bin.part").write_bytes(b"garbage that must not stay in front")
    with serve({"blob.bin": PAYLOAD}, ranges=False) as (srv, base):
        assert dl.download(_res(base), tmp_path, progress=False).read_bytes() == PAYLOAD


def test_bad_checksum_is_rejected_and_not_kept(tmp_path):
    with serve({"blob.bin": PAYLOAD[:-1] + b"\x00"}) as (srv, base):
        with pytest.raises(dl.ChecksumError, match="SHA-256") as e:
            dl.download(_res(base), tmp_path, progress=False)
        assert hashlib.sha256(PAYLOAD).hexdigest() in str(e.value) and base in str(e.value)
    assert [p.name for p in tmp_path.iterdir()] == [".loom-download.lock"]  # Only the (empty) lock file.


def test_wrong_size_and_wrong_md5_are_rejected(tmp_path):
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        with pytest.raises(dl.ChecksumError, match="bytes, expected 5"):
            dl.download(_res(base, sha256=None, size=5), tmp_path, progress=False)
        with pytest.raises(dl.ChecksumError, match="MD5"):
            dl.download(_res(base, sha256=None, md5="0" * 32), tmp_path, progress=False)
        good_md5 = hashlib.md5(PAYLOAD).hexdigest()
        assert dl.download(_res(base, sha256=None, md5=good_md5), tmp_path, progress=False).stat().st_size == len(
            PAYLOAD)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".loom-download.lock", "blob.bin"]


def test_unknown_checksum_checks_size_and_warns(tmp_path):
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        with pytest.warns(UserWarning, match="no published checksum"):
            path = dl.download(_res(base, sha256=None, size=len(PAYLOAD)), tmp_path, progress=False)
    assert path.read_bytes() == PAYLOAD


def test_second_mirror_is_tried_after_a_404(tmp_path):
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        res = dl.Resource("blob.bin", (f"{base}/missing/blob.bin", f"{base}/blob.bin"),
                          sha256=hashlib.sha256(PAYLOAD).hexdigest())
        assert dl.download(res, tmp_path, progress=False).read_bytes() == PAYLOAD
        assert [p for p, _ in srv.requests] == ["/missing/blob.bin", "/blob.bin"]


def test_server_down_gives_a_clear_error_naming_paths_and_url(tmp_path):
    with serve({}) as (srv, base):
        pass  # The server is shut down again: its port now refuses connections.
    res = _res(base)
    local = tmp_path / "mine" / "blob.bin"
    with pytest.raises(LoomFileNotFoundError) as e:
        dl.fetch(res, [local], tmp_path / "cache", "the test blob", hint="See docs/data.md.")
    msg = str(e.value)
    assert "the test blob" in msg and str(local) in msg and f"{base}/blob.bin" in msg and "docs/data.md" in msg
    assert isinstance(e.value, FileNotFoundError) and not (tmp_path / "cache" / "blob.bin").exists()


def test_no_download_allowed_says_how_to_get_it(tmp_path):
    with pytest.raises(LoomFileNotFoundError, match="download=True") as e:
        dl.fetch(_res("http://127.0.0.1:9"), [tmp_path / "a.bin"], None, "the blob")
    assert str(tmp_path / "a.bin") in str(e.value)


def test_local_copy_wins_over_download(tmp_path):
    mine = tmp_path / "blob.bin"
    mine.write_bytes(b"local")
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        assert dl.fetch(_res(base), [mine], tmp_path / "cache", "the blob") == mine
        assert srv.requests == []


def test_data_home_respects_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_DATA_HOME", str(tmp_path / "a"))
    assert dl.data_home() == tmp_path / "a"
    monkeypatch.delenv("LOOM_DATA_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dl.data_home() == tmp_path / "xdg" / "loom" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert dl.data_home() == tmp_path / "home" / ".cache" / "loom" / "data"


def test_plain_text_progress_without_tqdm(tmp_path, monkeypatch, capsys):
    import builtins
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    with serve({"blob.bin": PAYLOAD}) as (srv, base), warnings.catch_warnings():
        dl.download(_res(base), tmp_path, progress=True, chunk_size=16_000)
    err = capsys.readouterr().err
    assert "blob.bin: downloading 250.0 KiB" in err and "100% of 250.0 KiB" in err


def test_a_second_process_waits_for_the_lock_and_finds_the_file(tmp_path):
    import fcntl
    import threading

    with serve({"blob.bin": PAYLOAD}) as (srv, base), open(tmp_path / ".loom-download.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # Another downloader holds the lock.
        result = {}
        waiter = threading.Thread(target=lambda: result.update(path=dl.download(_res(base), tmp_path,
                                                                                  progress=False)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and srv.requests == []  # It waits rather than writing the same .part file.
        (tmp_path / "blob.bin").write_bytes(PAYLOAD)  # The other downloader finishes ...
        fcntl.flock(held, fcntl.LOCK_UN)  # ... and lets go.
        waiter.join(10)
        assert result["path"] == tmp_path / "blob.bin" and srv.requests == []


def test_a_stale_part_file_that_spoils_the_checksum_is_fetched_again_whole(tmp_path):
    (tmp_path / "blob.bin.part").write_bytes(b"x" * 1000)  # Left by an older, different file.
    with serve({"blob.bin": PAYLOAD}) as (srv, base):
        assert dl.download(_res(base), tmp_path, progress=False).read_bytes() == PAYLOAD
        assert srv.requests == [("/blob.bin", "bytes=1000-"), ("/blob.bin", None)]

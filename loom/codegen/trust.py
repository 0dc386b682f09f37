"""What the kernel cache may load: libraries in directories only this user can change, whose SHA-256
matches the index loom wrote beside them when it built them.

Loading a shared object runs its code (its constructors run at ``dlopen``), so
nothing in the cache is trusted for being at the expected path. A library is
loaded only when all of these hold:

- every directory from ``/`` down to the cache root is owned by this user or
  root and is not group- or world-writable (a sticky directory such as
  ``/tmp`` may be); the cache root and every level below it (``kernels/``,
  ``kernels/<xx>/``) is owned by this user, is a real directory and is not
  group- or world-writable;
- the library ``<key>.so`` and its index ``<key>.so.sha256`` are regular
  files (not links) owned by this user and not group- or world-writable;
- the library's SHA-256 is the one in the index.

The index is one small file per library rather than one shared table: a
builder publishes a library and its hash together under an exclusive `flock`
on the library's directory, and a loader verifies and loads under a shared
one, so processes racing to build one key never pair one build's hash with
another build's library, and builders of different keys never rewrite a
common file. The index itself is written to a temporary file, fsynced and
renamed into place.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import threading

try:
    import fcntl
except ImportError:  # Not POSIX: no locking (and no ownership checks, below).
    fcntl = None  # type: ignore[assignment]

INDEX_SUFFIX = ".sha256"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_POSIX = os.name == "posix" and hasattr(os, "geteuid")


class KernelCacheWarning(UserWarning):
    """loom refused a kernel cache directory or a cached library (it falls back or rebuilds)."""


class Untrusted(Exception):
    """A cache directory or library loom will not use; `kind` groups reasons for warn-once."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _uid() -> int:
    return os.geteuid() if _POSIX else -1


def _dir_problem(st: os.stat_result, *, above_root: bool) -> str | None:
    """Why a directory lets another user change its entries (None if it does not)."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (a symbolic link or a file)"
    owners = (_uid(), 0) if above_root else (_uid(),)
    if st.st_uid not in owners:
        return f"owned by uid {st.st_uid}, not by the current user (uid {_uid()})"
    if st.st_mode & 0o022 and not (above_root and st.st_mode & stat.S_ISVTX):
        return f"group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _file_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != _uid():
        return f"owned by uid {st.st_uid}, not by the current user (uid {_uid()})"
    if st.st_mode & 0o022:
        return f"group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _check_chain(real: str, leaf_is_root: bool) -> None:
    """Check `real` (a resolved path) and every directory above it; raise Untrusted naming the first bad one."""
    levels = []
    p = real
    while True:
        levels.append(p)
        up = os.path.dirname(p)
        if up == p:
            break
        p = up
    for level in reversed(levels):
        problem = _dir_problem(os.lstat(level), above_root=not (leaf_is_root and level == real))
        if problem:
            raise Untrusted("dir", f"{level} is {problem}")


def secure_root(path: str) -> str:
    """`path` resolved, with its missing levels created 0700; raise Untrusted if another user could change it.

    Existing directories above it are checked before anything is created, so
    nothing is made inside a directory another user controls.
    """
    path = os.path.abspath(os.path.expanduser(path))
    if not _POSIX:
        os.makedirs(path, exist_ok=True)
        return path
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        p = os.path.dirname(p)
    if missing:
        _check_chain(os.path.realpath(p), leaf_is_root=False)
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:  # Made by a racing process: checked below like any other level.
            pass
    real = os.path.realpath(path)
    _check_chain(real, leaf_is_root=True)
    return real


def private_subdir(root: str, *names: str, create: bool = True) -> str:
    """root/names..., each level a real directory owned by this user and not group/world-writable.

    Missing levels are created 0700 (unless `create` is false: FileNotFoundError).
    """
    p = root
    for name in names:
        p = os.path.join(p, name)
        if create:
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:
                pass
        if _POSIX:
            problem = _dir_problem(os.lstat(p), above_root=False)
            if problem:
                raise Untrusted("dir", f"{p} is {problem}")
    return p


def private_fallback() -> str:
    """A fresh directory only this user can use (tempfile.mkdtemp makes it 0700), checked like any root."""
    path = tempfile.mkdtemp(prefix="loom-kernels-")
    if _POSIX:
        _check_chain(os.path.realpath(path), leaf_is_root=True)
    return path


def index_path(lib: str) -> str:
    return lib + INDEX_SUFFIX


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return _sha256_fd(f.fileno())


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _open_checked(path: str, what: str) -> int:
    """A read-only fd on `path` if it is a regular file only this user can write (not a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise Untrusted("file", f"{what} {path} cannot be opened safely ({e.strerror}; a symbolic link?)") from None
    if _POSIX:
        problem = _file_problem(os.fstat(fd))
        if problem:
            os.close(fd)
            raise Untrusted("file", f"{what} {path} is {problem}")
    return fd


def verify(lib: str, root: str) -> None:
    """Raise Untrusted unless `lib` (under `root`) may be loaded; FileNotFoundError if it is not there.

    Call under `locked(dirname(lib), exclusive=False)` so no builder swaps the
    library between this check and the load.
    """
    if _POSIX:
        problem = _dir_problem(os.lstat(root), above_root=False)
        if problem:
            raise Untrusted("dir", f"{root} is {problem}")
    rel = os.path.relpath(os.path.dirname(lib), root)
    private_subdir(root, *([] if rel == "." else rel.split(os.sep)), create=False)
    fd = _open_checked(lib, "kernel library")
    try:
        try:
            ifd = _open_checked(index_path(lib), "hash index")
        except FileNotFoundError:
            raise Untrusted("no-index", f"kernel library {lib} has no hash index (not built by this version of "
                                        "loom, or its build was cut short)") from None
        try:
            expected = os.read(ifd, 128).decode("ascii", "replace").strip()
        finally:
            os.close(ifd)
        if not _HEX64.fullmatch(expected):
            raise Untrusted("no-index", f"the hash index of kernel library {lib} is malformed")
        actual = _sha256_fd(fd)
    finally:
        os.close(fd)
    if actual != expected:
        raise Untrusted("mismatch", f"kernel library {lib} has SHA-256 {actual[:16]}..., but loom built it with "
                                    f"{expected[:16]}... (it was changed after the build)")


def write_index(lib: str, digest: str) -> None:
    """Record `digest` for `lib`: temporary file, fsync, rename (call under an exclusive `locked`)."""
    final = index_path(lib)
    tmp = f"{final}.{os.getpid()}.{threading.get_ident()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            os.write(fd, (digest + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# Threads hold this around every flock, and fork waits for it: a child never inherits a held flock
# (flock belongs to the open file, which a forked child shares).
_FLOCK_GUARD = threading.Lock()


def _reset_guard() -> None:
    global _FLOCK_GUARD
    _FLOCK_GUARD = threading.Lock()


def _release_guard() -> None:
    _FLOCK_GUARD.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _FLOCK_GUARD.acquire(), after_in_parent=_release_guard,
                        after_in_child=_reset_guard)


@contextlib.contextmanager
def locked(folder: str, exclusive: bool):
    """Hold `folder`'s flock: exclusive to publish a library and its index, shared to verify and load."""
    if fcntl is None:
        yield
        return
    with _FLOCK_GUARD:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # Releases the lock.

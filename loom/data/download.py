"""Fetching data set files: found locally, or downloaded, checksummed, resumable, cached and renamed atomically.

A `Resource` names one published file: its name, the URLs it is served from
(mirrors, tried in order) and what is known about it (SHA-256, else a
published MD5, else nothing but perhaps its size). `fetch` returns a local
path for it: the first existing candidate path, else a download into the
cache folder (`data_home()`), else a `LoomFileNotFoundError` that lists every
path looked at and every URL tried, with the reason each failed.

A download goes to ``<name>.part`` beside the target, under an exclusive lock
on the folder (``.loom-download.lock``), so concurrent processes download it
once; an interrupted transfer is resumed with an HTTP Range request; the
finished file is checked and only then renamed into place (``os.replace``),
so a file under its final name was always verified. A file that fails its
checksum is deleted, never kept.

Environment: ``LOOM_DATA_HOME`` (the cache folder; default
``$XDG_CACHE_HOME/loom/data``, i.e. ``~/.cache/loom/data``).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from loom.data.errors import LoomFileNotFoundError
from loom.errors import LoomError

__all__ = ["ChecksumError", "DownloadError", "Resource", "data_home", "download", "fetch", "file_digest"]


class DownloadError(LoomError):
    """A download that did not complete: the server could not be reached or answered with an error."""


class ChecksumError(DownloadError):
    """A downloaded file whose size or checksum differs from the published one (the file is deleted)."""


def data_home() -> Path:
    """The download cache: `$LOOM_DATA_HOME`, else `$XDG_CACHE_HOME/loom/data`, else `~/.cache/loom/data`.

    Examples
    --------
    >>> data_home().name
    'data'
    """
    env = os.environ.get("LOOM_DATA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "loom" / "data"


@dataclass(frozen=True)
class Resource:
    """One published file: its name, its URLs (mirrors, in order) and its known checksum and size.

    `sha256` is checked when known; otherwise a published `md5` (what
    torchvision records for some files); otherwise only `size`, with a warning
    that the file could not be verified.
    """

    filename: str
    urls: tuple[str, ...]
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None
    note: str = field(default="", compare=False)


def file_digest(path: str | os.PathLike, algorithm: str = "sha256", chunk_size: int = 1 << 20) -> str:
    """The hex digest of a file, read in chunks.

    Examples
    --------
    >>> import tempfile; p = Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
    >>> file_digest(p)[:16]
    'ba7816bf8f01cfea'
    """
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, res: Resource, url: str) -> None:
    """Raise ChecksumError (after deleting `path`) unless it matches what `res` records; warn if nothing is."""
    actual_size = path.stat().st_size
    problem = None
    if res.size is not None and actual_size != res.size:
        problem = f"is {actual_size} bytes, expected {res.size}"
    elif res.sha256:
        digest = file_digest(path, "sha256")
        if digest != res.sha256.lower():
            problem = f"has SHA-256 {digest}, expected {res.sha256}"
    elif res.md5:
        digest = file_digest(path, "md5")
        if digest != res.md5.lower():
            problem = f"has MD5 {digest}, expected {res.md5} (the published checksum)"
    if problem is not None:
        path.unlink(missing_ok=True)
        raise ChecksumError(f"loom.data.download: {res.filename} downloaded from {url} {problem}; the file was "
                            "deleted. The mirror may serve a different or damaged file: try again, or download it "
                            "by hand and pass its folder.")
    if not res.sha256 and not res.md5:
        what = f"its size ({res.size} bytes) was" if res.size is not None else "nothing was"
        warnings.warn(f"loom.data.download: {res.filename} from {url} has no published checksum recorded in loom; "
                      f"only {what} checked.", stacklevel=3)


class _Progress:
    """A tqdm bar when tqdm is installed, else a line on stderr every 10%."""

    def __init__(self, total: int | None, initial: int, desc: str, enabled: bool) -> None:
        self.total, self.done, self.desc, self.enabled = total, initial, desc, enabled
        self.bar = None
        self.next_mark = 0.1
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            print(f"{desc}: downloading {_fmt_bytes(total) if total else 'unknown size'}"
                  f"{f', resuming at {_fmt_bytes(initial)}' if initial else ''}", file=sys.stderr, flush=True)
            return
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                        dynamic_ncols=True, leave=False)

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
        elif self.total and self.done >= self.next_mark * self.total:
            print(f"{self.desc}: {100 * self.done // self.total}% of {_fmt_bytes(self.total)}", file=sys.stderr,
                  flush=True)
            while self.next_mark * self.total <= self.done:
                self.next_mark += 0.1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "? B"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _transfer(url: str, part: Path, timeout: float, progress: bool, desc: str, chunk_size: int) -> None:
    """Append the rest of `url` to `part`, asking for the bytes past its current length (HTTP Range)."""
    import urllib.error
    import urllib.request  # Here, not at the top: with http.client and ssl it would add 15 ms to `import loom`.
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "loom-data/1"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # Nothing past what we have: the part file is complete.
            return
        raise
    with response:
        status = getattr(response, "status", 200)
        if have and status != 206:  # The server ignored the Range header: start again.
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        bar = _Progress(total, have, desc, progress)
        try:
            with open(part, "ab" if have else "wb") as f:
                while chunk := response.read(chunk_size):
                    f.write(chunk)
                    bar.update(len(chunk))
        finally:
            bar.close()
    if total is not None and part.stat().st_size < total:
        raise DownloadError(f"the transfer ended after {part.stat().st_size} of {total} bytes")


def download(res: Resource, folder: str | os.PathLike, progress: bool = True, timeout: float = 30.0,
             retries: int = 2, chunk_size: int = 1 << 16) -> Path:
    """Download `res` into `folder` (resuming a `.part` file, checking, renaming atomically); return its path.

    Each URL is tried in turn; a transfer that breaks off is retried up to
    `retries` times, each retry resuming where the last one stopped. A
    file already in `folder` under its final name is returned with no request.

    Raises
    ------
    ChecksumError
        The last URL served a file with the wrong size or checksum (deleted).
    DownloadError
        No URL could be fetched; the message lists each URL and its error.

    Examples
    --------
    >>> download(Resource("input.txt", ("https://example.org/input.txt",)), "/tmp/data")  # doctest: +SKIP
    PosixPath('/tmp/data/input.txt')
    """
    folder = Path(folder).expanduser()
    target = folder / res.filename
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with _lock(folder / ".loom-download.lock"):
        if target.is_file():  # Another process finished it while we waited for the lock.
            return target
        return _download_locked(res, folder, target, progress, timeout, retries, chunk_size)


@contextlib.contextmanager
def _lock(path: Path):
    """An exclusive flock on `path`, so two processes never write one `.part` file (a no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download_locked(res: Resource, folder: Path, target: Path, progress: bool, timeout: float, retries: int,
                     chunk_size: int) -> Path:
    import http.client
    import urllib.error

    part = folder / (res.filename + ".part")
    failures: list[str] = []
    last: Exception | None = None
    for url in res.urls:
        for attempt in range(retries + 1):
            resumed = part.exists()
            try:
                _transfer(url, part, timeout, progress, res.filename, chunk_size)
                _verify(part, res, url)
                os.replace(part, target)
                return target
            except ChecksumError as e:
                last = e
                if resumed and attempt < retries:  # The kept bytes may be stale: once more from the start.
                    continue
                failures.append(f"{url}: {e}")
                break
            except (OSError, http.client.HTTPException, DownloadError, ValueError) as e:  # URLError is an OSError.
                last = e
                # No answer at all (name, refused connection, HTTP error) goes to the next mirror; a transfer
                # that broke off is resumed.
                unreachable = isinstance(e, urllib.error.URLError)
                if attempt == retries or unreachable:
                    failures.append(f"{url}: {_reason(e)}")
                    break
                time.sleep(min(0.2 * (attempt + 1), 1.0))
    kind = ChecksumError if isinstance(last, ChecksumError) and len(failures) == 1 else DownloadError
    raise kind(f"loom.data.download: could not download {res.filename} into {folder}:\n  "
               + "\n  ".join(failures))


def _reason(e: Exception) -> str:
    import urllib.error

    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"{e.reason}"
    return f"{type(e).__name__}: {e}"


def fetch(res: Resource, candidates: Iterable[str | os.PathLike], download_to: str | os.PathLike | None,
          what: str, hint: str = "", progress: bool = True) -> Path:
    """The first existing file among `candidates`, else `res` downloaded into `download_to` (None: no download).

    Local copies are used as they are (they may be repackaged, as Debian's
    Fashion-MNIST is, so their checksums are not compared); only downloads
    are verified.

    Raises
    ------
    LoomFileNotFoundError
        Neither worked. The message names `what`, every path looked at, the
        URLs (and why each download failed), and `hint`.

    Examples
    --------
    >>> res = Resource("input.txt", ("https://example.org/input.txt",))
    >>> fetch(res, ["/nonexistent/input.txt"], None, "the text")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    loom.data.errors.LoomFileNotFoundError: loom.data: the text (input.txt) not found. Looked at:...
    """
    tried = [Path(c).expanduser() for c in candidates]
    for path in tried:
        if path.is_file():
            return path
    looked = "\n  ".join(str(p) for p in tried) or "(no local path)"
    if download_to is None:
        raise LoomFileNotFoundError(
            f"loom.data: {what} ({res.filename}) not found. Looked at:\n  {looked}\nPass download=True to fetch it "
            f"from {res.urls[0]}.{chr(10) + hint if hint else ''}")
    try:
        return download(res, download_to, progress=progress)
    except (DownloadError, OSError) as e:  # OSError: the folder cannot be written.
        raise LoomFileNotFoundError(
            f"loom.data: {what} ({res.filename}) not found and the download failed. Looked at:\n  {looked}\n"
            f"Download: {e}{chr(10) + hint if hint else ''}") from e


"""`torch.hub`: models published by a `hubconf.py`, from a local directory or the hub cache.

A hub repository is a directory with a `hubconf.py` whose public callables are
the entrypoints (`list` names them, `help` shows their docstrings, `load` calls
one). `source="local"` reads a directory directly; `source="github"` reads
`owner/repo[:ref]` from the cache (`get_dir()/owner_repo_ref`, PyTorch's
layout, so a repository PyTorch downloaded is found). Weights come through
`load_state_dict_from_url`, which reads `get_dir()/checkpoints/<file name>`
when present. Downloads use `urllib` (`file://` URLs work offline); when the
network cannot be reached, the error says which file to put where.

Examples
--------
>>> import os, tempfile
>>> import loom.torch as torch
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "hubconf.py"), "w") as f:
...     _ = f.write("import loom\\ndef tiny(n=2):\\n    '''A Linear(n, 1).'''\\n    return loom.nn.Linear(n, 1)\\n")
>>> torch.hub.list(d, source="local")
['tiny']
>>> torch.hub.load(d, "tiny", source="local", n=3).in_features
3
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from loom.errors import LoomError, LoomValueError

__all__ = ["load", "list", "help", "get_dir", "set_dir", "load_state_dict_from_url", "download_url_to_file"]

ENV_TORCH_HOME = "TORCH_HOME"
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"
DEFAULT_CACHE_DIR = "~/.cache"
MODULE_HUBCONF = "hubconf.py"
VAR_DEPENDENCY = "dependencies"
HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")

_hub_dir: str | None = None
_builtin_list = list


def get_dir() -> str:
    """The hub cache directory: the one `set_dir` chose, else `$TORCH_HOME/hub`, else `~/.cache/torch/hub`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.hub.get_dir().endswith("hub")
    True
    """
    if _hub_dir is not None:
        return _hub_dir
    home = os.path.expanduser(os.getenv(ENV_TORCH_HOME, os.path.join(os.getenv(ENV_XDG_CACHE_HOME, DEFAULT_CACHE_DIR),
                                                                       "torch")))
    return os.path.join(home, "hub")


def set_dir(d: str | os.PathLike) -> None:
    """Make `d` the hub cache directory (for repositories and `checkpoints/`).

    Examples
    --------
    >>> import loom.torch as torch
    >>> old = torch.hub.get_dir()
    >>> torch.hub.set_dir("/tmp/my_hub"); torch.hub.get_dir()
    '/tmp/my_hub'
    >>> torch.hub.set_dir(old)
    """
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


def _parse_repo(github: str) -> tuple[str, str, str | None]:
    repo, _, ref = github.partition(":")
    owner, slash, name = repo.partition("/")
    if not slash or not owner or not name:
        raise LoomValueError(f"loom.torch.hub: expected a GitHub repository as 'owner/repo[:ref]', got {github!r}")
    return owner, name, ref or None


def _repo_dir(repo_or_dir: str, source: str, force_reload: bool) -> str:
    if source not in ("github", "local"):
        raise LoomValueError(f'loom.torch.hub: unknown source "{source}"; allowed values are "github" and "local"')
    if source == "local":
        if not os.path.isdir(repo_or_dir):
            raise LoomValueError(f"loom.torch.hub: {repo_or_dir!r} is not a directory (source='local')")
        return repo_or_dir
    owner, name, ref = _parse_repo(repo_or_dir)
    hub = get_dir()
    refs = [ref] if ref else ["main", "master"]
    if not force_reload:
        for r in refs:
            path = os.path.join(hub, "_".join([owner, name, r.replace("/", "_")]))
            if os.path.isdir(path):
                return path
    wanted = os.path.join(hub, "_".join([owner, name, refs[0].replace("/", "_")]))
    raise LoomError(f"loom.torch.hub: {repo_or_dir!r} is not in the hub cache and loom does not download "
                    f"repositories{' (force_reload=True)' if force_reload else ''}; clone it to {wanted!r} "
                    f"(or pass its directory with source='local')")


def _import_hubconf(repo_dir: str):
    path = os.path.join(repo_dir, MODULE_HUBCONF)
    if not os.path.isfile(path):
        raise LoomError(f"loom.torch.hub: {repo_dir!r} has no {MODULE_HUBCONF}")
    name = f"loom_hubconf_{abs(hash(os.path.abspath(repo_dir)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_dir)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_dir)
    missing = [d for d in getattr(module, VAR_DEPENDENCY, []) if importlib.util.find_spec(d) is None]
    if missing:
        raise LoomError(f"loom.torch.hub: missing dependencies of {path}: {', '.join(missing)}")
    return module


def _entry(module, model: str):
    fn = getattr(module, model, None) if isinstance(model, str) and not model.startswith("_") else None
    if not callable(fn):
        raise LoomError(f"loom.torch.hub: cannot find callable {model!r} in hubconf "
                        f"(entrypoints: {_entrypoints(module)})")
    return fn


def _entrypoints(module) -> _builtin_list:
    return [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))
            and getattr(getattr(module, n), "__module__", None) == module.__name__]


def list(github: str, force_reload: bool = False, skip_validation: bool = False, trust_repo=None,  # noqa: A001
         verbose: bool = True, source: str = "github") -> _builtin_list:
    """The entrypoints of a hub repository's `hubconf.py`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.hub.list("nobody/nothing")
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.torch.hub: 'nobody/nothing' is not in the hub cache ...
    """
    return _entrypoints(_import_hubconf(_repo_dir(github, source, force_reload)))


def help(github: str, model: str, force_reload: bool = False, skip_validation: bool = False,  # noqa: A001
         trust_repo=None, source: str = "github") -> str:
    """The docstring of entrypoint `model`.

    Examples
    --------
    >>> import os, tempfile
    >>> import loom.torch as torch
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "hubconf.py"), "w") as f:
    ...     _ = f.write("def net():\\n    '''Builds the net.'''\\n")
    >>> torch.hub.help(d, "net", source="local")
    'Builds the net.'
    """
    return _entry(_import_hubconf(_repo_dir(github, source, force_reload)), model).__doc__


def load(repo_or_dir: str, model: str, *args, source: str = "github", trust_repo=None, force_reload: bool = False,
         verbose: bool = True, skip_validation: bool = False, **kwargs) -> Any:
    """Call entrypoint `model` of a hub repository with `args` and `kwargs` (see the module's example).

    Examples
    --------
    >>> import os, tempfile
    >>> import loom.torch as torch
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "hubconf.py"), "w") as f:
    ...     _ = f.write("def double(x):\\n    return 2 * x\\n")
    >>> torch.hub.load(d, "double", 21, source="local")
    42
    """
    return _entry(_import_hubconf(_repo_dir(repo_or_dir, source, force_reload)), model)(*args, **kwargs)


def download_url_to_file(url: str, dst: str, hash_prefix: str | None = None, progress: bool = True) -> None:
    """Download `url` to the file `dst` (through a temporary file), checking the sha256 prefix if given.

    `file://` URLs work offline; an unreachable network raises a LoomError naming the URL and `dst`.

    Examples
    --------
    >>> import os, tempfile, pathlib
    >>> import loom.torch as torch
    >>> src = os.path.join(tempfile.mkdtemp(), "w.bin")
    >>> _ = open(src, "wb").write(b"weights")
    >>> dst = src + ".copy"
    >>> torch.hub.download_url_to_file(pathlib.Path(src).as_uri(), dst)
    >>> open(dst, "rb").read()
    b'weights'
    """
    dst = os.path.expanduser(dst)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(dst)), prefix=".download_")
    digest = hashlib.sha256()
    try:
        try:
            with urllib.request.urlopen(url, timeout=30) as response, os.fdopen(fd, "wb") as out:
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    digest.update(chunk)
                    out.write(chunk)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise LoomError(f"loom.torch.hub: could not download {url} ({e}); this machine may have no network: "
                            f"put the file at {dst!r} yourself") from None
        if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
            raise LoomError(f"loom.torch.hub: invalid hash value of {url} (expected a sha256 starting with "
                            f"{hash_prefix!r}, got {digest.hexdigest()!r})")
        shutil.move(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_state_dict_from_url(url: str, model_dir: str | None = None, map_location=None, progress: bool = True,
                             check_hash: bool = False, file_name: str | None = None,
                             weights_only: bool = False) -> dict[str, Any]:
    """The object saved at `url`, read from `model_dir` (default `get_dir()/checkpoints`) and downloaded there first
    if missing.

    With `check_hash`, the file name's `-<hex>.` part must prefix the file's sha256, as PyTorch.

    Examples
    --------
    >>> import os, tempfile
    >>> import loom.torch as torch
    >>> d = tempfile.mkdtemp()
    >>> torch.save({"w": torch.ones(2)}, os.path.join(d, "net.pt"))
    >>> torch.hub.load_state_dict_from_url("https://example.com/models/net.pt", model_dir=d)["w"].tolist()
    [1.0, 1.0]
    """
    from loom import torch as _torch
    model_dir = os.path.expanduser(model_dir) if model_dir is not None else os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    if not name:
        raise LoomValueError(f"loom.torch.hub.load_state_dict_from_url: {url!r} names no file; pass file_name")
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        prefix = None
        if check_hash:
            m = HASH_REGEX.search(name)
            prefix = m.group(1) if m else None
        download_url_to_file(url, path, prefix, progress=progress)
    return _torch.load(path, map_location=map_location, weights_only=weights_only)

"""Distributed checkpoints: every rank writes its own shard file, rank 0 writes one manifest last.

The interface is ``torch.distributed.checkpoint``'s (`save`, `load` in
place), plus `read` (everything a checkpoint holds, as a nested dict) and
`latest` (the newest complete checkpoint under a folder).

A checkpoint is a folder::

    step-000100/
        rank-00000-of-00002.safetensors   # the entries rank 0 owns (loom.save format, checksummed)
        rank-00001-of-00002.safetensors
        manifest.json                     # written last, atomically, by rank 0

The state is a nested dict (model ``state_dict()``, optimizer state, step
counters, random states). Its leaves are flattened to ``/``-joined keys
(``model/fc.weight``, ``optim/state/3/exp_avg``, ``optim/param_groups/#0/lr``
for an element of a list); int dict keys come back as ints. A key that several ranks
hold (replicated state, such as data-parallel weights) is written once, by
the lowest rank that holds it; a key only one rank holds (a ZeRO optimizer
shard, a per-rank random state saved under a rank-specific key) is written
by that rank. So the files together hold every key exactly once, and a
checkpoint written by N ranks loads on any number of ranks: each rank reads
the keys it needs from whichever file has them (the folder must be visible
to every rank, as a shared or local file system on one machine is).

Every file is written atomically (temporary file, fsync, rename). The
manifest, which lists every key with its file, shape and dtype, is written
only after every rank has finished writing, so a save killed part way leaves
a folder without a manifest: `load`, `read` and `latest` never take it for a
checkpoint.

Examples
--------
.. code-block:: python

    import loom.distributed.checkpoint as dcp

    state = {"model": model.state_dict(), "optim": zero.sharded_state_dict(), "step": step}
    dcp.save(state, f"ckpt/step-{step:06d}")

    path = dcp.latest("ckpt")            # resume, on the same or a different number of ranks
    if path is not None:
        state = dcp.read(path)
        model.load_state_dict(state["model"])
        zero.load_sharded_state_dict(state["optim"])
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable

import numpy as np

from loom.distributed.process_group import DistributedError, is_initialized, resolve
from loom.errors import LoomError
from loom.io import checkpoint as _io

MANIFEST = "manifest.json"
FORMAT = "loom.distributed.checkpoint"
VERSION = 1
_SEP = "/"
_LIST = "#"  # Marks a list position in a key path (``optim/param_groups/#0/lr``).

__all__ = ["save", "load", "read", "latest", "MANIFEST", "FileSystemWriter", "FileSystemReader"]


def _is_tensor(value: Any) -> bool:
    from loom.tensor import Tensor
    return isinstance(value, Tensor)


def _plain(value: Any) -> bool:
    """Whether `value` is a leaf stored as a value (a number, string, None, or a list of such)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def _flatten(state: Any, prefix: str, out: dict[str, Any], op: str) -> None:
    if isinstance(state, dict):
        if not state and prefix:
            out[prefix] = {}
            return
        for k, v in state.items():
            if not isinstance(k, (str, int)) or (isinstance(k, str) and (_SEP in k or k.startswith(_LIST))):
                raise LoomError(f"loom.distributed.checkpoint.{op}: key {k!r} under {prefix or 'the root'!r} must be "
                                f"an int or a str without {_SEP!r} that does not start with {_LIST!r}")
            _flatten(v, f"{prefix}{_SEP}{k}" if prefix else str(k), out, op)
        return
    if _is_tensor(state) or _plain(state):
        if not prefix:
            raise LoomError(f"loom.distributed.checkpoint.{op}: the state must be a dict, got {type(state).__name__}")
        out[prefix] = state
        return
    if isinstance(state, (list, tuple)):
        for k, v in enumerate(state):
            _flatten(v, f"{prefix}{_SEP}{_LIST}{k}", out, op)
        if not state:
            out[prefix] = []
        return
    raise LoomError(f"loom.distributed.checkpoint.{op}: cannot store {type(state).__name__} at {prefix!r}; "
                    "expected tensors, numbers, strings, None, and dicts/lists of them")


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(_SEP)
        node = root
        for p in parts[:-1]:
            node = node.setdefault(_key(p), {})
        node[_key(parts[-1])] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    """Turn the dicts that hold list elements (keys ``#0``, ``#1``, ...) back into lists."""
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and all(isinstance(k, str) and k.startswith(_LIST) for k in items):
        return [items[k] for k in sorted(items, key=lambda k: int(k[len(_LIST):]))]
    return items


def _key(part: str) -> Any:
    """A path part back as a dict key: ints were written as digits; list positions keep their marker."""
    return int(part) if re.fullmatch(r"-?\d+", part) else part


def _group(process_group, op: str):
    if not is_initialized():
        return None  # One process: it owns everything.
    g = resolve(process_group, f"checkpoint.{op}")
    if g is None:
        raise DistributedError(f"loom.distributed.checkpoint.{op}: this process is not in the given group")
    return g


class FileSystemWriter:
    """Where `save` writes, as ``torch.distributed.checkpoint.FileSystemWriter``: a folder (PyTorch's tuning
    options are accepted and have no effect here)."""

    def __init__(self, path: str | os.PathLike, **options: Any) -> None:
        self.path = os.fspath(path)


class FileSystemReader:
    """Where `load` reads, as ``torch.distributed.checkpoint.FileSystemReader``: a folder."""

    def __init__(self, path: str | os.PathLike, **options: Any) -> None:
        self.path = os.fspath(path)


def _folder(checkpoint_id, storage: Any, kind: Any, op: str) -> str:
    """The checkpoint's folder, from `checkpoint_id` or PyTorch's storage writer/reader argument."""
    if storage is not None:
        if not isinstance(storage, kind):
            raise LoomError(f"loom.distributed.checkpoint.{op}: storage_{'writer' if op == 'save' else 'reader'} "
                            f"must be a loom.distributed.checkpoint.{kind.__name__}, got {type(storage).__name__}")
        if checkpoint_id is not None and os.fspath(checkpoint_id) != storage.path:
            raise LoomError(f"loom.distributed.checkpoint.{op}: checkpoint_id {os.fspath(checkpoint_id)!r} and the "
                            f"{kind.__name__}'s path {storage.path!r} differ; give one of them")
        return storage.path
    if checkpoint_id is None:
        raise LoomError(f"loom.distributed.checkpoint.{op}: say where the checkpoint is: checkpoint_id=FOLDER (or "
                        f"storage_{'writer' if op == 'save' else 'reader'}={kind.__name__}(FOLDER))")
    return os.fspath(checkpoint_id)


def _no_planner(planner, op: str) -> None:
    if planner is not None:
        raise LoomError(f"loom.distributed.checkpoint.{op}: custom planners are not supported (got "
                        f"{type(planner).__name__}); leave planner=None")


def _file_name(rank: int, size: int) -> str:
    return f"rank-{rank:05d}-of-{size:05d}.safetensors"


def save(state_dict: dict, checkpoint_id: str | os.PathLike | None = None, process_group=None, *,
         storage_writer: FileSystemWriter | None = None, planner=None, no_dist: bool = False) -> None:
    """Write `state_dict` to the folder `checkpoint_id`: one file per rank, then the manifest (collective).

    Every rank of the group must call it with the same folder. Keys held by
    several ranks are written once (by the lowest such rank); keys held by
    one rank are written by it. The manifest is written after every rank's
    file is complete, so an interrupted save is never read as a checkpoint.
    Saving over an existing checkpoint first removes its manifest.

    Parameters
    ----------
    state_dict : dict
        Nested dicts/lists of tensors, numbers, strings and None.
    checkpoint_id : path
        The checkpoint's folder (created if missing); or give
        ``storage_writer=FileSystemWriter(folder)``, as in PyTorch.
    process_group : ProcessGroup, optional
        The ranks that save together (default: all; without an initialised
        process group, or with ``no_dist=True``, this process alone).

    Examples
    --------
    >>> import loom, tempfile, os
    >>> import loom.distributed.checkpoint as dcp
    >>> d = os.path.join(tempfile.mkdtemp(), "step-1")
    >>> dcp.save({"w": loom.ones(2), "step": 1}, d)
    >>> dcp.read(d)["step"]
    1
    """
    folder = _folder(checkpoint_id, storage_writer, FileSystemWriter, "save")
    _no_planner(planner, "save")
    flat: dict[str, Any] = {}
    _flatten(state_dict, "", flat, "save")
    g = None if no_dist else _group(process_group, "save")
    rank, size = (g.rank(), g.size()) if g is not None else (0, 1)
    if rank == 0:
        os.makedirs(folder, exist_ok=True)
        manifest = os.path.join(folder, MANIFEST)
        if os.path.exists(manifest):
            os.unlink(manifest)  # From here on the folder is not a checkpoint until the new manifest lands.
    keys = sorted(flat)
    all_keys = g._comm.allgather(keys) if g is not None else [keys]  # Also: rank 0 has made the folder.
    owner: dict[str, int] = {}
    for r, ks in enumerate(all_keys):
        for k in ks:
            owner.setdefault(k, r)
    mine = {k: flat[k] for k in keys if owner[k] == rank}
    name = _file_name(rank, size)
    entries: dict[str, dict] = {}
    error = None
    try:
        for k, v in mine.items():
            if _is_tensor(v):
                entries[k] = {"file": name, "kind": "tensor", "shape": list(v.shape), "dtype": v.dtype.name}
            else:
                entries[k] = {"file": name, "kind": "value"}
        _io.save({"format": FORMAT, "rank": rank, "world_size": size,
                  "entries": {str(i): v for i, v in enumerate(mine.values())}, "keys": list(mine)},
                 os.path.join(folder, name))
    except Exception as e:  # Every rank must learn of it, or the others would wait forever.
        error = f"rank {rank}: {type(e).__name__}: {e}"
    gathered = g._comm.gather((entries, error), root=0) if g is not None else [(entries, error)]
    failure = None
    if rank == 0:
        errors = [err for _, err in gathered if err]
        if errors:
            failure = "; ".join(errors)
        else:
            merged: dict[str, dict] = {}
            for ents, _ in gathered:
                merged.update(ents)
            doc = {"format": FORMAT, "version": VERSION, "world_size": size,
                   "files": [_file_name(r, size) for r in range(size)], "entries": merged}
            try:
                text = json.dumps(doc, indent=1, sort_keys=True).encode()
                _io.atomic_write(os.path.join(folder, MANIFEST), lambda f: f.write(text),
                                 "loom.distributed.checkpoint.save")
            except Exception as e:
                failure = f"rank 0 writing the manifest: {type(e).__name__}: {e}"
    if g is not None:
        failure = g._comm.bcast(failure, root=0)
    if failure:
        raise DistributedError(f"loom.distributed.checkpoint.save: the checkpoint {folder!r} was not written "
                               f"(no manifest): {failure}")


def _manifest(folder: str, op: str) -> dict:
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise LoomError(f"loom.distributed.checkpoint.{op}: no checkpoint folder {folder!r}")
    if not os.path.exists(path):
        raise LoomError(f"loom.distributed.checkpoint.{op}: {folder!r} has no {MANIFEST}, so it is not a complete "
                        "checkpoint (a save was interrupted, or this is not a loom distributed checkpoint)")
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise LoomError(f"loom.distributed.checkpoint.{op}: cannot read {path!r}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("entries"), dict):
        raise LoomError(f"loom.distributed.checkpoint.{op}: {path!r} is not a loom distributed checkpoint manifest")
    if doc.get("version", 0) > VERSION:
        raise LoomError(f"loom.distributed.checkpoint.{op}: {path!r} has format version {doc.get('version')}; this "
                        f"loom reads up to {VERSION}")
    return doc


class _Files:
    """Rank files of one checkpoint, each loaded (and checksum-verified) once, on first use."""

    def __init__(self, folder: str, op: str):
        self.folder, self.op = folder, op
        self._cache: dict[str, dict[str, Any]] = {}

    def value(self, key: str, entry: dict) -> Any:
        name = entry["file"]
        if name not in self._cache:
            path = os.path.join(self.folder, name)
            if not os.path.exists(path):
                raise LoomError(f"loom.distributed.checkpoint.{self.op}: {path!r} is missing; the manifest lists it "
                                f"for key {key!r}")
            doc = _io.load(path)
            self._cache[name] = {k: doc["entries"][str(i)] for i, k in enumerate(doc["keys"])}
        values = self._cache[name]
        if key not in values:
            raise LoomError(f"loom.distributed.checkpoint.{self.op}: {name} does not hold key {key!r} that the "
                            "manifest lists for it (the folder mixes files of different saves)")
        return values[key]


def read(checkpoint_id: str | os.PathLike, keys: Callable[[str], bool] | None = None) -> dict:
    """Everything the checkpoint holds (or the keys `keys` accepts), as a nested dict; no collective.

    Parameters
    ----------
    checkpoint_id : path
        A checkpoint folder written by `save`.
    keys : callable, optional
        ``keys(flat_key) -> bool`` picks which ``/``-joined keys to read, so a
        rank reads only the files that hold what it needs.

    Examples
    --------
    >>> import loom, tempfile, os
    >>> import loom.distributed.checkpoint as dcp
    >>> d = os.path.join(tempfile.mkdtemp(), "c")
    >>> dcp.save({"model": {"w": loom.zeros(2)}, "step": 7}, d)
    >>> sorted(dcp.read(d)), dcp.read(d, keys=lambda k: k == "step")
    (['model', 'step'], {'step': 7})
    """
    folder = os.fspath(checkpoint_id)
    doc = _manifest(folder, "read")
    files = _Files(folder, "read")
    flat = {k: files.value(k, e) for k, e in doc["entries"].items() if keys is None or keys(k)}
    return _unflatten(flat)


def load(state_dict: dict, checkpoint_id: str | os.PathLike | None = None, process_group=None, *,
         storage_reader: FileSystemReader | None = None, planner=None, no_dist: bool = False) -> dict:
    """Fill `state_dict` from the checkpoint, in place, as ``torch.distributed.checkpoint.load`` does.

    Every key of `state_dict` must be in the checkpoint. Tensors are
    overwritten in place (same shape; the value is cast to the tensor's
    dtype); other leaves are replaced in their dict or list. Each rank reads
    only the files holding its keys, so a checkpoint saved by any number of
    ranks loads on any other number. Returns `state_dict`.

    Examples
    --------
    >>> import loom, tempfile, os
    >>> import loom.distributed.checkpoint as dcp
    >>> d = os.path.join(tempfile.mkdtemp(), "c")
    >>> dcp.save({"w": loom.full((2,), 3.0), "step": 5}, d)
    >>> state = {"w": loom.zeros(2), "step": 0}
    >>> dcp.load(state, d)["w"].tolist(), state["step"]
    ([3.0, 3.0], 5)
    """
    from loom.autograd.grad_mode import no_grad
    from loom.tensor import tensor as _tensor

    folder = _folder(checkpoint_id, storage_reader, FileSystemReader, "load")
    _no_planner(planner, "load")
    if not no_dist:
        _group(process_group, "load")  # Raises for a process outside the group; no communication needed.
    doc = _manifest(folder, "load")
    files = _Files(folder, "load")
    flat: dict[str, Any] = {}
    _flatten(state_dict, "", flat, "load")
    missing = [k for k in flat if k not in doc["entries"]]
    if missing:
        raise LoomError(f"loom.distributed.checkpoint.load: {len(missing)} key(s) of the state are not in {folder!r}, "
                        f"e.g. {missing[:3]}; it holds {len(doc['entries'])} keys")
    for key, want in flat.items():
        got = files.value(key, doc["entries"][key])
        if _is_tensor(want):
            if not _is_tensor(got):
                raise LoomError(f"loom.distributed.checkpoint.load: key {key!r} is a tensor in the state but a "
                                f"{type(got).__name__} in the checkpoint")
            if tuple(got.shape) != tuple(want.shape):
                raise LoomError(f"loom.distributed.checkpoint.load: key {key!r} has shape {list(got.shape)} in the "
                                f"checkpoint and {list(want.shape)} in the state")
            with no_grad():
                want.copy_(_tensor(np.asarray(got.numpy()), dtype=got.dtype).to(want.dtype))
        else:
            _assign(state_dict, key, got)
    return state_dict


def _assign(root: Any, key: str, value: Any) -> None:
    parts = key.split(_SEP)
    node = root
    for p in parts[:-1]:
        node = node[_key(p)] if isinstance(node, dict) else node[int(p[len(_LIST):])]
    last = parts[-1]
    if isinstance(node, dict):
        node[_key(last) if _key(last) in node else last] = value
    else:
        node[int(last[len(_LIST):])] = value


def latest(root: str | os.PathLike) -> str | None:
    """The newest complete checkpoint folder directly under `root` (by name), or None.

    Folders without a manifest (interrupted saves) are skipped. Name the
    folders so that they sort by step (``step-000100``).

    Examples
    --------
    >>> import loom, tempfile, os
    >>> import loom.distributed.checkpoint as dcp
    >>> root = tempfile.mkdtemp()
    >>> for s in (1, 2):
    ...     dcp.save({"step": s}, os.path.join(root, f"step-{s:06d}"))
    >>> os.makedirs(os.path.join(root, "step-000003"))      # an interrupted save
    >>> os.path.basename(dcp.latest(root))
    'step-000002'
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        return None
    done = [d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, MANIFEST))]
    return os.path.join(root, max(done)) if done else None

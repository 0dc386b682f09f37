"""The error type of `loom.distributed`, below every module of the package so each can raise it."""
from __future__ import annotations

from loom.errors import LoomError


class DistributedError(LoomError):
    """A misuse of `loom.distributed` (no process group, wrong rank, unsupported backend) or a failed launch."""

"""Execution: the reference interpreter, compiled executables, thread policy and the actor runtime.

`Plan` / `pipeline` run tasks on decentralised actors with bounded registers
(see `loom.runtime.actors`); `status()` says what every live actor is doing.
"""
from loom.runtime.actors import ActorError, Plan, pipeline, status, status_text

__all__ = ["Plan", "pipeline", "status", "status_text", "ActorError"]

"""The v3 bridge: what protocol 3 peers may still say and must still be answered. No I/O.

A v3 request may name a runtime by ``runtime_id``, the old spelling of ``worker_instance_id``;
a v4 request that does is refused (``unknown_field``). v3 session summaries carry
``runtime.runtime_id`` beside ``runtime.worker_instance_id``, in every result that is a
summary (``session.list`` included); other results keep one shape. The bridge goes when
protocol 3 leaves the window.
"""

from __future__ import annotations

from typing import Any

from shared.operator.protocol import BRIDGED_VERSION
from shared.protocol import Code, RemoteError


def arguments(version: int, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` in the v4 spelling; ``runtime_id`` is accepted from a v3 caller only."""
    if "runtime_id" not in args:
        return args
    if version != BRIDGED_VERSION:
        raise RemoteError(
            Code.UNKNOWN_FIELD,
            f"protocol {version} takes no argument 'runtime_id': it is worker_instance_id",
            detail={"field": "runtime_id"},
        )
    bridged = dict(args)
    runtime_id = bridged.pop("runtime_id")
    if bridged.get("worker_instance_id", runtime_id) != runtime_id:
        raise RemoteError(
            Code.INVALID_FIELD,
            "runtime_id and worker_instance_id name different runtimes",
            detail={"field": "runtime_id"},
        )
    bridged["worker_instance_id"] = runtime_id
    return bridged


def summary(version: int, session: dict[str, Any]) -> dict[str, Any]:
    """A session summary as a caller of ``version`` reads it."""
    runtime = session.get("runtime")
    if version != BRIDGED_VERSION or not isinstance(runtime, dict) or "worker_instance_id" not in runtime:
        return session
    return {**session, "runtime": {**runtime, "runtime_id": runtime["worker_instance_id"]}}

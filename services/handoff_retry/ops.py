"""The handoff retry worker's control protocol. Light on purpose (no trio, no zmq).

- ``status`` → ``{"records": [public views, newest first], "pid", "code_sha", "next_tick"}``.
- ``handoff_status {since, wait?}`` → ``{"records", "updated_at"}``, answered as soon as a
  record's ``updated_at`` is later than ``since`` (the long-poll a desktop uses while a move
  is still retrying), or when ``wait`` seconds (at most 60) have passed.
- ``drain`` → ``{"attempted": [...], "records": [...]}``: run every due record now.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec, Remote

SERVICE = "handoff_retry"
MAX_WAIT = 60.0

STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
HANDOFF_STATUS = OpSpec(
    "handoff_status",
    {"since": Field(float, min=0), "wait": Field(float, required=False, min=0, max=MAX_WAIT)},
    idempotent=True,
    timeout=MAX_WAIT + 5,
    remote=Remote.ALLOWED,
)
DRAIN = OpSpec("drain", timeout=30.0, remote=Remote.WITH_GRANT)

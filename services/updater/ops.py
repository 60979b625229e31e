"""The updater's control protocol (light: the CLI imports it).

- ``follow {from?}`` streams the run's progress events (``{"seq", "stage", "status",
  "detail"?, "at"}``) from event ``from`` on, then answers with the outcome:
  ``{"update_id", "outcome", "exit_code", "receipt"}`` (the receipt file's path).
- ``status`` → ``{"update_id", "pid", "stage", "outcome"}``.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec, Remote

SERVICE = "updater"
MAX_RUN_SECONDS = 3600.0

FOLLOW = OpSpec(
    "follow",
    {"from": Field(int, required=False, min=0)},
    idempotent=True,
    streaming=True,
    timeout=MAX_RUN_SECONDS,
    remote=Remote.ALLOWED,
)
STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)

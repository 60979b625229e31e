"""The simulator's own ops, beside the daemon's ``report`` (``shared.operator_daemon``).

- ``records`` → ``{"records": [...]}``: what it accepted, oldest first.
- ``configure {delay?, fail?}``: answer each report after ``delay`` seconds, and fail the
  next ``fail`` reports.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec

RECORDS = OpSpec("records", idempotent=True, timeout=5.0)
CONFIGURE = OpSpec(
    "configure",
    {"delay": Field(float, required=False, min=0, max=60), "fail": Field(int, required=False, min=0, max=1_000_000)},
    timeout=5.0,
)

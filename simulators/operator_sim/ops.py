"""The simulator's own ops, beside the daemon's (``shared.operator.protocol``): what tests and
the demo use to look inside it and to make it fail on purpose.

- ``sim.records`` → ``{"records": [...]}``: the lifecycle reports it received, oldest first.
- ``sim.counters`` → ``{"ops": {op: n}, "session_new_by_name": {name: n}}``: what it received,
  so a test can prove that a start was asked for exactly once.
- ``sim.configure {…}`` → the faults now in force:
  ``slow_ms`` (every daemon op waits this long first), ``fail_next`` (the next N daemon ops
  answer ``daemon_failing``), ``start_reply_delay_ms`` (a start creates and launches its session,
  then holds its reply back), ``start_drop`` (the next N starts are accepted and nothing is
  created), ``start_runtime_delay_ms`` (a start answers at once; its runtime goes live later),
  ``hosts_down`` (these hosts answer ``host_unreachable``), ``retain_bytes`` (how much output each
  runtime keeps, from now on).
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec, Remote

_MS = Field(int, required=False, min=0, max=600_000)

SIM_RECORDS = OpSpec("sim.records", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
SIM_COUNTERS = OpSpec("sim.counters", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
SIM_CONFIGURE = OpSpec(
    "sim.configure",
    {
        "slow_ms": _MS,
        "fail_next": Field(int, required=False, min=0, max=1_000_000),
        "start_reply_delay_ms": _MS,
        "start_drop": Field(int, required=False, min=0, max=1000),
        "start_runtime_delay_ms": _MS,
        "hosts_down": Field(list, required=False, max_len=64),
        "retain_bytes": Field(int, required=False, min=64, max=64 << 20),
    },
    timeout=5.0,
    remote=Remote.WITH_GRANT,
)

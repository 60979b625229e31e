"""The hook reporter's control protocol. Light on purpose (no trio, no zmq).

- ``status`` → ``{"received", "forwarded", "dropped": {reason: n}, "queued", "daemon", "pid"}``.
- ``check`` → ``{"daemon": {"configured", "reachable", "error"?}}``: a payload-free dry run
  for ``hermes operator doctor`` (it asks the daemon for nothing but a hello).

Reports themselves do not come through here: they arrive on the intake (a PULL socket beside
the control socket), one frame each, never answered.
"""

from __future__ import annotations

from shared.protocol import OpSpec, Remote

SERVICE = "hook_reporter"

STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
CHECK = OpSpec("check", idempotent=True, timeout=10.0, remote=Remote.ALLOWED)

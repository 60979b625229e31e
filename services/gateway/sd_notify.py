"""systemd's readiness protocol (``Type=notify``): datagrams to ``$NOTIFY_SOCKET``.

A no-op when the variable is not set, so every service can call it unconditionally.
Sending a datagram to a local socket never blocks for long; a failure is logged, never
raised, because a supervisor's bookkeeping must not take the service down.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

# The longest one slow step of a start (imports, locks, config, binding) may take on a loaded
# machine before it says it moved on: each step extends systemd's start timeout by this.
START_STEP_SECONDS = 30.0


def notify(**fields: str | int) -> bool:
    """Send ``READY=1``-style fields (``notify(READY=1, STATUS="serving")``); True if sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace
        address = "\0" + address[1:]
    message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(1.0)
            sock.sendto(message, address)
    except OSError as exc:
        log.warning("sd_notify to %s failed: %s", address, exc)
        return False
    return True


def starting(step: str, seconds: float = START_STEP_SECONDS) -> bool:
    """Tell systemd a start is progressing (``EXTEND_TIMEOUT_USEC``): ``step`` begins, and the
    next word comes within ``seconds``, so a slow start that moves on is not killed."""
    return notify(EXTEND_TIMEOUT_USEC=round(seconds * 1_000_000), STATUS=f"starting: {step}")

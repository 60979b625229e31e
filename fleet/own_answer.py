"""One gateway's status, asked on its control socket and taken only as the gateway's own.

What a restart waits for is a process: the one the answer names. Over ipc the kernel tells
which process listens at the other end of the connection (``SO_PEERCRED``), so an answer
counts only when its ``pid`` and ``start_time`` are that process's; one relayed or replayed by
another process is no answer. Over TCP the CURVE
handshake has already told that the server holds the gateway's key.
"""

from __future__ import annotations

import logging
from typing import Any

from shared import homes
from shared.gateways import ops
from shared.identity import peer_is
from shared.protocol import RemoteError
from shared.transport import NO_RETRY, call_all_ipc, connect

log = logging.getLogger(__name__)


def own_status(endpoint: homes.Endpoint, timeout: float) -> dict[str, Any] | None:
    """The gateway's status answer, or None when it gave none that is its own."""
    address = endpoint.control
    if address.startswith("ipc://"):
        peers: dict[str, int] = {}
        answer = call_all_ipc([address], ops.STATUS, timeout=timeout, peers=peers)[address]
        if not isinstance(answer, dict):
            return None
        if address in peers and not peer_is(peers[address], answer.get("pid"), answer.get("start_time")):
            log.warning("an answer on %s names pid %s, not the process that sent it", address, answer.get("pid"))
            return None
        return answer
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            answer = client.call(ops.STATUS, timeout=timeout)
    except RemoteError:
        return None
    return answer if isinstance(answer, dict) else None

"""The mesh's transport, behind one face: a ROUTER service and its calls, the blocking client
the CLI uses (over a zmq DEALER, or in process for tests), one call to many ipc services
without pyzmq (``call_all_ipc``, for a CLI command that must start fast), the retry and reply
rules both sides keep, the lossy publisher and a blocking subscriber to it, CURVE (``curve`` the socket
options and the no-plaintext rule, ``curve_keys`` the key store), and how a grant names an op
(``grant_name``: who may call what is ``principals``'s rule).

Only the names in ``__all__`` (with the two CURVE modules) are public; every other module
here is private. A name is imported on first use, not with the package: the CLI's calls must
not pay for trio, which only a service needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.transport.call_rules import (
        DEFAULT_RETRY,
        HANDSHAKE_REFUSALS,
        NO_RETRY,
        RetryPolicy,
        ipc_unreachable,
    )
    from shared.transport.in_process import InProcessTransport
    from shared.transport.principals import grant_name
    from shared.transport.pubsub import Publisher, open_publisher
    from shared.transport.service import HELLO, Call, Service
    from shared.transport.sync_client import SyncClient, answers, call_all, connect, says_hello
    from shared.transport.sync_subscriber import Heard, Liveness, SyncSubscriber, subscribe
    from shared.transport.zmq_trio import open_socket
    from shared.transport.zmtp import call_all_ipc

_HOME = {
    "DEFAULT_RETRY": "call_rules",
    "HANDSHAKE_REFUSALS": "call_rules",
    "NO_RETRY": "call_rules",
    "RetryPolicy": "call_rules",
    "ipc_unreachable": "call_rules",
    "Publisher": "pubsub",
    "open_publisher": "pubsub",
    "HELLO": "service",
    "Call": "service",
    "Service": "service",
    "SyncClient": "sync_client",
    "answers": "sync_client",
    "call_all": "sync_client",
    "call_all_ipc": "zmtp",
    "connect": "sync_client",
    "says_hello": "sync_client",
    "Heard": "sync_subscriber",
    "Liveness": "sync_subscriber",
    "SyncSubscriber": "sync_subscriber",
    "subscribe": "sync_subscriber",
    "InProcessTransport": "in_process",
    "grant_name": "principals",
    "open_socket": "zmq_trio",
}

__all__ = [
    "DEFAULT_RETRY",
    "HANDSHAKE_REFUSALS",
    "HELLO",
    "Heard",
    "InProcessTransport",
    "Liveness",
    "NO_RETRY",
    "Call",
    "Publisher",
    "RetryPolicy",
    "Service",
    "SyncClient",
    "SyncSubscriber",
    "answers",
    "call_all",
    "call_all_ipc",
    "connect",
    "grant_name",
    "curve",
    "curve_keys",
    "ipc_unreachable",
    "open_publisher",
    "open_socket",
    "says_hello",
    "subscribe",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""One operator tool's daemon call, the same for both ways the plugin reaches its daemon: in
process (where this project's packages import, as in our own chat) and through the operator CLI
(``hermes-operator call``, inside a Hermes that has none of them).

It holds the closed set of ops a tool may send, how long one may take (its own timeout, or the
caller's limit, within what is left of the tool's budget), and where the origin markers go. No
I/O but the client's call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.operator import protocol as p
from shared.operator.client import DaemonClient
from shared.operator.policy import Policy, overlap
from shared.operator.protocol import OperatorError
from shared.protocol import OpSpec, RemoteError

# What a tool may send: never a lifecycle report, never the unconfirmed removal.
TOOL_OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        p.HOST_INSPECT,
        p.PROJECT_LIST,
        p.SESSION_LIST,
        p.SESSION_GET,
        p.SESSION_SCREEN,
        p.SESSION_OUTPUT,
        p.SESSION_WAIT,
        p.SESSION_DIFF,
        p.SESSION_NEW,
        p.SESSION_INPUT,
        p.SESSION_RESUME,
        p.SESSION_FORK,
        p.SESSION_RESIZE,
        p.SESSION_RENAME,
        p.SESSION_SET_METADATA,
        p.SESSION_STOP,
        p.SESSION_REMOVE,
    )
}
ORIGIN_FIELD = "origin_session_id"


class CallFailed(OperatorError):
    """The daemon (or the transport) ended the call with ``code``; ``budget_spent`` when the
    call was cut short by the tool's budget rather than by its own timeout."""

    def __init__(self, code: str, *, budget_spent: bool):
        super().__init__(code)
        self.code = code  # the daemon's or the transport's code, forwarded
        self.budget_spent = budget_spent


def call(
    client: DaemonClient,
    op: str,
    args: Mapping[str, Any],
    *,
    budget: float,
    limit: float | None = None,
    origin: Mapping[str, str] | None = None,
) -> Any:
    """The daemon's answer to ``op``; ``budget`` is what is left of the tool's time, ``limit``
    replaces the op's own timeout (a wait's), ``origin`` the markers of the calling session."""
    spec = TOOL_OPS[op]
    own = spec.timeout if limit is None else limit
    timeout = min(own, budget)
    if origin and ORIGIN_FIELD in spec.fields:
        args = {**args, **origin}
    try:
        return client.call(spec, args, timeout=timeout)
    except RemoteError as exc:
        raise CallFailed(exc.code, budget_spent=timeout < own) from None


def window(policy: Policy) -> tuple[int, int] | None:
    """The protocol versions the plugin speaks under ``policy``: its range within the client's."""
    return overlap(policy, p.CLIENT_WINDOW)

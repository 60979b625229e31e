"""The one blocking client of the operator daemon: for the plugin, the hook reporter and the CLI.

It speaks the client window (``CLIENT_WINDOW``, newest first); a daemon outside it fails closed
with ``protocol_incompatible``. Retries follow the daemon's rules, not the mesh's defaults:

- reads are retried after a timeout or a reset, as any idempotent op;
- a mutation is retried once, and only when it carries an ``idempotency_key``: the daemon then
  answers the replay with the first result instead of acting twice;
- ``session.new`` and the lifecycle reports are never retried (the one permitted start).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.operator.protocol import CLIENT_WINDOW, MUTATIONS
from shared.protocol import OpSpec
from shared.transport import DEFAULT_RETRY, NO_RETRY, RetryPolicy, SyncClient

ONE_RETRY = RetryPolicy(retries=1)


def call_rule(spec: OpSpec, args: Mapping[str, Any]) -> tuple[OpSpec, RetryPolicy]:
    """How ``spec`` with ``args`` may be retried (pure, so the rule is tested alone)."""
    if spec.name in MUTATIONS:
        if args.get("idempotency_key"):
            return spec._replace(idempotent=True), ONE_RETRY
        return spec, NO_RETRY
    return spec, DEFAULT_RETRY if spec.idempotent else NO_RETRY


class DaemonClient:
    def __init__(
        self,
        address: str,
        *,
        window: tuple[int, int] = CLIENT_WINDOW,
        options: Iterable[tuple[int, Any]] = (),
    ):
        """``window`` narrows what the caller speaks (a policy written for ``3..=3`` speaks 3)."""
        self.address = address
        self.window = window
        self._client = SyncClient(address, window=window, retry=NO_RETRY, options=options)

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def call(self, spec: OpSpec, args: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """The daemon's answer, or the ``RemoteError`` it (or the transport) ended with."""
        checked = dict(args or {})
        spec, retry = call_rule(spec, checked)
        return self._client.call(spec, checked, timeout=timeout, retry=retry)
